#include "worker/worker_runtime.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/worker/actor_harness.h"
#include "tests/worker/fake_head.h"
#include "worker/checkpoint_envelope.h"

namespace ztune::worker {
namespace {

using std::chrono::milliseconds;
using namespace protocol;

constexpr int64_t kHeartbeatMs = 50;

// A WorkerRuntime on its own thread, shut down on destruction.
class RunningWorker {
 public:
  RunningWorker(zmq::context_t& context, WorkerOptions options) {
    RegisterBuiltinTrainables(registry_);
    runtime_ = std::make_unique<WorkerRuntime>(context, registry_, std::move(options), clock_);
    thread_ = std::thread([this] { status_ = runtime_->Run(); });
  }
  ~RunningWorker() { Stop().IgnoreError(); }
  Status Stop() {
    if (thread_.joinable()) {
      runtime_->RequestShutdown();
      thread_.join();
    }
    return status_;
  }
  const std::string& id() const { return runtime_->worker_id(); }

 private:
  TrainableRegistry registry_;
  SteadyClock clock_;
  std::unique_ptr<WorkerRuntime> runtime_;
  std::thread thread_;
  Status status_;
};

class WorkerRuntimeTest : public ::testing::Test {
 protected:
  // Liveness 6 (300 ms) keeps the link up while a test waits on something
  // else; the silent-head test uses its own, shorter one.
  void Start(int64_t liveness = 6) {
    head_ = std::make_unique<FakeHead>(context_, kHeartbeatMs, liveness);
    WorkerOptions o;
    o.head_endpoint = head_->endpoint();
    o.name = "w";
    o.work_dir = dir_.path();
    o.resources = {{"CPU", 2}, {"GPU", 1}, {"memory", 8e9}};
    o.gpu_ids = {0};
    o.heartbeat_ms = kHeartbeatMs;
    o.liveness = liveness;
    o.max_backoff_ms = 200;
    o.shutdown_grace_ms = 1000;
    worker_ = std::make_unique<RunningWorker>(context_, o);
    auto reg = head_->WaitFor<Register>();
    ASSERT_TRUE(reg.has_value());
    first_register_ = *reg;
  }

  void Create(uint64_t rid, const std::string& trial, uint64_t attempt,
              const std::string& trainable, Json config = Json::object()) {
    head_->Send(CreateActor{rid, trial, attempt, trainable, std::move(config), {{"CPU", 1}}, {}});
    auto r = head_->WaitReply(rid);
    ASSERT_TRUE(r.has_value());
    ASSERT_TRUE(r->ok) << r->error;
  }

  void TearDown() override {
    worker_.reset();
    head_.reset();
  }

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
  EXPECT_EQ(head_->worker(), worker_->id());  // the routing id is the worker id
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
    const Json& r = b->results[i].result;
    EXPECT_EQ(b->results[i].seq, static_cast<uint64_t>(i + 1));
    EXPECT_EQ(r["training_iteration"], i + 1);
    for (const char* k : {"time_this_iter_s", "time_total_s", "timestamp", "date", "done",
                          "trial_id", "hostname", "pid", "iterations_since_restore",
                          "time_since_restore", "loss", "x"}) {
      EXPECT_TRUE(r.contains(k)) << k;
    }
    EXPECT_EQ(r["pid"], getpid());
  }
  head_->Send(Ack{"t1", 1, 3});

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
  EXPECT_EQ(b->results[0].result["training_iteration"], 4);
  EXPECT_EQ(b->results[0].result["iterations_since_restore"], 1);
  double x4 = b->results[0].result["x"].get<double>();
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
  EXPECT_EQ(b->results[0].result["training_iteration"], 1);
  EXPECT_EQ(b->results[0].result["trial_id"], "t2");
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
  EXPECT_EQ(b->results[0].result["training_iteration"], 1);
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
  head_->Send(CreateActor{1, "t", 1, "resnet", Json::object(), {}, {}});
  auto r = head_->WaitReply(1);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->error,
            "unknown trainable 'resnet' (this worker has: blob, fail, noop, quadratic, sleep)");

  head_->Send(CreateActor{2, "t", 1, "quadratic", Json{{"lr", "x"}}, {}, {}});
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
  head_->Send(CreateActor{5, "t", 1, "noop", Json::object(), {}, {}});
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
  head_->Send(Ack{"r", 1, 1});  // partial: seq 1 only

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
  head_->Send(Ack{"r", 1, 3});

  // Actors kept running: training goes on across the reconnect.
  head_->Send(Train{4, "r", 1, 1, 60});
  auto b4 = head_->WaitBatch(4);
  ASSERT_TRUE(b4.has_value());
  EXPECT_EQ(b4->results[0].result["training_iteration"], 4);
  EXPECT_EQ(b4->results[0].seq, 4u);
  head_->Send(Ack{"r", 1, 4});

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
  WorkerOptions o;
  o.head_endpoint = head_->endpoint();
  o.name = "w";
  o.work_dir = dir_.path();
  o.resources = {{"CPU", 1}};
  o.heartbeat_ms = kHeartbeatMs;
  o.liveness = 6;
  o.max_backoff_ms = 200;
  worker_ = std::make_unique<RunningWorker>(context_, o);
  auto first = head_->WaitFor<Register>();
  ASSERT_TRUE(first.has_value());
  auto second = head_->WaitFor<Register>();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->incarnation, first->incarnation);  // a resend, not a new registration
  // A command before REGISTERED runs, but its reply waits for registration.
  head_->Send(CreateActor{1, "t", 1, "noop", Json::object(), {}, {}});
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

}  // namespace
}  // namespace ztune::worker
