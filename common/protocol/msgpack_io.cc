#include "common/protocol/msgpack_io.h"

#include <algorithm>
#include <bit>
#include <exception>

#include "common/utf8.h"

namespace ztune::protocol::msgpack_io {
namespace {

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

ThreadZone& TheThreadZone() {
  thread_local ThreadZone z;
  return z;
}

}  // namespace

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

}  // namespace ztune::protocol::msgpack_io
