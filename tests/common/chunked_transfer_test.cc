#include "common/protocol/chunked_transfer.h"

#include <gtest/gtest.h>

#include "common/protocol/codec.h"

namespace ztune::protocol {
namespace {

std::string Bytes(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + i % 26);
  return s;
}

Message ReplyHeader(uint64_t rid, uint64_t bytes) {
  Reply r;
  r.rid = rid;
  r.trial_id = "e0001_00000";
  r.attempt = 1;
  r.data = Json{{"iteration", 3}};
  r.payload_bytes = bytes;
  return Message{r, {}};
}

// Drives a sender and an assembler against each other and returns the
// largest number of bytes that were ever in flight (sent, not credited).
TEST(ChunkedTransferTest, PayloadArrivesWholeAndTheWindowBoundsWhatIsInFlight) {
  const std::string payload = Bytes(10 * 1000 + 7);
  ChunkSender sender(/*chunk_bytes=*/1000, /*window_bytes=*/3000);
  ChunkAssembler assembler(/*max_payload_bytes=*/1 << 20);
  ASSERT_TRUE(assembler.Expect("w1", ReplyHeader(42, payload.size())).ok());
  sender.Start("w1", 42, payload);

  std::optional<Message> done;
  int rounds = 0;
  while (!done) {
    ASSERT_LT(++rounds, 100);
    std::vector<ChunkSender::Outgoing> out;
    sender.TakeSendable(out);
    ASSERT_FALSE(out.empty());
    ASSERT_LE(out.size(), 3u) << "more than the window in flight";
    for (auto& o : out) {
      EXPECT_EQ(o.peer, "w1");
      // Through the real codec, as on the wire.
      auto decoded = Decode(Encode(o.message));
      ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
      const auto& chunk = std::get<Chunk>(decoded->body);
      auto r = assembler.OnChunk("w1", chunk, decoded->payload);
      ASSERT_TRUE(std::holds_alternative<ChunkAssembler::Progress>(r));
      auto& progress = std::get<ChunkAssembler::Progress>(r);
      ASSERT_TRUE(sender.OnCredit("w1", progress.credit).ok());
      if (progress.done) done = std::move(progress.done);
    }
  }
  EXPECT_EQ(done->payload, payload);
  const auto& reply = std::get<Reply>(done->body);
  EXPECT_EQ(reply.rid, 42u);
  EXPECT_EQ(reply.data["iteration"], 3);
  EXPECT_TRUE(sender.empty()) << "the last credit ends the transfer";
  EXPECT_TRUE(assembler.empty());
}

TEST(ChunkedTransferTest, SenderStopsAtTheWindowUntilCredited) {
  ChunkSender sender(/*chunk_bytes=*/100, /*window_bytes=*/250);
  sender.Start("", 7, Bytes(1000));
  std::vector<ChunkSender::Outgoing> out;
  sender.TakeSendable(out);
  // 0..100, 100..200, 200..300: the third starts inside the window.
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(std::get<Chunk>(out[2].message.body).offset, 200u);
  out.clear();
  sender.TakeSendable(out);
  EXPECT_TRUE(out.empty());
  ASSERT_TRUE(sender.OnCredit("", Credit{7, 100}).ok());
  sender.TakeSendable(out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(std::get<Chunk>(out[0].message.body).offset, 300u);
}

TEST(ChunkedTransferTest, BadCreditsAreRefusedAndChangeNothing) {
  ChunkSender sender(100, 100);
  sender.Start("w", 1, Bytes(300));
  std::vector<ChunkSender::Outgoing> out;
  sender.TakeSendable(out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(sender.OnCredit("w", Credit{1, 200}).ok()) << "credit beyond what was sent";
  EXPECT_TRUE(sender.OnCredit("w", Credit{99, 5}).ok()) << "unknown transfers are ignored";
  EXPECT_TRUE(sender.OnCredit("other", Credit{1, 100}).ok()) << "another peer's rid is not ours";
  out.clear();
  sender.TakeSendable(out);
  EXPECT_TRUE(out.empty()) << "the refused credits opened no window";
  ASSERT_TRUE(sender.OnCredit("w", Credit{1, 100}).ok());
  EXPECT_FALSE(sender.OnCredit("w", Credit{1, 50}).ok()) << "credit going backwards";
}

TEST(ChunkedTransferTest, CancelFromTheReceiverEndsTheTransfer) {
  ChunkSender sender(100, 200);
  sender.Start("w", 1, Bytes(1000));
  std::vector<ChunkSender::Outgoing> out;
  sender.TakeSendable(out);
  ASSERT_EQ(out.size(), 2u);
  Credit cancel{1, 0, /*cancel=*/true};
  ASSERT_TRUE(sender.OnCredit("w", cancel).ok());
  EXPECT_FALSE(sender.Contains("w", 1));
  out.clear();
  sender.TakeSendable(out);
  EXPECT_TRUE(out.empty());
  auto decoded = Decode(Encode(Message{cancel, {}}));
  ASSERT_TRUE(decoded.ok());
  EXPECT_TRUE(std::get<Credit>(decoded->body).cancel);
}

TEST(ChunkedTransferTest, AssemblerRefusesOversizeDuplicateAndInlineHeaders) {
  ChunkAssembler assembler(1000);
  EXPECT_FALSE(assembler.Expect("w", ReplyHeader(1, 1001)).ok());
  EXPECT_FALSE(assembler.Expect("w", ReplyHeader(1, 0)).ok());
  Message inline_too = ReplyHeader(1, 10);
  inline_too.payload = "x";
  EXPECT_FALSE(assembler.Expect("w", inline_too).ok());
  EXPECT_TRUE(assembler.empty());
  ASSERT_TRUE(assembler.Expect("w", ReplyHeader(1, 10)).ok());
  EXPECT_FALSE(assembler.Expect("w", ReplyHeader(1, 10)).ok());
  EXPECT_TRUE(assembler.Expect("v", ReplyHeader(1, 10)).ok()) << "rids are per peer";
  EXPECT_EQ(assembler.size(), 2u);
}

TEST(ChunkedTransferTest, ChunkOutOfOrderOrPastTheEndEndsTheTransferWithItsHeader) {
  ChunkAssembler assembler(1000);
  ASSERT_TRUE(assembler.Expect("w", ReplyHeader(1, 10)).ok());
  auto r = assembler.OnChunk("w", Chunk{1, 5}, "abc");
  ASSERT_TRUE(std::holds_alternative<ChunkAssembler::Refusal>(r));
  auto& refusal = std::get<ChunkAssembler::Refusal>(r);
  EXPECT_EQ(refusal.error.code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(refusal.header.has_value());
  EXPECT_EQ(std::get<Reply>(refusal.header->body).rid, 1u);
  EXPECT_TRUE(assembler.empty());

  ASSERT_TRUE(assembler.Expect("w", ReplyHeader(2, 4)).ok());
  auto past = assembler.OnChunk("w", Chunk{2, 0}, "abcde");
  ASSERT_TRUE(std::holds_alternative<ChunkAssembler::Refusal>(past));
  EXPECT_TRUE(std::get<ChunkAssembler::Refusal>(past).header.has_value());

  auto unknown = assembler.OnChunk("w", Chunk{3, 0}, "a");
  ASSERT_TRUE(std::holds_alternative<ChunkAssembler::Refusal>(unknown));
  EXPECT_EQ(std::get<ChunkAssembler::Refusal>(unknown).error.code(), StatusCode::kNotFound);
  EXPECT_FALSE(std::get<ChunkAssembler::Refusal>(unknown).header.has_value());
}

// The payload is written in place from its first chunk: no chunk reallocates
// what came before. (A string grown chunk by chunk copies everything received
// into fresh pages at each doubling, and a payload one byte over a power of
// two doubled at its last chunk: on a VM that held the control thread past
// the liveness window.)
TEST(ChunkedTransferTest, AssemblerWritesThePayloadInPlaceFromItsFirstChunk) {
  constexpr size_t kChunk = 1 << 16;
  const std::string payload = Bytes(16 * kChunk + 88);
  ChunkAssembler assembler(/*max_payload_bytes=*/1 << 24);
  ASSERT_TRUE(assembler.Expect("w1", ReplyHeader(7, payload.size())).ok());
  std::optional<Message> done;
  for (size_t offset = 0; offset < payload.size(); offset += kChunk) {
    const std::string_view bytes = std::string_view(payload).substr(offset, kChunk);
    auto r = assembler.OnChunk("w1", Chunk{7, offset}, bytes);
    ASSERT_TRUE(std::holds_alternative<ChunkAssembler::Progress>(r));
    if (auto& p = std::get<ChunkAssembler::Progress>(r); p.done) done = std::move(p.done);
  }
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->payload, payload);
  // Grown by doubling, the buffer would end at twice the last power of two
  // (32 chunks' worth here); reserved once, it ends at the announced size.
  EXPECT_LT(done->payload.capacity(), payload.size() + kChunk);
}

TEST(ChunkedTransferTest, TakePeerReturnsEveryTransferOfThatPeerOnly) {
  ChunkSender sender(100, 100);
  sender.Start("a", 2, "xx");
  sender.Start("a", 1, "y");
  sender.Start("b", 1, "z");
  auto taken = sender.TakePeer("a");
  ASSERT_EQ(taken.size(), 2u);
  auto whole = [](PayloadSource& s) {
    std::string out;
    EXPECT_TRUE(s.ReadAt(0, s.size(), out).ok());
    return out;
  };
  EXPECT_EQ(taken[0].first, 1u);
  EXPECT_EQ(whole(*taken[0].second), "y");
  EXPECT_EQ(taken[1].first, 2u);
  EXPECT_EQ(whole(*taken[1].second), "xx");
  EXPECT_EQ(sender.Peers(), std::vector<std::string>{"b"});

  ChunkAssembler assembler(100);
  ASSERT_TRUE(assembler.Expect("a", ReplyHeader(1, 5)).ok());
  ASSERT_TRUE(assembler.Expect("b", ReplyHeader(1, 5)).ok());
  auto headers = assembler.TakePeer("a");
  ASSERT_EQ(headers.size(), 1u);
  EXPECT_EQ(assembler.Peers(), std::vector<std::string>{"b"});
  EXPECT_TRUE(assembler.Cancel("b", 1).has_value());
  EXPECT_FALSE(assembler.Cancel("b", 1).has_value());
}

TEST(ChunkedTransferTest, ChunkWithoutPayloadFrameIsMalformed) {
  auto frames = Encode(Message{Chunk{1, 0}, {}});
  auto decoded = Decode(frames);
  EXPECT_FALSE(decoded.ok());
}

// A sink that keeps what it is given and refuses once `fail_at` bytes are in.
class RecordingSink : public PayloadSink {
 public:
  explicit RecordingSink(std::string* out, uint64_t fail_at = UINT64_MAX)
      : out_(out), fail_at_(fail_at) {}
  Status Append(std::string_view bytes) override {
    if (out_->size() + bytes.size() > fail_at_) return Status::IOError("disk full");
    out_->append(bytes);
    return Status::Ok();
  }

 private:
  std::string* out_;
  uint64_t fail_at_;
};

TEST(ChunkedTransferTest, APayloadIsAssembledIntoASink) {
  const std::string a = Bytes(250), b = Bytes(1000), c = "tail";
  ChunkSender sender(/*chunk_bytes=*/300, /*window_bytes=*/600);
  sender.Start("", 9, a + b + c);
  ChunkAssembler assembler(1 << 20);
  std::string sunk;
  ASSERT_TRUE(assembler
                  .Expect("", ReplyHeader(9, a.size() + b.size() + c.size()),
                          std::make_unique<RecordingSink>(&sunk))
                  .ok());
  bool done = false;
  while (!done) {
    std::vector<ChunkSender::Outgoing> out;
    sender.TakeSendable(out);
    ASSERT_FALSE(out.empty());
    for (auto& o : out) {
      auto r = assembler.OnChunk("", std::get<Chunk>(o.message.body), o.message.payload);
      auto& progress = std::get<ChunkAssembler::Progress>(r);
      ASSERT_TRUE(sender.OnCredit("", progress.credit).ok());
      if (progress.done) {
        EXPECT_TRUE(progress.done->payload.empty());  // the bytes went to the sink
        EXPECT_NE(progress.sink, nullptr);
        done = true;
      }
    }
  }
  EXPECT_EQ(sunk, a + b + c);
  EXPECT_TRUE(sender.empty());
  EXPECT_TRUE(assembler.empty());
}

TEST(ChunkedTransferTest, ASinkThatFailsEndsTheTransferWithItsError) {
  ChunkAssembler assembler(1 << 20);
  std::string sunk;
  ASSERT_TRUE(
      assembler.Expect("w", ReplyHeader(3, 300), std::make_unique<RecordingSink>(&sunk, 150)).ok());
  auto first = assembler.OnChunk("w", Chunk{3, 0}, Bytes(100));
  ASSERT_TRUE(std::holds_alternative<ChunkAssembler::Progress>(first));
  auto second = assembler.OnChunk("w", Chunk{3, 100}, Bytes(100));
  auto* refusal = std::get_if<ChunkAssembler::Refusal>(&second);
  ASSERT_NE(refusal, nullptr);
  EXPECT_NE(refusal->error.message().find("disk full"), std::string::npos);
  ASSERT_TRUE(refusal->header.has_value());
  EXPECT_TRUE(assembler.empty());
}

TEST(ChunkedTransferTest, AFileSourceChecksItsSizeAndAReadErrorEndsOnlyItsTransfer) {
  const std::string path = ::testing::TempDir() + "/payload_source_test.bin";
  const std::string content = Bytes(2500);
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(content.data(), 1, content.size(), f), content.size());
    std::fclose(f);
  }
  auto wrong = FilePayloadSource::Open(path, content.size() + 1);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("2500 bytes"), std::string::npos);
  EXPECT_FALSE(FilePayloadSource::Open(path + ".missing", 1).ok());

  auto source = FilePayloadSource::Open(path, content.size());
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  std::remove(path.c_str());  // an open file is still read after an unlink
  ChunkSender sender(1000, 10000);
  sender.Start("a", 1, std::move(*source));
  sender.Start("b", 1, "in memory");
  std::vector<ChunkSender::Outgoing> out;
  std::vector<ChunkSender::Failure> failures;
  sender.TakeSendable(out, &failures);
  EXPECT_TRUE(failures.empty());
  std::string got;
  for (const auto& o : out) {
    if (o.peer == "a") got += o.message.payload;
  }
  EXPECT_EQ(got, content);

  // A source that can no longer be read (the file shrank under it).
  class Shrunk : public PayloadSource {
   public:
    uint64_t size() const override { return 10; }
    Status ReadAt(uint64_t, uint64_t, std::string&) override {
      return Status::IOError("file ended early");
    }
  };
  sender.Start("c", 5, std::make_unique<Shrunk>());
  out.clear();
  sender.TakeSendable(out, &failures);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].peer, "c");
  EXPECT_EQ(failures[0].rid, 5u);
  EXPECT_FALSE(sender.Contains("c", 5));
  EXPECT_TRUE(sender.Contains("a", 1));  // still waiting for its credit
}

}  // namespace
}  // namespace ztune::protocol
