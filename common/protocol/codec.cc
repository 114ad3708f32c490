#include "common/protocol/codec.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include <msgpack.hpp>

#include "common/check.h"
#include "common/protocol/msgpack_io.h"
#include "common/protocol/results_in_place.h"
#include "common/utf8.h"

namespace ztune::protocol {
namespace {

using msgpack_io::kMaxJsonDepth;
using msgpack_io::ObjectToJson;
using msgpack_io::PackDouble;
using msgpack_io::Packer;
using msgpack_io::PackJson;
using msgpack_io::ScratchBuffer;
using msgpack_io::StringPacker;
using msgpack_io::StringSink;
using msgpack_io::Unpack;
using msgpack_io::Unpacked;

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
  if (const auto* a = std::get_if<Ack>(&body)) {
    // An ACK needs no TRAIN: the bound only.
    if (a->trains.size() <= kMaxCoalesced) return Status::Ok();
    return Status::InvalidArgument("ACK: " + std::to_string(a->trains.size()) +
                                   " trains (at most " + std::to_string(kMaxCoalesced) +
                                   " allowed)");
  }
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

namespace {

enum class Path { kInPlaceFirst, kGeneral };

bool IsOneFrame(std::span<const std::string_view> frames) {
  return !frames.empty() && frames[0].substr(0, sizeof(kVersionOneFrame) - 1) == kVersionOneFrame;
}

Result<Message> DecodeFrames(std::span<const std::string_view> frames, Path path,
                             bool copy_payload = true) {
  // The one-frame layout is read as the split one it joins.
  std::array<std::string_view, 4> split;
  if (IsOneFrame(frames)) {
    if (frames.size() > 2) {
      return Status::InvalidArgument("expected 1 or 2 frames in the one-frame layout, got " +
                                     std::to_string(frames.size()));
    }
    constexpr size_t kPrefix = sizeof(kVersionOneFrame) - 1;
    if (frames[0].size() < kPrefix + 1) {
      return Status::InvalidArgument("one-frame message without a command byte");
    }
    split[0] = kVersion;
    split[1] = frames[0].substr(kPrefix, 1);
    split[2] = frames[0].substr(kPrefix + 1);
    if (frames.size() == 2) split[3] = frames[1];
    frames = std::span<const std::string_view>(split.data(), frames.size() + 2);
  }
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
  std::optional<Body> in_place;
  if (path == Path::kInPlaceFirst) in_place = DecodeResultsInPlace(command - 1, frames[2]);
  Message m;
  if (in_place) {
    m.body = std::move(*in_place);
  } else {
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
    m.body = std::move(body).value();
  }
  if (frames.size() == 4 && copy_payload) m.payload.assign(frames[3]);
  if (std::holds_alternative<Chunk>(m.body) && (frames.size() < 4 || frames[3].empty())) {
    return Status::InvalidArgument("CHUNK: the payload frame is missing or empty");
  }
  RETURN_IF_ERROR(CheckCoalesced(m.body));
  return m;
}

}  // namespace

Result<Message> Decode(std::span<const std::string_view> frames) {
  return DecodeFrames(frames, Path::kInPlaceFirst);
}

Result<Message> DecodeGeneral(std::span<const std::string_view> frames) {
  return DecodeFrames(frames, Path::kGeneral);
}

Result<Message> DecodeLeavingPayload(std::span<const std::string_view> frames) {
  return DecodeFrames(frames, Path::kInPlaceFirst, /*copy_payload=*/false);
}

OneFrameMessage::OneFrameMessage(std::span<const std::string> frames) : count_(frames.size() - 2) {
  CHECK(frames.size() == 3 || frames.size() == 4);
  head_.reserve(sizeof(kVersionOneFrame) - 1 + frames[1].size() + frames[2].size());
  head_.append(kVersionOneFrame);
  head_.append(frames[1]);
  head_.append(frames[2]);
  views_[0] = head_;
  if (frames.size() == 4) views_[1] = frames[3];
}

std::string_view PayloadFrame(std::span<const std::string_view> frames) {
  const size_t at = IsOneFrame(frames) ? 1 : 3;
  return frames.size() > at ? frames[at] : std::string_view();
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
