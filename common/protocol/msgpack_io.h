// The msgpack layer under the head <-> worker codec (codec.cc): JSON values
// packed and read back, results re-encoded in RawResult's normal form, and
// the per-thread zone and buffer that keep allocation off the hot path.
// Internal to common/protocol: it includes msgpack, which only common links
// (PRIVATE), so no header outside this directory may include it. Decoding
// returns a Status and never throws; msgpack-c's packer throws only when it
// cannot allocate. Thread-safe: each thread has its own zone and buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <msgpack.hpp>

#include "common/json.h"
#include "common/status.h"

namespace ztune::protocol::msgpack_io {

// The deepest nesting a decoded value may have.
inline constexpr int kMaxJsonDepth = 64;

using Packer = msgpack::packer<msgpack::sbuffer>;

// msgpack-c packs an integral double as an integer, and its range check lets
// exactly 2^64 through to a uint64 conversion, which is undefined (found by
// tests/fuzz/fuzz_codec: a uint64 near the maximum decodes to that double).
// That one value is written as a float64 by hand.
void PackDouble(Packer& pk, double d);

void PackJson(Packer& pk, const Json& j);

// The DOM of a decoded value: strings and keys valid UTF-8 (invalid bytes
// replaced), map keys strings, no ext types, at most kMaxJsonDepth deep.
Result<Json> ObjectToJson(const msgpack::object& o, int depth);

// A sink for msgpack::packer that appends to a string (RawResult's bytes).
struct StringSink {
  std::string& out;
  void write(const char* p, size_t n) { out.append(p, n); }
};
using StringPacker = msgpack::packer<StringSink>;

// Re-encodes a decoded value in RawResult's normal form, with the rules of
// ObjectToJson (the same errors for the same input). A float is written as a
// float64 by hand: msgpack-c would pack an integral one as an integer, and
// ObjectToJson keeps it a float.
Status Normalize(const msgpack::object& o, int depth, StringSink& sink, StringPacker& pk);

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
inline constexpr size_t kSharedZoneBytes = 16 * 1024;
// An encoding buffer grown past this is given back after the message, so a
// large message does not pin its memory to the thread.
inline constexpr size_t kKeptBufferBytes = 1 << 20;

struct ThreadZone {
  msgpack::zone zone;
  bool in_use = false;
};

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

// Decodes `bytes` (one msgpack value, nothing after it) within bounds on
// what its containers may make the unpacker allocate; InvalidArgument for
// anything else.
Result<Unpacked> Unpack(std::string_view bytes);

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

}  // namespace ztune::protocol::msgpack_io
