#include "head/payload_streams.h"

#include <gtest/gtest.h>

namespace ztune::head {
namespace {

struct Delivered {
  std::string worker_id;
  protocol::Reply reply;
  std::string payload;
};

class PayloadStreamsTest : public ::testing::Test {
 protected:
  PayloadStreamsTest()
      : streams_(
            /*max_save_payload_bytes=*/8 * protocol::kChunkBytes,
            [this](const std::string& w, const protocol::Message& m) { sent_.push_back({w, m}); },
            [this](const std::string& w, const protocol::Reply& r, const std::string& p) {
              delivered_.push_back({w, r, p});
            }) {}

  static protocol::Message SaveReply(uint64_t rid, uint64_t payload_bytes) {
    protocol::Reply r;
    r.rid = rid;
    r.trial_id = "e0001_00000";
    r.attempt = 1;
    r.data = Json{{"iteration", 3}};
    r.payload_bytes = payload_bytes;
    return protocol::Message{r, {}};
  }
  template <class T>
  std::vector<T> SentOf(const std::string& worker) const {
    std::vector<T> out;
    for (const auto& [w, m] : sent_) {
      if (w == worker && std::holds_alternative<T>(m.body)) out.push_back(std::get<T>(m.body));
    }
    return out;
  }

  std::vector<std::pair<std::string, protocol::Message>> sent_;
  std::vector<Delivered> delivered_;
  PayloadStreams streams_;
};

TEST_F(PayloadStreamsTest, ASavePayloadIsCreditedChunkByChunkAndDeliveredWhole) {
  const std::string payload(2 * protocol::kChunkBytes + 5, 'p');
  streams_.OnReply("w1", SaveReply(7, payload.size()));
  EXPECT_TRUE(delivered_.empty()) << "held until its payload is complete";
  for (uint64_t offset = 0; offset < payload.size(); offset += protocol::kChunkBytes) {
    streams_.OnChunk("w1", protocol::Chunk{7, offset}, payload.substr(offset, protocol::kChunkBytes));
  }
  const auto credits = SentOf<protocol::Credit>("w1");
  ASSERT_EQ(credits.size(), 3u);
  EXPECT_EQ(credits.back().received, payload.size());
  EXPECT_FALSE(credits.back().cancel);
  ASSERT_EQ(delivered_.size(), 1u);
  EXPECT_TRUE(delivered_[0].reply.ok);
  EXPECT_EQ(delivered_[0].reply.rid, 7u);
  EXPECT_EQ(delivered_[0].payload, payload);
  EXPECT_TRUE(streams_.Workers().empty());
}

TEST_F(PayloadStreamsTest, AnOversizeSaveFailsItsRequestAndTellsTheWorkerToStop) {
  streams_.OnReply("w1", SaveReply(7, 9 * protocol::kChunkBytes));
  ASSERT_EQ(delivered_.size(), 1u);
  EXPECT_FALSE(delivered_[0].reply.ok);
  EXPECT_NE(delivered_[0].reply.error.find("checkpoint transfer refused"), std::string::npos)
      << delivered_[0].reply.error;
  const auto credits = SentOf<protocol::Credit>("w1");
  ASSERT_EQ(credits.size(), 1u);
  EXPECT_TRUE(credits[0].cancel);
  // Its chunks, already on their way, change nothing.
  streams_.OnChunk("w1", protocol::Chunk{7, 0}, "xyz");
  EXPECT_EQ(delivered_.size(), 1u);
  EXPECT_EQ(SentOf<protocol::Credit>("w1").size(), 1u);
}

TEST_F(PayloadStreamsTest, AChunkOutOfOrderFailsTheSave) {
  streams_.OnReply("w1", SaveReply(7, 10));
  streams_.OnChunk("w1", protocol::Chunk{7, 4}, "abc");
  ASSERT_EQ(delivered_.size(), 1u);
  EXPECT_FALSE(delivered_[0].reply.ok);
  EXPECT_NE(delivered_[0].reply.error.find("checkpoint transfer failed"), std::string::npos);
  EXPECT_TRUE(SentOf<protocol::Credit>("w1").back().cancel);
}

TEST_F(PayloadStreamsTest, ARestoreStreamsWithinItsWindowAndEndsWithTheReply) {
  protocol::Restore restore;
  restore.rid = 9;
  restore.trial_id = "e0001_00000";
  restore.attempt = 2;
  protocol::Message m{restore, std::string(10 * protocol::kChunkBytes, 'r')};
  std::string payload = PayloadStreams::SplitLargeRestore(m);
  ASSERT_EQ(payload.size(), 10 * protocol::kChunkBytes);
  EXPECT_TRUE(m.payload.empty());
  EXPECT_EQ(std::get<protocol::Restore>(m.body).payload_bytes, payload.size());
  streams_.StartRestore("w2", 9, std::move(payload));
  EXPECT_EQ(SentOf<protocol::Chunk>("w2").size(), protocol::kWindowBytes / protocol::kChunkBytes);
  ASSERT_TRUE(streams_.OnCredit("w2", protocol::Credit{9, protocol::kChunkBytes, false}).ok());
  EXPECT_EQ(SentOf<protocol::Chunk>("w2").size(), protocol::kWindowBytes / protocol::kChunkBytes + 1);
  EXPECT_FALSE(streams_.OnCredit("w2", protocol::Credit{9, 100 * protocol::kChunkBytes, false}).ok());
  // The worker answers (e.g. "no actor"): the stream ends there.
  protocol::Reply answer;
  answer.rid = 9;
  answer.ok = false;
  answer.error = "no actor";
  streams_.OnReply("w2", protocol::Message{answer, {}});
  ASSERT_EQ(delivered_.size(), 1u);
  EXPECT_TRUE(streams_.Workers().empty());
  ASSERT_TRUE(streams_.OnCredit("w2", protocol::Credit{9, 2 * protocol::kChunkBytes, false}).ok());
  EXPECT_EQ(SentOf<protocol::Chunk>("w2").size(), protocol::kWindowBytes / protocol::kChunkBytes + 1);
}

TEST_F(PayloadStreamsTest, SmallRestoresStayInline) {
  protocol::Message m{protocol::Restore{}, std::string(protocol::kInlinePayloadBytes, 'r')};
  EXPECT_TRUE(PayloadStreams::SplitLargeRestore(m).empty());
  EXPECT_EQ(m.payload.size(), protocol::kInlinePayloadBytes);
}

TEST_F(PayloadStreamsTest, DroppingAWorkerForgetsItsStreamsBothWays) {
  streams_.OnReply("w1", SaveReply(7, 10));
  streams_.StartRestore("w1", 8, std::string(protocol::kInlinePayloadBytes + 1, 'r'));
  streams_.StartRestore("w2", 8, std::string(protocol::kInlinePayloadBytes + 1, 'r'));
  streams_.DropWorker("w1");
  EXPECT_EQ(streams_.Workers(), std::vector<WorkerId>{"w2"});
  streams_.OnChunk("w1", protocol::Chunk{7, 0}, "0123456789");
  EXPECT_TRUE(delivered_.empty());
}

}  // namespace
}  // namespace ztune::head
