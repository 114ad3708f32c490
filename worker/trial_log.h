// The per-trial log file <work-dir>/<trial_id>/trial.log: lifecycle lines
// (created, restored, saved, reset, stopped, "Failure: ..."), plus whatever a
// trainable writes through TrialContext::Log.
//
// Thread-safe: written by an actor's runner thread and, for the "killed" line,
// by the control thread. A file that cannot be opened turns the log into a
// no-op (the worker's own log says why); logging never fails a trial.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>

namespace ztune::worker {

// The directory name used for `trial_id` under the work dir: characters other
// than [A-Za-z0-9._-] become '_' and "", "." and ".." become "_".
std::string SanitizeForPath(std::string_view trial_id);

// <work_dir>/<SanitizeForPath(trial_id)>: the trial's directory on this worker.
std::string TrialDir(const std::string& work_dir, std::string_view trial_id);

class TrialLog {
 public:
  // Creates <dir> if needed and opens <dir>/trial.log for appending.
  explicit TrialLog(std::string dir);
  ~TrialLog();
  TrialLog(const TrialLog&) = delete;
  TrialLog& operator=(const TrialLog&) = delete;

  // Appends one line, prefixed with the local time, and flushes.
  void Write(std::string_view line);

  const std::string& dir() const { return dir_; }
  // Empty if the file could not be opened.
  const std::string& path() const { return path_; }

 private:
  const std::string dir_;
  std::string path_;
  std::mutex mu_;
  std::FILE* file_ = nullptr;  // GUARDED_BY(mu_) for writes; null if not open
};

}  // namespace ztune::worker
