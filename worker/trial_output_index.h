// Where each attempt's output starts in a trial directory's `stdout` and
// `stderr` files, and reading one attempt's section back (`ztune logs`).
//
// The files are appended by every attempt (retries, reused actors) with a
// header line per attempt. Finding a section by searching for header lines
// would read the whole file at every poll of `ztune logs --follow` and could
// be fooled by a program that prints a header-like line, so the writer
// (TrialOutput) records the offset of each header in `.ztune-output-index`:
// one line "<attempt> <stdout offset> <stderr offset>" per attempt, in file
// order. Pure file functions; thread-compatible (the writer holds its lock).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace ztune::worker {

inline constexpr char kOutputIndexFile[] = ".ztune-output-index";

// Appends the index line of `attempt`, whose header starts at these offsets.
Status AppendOutputIndex(const std::string& dir, uint64_t attempt, uint64_t stdout_offset,
                         uint64_t stderr_offset);

struct OutputSlice {
  std::string bytes;  // [offset, offset + bytes.size()) of the section
  uint64_t size = 0;  // the section's bytes so far
};

// Bytes [offset, offset + limit) of the section `attempt` wrote to
// `dir`/`stream` ("stdout" or "stderr"): from its header to the next
// attempt's header, or to the end of the file. NotFound when the file or the
// attempt's index line is missing (names what is there), InvalidArgument for
// another stream name, IOError when the file cannot be read.
Result<OutputSlice> ReadOutputSection(const std::string& dir, const std::string& stream,
                                      uint64_t attempt, uint64_t offset, uint64_t limit);

}  // namespace ztune::worker
