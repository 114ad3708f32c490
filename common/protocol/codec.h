// The msgpack codec for head <-> worker messages. With msgpack_io.h (the
// msgpack layer under it), results_in_place.h (RESULT and RESULTS headers
// read without it) and result_view.h (which reads the results it decodes)
// the only place that knows msgpack; every
// msgpack exception is caught here and becomes a Status.
// Stateless and thread-safe.
#pragma once

#include <array>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/protocol/messages.h"
#include "common/status.h"

namespace ztune::protocol {

// Frames: version, command byte, header map, and the payload if non-empty.
std::vector<std::string> Encode(const Message& message);
// The same frames for a RESULT batch, without building a Message (which
// would copy every result: a worker keeps its batches until acknowledged).
std::vector<std::string> Encode(const ResultBatch& batch);

// The RESULT batches of one pass of a worker's loop, encoded as they are
// added (the outbox keeps the batches; nothing is copied but the bytes), sent
// as one message: a RESULT when there is one, else a RESULTS (only to a head
// that announced kFeatureResults). The caller bounds count() by
// kMaxCoalesced and bytes() well under kMaxFrameBytes. One owner thread.
class ResultsWriter {
 public:
  void Add(const ResultBatch& batch);
  size_t count() const { return count_; }
  size_t bytes() const { return body_.size(); }
  bool empty() const { return count_ == 0; }
  // The message's frames (count() >= 1); the writer is empty again.
  std::vector<std::string> Finish();
  void Clear();

 private:
  std::string body_;  // the batches' maps, back to back
  size_t count_ = 0;
};

// `frames` (as Encode makes them: version, command, header, payload) in the
// one-frame layout (kFeatureOneFrame), to send: kVersionOneFrame, the command
// byte and the header joined in one frame, then the payload frame as it is.
// Views into itself and `frames`: it outlives neither and does not move.
class OneFrameMessage {
 public:
  // Precondition: frames.size() is 3 or 4.
  explicit OneFrameMessage(std::span<const std::string> frames);
  OneFrameMessage(const OneFrameMessage&) = delete;
  OneFrameMessage& operator=(const OneFrameMessage&) = delete;

  std::span<const std::string_view> frames() const { return {views_.data(), count_}; }

 private:
  std::string head_;
  std::array<std::string_view, 2> views_;
  size_t count_;
};

// Validates the version, the command byte, the header (a msgpack map whose
// required keys are present with the right types; unknown keys ignored) and the
// frame count. Either layout: [kVersion, command, header, payload?] or
// [kVersionOneFrame + command + header, payload?]. InvalidArgument names what
// is wrong; never throws.
Result<Message> Decode(std::span<const std::string_view> frames);

// Decode without its in-place path for RESULT and RESULTS headers
// (results_in_place.h): the reference that path is tested against.
Result<Message> DecodeGeneral(std::span<const std::string_view> frames);

// Decode, checking the same, but the payload frame (PayloadFrame), if any, is
// not copied into Message::payload: the caller reads it where it lies, as
// long as `frames` live. For a receiver that consumes CHUNK bytes at once:
// the copy of each megabyte into a fresh string, faulting its pages in, was
// most of the head's loop during a checkpoint upload (docs/benchmarks.md,
// "large checkpoints", 2026-12-07).
Result<Message> DecodeLeavingPayload(std::span<const std::string_view> frames);

// The payload frame of a message Decode accepted (frames[3] in the split
// layout, frames[1] in the one-frame one), or an empty view.
std::string_view PayloadFrame(std::span<const std::string_view> frames);

// Convenience for tests: decode owned frames.
Result<Message> Decode(const std::vector<std::string>& frames);

// JSON <-> msgpack bytes (results, configs) for code that stores msgpack.
std::string JsonToMsgpack(const Json& j);
Result<Json> MsgpackToJson(std::string_view bytes);

}  // namespace ztune::protocol
