#include "common/protocol/results_in_place.h"

#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "common/protocol/codec.h"

namespace ztune::protocol {
namespace {

const size_t kResult = Body(std::in_place_type<ResultBatch>).index();
const size_t kResults = Body(std::in_place_type<Results>).index();

// msgpack written by hand, so that a test can write what no packer would.
std::string B(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}
std::string Str(std::string_view s) {
  std::string out;
  if (s.size() < 32) {
    out.push_back(static_cast<char>(0xa0 | s.size()));
  } else {
    out = B({0xd9, static_cast<int>(s.size())});
  }
  return out.append(s);
}
std::string FixMap(int n) { return B({0x80 | n}); }
std::string FixArray(int n) { return B({0x90 | n}); }

// A RESULT header with one record holding `result` (bytes as sent), and
// `extra` appended as further members (counted by `extra_members`).
std::string BatchHeader(const std::string& result, const std::string& trial_id = "t1",
                        const std::string& extra = "", int extra_members = 0) {
  return FixMap(4 + extra_members) + Str("rid") + B({7}) + Str("trial_id") + Str(trial_id) +
         Str("attempt") + B({1}) + Str("results") + FixArray(1) + FixMap(2) + Str("seq") +
         B({0xcc, 200}) + Str("result") + result + extra;
}
std::string ResultsHeader(const std::vector<std::string>& batches) {
  std::string s = FixMap(1) + Str("batches") + FixArray(static_cast<int>(batches.size()));
  for (const auto& b : batches) s += b;
  return s;
}

std::string Encoded(const Result<Message>& m) {
  if (!m.ok()) return "error: " + m.status().ToString();
  std::string all;
  for (const auto& f : Encode(*m)) all += f + '|';
  return all;
}

// The in-place answer for a header, and what the general decoder makes of
// the same frames; they must agree whenever the in-place path answers, and
// Decode (which tries it first) must always agree with the general path.
struct Both {
  bool in_place = false;
  Result<Message> general;
};
Both Check(size_t index, const std::string& header) {
  const std::string command(1, static_cast<char>(index + 1));
  std::vector<std::string_view> frames = {kVersion, command, header};
  std::span<const std::string_view> span(frames);
  std::optional<Body> fast = DecodeResultsInPlace(index, header);
  Result<Message> general = DecodeGeneral(span);
  if (fast && general.ok()) {
    EXPECT_EQ(Encoded(Message{*fast, {}}), Encoded(general));
  } else if (fast) {
    // Only the checks after the body may refuse what the path decoded.
    EXPECT_NE(general.status().message().find("entries (1 to"), std::string::npos)
        << general.status().ToString();
  }
  EXPECT_EQ(Encoded(Decode(span)), Encoded(general));
  return {fast.has_value(), std::move(general)};
}

TEST(ResultsInPlaceTest, TakesWhatThePackersWriteAndCopiesTheResultAsItIs) {
  const Json result = {
      {"training_iteration", 3},
      {"loss", 0.25},
      {"done", false},
      {"name", "héllo ✓ wörld, a string of more than thirty-one bytes"},
      {"ints", {0,      127,    128,           255,           256,
                65535,  65536,  4294967295ull, 4294967296ull, std::numeric_limits<uint64_t>::max(),
                -1,     -32,    -33,           -128,          -129,
                -32768, -32769, -2147483648ll, -2147483649ll, std::numeric_limits<int64_t>::min()}},
      {"floats", {1.0, -0.0, 1e300, 3.5}},
      {"nested",
       {{"a", {{"b", Json::array({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})}}}}},
      {"long", std::string(300, 'x')},
      {"longer", std::string(70000, 'y')},
      {"bin", Json::binary({1, 2, 3})},
      {"nothing", nullptr},
  };
  ResultBatch batch;
  batch.rid = 1u << 20;
  batch.trial_id = "exp-1_00042";
  batch.attempt = 3;
  batch.results = {{1, RawResult::FromJson(result)}, {2, RawResult::FromJson({{"a", 1}})}};
  batch.failed = true;
  batch.error = "step failed: \xe2\x9c\x93";
  const std::vector<std::string> frames = Encode(batch);
  Both one = Check(kResult, frames[2]);
  EXPECT_TRUE(one.in_place);
  ASSERT_TRUE(one.general.ok());
  const auto& got = std::get<ResultBatch>(one.general->body);
  EXPECT_EQ(got.results[0].result.bytes, batch.results[0].result.bytes);

  ResultsWriter writer;
  writer.Add(batch);
  batch.trial_id = "other";
  batch.failed = false;
  batch.error.clear();
  writer.Add(batch);
  const std::vector<std::string> coalesced = writer.Finish();
  EXPECT_TRUE(Check(kResults, coalesced[2]).in_place);
}

TEST(ResultsInPlaceTest, LeavesEveryResultOutOfNormalFormToTheGeneralDecoder) {
  // Each is valid msgpack that the general decoder rewrites (or refuses):
  // the bytes stored would differ from the bytes sent.
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"float32", FixMap(1) + Str("x") + B({0xca, 0x3f, 0x80, 0, 0})},
      {"uint8 holding a fixint", FixMap(1) + Str("x") + B({0xcc, 5})},
      {"uint16 holding a uint8", FixMap(1) + Str("x") + B({0xcd, 0, 200})},
      {"uint64 holding a uint32", FixMap(1) + Str("x") + B({0xcf, 0, 0, 0, 0, 0, 0, 1, 0})},
      {"int8 holding a positive", FixMap(1) + Str("x") + B({0xd0, 5})},
      {"int8 holding a negative fixint", FixMap(1) + Str("x") + B({0xd0, 0xff})},
      {"int64 holding an int16",
       FixMap(1) + Str("x") + B({0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00})},
      {"str8 holding a fixstr", FixMap(1) + Str("x") + B({0xd9, 1, 'a'})},
      {"map16 holding a fixmap", B({0xde, 0, 1}) + Str("x") + B({1})},
      {"array16 holding a fixarray", FixMap(1) + Str("x") + B({0xdc, 0, 1, 1})},
      {"bin16 holding a bin8", FixMap(1) + Str("x") + B({0xc5, 0, 1, 9})},
      {"invalid UTF-8 in a value", FixMap(1) + Str("x") + Str("\xff\xfe")},
      {"invalid UTF-8 in a key", FixMap(1) + Str("\xc0\x80") + B({1})},
      {"a key that is not a string", FixMap(1) + B({1}) + B({1})},
      {"an ext type", FixMap(1) + Str("x") + B({0xd4, 1, 2})},
      {"the unused tag", FixMap(1) + Str("x") + B({0xc1})},
  };
  for (const auto& [what, result] : cases) {
    SCOPED_TRACE(what);
    EXPECT_FALSE(Check(kResult, BatchHeader(result)).in_place);
  }
  // Nesting: as deep as the path takes, and one level more.
  auto nested = [](int levels) {
    std::string s;
    for (int i = 0; i < levels; ++i) s += FixArray(1);
    return FixMap(1) + Str("x") + s + B({1});
  };
  EXPECT_TRUE(Check(kResult, BatchHeader(nested(kMaxInPlaceResultDepth - 1))).in_place);
  Both deeper = Check(kResult, BatchHeader(nested(kMaxInPlaceResultDepth)));
  EXPECT_FALSE(deeper.in_place);
  EXPECT_TRUE(deeper.general.ok());
}

TEST(ResultsInPlaceTest, LeavesUnusualEnvelopesToTheGeneralDecoder) {
  const std::string result = FixMap(1) + Str("x") + B({1});
  EXPECT_TRUE(Check(kResult, BatchHeader(result)).in_place);
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"an unknown key", BatchHeader(result, "t1", Str("extra") + B({1}), 1)},
      {"a repeated key", BatchHeader(result, "t1", Str("rid") + B({8}), 1)},
      {"a nil optional field", BatchHeader(result, "t1", Str("error") + B({0xc0}), 1)},
      {"invalid UTF-8 in the trial id", BatchHeader(result, "t\xff")},
      {"trailing bytes", BatchHeader(result) + B({0})},
      {"a truncated result", BatchHeader(result).substr(0, BatchHeader(result).size() - 1)},
      {"a header that is not a map", FixArray(0)},
      {"a required field missing", FixMap(2) + Str("rid") + B({7}) + Str("attempt") + B({1})},
      {"a negative rid",
       FixMap(3) + Str("rid") + B({0xff}) + Str("trial_id") + Str("t") + Str("attempt") + B({1})},
  };
  for (const auto& [what, header] : cases) {
    SCOPED_TRACE(what);
    EXPECT_FALSE(Check(kResult, header).in_place);
  }
  // RESULTS: the same batch twice is taken; a second key, or none, is not.
  const std::string batch = BatchHeader(result);
  EXPECT_TRUE(Check(kResults, ResultsHeader({batch, batch})).in_place);
  EXPECT_FALSE(Check(kResults, FixMap(2) + Str("batches") + FixArray(1) + batch + Str("x") + B({1}))
                   .in_place);
  EXPECT_FALSE(Check(kResults, FixMap(0)).in_place);
  // Zero batches decode in place, and Decode refuses them as the general path does.
  Both empty = Check(kResults, ResultsHeader({}));
  EXPECT_TRUE(empty.in_place);
  EXPECT_FALSE(empty.general.ok());
  // Other commands never take this path.
  EXPECT_FALSE(DecodeResultsInPlace(0, batch).has_value());
}

TEST(ResultsInPlaceTest, AgreesWithTheGeneralDecoderOnMutatedHeaders) {
  // Every single-byte change, and random runs of changes, of a header with
  // values of every kind: wherever the in-place path answers it must give
  // the general decoder's body, and Decode must give the general decoder's
  // answer (body or error) everywhere.
  const Json result = {{"training_iteration", 1},
                       {"m", -3.5},
                       {"s", "abc"},
                       {"a", {1, 300, -40, nullptr, true}},
                       {"o", {{"k", Json::binary({9})}}}};
  ResultBatch batch;
  batch.rid = 5;
  batch.trial_id = "t7";
  batch.attempt = 2;
  batch.results = {{1, RawResult::FromJson(result)}};
  ResultsWriter writer;
  writer.Add(batch);
  writer.Add(batch);
  const std::string header = writer.Finish()[2];
  size_t in_place = 0;
  size_t checked = 0;
  for (size_t i = 0; i < header.size(); ++i) {
    for (int v : {0x00, 0x01, 0x7f, 0x80, 0x90, 0xa0, 0xc0, 0xc1, 0xca, 0xcb, 0xcc, 0xd0, 0xd9,
                  0xdc, 0xde, 0xff}) {
      std::string h = header;
      h[i] = static_cast<char>(v);
      in_place += Check(kResults, h).in_place ? 1 : 0;
      ++checked;
    }
  }
  std::mt19937 rng(20261206);
  for (int round = 0; round < 2000; ++round) {
    std::string h = header;
    const int changes = 1 + static_cast<int>(rng() % 4);
    for (int c = 0; c < changes; ++c) h[rng() % h.size()] = static_cast<char>(rng() & 0xff);
    if (rng() % 8 == 0) h.resize(rng() % h.size());
    in_place += Check(kResults, h).in_place ? 1 : 0;
    ++checked;
  }
  // Both kinds of outcome were reached.
  EXPECT_GT(in_place, 0u);
  EXPECT_LT(in_place, checked);
}

}  // namespace
}  // namespace ztune::protocol
