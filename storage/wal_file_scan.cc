// ScanWalFile (see wal_file_scan.h).
#include "storage/wal_file_scan.h"

#include <fstream>
#include <iterator>

#include "storage/blob_file_scan.h"

namespace ztune::storage {
namespace {

constexpr uint64_t kBlockSize = 32768;
constexpr uint64_t kHeaderSize = 7;
enum Type : unsigned { kZero = 0, kFull = 1, kFirst = 2, kMiddle = 3, kLast = 4 };

uint32_t Fixed32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint32_t>(u[0]) | static_cast<uint32_t>(u[1]) << 8 |
         static_cast<uint32_t>(u[2]) << 16 | static_cast<uint32_t>(u[3]) << 24;
}

// One step over the fragments of a log file.
struct Fragment {
  enum Kind { kOk, kEnd, kBad } kind;
  unsigned type = 0;
  std::string_view payload;
  std::string why;
};

Fragment End() { return Fragment{Fragment::kEnd, 0, {}, ""}; }

Fragment Next(const std::string& data, uint64_t* offset) {
  while (true) {
    const uint64_t left = kBlockSize - *offset % kBlockSize;
    if (left < kHeaderSize) {  // the block's trailer is zero padding
      *offset += left;
      continue;
    }
    if (*offset + kHeaderSize > data.size()) return End();  // torn header
    const char* h = data.data() + *offset;
    const uint64_t length = static_cast<unsigned char>(h[4]) |
                            static_cast<uint64_t>(static_cast<unsigned char>(h[5])) << 8;
    const unsigned type = static_cast<unsigned char>(h[6]);
    if (type == kZero && length == 0) {
      // Preallocated or padded space: nothing more in this block.
      *offset += left;
      if (*offset >= data.size()) return End();
      continue;
    }
    if (kHeaderSize + length > left) {
      return {Fragment::kBad,
              type,
              {},
              "fragment length " + std::to_string(length) + " runs past its block"};
    }
    if (*offset + kHeaderSize + length > data.size()) return End();  // torn payload
    const uint32_t crc = Crc32c(0, h + 6, 1 + length);
    if (MaskCrc(crc) != Fixed32(h)) return {Fragment::kBad, type, {}, "checksum mismatch"};
    if (type < kFull || type > kLast) {
      return {Fragment::kBad, type, {}, "unknown record type " + std::to_string(type)};
    }
    *offset += kHeaderSize + length;
    return {Fragment::kOk, type, std::string_view(h + kHeaderSize, length), ""};
  }
}

}  // namespace

WalFileScan ScanWalFile(const std::string& path,
                        const std::function<bool(std::string_view record)>& fn) {
  WalFileScan scan;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    scan.error = "cannot open " + path;
    return scan;
  }
  const std::string data((std::istreambuf_iterator<char>(in)), {});
  uint64_t offset = 0;
  std::string record;
  bool in_record = false;
  bool deliver = true;
  while (true) {
    const uint64_t at = offset;
    Fragment f = Next(data, &offset);
    if (f.kind == Fragment::kEnd) break;
    if (f.kind == Fragment::kBad || (f.type == kMiddle || f.type == kLast) != in_record) {
      if (f.kind != Fragment::kBad) f.why = "fragment out of order";
      if (!scan.damaged) {
        scan.damaged = true;
        scan.damage_offset = at;
        scan.damage = f.why;
        scan.bytes_after_damage = data.size() - at;
        deliver = false;
      }
      // Resume at the next block, as RocksDB's skipping recovery does.
      in_record = false;
      record.clear();
      offset = at - at % kBlockSize + kBlockSize;
      if (offset >= data.size()) break;
      continue;
    }
    if (f.type == kFull || f.type == kFirst) record.assign(f.payload);
    if (f.type == kMiddle || f.type == kLast) record.append(f.payload);
    in_record = f.type == kFirst || f.type == kMiddle;
    if (in_record) continue;
    if (!deliver) {
      ++scan.records_after_damage;
      continue;
    }
    ++scan.records;
    if (!fn(record)) deliver = false;
  }
  return scan;
}

}  // namespace ztune::storage
