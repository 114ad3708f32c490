// The fleet simulator's worker (bench/fleet/sim_worker.h) against the worker
// side of docs/protocol.md, without sockets: what it sends for each message
// of the head, at which simulated time. Every message goes through the real
// codec both ways, so a field the head would refuse fails here.
#include "bench/fleet/sim_worker.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/checkpoint/checkpoint_envelope.h"
#include "common/protocol/codec.h"

namespace ztune::fleet {
namespace {

using protocol::Message;

constexpr TimeMs kStart = 1'000'000;
constexpr int64_t kHeartbeatMs = 100;
constexpr int64_t kLiveness = 3;
constexpr int64_t kStepMs = 50;

// What the head would receive: each message encoded and decoded again.
std::vector<Message> Wire(std::vector<Message>& out) {
  std::vector<Message> received;
  for (const Message& m : out) {
    auto decoded = protocol::Decode(protocol::Encode(m));
    EXPECT_TRUE(decoded.ok()) << decoded.status().ToString();
    if (decoded.ok()) received.push_back(std::move(*decoded));
  }
  out.clear();
  return received;
}

template <class T>
std::vector<T> OfKind(const std::vector<Message>& messages) {
  std::vector<T> found;
  for (const Message& m : messages) {
    if (const T* t = std::get_if<T>(&m.body)) found.push_back(*t);
  }
  return found;
}

class SimWorkerTest : public ::testing::Test {
 protected:
  SimWorkerOptions Options() {
    SimWorkerOptions o;
    o.name = "w";
    o.host = "host-w";
    o.pid = 42;
    o.resources = {{"CPU", 4}, {"GPU", 2}};
    o.step_ms = kStepMs;
    o.step_jitter = 0;
    o.heartbeat_ms = kHeartbeatMs;
    o.liveness = kLiveness;
    o.max_backoff_ms = 400;
    return o;
  }

  void Make(SimWorkerOptions o) { sim_ = std::make_unique<SimWorker>(std::move(o), 7); }

  // To the given time, running every timer that falls due on the way.
  std::vector<Message> AdvanceTo(TimeMs t) {
    std::vector<Message> out;
    while (sim_->NextTimerMs() <= t) {
      now_ = std::max(now_, sim_->NextTimerMs());
      last_action_ = sim_->OnTimer(now_, out);
      if (last_action_ != SimWorker::LinkAction::kNone) break;
    }
    if (last_action_ == SimWorker::LinkAction::kNone) now_ = t;
    return Wire(out);
  }

  std::vector<Message> Deliver(protocol::Body body, std::string payload = {}) {
    std::vector<Message> out;
    sim_->OnMessage(Message{std::move(body), std::move(payload)}, now_, out);
    return Wire(out);
  }

  // Connected and registered: returns the REGISTER it sent.
  protocol::Register Register(uint64_t epoch = 1, std::vector<std::string> head_features = {}) {
    std::vector<Message> out;
    sim_->OnConnected(now_, out);
    auto sent = OfKind<protocol::Register>(Wire(out));
    EXPECT_EQ(sent.size(), 1u);
    Deliver(protocol::Registered{sim_->worker_id(), kHeartbeatMs, kLiveness, epoch,
                                 std::move(head_features)});
    EXPECT_TRUE(sim_->registered());
    return sent.empty() ? protocol::Register{} : sent[0];
  }

  void Create(uint64_t rid, const std::string& trial, uint64_t attempt = 1,
              Json config = Json{{"x", 0.5}}) {
    auto replies = OfKind<protocol::Reply>(
        Deliver(protocol::CreateActor{rid, trial, attempt, kSimTrainable, config, {}, {}, {}, {}}));
    ASSERT_EQ(replies.size(), 1u);
    ASSERT_TRUE(replies[0].ok) << replies[0].error;
  }

  std::unique_ptr<SimWorker> sim_;
  TimeMs now_ = kStart;
  SimWorker::LinkAction last_action_ = SimWorker::LinkAction::kNone;
};

TEST_F(SimWorkerTest, RegistersWithItsResourcesAndResendsUntilRegistered) {
  Make(Options());
  std::vector<Message> out;
  sim_->OnConnected(now_, out);
  auto first = OfKind<protocol::Register>(Wire(out));
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].worker_id, sim_->worker_id());
  EXPECT_EQ(first[0].incarnation, 1u);
  EXPECT_EQ(first[0].resources, (std::map<std::string, double>{{"CPU", 4}, {"GPU", 2}}));
  EXPECT_EQ(first[0].gpu_ids, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(first[0].trainables, (std::vector<std::string>{kSimTrainable}));
  EXPECT_EQ(first[0].host, "host-w");
  // No answer: the same incarnation again every heartbeat interval.
  auto again = OfKind<protocol::Register>(AdvanceTo(kStart + kHeartbeatMs));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].incarnation, 1u);
  Deliver(protocol::Registered{sim_->worker_id(), kHeartbeatMs, kLiveness, 1, {}});
  EXPECT_TRUE(sim_->registered());
  // Registered and idle: heartbeats, one per interval.
  auto beats = AdvanceTo(now_ + 2 * kHeartbeatMs);
  EXPECT_EQ(OfKind<protocol::Heartbeat>(beats).size(), 2u);
  EXPECT_EQ(last_action_, SimWorker::LinkAction::kNone) << "within the head's liveness window";
}

TEST_F(SimWorkerTest, TrainAnswersAfterTheStepWithASequencedResult) {
  Make(Options());
  Register();
  Create(1, "t1");
  EXPECT_TRUE(Deliver(protocol::Train{2, "t1", 1, 1, 0}).empty()) << "a step takes time";
  EXPECT_TRUE(OfKind<protocol::ResultBatch>(AdvanceTo(kStart + kStepMs - 1)).empty());
  auto batches = OfKind<protocol::ResultBatch>(AdvanceTo(kStart + kStepMs));
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].rid, 2u);
  ASSERT_EQ(batches[0].results.size(), 1u);
  EXPECT_EQ(batches[0].results[0].seq, 1u);
  const Json r = batches[0].results[0].result.ToJson();
  EXPECT_EQ(r["training_iteration"], 1);
  EXPECT_EQ(r["done"], false);
  EXPECT_TRUE(r["score"].is_number());
  EXPECT_EQ(r["trial_id"], "t1");
  EXPECT_EQ(sim_->stats().results_sent, 1u);
}

TEST_F(SimWorkerTest, BufferedTrainCollectsUpToTheBufferLength) {
  Make(Options());
  Register();
  Create(1, "t1");
  Deliver(protocol::Train{2, "t1", 1, 3, 60.0});
  auto batches = OfKind<protocol::ResultBatch>(AdvanceTo(kStart + 3 * kStepMs));
  ASSERT_EQ(batches.size(), 1u);
  ASSERT_EQ(batches[0].results.size(), 3u);
  EXPECT_EQ(batches[0].results[2].seq, 3u);
  EXPECT_EQ(batches[0].results[2].result.ToJson()["training_iteration"], 3);
}

TEST_F(SimWorkerTest, DoneAtTheConfiguredIterations) {
  Make(Options());
  Register();
  Create(1, "t1", 1, Json{{"iterations", 2}});
  Deliver(protocol::Train{2, "t1", 1, 10, 60.0});
  auto batches = OfKind<protocol::ResultBatch>(AdvanceTo(kStart + 5 * kStepMs));
  ASSERT_EQ(batches.size(), 1u);
  ASSERT_EQ(batches[0].results.size(), 2u) << "a done result ends the batch";
  EXPECT_EQ(batches[0].results[1].result.ToJson()["done"], true);
}

TEST_F(SimWorkerTest, UnacknowledgedResultsAreReplayedAfterANewRegistration) {
  Make(Options());
  Register();
  Create(1, "t1");
  Deliver(protocol::Train{2, "t1", 1, 1, 0});
  AdvanceTo(now_ + kStepMs);
  Deliver(protocol::Ack{"t1", 1, 1, {}, {}});
  Deliver(protocol::Train{3, "t1", 1, 1, 0});
  AdvanceTo(now_ + kStepMs);
  EXPECT_EQ(sim_->stats().results_acked, 1u);
  // The head restarted: "I do not know you". The worker registers again on
  // the same connection and lists its actor; after REGISTERED it replays the
  // unacknowledged batch only.
  auto reg = OfKind<protocol::Register>(Deliver(protocol::Disconnect{"unknown worker"}));
  ASSERT_EQ(reg.size(), 1u);
  EXPECT_EQ(reg[0].incarnation, 2u);
  ASSERT_EQ(reg[0].live_actors.size(), 1u);
  EXPECT_EQ(reg[0].live_actors[0].trial_id, "t1");
  EXPECT_EQ(reg[0].live_actors[0].acked_seq, 1u);
  EXPECT_EQ(reg[0].live_actors[0].iteration, 2);
  EXPECT_FALSE(reg[0].live_actors[0].training);
  EXPECT_EQ(reg[0].live_actors[0].rids, (std::vector<uint64_t>{1, 2, 3}));
  auto replay = OfKind<protocol::ResultBatch>(
      Deliver(protocol::Registered{sim_->worker_id(), kHeartbeatMs, kLiveness, 2, {}}));
  ASSERT_EQ(replay.size(), 1u);
  EXPECT_EQ(replay[0].rid, 3u);
  ASSERT_EQ(replay[0].results.size(), 1u);
  EXPECT_EQ(replay[0].results[0].seq, 2u);
  EXPECT_EQ(sim_->stats().epoch_changes, 1u);
}

TEST_F(SimWorkerTest, ARequestSentAgainRunsOnce) {
  Make(Options());
  Register();
  Create(1, "t1");
  // CREATE_ACTOR again with its rid: the same answer, no "already exists".
  auto again = OfKind<protocol::Reply>(
      Deliver(protocol::CreateActor{1, "t1", 1, kSimTrainable, Json::object(), {}, {}, {}, {}}));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_TRUE(again[0].ok);
  // A TRAIN resent while it runs, and after it was answered: one batch.
  Deliver(protocol::Train{2, "t1", 1, 1, 0});
  Deliver(protocol::Train{2, "t1", 1, 1, 0});
  auto batches = OfKind<protocol::ResultBatch>(AdvanceTo(now_ + 3 * kStepMs));
  EXPECT_EQ(batches.size(), 1u);
  EXPECT_TRUE(Deliver(protocol::Train{2, "t1", 1, 1, 0}).empty());
  // A new CREATE_ACTOR for the same key is refused.
  auto dup = OfKind<protocol::Reply>(
      Deliver(protocol::CreateActor{9, "t1", 1, kSimTrainable, Json::object(), {}, {}, {}, {}}));
  ASSERT_EQ(dup.size(), 1u);
  EXPECT_FALSE(dup[0].ok);
  EXPECT_NE(dup[0].error.find("already exists"), std::string::npos) << dup[0].error;
}

TEST_F(SimWorkerTest, ASilentHeadIsPresumedDeadAndTheWorkerReconnects) {
  Make(Options());
  Register();
  Create(1, "t1");
  // Nothing from the head for heartbeat x liveness: close, back off, open.
  AdvanceTo(now_ + kHeartbeatMs * kLiveness);
  EXPECT_EQ(last_action_, SimWorker::LinkAction::kClose);
  EXPECT_FALSE(sim_->registered());
  EXPECT_EQ(sim_->stats().silence_reconnects, 1u);
  last_action_ = SimWorker::LinkAction::kNone;
  AdvanceTo(now_ + kHeartbeatMs);
  EXPECT_EQ(last_action_, SimWorker::LinkAction::kOpen);
  std::vector<Message> out;
  sim_->OnConnected(now_, out);
  auto reg = OfKind<protocol::Register>(Wire(out));
  ASSERT_EQ(reg.size(), 1u);
  EXPECT_EQ(reg[0].incarnation, 2u);
  EXPECT_EQ(reg[0].live_actors.size(), 1u);
}

TEST_F(SimWorkerTest, SaveAndRestoreInline) {
  Make(Options());
  Register();
  Create(1, "t1");
  Deliver(protocol::Train{2, "t1", 1, 2, 60.0});
  AdvanceTo(now_ + 2 * kStepMs);
  auto saved = Deliver(protocol::Save{3, "t1", 1, "persistent"});
  ASSERT_EQ(saved.size(), 1u);
  const auto& reply = std::get<protocol::Reply>(saved[0].body);
  ASSERT_TRUE(reply.ok) << reply.error;
  EXPECT_EQ(reply.data["iteration"], 2);
  auto env = checkpoint::DecodeEnvelope(saved[0].payload);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->iteration, 2);
  EXPECT_EQ(env->trainable, kSimTrainable);
  EXPECT_EQ(env->data.size(), 1024u);
  // A new attempt restores it and goes on from iteration 2.
  Create(4, "t1", 2);
  auto restored =
      OfKind<protocol::Reply>(Deliver(protocol::Restore{5, "t1", 2, 0}, saved[0].payload));
  ASSERT_EQ(restored.size(), 1u);
  ASSERT_TRUE(restored[0].ok) << restored[0].error;
  EXPECT_EQ(restored[0].data["iteration"], 2);
  Deliver(protocol::Train{6, "t1", 2, 1, 0});
  auto batches = OfKind<protocol::ResultBatch>(AdvanceTo(now_ + kStepMs));
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].results[0].result.ToJson()["training_iteration"], 3);
  // Damaged bytes are refused, and the counters stay.
  auto bad = OfKind<protocol::Reply>(Deliver(protocol::Restore{7, "t1", 2, 0}, "not a checkpoint"));
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_FALSE(bad[0].ok);
  EXPECT_NE(bad[0].error.find("restore failed"), std::string::npos) << bad[0].error;
}

TEST_F(SimWorkerTest, LargeCheckpointsTravelInChunksWithCredits) {
  SimWorkerOptions o = Options();
  o.checkpoint_bytes = 20 << 20;  // above the 16 MiB window
  Make(o);
  Register();
  Create(1, "t1");
  auto sent = Deliver(protocol::Save{2, "t1", 1, "persistent"});
  auto replies = OfKind<protocol::Reply>(sent);
  ASSERT_EQ(replies.size(), 1u);
  const uint64_t total = replies[0].payload_bytes;
  ASSERT_GT(total, o.checkpoint_bytes);
  std::string payload;
  auto take = [&](const std::vector<Message>& msgs) {
    for (const Message& m : msgs) {
      if (std::holds_alternative<protocol::Chunk>(m.body)) payload += m.payload;
    }
  };
  take(sent);
  EXPECT_EQ(payload.size(), protocol::kWindowBytes) << "at most one window before a credit";
  while (payload.size() < total) {
    const size_t before = payload.size();
    take(Deliver(protocol::Credit{2, payload.size(), false}));
    ASSERT_GT(payload.size(), before);
  }
  auto env = checkpoint::DecodeEnvelope(payload);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->data.size(), o.checkpoint_bytes);

  // The same bytes back as a chunked RESTORE: a CREDIT per chunk, then the reply.
  Create(3, "t1", 2);
  EXPECT_TRUE(Deliver(protocol::Restore{4, "t1", 2, total}).empty());
  std::vector<Message> answers;
  for (uint64_t off = 0; off < total; off += protocol::kChunkBytes) {
    auto got = Deliver(protocol::Chunk{4, off},
                       payload.substr(off, std::min<uint64_t>(protocol::kChunkBytes, total - off)));
    ASSERT_EQ(OfKind<protocol::Credit>(got).size(), 1u);
    answers.insert(answers.end(), got.begin(), got.end());
  }
  auto restored = OfKind<protocol::Reply>(answers);
  ASSERT_EQ(restored.size(), 1u);
  EXPECT_TRUE(restored[0].ok) << restored[0].error;
}

// A reconnect cuts a SAVE reply's chunks: it starts over from offset 0 after
// REGISTERED from the same head, and is dropped for a restarted head (a new
// epoch), which never asked for it.
TEST_F(SimWorkerTest, AChunkedSaveCutByAReconnectStartsOverUnlessTheHeadRestarted) {
  SimWorkerOptions o = Options();
  o.checkpoint_bytes = 20 << 20;
  Make(o);
  Register(/*epoch=*/1);
  Create(1, "t1");
  auto first = Deliver(protocol::Save{2, "t1", 1, "persistent"});
  ASSERT_EQ(OfKind<protocol::Reply>(first).size(), 1u);
  const uint64_t total = OfKind<protocol::Reply>(first)[0].payload_bytes;
  auto resent = [&](uint64_t epoch) {
    Deliver(protocol::Disconnect{"unknown worker"});
    return Deliver(protocol::Registered{sim_->worker_id(), kHeartbeatMs, kLiveness, epoch, {}});
  };
  auto again = resent(1);
  auto replies = OfKind<protocol::Reply>(again);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].rid, 2u);
  EXPECT_EQ(replies[0].payload_bytes, total);
  auto chunks = OfKind<protocol::Chunk>(again);
  ASSERT_FALSE(chunks.empty());
  EXPECT_EQ(chunks[0].offset, 0u);
  std::string payload;
  for (const Message& m : again) {
    if (std::holds_alternative<protocol::Chunk>(m.body)) payload += m.payload;
  }
  EXPECT_EQ(payload.size(), protocol::kWindowBytes);
  EXPECT_TRUE(OfKind<protocol::Reply>(resent(2)).empty()) << "a new head never asked for it";
}

TEST_F(SimWorkerTest, ResetMovesTheActorAndStopEndsIt) {
  Make(Options());
  Register();
  Create(1, "t1");
  auto reset =
      OfKind<protocol::Reply>(Deliver(protocol::Reset{2, "t1", 1, "t2", 1, Json{{"x", 0.1}}}));
  ASSERT_EQ(reset.size(), 1u);
  EXPECT_TRUE(reset[0].ok);
  EXPECT_EQ(reset[0].data["reset"], true);
  EXPECT_EQ(reset[0].trial_id, "t2");
  auto old = OfKind<protocol::ResultBatch>(Deliver(protocol::Train{3, "t1", 1, 1, 0}));
  ASSERT_EQ(old.size(), 1u);
  EXPECT_TRUE(old[0].failed);
  EXPECT_NE(old[0].error.find("no actor for trial t1"), std::string::npos) << old[0].error;
  // A STOP queued behind a running TRAIN ends it after its step.
  Deliver(protocol::Train{4, "t2", 1, 10, 60.0});
  EXPECT_TRUE(Deliver(protocol::Stop{5, "t2", 1, 1000}).empty());
  auto after = AdvanceTo(now_ + kStepMs);
  auto batches = OfKind<protocol::ResultBatch>(after);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].results.size(), 1u);
  auto stopped = OfKind<protocol::Reply>(after);
  ASSERT_EQ(stopped.size(), 1u);
  EXPECT_EQ(stopped[0].rid, 5u);
  EXPECT_TRUE(stopped[0].ok);
  EXPECT_EQ(sim_->actor_count(), 0u);
}

TEST_F(SimWorkerTest, FailingStepsAndUnknownTrainablesAreReported) {
  SimWorkerOptions o = Options();
  o.step_failure_rate = 1.0;
  Make(o);
  Register();
  auto unknown = OfKind<protocol::Reply>(
      Deliver(protocol::CreateActor{1, "t1", 1, "quadratic", Json::object(), {}, {}, {}, {}}));
  ASSERT_EQ(unknown.size(), 1u);
  EXPECT_FALSE(unknown[0].ok);
  EXPECT_NE(unknown[0].error.find("unknown trainable 'quadratic'"), std::string::npos);
  Create(2, "t1");
  Deliver(protocol::Train{3, "t1", 1, 1, 0});
  auto batches = OfKind<protocol::ResultBatch>(AdvanceTo(now_ + kStepMs));
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_TRUE(batches[0].failed);
  EXPECT_TRUE(batches[0].results.empty());
  EXPECT_NE(batches[0].error.find("step of iteration 1 failed"), std::string::npos);
  EXPECT_EQ(sim_->stats().step_failures, 1u);
}

TEST_F(SimWorkerTest, TakesTrainsAndCoalescesResultsForAHeadThatTakesThem) {
  Make(Options());
  const protocol::Register reg = Register(1, {protocol::kFeatureResults});
  EXPECT_EQ(reg.features,
            (std::vector<std::string>{protocol::kFeatureTrains, protocol::kFeatureAckTrains,
                                      protocol::kFeatureOneFrame}));
  Create(1, "t1");
  Create(2, "t2");
  Create(3, "t3");
  // One TRAINS for three actors: each entry runs as if it had come alone.
  EXPECT_TRUE(Deliver(protocol::Trains{{protocol::Train{4, "t1", 1, 1, 0},
                                        protocol::Train{5, "t2", 1, 1, 0},
                                        protocol::Train{6, "t3", 1, 2, 60.0}}})
                  .empty());
  EXPECT_EQ(sim_->stats().commands.at("TRAIN"), 3u);
  EXPECT_EQ(sim_->stats().commands.at("TRAINS"), 1u);
  EXPECT_EQ(sim_->stats().coalesced_trains, 3u);
  // Steps ending at the same time leave as one RESULTS, in the order of the
  // actors; no single RESULT beside it.
  auto first = AdvanceTo(now_ + kStepMs);
  ASSERT_EQ(first.size(), 1u);
  auto coalesced = OfKind<protocol::Results>(first);
  ASSERT_EQ(coalesced.size(), 1u);
  ASSERT_EQ(coalesced[0].batches.size(), 2u);
  EXPECT_EQ(coalesced[0].batches[0].rid, 4u);
  EXPECT_EQ(coalesced[0].batches[1].rid, 5u);
  // A batch alone goes as a RESULT.
  auto second = OfKind<protocol::ResultBatch>(AdvanceTo(now_ + kStepMs));
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].rid, 6u);
  ASSERT_EQ(second[0].results.size(), 2u);
  // Replayed after a new registration: unacknowledged batches as one RESULTS.
  Deliver(protocol::Ack{"t1", 1, 1, {}, {}});
  OfKind<protocol::Register>(Deliver(protocol::Disconnect{"unknown worker"}));
  auto replay = OfKind<protocol::Results>(Deliver(protocol::Registered{
      sim_->worker_id(), kHeartbeatMs, kLiveness, 2, {protocol::kFeatureResults}}));
  ASSERT_EQ(replay.size(), 1u);
  ASSERT_EQ(replay[0].batches.size(), 2u);
  EXPECT_EQ(replay[0].batches[0].rid, 5u);
  EXPECT_EQ(replay[0].batches[1].rid, 6u);
  EXPECT_EQ(sim_->stats().results_sent, 4u);
  EXPECT_EQ(sim_->stats().results_replayed, 3u);
  EXPECT_EQ(sim_->stats().result_messages, 3u) << "RESULTS, RESULT, RESULTS";
}

// TRAINs inside an ACK run after its acknowledgements, as if each had come
// alone; --no-ack-trains leaves the feature out.
TEST_F(SimWorkerTest, TakesTrainsInsideAnAck) {
  Make(Options());
  Register();
  Create(1, "t1");
  Create(2, "t2");
  Deliver(protocol::Train{3, "t1", 1, 1, 0});
  AdvanceTo(now_ + kStepMs);
  EXPECT_TRUE(
      Deliver(protocol::Ack{"t1",
                            1,
                            1,
                            {},
                            {protocol::Train{4, "t1", 1, 1, 0}, protocol::Train{5, "t2", 1, 1, 0}}})
          .empty())
      << "a step takes time";
  EXPECT_EQ(sim_->stats().results_acked, 1u);
  EXPECT_EQ(sim_->stats().trains_in_acks, 2u);
  EXPECT_EQ(sim_->stats().commands.at("TRAIN"), 3u);
  auto batches = OfKind<protocol::ResultBatch>(AdvanceTo(now_ + kStepMs));
  std::map<uint64_t, protocol::ResultBatch> by_rid;
  for (auto& b : batches) by_rid[b.rid] = b;
  ASSERT_EQ(by_rid.size(), 2u);
  ASSERT_EQ(by_rid[4].results.size(), 1u);
  EXPECT_EQ(by_rid[4].results[0].seq, 2u);
  ASSERT_EQ(by_rid[5].results.size(), 1u);
  EXPECT_EQ(by_rid[5].results[0].seq, 1u);

  SimWorkerOptions o = Options();
  o.ack_trains = false;
  Make(o);
  now_ = kStart;
  EXPECT_EQ(Register().features,
            (std::vector<std::string>{protocol::kFeatureTrains, protocol::kFeatureOneFrame}));
}

// As ztune-worker: it announces the one-frame layout, sends in it once a
// REGISTERED announced it too, and starts each registration split; with
// one_frame off (--no-one-frame) it neither announces nor sends it.
TEST_F(SimWorkerTest, SendsTheOneFrameLayoutOnlyToAHeadThatAnnouncedIt) {
  Make(Options());
  EXPECT_FALSE(sim_->sends_one_frame());
  Register(1, {protocol::kFeatureResults, protocol::kFeatureOneFrame});
  EXPECT_TRUE(sim_->sends_one_frame());
  Register(2, {protocol::kFeatureResults});
  EXPECT_FALSE(sim_->sends_one_frame());

  SimWorkerOptions o = Options();
  o.one_frame = false;
  Make(o);
  now_ = kStart;
  const protocol::Register reg = Register(1, {protocol::kFeatureOneFrame});
  EXPECT_EQ(std::count(reg.features.begin(), reg.features.end(), protocol::kFeatureOneFrame), 0);
  EXPECT_FALSE(sim_->sends_one_frame());
}

TEST_F(SimWorkerTest, SendsSingleResultsToAHeadWithoutTheFeatureOrWhenToldNotToCoalesce) {
  for (const bool coalesce : {true, false}) {
    SCOPED_TRACE(coalesce ? "head without the feature" : "--no-coalesce");
    SimWorkerOptions o = Options();
    o.coalesce = coalesce;
    Make(o);
    now_ = kStart;
    const protocol::Register reg =
        Register(1, coalesce ? std::vector<std::string>{}
                             : std::vector<std::string>{protocol::kFeatureResults});
    const std::vector<std::string> announced =
        coalesce ? std::vector<std::string>{protocol::kFeatureTrains, protocol::kFeatureAckTrains,
                                            protocol::kFeatureOneFrame}
                 : std::vector<std::string>{protocol::kFeatureOneFrame};
    EXPECT_EQ(reg.features, announced);
    Create(1, "t1");
    Create(2, "t2");
    Deliver(protocol::Train{3, "t1", 1, 1, 0});
    Deliver(protocol::Train{4, "t2", 1, 1, 0});
    auto sent = AdvanceTo(now_ + kStepMs);
    EXPECT_TRUE(OfKind<protocol::Results>(sent).empty());
    auto batches = OfKind<protocol::ResultBatch>(sent);
    ASSERT_EQ(batches.size(), 2u);
    EXPECT_EQ(batches[0].rid, 3u);
    EXPECT_EQ(batches[1].rid, 4u);
    EXPECT_EQ(sim_->stats().result_messages, 2u);
  }
}

}  // namespace
}  // namespace ztune::fleet
