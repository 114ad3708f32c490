#include "common/protocol/results_in_place.h"

#include <algorithm>
#include <utility>
#include <variant>
#include <vector>

#include "common/utf8.h"

namespace ztune::protocol {
namespace {

// The general decoder's bounds on what a header may declare (msgpack_io.cc,
// HeaderLimits): a container over them fails there, so it is left to it.
constexpr uint64_t kMaxStrBytes = 64 << 20;

// A cursor over one header. Every read checks the bytes left; a false return
// means "not for this path", never "invalid" (the general decoder decides).
class Reader {
 public:
  explicit Reader(std::string_view bytes)
      : p_(reinterpret_cast<const unsigned char*>(bytes.data())),
        n_(bytes.size()),
        max_array_(std::min<uint64_t>(1'000'000, bytes.size())),
        max_map_(std::min<uint64_t>(100'000, bytes.size() / 2)) {}

  bool AtEnd() const { return at_ == n_; }
  size_t at() const { return at_; }
  const char* data(size_t pos) const { return reinterpret_cast<const char*>(p_ + pos); }

  // A map header of any width.
  bool Map(uint32_t* count) { return Container(0x80, 0xde, max_map_, count); }
  // An array header of any width.
  bool Array(uint32_t* count) { return Container(0x90, 0xdc, max_array_, count); }

  // A string of any header width whose bytes are valid UTF-8 (the general
  // decoder would replace invalid ones).
  bool Utf8(std::string_view* s) {
    uint8_t tag = 0;
    if (!Tag(&tag)) return false;
    uint64_t len = 0;
    if (tag >= 0xa0 && tag <= 0xbf) {
      len = tag & 0x1f;
    } else if (tag >= 0xd9 && tag <= 0xdb) {
      if (!BigEndian(1 << (tag - 0xd9), &len)) return false;
    } else {
      return false;
    }
    return Body(len, s) && IsValidUtf8(*s);
  }

  // A non-negative integer as msgpack-c reads it into POSITIVE_INTEGER from
  // a fixint or a uint of any width (an int8..int64 holding one is left to
  // the general path).
  bool Uint(uint64_t* v) {
    uint8_t tag = 0;
    if (!Tag(&tag)) return false;
    if (tag <= 0x7f) {
      *v = tag;
      return true;
    }
    if (tag < 0xcc || tag > 0xcf) return false;
    return BigEndian(1 << (tag - 0xcc), v);
  }

  bool Bool(bool* v) {
    uint8_t tag = 0;
    if (!Tag(&tag) || (tag != 0xc2 && tag != 0xc3)) return false;
    *v = tag == 0xc3;
    return true;
  }

  // One value exactly as msgpack_io::Normalize writes it, nested at most
  // kMaxInPlaceResultDepth deep: minimal integer, length and count
  // headers, floats as float64, valid UTF-8, string keys, no ext types.
  bool NormalValue(int depth) {
    if (depth > kMaxInPlaceResultDepth) return false;
    uint8_t tag = 0;
    if (!Tag(&tag)) return false;
    if (tag <= 0x7f || tag >= 0xe0) return true;  // fixints
    if (tag <= 0x8f) return NormalMapBody(tag & 0x0f, depth);
    if (tag <= 0x9f) return NormalArrayBody(tag & 0x0f, depth);
    if (tag <= 0xbf) return NormalStrBody(tag & 0x1f);
    uint64_t v = 0;
    switch (tag) {
      case 0xc0:                  // nil
      case 0xc2:                  // false
      case 0xc3: return true;     // true
      case 0xcb: return Skip(8);  // float64
      case 0xcc: return BigEndian(1, &v) && v >= (1u << 7);
      case 0xcd: return BigEndian(2, &v) && v >= (1u << 8);
      case 0xce: return BigEndian(4, &v) && v >= (1u << 16);
      case 0xcf: return BigEndian(8, &v) && v >= (uint64_t{1} << 32);
      // Negative integers in the narrowest signed width msgpack-c picks.
      case 0xd0: return BigEndian(1, &v) && static_cast<int8_t>(v) < -(1 << 5);
      case 0xd1: return BigEndian(2, &v) && static_cast<int16_t>(v) < -(1 << 7);
      case 0xd2: return BigEndian(4, &v) && static_cast<int32_t>(v) < -(1 << 15);
      case 0xd3: return BigEndian(8, &v) && static_cast<int64_t>(v) < -(int64_t{1} << 31);
      case 0xc4: return BigEndian(1, &v) && SkipBytes(v);
      case 0xc5: return BigEndian(2, &v) && v >= (1u << 8) && SkipBytes(v);
      case 0xc6: return BigEndian(4, &v) && v >= (1u << 16) && SkipBytes(v);
      case 0xd9: return BigEndian(1, &v) && v >= 32 && NormalStrBody(v);
      case 0xda: return BigEndian(2, &v) && v >= (1u << 8) && NormalStrBody(v);
      case 0xdb: return BigEndian(4, &v) && v >= (1u << 16) && NormalStrBody(v);
      case 0xdc: return BigEndian(2, &v) && v >= 16 && NormalArrayBody(v, depth);
      case 0xdd: return BigEndian(4, &v) && v >= (1u << 16) && NormalArrayBody(v, depth);
      case 0xde: return BigEndian(2, &v) && v >= 16 && NormalMapBody(v, depth);
      case 0xdf: return BigEndian(4, &v) && v >= (1u << 16) && NormalMapBody(v, depth);
      default: return false;  // float32, ext types, 0xc1
    }
  }

 private:
  bool Tag(uint8_t* tag) {
    if (at_ >= n_) return false;
    *tag = p_[at_++];
    return true;
  }
  bool BigEndian(int width, uint64_t* v) {
    if (n_ - at_ < static_cast<size_t>(width)) return false;
    uint64_t x = 0;
    for (int k = 0; k < width; ++k) x = (x << 8) | p_[at_ + k];
    at_ += width;
    *v = x;
    return true;
  }
  bool Skip(uint64_t len) {
    if (n_ - at_ < len) return false;
    at_ += len;
    return true;
  }
  bool SkipBytes(uint64_t len) { return len <= kMaxStrBytes && Skip(len); }
  bool Body(uint64_t len, std::string_view* s) {
    if (len > kMaxStrBytes || n_ - at_ < len) return false;
    *s = std::string_view(data(at_), len);
    at_ += len;
    return true;
  }
  bool NormalStrBody(uint64_t len) {
    std::string_view s;
    return Body(len, &s) && IsValidUtf8(s);
  }
  // A key: a string, in its normal form (the general decoder refuses a key
  // that is not a string).
  bool NormalKey(int depth) {
    if (at_ >= n_) return false;
    const uint8_t tag = p_[at_];
    const bool str = (tag >= 0xa0 && tag <= 0xbf) || (tag >= 0xd9 && tag <= 0xdb);
    return str && NormalValue(depth);
  }
  // A container header: a fix form (`fix`..`fix`+15) or the 16- and 32-bit
  // forms (`wide`, `wide`+1), its count within `max`.
  bool Container(uint8_t fix, uint8_t wide, uint64_t max, uint32_t* count) {
    uint8_t tag = 0;
    if (!Tag(&tag)) return false;
    uint64_t c = 0;
    if (tag >= fix && tag <= fix + 0x0f) {
      c = tag & 0x0f;
    } else if (tag == wide || tag == wide + 1) {
      if (!BigEndian(tag == wide ? 2 : 4, &c)) return false;
    } else {
      return false;
    }
    if (c > max) return false;
    *count = static_cast<uint32_t>(c);
    return true;
  }
  bool NormalArrayBody(uint64_t count, int depth) {
    if (count > max_array_) return false;
    for (uint64_t k = 0; k < count; ++k) {
      if (!NormalValue(depth + 1)) return false;
    }
    return true;
  }
  bool NormalMapBody(uint64_t count, int depth) {
    if (count > max_map_) return false;
    for (uint64_t k = 0; k < count; ++k) {
      if (!NormalKey(depth + 1) || !NormalValue(depth + 1)) return false;
    }
    return true;
  }

  const unsigned char* p_;
  size_t n_;
  size_t at_ = 0;
  uint64_t max_array_;
  uint64_t max_map_;
};

// Reads a map's keys one by one: each must be one of `names` and appear once
// (the general decoder takes the first of repeated keys and skips unknown
// ones; both are left to it). Returns the key's index, or -1.
template <size_t N>
int KeyIndex(Reader& r, const std::string_view (&names)[N], uint32_t* seen) {
  std::string_view key;
  if (!r.Utf8(&key)) return -1;
  for (size_t i = 0; i < N; ++i) {
    if (key != names[i]) continue;
    if ((*seen & (1u << i)) != 0) return -1;
    *seen |= 1u << i;
    return static_cast<int>(i);
  }
  return -1;
}

bool ReadRecord(Reader& r, ResultRecord* out) {
  static constexpr std::string_view kKeys[] = {"seq", "result"};
  uint32_t count = 0;
  if (!r.Map(&count)) return false;
  uint32_t seen = 0;
  for (uint32_t k = 0; k < count; ++k) {
    switch (KeyIndex(r, kKeys, &seen)) {
      case 0:
        if (!r.Uint(&out->seq)) return false;
        break;
      case 1: {
        const size_t start = r.at();
        if (!r.NormalValue(0)) return false;
        out->result.bytes.assign(r.data(start), r.at() - start);
        break;
      }
      default: return false;
    }
  }
  return seen == 0b11;  // both required
}

bool ReadBatch(Reader& r, ResultBatch* out) {
  static constexpr std::string_view kKeys[] = {"rid",     "trial_id", "attempt",
                                               "results", "failed",   "error"};
  uint32_t count = 0;
  if (!r.Map(&count)) return false;
  uint32_t seen = 0;
  std::string_view s;
  for (uint32_t k = 0; k < count; ++k) {
    switch (KeyIndex(r, kKeys, &seen)) {
      case 0:
        if (!r.Uint(&out->rid)) return false;
        break;
      case 1:
        if (!r.Utf8(&s)) return false;
        out->trial_id.assign(s);
        break;
      case 2:
        if (!r.Uint(&out->attempt)) return false;
        break;
      case 3: {
        uint32_t n = 0;
        if (!r.Array(&n)) return false;
        // Grown as records are read: a count is only a claim.
        out->results.reserve(std::min<uint32_t>(n, 64));
        for (uint32_t i = 0; i < n; ++i) {
          if (!ReadRecord(r, &out->results.emplace_back())) return false;
        }
        break;
      }
      case 4:
        if (!r.Bool(&out->failed)) return false;
        break;
      case 5:
        if (!r.Utf8(&s)) return false;
        out->error.assign(s);
        break;
      default: return false;
    }
  }
  return (seen & 0b111) == 0b111;  // rid, trial_id and attempt are required
}

}  // namespace

std::optional<Body> DecodeResultsInPlace(size_t command_index, std::string_view header) {
  static const size_t kResult = Body(std::in_place_type<ResultBatch>).index();
  static const size_t kResults = Body(std::in_place_type<Results>).index();
  Reader r(header);
  if (command_index == kResult) {
    ResultBatch batch;
    if (!ReadBatch(r, &batch) || !r.AtEnd()) return std::nullopt;
    return Body(std::move(batch));
  }
  if (command_index != kResults) return std::nullopt;
  uint32_t count = 0;
  if (!r.Map(&count) || count != 1) return std::nullopt;
  std::string_view key;
  uint32_t n = 0;
  if (!r.Utf8(&key) || key != "batches" || !r.Array(&n)) return std::nullopt;
  Results results;
  results.batches.reserve(std::min<uint32_t>(n, kMaxCoalesced));
  for (uint32_t i = 0; i < n; ++i) {
    if (!ReadBatch(r, &results.batches.emplace_back())) return std::nullopt;
  }
  if (!r.AtEnd()) return std::nullopt;
  return Body(std::move(results));
}

}  // namespace ztune::protocol
