#include "common/allocator.h"

#include <optional>
#include <string>

#ifdef ZTUNE_JEMALLOC
#include <jemalloc/jemalloc.h>

// jemalloc reads this at its first allocation (before main); MALLOC_CONF in
// the environment overrides it, option by option.
//
// jemalloc's own defaults, except oversize_threshold:1048577: allocations
// over 1 MiB (checkpoint chunks of 1 MiB plus their framing, whole messages
// of a transfer) go to its oversize arena, which hands their pages back as
// they are freed, as glibc's mmap'd chunks were. With the default threshold
// (8 MiB) the heads of tests/e2e/large_checkpoint_e2e_test.cc (a 256 MiB
// checkpoint uploaded and restored across head kills; bound: 64 MiB over the
// RSS at start) peaked up to 44 MiB over start, against glibc's 30; with it,
// up to 30.
//
// Not thp:always, although it measured best for CPU (the head's page faults
// on fresh memory, RocksDB's memtables above all, were 8% of its samples at
// 10,000 one-iteration trials on a VM whose faults are dear, and huge pages
// take one per 2 MiB): it raised the head's peak RSS under a fleet of 10,000
// live trials from 223 MiB (these options) to 325 for no CPU gain there. docs/deploy.md
// tells how to opt in (MALLOC_CONF=thp:always); docs/benchmarks.md
// ("against the floor", 2026-12-06 night) has the measurements.
extern "C" {
// NOLINTNEXTLINE: the name and type are jemalloc's interface
const char* malloc_conf = "oversize_threshold:1048577";
}
#endif

namespace ztune {

#ifdef ZTUNE_JEMALLOC
namespace {

// One of jemalloc's read-only settings, or nullopt.
template <class T>
std::optional<T> ReadMallctl(const char* name) {
  T value{};
  size_t size = sizeof(value);
  if (mallctl(name, &value, &size, nullptr, 0) != 0) return std::nullopt;
  return value;
}

}  // namespace
#endif

std::string AllocatorDescription() {
  // mallctl reads jemalloc's own settings: it answers whichever malloc the
  // process's malloc() resolves to (tests/common/allocator_test.cc checks
  // that it is jemalloc's).
#ifdef ZTUNE_JEMALLOC
  const std::optional<const char*> version = ReadMallctl<const char*>("version");
  if (!version || *version == nullptr) return "jemalloc (its version unreadable)";
  std::string out = std::string("jemalloc ") + *version;
  const std::optional<const char*> thp = ReadMallctl<const char*>("opt.thp");
  const std::optional<size_t> oversize = ReadMallctl<size_t>("opt.oversize_threshold");
  if (thp && *thp != nullptr && oversize) {
    out += std::string(" (thp:") + *thp + ", oversize_threshold:" + std::to_string(*oversize) + ")";
  }
  return out;
#else
  return "the C library's malloc";
#endif
}

}  // namespace ztune
