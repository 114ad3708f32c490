// Where a command's output goes: stdout, or a file that appears whole or not
// at all (written as FILE.partial-PID and renamed over FILE once complete; a
// failed command leaves FILE as it was). Used by `export` and `report`.
// Thread-compatible.
#pragma once

#include <fstream>
#include <ostream>
#include <string>

#include "common/status.h"

namespace ztune::client {

class OutputFile {
 public:
  // `path` "" or "-" = `stdout_stream`.
  OutputFile(std::ostream& stdout_stream, std::string path);
  ~OutputFile();  // removes an uncommitted partial file
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // InvalidArgument naming the path when it cannot be created.
  Status Open();
  std::ostream& out();
  // Flushes; for a file checks every write, then renames it into place.
  Status Commit();
  bool is_file() const { return !path_.empty() && path_ != "-"; }

 private:
  std::ostream& stdout_;
  std::string path_;
  std::string partial_;
  std::ofstream file_;
};

}  // namespace ztune::client
