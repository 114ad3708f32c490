// The allocator the head links (common/allocator.h): that malloc() really is
// jemalloc's, with the options compiled into the binary. Built into its own
// executable, linked as the head is; a build without ZTUNE_JEMALLOC checks
// that it says so.
#include "common/allocator.h"

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#ifdef ZTUNE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

namespace ztune {
namespace {

#ifdef ZTUNE_JEMALLOC

// jemalloc's count of bytes the application holds, refreshed.
size_t AllocatedBytes() {
  uint64_t epoch = 1;
  size_t size = sizeof(epoch);
  EXPECT_EQ(mallctl("epoch", &epoch, &size, &epoch, size), 0);
  size_t allocated = 0;
  size = sizeof(allocated);
  EXPECT_EQ(mallctl("stats.allocated", &allocated, &size, nullptr, 0), 0);
  return allocated;
}

TEST(AllocatorTest, MallocIsJemallocsWithTheHeadsOptions) {
  const std::string description = AllocatorDescription();
  EXPECT_EQ(description.rfind("jemalloc 5.", 0), 0u) << description;
  // malloc_conf of common/allocator.cc was read: no oversize arena, and huge
  // pages are left to the kernel's default.
  EXPECT_NE(description.find("(thp:default, oversize_threshold:0)"), std::string::npos)
      << description;

  // And malloc() goes to it: 8 MiB held show in its count, and leave it.
  const size_t before = AllocatedBytes();
  constexpr size_t kBytes = 8u << 20;
  void* volatile p = std::malloc(kBytes);
  ASSERT_NE(p, nullptr);
  const size_t held = AllocatedBytes();
  std::free(p);
  const size_t after = AllocatedBytes();
  EXPECT_GE(held, before + kBytes);
  EXPECT_LT(after, held - kBytes / 2);
}

#else

TEST(AllocatorTest, ABuildWithoutJemallocSaysSo) {
  EXPECT_EQ(AllocatorDescription(), "the C library's malloc");
}

#endif

}  // namespace
}  // namespace ztune
