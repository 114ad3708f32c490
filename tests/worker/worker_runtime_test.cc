#include "worker/worker_runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/worker/actor_harness.h"
#include "tests/worker/fake_head.h"
#include "tests/worker/running_worker.h"
#include "worker/builtin_trainables.h"
#include "common/checkpoint/checkpoint_envelope.h"

namespace ztune::worker {
using checkpoint::DecodeEnvelope;
namespace {

using std::chrono::milliseconds;
using namespace protocol;

constexpr int64_t kHeartbeatMs = 50;

class WorkerRuntimeTest : public ::testing::Test {
 protected:
  // Liveness 6 (300 ms) keeps the link up while a test waits on something
  // else; the silent-head test uses its own, shorter one.
  void Start(int64_t liveness = 6, bool head_takes_results = false,
             int64_t coalesce_wait_us = 60'000'000) {
    head_ = std::make_unique<FakeHead>(context_, kHeartbeatMs, liveness);
    head_->takes_results = head_takes_results;
    head_->takes_one_frame = head_takes_one_frame_;
    WorkerOptions o = head_->WorkerOptionsFor(dir_.path());
    // A whole pass by default: what is coalesced does not depend on timing.
    o.coalesce_wait_us = coalesce_wait_us;
    o.resources = {{"CPU", 2}, {"GPU", 1}, {"memory", 8e9}};
    o.gpu_ids = {0};
    o.shutdown_grace_ms = 1000;
    worker_ = std::make_unique<RunningWorker>(context_, o);
    auto reg = head_->WaitFor<Register>();
    ASSERT_TRUE(reg.has_value());
    first_register_ = *reg;
  }

  void Create(uint64_t rid, const std::string& trial, uint64_t attempt,
              const std::string& trainable, Json config = Json::object()) {
    head_->Send(
        CreateActor{rid, trial, attempt, trainable, std::move(config), {{"CPU", 1}}, {}, {}, {}});
    auto r = head_->WaitReply(rid);
    ASSERT_TRUE(r.has_value());
    ASSERT_TRUE(r->ok) << r->error;
  }

  void TearDown() override {
    worker_.reset();
    head_.reset();
  }

  // The fake head of the next Start announces the one-frame layout.
  bool head_takes_one_frame_ = false;

  // ---- chunked transfers (common/protocol/chunked_transfer.h) ----

  // How long a test waits for something that must happen: many heartbeats.
  static constexpr milliseconds kPatience{100 * kHeartbeatMs};

  // The first message of type T accepted by `pred`, looking first at what
  // earlier waits set aside (head_->others, in arrival order) and then at
  // what arrives. Fails the test after kPatience.
  template <class T, class Pred>
  std::optional<T> Take(Pred pred, std::string* payload = nullptr) {
    auto& others = head_->others;
    for (auto it = others.begin(); it != others.end(); ++it) {
      if (auto* t = std::get_if<T>(&it->body); t != nullptr && pred(*t)) {
        T out = *t;
        if (payload != nullptr) *payload = std::move(it->payload);
        others.erase(it);
        return out;
      }
    }
    return head_->WaitFor<T>(pred, kPatience, payload);
  }
  std::optional<Reply> TakeReply(uint64_t rid, std::string* payload = nullptr) {
    return Take<Reply>([rid](const Reply& r) { return r.rid == rid; }, payload);
  }
  std::optional<ResultBatch> TakeBatch(uint64_t rid) {
    return Take<ResultBatch>([rid](const ResultBatch& b) { return b.rid == rid; });
  }
  std::optional<Chunk> TakeChunk(uint64_t rid, std::string* bytes) {
    return Take<Chunk>([rid](const Chunk& c) { return c.rid == rid; }, bytes);
  }
  std::optional<Credit> TakeCredit(uint64_t rid) {
    return Take<Credit>([rid](const Credit& c) { return c.rid == rid; });
  }

  // Keeps the link alive until `n` more heartbeats from the worker have
  // arrived; other messages go to head_->others. The worker heartbeats only
  // after kHeartbeatMs without sending anything, so whatever it sent in one
  // go before (a window of chunks, a credit) is in head_->others by then.
  bool AwaitHeartbeats(size_t n) {
    const size_t target = head_->heartbeats + n;
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (head_->heartbeats < target) {
      if (std::chrono::steady_clock::now() >= deadline) {
        ADD_FAILURE() << "no heartbeat from the worker within " << kPatience.count() << " ms";
        return false;
      }
      auto m = head_->Recv(milliseconds(kHeartbeatMs));
      if (m) head_->others.push_back(std::move(*m));
    }
    return true;
  }

  // Messages of type T in head_->others accepted by `pred`.
  template <class T, class Pred>
  size_t CountOthers(Pred pred) const {
    size_t n = 0;
    for (const auto& m : head_->others) {
      if (auto* t = std::get_if<T>(&m.body); t != nullptr && pred(*t)) ++n;
    }
    return n;
  }
  size_t ChunksSetAside(uint64_t rid) const {
    return CountOthers<Chunk>([rid](const Chunk& c) { return c.rid == rid; });
  }
  // Flow-control credits (not cancellations) set aside for `rid`.
  size_t CreditsSetAside(uint64_t rid) const {
    return CountOthers<Credit>([rid](const Credit& c) { return c.rid == rid && !c.cancel; });
  }
  // Cancellations ("stop sending this payload") set aside for `rid`.
  size_t CancelsSetAside(uint64_t rid) const {
    return CountOthers<Credit>([rid](const Credit& c) { return c.rid == rid && c.cancel; });
  }

  // Receives the chunks of request `rid` until `payload` holds `total` bytes,
  // checking their order and size and crediting each (as the head does).
  bool ReceiveChunks(uint64_t rid, uint64_t total, std::string& payload) {
    while (payload.size() < total) {
      std::string bytes;
      auto c = TakeChunk(rid, &bytes);
      if (!c) return false;
      EXPECT_EQ(c->offset, payload.size());
      EXPECT_FALSE(bytes.empty());
      EXPECT_EQ(bytes.size(), std::min<uint64_t>(kChunkBytes, total - payload.size()));
      if (c->offset != payload.size() || bytes.empty()) return false;
      payload += bytes;
      if (payload.size() > total) {
        ADD_FAILURE() << "chunks run past the announced " << total << " bytes";
        return false;
      }
      head_->Send(Credit{rid, payload.size()});
    }
    return true;
  }

  // SAVE of an actor whose checkpoint exceeds the inline limit: the REPLY
  // header, then every chunk (credited). The whole payload into *payload.
  std::optional<Reply> SaveChunked(uint64_t rid, const std::string& trial, uint64_t attempt,
                                   std::string* payload) {
    head_->Send(Save{rid, trial, attempt, "memory"});
    std::string inline_payload;
    auto header = TakeReply(rid, &inline_payload);
    if (!header) return std::nullopt;
    EXPECT_TRUE(header->ok) << header->error;
    EXPECT_GT(header->payload_bytes, kInlinePayloadBytes);
    EXPECT_TRUE(inline_payload.empty());
    payload->clear();
    if (!header->ok || header->payload_bytes == 0) return std::nullopt;
    if (!ReceiveChunks(rid, header->payload_bytes, *payload)) return std::nullopt;
    return header;
  }

  // Chunk `index` (of kChunkBytes) of `payload` for request `rid`.
  void SendChunk(uint64_t rid, const std::string& payload, uint64_t index) {
    const uint64_t offset = index * kChunkBytes;
    head_->Send(Chunk{rid, offset}, payload.substr(offset, kChunkBytes));
  }
  static uint64_t ChunkCount(uint64_t bytes) { return (bytes + kChunkBytes - 1) / kChunkBytes; }

  zmq::context_t context_{1};
  TempDir dir_;
  std::unique_ptr<FakeHead> head_;
  std::unique_ptr<RunningWorker> worker_;
  Register first_register_;
};

TEST_F(WorkerRuntimeTest, RegistersWithResourcesTrainablesAndIdentity) {
  Start();
  const Register& r = first_register_;
  EXPECT_EQ(r.worker_id, worker_->id());
  // The routing id is 128 random bits per connection, not the worker id: a
  // peer that learns the worker id cannot take over its connection.
  EXPECT_EQ(head_->worker().size(), 32u);
  EXPECT_EQ(head_->worker().find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(r.worker_id.rfind("w-", 0), 0u);
  EXPECT_EQ(r.worker_id.size(), 2u + 8u);
  EXPECT_EQ(r.incarnation, 1u);
  EXPECT_EQ(r.name, "w");
  EXPECT_EQ(r.pid, getpid());
  EXPECT_FALSE(r.host.empty());
  EXPECT_EQ(r.resources, (std::map<std::string, double>{{"CPU", 2}, {"GPU", 1}, {"memory", 8e9}}));
  EXPECT_EQ(r.gpu_ids, std::vector<int64_t>{0});
  EXPECT_EQ(r.trainables, (std::vector<std::string>{"blob", "fail", "noop", "quadratic", "sleep"}));
  EXPECT_TRUE(r.live_actors.empty());
  // Once REGISTERED has arrived (REGISTERs resent while the connection came up
  // may still be in flight), heartbeats flow and registration stops.
  head_->Pump(milliseconds(100));
  head_->registers.clear();
  head_->Pump(milliseconds(200));
  EXPECT_TRUE(head_->registers.empty());
}

// create -> train x3 -> save -> restore into a new attempt -> train continues ->
// reset (supported and not) -> export -> stop
TEST_F(WorkerRuntimeTest, DrivesTheActorLifecycle) {
  Start();
  Create(1, "t1", 1, "quadratic", Json{{"lr", 0.1}});

  head_->Send(Train{2, "t1", 1, 3, 60});
  auto b = head_->WaitBatch(2);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->trial_id, "t1");
  EXPECT_EQ(b->attempt, 1u);
  EXPECT_FALSE(b->failed);
  ASSERT_EQ(b->results.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const Json r = b->results[i].result.ToJson();
    EXPECT_EQ(b->results[i].seq, static_cast<uint64_t>(i + 1));
    EXPECT_EQ(r["training_iteration"], i + 1);
    for (const char* k : {"time_this_iter_s", "time_total_s", "timestamp", "date", "done",
                          "trial_id", "hostname", "pid", "iterations_since_restore",
                          "time_since_restore", "loss", "x"}) {
      EXPECT_TRUE(r.contains(k)) << k;
    }
    EXPECT_EQ(r["pid"], getpid());
  }
  head_->Send(Ack{"t1", 1, 3, {}, {}});

  head_->Send(Save{3, "t1", 1, "memory"});
  std::string envelope;
  auto saved = head_->WaitReply(3, &envelope);
  ASSERT_TRUE(saved.has_value());
  ASSERT_TRUE(saved->ok) << saved->error;
  EXPECT_EQ(saved->data["iteration"], 3);
  EXPECT_EQ(saved->data["storage"], "memory");
  EXPECT_EQ(saved->data["bytes"], envelope.size());
  ASSERT_TRUE(DecodeEnvelope(envelope).ok());

  Create(4, "t1", 2, "quadratic", Json{{"lr", 0.1}});
  head_->Send(Restore{5, "t1", 2}, envelope);
  auto restored = head_->WaitReply(5);
  ASSERT_TRUE(restored.has_value());
  ASSERT_TRUE(restored->ok) << restored->error;
  EXPECT_EQ(restored->data["iteration"], 3);
  EXPECT_EQ(restored->attempt, 2u);

  head_->Send(Train{6, "t1", 2, 1, 60});
  b = head_->WaitBatch(6);
  ASSERT_TRUE(b.has_value());
  ASSERT_EQ(b->results.size(), 1u);
  EXPECT_EQ(b->results[0].seq, 1u);  // per (trial, attempt)
  EXPECT_EQ(b->results[0].result.ToJson()["training_iteration"], 4);
  EXPECT_EQ(b->results[0].result.ToJson()["iterations_since_restore"], 1);
  double x4 = b->results[0].result.ToJson()["x"].get<double>();
  EXPECT_DOUBLE_EQ(x4, 10 * std::pow(0.8, 4));

  // The attempt-1 actor is still there; stop it.
  head_->Send(Stop{7, "t1", 1, 1000});
  auto stopped = head_->WaitReply(7);
  ASSERT_TRUE(stopped.has_value());
  EXPECT_TRUE(stopped->ok) << stopped->error;

  // Actor reuse: quadratic resets.
  head_->Send(Reset{8, "t1", 2, "t2", 1, Json{{"x0", 1.0}}});
  auto reset = head_->WaitReply(8);
  ASSERT_TRUE(reset.has_value());
  ASSERT_TRUE(reset->ok) << reset->error;
  EXPECT_EQ(reset->data["reset"], true);
  EXPECT_EQ(reset->trial_id, "t2");
  EXPECT_EQ(reset->attempt, 1u);
  head_->Send(Train{9, "t2", 1, 1, 60});
  b = head_->WaitBatch(9);
  ASSERT_TRUE(b.has_value());
  ASSERT_EQ(b->results.size(), 1u);
  EXPECT_EQ(b->results[0].seq, 1u);
  EXPECT_EQ(b->results[0].result.ToJson()["training_iteration"], 1);
  EXPECT_EQ(b->results[0].result.ToJson()["trial_id"], "t2");
  // The old key is gone.
  head_->Send(Save{10, "t1", 2, "memory"});
  auto gone = head_->WaitReply(10);
  ASSERT_TRUE(gone.has_value());
  EXPECT_FALSE(gone->ok);
  EXPECT_EQ(gone->error, "no actor for trial t1 attempt 2 on worker " + worker_->id());

  head_->Send(Export{11, "t2", 1, {"json"}});
  auto exported = head_->WaitReply(11);
  ASSERT_TRUE(exported.has_value());
  ASSERT_TRUE(exported->ok) << exported->error;
  EXPECT_TRUE(exported->data["exports"]["json"].is_string());

  // fail does not support reset: the actor is unchanged.
  Create(12, "f", 1, "fail", Json{{"fail_at", 100}});
  head_->Send(Reset{13, "f", 1, "g", 1, Json::object()});
  reset = head_->WaitReply(13);
  ASSERT_TRUE(reset.has_value());
  EXPECT_TRUE(reset->ok);
  EXPECT_EQ(reset->data["reset"], false);
  EXPECT_EQ(reset->trial_id, "f");

  for (auto [rid, trial] : {std::pair<uint64_t, std::string>{14, "f"}, {15, "t2"}}) {
    head_->Send(Stop{rid, trial, 1, 1000});
    auto s = head_->WaitReply(rid);
    ASSERT_TRUE(s.has_value());
    EXPECT_TRUE(s->ok) << s->error;
  }
  head_->Send(Train{16, "t2", 1, 1, 60});
  b = head_->WaitBatch(16);
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(b->failed);
  EXPECT_NE(b->error.find("no actor for trial t2 attempt 1"), std::string::npos);
}

// reset to a new key -> a STOP for the old key queued behind it -> the STOP is
// fenced ("no actor") and the reused actor lives on under its new key
TEST_F(WorkerRuntimeTest, FencesAStopForTheKeyAResetGaveUp) {
  Start();
  Create(1, "a", 1, "quadratic");
  head_->Send(Reset{2, "a", 1, "b", 1, Json::object()});
  head_->Send(Stop{3, "a", 1, 100});
  auto reset = head_->WaitReply(2);
  ASSERT_TRUE(reset.has_value());
  EXPECT_EQ(reset->data["reset"], true);
  auto stop = head_->WaitReply(3);
  ASSERT_TRUE(stop.has_value());
  EXPECT_FALSE(stop->ok);
  EXPECT_NE(stop->error.find("no actor for trial a attempt 1"), std::string::npos) << stop->error;
  head_->Pump(milliseconds(200));  // past the STOP's kill deadline
  head_->Send(Train{4, "b", 1, 1, 60});
  auto b = head_->WaitBatch(4);
  ASSERT_TRUE(b.has_value());
  EXPECT_FALSE(b->failed) << b->error;
  EXPECT_EQ(b->results[0].result.ToJson()["training_iteration"], 1);
}

// noop and a quadratic that does not sleep run on the control thread (no
// runner thread: ActorRunner::RunningThreads counts those); sleep gets one.
TEST_F(WorkerRuntimeTest, RunsInlineTrainablesWithoutARunnerThread) {
  Start();
  ASSERT_EQ(ActorRunner::RunningThreads(), 0);
  Create(1, "n", 1, "noop");
  Create(2, "q", 1, "quadratic");
  for (uint64_t rid : {3, 4}) {
    head_->Send(Train{rid, rid == 3 ? "n" : "q", 1, 2, 60});
    auto b = head_->WaitBatch(rid);
    ASSERT_TRUE(b.has_value());
    EXPECT_FALSE(b->failed) << b->error;
    EXPECT_EQ(b->results.size(), 2u);
  }
  EXPECT_EQ(ActorRunner::RunningThreads(), 0);
  Create(5, "s", 1, "sleep", Json{{"sleep_s", 0}});
  EXPECT_EQ(ActorRunner::RunningThreads(), 1);
  for (uint64_t rid : {6, 7, 8}) {
    head_->Send(Stop{rid, rid == 6 ? "n" : rid == 7 ? "q" : "s", 1, 1000});
    auto r = head_->WaitReply(rid);
    ASSERT_TRUE(r.has_value());
    EXPECT_TRUE(r->ok) << r->error;
  }
  EXPECT_EQ(ActorRunner::RunningThreads(), 0);
}

TEST_F(WorkerRuntimeTest, ReportsStepFailuresWithResultsSoFar) {
  Start();
  Create(1, "f", 1, "fail", Json{{"fail_at", 3}});
  head_->Send(Train{2, "f", 1, 5, 60});
  auto b = head_->WaitBatch(2);
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(b->failed);
  ASSERT_EQ(b->results.size(), 2u);
  EXPECT_EQ(b->results[1].seq, 2u);
  EXPECT_NE(b->error.find("step of iteration 3 failed"), std::string::npos) << b->error;
  head_->Send(Stop{3, "f", 1, 1000});
  auto s = head_->WaitReply(3);
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(s->ok);
}

TEST_F(WorkerRuntimeTest, RejectsUnknownTrainablesBadConfigsAndDuplicates) {
  Start();
  head_->Send(CreateActor{1, "t", 1, "resnet", Json::object(), {}, {}, {}, {}});
  auto r = head_->WaitReply(1);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->error,
            "unknown trainable 'resnet' (this worker has: blob, fail, noop, quadratic, sleep)");

  head_->Send(CreateActor{2, "t", 1, "quadratic", Json{{"lr", "x"}}, {}, {}, {}, {}});
  r = head_->WaitReply(2);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->ok);
  EXPECT_NE(r->error.find("'lr'"), std::string::npos) << r->error;
  // A failed setup leaves no actor behind.
  head_->Send(Save{3, "t", 1, "memory"});
  r = head_->WaitReply(3);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->ok);

  Create(4, "t", 1, "noop");
  head_->Send(CreateActor{5, "t", 1, "noop", Json::object(), {}, {}, {}, {}});
  r = head_->WaitReply(5);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->ok);
  EXPECT_NE(r->error.find("already exists"), std::string::npos);
}

TEST_F(WorkerRuntimeTest, AnswersCommandsForUnknownActorsClearly) {
  Start();
  head_->Send(Save{1, "ghost", 3, "memory"});
  auto r = head_->WaitReply(1);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->error, "no actor for trial ghost attempt 3 on worker " + worker_->id());
  EXPECT_EQ(r->trial_id, "ghost");
  EXPECT_EQ(r->attempt, 3u);
  head_->Send(Train{2, "ghost", 3, 1, 60});
  auto b = head_->WaitBatch(2);
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(b->failed);
  EXPECT_EQ(b->error, "no actor for trial ghost attempt 3 on worker " + worker_->id());
  head_->Send(Stop{3, "ghost", 3, 100});
  r = head_->WaitReply(3);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->ok);
}

TEST_F(WorkerRuntimeTest, KillsAnActorWhoseStepHangs) {
  Start();
  Create(1, "h", 1, "sleep", Json{{"sleep_s", 5}});
  head_->Send(Train{2, "h", 1, 1, 60});
  head_->Pump(milliseconds(50));  // the step is running
  auto t0 = std::chrono::steady_clock::now();
  head_->Send(Stop{3, "h", 1, 200});
  auto r = head_->WaitReply(3, nullptr, milliseconds(3000));
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->error, "actor did not stop within 200 ms; killed");
  EXPECT_GE(took, milliseconds(190));
  EXPECT_LT(took, milliseconds(1000));
  // The hung TRAIN is answered too, and nothing the actor makes later is sent.
  bool train_answered = false;
  for (const auto& m : head_->others) {
    if (auto* b = std::get_if<ResultBatch>(&m.body); b && b->rid == 2) {
      train_answered = b->failed && b->results.empty();
    }
  }
  if (!train_answered) {
    auto b = head_->WaitBatch(2, milliseconds(1000));
    ASSERT_TRUE(b.has_value());
    EXPECT_TRUE(b->failed);
    EXPECT_TRUE(b->results.empty());
  }
  // The key is free again.
  Create(4, "h", 1, "noop");
}

// results -> head goes silent -> worker re-registers with its live actor ->
// un-ACKed results re-sent -> ACK -> re-register (DISCONNECT) -> nothing re-sent
TEST_F(WorkerRuntimeTest, ReRegistersAndResendsUnackedResultsAfterHeadSilence) {
  Start(/*liveness=*/3);
  Create(1, "r", 1, "quadratic");
  head_->Send(Train{2, "r", 1, 2, 60});
  auto b = head_->WaitBatch(2);
  ASSERT_TRUE(b.has_value());
  ASSERT_EQ(b->results.size(), 2u);
  head_->Send(Train{3, "r", 1, 1, 60});
  auto b3 = head_->WaitBatch(3);
  ASSERT_TRUE(b3.has_value());
  head_->Send(Ack{"r", 1, 1, {}, {}});  // partial: seq 1 only

  head_->silent = true;
  auto t0 = std::chrono::steady_clock::now();
  auto reg = head_->WaitFor<Register>([](const Register& r) { return r.incarnation >= 2; },
                                      milliseconds(3000));
  ASSERT_TRUE(reg.has_value());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, milliseconds(3 * kHeartbeatMs));
  EXPECT_EQ(reg->worker_id, worker_->id());
  ASSERT_EQ(reg->live_actors.size(), 1u);
  EXPECT_EQ(reg->live_actors[0].trial_id, "r");
  EXPECT_EQ(reg->live_actors[0].attempt, 1u);
  EXPECT_EQ(reg->live_actors[0].acked_seq, 1u);
  EXPECT_EQ(reg->live_actors[0].iteration, 3);

  head_->silent = false;
  head_->others.clear();
  head_->SendRegistered();
  auto again = head_->WaitBatch(2);
  ASSERT_TRUE(again.has_value());
  ASSERT_EQ(again->results.size(), 1u);  // seq 1 was ACKed
  EXPECT_EQ(again->results[0].seq, 2u);
  EXPECT_EQ(again->results[0].result, b->results[1].result);
  auto again3 = head_->WaitBatch(3);
  ASSERT_TRUE(again3.has_value());
  EXPECT_EQ(again3->results[0].seq, 3u);
  head_->Send(Ack{"r", 1, 3, {}, {}});

  // Actors kept running: training goes on across the reconnect.
  head_->Send(Train{4, "r", 1, 1, 60});
  auto b4 = head_->WaitBatch(4);
  ASSERT_TRUE(b4.has_value());
  EXPECT_EQ(b4->results[0].result.ToJson()["training_iteration"], 4);
  EXPECT_EQ(b4->results[0].seq, 4u);
  head_->Send(Ack{"r", 1, 4, {}, {}});

  size_t registers_before = head_->registers.size();
  head_->Send(Disconnect{"unknown worker"});
  auto reg2 = head_->WaitFor<Register>(
      [&](const Register& r) { return r.incarnation > reg->incarnation; });
  ASSERT_TRUE(reg2.has_value());
  EXPECT_GT(head_->registers.size(), registers_before);
  ASSERT_EQ(reg2->live_actors.size(), 1u);
  EXPECT_EQ(reg2->live_actors[0].acked_seq, 4u);
  EXPECT_EQ(reg2->live_actors[0].iteration, 4);
  head_->others.clear();
  head_->Pump(milliseconds(300));
  for (const auto& m : head_->others) {
    EXPECT_FALSE(std::holds_alternative<ResultBatch>(m.body)) << "ACKed results were re-sent";
  }
}

// To a head that announced the one-frame layout, everything after REGISTERED
// goes in it (and what the head sends in it is read); each new registration
// starts split, which any head reads. To a head that did not, nothing does
// (FakeHead checks that in every test).
TEST_F(WorkerRuntimeTest, SendsTheOneFrameLayoutToAHeadThatAnnouncedIt) {
  head_takes_one_frame_ = true;
  Start();
  Create(1, "t", 1, "noop");
  head_->Send(Train{2, "t", 1, 1, 0});
  auto b = head_->WaitBatch(2);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->results[0].result.ToJson()["training_iteration"], 1);
  EXPECT_GE(head_->one_frame_messages, 2u);  // the CREATE_ACTOR's REPLY and the batch
  const size_t split_before = head_->split_messages;

  head_->Send(Disconnect{"register again"});
  auto reg = head_->WaitFor<Register>(
      [&](const Register& r) { return r.incarnation > first_register_.incarnation; });
  ASSERT_TRUE(reg.has_value());
  EXPECT_GT(head_->split_messages, split_before);  // that REGISTER
  const size_t one_before = head_->one_frame_messages;
  head_->Send(Train{3, "t", 1, 1, 0});
  auto b3 = head_->WaitBatch(3);
  ASSERT_TRUE(b3.has_value());
  EXPECT_GT(head_->one_frame_messages, one_before);
}

// TRAINS from the head: each TRAIN runs as if it had come alone. To a head
// that announced RESULTS, the batches one pass made go in one message, in
// order, and before any later answer (a REPLY never overtakes a batch); the
// outbox replays in one message too.
TEST_F(WorkerRuntimeTest, CoalescesResultsForAHeadThatTakesThem) {
  Start(/*liveness=*/6, /*head_takes_results=*/true);
  EXPECT_EQ(first_register_.features,
            (std::vector<std::string>{kFeatureTrains, kFeatureAckTrains, kFeatureOneFrame}));
  for (uint64_t i = 0; i < 3; ++i) Create(1 + i, "t" + std::to_string(i), 1, "noop");
  Trains trains;
  for (uint64_t i = 0; i < 3; ++i)
    trains.trains.push_back(Train{10 + i, "t" + std::to_string(i), 1, 1, 0});
  trains.trains.push_back(Train{13, "ghost", 1, 1, 0});  // refused, as alone
  head_->Send(trains);
  head_->Send(Save{20, "t1", 1, "memory"});
  // Every answer, in the order it arrived.
  std::vector<uint64_t> order;
  std::map<uint64_t, ResultBatch> batches;
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (std::find(order.begin(), order.end(), 20u) == order.end() &&
         std::chrono::steady_clock::now() < deadline) {
    auto m = head_->Recv(milliseconds(kHeartbeatMs));
    if (!m) continue;
    if (auto* b = std::get_if<ResultBatch>(&m->body)) {
      order.push_back(b->rid);
      batches[b->rid] = *b;
    } else if (auto* r = std::get_if<Reply>(&m->body)) {
      order.push_back(r->rid);
      EXPECT_TRUE(r->ok) << r->error;
    }
  }
  // The batches first, then the refusal (an answer that is not kept, sent
  // alone), then the SAVE's reply: nothing overtakes a coalesced batch.
  EXPECT_EQ(order, (std::vector<uint64_t>{10, 11, 12, 13, 20}));
  for (uint64_t rid : {10, 11, 12}) {
    EXPECT_FALSE(batches[rid].failed) << batches[rid].error;
    ASSERT_EQ(batches[rid].results.size(), 1u);
    EXPECT_EQ(batches[rid].results[0].seq, 1u);
  }
  EXPECT_TRUE(batches[13].failed);
  EXPECT_NE(batches[13].error.find("no actor for trial ghost attempt 1"), std::string::npos)
      << batches[13].error;
  // The three batches in one message, in the TRAINS' order.
  EXPECT_EQ(head_->results_rids, (std::vector<std::vector<uint64_t>>{{10, 11, 12}}));

  // Nothing acknowledged: after a new registration all three come again, in
  // one message.
  head_->results_rids.clear();
  head_->others.clear();
  head_->Send(Disconnect{"unknown worker"});
  ASSERT_TRUE(head_->WaitFor<Register>([](const Register& r) { return r.incarnation >= 2; }));
  for (uint64_t rid : {10, 11, 12}) ASSERT_TRUE(TakeBatch(rid).has_value());
  ASSERT_EQ(head_->results_rids.size(), 1u);
  EXPECT_EQ(head_->results_rids.front(), (std::vector<uint64_t>{10, 11, 12}));
}

// A batch waits at most coalesce_wait_us for others: with 0, each goes at
// once, alone (a RESULT, not a RESULTS of one).
TEST_F(WorkerRuntimeTest, ACoalescedBatchWaitsAtMostTheCoalesceWait) {
  Start(/*liveness=*/6, /*head_takes_results=*/true, /*coalesce_wait_us=*/0);
  for (uint64_t i = 0; i < 3; ++i) Create(1 + i, "t" + std::to_string(i), 1, "noop");
  Trains trains;
  for (uint64_t i = 0; i < 3; ++i) {
    trains.trains.push_back(Train{10 + i, "t" + std::to_string(i), 1, 1, 0});
  }
  head_->Send(trains);
  for (uint64_t rid : {10, 11, 12}) ASSERT_TRUE(TakeBatch(rid).has_value());
  EXPECT_TRUE(head_->results_rids.empty());
}

// A head that did not announce RESULTS (an older one) gets every batch in a
// RESULT of its own (FakeHead fails the test on a RESULTS).
TEST_F(WorkerRuntimeTest, SendsEachBatchAloneToAHeadThatDoesNotTakeResults) {
  Start();
  for (uint64_t i = 0; i < 3; ++i) Create(1 + i, "t" + std::to_string(i), 1, "noop");
  Trains trains;
  for (uint64_t i = 0; i < 3; ++i)
    trains.trains.push_back(Train{10 + i, "t" + std::to_string(i), 1, 1, 0});
  head_->Send(trains);
  for (uint64_t rid : {10, 11, 12}) {
    auto b = TakeBatch(rid);
    ASSERT_TRUE(b.has_value());
    EXPECT_FALSE(b->failed) << b->error;
  }
  EXPECT_TRUE(head_->results_rids.empty());
}

// The head acknowledges one commit's results of several actors in one ACK
// (its own entry and `more`): each actor's outbox drops what it names.
TEST_F(WorkerRuntimeTest, OneAckAcknowledgesSeveralActors) {
  Start(/*liveness=*/3);
  Create(1, "a", 1, "quadratic");
  Create(2, "b", 1, "quadratic");
  head_->Send(Train{3, "a", 1, 2, 60});
  ASSERT_TRUE(head_->WaitBatch(3).has_value());
  head_->Send(Train{4, "b", 1, 2, 60});
  ASSERT_TRUE(head_->WaitBatch(4).has_value());
  head_->Send(Ack{"a", 1, 2, {AckEntry{"b", 1, 1}}, {}});

  head_->silent = true;
  auto reg = head_->WaitFor<Register>([](const Register& r) { return r.incarnation >= 2; },
                                      milliseconds(3000));
  ASSERT_TRUE(reg.has_value());
  ASSERT_EQ(reg->live_actors.size(), 2u);
  std::map<std::string, uint64_t> acked;
  for (const auto& a : reg->live_actors) acked[a.trial_id] = a.acked_seq;
  EXPECT_EQ(acked["a"], 2u);
  EXPECT_EQ(acked["b"], 1u);
  head_->silent = false;
  head_->others.clear();
  head_->SendRegistered();
  auto again = head_->WaitBatch(4);
  ASSERT_TRUE(again.has_value());
  ASSERT_EQ(again->results.size(), 1u) << "b's seq 1 was acknowledged in a's ACK";
  EXPECT_EQ(again->results[0].seq, 2u);
  head_->Pump(milliseconds(100));
  for (const auto& m : head_->others) {
    const auto* batch = std::get_if<ResultBatch>(&m.body);
    EXPECT_TRUE(batch == nullptr || batch->trial_id != "a") << "a's results were all acknowledged";
  }
}

// The TRAINs inside an ACK (kFeatureAckTrains) run after its
// acknowledgements, each as if it had come alone, in order (a refusal too).
TEST_F(WorkerRuntimeTest, RunsTheTrainsInsideAnAckAfterItsAcknowledgements) {
  Start(/*liveness=*/3);
  Create(1, "a", 1, "noop");
  Create(2, "b", 1, "noop");
  head_->Send(Train{3, "a", 1, 1, 0});
  ASSERT_TRUE(head_->WaitBatch(3).has_value());
  head_->Send(Ack{
      "a", 1, 1, {}, {Train{4, "a", 1, 1, 0}, Train{5, "b", 1, 1, 0}, Train{6, "ghost", 1, 1, 0}}});
  auto a = TakeBatch(4);
  auto b = TakeBatch(5);
  auto ghost = TakeBatch(6);
  ASSERT_TRUE(a.has_value() && b.has_value() && ghost.has_value());
  ASSERT_EQ(a->results.size(), 1u);
  EXPECT_EQ(a->results[0].seq, 2u);
  ASSERT_EQ(b->results.size(), 1u);
  EXPECT_EQ(b->results[0].seq, 1u);
  EXPECT_TRUE(ghost->failed);
  EXPECT_NE(ghost->error.find("no actor for trial ghost attempt 1"), std::string::npos)
      << ghost->error;
  // The ACK itself took effect: a's seq 1 is acknowledged, b's is not.
  head_->silent = true;
  auto reg = head_->WaitFor<Register>([](const Register& r) { return r.incarnation >= 2; },
                                      milliseconds(3000));
  ASSERT_TRUE(reg.has_value());
  std::map<std::string, uint64_t> acked;
  for (const auto& live : reg->live_actors) acked[live.trial_id] = live.acked_seq;
  EXPECT_EQ(acked["a"], 1u);
  EXPECT_EQ(acked["b"], 0u);
}

// The head sends a request again, same rid, when the worker reconnected and
// the request or its answer may be lost: a request being worked on does not
// run twice, an answered one is answered again (a SAVE saves again), and the
// REGISTER lists the rids each actor has accepted.
TEST_F(WorkerRuntimeTest, ARequestSentAgainWithItsRidRunsAtMostOnce) {
  Start();
  Create(1, "d", 1, "quadratic");
  head_->Send(Train{2, "d", 1, 1, 60});
  head_->Send(Train{2, "d", 1, 1, 60});  // a resend while the first may still run
  auto b = TakeBatch(2);
  ASSERT_TRUE(b.has_value());
  ASSERT_EQ(b->results.size(), 1u);
  head_->Send(Train{2, "d", 1, 1, 60});  // and after it was answered
  ASSERT_TRUE(AwaitHeartbeats(2));
  EXPECT_EQ(CountOthers<ResultBatch>([](const ResultBatch& r) { return r.rid == 2; }), 0u)
      << "a TRAIN ran twice (its results wait in the outbox instead)";

  head_->Send(Save{3, "d", 1, "memory"});
  auto saved = TakeReply(3);
  ASSERT_TRUE(saved.has_value());
  ASSERT_TRUE(saved->ok);
  head_->Send(Save{3, "d", 1, "memory"});
  auto saved_again = TakeReply(3);
  ASSERT_TRUE(saved_again.has_value()) << "an answered SAVE is answered again";
  EXPECT_TRUE(saved_again->ok);
  EXPECT_EQ(saved_again->data["iteration"], 1);

  head_->Send(Stop{4, "d", 1, 1000});
  auto stopped = TakeReply(4);
  ASSERT_TRUE(stopped.has_value());
  EXPECT_TRUE(stopped->ok);
  head_->Send(Stop{4, "d", 1, 1000});
  auto stopped_again = TakeReply(4);
  ASSERT_TRUE(stopped_again.has_value());
  EXPECT_TRUE(stopped_again->ok) << stopped_again->error << " (not 'no actor': the same answer)";

  Create(5, "d", 2, "quadratic");
  head_->Send(Train{6, "d", 2, 1, 60});
  ASSERT_TRUE(TakeBatch(6).has_value());
  head_->Send(Disconnect{"register again"});
  auto reg = head_->WaitFor<Register>([](const Register& r) { return r.incarnation == 2; });
  ASSERT_TRUE(reg.has_value());
  ASSERT_EQ(reg->live_actors.size(), 1u);
  EXPECT_EQ(reg->live_actors[0].rids, (std::vector<uint64_t>{5, 6}));
}

// A result larger than any frame the head accepts would close the link (and
// be sent again after every reconnect): the TRAIN fails instead, saying why.
TEST_F(WorkerRuntimeTest, AResultTooLargeForTheLinkFailsItsTrain) {
  Start();
  Create(1, "big", 1, "blob",
         Json{{"checkpoint_bytes", 0}, {"result_bytes", protocol::kMaxFrameBytes + 1}});
  head_->Send(Train{2, "big", 1, 1, 60});
  auto b = TakeBatch(2);
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(b->failed);
  EXPECT_TRUE(b->results.empty());
  EXPECT_NE(b->error.find("is larger than the"), std::string::npos) << b->error;
  head_->Send(Save{3, "big", 1, "memory"});  // the link is still up
  auto saved = TakeReply(3);
  ASSERT_TRUE(saved.has_value());
  EXPECT_TRUE(saved->ok) << saved->error;
}

TEST_F(WorkerRuntimeTest, ReRegistersWhenTheHeadSaysDisconnect) {
  Start();
  head_->Send(Disconnect{"who are you"});
  auto reg = head_->WaitFor<Register>([](const Register& r) { return r.incarnation == 2; });
  ASSERT_TRUE(reg.has_value());
  EXPECT_EQ(reg->worker_id, first_register_.worker_id);
}

TEST_F(WorkerRuntimeTest, KeepsRegisteringUntilRegisteredAndHoldsReplies) {
  head_ = std::make_unique<FakeHead>(context_, kHeartbeatMs, 6);
  head_->auto_register = false;
  WorkerOptions o = head_->WorkerOptionsFor(dir_.path());
  o.resources = {{"CPU", 1}};
  worker_ = std::make_unique<RunningWorker>(context_, o);
  auto first = head_->WaitFor<Register>();
  ASSERT_TRUE(first.has_value());
  auto second = head_->WaitFor<Register>();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->incarnation, first->incarnation);  // a resend, not a new registration
  // A command before REGISTERED runs, but its reply waits for registration.
  head_->Send(CreateActor{1, "t", 1, "noop", Json::object(), {}, {}, {}, {}});
  head_->Pump(milliseconds(100));
  for (const auto& m : head_->others) EXPECT_FALSE(std::holds_alternative<Reply>(m.body));
  head_->SendRegistered();
  auto r = head_->WaitReply(1);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->ok);
}

TEST_F(WorkerRuntimeTest, DropsUndecodableMessagesAndCarriesOn) {
  Start();
  head_->SendRaw({"ZTUNE1", std::string(1, '\x08'), "\xc1"});
  head_->SendRaw({"BOGUS"});
  head_->SendRaw({"ZTUNE1", std::string(1, '\x7f'), "\x80"});
  head_->Send(Register{});  // a worker->head message sent the wrong way
  Create(1, "t", 1, "noop");
}

TEST_F(WorkerRuntimeTest, ShutdownSendsDisconnectAndStopsActors) {
  Start();
  Create(1, "t", 1, "sleep", Json{{"sleep_s", 0.01}});
  std::thread stopper([&] { EXPECT_TRUE(worker_->Stop().ok()); });
  auto d = head_->WaitFor<Disconnect>();
  stopper.join();
  ASSERT_TRUE(d.has_value());
  std::string log;
  {
    std::ifstream in(dir_.path() + "/t/trial.log");
    std::stringstream ss;
    ss << in.rdbuf();
    log = ss.str();
  }
  EXPECT_NE(log.find("stopped at iteration 0"), std::string::npos) << log;
}

// ---------------------------------------------------------------- chunked payloads

// The link stays up while a test holds credits back or works on megabytes
// (liveness 20 x 50 ms); heartbeats still come every 50 ms.
constexpr int64_t kChunkTestLiveness = 20;

// A SAVE reply up to kInlinePayloadBytes carries its payload inline; one byte
// more and it is announced in a header and sent in chunks.
TEST_F(WorkerRuntimeTest, SendsSaveRepliesInlineUpToTheLimitAndChunkedBeyond) {
  Start(kChunkTestLiveness);
  // The envelope and blob header around checkpoint_bytes, measured.
  Create(1, "s", 1, "blob", Json{{"checkpoint_bytes", 1000}});
  head_->Send(Save{2, "s", 1, "memory"});
  std::string small;
  auto r = TakeReply(2, &small);
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(r->ok) << r->error;
  EXPECT_EQ(r->payload_bytes, 0u);
  EXPECT_EQ(r->data["bytes"], small.size());
  ASSERT_GT(small.size(), 1000u);
  const uint64_t overhead = small.size() - 1000;

  // Exactly the limit: inline.
  Create(3, "s", 2, "blob", Json{{"checkpoint_bytes", kInlinePayloadBytes - overhead}});
  head_->Send(Save{4, "s", 2, "memory"});
  std::string at_limit;
  r = TakeReply(4, &at_limit);
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(r->ok) << r->error;
  EXPECT_EQ(r->payload_bytes, 0u);
  EXPECT_EQ(at_limit.size(), kInlinePayloadBytes);
  EXPECT_TRUE(DecodeEnvelope(at_limit).ok());

  // One byte more: a header, then one chunk of it all.
  Create(5, "s", 3, "blob", Json{{"checkpoint_bytes", kInlinePayloadBytes - overhead + 1}});
  std::string chunked;
  r = SaveChunked(6, "s", 3, &chunked);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->payload_bytes, kInlinePayloadBytes + 1);
  EXPECT_EQ(r->data["bytes"], kInlinePayloadBytes + 1);
  EXPECT_EQ(chunked.size(), kInlinePayloadBytes + 1);
  EXPECT_TRUE(DecodeEnvelope(chunked).ok());
}

// SAVE of a 9 MiB + 17 blob: a REPLY header announcing the size, then chunks in
// offset order, never more than a window (4 chunks) beyond the head's credits;
// the worker's heartbeats flow while credits are held back; the reassembled
// bytes are the checkpoint an inline SAVE would carry: a new actor restores
// from them and trains on.
TEST_F(WorkerRuntimeTest, SendsALargeSaveInChunksWithinTheCreditWindow) {
  Start(kChunkTestLiveness);
  const uint64_t kBlobBytes = kWindowBytes + 5 * kChunkBytes + 17;
  const Json config{{"checkpoint_bytes", kBlobBytes}};
  Create(1, "big", 1, "blob", config);
  head_->Send(Train{2, "big", 1, 2, 60});
  auto b = TakeBatch(2);
  ASSERT_TRUE(b.has_value());
  ASSERT_FALSE(b->failed) << b->error;
  ASSERT_EQ(b->results.size(), 2u);

  head_->Send(Save{3, "big", 1, "memory"});
  std::string inline_payload = "not empty";
  auto header = TakeReply(3, &inline_payload);
  ASSERT_TRUE(header.has_value());
  ASSERT_TRUE(header->ok) << header->error;
  EXPECT_TRUE(inline_payload.empty());
  const uint64_t total = header->payload_bytes;
  ASSERT_GT(total, kBlobBytes);
  EXPECT_EQ(header->data["bytes"], total);
  EXPECT_EQ(header->data["iteration"], 2);
  EXPECT_EQ(header->data["storage"], "memory");
  ASSERT_EQ(ChunkCount(total), kWindowBytes / kChunkBytes + 6);

  // No credit: one window of whole chunks, then nothing while heartbeats go on.
  const uint64_t window_chunks = kWindowBytes / kChunkBytes;
  std::string payload;
  for (uint64_t i = 0; i < window_chunks; ++i) {
    std::string bytes;
    auto c = TakeChunk(3, &bytes);
    ASSERT_TRUE(c.has_value());
    ASSERT_EQ(c->offset, payload.size());
    ASSERT_EQ(bytes.size(), kChunkBytes);
    payload += bytes;
  }
  ASSERT_TRUE(AwaitHeartbeats(2));
  EXPECT_EQ(ChunksSetAside(3), 0u) << "chunks beyond the window without a credit";

  // A credit for the first chunk opens the window by one chunk, no more.
  head_->Send(Credit{3, kChunkBytes});
  {
    std::string bytes;
    auto c = TakeChunk(3, &bytes);
    ASSERT_TRUE(c.has_value());
    ASSERT_EQ(c->offset, window_chunks * kChunkBytes);
    ASSERT_EQ(bytes.size(), kChunkBytes);
    payload += bytes;
  }
  ASSERT_TRUE(AwaitHeartbeats(1));
  EXPECT_EQ(ChunksSetAside(3), 0u) << "chunks beyond the window after a credit of one chunk";

  // Credit what arrived, then each chunk as it comes: the rest arrives.
  head_->Send(Credit{3, payload.size()});
  ASSERT_TRUE(ReceiveChunks(3, total, payload));
  ASSERT_EQ(payload.size(), total);
  // The transfer is over: nothing more for it, and the worker carries on.
  ASSERT_TRUE(AwaitHeartbeats(1));
  EXPECT_EQ(ChunksSetAside(3), 0u);
  EXPECT_EQ(CountOthers<Reply>([](const Reply& r) { return r.rid == 3; }), 0u);

  Create(4, "big", 2, "blob", config);
  head_->Send(Restore{5, "big", 2}, payload);
  auto restored = TakeReply(5);
  ASSERT_TRUE(restored.has_value());
  ASSERT_TRUE(restored->ok) << restored->error;
  EXPECT_EQ(restored->data["iteration"], 2);
  head_->Send(Train{6, "big", 2, 1, 60});
  b = TakeBatch(6);
  ASSERT_TRUE(b.has_value());
  ASSERT_FALSE(b->failed) << b->error;
  ASSERT_EQ(b->results.size(), 1u);
  EXPECT_EQ(b->results[0].result.ToJson()["training_iteration"], 3);

  // The content, checked last: decoding and regenerating 21 MiB takes seconds
  // under ASan on a loaded machine, a silence from this head longer than the
  // worker's liveness window (the worker would reconnect, and the exchanges
  // above would go to a routing id that is gone).
  auto env = DecodeEnvelope(payload);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->trainable, "blob");
  EXPECT_EQ(env->trial_id, "big");
  EXPECT_EQ(env->iteration, 2);
  ASSERT_EQ(env->data.size(), 20 + kBlobBytes);
  EXPECT_EQ(env->data.substr(0, 4), "BLB1");
  EXPECT_TRUE(std::string_view(env->data).substr(20) == BlobContent(config, 2, kBlobBytes))
      << "the reassembled checkpoint content differs";
}

// A chunked SAVE reply cut by a DISCONNECT (re-register) is sent again whole
// after the next REGISTERED: the header again, chunks from offset 0.
TEST_F(WorkerRuntimeTest, SendsAnUnfinishedChunkedSaveAgainAfterReRegistering) {
  Start(kChunkTestLiveness);
  const uint64_t kBlobBytes = kWindowBytes + kChunkBytes + 17;
  Create(1, "d", 1, "blob", Json{{"checkpoint_bytes", kBlobBytes}});
  head_->Send(Save{2, "d", 1, "memory"});
  auto header = TakeReply(2);
  ASSERT_TRUE(header.has_value());
  ASSERT_TRUE(header->ok) << header->error;
  const uint64_t total = header->payload_bytes;
  ASSERT_GT(total, kWindowBytes + kChunkBytes);
  // One window, one credit, one more chunk: all but the last chunk sent, 1
  // credited.
  std::string first;
  for (uint64_t i = 0; i < kWindowBytes / kChunkBytes; ++i) {
    std::string bytes;
    ASSERT_TRUE(TakeChunk(2, &bytes).has_value());
    first += bytes;
  }
  head_->Send(Credit{2, kChunkBytes});
  {
    std::string bytes;
    auto c = TakeChunk(2, &bytes);
    ASSERT_TRUE(c.has_value());
    ASSERT_EQ(c->offset, first.size());
    first += bytes;
  }

  head_->Send(Disconnect{"unknown worker; register again"});
  auto reg = Take<Register>([](const Register& r) { return r.incarnation == 2; });
  ASSERT_TRUE(reg.has_value());
  ASSERT_EQ(reg->live_actors.size(), 1u);
  std::string inline_payload = "not empty";
  auto again = TakeReply(2, &inline_payload);
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(again->ok);
  EXPECT_EQ(again->payload_bytes, total);
  EXPECT_EQ(again->data, header->data);
  EXPECT_TRUE(inline_payload.empty());
  // Nothing of the first transfer came after the DISCONNECT (the window was full).
  EXPECT_EQ(ChunksSetAside(2), 0u);

  std::string payload;
  ASSERT_TRUE(ReceiveChunks(2, total, payload));
  EXPECT_TRUE(payload.compare(0, first.size(), first) == 0);
  ASSERT_TRUE(AwaitHeartbeats(2));
  EXPECT_EQ(ChunksSetAside(2), 0u);
  EXPECT_EQ(CountOthers<Reply>([](const Reply& r) { return r.rid == 2; }), 0u)
      << "the SAVE was answered a third time";
  // Last: decoding 17 MiB under ASan on a loaded machine can outlast the
  // worker's liveness window, and this head heartbeats only while it receives.
  EXPECT_TRUE(DecodeEnvelope(payload).ok());
}

// A chunked RESTORE with a TRAIN sent between its header and its last chunk
// (as the head does when it starts a trial from a checkpoint): each chunk is
// credited; the TRAIN waits for the payload and runs after the RESTORE, from
// the restored iteration.
TEST_F(WorkerRuntimeTest, RunsCommandsThatArriveDuringAChunkedRestoreAfterIt) {
  Start(kChunkTestLiveness);
  const Json config{{"checkpoint_bytes", 2 * kChunkBytes + 17}};
  Create(1, "r", 1, "blob", config);
  head_->Send(Train{2, "r", 1, 3, 60});
  auto b = TakeBatch(2);
  ASSERT_TRUE(b.has_value());
  ASSERT_EQ(b->results.size(), 3u);
  std::string checkpoint;
  ASSERT_TRUE(SaveChunked(3, "r", 1, &checkpoint).has_value());
  ASSERT_EQ(ChunkCount(checkpoint.size()), 3u);

  Create(4, "r", 2, "blob", config);
  head_->others.clear();
  head_->Send(Restore{5, "r", 2, checkpoint.size()});
  SendChunk(5, checkpoint, 0);
  auto credit = TakeCredit(5);
  ASSERT_TRUE(credit.has_value());
  EXPECT_EQ(credit->received, kChunkBytes);
  head_->Send(Train{6, "r", 2, 1, 60});
  SendChunk(5, checkpoint, 1);
  credit = TakeCredit(5);
  ASSERT_TRUE(credit.has_value());
  EXPECT_EQ(credit->received, 2 * kChunkBytes);
  // The TRAIN has not run: the actor has not got its checkpoint yet.
  ASSERT_TRUE(AwaitHeartbeats(2));
  EXPECT_EQ(CountOthers<ResultBatch>([](const ResultBatch& x) { return x.rid == 6; }), 0u)
      << "the TRAIN ran before the RESTORE's payload was complete";
  EXPECT_EQ(CountOthers<Reply>([](const Reply& x) { return x.rid == 5; }), 0u);

  SendChunk(5, checkpoint, 2);
  credit = TakeCredit(5);
  ASSERT_TRUE(credit.has_value());
  EXPECT_EQ(credit->received, checkpoint.size());
  auto restored = TakeReply(5);
  ASSERT_TRUE(restored.has_value());
  ASSERT_TRUE(restored->ok) << restored->error;
  EXPECT_EQ(restored->data["iteration"], 3);
  EXPECT_EQ(restored->payload_bytes, 0u);
  // Everything that arrived before the RESTORE's reply is set aside: not the batch.
  EXPECT_EQ(CountOthers<ResultBatch>([](const ResultBatch& x) { return x.rid == 6; }), 0u)
      << "the TRAIN was answered before the RESTORE";
  b = TakeBatch(6);
  ASSERT_TRUE(b.has_value());
  ASSERT_FALSE(b->failed) << b->error;
  ASSERT_EQ(b->results.size(), 1u);
  EXPECT_EQ(b->results[0].seq, 1u);
  EXPECT_EQ(b->results[0].result.ToJson()["training_iteration"], 4);
  EXPECT_EQ(b->results[0].result.ToJson()["iterations_since_restore"], 1);
  EXPECT_EQ(CreditsSetAside(5), 0u);  // one credit per chunk, no more
}

// A STOP while a chunked RESTORE's payload is incomplete cancels the wait: the
// RESTORE fails (naming the STOP), the TRAIN queued behind it fails, the STOP
// goes through; the rest of the payload is dropped without credits.
TEST_F(WorkerRuntimeTest, StopCancelsAnIncompleteChunkedRestore) {
  Start(kChunkTestLiveness);
  Create(1, "s", 1, "blob", Json{{"checkpoint_bytes", 1000}});
  const std::string junk(3 * kChunkBytes, 'x');  // never complete, never checked
  head_->others.clear();
  head_->Send(Restore{2, "s", 1, junk.size()});
  SendChunk(2, junk, 0);
  auto credit = TakeCredit(2);
  ASSERT_TRUE(credit.has_value());
  EXPECT_EQ(credit->received, kChunkBytes);
  head_->Send(Train{3, "s", 1, 1, 60});
  head_->Send(Stop{4, "s", 1, 1000});

  auto stopped = TakeReply(4);
  ASSERT_TRUE(stopped.has_value());
  EXPECT_TRUE(stopped->ok) << stopped->error;
  // Both failures were sent before the STOP ran, in order.
  std::vector<const Message*> answers;
  for (const auto& m : head_->others) {
    if (std::holds_alternative<Reply>(m.body) || std::holds_alternative<ResultBatch>(m.body)) {
      answers.push_back(&m);
    }
  }
  ASSERT_EQ(answers.size(), 2u);
  const auto* restore = std::get_if<Reply>(&answers[0]->body);
  ASSERT_NE(restore, nullptr);
  EXPECT_EQ(restore->rid, 2u);
  EXPECT_FALSE(restore->ok);
  EXPECT_NE(restore->error.find("STOP"), std::string::npos) << restore->error;
  EXPECT_EQ(restore->trial_id, "s");
  EXPECT_EQ(restore->attempt, 1u);
  const auto* train = std::get_if<ResultBatch>(&answers[1]->body);
  ASSERT_NE(train, nullptr);
  EXPECT_EQ(train->rid, 3u);
  EXPECT_TRUE(train->failed);
  EXPECT_TRUE(train->results.empty());
  EXPECT_NE(train->error.find("RESTORE"), std::string::npos) << train->error;
  EXPECT_NE(train->error.find("STOP"), std::string::npos) << train->error;
  EXPECT_EQ(CancelsSetAside(2), 1u) << "the head is told to stop sending";
  head_->others.clear();
  answers.clear();

  // The rest of the payload finds no transfer: no credit, no second answer.
  SendChunk(2, junk, 1);
  SendChunk(2, junk, 2);
  ASSERT_TRUE(AwaitHeartbeats(2));
  EXPECT_EQ(CreditsSetAside(2), 0u);
  EXPECT_EQ(CountOthers<Reply>([](const Reply&) { return true; }), 0u);
  EXPECT_EQ(CountOthers<ResultBatch>([](const ResultBatch&) { return true; }), 0u);
  // The key is free, and commands for it are not held back by a stale wait.
  Create(5, "s", 1, "noop");
  head_->Send(Train{6, "s", 1, 1, 60});
  auto b = TakeBatch(6);
  ASSERT_TRUE(b.has_value());
  EXPECT_FALSE(b->failed) << b->error;
}

// A chunked RESTORE for an actor that does not exist is answered at once,
// before any chunk; its chunks are then dropped without credits.
TEST_F(WorkerRuntimeTest, FailsAChunkedRestoreForAnUnknownActorAtOnce) {
  Start(kChunkTestLiveness);
  head_->Send(Restore{1, "ghost", 2, 2 * kChunkBytes});
  auto r = TakeReply(1);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->error, "no actor for trial ghost attempt 2 on worker " + worker_->id());
  EXPECT_EQ(r->trial_id, "ghost");
  EXPECT_EQ(r->attempt, 2u);
  EXPECT_EQ(CreditsSetAside(1), 0u);
  EXPECT_EQ(CancelsSetAside(1), 1u) << "the head is told to stop sending";

  const std::string junk(2 * kChunkBytes, 'x');
  SendChunk(1, junk, 0);
  SendChunk(1, junk, 1);
  ASSERT_TRUE(AwaitHeartbeats(2));
  EXPECT_EQ(CreditsSetAside(1), 0u);
  EXPECT_EQ(CountOthers<Reply>([](const Reply& x) { return x.rid == 1; }), 0u);
  // No wait was left behind for that key.
  Create(2, "ghost", 2, "noop");
  head_->Send(Train{3, "ghost", 2, 1, 60});
  auto b = TakeBatch(3);
  ASSERT_TRUE(b.has_value());
  EXPECT_FALSE(b->failed) << b->error;
}

// A chunk out of order ends its RESTORE (and the commands behind it) with an
// error; the actor is untouched and takes commands again.
TEST_F(WorkerRuntimeTest, FailsAChunkedRestoreWhoseChunksComeOutOfOrder) {
  Start(kChunkTestLiveness);
  Create(1, "o", 1, "blob", Json{{"checkpoint_bytes", 1000}});
  const std::string junk(2 * kChunkBytes, 'x');
  head_->others.clear();
  head_->Send(Restore{2, "o", 1, junk.size()});
  head_->Send(Train{3, "o", 1, 1, 60});
  SendChunk(2, junk, 1);  // offset 1 MiB first
  auto r = TakeReply(2);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->ok);
  EXPECT_NE(r->error.find("RESTORE payload refused"), std::string::npos) << r->error;
  EXPECT_NE(r->error.find("offset"), std::string::npos) << r->error;
  auto b = TakeBatch(3);
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(b->failed);
  EXPECT_NE(b->error.find("RESTORE"), std::string::npos) << b->error;
  EXPECT_EQ(CreditsSetAside(2), 0u);
  EXPECT_EQ(CancelsSetAside(2), 1u) << "the head is told to stop sending";

  head_->Send(Train{4, "o", 1, 1, 60});
  b = TakeBatch(4);
  ASSERT_TRUE(b.has_value());
  ASSERT_FALSE(b->failed) << b->error;
  EXPECT_EQ(b->results[0].result.ToJson()["training_iteration"], 1);
}

// Two chunked RESTOREs for one actor, the first larger than a window, in the
// order the head sends them (HeadServer::SendOutgoing: header, then as many
// chunks as each transfer's window allows): H5, C5[window], H6, C6[window], and
// C5[rest] once C5's chunks are credited. Both are restored in order. (This
// deadlocked when the second header waited behind the first without its
// transfer being registered: its chunks were dropped uncredited.)
TEST_F(WorkerRuntimeTest, RestoresTwoChunkedRestoresQueuedBackToBack) {
  Start(kChunkTestLiveness);
  const Json config{{"checkpoint_bytes", kWindowBytes + kChunkBytes + 17}};
  Create(1, "q", 1, "blob", config);
  std::string checkpoint;
  ASSERT_TRUE(SaveChunked(2, "q", 1, &checkpoint).has_value());
  const uint64_t chunks = ChunkCount(checkpoint.size());
  const uint64_t window_chunks = kWindowBytes / kChunkBytes;
  ASSERT_GT(chunks, window_chunks);

  Create(3, "q", 2, "blob", config);
  head_->others.clear();
  head_->Send(Restore{5, "q", 2, checkpoint.size()});
  for (uint64_t i = 0; i < window_chunks; ++i) SendChunk(5, checkpoint, i);
  head_->Send(Restore{6, "q", 2, checkpoint.size()});
  for (uint64_t i = 0; i < window_chunks; ++i) SendChunk(6, checkpoint, i);
  head_->Send(Train{7, "q", 2, 1, 60});
  for (uint64_t i = 0; i < window_chunks; ++i) {
    auto credit = TakeCredit(5);
    ASSERT_TRUE(credit.has_value());
    EXPECT_EQ(credit->received, (i + 1) * kChunkBytes);
  }
  for (uint64_t i = window_chunks; i < chunks; ++i) SendChunk(5, checkpoint, i);
  auto first = TakeReply(5);
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(first->ok) << first->error;

  // The head sends the rest of RESTORE 6 only as its first window is credited.
  for (uint64_t i = 0; i < window_chunks; ++i) {
    auto credit = TakeCredit(6);
    ASSERT_TRUE(credit.has_value()) << "chunk " << i << " of RESTORE 6 was not credited";
    EXPECT_EQ(credit->received, (i + 1) * kChunkBytes);
  }
  for (uint64_t i = window_chunks; i < chunks; ++i) SendChunk(6, checkpoint, i);
  auto second = TakeReply(6);
  ASSERT_TRUE(second.has_value());
  EXPECT_TRUE(second->ok) << second->error;
  auto b = TakeBatch(7);
  ASSERT_TRUE(b.has_value());
  EXPECT_FALSE(b->failed) << b->error;
}

}  // namespace
}  // namespace ztune::worker
