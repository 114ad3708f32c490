// FreeSpaceGuard: the data directory's free-space reserve. RocksDbStore asks it
// before every commit and refuses the commit (ResourceExhausted) while fewer
// than `min_free_bytes` would remain on the file system, so that RocksDB itself
// never runs into ENOSPC: RocksDB 7.8 (Debian's build keeps its assertions)
// aborts the process on some write paths after a failed write, and even where
// it does not, a store that hit ENOSPC refuses writes until it is resumed.
//
// The free figure comes from a probe (statvfs by default, injectable for
// tests) and is cached: it is re-probed when it is older than `recheck_ms`,
// when `recheck_bytes` were committed since, or when the cached figure says
// no, so a commit costs one statvfs at most every `recheck_ms` in the steady
// state. Between probes the bytes committed are subtracted from the figure.
//
// Not thread-safe: used by the thread that owns the store.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/clock.h"
#include "common/status.h"

namespace ztune::storage {

// Bytes an unprivileged process may still write on the file system holding
// `dir`, or an error status naming `dir`.
using FreeSpaceProbe = std::function<Result<uint64_t>(const std::string& dir)>;

// statvfs(dir): f_bavail * f_frsize. IOError if statvfs fails.
Result<uint64_t> StatvfsFreeBytes(const std::string& dir);

// "1.5 GiB", "12.0 MiB", "512 bytes": for messages.
std::string HumanBytes(uint64_t bytes);

class FreeSpaceGuard {
 public:
  // `min_free_bytes` 0 disables the guard (every Reserve is OK, nothing is
  // probed). An empty `probe` means StatvfsFreeBytes. `clock` must outlive
  // the guard.
  FreeSpaceGuard(std::string dir, uint64_t min_free_bytes, TimeMs recheck_ms,
                 uint64_t recheck_bytes, FreeSpaceProbe probe, const Clock& clock);

  // OK if `bytes` more can be written while keeping the reserve free.
  // ResourceExhausted (naming the directory, the free bytes and the reserve)
  // if not, IOError if the probe fails. Never writes anything.
  Status Reserve(uint64_t bytes);
  // Records `bytes` written since the last probe (after a successful commit).
  void Wrote(uint64_t bytes) { written_since_probe_ += bytes; }
  // Probes now, ignoring the cache; Status as Reserve(0).
  Status CheckNow();

  uint64_t min_free_bytes() const { return min_free_bytes_; }
  // The free bytes the last probe found (0 before the first).
  uint64_t last_free() const { return free_at_probe_; }
  // How often the probe ran (tests check that the cache works).
  uint64_t probes() const { return probes_; }

 private:
  Status Probe();
  Status Verdict(uint64_t free, uint64_t bytes) const;

  std::string dir_;
  uint64_t min_free_bytes_;
  TimeMs recheck_ms_;
  uint64_t recheck_bytes_;
  FreeSpaceProbe probe_;
  const Clock& clock_;
  // The last probe's figure and when it was taken; valid once probes_ > 0.
  uint64_t free_at_probe_ = 0;
  TimeMs probed_at_ = 0;
  uint64_t written_since_probe_ = 0;
  uint64_t probes_ = 0;
};

}  // namespace ztune::storage
