// A trainable that is a program: the worker runs it as a child process per
// actor and turns each Trainable call into one command of the line protocol
// (docs/process-protocol.md). The actor runner keeps Ray's counters and the
// auto-filled result fields, exactly as for a built-in trainable.
//
// Thread affinity: like every Trainable, all calls come from the actor's
// runner thread. The process group handle (process_group()) is shared with
// the control thread, which signals it when it kills the actor.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "worker/child_process.h"
#include "worker/line_channel.h"
#include "worker/process_trainable_config.h"
#include "worker/trainable.h"
#include "worker/trial_output.h"

namespace ztune::worker {

// The largest packed checkpoint directory: what a RESTORE can carry back
// (the worker's restore payload limit), less room for the envelope.
inline constexpr uint64_t kMaxCheckpointDirectoryBytes = (4ULL << 30) - (64 << 10);

class ProcessTrainable : public Trainable {
 public:
  explicit ProcessTrainable(ProcessTrainableSpec spec);
  // Ends the process group if Cleanup did not (a failed setup, an abandoned
  // actor): SIGTERM, the grace period, SIGKILL.
  ~ProcessTrainable() override;

  Status Setup(const Json& config, const TrialContext& ctx) override;
  Result<Json> Step(const TrialContext& ctx) override;
  Result<std::string> Save(const TrialContext& ctx) override;
  Status Restore(std::string_view bytes, const TrialContext& ctx) override;
  bool ResetConfig(const Json& new_config, const TrialContext& ctx) override;
  void Cleanup() override;
  Result<Json> ExportModel(const std::vector<std::string>& formats,
                           const TrialContext& ctx) override;
  std::shared_ptr<ProcessGroup> process_group() const override { return group_; }

 private:
  // Sends `command` and returns its reply when `"ok": true`. A reply with
  // `"ok": false` is an error carrying the child's message; a dead child, a
  // broken framing or an abandoned actor mark the process broken (every
  // later call fails at once) and end the group. `what` names the command in
  // messages ("step of iteration 7").
  Result<Json> Call(const Json& command, const std::string& what);
  // Marks the process broken for `cause` and returns the error to report.
  Status Broken(const std::string& what, const Status& cause);
  // The environment of a new child for the trial in `ctx`.
  std::vector<std::string> ChildEnvironment(const TrialContext& ctx) const;
  std::string HeaderLine(const TrialContext& ctx, const std::string& note) const;
  // A fresh, empty directory under the trial's directory for a checkpoint.
  Result<std::string> FreshDirectory(const std::string& kind, int64_t iteration);
  // Stops the process: `stop` (when it can still answer), then the group's
  // termination; removes the last restore directory. Idempotent.
  void EndProcess(bool graceful);

  const ProcessTrainableSpec spec_;
  const std::shared_ptr<ProcessGroup> group_ = std::make_shared<ProcessGroup>();
  std::unique_ptr<ChildProcess> child_;
  std::unique_ptr<TrialOutput> output_;
  std::unique_ptr<LineChannel> channel_;
  const std::atomic<bool>* stop_flag_ = nullptr;  // the runner's "abandoned" flag
  std::string trial_dir_;                         // absolute directory of the trial served now
  std::string restore_dir_;  // the last restore's directory, kept for lazy reads
  std::string broken_;       // why the process can take no more commands; empty: fine
  uint64_t dir_serial_ = 0;
};

}  // namespace ztune::worker
