#include "head/payload_streams.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/fakes/temp_dir.h"

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
  static std::unique_ptr<protocol::PayloadSource> Bytes(size_t n) {
    return std::make_unique<protocol::StringPayloadSource>(std::string(n, 'r'));
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
  // Six chunks more than one window.
  const uint64_t size = protocol::kWindowBytes + 6 * protocol::kChunkBytes;
  protocol::Message m{restore, std::string(size, 'r')};
  std::unique_ptr<protocol::PayloadSource> payload = streams_.SplitLargeRestore(m);
  ASSERT_NE(payload, nullptr);
  ASSERT_EQ(payload->size(), size);
  EXPECT_TRUE(m.payload.empty());
  EXPECT_EQ(std::get<protocol::Restore>(m.body).payload_bytes, payload->size());
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
  EXPECT_EQ(streams_.SplitLargeRestore(m), nullptr);
  EXPECT_EQ(m.payload.size(), protocol::kInlinePayloadBytes);
}

TEST_F(PayloadStreamsTest, DroppingAWorkerForgetsItsStreamsBothWays) {
  streams_.OnReply("w1", SaveReply(7, 10));
  streams_.StartRestore("w1", 8, Bytes(protocol::kInlinePayloadBytes + 1));
  streams_.StartRestore("w2", 8, Bytes(protocol::kInlinePayloadBytes + 1));
  streams_.DropWorker("w1");
  EXPECT_EQ(streams_.Workers(), std::vector<WorkerId>{"w2"});
  streams_.OnChunk("w1", protocol::Chunk{7, 0}, "0123456789");
  EXPECT_TRUE(delivered_.empty());
}

// With checkpoint files: a SAVE goes to a file as it arrives and is
// delivered as the file's reference once durable; a RESTORE of that
// reference streams the file; a partial upload leaves no file behind.
class PayloadStreamsFilesTest : public PayloadStreamsTest {
 protected:
  PayloadStreamsFilesTest() {
    EXPECT_TRUE(files_.Open().ok());
    streams_.set_files(&files_, [this](const std::function<Status()>& job) {
      ++blocking_jobs_;
      return job();
    });
  }

  std::vector<std::string> FileNames() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      names.push_back(e.path().filename().string());
    }
    return names;
  }

  testing::TempDir tmp_;
  std::filesystem::path dir_{tmp_.path()};
  CheckpointFiles files_{dir_.string()};
  int blocking_jobs_ = 0;
};

TEST_F(PayloadStreamsFilesTest, ASaveBecomesADurableFileAndItsReferenceStreamsBack) {
  std::string payload(3 * protocol::kChunkBytes + 17, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7 + 3);
  streams_.OnReply("w1", SaveReply(7, payload.size()));
  for (uint64_t offset = 0; offset < payload.size(); offset += protocol::kChunkBytes) {
    streams_.OnChunk("w1", protocol::Chunk{7, offset},
                     payload.substr(offset, protocol::kChunkBytes));
  }
  ASSERT_EQ(delivered_.size(), 1u);
  EXPECT_TRUE(delivered_[0].reply.ok) << delivered_[0].reply.error;
  EXPECT_EQ(blocking_jobs_, 1) << "the sync ran as a blocking job, off the loop";
  auto ref = DecodeCheckpointFileRef(delivered_[0].payload);
  ASSERT_TRUE(ref.ok() && ref->has_value()) << "delivered a reference, not the bytes";
  EXPECT_EQ((*ref)->size, payload.size());
  EXPECT_EQ(FileNames(), std::vector<std::string>{(*ref)->name}) << "no partial file left";
  std::ifstream in(dir_ / (*ref)->name, std::ios::binary);
  std::stringstream whole;
  whole << in.rdbuf();
  EXPECT_TRUE(whole.str() == payload);

  protocol::Restore restore;
  restore.rid = 9;
  restore.trial_id = "e0001_00000";
  protocol::Message m{restore, delivered_[0].payload};
  std::unique_ptr<protocol::PayloadSource> source = streams_.SplitLargeRestore(m);
  ASSERT_NE(source, nullptr);
  EXPECT_TRUE(m.payload.empty());
  EXPECT_EQ(std::get<protocol::Restore>(m.body).payload_bytes, payload.size());
  streams_.StartRestore("w2", 9, std::move(source));
  std::string streamed;
  uint64_t credited = 0;
  while (streamed.size() < payload.size()) {
    auto chunks = sent_;
    sent_.clear();
    bool any = false;
    for (const auto& [w, msg] : chunks) {
      if (w != "w2" || !std::holds_alternative<protocol::Chunk>(msg.body)) continue;
      streamed += msg.payload;
      any = true;
    }
    ASSERT_TRUE(any);
    credited = streamed.size();
    ASSERT_TRUE(streams_.OnCredit("w2", protocol::Credit{9, credited, false}).ok());
  }
  EXPECT_TRUE(streamed == payload);
  EXPECT_TRUE(streams_.Workers().empty());
}

TEST_F(PayloadStreamsFilesTest, AnUnfinishedOrRefusedUploadLeavesNoFile) {
  streams_.OnReply("w1", SaveReply(7, 2 * protocol::kChunkBytes));
  streams_.OnChunk("w1", protocol::Chunk{7, 0}, std::string(protocol::kChunkBytes, 'a'));
  EXPECT_EQ(FileNames().size(), 1u);  // the partial file
  // Out of order: the transfer ends, the request fails, the file goes.
  streams_.OnChunk("w1", protocol::Chunk{7, 5}, "x");
  ASSERT_EQ(delivered_.size(), 1u);
  EXPECT_FALSE(delivered_[0].reply.ok);
  EXPECT_TRUE(FileNames().empty());
  // A worker that dies mid-upload: the same.
  streams_.OnReply("w1", SaveReply(8, 2 * protocol::kChunkBytes));
  streams_.OnChunk("w1", protocol::Chunk{8, 0}, std::string(protocol::kChunkBytes, 'a'));
  streams_.DropWorker("w1");
  EXPECT_TRUE(FileNames().empty());
  // Above the limit: refused before any space is taken.
  streams_.OnReply("w1", SaveReply(9, 9 * protocol::kChunkBytes));
  ASSERT_EQ(delivered_.size(), 2u);
  EXPECT_NE(delivered_[1].reply.error.find("limit"), std::string::npos)
      << delivered_[1].reply.error;
  EXPECT_TRUE(FileNames().empty());
}

// A hostile or confused worker announcing payloads for requests the head
// never sent gets nothing set aside: no file, no space reserved, no memory;
// its transfer is cancelled and the (unknown) request failed.
TEST_F(PayloadStreamsFilesTest, APayloadNoSaveAskedForSetsNothingAside) {
  streams_.set_payload_filter(
      [](const WorkerId& w, uint64_t rid) { return w == "w1" && rid == 7; });
  for (uint64_t rid = 100; rid < 110; ++rid) streams_.OnReply("w1", SaveReply(rid, 1ull << 30));
  streams_.OnReply("w2", SaveReply(7, 1ull << 30));
  EXPECT_TRUE(FileNames().empty());
  EXPECT_TRUE(streams_.Workers().empty());
  ASSERT_EQ(delivered_.size(), 11u);
  EXPECT_FALSE(delivered_[0].reply.ok);
  EXPECT_NE(delivered_[0].reply.error.find("not a SAVE this head sent"), std::string::npos)
      << delivered_[0].reply.error;
  EXPECT_EQ(SentOf<protocol::Credit>("w1").size(), 10u);
  EXPECT_TRUE(SentOf<protocol::Credit>("w2").back().cancel);
  streams_.OnReply("w1", SaveReply(7, protocol::kChunkBytes));  // the one it asked for
  EXPECT_EQ(FileNames().size(), 1u);
}

TEST_F(PayloadStreamsFilesTest, ARestoreOfAMissingFileGoesWithoutAPayload) {
  protocol::Restore restore;
  restore.rid = 4;
  restore.trial_id = "e0001_00000";
  protocol::Message m{restore, EncodeCheckpointFileRef({"0123abcd-1.ckpt", 5000})};
  EXPECT_EQ(streams_.SplitLargeRestore(m), nullptr);
  EXPECT_TRUE(m.payload.empty())
      << "the worker refuses an empty RESTORE; the trial's restore fails";
  EXPECT_EQ(std::get<protocol::Restore>(m.body).payload_bytes, 0u);
}

}  // namespace
}  // namespace ztune::head
