// Fuzz target: the head <-> worker wire codec (common/protocol/codec.h).
//
// Input: byte 0 chooses the frame count (0..5, so wrong counts are reached
// too); every frame but the last is a 2-byte little-endian length and that
// many bytes (clamped to what is left); the last frame is the rest. Seeds are
// real encoded messages of every command (corpus/fuzz_codec, made by
// gen_corpus.cc).
//
// Beyond "never crash": whatever Decode accepts must survive Encode + Decode
// (the worker re-sends decoded state, the head stores it), and the second
// encoding must equal the first (encoding a decoded message is a fixed point);
// a worker's ResultsWriter must write what Encode writes for the same
// batches; and a decoded result must read the same through ResultView as
// through a DOM:
// the JSON text the head stores for it equals the DOM's dump(). Decode, which
// reads RESULT and RESULTS headers in place when it can, must answer exactly
// what the general decoder answers (the same body, or the same error).
// A violation aborts, which libFuzzer reports as a crash.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/protocol/codec.h"
#include "common/protocol/result_view.h"

namespace {

using ztune::protocol::Decode;
using ztune::protocol::Encode;

std::vector<std::string_view> SplitFrames(const uint8_t* data, size_t size) {
  std::vector<std::string_view> frames;
  if (size == 0) return frames;
  const size_t count = data[0] % 6;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  for (size_t i = 0; i < count; ++i) {
    if (i + 1 == count) {
      frames.push_back(rest);
      break;
    }
    size_t len = 0;
    if (rest.size() >= 2) {
      len = static_cast<uint8_t>(rest[0]) | (static_cast<size_t>(static_cast<uint8_t>(rest[1])) << 8);
      rest.remove_prefix(2);
    } else {
      rest = {};
    }
    len = std::min(len, rest.size());
    frames.push_back(rest.substr(0, len));
    rest.remove_prefix(len);
  }
  return frames;
}

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_codec: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string_view> frames = SplitFrames(data, size);
  auto decoded = Decode(std::span<const std::string_view>(frames));
  auto general = ztune::protocol::DecodeGeneral(std::span<const std::string_view>(frames));
  if (decoded.ok() != general.ok()) {
    Fail("the in-place decode and the general one disagree",
         decoded.ok() ? general.status().ToString() : decoded.status().ToString());
  }
  if (!decoded.ok() && decoded.status().message() != general.status().message()) {
    Fail("the two decodes refuse differently", decoded.status().ToString());
  }
  if (decoded.ok() && Encode(*decoded) != Encode(*general)) {
    Fail("the two decodes give different bodies", ztune::protocol::CommandName(decoded->body));
  }
  if (decoded.ok()) {
    (void)ztune::protocol::CommandName(decoded->body);
    std::vector<std::string> encoded = Encode(*decoded);
    auto again = Decode(encoded);
    if (!again.ok()) Fail("re-decoding an encoded message failed", again.status().ToString());
    if (again->body.index() != decoded->body.index() || again->payload != decoded->payload) {
      Fail("round trip changed the command or the payload", ztune::protocol::CommandName(again->body));
    }
    if (Encode(*again) != encoded) Fail("encoding is not stable", ztune::protocol::CommandName(again->body));
    std::vector<const ztune::protocol::ResultBatch*> batches;
    if (const auto* batch = std::get_if<ztune::protocol::ResultBatch>(&decoded->body)) {
      batches.push_back(batch);
    } else if (const auto* many = std::get_if<ztune::protocol::Results>(&decoded->body)) {
      for (const auto& b : many->batches) batches.push_back(&b);
    }
    // A worker's coalesced message holds exactly what the generic encoder
    // writes: one batch is a RESULT, several a RESULTS.
    if (!batches.empty()) {
      ztune::protocol::ResultsWriter writer;
      for (const auto* b : batches) writer.Add(*b);
      const std::vector<std::string> written = writer.Finish();
      const std::vector<std::string> expected =
          batches.size() == 1 ? Encode(*batches.front())
                              : Encode(ztune::protocol::Message{decoded->body, {}});
      if (written != expected) Fail("ResultsWriter differs from Encode", "");
    }
    for (const auto* batch : batches) {
      for (const auto& r : batch->results) {
        const ztune::protocol::ResultView view(r.result.bytes);
        if (!view.valid()) Fail("a decoded result is not a valid view", "");
        if (!view.is_object()) continue;
        ztune::Json dom = r.result.ToJson();
        dom["trial_id"] = "e0001_00000";
        dom["done"] = true;
        // What the head stores reads back as the text schema 2 stored.
        const std::string stored = view.StampedMsgpack("e0001_00000", true);
        const ztune::protocol::ResultView back(stored);
        if (!back.is_object()) Fail("the stored bytes are not a valid object", "");
        const std::string text = back.JsonText();
        if (text != dom.dump()) Fail("stored text differs from the DOM's dump", text);
      }
    }
  }
  // The header frame alone through the JSON <-> msgpack helpers.
  if (frames.size() >= 3) {
    auto json = ztune::protocol::MsgpackToJson(frames[2]);
    if (json.ok()) {
      std::string packed = ztune::protocol::JsonToMsgpack(*json);
      auto back = ztune::protocol::MsgpackToJson(packed);
      if (!back.ok()) Fail("MsgpackToJson(JsonToMsgpack(x)) failed", back.status().ToString());
      // Bytes, not Json equality: a NaN never equals itself.
      if (ztune::protocol::JsonToMsgpack(*back) != packed) {
        Fail("JSON <-> msgpack round trip is not stable", "");
      }
    }
  }
  return 0;
}
