// WorkerRegistry: the workers the head knows, their identity and liveness
// (Paranoid Pirate: any message counts as a heartbeat). Lives on the head loop
// thread; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/clock.h"
#include "common/protocol/messages.h"
#include "common/resources.h"
#include "common/status.h"

namespace ztune::head {

struct WorkerInfo {
  WorkerId worker_id;  // also the ZeroMQ routing id
  std::string name;
  std::string host;
  int64_t pid = 0;
  uint64_t incarnation = 0;
  ResourceSet total;
  std::vector<int64_t> gpu_ids;
  std::set<std::string> trainables;
  // The export formats of the trainables that declare them (REGISTER's
  // export_formats); a hosted trainable absent here may export anything.
  std::map<std::string, std::set<std::string>> export_formats;
  TimeMs last_seen = 0;
  bool alive = false;
  // It announced protocol::kFeatureTrains: its TRAINs may go coalesced.
  bool takes_trains = false;
  // It announced protocol::kFeatureAckTrains: TRAINs may go inside its ACKs.
  bool takes_ack_trains = false;
};

class WorkerRegistry {
 public:
  WorkerRegistry(const Clock& clock, TimeMs expiry_ms) : clock_(clock), expiry_ms_(expiry_ms) {}

  // Device ids one worker may report (more than any machine has).
  static constexpr size_t kMaxGpuIds = 1024;
  // Export format names one worker may declare, over all its trainables, and
  // the longest name.
  static constexpr size_t kMaxExportFormats = 4096;
  static constexpr size_t kMaxExportFormatBytes = 128;
  // What a REGISTER offers, checked before anything is recorded: amounts
  // finite, non-negative and within ResourceSet's maximum; gpu_ids distinct,
  // >= 0 and at most kMaxGpuIds; export formats at most kMaxExportFormats
  // names of 1 to kMaxExportFormatBytes bytes. InvalidArgument says what is
  // wrong.
  static Result<ResourceSet> CheckOffer(const protocol::Register& r);
  // Records a registration (checked by CheckOffer). Returns true if the worker was unknown or dead
  // before (its resources must be (re)added to the ledger).
  bool Register(const protocol::Register& r);
  // Any message from a known live worker.
  void Touch(const WorkerId& worker_id);
  // Live worker or nullptr.
  const WorkerInfo* FindAlive(const WorkerId& worker_id) const;
  const WorkerInfo* Find(const WorkerId& worker_id) const;
  // Marks workers silent for longer than the expiry as dead and returns them.
  std::vector<WorkerId> ExpireSilent();
  // The head itself was not reading for a while (a stall): silence is
  // measured again from now for every live worker.
  void RestartSilenceClocks();
  // Marks one worker dead (it said DISCONNECT).
  void MarkDead(const WorkerId& worker_id);

  // Dead workers stay listed (`ztune workers` shows them) up to this many;
  // the longest dead go first, so that a fleet that churns for months does
  // not grow the head without bound.
  static constexpr size_t kMaxDeadWorkers = 1000;

  const std::map<WorkerId, WorkerInfo>& workers() const { return workers_; }
  size_t NumAlive() const;
  TimeMs expiry_ms() const { return expiry_ms_; }
  // Whether any live worker hosts `trainable`; lists what they host otherwise.
  bool AnyHosts(const std::string& trainable, std::string* offered) const;
  // Whether a trial of `trainable` can export every one of `formats`:
  // InvalidArgument naming the first that no live worker hosting it declares,
  // when every such worker declares its formats (an undeclared one may
  // export anything, and so may a trainable no live worker hosts).
  Status CheckExports(const std::string& trainable, const std::vector<std::string>& formats) const;

 private:
  const Clock& clock_;
  TimeMs expiry_ms_;
  // Records a death and forgets the longest dead beyond kMaxDeadWorkers.
  void NoteDead(const WorkerId& worker_id);

  std::map<WorkerId, WorkerInfo> workers_;
  std::deque<WorkerId> dead_order_;  // deaths, oldest first (may name revived ones)
};

}  // namespace ztune::head
