#include "common/allocator.h"

#include <string>

#ifdef ZTUNE_JEMALLOC
#include <jemalloc/jemalloc.h>

// jemalloc reads this at its first allocation (before main).
//
// thp:always: jemalloc madvises its extents as transparent huge pages (a
// kernel whose THP mode is "never" ignores it). The head's hot path writes
// RocksDB memtables and grows its trial maps into fresh memory, and on
// virtual machines whose guests pay dearly for a page fault (this project's
// 2-core benchmark machine: 8% of the head's samples in exc_page_fault at
// 10,000 one-iteration trials, most of them in MemTable::Add) a fault per
// 2 MiB instead of per 4 KiB is most of what jemalloc gains there
// (docs/benchmarks.md, "2026-12-06 (night)").
//
// oversize_threshold:1048577: allocations over 1 MiB (checkpoint chunks of
// 1 MiB plus their framing, whole messages of a transfer) go to jemalloc's
// oversize arena, which hands their pages back as they are freed, as glibc's
// mmap'd chunks did; with huge pages kept in every arena, a 256 MiB restore
// raised the head's peak RSS by up to 68 MiB against the 64 MiB bound of
// tests/e2e/large_checkpoint_e2e_test.cc (43-52 MiB with it, 30 with
// glibc). The memtables' arena blocks (at most 1 MiB) stay in the normal
// arenas, on huge pages.
//
// metadata_thp:auto: huge pages for jemalloc's own metadata once it needs
// more than a few.
extern "C" {
// NOLINTNEXTLINE: the name and type are jemalloc's interface
const char* malloc_conf = "thp:always,oversize_threshold:1048577,metadata_thp:auto";
}
#endif

namespace ztune {

std::string AllocatorDescription() {
#ifdef ZTUNE_JEMALLOC
  const char* version = nullptr;
  size_t size = sizeof(version);
  if (mallctl("version", &version, &size, nullptr, 0) != 0 || version == nullptr) {
    return "jemalloc (its version unreadable)";
  }
  const char* thp = nullptr;
  size = sizeof(thp);
  std::string out = std::string("jemalloc ") + version;
  if (mallctl("opt.thp", &thp, &size, nullptr, 0) == 0 && thp != nullptr) {
    out += std::string(" (thp:") + thp + ")";
  }
  return out;
#else
  return "the C library's malloc";
#endif
}

}  // namespace ztune
