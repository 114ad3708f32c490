#include "common/curve_buffers.h"

#include <dlfcn.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace {

// Each block starts with its size, so that the free can wipe it; 16 bytes
// keep the caller's bytes aligned as malloc's.
constexpr size_t kHeader = 16;

std::atomic<uint64_t> g_allocations{0};

void* HeapBlock(size_t size) {
  if (size > SIZE_MAX - kHeader) {
    errno = ENOMEM;
    return nullptr;
  }
  auto* base = static_cast<unsigned char*>(std::malloc(kHeader + size));
  if (base == nullptr) return nullptr;
  std::memcpy(base, &size, sizeof(size));
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return base + kHeader;
}

}  // namespace

// libsodium's interface (sodium/utils.h), in the executable: see
// common/curve_buffers.h. Thread-safe as malloc.
extern "C" {

__attribute__((visibility("default"))) void* sodium_malloc(size_t size) { return HeapBlock(size); }

__attribute__((visibility("default"))) void* sodium_allocarray(size_t count, size_t size) {
  if (count > 0 && size >= SIZE_MAX / count) {
    errno = ENOMEM;
    return nullptr;
  }
  return HeapBlock(count * size);
}

__attribute__((visibility("default"))) void sodium_free(void* ptr) {
  if (ptr == nullptr) return;
  auto* base = static_cast<unsigned char*>(ptr) - kHeader;
  size_t size = 0;
  std::memcpy(&size, base, sizeof(size));
  // As sodium_free: a plaintext does not outlive its buffer in freed memory.
  explicit_bzero(ptr, size);
  std::free(base);
}

}  // extern "C"

namespace ztune {

bool CurveBuffersOnHeap() {
  // The process-wide lookup libzmq's calls get (it is not loaded with
  // RTLD_DEEPBIND): the executable's own definitions come first when exported.
  return dlsym(RTLD_DEFAULT, "sodium_allocarray") == reinterpret_cast<void*>(&sodium_allocarray) &&
         dlsym(RTLD_DEFAULT, "sodium_free") == reinterpret_cast<void*>(&sodium_free) &&
         dlsym(RTLD_DEFAULT, "sodium_malloc") == reinterpret_cast<void*>(&sodium_malloc);
}

uint64_t CurveBufferAllocations() { return g_allocations.load(std::memory_order_relaxed); }

std::string CurveBuffersDescription() {
  return CurveBuffersOnHeap() ? "the heap, wiped at free"
                              : "libsodium's guarded pages (the executable's sodium_* not "
                                "exported: see common/curve_buffers.h)";
}

}  // namespace ztune
