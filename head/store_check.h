// StoreCheck: offline verification of a head's data directory
// (`ztune-head --check`). Reads every record and reports what is
// inconsistent; never writes. Single-threaded.
#pragma once

#include <string>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "storage/store.h"

namespace ztune::head {

struct StoreCheckReport {
  int64_t experiments = 0;
  int64_t trials = 0;
  int64_t results = 0;
  int64_t checkpoints = 0;
  int64_t checkpoint_bytes = 0;
  int64_t checkpoint_files = 0;  // of `checkpoints`, those kept as files
  int64_t code_archives = 0;  // submitted projects
  int64_t code_bytes = 0;
  std::vector<std::string> problems;  // empty = consistent

  bool ok() const { return problems.empty(); }
  Json ToJson() const;
  std::string ToText() const;
};

// Checks that every experiment and trial record parses; that each trial's
// results are contiguous (1..iteration, or from the restored checkpoint's
// iteration for --restore-from trials), carry the trial id and the key's
// iteration; that every retained checkpoint is present and readable (a file
// checkpoint: its file in `checkpoint_dir`, of its recorded size, unless
// `checkpoint_dir` is empty); and that
// no result or checkpoint belongs to an unknown trial; that every submitted
// project archive has all its pages and the sha256 it is stored under, and
// that every experiment's working_dir is stored; that each trial's scheduler
// state is one its experiment's scheduler takes. An error Status means
// the store could not be read at all.
Result<StoreCheckReport> CheckStore(storage::Store& store, const std::string& checkpoint_dir = "");

}  // namespace ztune::head
