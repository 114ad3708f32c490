#include "common/checkpoint/directory_archive.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "common/checkpoint/checkpoint_envelope.h"

namespace ztune::checkpoint {
namespace fs = std::filesystem;
namespace {

constexpr char kMagic[] = "ZTDIR";
constexpr size_t kMagicLen = 5;
constexpr uint8_t kVersion = 1;
constexpr uint8_t kKindDir = 1;
constexpr uint8_t kKindFile = 2;

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

struct PackEntry {
  std::string path;  // relative, '/'-separated
  uint8_t kind = kKindFile;
  uint32_t mode = 0;
  uint64_t size = 0;
};

// Reads bytes in order; every getter fails (sets ok_ false) past the end.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  bool U8(uint8_t& v) {
    if (!Need(1)) return false;
    v = static_cast<uint8_t>(bytes_[pos_++]);
    return true;
  }
  bool U32(uint32_t& v) {
    if (!Need(4)) return false;
    v = 0;
    for (int i = 0; i < 4; ++i)
      v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes_[pos_++])) << (8 * i);
    return true;
  }
  bool U64(uint64_t& v) {
    if (!Need(8)) return false;
    v = 0;
    for (int i = 0; i < 8; ++i)
      v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes_[pos_++])) << (8 * i);
    return true;
  }
  bool Bytes(uint64_t n, std::string_view& v) {
    if (!Need(n)) return false;
    v = bytes_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  size_t pos() const { return pos_; }

 private:
  bool Need(uint64_t n) const { return n <= bytes_.size() - pos_; }
  std::string_view bytes_;
  size_t pos_ = 0;
};

// Whether `path` is relative and stays inside the directory: no empty, "."
// or ".." component, no leading '/', no NUL.
bool SafeRelativePath(std::string_view path) {
  if (path.empty() || path.front() == '/' || path.find('\0') != std::string_view::npos) {
    return false;
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

Status ReadFileInto(const fs::path& path, uint64_t size, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot read " + path.string() + ": " + std::strerror(errno));
  const size_t at = out.size();
  out.resize(at + size);
  in.read(out.data() + at, static_cast<std::streamsize>(size));
  if (static_cast<uint64_t>(in.gcount()) != size) {
    return Status::IOError(path.string() + " changed while it was being packed (expected " +
                           std::to_string(size) + " bytes)");
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> PackDirectory(const std::string& dir, uint64_t max_bytes) {
  return PackDirectory(dir, max_bytes, nullptr, "checkpoint");
}

Result<std::string> PackDirectory(const std::string& dir, uint64_t max_bytes,
                                  const PackFilter& leave_out, const std::string& what) {
  std::vector<PackEntry> entries;
  std::error_code ec;
  const fs::path root(dir);
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec);
  if (ec) return Status::IOError("cannot list " + what + " directory " + dir + ": " + ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec)
      return Status::IOError("cannot list " + what + " directory " + dir + ": " + ec.message());
    const fs::path& p = it->path();
    const std::string rel = p.lexically_relative(root).generic_string();
    struct stat st {};
    if (lstat(p.c_str(), &st) != 0) {
      return Status::IOError("cannot stat " + p.string() + ": " + std::strerror(errno));
    }
    if (leave_out && leave_out(rel, S_ISDIR(st.st_mode))) {
      if (S_ISDIR(st.st_mode)) it.disable_recursion_pending();
      continue;
    }
    PackEntry e;
    e.path = rel;
    e.mode = static_cast<uint32_t>(st.st_mode & 07777);
    if (S_ISDIR(st.st_mode)) {
      e.kind = kKindDir;
    } else if (S_ISREG(st.st_mode)) {
      e.kind = kKindFile;
      e.size = static_cast<uint64_t>(st.st_size);
    } else {
      return Status::InvalidArgument(what + " entry " + rel + " is " +
                                     (S_ISLNK(st.st_mode) ? std::string("a symbolic link")
                                                          : std::string("not a regular file")) +
                                     "; a " + what +
                                     " directory may hold only files and directories");
    }
    if (rel.size() > kMaxArchivePathBytes) {
      return Status::InvalidArgument(what + " path longer than " +
                                     std::to_string(kMaxArchivePathBytes) + " bytes: " + rel);
    }
    entries.push_back(std::move(e));
    if (entries.size() > kMaxArchiveEntries) {
      return Status::ResourceExhausted(what + " directory " + dir + " holds more than " +
                                       std::to_string(kMaxArchiveEntries) + " entries");
    }
  }
  std::sort(entries.begin(), entries.end(),
            [](const PackEntry& a, const PackEntry& b) { return a.path < b.path; });
  uint64_t total = kMagicLen + 1 + 4 + 4;
  for (const auto& e : entries)
    total += 1 + 4 + 4 + e.path.size() + (e.kind == kKindFile ? 8 + e.size : 0);
  if (total > max_bytes) {
    return Status::ResourceExhausted(what + " directory " + dir + " packs to " +
                                     std::to_string(total) + " bytes, above the limit of " +
                                     std::to_string(max_bytes));
  }
  std::string out;
  out.reserve(total);
  out.append(kMagic, kMagicLen);
  out.push_back(static_cast<char>(kVersion));
  PutU32(out, static_cast<uint32_t>(entries.size()));
  for (const auto& e : entries) {
    out.push_back(static_cast<char>(e.kind));
    PutU32(out, e.mode);
    PutU32(out, static_cast<uint32_t>(e.path.size()));
    out += e.path;
    if (e.kind == kKindFile) {
      PutU64(out, e.size);
      if (Status s = ReadFileInto(root / e.path, e.size, out); !s.ok()) return s;
    }
  }
  PutU32(out, Crc32(out));
  return out;
}

bool IsDirectoryArchive(std::string_view bytes) {
  return bytes.substr(0, kMagicLen) == std::string_view(kMagic, kMagicLen);
}

Status UnpackDirectory(std::string_view bytes, const std::string& dir) {
  auto corrupt = [](const std::string& why) {
    return Status::Corruption("checkpoint directory archive: " + why);
  };
  if (bytes.size() < kMagicLen + 1 + 4 + 4)
    return corrupt("truncated (" + std::to_string(bytes.size()) + " bytes)");
  if (bytes.substr(0, kMagicLen) != std::string_view(kMagic, kMagicLen)) {
    return corrupt("bad magic (not a packed directory)");
  }
  const std::string_view body = bytes.substr(0, bytes.size() - 4);
  Reader trailer(bytes.substr(bytes.size() - 4));
  uint32_t stored_crc = 0;
  trailer.U32(stored_crc);
  if (Crc32(body) != stored_crc) return corrupt("checksum mismatch");

  struct Entry {
    uint8_t kind;
    uint32_t mode;
    std::string_view path;
    std::string_view data;
  };
  Reader r(body);
  std::string_view magic;
  uint8_t version = 0;
  uint32_t count = 0;
  r.Bytes(kMagicLen, magic);
  if (!r.U8(version) || version != kVersion)
    return corrupt("unknown version " + std::to_string(version));
  if (!r.U32(count) || count > kMaxArchiveEntries) return corrupt("bad entry count");
  std::vector<Entry> entries;
  entries.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    Entry e{};
    uint32_t len = 0;
    if (!r.U8(e.kind) || !r.U32(e.mode) || !r.U32(len))
      return corrupt("truncated entry " + std::to_string(i));
    if (e.kind != kKindDir && e.kind != kKindFile)
      return corrupt("entry " + std::to_string(i) + " has unknown kind");
    if (len > kMaxArchivePathBytes || !r.Bytes(len, e.path))
      return corrupt("bad path in entry " + std::to_string(i));
    if (!SafeRelativePath(e.path)) {
      return corrupt("entry path '" + std::string(e.path) +
                     "' is absolute or leaves the directory");
    }
    if (!entries.empty() && !(entries.back().path < e.path)) {
      return corrupt("entries out of order or repeated at '" + std::string(e.path) + "'");
    }
    if (e.kind == kKindFile) {
      uint64_t size = 0;
      if (!r.U64(size) || !r.Bytes(size, e.data))
        return corrupt("truncated file " + std::string(e.path));
    }
    entries.push_back(e);
  }
  if (r.pos() != body.size())
    return corrupt(std::to_string(body.size() - r.pos()) + " trailing bytes");

  std::error_code ec;
  if (!fs::is_directory(dir, ec) || !fs::is_empty(dir, ec)) {
    return Status::InvalidArgument("restore directory " + dir + " must exist and be empty");
  }
  const fs::path root(dir);
  for (const auto& e : entries) {
    const fs::path p = root / std::string(e.path);
    if (e.kind == kKindDir) {
      fs::create_directories(p, ec);
      if (ec) return Status::IOError("cannot create " + p.string() + ": " + ec.message());
    } else {
      fs::create_directories(p.parent_path(), ec);
      if (ec)
        return Status::IOError("cannot create " + p.parent_path().string() + ": " + ec.message());
      std::ofstream out(p, std::ios::binary | std::ios::trunc);
      out.write(e.data.data(), static_cast<std::streamsize>(e.data.size()));
      out.close();
      if (!out) return Status::IOError("cannot write " + p.string() + ": " + std::strerror(errno));
    }
    // Owner bits at least rw(x) so that the trainable can read what it saved.
    const uint32_t mode = (e.mode & 0777) | (e.kind == kKindDir ? 0700 : 0600);
    if (chmod(p.c_str(), mode) != 0) {
      return Status::IOError("cannot set mode of " + p.string() + ": " + std::strerror(errno));
    }
  }
  return Status::Ok();
}

}  // namespace ztune::checkpoint
