// Which memory allocator the process runs on, for its start-up log line.
//
// The head links jemalloc (CMake option ZTUNE_JEMALLOC, on by default, off in
// the sanitizer and fuzz builds, whose runtimes bring their own malloc)
// through the `ztune_allocator` library, which also sets jemalloc's options
// (common/allocator.cc). The worker keeps the C library's malloc: it hosts
// trainables' own code, and measured no different either way.
#pragma once

#include <string>

namespace ztune {

// "jemalloc 5.3.0-0-g54eaed1d8b56... (thp:default, oversize_threshold:0)"
// or "the C library's malloc".
// Thread-safe.
std::string AllocatorDescription();

}  // namespace ztune
