// The C++ Trainable API: what a user implements to be driven by ztune (Ray
// Tune's Trainable, docs/trainables.md). A worker hosts each trial's trainable
// in an actor with its own runner thread.
//
// Thread affinity: every method of one Trainable instance is called on that
// actor's runner thread, one call at a time; an implementation needs no locks
// for its own state. Trainables never see sockets. Methods report failures as
// a Status; an exception escaping a method is caught by the runner (the
// trainable seam) and treated like an error Status.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace ztune::worker {

class TrialLog;
class ProcessGroup;

// What a trainable knows about the trial it serves. Built by the runner before
// each call; plain value apart from the two hooks at the end.
struct TrialContext {
  std::string trial_id;
  uint64_t attempt = 0;
  // The hosting worker's id.
  std::string worker_id;
  // Completed iterations before this call (the Step being run is iteration + 1).
  // For Restore, the iteration the checkpoint was taken at.
  int64_t iteration = 0;
  // <work-dir>/<trial_id>: the trial's directory on this worker (trial.log lives here).
  std::string logdir;
  // GPU device ids assigned to the trial on this worker, and the actor's bundle.
  std::vector<int64_t> gpu_ids;
  std::map<std::string, double> resources;
  // True once the actor was restored from a checkpoint (until a successful reset).
  bool restored = false;

  // Appends `line` to the trial's log file (<logdir>/trial.log). No-op when the
  // context is not wired to a log (e.g. in unit tests).
  void Log(std::string_view line) const;
  // True once the worker has given up waiting for this actor (its STOP deadline
  // passed) or is shutting down: long steps should return early. Results
  // produced after that are discarded.
  bool StopRequested() const;

  // Wiring set by the runner; not owned. Either may be null.
  TrialLog* log_sink = nullptr;
  const std::atomic<bool>* stop_flag = nullptr;
};

class Trainable {
 public:
  virtual ~Trainable() = default;

  // Called once, first. `config` is the trial's config (a JSON object; unknown
  // keys must be tolerated). InvalidArgument naming the key for a bad config.
  virtual Status Setup(const Json& config, const TrialContext& ctx) = 0;

  // Runs one training iteration (number ctx.iteration + 1) and returns a JSON
  // object of metrics. It may set "done": true (the trial is finished) or
  // "should_checkpoint": true (ask the head for a checkpoint now), and
  // "timesteps_this_iter" / "time_this_iter_s". The worker adds the auto-filled
  // fields (training_iteration, time_total_s, ...). An error fails the step.
  virtual Result<Json> Step(const TrialContext& ctx) = 0;

  // Returns the trainable's state as opaque bytes; the worker wraps them in a
  // checkpoint envelope holding the counters (iteration, time, timesteps).
  virtual Result<std::string> Save(const TrialContext& ctx) = 0;

  // Loads state produced by Save of an actor of the same trainable (possibly on
  // another worker). ctx.iteration is the checkpoint's iteration and
  // ctx.restored is true. Corruption / InvalidArgument for bytes it rejects.
  virtual Status Restore(std::string_view bytes, const TrialContext& ctx) = 0;

  // Actor reuse: re-configure for a new trial (ctx names the new trial, with
  // iteration 0). Return false if unsupported; the actor is then unchanged.
  virtual bool ResetConfig(const Json& new_config, const TrialContext& ctx) {
    (void)new_config;
    (void)ctx;
    return false;
  }

  // Called once, last, when the actor stops.
  virtual void Cleanup() {}

  // True when every call of an actor made with `config` returns within
  // microseconds and never blocks (no sleep, no I/O beyond its trial log, no
  // process): the worker then runs the actor on its control thread instead
  // of a runner thread of its own, which saves two thread wake-ups per step
  // (docs/protocol.md "Actors"). A trainable that blocks here stalls the
  // worker's heartbeats and every other actor on it, so only built-in ones
  // that cannot block answer true. Asked on the control thread before Setup,
  // and again with the new config before a RESET (an actor cannot move to a
  // thread later: a RESET to a config that may block is refused).
  virtual bool RunsInline(const Json& config) const {
    (void)config;
    return false;
  }

  // The OS processes behind the trainable, if it runs any (process
  // trainables): when the worker kills the actor (a STOP past its deadline) it
  // signals the group from its control thread, and reports the actor gone
  // only once the group is empty. Called on the control thread before the
  // runner thread starts; the handle itself is thread-safe.
  virtual std::shared_ptr<ProcessGroup> process_group() const { return nullptr; }

  // Exports the model in each requested format: {format: content}. An error
  // (e.g. an unknown format) fails the EXPORT.
  virtual Result<Json> ExportModel(const std::vector<std::string>& formats,
                                   const TrialContext& ctx) {
    (void)formats;
    (void)ctx;
    return Json::object();
  }
};

}  // namespace ztune::worker
