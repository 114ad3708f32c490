#include "common/allocator.h"

#include <optional>
#include <string>

#ifdef ZTUNE_JEMALLOC
#include <jemalloc/jemalloc.h>

// jemalloc reads this at its first allocation (before main); MALLOC_CONF in
// the environment overrides it, option by option.
//
// jemalloc's own defaults, except oversize_threshold:0: no oversize arena.
// That arena hands a large allocation's pages back as soon as it is freed,
// so each one faults fresh pages in; a checkpoint's chunks (ZeroMQ's buffer
// for every 1 MiB CHUNK received, a little over 1 MiB) went there with the
// threshold at 1 MiB + 1 (until 2026-12-07) and the head made a 1 GiB
// checkpoint durable at 0.19-0.37 of the disk's speed, its I/O thread
// faulting in every page; with the threshold at 0 (large allocations decay
// as small ones do, their pages reused for 10 s) at 0.64-0.76, jemalloc's
// default (8 MiB) alike. The cost is memory held for reuse: the heads of
// tests/e2e/large_checkpoint_e2e_test.cc (a 256 MiB checkpoint uploaded and
// restored across head kills; bound: 64 MiB over the RSS at start) peaked
// 39-44 MiB over start in 7 runs (8 MiB: 38-49 in 6; 1 MiB + 1: 19-30), and
// a head under 1,000 simulated workers the same 224 MiB (docs/benchmarks.md,
// "large checkpoints", 2026-12-07).
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
const char* malloc_conf = "oversize_threshold:0";
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
