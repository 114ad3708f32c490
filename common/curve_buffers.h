// Where libzmq's CURVE puts its handshakes' plaintexts: the heap, not
// libsodium's guarded pages.
//
// libzmq 4.3 built with libsodium (Debian's) allocates the plaintext of each
// CURVE handshake command it boxes or opens (six on the server's side of a
// handshake, six on the client's) through libsodium's sodium_allocarray: an
// mmap with guard pages around the buffer, mprotect, mlock, and at its free
// munlock, mprotect and munmap, whose TLB shootdown interrupts the process's
// other cores; about 54 us a pair on a VM whose syscalls are dear. A head
// that 1,000 workers connect to at once (its start, or its restart) did that
// 6,000 times on its one ZeroMQ I/O thread: 12% of that thread's samples
// over the first 13 s of a 1,000-worker run (their registration included); with these buffers on the heap 1,000 simulated
// workers re-attached to a restarted head in 0.6 of the time
// (docs/benchmarks.md, "fleet", 2026-12-07 afternoon). The guard pages and
// the lock protect little there: the secrets those buffers hold for a moment
// (a connection's short-term keys, boxed into its cookie) libzmq keeps for
// the connection's life in its ordinary memory, beside the socket's own
// secret key.
//
// The `ztune_curve_buffers` library (common/curve_buffers.cc) defines
// sodium_malloc, sodium_allocarray and sodium_free in the executable that
// links it, which the dynamic linker binds libzmq's calls to ahead of
// libsodium's: heap blocks, wiped at their free as sodium_free wipes. Only
// executables link it (the head, the worker, the CLI); libsodium calls
// sodium_free on nothing of its own and reaches sodium_malloc only from
// sodium_allocarray, through its PLT, so every pair is served by one side.
// Nothing may call sodium_mprotect_* on these blocks (libzmq does not).
#pragma once

#include <cstdint>
#include <string>

namespace ztune {

// Whether the process's sodium_allocarray and sodium_free resolve to
// common/curve_buffers.cc (they do when the executable links
// ztune_curve_buffers and exports them). Thread-safe.
bool CurveBuffersOnHeap();

// Blocks served since the process started. Thread-safe.
uint64_t CurveBufferAllocations();

// For the start-up log: "the heap, wiped at free" or libsodium's guarded pages.
std::string CurveBuffersDescription();

}  // namespace ztune
