#include "common/protocol/codec.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>
#include <type_traits>
#include <utility>

#include <msgpack.hpp>

#include "common/utf8.h"

namespace ztune::protocol {
namespace {

constexpr int kMaxJsonDepth = 64;

// ---------- encoding ----------

using Packer = msgpack::packer<msgpack::sbuffer>;

// msgpack-c packs an integral double as an integer, and its range check lets
// exactly 2^64 through to a uint64 conversion, which is undefined (found by
// tests/fuzz/fuzz_codec: a uint64 near the maximum decodes to that double).
// That one value is written as a float64 by hand.
void PackDouble(Packer& pk, double d) {
  if (d != 0x1p64) {
    pk.pack(d);
    return;
  }
  const auto bits = std::bit_cast<uint64_t>(d);
  char buf[9];
  buf[0] = static_cast<char>(0xcb);
  for (int i = 0; i < 8; ++i) buf[1 + i] = static_cast<char>((bits >> (56 - 8 * i)) & 0xff);
  pk.pack_bin_body(buf, sizeof(buf));  // a raw append: the body writer adds no header
}

void PackJson(Packer& pk, const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
    case Json::value_t::discarded: pk.pack_nil(); break;
    case Json::value_t::boolean: pk.pack(j.get<bool>()); break;
    case Json::value_t::number_integer: pk.pack(j.get<int64_t>()); break;
    case Json::value_t::number_unsigned: pk.pack(j.get<uint64_t>()); break;
    case Json::value_t::number_float: PackDouble(pk, j.get<double>()); break;
    case Json::value_t::string: pk.pack(j.get_ref<const std::string&>()); break;
    case Json::value_t::binary: {
      const auto& b = j.get_binary();
      pk.pack_bin(static_cast<uint32_t>(b.size()));
      pk.pack_bin_body(reinterpret_cast<const char*>(b.data()), static_cast<uint32_t>(b.size()));
      break;
    }
    case Json::value_t::array:
      pk.pack_array(static_cast<uint32_t>(j.size()));
      for (const auto& e : j) PackJson(pk, e);
      break;
    case Json::value_t::object:
      pk.pack_map(static_cast<uint32_t>(j.size()));
      for (auto it = j.begin(); it != j.end(); ++it) {
        pk.pack(it.key());
        PackJson(pk, it.value());
      }
      break;
  }
}

struct Encoder {
  Packer& pk;

  void Value(const uint64_t& v) { pk.pack(v); }
  void Value(const int64_t& v) { pk.pack(v); }
  void Value(const double& v) { PackDouble(pk, v); }
  void Value(const bool& v) { pk.pack(v); }
  void Value(const std::string& v) { pk.pack(v); }
  void Value(const Json& v) { PackJson(pk, v); }
  // Bytes that are one msgpack value already: appended as they are (the
  // body writer adds no header).
  void Value(const RawResult& r) {
    if (r.bytes.empty()) {
      pk.pack_nil();
      return;
    }
    pk.pack_bin_body(r.bytes.data(), static_cast<uint32_t>(r.bytes.size()));
  }
  void Value(const std::map<std::string, double>& m) {
    pk.pack_map(static_cast<uint32_t>(m.size()));
    for (const auto& [k, v] : m) {
      pk.pack(k);
      PackDouble(pk, v);
    }
  }
  template <class T>
  void Value(const std::vector<T>& vec) {
    pk.pack_array(static_cast<uint32_t>(vec.size()));
    for (const auto& e : vec) Value(e);
  }
  template <class T>
    requires requires(T t, Encoder e) { t.Visit(e); }
  void Value(const T& s) {
    FieldCounter c;
    const_cast<T&>(s).Visit(c);
    pk.pack_map(c.n);
    const_cast<T&>(s).Visit(*this);
  }
  template <class T>
  void operator()(const char* key, const T& v, Need) {
    pk.pack(std::string_view(key));
    Value(v);
  }

  struct FieldCounter {
    uint32_t n = 0;
    template <class T>
    void operator()(const char*, const T&, Need) { ++n; }
  };
};

// ---------- decoding ----------

Status TypeError(const std::string& path, const char* want) {
  return Status::InvalidArgument("field '" + path + "' must be " + want);
}

Result<Json> ObjectToJson(const msgpack::object& o, int depth) {
  if (depth > kMaxJsonDepth) return Status::InvalidArgument("value nested too deeply");
  switch (o.type) {
    case msgpack::type::NIL: return Json(nullptr);
    case msgpack::type::BOOLEAN: return Json(o.via.boolean);
    case msgpack::type::POSITIVE_INTEGER: return Json(o.via.u64);
    case msgpack::type::NEGATIVE_INTEGER: return Json(o.via.i64);
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: return Json(o.via.f64);
    case msgpack::type::STR: return Json(Utf8OrReplaced({o.via.str.ptr, o.via.str.size}));
    case msgpack::type::BIN: {
      std::vector<uint8_t> bytes(o.via.bin.ptr, o.via.bin.ptr + o.via.bin.size);
      return Json::binary(std::move(bytes));
    }
    case msgpack::type::ARRAY: {
      Json arr = Json::array();
      for (uint32_t i = 0; i < o.via.array.size; ++i) {
        ASSIGN_OR_RETURN(Json e, ObjectToJson(o.via.array.ptr[i], depth + 1));
        arr.push_back(std::move(e));
      }
      return arr;
    }
    case msgpack::type::MAP: {
      Json obj = Json::object();
      for (uint32_t i = 0; i < o.via.map.size; ++i) {
        const auto& kv = o.via.map.ptr[i];
        if (kv.key.type != msgpack::type::STR) {
          return Status::InvalidArgument("map keys must be strings");
        }
        ASSIGN_OR_RETURN(Json v, ObjectToJson(kv.val, depth + 1));
        obj[Utf8OrReplaced({kv.key.via.str.ptr, kv.key.via.str.size})] = std::move(v);
      }
      return obj;
    }
    case msgpack::type::EXT: return Status::InvalidArgument("msgpack ext types are not allowed");
  }
  return Status::InvalidArgument("unknown msgpack type");
}

// A sink for msgpack::packer that appends to a string (RawResult's bytes).
struct StringSink {
  std::string& out;
  void write(const char* p, size_t n) { out.append(p, n); }
};
using StringPacker = msgpack::packer<StringSink>;

void PackFloat64(StringSink& sink, double d) {
  const auto bits = std::bit_cast<uint64_t>(d);
  char buf[9];
  buf[0] = static_cast<char>(0xcb);
  for (int i = 0; i < 8; ++i) buf[1 + i] = static_cast<char>((bits >> (56 - 8 * i)) & 0xff);
  sink.write(buf, sizeof(buf));
}

void PackUtf8(StringPacker& pk, const char* p, uint32_t size) {
  std::string_view s(p, size);
  if (IsValidUtf8(s)) {
    pk.pack_str(size);
    pk.pack_str_body(p, size);
  } else {
    pk.pack(Utf8OrReplaced(s));
  }
}

// Re-encodes a decoded value in RawResult's normal form, with the rules of
// ObjectToJson (the same errors for the same input). A float is written as a
// float64 by hand: msgpack-c would pack an integral one as an integer, and
// ObjectToJson keeps it a float.
Status Normalize(const msgpack::object& o, int depth, StringSink& sink, StringPacker& pk) {
  if (depth > kMaxJsonDepth) return Status::InvalidArgument("value nested too deeply");
  switch (o.type) {
    case msgpack::type::NIL: pk.pack_nil(); return Status::Ok();
    case msgpack::type::BOOLEAN:
      if (o.via.boolean) {
        pk.pack_true();
      } else {
        pk.pack_false();
      }
      return Status::Ok();
    case msgpack::type::POSITIVE_INTEGER: pk.pack_uint64(o.via.u64); return Status::Ok();
    case msgpack::type::NEGATIVE_INTEGER: pk.pack_int64(o.via.i64); return Status::Ok();
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: PackFloat64(sink, o.via.f64); return Status::Ok();
    case msgpack::type::STR: PackUtf8(pk, o.via.str.ptr, o.via.str.size); return Status::Ok();
    case msgpack::type::BIN:
      pk.pack_bin(o.via.bin.size);
      pk.pack_bin_body(o.via.bin.ptr, o.via.bin.size);
      return Status::Ok();
    case msgpack::type::ARRAY:
      pk.pack_array(o.via.array.size);
      for (uint32_t i = 0; i < o.via.array.size; ++i) {
        RETURN_IF_ERROR(Normalize(o.via.array.ptr[i], depth + 1, sink, pk));
      }
      return Status::Ok();
    case msgpack::type::MAP:
      pk.pack_map(o.via.map.size);
      for (uint32_t i = 0; i < o.via.map.size; ++i) {
        const auto& kv = o.via.map.ptr[i];
        if (kv.key.type != msgpack::type::STR) {
          return Status::InvalidArgument("map keys must be strings");
        }
        PackUtf8(pk, kv.key.via.str.ptr, kv.key.via.str.size);
        RETURN_IF_ERROR(Normalize(kv.val, depth + 1, sink, pk));
      }
      return Status::Ok();
    case msgpack::type::EXT: return Status::InvalidArgument("msgpack ext types are not allowed");
  }
  return Status::InvalidArgument("unknown msgpack type");
}

struct Decoder {
  const msgpack::object& map;  // precondition: type MAP
  std::string prefix;
  Status status;

  const msgpack::object* Find(const char* key) const {
    size_t len = std::strlen(key);
    for (uint32_t i = 0; i < map.via.map.size; ++i) {
      const auto& k = map.via.map.ptr[i].key;
      if (k.type == msgpack::type::STR && k.via.str.size == len &&
          std::memcmp(k.via.str.ptr, key, len) == 0) {
        return &map.via.map.ptr[i].val;
      }
    }
    return nullptr;
  }

  static Status Read(const msgpack::object& o, const std::string& path, uint64_t& out) {
    if (o.type != msgpack::type::POSITIVE_INTEGER) return TypeError(path, "a non-negative integer");
    out = o.via.u64;
    return Status::Ok();
  }
  static Status Read(const msgpack::object& o, const std::string& path, int64_t& out) {
    if (o.type == msgpack::type::NEGATIVE_INTEGER) {
      out = o.via.i64;
    } else if (o.type == msgpack::type::POSITIVE_INTEGER &&
               o.via.u64 <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      out = static_cast<int64_t>(o.via.u64);
    } else {
      return TypeError(path, "an integer");
    }
    return Status::Ok();
  }
  static Status Read(const msgpack::object& o, const std::string& path, double& out) {
    switch (o.type) {
      case msgpack::type::FLOAT32:
      case msgpack::type::FLOAT64: out = o.via.f64; break;
      case msgpack::type::POSITIVE_INTEGER: out = static_cast<double>(o.via.u64); break;
      case msgpack::type::NEGATIVE_INTEGER: out = static_cast<double>(o.via.i64); break;
      default: return TypeError(path, "a number");
    }
    return Status::Ok();
  }
  static Status Read(const msgpack::object& o, const std::string& path, bool& out) {
    if (o.type != msgpack::type::BOOLEAN) return TypeError(path, "a boolean");
    out = o.via.boolean;
    return Status::Ok();
  }
  static Status Read(const msgpack::object& o, const std::string& path, std::string& out) {
    if (o.type != msgpack::type::STR) return TypeError(path, "a string");
    out = Utf8OrReplaced({o.via.str.ptr, o.via.str.size});
    return Status::Ok();
  }
  static Status Read(const msgpack::object& o, const std::string& path, Json& out) {
    auto j = ObjectToJson(o, 0);
    if (!j.ok()) return Status::InvalidArgument("field '" + path + "': " + j.status().message());
    out = std::move(j).value();
    return Status::Ok();
  }
  static Status Read(const msgpack::object& o, const std::string& path, RawResult& out) {
    out.bytes.clear();
    out.bytes.reserve(256);
    StringSink sink{out.bytes};
    StringPacker pk(sink);
    Status s = Normalize(o, 0, sink, pk);
    if (!s.ok()) return Status::InvalidArgument("field '" + path + "': " + s.message());
    return Status::Ok();
  }
  static Status Read(const msgpack::object& o, const std::string& path,
                     std::map<std::string, double>& out) {
    if (o.type != msgpack::type::MAP) return TypeError(path, "a map of numbers");
    out.clear();
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      const auto& kv = o.via.map.ptr[i];
      std::string key;
      RETURN_IF_ERROR(Read(kv.key, path + " key", key));
      double v = 0;
      RETURN_IF_ERROR(Read(kv.val, path + "." + key, v));
      out[key] = v;
    }
    return Status::Ok();
  }
  template <class T>
  static Status Read(const msgpack::object& o, const std::string& path, std::vector<T>& out) {
    if (o.type != msgpack::type::ARRAY) return TypeError(path, "an array");
    out.clear();
    out.resize(o.via.array.size);
    for (uint32_t i = 0; i < o.via.array.size; ++i) {
      RETURN_IF_ERROR(Read(o.via.array.ptr[i], path + "[" + std::to_string(i) + "]", out[i]));
    }
    return Status::Ok();
  }
  template <class T>
    requires requires(T t, Decoder d) { t.Visit(d); }
  static Status Read(const msgpack::object& o, const std::string& path, T& out) {
    if (o.type != msgpack::type::MAP) return TypeError(path, "a map");
    Decoder inner{o, path + ".", Status::Ok()};
    out.Visit(inner);
    return inner.status;
  }

  template <class T>
  void operator()(const char* key, T& out, Need need) {
    if (!status.ok()) return;
    const msgpack::object* o = Find(key);
    if (o == nullptr || o->type == msgpack::type::NIL) {
      if (need == Need::kRequired) {
        status = Status::InvalidArgument("missing required field '" + prefix + key + "'");
      }
      return;
    }
    status = Read(*o, prefix + key, out);
  }
};

template <class T>
Result<Body> DecodeBody(const msgpack::object& header) {
  T body;
  Decoder d{header, "", Status::Ok()};
  body.Visit(d);
  if (!d.status.ok()) return d.status;
  return Body(std::move(body));
}

template <size_t I = 0>
Result<Body> DecodeByIndex(size_t index, const msgpack::object& header) {
  if constexpr (I < std::variant_size_v<Body>) {
    if (index == I) return DecodeBody<std::variant_alternative_t<I, Body>>(header);
    return DecodeByIndex<I + 1>(index, header);
  } else {
    return Status::InvalidArgument("unknown command");
  }
}

// Bounds what a hostile header can make the unpacker allocate. msgpack-c
// allocates a container's elements from its declared size before it reads
// them, so 5 bytes declaring an array of a million cost 32 MiB (found by
// tests/fuzz/fuzz_codec). An element takes at least one byte and a map entry
// two, so a frame of N bytes never holds a larger container than these.
msgpack::unpack_limit HeaderLimits(size_t frame_bytes) {
  return msgpack::unpack_limit(/*array=*/std::min<size_t>(1'000'000, frame_bytes),
                               /*map=*/std::min<size_t>(100'000, frame_bytes / 2),
                               /*str=*/64 << 20, /*bin=*/64 << 20, /*ext=*/0,
                               /*depth=*/kMaxJsonDepth + 8);
}

// Allocation per message, avoided on both ends of the hot path. A fresh
// msgpack zone or sbuffer is an 8 KiB malloc, and glibc consolidates its fast
// bins on every allocation that large: at one result per message,
// malloc_consolidate and free were 2-4% of the head's and the workers'
// samples (docs/benchmarks.md). So each thread keeps one zone for decoding
// and one buffer for encoding, and reuses them.
//
// Messages up to kSharedZoneBytes decode into the thread's zone, which a
// clear() then shrinks to its first (8 KiB) chunk; larger ones, and a decode
// nested in another on the same thread, get a zone of their own.
constexpr size_t kSharedZoneBytes = 16 * 1024;
// An encoding buffer grown past this is given back after the message, so a
// large message does not pin its memory to the thread.
constexpr size_t kKeptBufferBytes = 1 << 20;

struct ThreadZone {
  msgpack::zone zone;
  bool in_use = false;
};

ThreadZone& TheThreadZone() {
  thread_local ThreadZone z;
  return z;
}

// A decoded msgpack value and what owns its memory.
class Unpacked {
 public:
  Unpacked() = default;
  Unpacked(Unpacked&& o) noexcept
      : obj_(o.obj_), own_(std::move(o.own_)), shared_(std::exchange(o.shared_, nullptr)) {}
  Unpacked& operator=(Unpacked&&) = delete;
  ~Unpacked() {
    if (shared_ == nullptr) return;
    shared_->zone.clear();
    shared_->in_use = false;
  }
  const msgpack::object& get() const { return obj_; }

 private:
  friend Result<Unpacked> Unpack(std::string_view bytes);
  msgpack::object obj_;
  std::unique_ptr<msgpack::zone> own_;
  ThreadZone* shared_ = nullptr;  // the thread's zone, cleared and freed on destruction
};

Result<Unpacked> Unpack(std::string_view bytes) {
  Unpacked out;
  ThreadZone& tz = TheThreadZone();
  msgpack::zone* zone = nullptr;
  if (bytes.size() <= kSharedZoneBytes && !tz.in_use) {
    tz.in_use = true;
    out.shared_ = &tz;  // from here on, `out` clears it on every path
    zone = &tz.zone;
  } else {
    out.own_ = std::make_unique<msgpack::zone>();
    zone = out.own_.get();
  }
  try {
    size_t offset = 0;
    out.obj_ = msgpack::unpack(*zone, bytes.data(), bytes.size(), offset, nullptr, nullptr,
                               HeaderLimits(bytes.size()));
    if (offset != bytes.size()) {
      return Status::InvalidArgument("trailing bytes after msgpack value");
    }
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("malformed msgpack: ") + e.what());
  }
  return out;
}

// The thread's encoding buffer, emptied; see above.
class ScratchBuffer {
 public:
  ScratchBuffer() : buf_(Buffer()) { buf_.clear(); }
  ~ScratchBuffer() {
    if (buf_.size() > kKeptBufferBytes) {
      ::free(buf_.release());
    } else {
      buf_.clear();
    }
  }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  msgpack::sbuffer& get() { return buf_; }

 private:
  static msgpack::sbuffer& Buffer() {
    thread_local msgpack::sbuffer b;
    return b;
  }
  msgpack::sbuffer& buf_;
};

constexpr const char* kCommandNames[] = {
    "REGISTER", "REPLY",  "RESULT",   "HEARTBEAT",  "DISCONNECT", "REGISTERED", "CREATE_ACTOR",
    "TRAIN",    "SAVE",   "RESTORE",  "RESET",      "STOP",       "EXPORT",     "ACK",
    "CHUNK",    "CREDIT", "READ_LOG", "FETCH_CODE", "CODE",       "TRAINS",     "RESULTS"};
static_assert(std::size(kCommandNames) == std::variant_size_v<Body>);

}  // namespace

const char* CommandName(const Body& body) { return kCommandNames[body.index()]; }

const char* CommandNameByByte(uint8_t command) {
  if (command == 0 || command > std::size(kCommandNames)) return "UNKNOWN";
  return kCommandNames[command - 1];
}

namespace {

template <class T>
std::vector<std::string> EncodeBody(size_t index, const T& body, const std::string& payload) {
  ScratchBuffer scratch;
  msgpack::sbuffer& buf = scratch.get();
  Packer pk(buf);
  Encoder enc{pk};
  enc.Value(body);
  std::vector<std::string> frames;
  frames.reserve(4);
  frames.emplace_back(kVersion);
  frames.emplace_back(1, static_cast<char>(index + 1));
  frames.emplace_back(buf.data(), buf.size());
  if (!payload.empty()) frames.push_back(payload);
  return frames;
}

// A coalesced message holds 1 to kMaxCoalesced entries: an empty one is
// nobody's answer, and the bound keeps what one message makes its receiver
// do in proportion to what the others may.
Status CheckCoalesced(const Body& body) {
  size_t n = 0;
  if (const auto* t = std::get_if<Trains>(&body)) {
    n = t->trains.size();
  } else if (const auto* r = std::get_if<Results>(&body)) {
    n = r->batches.size();
  } else {
    return Status::Ok();
  }
  if (n == 0 || n > kMaxCoalesced) {
    return Status::InvalidArgument(std::string(CommandName(body)) + ": " + std::to_string(n) +
                                   " entries (1 to " + std::to_string(kMaxCoalesced) + " allowed)");
  }
  return Status::Ok();
}

}  // namespace

void ResultsWriter::Add(const ResultBatch& batch) {
  ScratchBuffer scratch;
  msgpack::sbuffer& buf = scratch.get();
  Packer pk(buf);
  Encoder enc{pk};
  enc.Value(batch);
  body_.append(buf.data(), buf.size());
  ++count_;
}

void ResultsWriter::Clear() {
  body_.clear();
  count_ = 0;
}

std::vector<std::string> ResultsWriter::Finish() {
  static const size_t kResult = Body(std::in_place_type<ResultBatch>).index();
  static const size_t kResults = Body(std::in_place_type<Results>).index();
  std::vector<std::string> frames;
  frames.reserve(3);
  frames.emplace_back(kVersion);
  if (count_ == 1) {
    // One batch is a RESULT: its map is the header.
    frames.emplace_back(1, static_cast<char>(kResult + 1));
    frames.push_back(std::move(body_));
  } else {
    frames.emplace_back(1, static_cast<char>(kResults + 1));
    std::string header;
    header.reserve(16 + body_.size());
    StringSink sink{header};
    StringPacker pk(sink);
    pk.pack_map(1);
    pk.pack(std::string_view("batches"));
    pk.pack_array(static_cast<uint32_t>(count_));
    header.append(body_);
    frames.push_back(std::move(header));
  }
  Clear();
  return frames;
}

std::vector<std::string> Encode(const Message& message) {
  return std::visit(
      [&](const auto& body) { return EncodeBody(message.body.index(), body, message.payload); },
      message.body);
}

std::vector<std::string> Encode(const ResultBatch& batch) {
  static const size_t kIndex = Body(std::in_place_type<ResultBatch>).index();
  static const std::string kNoPayload;
  return EncodeBody(kIndex, batch, kNoPayload);
}

Result<Message> Decode(std::span<const std::string_view> frames) {
  if (frames.size() < 3 || frames.size() > 4) {
    return Status::InvalidArgument("expected 3 or 4 frames, got " + std::to_string(frames.size()));
  }
  if (frames[0] != kVersion) {
    return Status::InvalidArgument("unsupported protocol version frame (want " +
                                   std::string(kVersion) + ")");
  }
  if (frames[1].size() != 1) return Status::InvalidArgument("command frame must be one byte");
  auto command = static_cast<uint8_t>(frames[1][0]);
  if (command == 0 || command > std::variant_size_v<Body>) {
    return Status::InvalidArgument("unknown command byte " + std::to_string(command));
  }
  ASSIGN_OR_RETURN(Unpacked oh, Unpack(frames[2]));
  if (oh.get().type != msgpack::type::MAP) {
    return Status::InvalidArgument(std::string(CommandNameByByte(command)) +
                                   ": header must be a msgpack map");
  }
  auto body = DecodeByIndex(command - 1, oh.get());
  if (!body.ok()) {
    return Status::InvalidArgument(std::string(CommandNameByByte(command)) + ": " +
                                   body.status().message());
  }
  Message m{std::move(body).value(), {}};
  if (frames.size() == 4) m.payload.assign(frames[3]);
  if (std::holds_alternative<Chunk>(m.body) && m.payload.empty()) {
    return Status::InvalidArgument("CHUNK: the payload frame is missing or empty");
  }
  RETURN_IF_ERROR(CheckCoalesced(m.body));
  return m;
}

Result<Message> Decode(const std::vector<std::string>& frames) {
  std::vector<std::string_view> views(frames.begin(), frames.end());
  return Decode(std::span<const std::string_view>(views));
}

std::string JsonToMsgpack(const Json& j) {
  ScratchBuffer scratch;
  msgpack::sbuffer& buf = scratch.get();
  Packer pk(buf);
  PackJson(pk, j);
  return std::string(buf.data(), buf.size());
}

Result<Json> MsgpackToJson(std::string_view bytes) {
  ASSIGN_OR_RETURN(Unpacked oh, Unpack(bytes));
  return ObjectToJson(oh.get(), 0);
}

RawResult RawResult::FromJson(const Json& j) { return RawResult{JsonToMsgpack(j)}; }

Json RawResult::ToJson() const {
  auto j = MsgpackToJson(bytes);
  return j.ok() ? std::move(j).value() : Json();
}

}  // namespace ztune::protocol
