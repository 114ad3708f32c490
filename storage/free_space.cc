// FreeSpaceGuard and the statvfs probe (see free_space.h).
#include "storage/free_space.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace ztune::storage {

Result<uint64_t> StatvfsFreeBytes(const std::string& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) {
    return Status::IOError("data directory " + dir +
                           ": cannot measure free space (statvfs): " + std::strerror(errno));
  }
  // f_bavail, not f_bfree: the blocks reserved for root are not ours to use
  // even when the head runs as root on a file system that allows it.
  return static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
}

std::string HumanBytes(uint64_t bytes) {
  constexpr uint64_t kKiB = 1024;
  char buf[64];
  if (bytes < kKiB) {
    std::snprintf(buf, sizeof(buf), "%llu bytes", static_cast<unsigned long long>(bytes));
  } else if (bytes < kKiB * kKiB) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", static_cast<double>(bytes) / kKiB);
  } else if (bytes < kKiB * kKiB * kKiB) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (kKiB * kKiB));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f GiB", static_cast<double>(bytes) / (kKiB * kKiB * kKiB));
  }
  return buf;
}

FreeSpaceGuard::FreeSpaceGuard(std::string dir, uint64_t min_free_bytes, TimeMs recheck_ms,
                               uint64_t recheck_bytes, FreeSpaceProbe probe, const Clock& clock)
    : dir_(std::move(dir)),
      min_free_bytes_(min_free_bytes),
      recheck_ms_(recheck_ms),
      recheck_bytes_(recheck_bytes),
      probe_(probe ? std::move(probe) : FreeSpaceProbe(StatvfsFreeBytes)),
      clock_(clock) {}

Status FreeSpaceGuard::Probe() {
  Result<uint64_t> free = probe_(dir_);
  if (!free.ok()) return free.status();
  ++probes_;
  free_at_probe_ = *free;
  probed_at_ = clock_.NowMs();
  written_since_probe_ = 0;
  return Status::Ok();
}

Status FreeSpaceGuard::Verdict(uint64_t free, uint64_t bytes) const {
  if (free >= min_free_bytes_ && free - min_free_bytes_ >= bytes) return Status::Ok();
  return Status::ResourceExhausted(
      "data directory " + dir_ + ": only " + HumanBytes(free) +
      " free on its file system, and the store keeps " + HumanBytes(min_free_bytes_) +
      " free (min_free_bytes) so that RocksDB never runs out of space; refusing to write " +
      HumanBytes(bytes) +
      " (nothing was written). Free disk space; writes are accepted again "
      "as soon as there is room");
}

Status FreeSpaceGuard::Reserve(uint64_t bytes) {
  if (min_free_bytes_ == 0) return Status::Ok();
  const bool stale = probes_ == 0 || clock_.NowMs() - probed_at_ >= recheck_ms_ ||
                     written_since_probe_ + bytes >= recheck_bytes_;
  if (!stale) {
    const uint64_t estimate =
        free_at_probe_ > written_since_probe_ ? free_at_probe_ - written_since_probe_ : 0;
    if (Verdict(estimate, bytes).ok()) return Status::Ok();
    // The estimate says no: ask the file system before refusing, someone may
    // have freed space since.
  }
  RETURN_IF_ERROR(Probe());
  return Verdict(free_at_probe_, bytes);
}

Status FreeSpaceGuard::CheckNow() {
  if (min_free_bytes_ == 0) return Status::Ok();
  RETURN_IF_ERROR(Probe());
  return Verdict(free_at_probe_, 0);
}

}  // namespace ztune::storage
