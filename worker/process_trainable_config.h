// The worker's --trainables file: which programs this worker may run as
// process trainables (docs/process-protocol.md "Which programs a worker
// runs"). The submitted spec only names one; it never chooses a command.
// Plain values and pure functions; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ztune::worker {

struct ProcessTrainableSpec {
  std::string name;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // added to the worker's environment
  std::string cwd;                         // absolute; empty: the trial's directory
  int64_t stop_grace_ms = 5000;
  // The model formats its export can produce ("export_formats"), which the
  // head checks a spec's export_formats against at submit; nullopt: not
  // declared, any format is tried.
  std::optional<std::vector<std::string>> export_formats;
};

// Parses the file's text. `base_dir` resolves a relative cwd; `source` names
// the file in messages. InvalidArgument naming the file, the trainable and
// the key for anything wrong (not an object, unknown key, empty argv, a
// non-string, a grace outside [0, 3600] s, a name that is empty, too long or
// not printable UTF-8).
Result<std::vector<ProcessTrainableSpec>> ParseProcessTrainables(std::string_view json_text,
                                                                 const std::string& base_dir,
                                                                 const std::string& source);

// Reads and parses `path`; IOError if it cannot be read.
Result<std::vector<ProcessTrainableSpec>> LoadProcessTrainables(const std::string& path);

}  // namespace ztune::worker
