#include "worker/actor_runner.h"

#include <poll.h>

#include <deque>
#include <fstream>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/worker/actor_harness.h"
#include "common/checkpoint/checkpoint_envelope.h"

namespace ztune::worker {
using checkpoint::CheckpointEnvelope;
using checkpoint::DecodeEnvelope;
using checkpoint::EncodeEnvelope;
namespace {

// Returns scripted results by iteration (1-based); "throw" throws, "bad" is a
// non-object. Used to exercise the auto-fill and buffering rules.
class ScriptedTrainable : public Trainable {
 public:
  explicit ScriptedTrainable(std::map<int64_t, Json> script) : script_(std::move(script)) {}
  Status Setup(const Json&, const TrialContext& ctx) override {
    ctx.Log("scripted setup");
    return Status::Ok();
  }
  Result<Json> Step(const TrialContext& ctx) override {
    auto it = script_.find(ctx.iteration + 1);
    if (it == script_.end()) return Json::object();
    if (it->second == "throw") throw std::runtime_error("kaboom");
    if (it->second == "bad") return Json::array();
    return it->second;
  }
  Result<std::string> Save(const TrialContext&) override { return std::string("s"); }
  Status Restore(std::string_view, const TrialContext&) override { return Status::Ok(); }

 private:
  std::map<int64_t, Json> script_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ActorRunnerTest : public ::testing::Test {
 protected:
  TempDir dir_;
};

// The control thread polls the queue's fd: readable exactly while events wait
// (one write per empty-to-non-empty push, cleared by the Drain that empties it).
TEST(EventQueueTest, TheFdIsReadableExactlyWhileEventsWait) {
  EventQueue q;
  ASSERT_TRUE(q.valid());
  auto readable = [&] {
    pollfd p{q.fd(), POLLIN, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
  };
  EXPECT_FALSE(readable());
  for (uint64_t rid = 1; rid <= 3; ++rid) {
    RunnerEvent e;
    e.rid = rid;
    q.Push(std::move(e));
    EXPECT_TRUE(readable()) << rid;
  }
  std::deque<RunnerEvent> got = q.Drain();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got.back().rid, 3u);
  EXPECT_FALSE(readable());
  EXPECT_TRUE(q.Drain().empty());
  q.Push(RunnerEvent{});
  EXPECT_TRUE(readable()) << "a push after a drain wakes again";
  q.Drain();
  q.Wake();
  EXPECT_TRUE(readable()) << "Wake without an event";
  EXPECT_TRUE(q.Drain().empty());
  EXPECT_FALSE(readable());
}

TEST_F(ActorRunnerTest, FillsAutoFieldsAndCountersWhenTraining) {
  ActorHarness a("quadratic", "t1", 1, Json{{"lr", 0.1}}, dir_.path());
  ASSERT_TRUE(a.setup().ok) << a.setup().error;
  auto e = a.Train(3);
  ASSERT_TRUE(e.ok) << e.error;
  ASSERT_EQ(e.results.size(), 3u);
  EXPECT_EQ(e.iteration, 3);
  double last_total = 0;
  for (int i = 0; i < 3; ++i) {
    const Json r = e.results[i].ToJson();
    EXPECT_EQ(r["training_iteration"], i + 1);
    EXPECT_EQ(r["iterations_since_restore"], i + 1);
    EXPECT_EQ(r["done"], false);
    EXPECT_EQ(r["trial_id"], "t1");
    EXPECT_EQ(r["hostname"], "test-host");
    EXPECT_EQ(r["pid"], 4242);
    EXPECT_TRUE(r["timestamp"].is_number_integer());
    EXPECT_TRUE(std::regex_match(r["date"].get<std::string>(),
                                 std::regex(R"(\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d)")));
    EXPECT_GE(r["time_this_iter_s"].get<double>(), 0);
    EXPECT_GE(r["time_total_s"].get<double>(), last_total);
    EXPECT_DOUBLE_EQ(r["time_since_restore"].get<double>(), r["time_total_s"].get<double>());
    last_total = r["time_total_s"].get<double>();
    EXPECT_FALSE(r.contains("timesteps_total"));
    EXPECT_TRUE(r.contains("loss"));
    EXPECT_TRUE(r.contains("x"));
  }
  // A TRAIN without buffering runs one step; so does buffer_time_s 0, as in
  // Ray's train_buffered (at least one result, then stop once the time is up).
  e = a.Train();
  ASSERT_EQ(e.results.size(), 1u);
  EXPECT_EQ(e.results[0].ToJson()["training_iteration"], 4);
  e = a.Train(10, 0);
  ASSERT_EQ(e.results.size(), 1u);
  EXPECT_EQ(e.results[0].ToJson()["training_iteration"], 5);
}

TEST_F(ActorRunnerTest, AppliesRaySetDefaultAndUserTimings) {
  std::map<int64_t, Json> script = {
      {1, Json{{"timesteps_this_iter", 10}, {"time_this_iter_s", 2.5}, {"mean_loss", 4}}},
      {2, Json{{"timesteps_this_iter", 5}, {"training_iteration", 99}, {"done", "maybe"}}},
      {3, Json{{"timesteps_total", 1000}}},
  };
  ActorHarness a("scripted", std::make_unique<ScriptedTrainable>(script), "t", 1, Json::object(),
                 dir_.path());
  auto e = a.Train(3);
  ASSERT_EQ(e.results.size(), 3u);
  EXPECT_EQ(e.results[0].ToJson()["timesteps_total"], 10);
  EXPECT_DOUBLE_EQ(e.results[0].ToJson()["time_this_iter_s"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(e.results[0].ToJson()["time_total_s"].get<double>(), 2.5);
  EXPECT_EQ(e.results[0].ToJson()["neg_mean_loss"], -4.0);
  EXPECT_EQ(e.results[1].ToJson()["timesteps_total"], 15);
  EXPECT_EQ(e.results[1].ToJson()["training_iteration"], 2);  // overwritten: the head keys on it
  EXPECT_EQ(e.results[1].ToJson()["done"], "maybe");          // setdefault: the user value wins
  EXPECT_EQ(e.results[2].ToJson()["timesteps_total"], 1000);  // setdefault again
}

TEST_F(ActorRunnerTest, StopsBufferingAtDoneOrShouldCheckpoint) {
  std::map<int64_t, Json> script = {{2, Json{{"should_checkpoint", true}}},
                                    {4, Json{{"done", true}}}};
  ActorHarness a("scripted", std::make_unique<ScriptedTrainable>(script), "t", 1, Json::object(),
                 dir_.path());
  auto e = a.Train(10);
  ASSERT_EQ(e.results.size(), 2u);
  EXPECT_EQ(e.results[1].ToJson()["should_checkpoint"], true);
  e = a.Train(10);
  ASSERT_EQ(e.results.size(), 2u);
  EXPECT_EQ(e.results[1].ToJson()["done"], true);
  EXPECT_EQ(e.results[1].ToJson()["training_iteration"], 4);
}

TEST_F(ActorRunnerTest, StopsBufferingWhenBufferTimeElapses) {
  ActorHarness a("sleep", "t", 1, Json{{"sleep_s", 0.01}}, dir_.path());
  auto e = a.Train(1000, 0.05);
  ASSERT_TRUE(e.ok);
  EXPECT_GE(e.results.size(), 1u);
  EXPECT_LE(e.results.size(), 10u);
}

TEST_F(ActorRunnerTest, ReportsStepErrorsAndExceptionsWithTheIteration) {
  ActorHarness a("fail", "t", 1, Json{{"fail_at", 2}}, dir_.path());
  auto e = a.Train(5);
  EXPECT_FALSE(e.ok);
  ASSERT_EQ(e.results.size(), 1u);
  EXPECT_NE(e.error.find("step of iteration 2 failed"), std::string::npos) << e.error;
  // The actor stays alive.
  e = a.Save();
  EXPECT_TRUE(e.ok) << e.error;
  EXPECT_EQ(e.data["iteration"], 1);

  std::map<int64_t, Json> script = {{1, "throw"}, {2, "bad"}};
  ActorHarness b("scripted", std::make_unique<ScriptedTrainable>(script), "u", 1, Json::object(),
                 dir_.path());
  e = b.Train(3);
  EXPECT_FALSE(e.ok);
  EXPECT_EQ(e.error, "step of iteration 1 failed: exception: kaboom");
  ActorHarness c("fail", "v", 1, Json{{"fail_at", 1}, {"raise", true}}, dir_.path());
  e = c.Train();
  EXPECT_FALSE(e.ok);
  EXPECT_NE(e.error.find("exception: intentional failure at iteration 1"), std::string::npos);
  std::string log = ReadFile(dir_.path() + "/t/trial.log");
  EXPECT_NE(log.find("Failure: step of iteration 2 failed"), std::string::npos) << log;
  EXPECT_NE(log.find("created actor for trial t attempt 1"), std::string::npos) << log;
  EXPECT_NE(ReadFile(dir_.path() + "/u/trial.log").find("scripted setup"), std::string::npos);
}

TEST_F(ActorRunnerTest, RestoredRunIsBitIdenticalToAnUninterruptedOne) {
  Json config{{"lr", 0.07}, {"x0", 3.3}, {"target", 1.1}};
  ActorHarness full("quadratic", "q", 1, config, dir_.path());
  auto all = full.Train(10).results;
  ASSERT_EQ(all.size(), 10u);

  ActorHarness first("quadratic", "q", 2, config, dir_.path());
  ASSERT_EQ(first.Train(4).results.size(), 4u);
  auto saved = first.Save();
  ASSERT_TRUE(saved.ok);
  EXPECT_EQ(saved.data["iteration"], 4);
  EXPECT_EQ(saved.data["bytes"], saved.payload.size());
  EXPECT_EQ(saved.data["storage"], "persistent");
  auto env = DecodeEnvelope(saved.payload);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->trainable, "quadratic");
  EXPECT_EQ(env->iteration, 4);

  ActorHarness second("quadratic", "q", 3, config, dir_.path());
  auto restored = second.Restore(saved.payload);
  ASSERT_TRUE(restored.ok) << restored.error;
  EXPECT_EQ(restored.data["iteration"], 4);
  auto rest = second.Train(6).results;
  ASSERT_EQ(rest.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    const Json want = all[4 + i].ToJson();
    const Json got = rest[i].ToJson();
    EXPECT_EQ(got["training_iteration"], want["training_iteration"]);
    // Bit-identical, not merely close.
    EXPECT_EQ(got["x"].get<double>(), want["x"].get<double>()) << "iteration " << 5 + i;
    EXPECT_EQ(got["loss"].get<double>(), want["loss"].get<double>());
    EXPECT_EQ(got["iterations_since_restore"], i + 1);
  }
  const Json resumed = rest[0].ToJson();
  EXPECT_GE(resumed["time_total_s"].get<double>(), env->time_total_s);
  EXPECT_LT(resumed["time_since_restore"].get<double>(), resumed["time_total_s"].get<double>() + 1);
}

TEST_F(ActorRunnerTest, FailTrainablePassesFailAtAfterRestoreUnlessPersistent) {
  ActorHarness a("fail", "f", 1, Json{{"fail_at", 3}}, dir_.path());
  ASSERT_EQ(a.Train(2).results.size(), 2u);
  auto saved = a.Save();
  ASSERT_TRUE(saved.ok);
  auto e = a.Train();
  EXPECT_FALSE(e.ok);
  EXPECT_NE(e.error.find("step of iteration 3 failed"), std::string::npos);

  ActorHarness b("fail", "f", 2, Json{{"fail_at", 3}}, dir_.path());
  ASSERT_TRUE(b.Restore(saved.payload).ok);
  e = b.Train(3);
  EXPECT_TRUE(e.ok) << e.error;
  EXPECT_EQ(e.results.size(), 3u);

  ActorHarness c("fail", "f", 3, Json{{"fail_at", 3}, {"persistent", true}}, dir_.path());
  ASSERT_TRUE(c.Restore(saved.payload).ok);
  e = c.Train(3);
  EXPECT_FALSE(e.ok);
  EXPECT_TRUE(e.results.empty());
}

TEST_F(ActorRunnerTest, RejectsBadCheckpointsAndKeepsItsCounters) {
  ActorHarness a("quadratic", "r", 1, Json::object(), dir_.path());
  ASSERT_EQ(a.Train(2).results.size(), 2u);
  auto e = a.Restore("");
  EXPECT_FALSE(e.ok);
  EXPECT_NE(e.error.find("no checkpoint payload"), std::string::npos);
  e = a.Restore("garbage bytes");
  EXPECT_FALSE(e.ok);
  EXPECT_NE(e.error.find("magic"), std::string::npos) << e.error;

  CheckpointEnvelope other;
  other.trainable = "blob";
  other.iteration = 7;
  e = a.Restore(EncodeEnvelope(other));
  EXPECT_FALSE(e.ok);
  EXPECT_NE(e.error.find("trainable 'blob'"), std::string::npos) << e.error;

  CheckpointEnvelope bad_data;
  bad_data.trainable = "quadratic";
  bad_data.iteration = 7;
  bad_data.data = "short";
  e = a.Restore(EncodeEnvelope(bad_data));
  EXPECT_FALSE(e.ok);
  EXPECT_EQ(e.iteration, 2);

  auto next = a.Train();
  ASSERT_EQ(next.results.size(), 1u);
  EXPECT_EQ(next.results[0].ToJson()["training_iteration"], 3);
  EXPECT_EQ(next.results[0].ToJson()["iterations_since_restore"], 3);
}

TEST_F(ActorRunnerTest, BlobCheckpointsSurviveAnotherActor) {
  Json config{{"checkpoint_bytes", 100000}};
  ActorHarness a("blob", "b", 1, config, dir_.path());
  ASSERT_EQ(a.Train(3).results.size(), 3u);
  auto saved = a.Save();
  ASSERT_TRUE(saved.ok);
  ActorHarness b("blob", "b", 2, config, dir_.path());
  auto e = b.Restore(saved.payload);
  EXPECT_TRUE(e.ok) << e.error;
  auto next = b.Train();
  ASSERT_EQ(next.results.size(), 1u);
  EXPECT_DOUBLE_EQ(next.results[0].ToJson()["loss"].get<double>(), 0.25);
}

TEST_F(ActorRunnerTest, ResetRekeysAndZeroesCountersOrLeavesActorUnchanged) {
  ActorHarness a("quadratic", "old", 1, Json::object(), dir_.path());
  ASSERT_EQ(a.Train(2).results.size(), 2u);
  protocol::Reset reset{50, "old", 1, "new", 4, Json{{"x0", 2.0}}};
  auto e = a.Call(reset);
  ASSERT_TRUE(e.ok);
  EXPECT_EQ(e.data["reset"], true);
  ASSERT_TRUE(e.new_key.has_value());
  EXPECT_EQ(e.new_key->trial_id, "new");
  EXPECT_EQ(e.new_key->attempt, 4u);
  // The old key is fenced off.
  e = a.Train();
  EXPECT_FALSE(e.ok);
  EXPECT_EQ(e.error, "no actor for trial old attempt 1 on worker test-worker");
  a.SetKey("new", 4);
  e = a.Train();
  ASSERT_EQ(e.results.size(), 1u);
  EXPECT_EQ(e.results[0].ToJson()["training_iteration"], 1);
  EXPECT_EQ(e.results[0].ToJson()["trial_id"], "new");
  EXPECT_DOUBLE_EQ(e.results[0].ToJson()["x"].get<double>(), 1.6);
  EXPECT_NE(ReadFile(dir_.path() + "/new/trial.log").find("actor reused from trial old"),
            std::string::npos);

  ActorHarness f("fail", "f", 1, Json{{"fail_at", 100}}, dir_.path());
  ASSERT_EQ(f.Train().results.size(), 1u);
  e = f.Call(protocol::Reset{51, "f", 1, "g", 1, Json::object()});
  ASSERT_TRUE(e.ok);
  EXPECT_EQ(e.data["reset"], false);
  EXPECT_FALSE(e.new_key.has_value());
  e = f.Train();
  ASSERT_EQ(e.results.size(), 1u);
  EXPECT_EQ(e.results[0].ToJson()["training_iteration"], 2);
}

TEST_F(ActorRunnerTest, ExportsThroughTheTrainable) {
  ActorHarness a("quadratic", "x", 1, Json::object(), dir_.path());
  ASSERT_EQ(a.Train().results.size(), 1u);
  auto e = a.Call(protocol::Export{60, "x", 1, {"json"}});
  ASSERT_TRUE(e.ok) << e.error;
  EXPECT_TRUE(e.data["exports"]["json"].is_string());
  e = a.Call(protocol::Export{61, "x", 1, {"pmml"}});
  EXPECT_FALSE(e.ok);
  EXPECT_NE(e.error.find("pmml"), std::string::npos);
}

TEST_F(ActorRunnerTest, SetupFailureEndsTheActorWithTheKeyNamed) {
  ActorHarness a("quadratic", "s", 1, Json{{"lr", "x"}}, dir_.path());
  EXPECT_FALSE(a.setup().ok);
  EXPECT_TRUE(a.setup().exited);
  EXPECT_NE(a.setup().error.find("'lr'"), std::string::npos) << a.setup().error;
  EXPECT_NE(ReadFile(dir_.path() + "/s/trial.log").find("Failure: setup"), std::string::npos);
}

TEST_F(ActorRunnerTest, StopRunsCleanupAndEndsTheThread) {
  ActorHarness a("noop", "n", 1, Json::object(), dir_.path());
  auto e = a.Call(protocol::Stop{70, "n", 1, 1000});
  EXPECT_TRUE(e.ok);
  EXPECT_TRUE(e.exited);
  EXPECT_NE(ReadFile(dir_.path() + "/n/trial.log").find("stopped at iteration 0"),
            std::string::npos);
}

// Records the thread each call runs on; inline when asked to be.
class ThreadRecordingTrainable : public Trainable {
 public:
  ThreadRecordingTrainable(bool runs_inline, std::vector<std::thread::id>* threads)
      : inline_(runs_inline), threads_(threads) {}
  Status Setup(const Json&, const TrialContext&) override { return Record(); }
  Result<Json> Step(const TrialContext&) override {
    RETURN_IF_ERROR(Record());
    return Json::object();
  }
  Result<std::string> Save(const TrialContext&) override {
    RETURN_IF_ERROR(Record());
    return std::string("s");
  }
  Status Restore(std::string_view, const TrialContext&) override { return Record(); }
  void Cleanup() override { Record().IgnoreError(); }
  bool RunsInline(const Json&) const override { return inline_; }

 private:
  Status Record() {
    threads_->push_back(std::this_thread::get_id());
    return Status::Ok();
  }
  bool inline_;
  std::vector<std::thread::id>* threads_;
};

TEST_F(ActorRunnerTest, AnInlineActorRunsEveryCallOnTheCallerAndAThreadedOneNever) {
  for (bool runs_inline : {true, false}) {
    SCOPED_TRACE(runs_inline ? "inline" : "threaded");
    std::vector<std::thread::id> threads;
    {
      ActorHarness a("rec", std::make_unique<ThreadRecordingTrainable>(runs_inline, &threads), "r",
                     1, Json::object(), dir_.path());
      EXPECT_EQ(a.runner().runs_inline(), runs_inline);
      EXPECT_EQ(a.runs_on_caller(), runs_inline);
      ASSERT_TRUE(a.setup().ok);
      ASSERT_EQ(a.Train(3).results.size(), 3u);
      ASSERT_TRUE(a.Save().ok);
      auto stop = a.Call(protocol::Stop{9, "r", 1, 1000});
      ASSERT_TRUE(stop.exited);
    }
    ASSERT_EQ(threads.size(), 6u);  // setup, 3 steps, save, cleanup
    for (const auto& id : threads) {
      EXPECT_EQ(id == std::this_thread::get_id(), runs_inline);
      EXPECT_EQ(id, threads.front()) << "one thread for all of an actor's calls";
    }
  }
}

TEST_F(ActorRunnerTest, RunQueuedInlineExecutesInOrderAndNothingAfterTheExit) {
  protocol::CreateActor create;
  create.rid = 1;
  create.trial_id = "q";
  create.attempt = 1;
  create.trainable = "noop";
  HostInfo host{"test-worker", "test-host", 4242, dir_.path()};
  TrainableRegistry registry;
  RegisterBuiltinTrainables(registry);
  auto events = std::make_shared<EventQueue>();
  ActorRunner runner(1, create, std::move(registry.Create("noop")).value(), host, events);
  ASSERT_TRUE(runner.runs_inline());
  runner.Enqueue(protocol::Message{protocol::Train{2, "q", 1, 1, 60}, {}});
  runner.Enqueue(protocol::Message{protocol::Stop{3, "q", 1, 1000}, {}});
  runner.Enqueue(protocol::Message{protocol::Train{4, "q", 1, 1, 60}, {}});
  std::vector<RunnerEvent> out = runner.RunQueuedInline();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].kind, CommandKind::kSetup);
  EXPECT_EQ(out[1].kind, CommandKind::kTrain);
  EXPECT_EQ(out[1].results.size(), 1u);
  EXPECT_EQ(out[2].kind, CommandKind::kStop);
  EXPECT_TRUE(out[2].exited);
  for (const auto& e : out) EXPECT_EQ(e.actor_serial, 1u);
  EXPECT_TRUE(runner.RunQueuedInline().empty()) << "an ended actor runs nothing more";
  EXPECT_TRUE(events->Drain().empty()) << "inline events are returned, not queued";
}

// Quadratic runs inline unless it sleeps per step; an inline actor cannot
// take a config that sleeps (it has no thread to sleep on), a threaded one can.
TEST_F(ActorRunnerTest, QuadraticIsInlineUnlessItSleepsAndAnInlineActorRefusesToStartSleeping) {
  ActorHarness sleepy("quadratic", "s", 1, Json{{"step_sleep_s", 0.001}}, dir_.path());
  EXPECT_FALSE(sleepy.runner().runs_inline());
  ActorHarness a("quadratic", "a", 1, Json{{"step_sleep_s", 0}}, dir_.path());
  ASSERT_TRUE(a.runner().runs_inline());
  ASSERT_EQ(a.Train().results.size(), 1u);
  auto e = a.Call(protocol::Reset{50, "a", 1, "b", 1, Json{{"step_sleep_s", 0.5}}});
  ASSERT_TRUE(e.ok);
  EXPECT_EQ(e.data["reset"], false);
  EXPECT_NE(ReadFile(dir_.path() + "/a/trial.log").find("runs inline"), std::string::npos);
  e = a.Train();
  ASSERT_EQ(e.results.size(), 1u) << "the actor is unchanged";
  EXPECT_EQ(e.results[0].ToJson()["training_iteration"], 2);
  e = sleepy.Call(protocol::Reset{51, "s", 1, "t", 1, Json{{"step_sleep_s", 0.5}}});
  EXPECT_EQ(e.data["reset"], true);
  sleepy.SetKey("t", 1);
}

// The same actor on a thread and inline: identical values.
TEST_F(ActorRunnerTest, InlineAndThreadedActorsComputeTheSame) {
  ActorHarness on_thread("quadratic", "t", 1, Json{{"lr", 0.3}}, dir_.path(),
                         ActorHarness::Mode::kThread);
  ActorHarness on_caller("quadratic", "c", 1, Json{{"lr", 0.3}}, dir_.path());
  ASSERT_FALSE(on_thread.runs_on_caller());
  ASSERT_TRUE(on_caller.runs_on_caller());
  for (int i = 0; i < 3; ++i) {
    auto x = on_thread.Train(2);
    auto y = on_caller.Train(2);
    ASSERT_EQ(x.results.size(), 2u);
    ASSERT_EQ(y.results.size(), 2u);
    for (size_t j = 0; j < 2; ++j) {
      EXPECT_EQ(x.results[j].ToJson()["training_iteration"],
                y.results[j].ToJson()["training_iteration"]);
      EXPECT_EQ(x.results[j].ToJson()["loss"], y.results[j].ToJson()["loss"]);
    }
  }
  auto saved = on_thread.Save();
  ASSERT_TRUE(saved.ok);
  auto restored = on_caller.Restore(saved.payload);
  ASSERT_TRUE(restored.ok) << restored.error;
  EXPECT_EQ(on_caller.Train().results[0].ToJson()["training_iteration"], 7);
}

TEST_F(ActorRunnerTest, SanitizesTrialIdsForPaths) {
  EXPECT_EQ(SanitizeForPath("trial_1-a.b"), "trial_1-a.b");
  EXPECT_EQ(SanitizeForPath("../etc/passwd"), ".._etc_passwd");
  EXPECT_EQ(SanitizeForPath(".."), "_");
  EXPECT_EQ(SanitizeForPath(""), "_");
}

}  // namespace
}  // namespace ztune::worker
