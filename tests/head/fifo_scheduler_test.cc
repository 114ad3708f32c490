// FifoScheduler (Ray's FIFOScheduler) and the runner's use of a scheduler's
// decisions (STOP and PAUSE after a result).
#include "head/fifo_scheduler.h"
#include "head/stored_result.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "storage/keys.h"

#include "head/trial_runner.h"
#include "storage/in_memory_store.h"
#include "tests/fakes/fake_worker_fleet.h"
#include "tests/fakes/recording_command_sink.h"

namespace ztune::head {
namespace {

Trial T(const TrialId& id, uint64_t seq, TrialStatus status = TrialStatus::kPending) {
  Trial t;
  t.trial_id = id;
  t.seq = seq;
  t.status = status;
  return t;
}

PlacementRequest Req(const char* json) { return PlacementRequest::FromJson(Json::parse(json)).value(); }

TEST(FifoSchedulerTest, FirstPendingWithResourcesThenFirstPausedAcrossShapes) {
  FifoScheduler s;
  const auto one = Req(R"({"bundles": [{"CPU": 1}]})");
  const auto gpu = Req(R"({"bundles": [{"GPU": 1}]})");
  s.OnTrialAdd(T("paused", 1, TrialStatus::kPaused), one.Key(), one);
  s.OnTrialAdd(T("b", 3), one.Key(), one);
  s.OnTrialAdd(T("a", 2), gpu.Key(), gpu);
  auto all = [](const std::string&) { return true; };
  EXPECT_EQ(s.ChooseTrialToRun(all), "a");  // PENDING before PAUSED, then by seq
  // A shape without resources never blocks another.
  auto cpu_only = [&](const std::string& key) { return key == one.Key(); };
  EXPECT_EQ(s.ChooseTrialToRun(cpu_only), "b");
  s.OnTrialRemove(T("b", 3));
  EXPECT_EQ(s.ChooseTrialToRun(cpu_only), "paused");
  EXPECT_EQ(s.ChooseTrialToRun([](const std::string&) { return false; }), std::nullopt);
  EXPECT_EQ(s.NumWaiting(one.Key()), 1u);
  // Added again (requeued at the back): one place per trial.
  s.OnTrialAdd(T("a", 9), gpu.Key(), gpu);
  s.OnTrialAdd(T("a", 10), gpu.Key(), gpu);
  EXPECT_EQ(s.NumWaiting(gpu.Key()), 1u);
  size_t shapes = 0;
  s.ForEachWaitingRequest([&](const std::string&, const PlacementRequest&, size_t) { ++shapes; });
  EXPECT_EQ(shapes, 2u);
  Trial a = T("a", 10);
  EXPECT_EQ(s.OnTrialResult(a, Json::object()), SchedulerDecision::kContinue);
}

// An emptied queue stays (the runner still unstages its groups from it) until
// the runner forgets the shape; a shape with a waiting trial is never dropped.
TEST(FifoSchedulerTest, AnEmptiedShapeIsListedUntilForgotten) {
  FifoScheduler s;
  const auto one = Req(R"({"bundles": [{"CPU": 1}]})");
  const auto two = Req(R"({"bundles": [{"CPU": 2}]})");
  s.OnTrialAdd(T("a", 1), one.Key(), one);
  s.OnTrialAdd(T("b", 2), two.Key(), two);
  s.OnTrialRemove(T("a", 1));
  auto shapes = [&] {
    std::vector<std::pair<std::string, size_t>> out;
    s.ForEachWaitingRequest(
        [&](const std::string& key, const PlacementRequest&, size_t n) { out.emplace_back(key, n); });
    std::sort(out.begin(), out.end());
    return out;
  };
  auto expected = std::vector<std::pair<std::string, size_t>>{{one.Key(), 0}, {two.Key(), 1}};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(shapes(), expected);
  s.ForgetRequest(one.Key());
  s.ForgetRequest(two.Key());  // b waits: kept
  EXPECT_EQ(shapes(), (std::vector<std::pair<std::string, size_t>>{{two.Key(), 1}}));
  s.ForgetRequest("never seen");
}

// A scheduler that stops or pauses a trial at a given iteration.
class ScriptedScheduler final : public TrialScheduler {
 public:
  ScriptedScheduler(int64_t at, SchedulerDecision decision) : at_(at), decision_(decision) {}
  void OnTrialAdd(const Trial& t, const std::string& k, const PlacementRequest& r) override {
    fifo_.OnTrialAdd(t, k, r);
  }
  void OnTrialRemove(const Trial& t) override { fifo_.OnTrialRemove(t); }
  SchedulerDecision OnTrialResult(Trial&, const Json& result) override {
    ++results;
    if (fired_ || result.value("training_iteration", int64_t{0}) != at_) {
      return SchedulerDecision::kContinue;
    }
    fired_ = true;
    return decision_;
  }
  void OnTrialComplete(Trial&) override { ++completed; }
  void OnTrialError(Trial&) override { ++errored; }
  std::optional<TrialId> ChooseTrialToRun(
      const std::function<bool(const std::string&)>& has) const override {
    return fifo_.ChooseTrialToRun(has);
  }
  void ForEachWaitingRequest(
      const std::function<void(const std::string&, const PlacementRequest&, size_t)>& fn)
      const override {
    fifo_.ForEachWaitingRequest(fn);
  }
  size_t NumWaiting(const std::string& key) const override { return fifo_.NumWaiting(key); }
  void ForgetRequest(const std::string& key) override { fifo_.ForgetRequest(key); }

  int results = 0, completed = 0, errored = 0;

 private:
  FifoScheduler fifo_;
  int64_t at_;
  SchedulerDecision decision_;
  bool fired_ = false;
};

struct RunnerWith {
  explicit RunnerWith(std::unique_ptr<ScriptedScheduler> s) : scheduler(s.get()) {
    RunnerOptions o;
    o.heartbeat_ms = 100;
    o.strict_invariants = true;
    runner = std::make_unique<TrialRunner>(store, sink, clock, o, std::move(s));
    EXPECT_TRUE(runner->Load().ok());
    fleet = std::make_unique<testing::FakeWorkerFleet>(*runner, sink, store);
    fleet->Register("w", 1);
  }
  const Trial& RunOne(const char* spec) {
    auto r = runner->Submit(Json::parse(spec));
    EXPECT_TRUE(r.ok());
    const std::string exp = (*r)["experiment_id"];
    for (int i = 0; i < 200 && !runner->FindExperiment(exp)->finished; ++i) {
      fleet->Turn();
      fleet->Heartbeat();
      clock.AdvanceMs(10);
    }
    EXPECT_TRUE(runner->FindExperiment(exp)->finished);
    return *runner->FindTrial(runner->FindExperiment(exp)->trial_ids[0]);
  }
  storage::InMemoryStore store;
  testing::RecordingCommandSink sink;
  FakeClock clock;
  ScriptedScheduler* scheduler;
  std::unique_ptr<TrialRunner> runner;
  std::unique_ptr<testing::FakeWorkerFleet> fleet;
};

TEST(TrialSchedulerTest, AStopDecisionEndsTheTrialAtThatResult) {
  RunnerWith h(std::make_unique<ScriptedScheduler>(3, SchedulerDecision::kStop));
  const Trial& t = h.RunOne(R"({"trainable": "quadratic", "result_buffer_length": 5,
      "stop": {"training_iteration": 10}})");
  EXPECT_EQ(t.status, TrialStatus::kTerminated);
  EXPECT_EQ(t.iteration, 3) << "results after the STOP in the batch are not stored";
  EXPECT_EQ(h.scheduler->completed, 1);
  // Ray: the STOP makes that result done, as stored and as the last result.
  EXPECT_TRUE(t.last_result.Get().value("done", false));
  h.fleet->Turn();  // commits the last turn's writes
  std::vector<Json> stored;
  ASSERT_TRUE(h.store
                  .Scan(storage::Family::kResults, storage::TrialPrefix(t.trial_id),
                        [&](std::string_view, std::string_view v) {
                          stored.push_back(ParseStoredResult(v).value());
                          return true;
                        })
                  .ok());
  ASSERT_EQ(stored.size(), 3u);
  EXPECT_FALSE(stored[1].value("done", true));
  EXPECT_TRUE(stored[2].value("done", false)) << stored[2].dump();
}

TEST(TrialSchedulerTest, APauseDecisionPausesAndRequeuesTheTrial) {
  RunnerWith h(std::make_unique<ScriptedScheduler>(2, SchedulerDecision::kPause));
  const Trial& t = h.RunOne(R"({"trainable": "quadratic", "stop": {"training_iteration": 6}})");
  EXPECT_EQ(t.status, TrialStatus::kTerminated);
  EXPECT_EQ(t.iteration, 6);
  EXPECT_EQ(t.num_restores, 1) << "resumed from its pause checkpoint";
  EXPECT_FALSE(t.held);
  EXPECT_EQ(h.scheduler->results, 5) << "the result that stops it is not the scheduler's (Ray)";
}

}  // namespace
}  // namespace ztune::head
