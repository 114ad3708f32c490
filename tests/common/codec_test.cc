#include "common/protocol/codec.h"

#include <gtest/gtest.h>

namespace ztune::protocol {
namespace {

template <class T>
T RoundTrip(const T& body, const std::string& payload = {}) {
  auto frames = Encode(Message{body, payload});
  auto decoded = Decode(frames);
  EXPECT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->payload, payload);
  EXPECT_TRUE(std::holds_alternative<T>(decoded->body));
  // The one-frame layout of the same message decodes to the same.
  const OneFrameMessage joined(frames);
  EXPECT_EQ(joined.frames().size(), payload.empty() ? 1u : 2u);
  auto from_one = Decode(joined.frames());
  EXPECT_TRUE(from_one.ok()) << from_one.status().ToString();
  if (decoded.ok() && from_one.ok()) {
    EXPECT_EQ(Encode(*from_one), Encode(*decoded));
  }
  return std::get<T>(decoded->body);
}

TEST(CodecTest, RoundTripsRegister) {
  Register r;
  r.worker_id = "w-1";
  r.incarnation = 7;
  r.name = "a";
  r.host = "host";
  r.pid = 1234;
  r.resources = {{"CPU", 4}, {"GPU", 0.5}};
  r.gpu_ids = {0, 1};
  r.trainables = {"quadratic", "noop"};
  r.export_formats = {{"quadratic", {"json"}}, {"noop", {}}};
  r.live_actors = {{"t1", 2, 5, 9, true, {3, 4}}};
  auto d = RoundTrip(r);
  ASSERT_EQ(d.export_formats.size(), 2u);
  EXPECT_EQ(d.export_formats[0].trainable, "quadratic");
  EXPECT_EQ(d.export_formats[0].formats, (std::vector<std::string>{"json"}));
  EXPECT_EQ(d.export_formats[1].trainable, "noop");
  EXPECT_TRUE(d.export_formats[1].formats.empty());
  EXPECT_EQ(d.worker_id, "w-1");
  EXPECT_EQ(d.incarnation, 7u);
  EXPECT_EQ(d.pid, 1234);
  EXPECT_EQ(d.resources, r.resources);
  EXPECT_EQ(d.gpu_ids, r.gpu_ids);
  EXPECT_EQ(d.trainables, r.trainables);
  ASSERT_EQ(d.live_actors.size(), 1u);
  EXPECT_EQ(d.live_actors[0].trial_id, "t1");
  EXPECT_EQ(d.live_actors[0].attempt, 2u);
  EXPECT_EQ(d.live_actors[0].acked_seq, 5u);
  EXPECT_EQ(d.live_actors[0].iteration, 9);
  EXPECT_TRUE(d.live_actors[0].training);
  EXPECT_EQ(d.live_actors[0].rids, (std::vector<uint64_t>{3, 4}));
}

TEST(CodecTest, RoundTripsReplyWithPayload) {
  Reply r{42, "t1", 3, false, "boom", Json{{"iteration", 5}}};
  std::string payload("\0\1\2binary", 9);
  auto d = RoundTrip(r, payload);
  EXPECT_EQ(d.rid, 42u);
  EXPECT_EQ(d.trial_id, "t1");
  EXPECT_EQ(d.attempt, 3u);
  EXPECT_FALSE(d.ok);
  EXPECT_EQ(d.error, "boom");
  EXPECT_EQ(d.data["iteration"], 5);
}

// DecodeLeavingPayload checks what Decode checks and decodes the same
// header, but leaves the payload frame to the caller.
TEST(CodecTest, DecodeLeavingPayloadDoesNotCopyThePayloadAndChecksTheSame) {
  const std::string bytes(70'000, 'x');
  const std::vector<std::string> frames = Encode(Message{Chunk{9, 1 << 20}, bytes});
  const std::vector<std::string_view> views(frames.begin(), frames.end());
  auto left = DecodeLeavingPayload(views);
  ASSERT_TRUE(left.ok()) << left.status().ToString();
  EXPECT_TRUE(left->payload.empty());
  const auto& chunk = std::get<Chunk>(left->body);
  EXPECT_EQ(chunk.rid, 9u);
  EXPECT_EQ(chunk.offset, 1u << 20);
  ASSERT_EQ(views.size(), 4u);
  EXPECT_EQ(views[3], bytes);
  // A CHUNK without its bytes is malformed either way.
  for (const size_t frame_count : {size_t{3}, size_t{4}}) {
    std::vector<std::string_view> short_views(views.begin(), views.begin() + 3);
    if (frame_count == 4) short_views.push_back(std::string_view());
    EXPECT_FALSE(DecodeLeavingPayload(short_views).ok()) << frame_count;
    EXPECT_FALSE(Decode(std::span<const std::string_view>(short_views)).ok()) << frame_count;
  }
  // Whatever Decode refuses, it refuses.
  std::vector<std::string_view> bad = views;
  bad[0] = "ZT9";
  EXPECT_FALSE(DecodeLeavingPayload(bad).ok());
  // A REPLY with a payload: the same header, the payload not copied.
  const std::vector<std::string> reply =
      Encode(Message{Reply{42, "t1", 3, true, "", Json{{"iteration", 5}}}, "ckpt"});
  const std::vector<std::string_view> reply_views(reply.begin(), reply.end());
  auto r = DecodeLeavingPayload(reply_views);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->payload.empty());
  EXPECT_EQ(std::get<Reply>(r->body).rid, 42u);
  EXPECT_EQ(std::get<Reply>(r->body).data["iteration"], 5);
}

TEST(CodecTest, RoundTripsResultBatch) {
  ResultBatch b;
  b.rid = 9;
  b.trial_id = "t";
  b.attempt = 1;
  b.results = {
      {1, RawResult::FromJson(Json{{"loss", 0.5}, {"nested", {{"a", {1, 2, "x"}}}}, {"neg", -3}})},
      {2, RawResult::FromJson(Json{{"done", true}, {"none", nullptr}})}};
  b.failed = true;
  b.error = "step raised";
  auto d = RoundTrip(b);
  ASSERT_EQ(d.results.size(), 2u);
  EXPECT_EQ(d.results[0].result.ToJson(), b.results[0].result.ToJson());
  EXPECT_EQ(d.results[1].result.ToJson(), b.results[1].result.ToJson());
  EXPECT_TRUE(d.failed);
  EXPECT_EQ(d.error, "step raised");
}

TEST(CodecTest, EncodesABatchByItselfAsInAMessage) {
  ResultBatch b;
  b.rid = 3;
  b.trial_id = "t";
  b.attempt = 2;
  b.results = {{1, RawResult::FromJson(Json{{"loss", 0.5}})},
               {2, RawResult::FromJson(Json{{"done", true}})}};
  EXPECT_EQ(Encode(b), Encode(Message{b, {}}));
}

TEST(CodecTest, RoundTripsEveryHeadCommand) {
  EXPECT_EQ(RoundTrip(Registered{"w", 50, 3, 4, {}}).head_epoch, 4u);
  CreateActor c{1, "t", 2, "quadratic", Json{{"lr", 0.1}}, {{"CPU", 1}}, {3}, {}, {}};
  auto cd = RoundTrip(c);
  EXPECT_EQ(cd.trainable, "quadratic");
  EXPECT_EQ(cd.config, c.config);
  EXPECT_EQ(cd.gpu_ids, std::vector<int64_t>{3});
  auto t = RoundTrip(Train{2, "t", 2, 7, 1.5});
  EXPECT_EQ(t.buffer_length, 7);
  EXPECT_DOUBLE_EQ(t.buffer_time_s, 1.5);
  EXPECT_EQ(RoundTrip(Save{3, "t", 2, "memory"}).storage, "memory");
  EXPECT_EQ(RoundTrip(Restore{4, "t", 2}, "ckpt").rid, 4u);
  auto r = RoundTrip(Reset{5, "t", 2, "u", 1, Json{{"x", 1}}});
  EXPECT_EQ(r.new_trial_id, "u");
  EXPECT_EQ(RoundTrip(Stop{6, "t", 2, 1000}).kill_after_ms, 1000);
  EXPECT_EQ(RoundTrip(Export{7, "t", 2, {"json"}}).formats, std::vector<std::string>{"json"});
  EXPECT_EQ(RoundTrip(Ack{"t", 2, 11, {}, {}}).seq, 11u);
  const Ack acks = RoundTrip(Ack{"t", 2, 11, {AckEntry{"u", 1, 3}, AckEntry{"v", 4, 9}}, {}});
  std::vector<std::string> each;
  ForEachAck(acks, [&](const AckEntry& e) {
    each.push_back(e.trial_id + "/" + std::to_string(e.attempt) + "/" + std::to_string(e.seq));
  });
  EXPECT_EQ(each, (std::vector<std::string>{"t/2/11", "u/1/3", "v/4/9"}));
  RoundTrip(Heartbeat{});
  EXPECT_EQ(RoundTrip(Disconnect{"bye"}).reason, "bye");
}

TEST(CodecTest, RoundTripsSubmittedCodeMessages) {
  CreateActor c{1,
                "t",
                2,
                kSubmittedPythonTrainable,
                Json::object(),
                {},
                {},
                "train.py:train",
                std::string(64, 'a')};
  auto cd = RoundTrip(c);
  EXPECT_EQ(cd.entry, "train.py:train");
  EXPECT_EQ(cd.code, c.code);
  // A CREATE_ACTOR of an older head (no entry, no code) still decodes.
  EXPECT_TRUE(
      RoundTrip(CreateActor{1, "t", 2, "noop", Json::object(), {}, {}, {}, {}}).entry.empty());
  auto f = RoundTrip(FetchCode{std::string(64, 'b'), 1 << 20});
  EXPECT_EQ(f.offset, 1u << 20);
  auto p = RoundTrip(CodePage{std::string(64, 'b'), 0, 5, true, ""}, "ZTDIR");
  EXPECT_EQ(p.size, 5u);
  EXPECT_TRUE(p.ok);
  auto refused = RoundTrip(CodePage{std::string(64, 'b'), 0, 0, false, "unknown"});
  EXPECT_FALSE(refused.ok);
  EXPECT_EQ(refused.error, "unknown");
  EXPECT_STREQ(CommandName(Body{FetchCode{}}), "FETCH_CODE");
  EXPECT_STREQ(CommandName(Body{CodePage{}}), "CODE");
  EXPECT_STREQ(CommandNameByByte(18), "FETCH_CODE");
  EXPECT_STREQ(CommandNameByByte(19), "CODE");
}

// The one-frame layout: kVersionOneFrame, the command byte and the header
// in one frame, the payload in a second; read by Decode as the split layout.
TEST(CodecTest, TheOneFrameLayoutJoinsVersionCommandAndHeader) {
  const std::vector<std::string> split = Encode(Message{Chunk{9, 1 << 20}, "bytes"});
  const OneFrameMessage joined(split);
  ASSERT_EQ(joined.frames().size(), 2u);
  EXPECT_EQ(joined.frames()[0], std::string(kVersionOneFrame) + split[1] + split[2]);
  EXPECT_EQ(joined.frames()[1], "bytes");
  EXPECT_EQ(joined.frames()[1].data(), split[3].data());  // a view, not a copy
  EXPECT_EQ(PayloadFrame(joined.frames()), "bytes");
  const std::vector<std::string_view> split_views(split.begin(), split.end());
  EXPECT_EQ(PayloadFrame(split_views), "bytes");
  auto left = DecodeLeavingPayload(joined.frames());
  ASSERT_TRUE(left.ok()) << left.status().ToString();
  EXPECT_TRUE(left->payload.empty());
  EXPECT_EQ(std::get<Chunk>(left->body).offset, 1u << 20);
  auto copied = Decode(joined.frames());
  ASSERT_TRUE(copied.ok());
  EXPECT_EQ(copied->payload, "bytes");

  const std::vector<std::string> beat = Encode(Message{Heartbeat{}, {}});
  const OneFrameMessage one_beat(beat);
  ASSERT_EQ(one_beat.frames().size(), 1u);
  EXPECT_EQ(PayloadFrame(one_beat.frames()), "");
}

TEST(CodecTest, RejectsMalformedOneFrameMessages) {
  const std::vector<std::string> split = Encode(Message{Heartbeat{}, {}});
  const std::string head = std::string(kVersionOneFrame) + split[1] + split[2];
  auto error = [](std::vector<std::string> frames) {
    auto m = Decode(frames);
    return m.ok() ? std::string("decoded") : m.status().message();
  };
  EXPECT_EQ(error({head}), "decoded");
  EXPECT_NE(error({kVersionOneFrame}).find("without a command byte"), std::string::npos);
  EXPECT_NE(error({head, "payload", "more"}).find("1 or 2 frames"), std::string::npos);
  EXPECT_NE(error({std::string(kVersionOneFrame) + "\x7f" + split[2]}).find("unknown command"),
            std::string::npos);
  EXPECT_NE(error({std::string(kVersionOneFrame) + split[1]}), "decoded");  // no header
  EXPECT_NE(error({std::string(kVersionOneFrame) + split[1] + "\xc1"}), "decoded");
  // The split layout's version with a header joined to it is neither.
  EXPECT_NE(error({std::string(kVersion) + split[1] + split[2]}).find("expected 3 or 4 frames"),
            std::string::npos);
  // A CHUNK needs its bytes in this layout too.
  const std::vector<std::string> chunk = Encode(Message{Chunk{9, 0}, "x"});
  const std::string chunk_head = std::string(kVersionOneFrame) + chunk[1] + chunk[2];
  EXPECT_NE(error({chunk_head}).find("payload frame"), std::string::npos);
  EXPECT_NE(error({chunk_head, ""}).find("payload frame"), std::string::npos);
}

TEST(CodecTest, RejectsWrongFrameCount) {
  EXPECT_FALSE(Decode(std::vector<std::string>{"ZTUNE1"}).ok());
  EXPECT_FALSE(Decode(std::vector<std::string>{"ZTUNE1", "\x04", "\x80", "a", "b"}).ok());
}

TEST(CodecTest, RejectsWrongVersionAndUnknownCommand) {
  auto frames = Encode(Message{Heartbeat{}, {}});
  frames[0] = "ZTUNE9";
  auto s = Decode(frames);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("version"), std::string::npos);
  frames = Encode(Message{Heartbeat{}, {}});
  frames[1] = std::string(1, '\x7f');
  s = Decode(frames);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("unknown command"), std::string::npos);
}

TEST(CodecTest, RejectsTruncatedHeaders) {
  Register r;
  r.worker_id = "w";
  r.resources = {{"CPU", 2}};
  auto frames = Encode(Message{r, {}});
  const std::string full = frames[2];
  for (size_t n = 0; n < full.size(); ++n) {
    frames[2] = full.substr(0, n);
    EXPECT_FALSE(Decode(frames).ok()) << "prefix of " << n << " bytes decoded";
  }
}

TEST(CodecTest, RejectsGarbageBytes) {
  uint32_t seed = 12345;
  for (int i = 0; i < 2000; ++i) {
    std::string junk;
    int len = static_cast<int>(seed % 40);
    for (int k = 0; k < len; ++k) {
      seed = seed * 1103515245 + 12345;
      junk.push_back(static_cast<char>(seed >> 16));
    }
    // Any outcome is fine as long as it is a value, not a crash; a decoded
    // message must then re-encode.
    auto d = Decode(std::vector<std::string>{"ZTUNE1", std::string(1, char(1 + i % 14)), junk});
    if (d.ok()) Encode(*d);
  }
}

TEST(CodecTest, RejectsMissingRequiredFieldAndWrongType) {
  // A TRAIN header without rid.
  std::string header = JsonToMsgpack(Json{{"trial_id", "t"}, {"attempt", 1}});
  auto d = Decode(std::vector<std::string>{"ZTUNE1", std::string(1, char(8)), header});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("rid"), std::string::npos);
  header = JsonToMsgpack(Json{{"rid", "seven"}, {"trial_id", "t"}, {"attempt", 1}});
  d = Decode(std::vector<std::string>{"ZTUNE1", std::string(1, char(8)), header});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("TRAIN"), std::string::npos);
  // A header that is not a map.
  d = Decode(std::vector<std::string>{"ZTUNE1", std::string(1, char(8)), JsonToMsgpack(Json(3))});
  EXPECT_FALSE(d.ok());
}

TEST(CodecTest, IgnoresUnknownKeys) {
  std::string header =
      JsonToMsgpack(Json{{"rid", 1}, {"trial_id", "t"}, {"attempt", 1}, {"future", {1, 2}}});
  auto d = Decode(std::vector<std::string>{"ZTUNE1", std::string(1, char(8)), header});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(std::get<Train>(d->body).buffer_length, 1);
}

// msgpack-c allocates a container from its declared size before it reads the
// elements: 5 bytes of array32 header declaring a million elements cost 32 MiB
// (found by tests/fuzz/fuzz_codec). A declared size beyond what the frame can
// hold is now refused before anything is allocated; real containers of any
// size that fits still decode.
TEST(CodecTest, RefusesContainersLargerThanTheirFrameBeforeAllocating) {
  const std::string array_of_a_million("\xdd\x00\x0f\x42\x40", 5);
  const std::string map_of_100000("\xdf\x00\x01\x86\xa0", 5);
  for (const std::string& header : {array_of_a_million, map_of_100000}) {
    auto d = Decode(std::vector<std::string>{"ZTUNE1", std::string(1, char(8)), header});
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.status().message().find("size overflow"), std::string::npos)
        << d.status().message();
  }
  EXPECT_FALSE(MsgpackToJson(array_of_a_million).ok());

  Register r;
  r.worker_id = "w";
  for (int i = 0; i < 5000; ++i) r.gpu_ids.push_back(i % 2);  // one byte each
  for (int i = 0; i < 3000; ++i) r.resources["r" + std::to_string(i)] = 1;
  auto d = RoundTrip(r);
  EXPECT_EQ(d.gpu_ids.size(), 5000u);
  EXPECT_EQ(d.resources.size(), 3000u);
  Json nulls = Json::array();
  for (int i = 0; i < 70000; ++i) nulls.push_back(nullptr);
  auto back = MsgpackToJson(JsonToMsgpack(nulls));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->size(), 70000u);
}

// msgpack-c packs an integral double as an integer and, for exactly 2^64,
// converts it to uint64 first: undefined behaviour (clang's UBSan aborts;
// found by tests/fuzz/fuzz_codec, where a uint64 near the maximum decodes to
// that double). It goes out as a float64 and comes back unchanged.
TEST(CodecTest, EncodesTwoToThe64AsAFloat) {
  const double two_to_the_64 = 0x1p64;
  Register r;
  r.worker_id = "w";
  r.resources = {{"memory", two_to_the_64}};
  auto frames = Encode(Message{r, {}});
  EXPECT_NE(frames[2].find(std::string("\xcb\x43\xf0\0\0\0\0\0\0", 9)), std::string::npos);
  EXPECT_EQ(RoundTrip(r).resources.at("memory"), two_to_the_64);
  // Decoding turns the largest uint64s into that double; re-encoding works.
  std::string header = JsonToMsgpack(Json{{"worker_id", "w"}, {"resources", {{"memory", UINT64_MAX}}}});
  auto d = Decode(std::vector<std::string>{"ZTUNE1", std::string(1, char(1)), header});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(std::get<Register>(d->body).resources.at("memory"), two_to_the_64);
  EXPECT_TRUE(Decode(Encode(*d)).ok());
  auto back = MsgpackToJson(JsonToMsgpack(Json{{"x", two_to_the_64}, {"y", -0x1p63}}));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ((*back)["x"].get<double>(), two_to_the_64);
  EXPECT_EQ((*back)["y"].get<double>(), -0x1p63);
}

TEST(CodecTest, JsonMsgpackRoundTrip) {
  Json j{{"a", 1}, {"b", {1.5, "x", nullptr, true}}, {"c", {{"d", -2}}}};
  auto back = MsgpackToJson(JsonToMsgpack(j));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, j);
  EXPECT_FALSE(MsgpackToJson("\xc1").ok());
}

// Each thread reuses one decoding zone and one encoding buffer (codec.cc):
// what one message leaves behind must never show in the next, whatever their
// sizes and however the previous one ended.
TEST(CodecTest, ReusedBuffersKeepNothingBetweenMessages) {
  const std::string big(300 * 1024, 'b');  // beyond the shared zone and kept buffer sizes
  auto batch = [](const std::string& trial, Json result) {
    ResultBatch b;
    b.rid = 1;
    b.trial_id = trial;
    b.attempt = 1;
    b.results = {{1, RawResult::FromJson(result)}};
    return b;
  };
  const std::vector<ResultBatch> sequence = {
      batch("small", Json{{"loss", 1}}),
      batch("big", Json{{"blob", big}, {"list", Json(std::vector<int>(5000, 7))}}),
      batch("after-big", Json{{"loss", 2}}),
      batch("medium", Json{{"s", std::string(20 * 1024, 'm')}}),
      batch("last", Json{{"x", "y"}}),
  };
  for (int pass = 0; pass < 2; ++pass) {
    for (const ResultBatch& b : sequence) {
      SCOPED_TRACE(b.trial_id);
      auto frames = Encode(Message{b, {}});
      // A malformed message in between: its error must not leave the zone in use.
      std::vector<std::string> bad = frames;
      bad[2].resize(bad[2].size() / 2);
      EXPECT_FALSE(Decode(bad).ok());
      auto d = Decode(frames);
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      const auto& got = std::get<ResultBatch>(d->body);
      EXPECT_EQ(got.trial_id, b.trial_id);
      ASSERT_EQ(got.results.size(), 1u);
      EXPECT_EQ(got.results[0].result.ToJson(), b.results[0].result.ToJson());
      // And a message decoded while another's value is alive (two handles).
      auto a = MsgpackToJson(b.results[0].result.bytes);
      auto c = MsgpackToJson(JsonToMsgpack(Json{{"other", b.trial_id}}));
      ASSERT_TRUE(a.ok());
      ASSERT_TRUE(c.ok());
      EXPECT_EQ(*a, b.results[0].result.ToJson());
      EXPECT_EQ((*c)["other"], b.trial_id);
    }
  }
}

ResultBatch BatchOf(uint64_t rid, const std::string& trial, int results) {
  ResultBatch b;
  b.rid = rid;
  b.trial_id = trial;
  b.attempt = 1;
  for (int i = 1; i <= results; ++i) {
    b.results.push_back({static_cast<uint64_t>(i),
                         RawResult::FromJson(Json{{"loss", 1.0 / i}, {"training_iteration", i}})});
  }
  if (results == 0) {
    b.failed = true;
    b.error = "no actor for " + trial;
  }
  return b;
}

TEST(CodecTest, ResultsWriterSendsOneBatchAsAResult) {
  const ResultBatch b = BatchOf(5, "t", 2);
  ResultsWriter w;
  w.Add(b);
  EXPECT_EQ(w.count(), 1u);
  // Byte for byte what an old head reads: a RESULT.
  EXPECT_EQ(w.Finish(), Encode(b));
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(w.bytes(), 0u);
}

TEST(CodecTest, ResultsWriterCoalescesBatchesInOrder) {
  ResultsWriter w;
  std::vector<ResultBatch> sent;
  for (int i = 0; i < 3; ++i) {
    sent.push_back(BatchOf(10 + i, "t" + std::to_string(i), i));  // t0: a failed one
    w.Add(sent.back());
  }
  const auto frames = w.Finish();
  ASSERT_EQ(frames.size(), 3u);
  auto d = Decode(frames);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_TRUE(std::holds_alternative<Results>(d->body));
  EXPECT_STREQ(CommandName(d->body), "RESULTS");
  const auto& got = std::get<Results>(d->body).batches;
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].rid, sent[i].rid);
    EXPECT_EQ(got[i].trial_id, sent[i].trial_id);
    EXPECT_EQ(got[i].failed, sent[i].failed);
    EXPECT_EQ(got[i].error, sent[i].error);
    ASSERT_EQ(got[i].results.size(), sent[i].results.size());
    for (size_t k = 0; k < got[i].results.size(); ++k) {
      EXPECT_EQ(got[i].results[k].seq, sent[i].results[k].seq);
      EXPECT_EQ(got[i].results[k].result, sent[i].results[k].result);
    }
  }
  // The generic encoder writes the same message.
  EXPECT_EQ(frames, Encode(Message{Results{sent}, {}}));
  // Reused after Finish: the next message holds only what was added since.
  w.Add(sent[2]);
  EXPECT_EQ(w.Finish(), Encode(sent[2]));
}

TEST(CodecTest, RoundTripsTrainsAndFeatures) {
  Trains t;
  t.trains = {Train{1, "a", 1, 1, 0}, Train{2, "b", 3, 10, 2.5}};
  const Trains d = RoundTrip(t);
  ASSERT_EQ(d.trains.size(), 2u);
  EXPECT_EQ(d.trains[1].rid, 2u);
  EXPECT_EQ(d.trains[1].trial_id, "b");
  EXPECT_EQ(d.trains[1].attempt, 3u);
  EXPECT_EQ(d.trains[1].buffer_length, 10);
  EXPECT_DOUBLE_EQ(d.trains[1].buffer_time_s, 2.5);
  Register r;
  r.worker_id = "w";
  r.resources = {{"CPU", 1}};
  r.features = {kFeatureTrains};
  EXPECT_EQ(RoundTrip(r).features, std::vector<std::string>{kFeatureTrains});
  Registered reg{"w", 50, 3, 4, {kFeatureResults}};
  EXPECT_EQ(RoundTrip(reg).features, std::vector<std::string>{kFeatureResults});
  // Without the key (an older peer): no features.
  EXPECT_TRUE(RoundTrip(Registered{"w", 50, 3, 4, {}}).features.empty());
}

TEST(CodecTest, RefusesEmptyAndOversizedCoalescedMessages) {
  auto d = Decode(Encode(Message{Trains{}, {}}));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("TRAINS: 0 entries (1 to 4096 allowed)"), std::string::npos)
      << d.status().message();
  EXPECT_FALSE(Decode(Encode(Message{Results{}, {}})).ok());
  Results many;
  many.batches.resize(kMaxCoalesced + 1, BatchOf(1, "t", 0));
  d = Decode(Encode(Message{many, {}}));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("RESULTS: 4097 entries"), std::string::npos)
      << d.status().message();
  many.batches.pop_back();
  d = Decode(Encode(Message{many, {}}));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(std::get<Results>(d->body).batches.size(), kMaxCoalesced);
  // An entry that is not a whole TRAIN refuses the whole message.
  auto frames = Encode(Message{Trains{{Train{1, "a", 1, 1, 0}}}, {}});
  ASSERT_TRUE(Decode(frames).ok());
  frames[2] = JsonToMsgpack(
      Json{{"trains", Json::array({Json{{"rid", 1}, {"trial_id", "a"}, {"attempt", 1}},
                                   Json{{"rid", 2}, {"attempt", 1}}})}});
  d = Decode(frames);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("missing required field 'trains[1].trial_id'"),
            std::string::npos)
      << d.status().message();
}

// An ACK carries 0 to kMaxCoalesced TRAINs (kFeatureAckTrains); one from an
// older head has none, and one with more, or a malformed one, is refused whole.
TEST(CodecTest, AnAckCarriesTrainsWithinTheBound) {
  Ack ack{"t", 2, 11, {AckEntry{"u", 1, 3}}, {Train{7, "t", 2, 1, 0}, Train{8, "u", 1, 4, 0.5}}};
  const Ack d = RoundTrip(ack);
  EXPECT_EQ(d.seq, 11u);
  ASSERT_EQ(d.more.size(), 1u);
  ASSERT_EQ(d.trains.size(), 2u);
  EXPECT_EQ(d.trains[0].rid, 7u);
  EXPECT_EQ(d.trains[1].trial_id, "u");
  EXPECT_EQ(d.trains[1].buffer_length, 4);
  EXPECT_DOUBLE_EQ(d.trains[1].buffer_time_s, 0.5);
  // An older head's ACK, without the key.
  auto frames = Encode(Message{Ack{"t", 2, 11, {}, {}}, {}});
  frames[2] = JsonToMsgpack(Json{{"trial_id", "t"}, {"attempt", 2}, {"seq", 11}});
  auto decoded = Decode(frames);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(std::get<Ack>(decoded->body).trains.empty());
  ack.trains.assign(kMaxCoalesced, Train{9, "t", 2, 1, 0});
  EXPECT_EQ(RoundTrip(ack).trains.size(), kMaxCoalesced);
  ack.trains.push_back(Train{10, "t", 2, 1, 0});
  decoded = Decode(Encode(Message{ack, {}}));
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("ACK: 4097 trains (at most 4096 allowed)"),
            std::string::npos)
      << decoded.status().message();
  frames[2] = JsonToMsgpack(Json{{"trial_id", "t"},
                                 {"attempt", 2},
                                 {"seq", 11},
                                 {"trains", Json::array({Json{{"rid", 1}, {"attempt", 1}}})}});
  decoded = Decode(frames);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("missing required field 'trains[0].trial_id'"),
            std::string::npos)
      << decoded.status().message();
}

}  // namespace
}  // namespace ztune::protocol
