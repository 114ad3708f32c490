// BlobFileIndex and CRC32C (see blob_file_scan.h).
#include "storage/blob_file_scan.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace ztune::storage {
namespace {

namespace fs = std::filesystem;

// db/blob/blob_log_format.h, RocksDB 7.8.
constexpr uint32_t kBlobMagic = 2395959;
constexpr uint32_t kBlobVersion = 1;
constexpr size_t kFileHeaderSize = 30;
constexpr size_t kRecordHeaderSize = 32;
constexpr size_t kFooterSize = 32;
constexpr uint32_t kMaskDelta = 0xa282ead8u;

const std::array<uint32_t, 256>& CrcTable() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

uint32_t Fixed32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint32_t>(u[0]) | static_cast<uint32_t>(u[1]) << 8 |
         static_cast<uint32_t>(u[2]) << 16 | static_cast<uint32_t>(u[3]) << 24;
}

uint64_t Fixed64(const char* p) {
  return static_cast<uint64_t>(Fixed32(p)) | static_cast<uint64_t>(Fixed32(p + 4)) << 32;
}

bool ReadAt(std::ifstream& in, uint64_t offset, char* buf, size_t n) {
  in.clear();
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(buf, static_cast<std::streamsize>(n));
  return static_cast<size_t>(in.gcount()) == n;
}

}  // namespace

uint32_t Crc32c(uint32_t crc, const char* data, size_t n) {
  const auto& table = CrcTable();
  uint32_t c = crc ^ 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c = table[(c ^ static_cast<unsigned char>(data[i])) & 0xff] ^ (c >> 8);
  }
  return c ^ 0xffffffffu;
}

uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

Result<BlobFileIndex> BlobFileIndex::Build(const std::string& dir) {
  BlobFileIndex index;
  std::error_code ec;
  std::vector<std::pair<uint64_t, std::string>> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= 5 || name.substr(name.size() - 5) != ".blob") continue;
    uint64_t number = 0;
    try {
      number = std::stoull(name.substr(0, name.size() - 5));
    } catch (const std::exception&) {
      continue;  // not one of RocksDB's
    }
    files.emplace_back(number, it->path().string());
  }
  if (ec) return Status::IOError("cannot list " + dir + ": " + ec.message());
  std::sort(files.begin(), files.end());
  for (const auto& [number, path] : files) index.IndexFile(path, number);
  // Newest file first, so Read prefers the copy blob garbage collection
  // relocated last (the bytes are the same).
  for (auto& [key, refs] : index.refs_) {
    std::sort(refs.begin(), refs.end(),
              [](const Ref& a, const Ref& b) { return a.file_number > b.file_number; });
  }
  return index;
}

void BlobFileIndex::IndexFile(const std::string& path, uint64_t file_number) {
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  char header[kFileHeaderSize];
  if (ec || !in || size < kFileHeaderSize || !ReadAt(in, 0, header, kFileHeaderSize)) {
    problems_.push_back(path + ": unreadable blob file header");
    return;
  }
  if (Fixed32(header) != kBlobMagic || Fixed32(header + 4) != kBlobVersion) {
    problems_.push_back(path + ": not a blob file of a known version");
    return;
  }
  if (header[13] != 0) {
    problems_.push_back(path + ": compressed blobs, skipped");
    return;
  }
  ++files_;
  uint64_t offset = kFileHeaderSize;
  std::string key;
  while (offset + kRecordHeaderSize <= size) {
    char rec[kRecordHeaderSize];
    if (!ReadAt(in, offset, rec, kRecordHeaderSize)) break;
    if (MaskCrc(Crc32c(0, rec, 24)) != Fixed32(rec + 24)) {
      // The footer sits in the last 32 bytes of a finished file; anything
      // else is damage after which no record can be found.
      if (offset + kFooterSize != size) {
        problems_.push_back(path + ": damaged record header at offset " + std::to_string(offset) +
                            "; the rest of the file is unreadable");
      }
      break;
    }
    const uint64_t key_size = Fixed64(rec);
    const uint64_t value_size = Fixed64(rec + 8);
    const uint64_t value_offset = offset + kRecordHeaderSize + key_size;
    if (key_size > size || value_size > size || value_offset + value_size > size) {
      problems_.push_back(path + ": record at offset " + std::to_string(offset) +
                          " runs past the end of the file");
      break;
    }
    key.resize(key_size);
    if (!ReadAt(in, offset + kRecordHeaderSize, key.data(), key_size)) break;
    refs_[key].push_back(Ref{file_number, path, value_offset, value_size, Fixed32(rec + 28)});
    ++records_;
    offset = value_offset + value_size;
  }
}

std::optional<std::string> BlobFileIndex::Read(std::string_view key) const {
  const auto it = refs_.find(key);
  if (it == refs_.end()) return std::nullopt;
  for (const Ref& ref : it->second) {
    std::ifstream in(ref.path, std::ios::binary);
    std::string value(ref.value_size, '\0');
    if (!in || !ReadAt(in, ref.value_offset, value.data(), value.size())) continue;
    const uint32_t crc = Crc32c(Crc32c(0, key.data(), key.size()), value.data(), value.size());
    if (MaskCrc(crc) == ref.blob_crc) return value;
  }
  return std::nullopt;
}

}  // namespace ztune::storage
