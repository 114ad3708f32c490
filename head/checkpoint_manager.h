// CheckpointManager: a trial's persistent checkpoints, as Ray's
// _CheckpointManager does them plus the head's storage: when one is due after
// a result, recording a saved one with retention by score (num_to_keep), and
// which checkpoint a (re)start restores (a pause's memory checkpoint, else the
// newest persistent one not given up, else the trial it was told to start
// from). Checkpoint bytes live in the store's checkpoints family; records
// live on the Trial. Writes go into the runner's turn batch, and reads see
// that batch first (a checkpoint saved in this turn is not committed yet).
// A checkpoint that arrived in chunks is a file (CheckpointFiles): its
// "bytes" here are the file's reference, which the RESTORE sender streams.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "head/checkpoint_files.h"
#include "head/command_sink.h"
#include "head/experiment_spec.h"
#include "head/trial.h"
#include "storage/store.h"

namespace ztune::head {

class CheckpointManager {
 public:
  // `batch` is the turn's batch, committed by the head after each turn;
  // `long_ops` runs store reads of megabytes off the loop thread.
  CheckpointManager(storage::Store& store, storage::WriteBatch& batch, CommandSink& long_ops)
      : store_(store), batch_(batch), long_ops_(long_ops) {}

  // Checkpoint files, if the head keeps them (nullptr: every checkpoint is
  // inline, e.g. unit tests on an in-memory store). Not owned.
  void set_files(CheckpointFiles* files) { files_ = files; }
  CheckpointFiles* files() const { return files_; }

  // Whether a persistent checkpoint is due after the trial's last result
  // (frequency, at_end with a done result, should_checkpoint), and not taken.
  static bool Due(const Trial& t, const CheckpointPolicy& policy);

  // Records the checkpoint `bytes` (or a file reference) of `t` at
  // `iteration`, scored by the last result's score_attribute, and applies
  // retention: the best num_to_keep by score, and always the newest. Deletes
  // what retention drops (a file once the turn is committed).
  void Add(Trial& t, const CheckpointPolicy& policy, std::string bytes, int64_t iteration);

  // The checkpoint a start of `t` restores, read into `storage`; nullptr to
  // start from scratch. `source` is the trial named by restore_from (or
  // nullptr). Consumes a memory checkpoint; sets t.resume_iteration and
  // counts a restore.
  std::string* ForStart(Trial& t, const Trial* source, std::string& storage);

  // `bytes` (a delivered SAVE payload) is kept by a trial: if it is a file,
  // the file stays (CheckpointFiles::Adopt).
  void Adopt(std::string_view bytes);

  // Checkpoint bytes read from one trial, to be recorded as another's (a PBT
  // clone): a file is linked under a new name, so that each trial's
  // retention removes only its own. Empty if the file cannot be linked.
  std::string CopyForAnotherTrial(std::string bytes);

  // A restore from the checkpoint it was given failed: no checkpoint taken so
  // far is used again (Ray, TUNE_RESTORE_RETRY_NUM = 0); the next start is
  // from scratch, later checkpoints are used again.
  void GiveUpCurrent(Trial& t);
  // Forgets a pause's memory checkpoint (its file, if it is one, goes once
  // the turn is committed).
  void DropMemoryCheckpoint(Trial& t);
  // The file names every retained checkpoint record names.
  static void CollectFiles(const Trial& t, std::set<std::string>& names);

  // Checkpoint `id` of trial `owner`, from the turn's batch or the store
  // (read off the loop thread). nullopt when neither has it.
  Result<std::optional<std::string>> Read(const TrialId& owner, uint64_t id);

 private:
  storage::Store& store_;
  storage::WriteBatch& batch_;
  CommandSink& long_ops_;
  // The checkpoint file `bytes` refer to, if they are a file reference and
  // this head keeps files.
  std::optional<std::string> FileOf(std::string_view bytes) const;

  CheckpointFiles* files_ = nullptr;
};

}  // namespace ztune::head
