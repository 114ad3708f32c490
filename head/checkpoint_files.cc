#include "head/checkpoint_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

#include <spdlog/spdlog.h>

#include "common/check.h"

namespace ztune::head {
namespace {

constexpr std::string_view kRefMagic("ZTFILE1\0", 8);
constexpr std::string_view kSuffix = ".ckpt";
constexpr std::string_view kPartSuffix = ".part";
// Buffered writes: writeback is started every this many bytes.
constexpr uint64_t kWritebackStep = 16ull << 20;
// O_DIRECT: the staging buffer, and the alignment of its address, its file
// offsets and its lengths (the largest logical block size in use).
constexpr size_t kStagingBytes = 1 << 20;
constexpr size_t kDirectAlign = 4096;

Status Errno(const std::string& what) {
  const int err = errno;
  return Status::IOError(what + ": " + std::strerror(err));
}

Status FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open " + dir);
  const int r = ::fsync(fd);
  Status s = r == 0 ? Status::Ok() : Errno("cannot fsync " + dir);
  ::close(fd);
  return s;
}

// Names in `dir` ending with `suffix`.
Result<std::vector<std::string>> NamesIn(const std::string& dir, std::string_view suffix) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Errno("cannot list " + dir);
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    if (std::string_view(e->d_name).ends_with(suffix)) names.emplace_back(e->d_name);
  }
  ::closedir(d);
  return names;
}

}  // namespace

std::string EncodeCheckpointFileRef(const CheckpointFileRef& ref) {
  std::string out(kRefMagic);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((ref.size >> (8 * i)) & 0xff));
  out += ref.name;
  return out;
}

Result<std::optional<CheckpointFileRef>> DecodeCheckpointFileRef(std::string_view value) {
  if (value.substr(0, kRefMagic.size()) != kRefMagic) return std::optional<CheckpointFileRef>();
  if (value.size() < kRefMagic.size() + 8) {
    return Status::Corruption("checkpoint file reference truncated");
  }
  CheckpointFileRef ref;
  for (size_t i = 0; i < 8; ++i) {
    ref.size |= static_cast<uint64_t>(static_cast<uint8_t>(value[kRefMagic.size() + i])) << (8 * i);
  }
  ref.name = std::string(value.substr(kRefMagic.size() + 8));
  if (!IsCheckpointFileName(ref.name)) {
    return Status::Corruption("checkpoint file reference names no checkpoint file");
  }
  if (ref.size == 0) return Status::Corruption("checkpoint file reference of 0 bytes");
  return std::optional<CheckpointFileRef>(std::move(ref));
}

bool IsCheckpointFileName(std::string_view name) {
  if (!name.ends_with(kSuffix) || name.size() == kSuffix.size() || name.size() > 64) return false;
  for (char c : name.substr(0, name.size() - kSuffix.size())) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == '-')) return false;
  }
  return true;
}

// ---------------------------------------------------------------- upload

std::string CheckpointUpload::PartPath() const {
  return dir_ + "/" + name_ + std::string(kPartSuffix);
}

CheckpointUpload::CheckpointUpload(std::string dir, std::string name, int fd, uint64_t size,
                                   bool direct)
    : dir_(std::move(dir)),
      name_(std::move(name)),
      fd_(fd),
      size_(size),
      direct_(direct),
      started_(std::chrono::steady_clock::now()) {
  if (direct_) {
    staging_ = {static_cast<char*>(std::aligned_alloc(kDirectAlign, kStagingBytes)), &std::free};
    CHECK(staging_ != nullptr);
  }
}

CheckpointUpload::~CheckpointUpload() {
  if (finished_) return;
  ::close(fd_);
  ::unlink(PartPath().c_str());
}

Status CheckpointUpload::WriteAt(const char* data, size_t n, uint64_t offset) {
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::pwrite(fd_, data + done, n - done, static_cast<off_t>(offset + done));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return Errno("cannot write checkpoint file " + PartPath());
    done += static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status CheckpointUpload::FlushStaging() {
  const size_t n = static_cast<size_t>(written_ - staged_at_);
  if (n == 0) return Status::Ok();
  // Only the file's last piece is short: padded with zeros to the block
  // size, cut back by Finish's ftruncate.
  const size_t padded = (n + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
  std::memset(staging_.get() + n, 0, padded - n);
  RETURN_IF_ERROR(WriteAt(staging_.get(), padded, staged_at_));
  staged_at_ = written_;
  return Status::Ok();
}

Status CheckpointUpload::Append(std::string_view bytes) {
  CHECK(!finished_);
  if (bytes.size() > size_ - written_) {
    return Status::InvalidArgument("checkpoint file " + name_ + " given more than its " +
                                   std::to_string(size_) + " bytes");
  }
  if (direct_) {
    while (!bytes.empty()) {
      const size_t in_buffer = static_cast<size_t>(written_ - staged_at_);
      const size_t take = std::min(bytes.size(), kStagingBytes - in_buffer);
      std::memcpy(staging_.get() + in_buffer, bytes.data(), take);
      written_ += take;
      bytes.remove_prefix(take);
      if (written_ - staged_at_ == kStagingBytes) RETURN_IF_ERROR(FlushStaging());
    }
    return Status::Ok();
  }
  RETURN_IF_ERROR(WriteAt(bytes.data(), bytes.size(), written_));
  written_ += bytes.size();
  if (written_ - writeback_started_ >= kWritebackStep || written_ == size_) {
    // Starts writing these pages to disk without waiting for them.
    ::sync_file_range(fd_, static_cast<off_t>(writeback_started_),
                      static_cast<off_t>(written_ - writeback_started_), SYNC_FILE_RANGE_WRITE);
    writeback_started_ = written_;
  }
  return Status::Ok();
}

Result<CheckpointFileRef> CheckpointUpload::Finish() {
  CHECK(!finished_);
  if (written_ != size_) {
    return Status::Internal("checkpoint file " + name_ + " finished at " +
                            std::to_string(written_) + " of " + std::to_string(size_) + " bytes");
  }
  if (direct_) {
    RETURN_IF_ERROR(FlushStaging());
    if (size_ % kDirectAlign != 0 && ::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
      return Errno("cannot truncate checkpoint file " + PartPath());
    }
  }
  // O_DIRECT bypasses the page cache, not the disk's own cache: the sync
  // is what makes the bytes (and the file's size) durable either way.
  if (::fdatasync(fd_) != 0) return Errno("cannot sync checkpoint file " + PartPath());
  const std::string final_path = dir_ + "/" + name_;
  if (::rename(PartPath().c_str(), final_path.c_str()) != 0) {
    return Errno("cannot rename " + PartPath());
  }
  finished_ = true;
  ::close(fd_);
  RETURN_IF_ERROR(FsyncDir(dir_));
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started_)
          .count();
  spdlog::info("checkpoint file {}: {} bytes durable {:.1f} ms after its header ({:.0f} MB/s)",
               name_, size_, ms, ms > 0 ? static_cast<double>(size_) / ms / 1000.0 : 0.0);
  return CheckpointFileRef{name_, size_};
}

// ---------------------------------------------------------------- files

CheckpointFiles::CheckpointFiles(std::string dir, bool direct)
    : dir_(std::move(dir)),
      direct_(direct),
      name_prefix_(std::random_device{}() * 0x100000000ull ^ std::random_device{}()) {}

Status CheckpointFiles::Open() {
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) return Errno("cannot create " + dir_);
  ASSIGN_OR_RETURN(std::vector<std::string> parts, NamesIn(dir_, kPartSuffix));
  for (const auto& p : parts) {
    // A transfer a crash cut short: nothing refers to it.
    if (::unlink((dir_ + "/" + p).c_str()) != 0) return Errno("cannot remove " + dir_ + "/" + p);
  }
  if (!parts.empty()) spdlog::info("removed {} partial checkpoint files", parts.size());
  return Status::Ok();
}

std::string CheckpointFiles::NewName() {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%016llx-%llu", static_cast<unsigned long long>(name_prefix_),
                static_cast<unsigned long long>(next_name_++));
  // Hex digits and '-' only, as IsCheckpointFileName wants: the counter is
  // decimal digits.
  return std::string(buf) + std::string(kSuffix);
}

Result<std::unique_ptr<CheckpointUpload>> CheckpointFiles::Begin(uint64_t size) {
  const std::string name = NewName();
  const std::string part = dir_ + "/" + name + std::string(kPartSuffix);
  bool direct = direct_;
  int fd = -1;
  if (direct) fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
  if (!direct || (fd < 0 && errno == EINVAL)) {
    // No O_DIRECT on this file system (tmpfs): through the page cache.
    direct = false;
    fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }
  if (fd < 0) return Errno("cannot create checkpoint file " + part);
  if (::fallocate(fd, 0, 0, static_cast<off_t>(size)) != 0 && errno != EOPNOTSUPP) {
    Status s = errno == ENOSPC
                   ? Status::ResourceExhausted("no space for a checkpoint of " +
                                               std::to_string(size) + " bytes in " + dir_)
                   : Errno("cannot reserve space for " + part);
    ::close(fd);
    ::unlink(part.c_str());
    return s;
  }
  return std::unique_ptr<CheckpointUpload>(new CheckpointUpload(dir_, name, fd, size, direct));
}

Result<std::unique_ptr<protocol::FilePayloadSource>> CheckpointFiles::Open(
    const CheckpointFileRef& ref) const {
  return protocol::FilePayloadSource::Open(dir_ + "/" + ref.name, ref.size);
}

Result<CheckpointFileRef> CheckpointFiles::Clone(const CheckpointFileRef& ref) {
  CheckpointFileRef copy{NewName(), ref.size};
  if (::link((dir_ + "/" + ref.name).c_str(), (dir_ + "/" + copy.name).c_str()) != 0) {
    return Errno("cannot link checkpoint file " + ref.name);
  }
  RETURN_IF_ERROR(FsyncDir(dir_));
  return copy;
}

void CheckpointFiles::RemovePending() {
  for (const auto& name : unadopted_) {
    spdlog::info("checkpoint file {} was not taken by any trial (its request was stale); removed",
                 name);
    pending_removal_.push_back(name);
  }
  unadopted_.clear();
  for (const auto& name : pending_removal_) {
    if (::unlink((dir_ + "/" + name).c_str()) != 0 && errno != ENOENT) {
      // Left behind: the next start removes it (nothing refers to it).
      spdlog::warn("cannot remove checkpoint file {}/{}: {}", dir_, name, std::strerror(errno));
    }
  }
  pending_removal_.clear();
}

Result<size_t> CheckpointFiles::RemoveUnreferenced(const std::set<std::string>& referenced) {
  ASSIGN_OR_RETURN(std::vector<std::string> names, NamesIn(dir_, kSuffix));
  size_t removed = 0;
  for (const auto& name : names) {
    if (referenced.count(name) > 0 || !IsCheckpointFileName(name)) continue;
    if (::unlink((dir_ + "/" + name).c_str()) != 0) return Errno("cannot remove " + name);
    ++removed;
  }
  return removed;
}

Result<std::vector<std::pair<std::string, uint64_t>>> CheckpointFiles::List() const {
  ASSIGN_OR_RETURN(std::vector<std::string> names, NamesIn(dir_, kSuffix));
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& name : names) {
    struct stat st {};
    if (::stat((dir_ + "/" + name).c_str(), &st) != 0) return Errno("cannot stat " + name);
    out.emplace_back(name, static_cast<uint64_t>(st.st_size));
  }
  return out;
}

}  // namespace ztune::head
