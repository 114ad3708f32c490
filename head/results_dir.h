// ResultsDir: Ray Tune's on-disk layout of an experiment's results, written
// beside the store for tools built for Ray's output (ztune-head
// --results-dir, docs/results-dir.md):
//
//   DIR/<experiment name>_<experiment id>/<trainable>_<trial id>/
//       params.json    the trial's config (indented, keys sorted)
//       result.json    one JSON object a line per stored result, with "config"
//       progress.csv   one row per result: the first result's flattened keys
//                      (without config) as the header, as Ray's CSV logger
//
// The runner reports each result as it goes into the turn's batch (Add); the
// head appends them once that batch is committed (Flush), so the files never
// hold a result the store lost. A failed write is logged (rate limited) and
// the head goes on: these files are a copy, the store is the record. Results
// PBT copies from a donor at an exploit are not appended (as in Ray, a
// trial's result.json goes on from the donor's iteration after an exploit).
//
// Head loop thread only.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/json.h"
#include "common/rate_limited_warning.h"
#include "common/status.h"
#include "head/append_file_cache.h"

namespace ztune::head {

class ResultsDir {
 public:
  explicit ResultsDir(std::string root);

  // A stored result (the value kept in the store, head/stored_result.h) of
  // trial `trial_id` with `config`, of experiment `experiment_id` named
  // `experiment_name` whose trainable is `trainable`. Written, as JSON, by
  // the next Flush.
  void Add(const std::string& experiment_id, const std::string& experiment_name,
           const std::string& trainable, const std::string& trial_id, const Json& config,
           std::string stored_result);

  // What was added and not yet written, by trial id.
  struct Pending {
    std::string dir;
    Json config;
    std::vector<std::string> results;
  };
  using Rows = std::map<std::string, Pending>;

  // After the commit of everything added: appends it to the files.
  void Flush() { Write(TakeRows()); }
  // What was added since the last Flush or TakeRows, for a Write after a
  // commit that ends later (while the next turns add more).
  Rows TakeRows() { return std::exchange(pending_, {}); }
  bool HasRows() const { return !pending_.empty(); }
  // Appends `rows` (committed) to the files.
  void Write(const Rows& rows);

  // The directory of a trial (for tests and docs).
  std::string TrialDir(const std::string& experiment_id, const std::string& experiment_name,
                       const std::string& trainable, const std::string& trial_id) const;

 private:
  // Writes one trial's pending results; IOError naming the file on failure.
  Status WriteTrial(const Pending& p);

  std::string root_;
  Rows pending_;  // by trial id, in id order
  // The trial directories made ready (created, params.json written) in this
  // head's life, with each one's progress.csv header once known (read back
  // from the file after a head restart; empty until the first result).
  std::map<std::string, std::vector<std::string>> headers_;
  // result.json and progress.csv of the trials that wrote lately: two files
  // per trial, so 128 trials append without opening a file.
  AppendFileCache files_{256};
  SteadyClock clock_;
  RateLimitedWarning warnings_{clock_, 10'000};
};

}  // namespace ztune::head
