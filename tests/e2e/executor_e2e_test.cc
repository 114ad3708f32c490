// Executor features through the real binaries: force cleanup of a hung actor,
// graceful stop, actor reuse (and its refusal), pause/resume from the CLI, a
// killed worker, a multi-bundle SPREAD request, and TRAINs of long steps inside
// ACKs. One small cluster per test, 50 ms heartbeats, everything observed
// through `ztune ... --json` and the workers' per-trial logs.
#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/cluster.h"
#include "tests/e2e/trial_queries.h"

namespace ztune::e2e {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// SubmitSpec under a fresh file name.
std::string Submit(LocalCluster& cluster, const std::string& spec) {
  static int n = 0;
  return SubmitSpec(cluster, spec, "spec-" + std::to_string(n++));
}

// One `sleep` trial of 0.05 s steps that stops at `iterations`.
std::string SubmitSleepTrial(LocalCluster& cluster, int iterations) {
  return Submit(cluster, R"({"trainable": "sleep", "param_space": {"sleep_s": 0.05},
      "stop": {"training_iteration": )" +
                             std::to_string(iterations) + "}}");
}

std::string TrialLog(const LocalCluster& cluster, const std::string& worker,
                     const std::string& trial_id) {
  return ReadFile(cluster.dir() + "/work-" + worker + "/" + trial_id + "/trial.log");
}

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

std::string LastLine(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return t.substr(t.rfind('\n') == std::string::npos ? 0 : t.rfind('\n') + 1);
}

// stop of a trial whose step hangs -> its worker kills the actor at the
// experiment's force_cleanup_s deadline -> the CPU comes back (the next trial
// starts ~1 s after the stop, not 30 s) -> that trial runs to TERMINATED.
TEST(ExecutorE2ETest, ForceCleanupKillsAHungActorAtTheDeadline) {
  LocalCluster cluster("force-cleanup");
  ASSERT_TRUE(cluster.StartHeadAndWorkers({"a"}, 1)) << cluster.Logs();

  // Trial 0 sleeps 30 s per step (hangs); trial 1 is quick and waits for the CPU.
  std::string exp = Submit(cluster, R"({"trainable": "sleep",
      "param_space": {"sleep_s": {"grid_search": [30, 0.01]}},
      "stop": {"training_iteration": 3}, "force_cleanup_s": 1})");
  ASSERT_FALSE(exp.empty());
  const std::string hung = TrialId(exp, 0), next = TrialId(exp, 1);

  // Running, set up, and inside its first step.
  ASSERT_TRUE(WaitFor([&] {
    return StatusOf(GetTrial(cluster, hung)) == "RUNNING" &&
           Contains(TrialLog(cluster, "a", hung), "created actor");
  }, seconds(10))) << cluster.Logs();
  EXPECT_EQ(StatusOf(GetTrial(cluster, next)), "PENDING");

  auto t0 = Clock::now();
  auto r = cluster.Cli("stop " + hung, /*stdout_only=*/true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, hung + "\n");
  // The only CPU is free once the next trial gets it.
  ASSERT_TRUE(WaitFor([&] { return StatusOf(GetTrial(cluster, next)) != "PENDING"; }, seconds(10)))
      << cluster.Logs();
  double released_after = SecondsSince(t0);
  EXPECT_GE(released_after, 0.8) << "the hung actor's CPU came back before its kill deadline";
  EXPECT_LE(released_after, 3.0) << cluster.Logs();

  ASSERT_TRUE(WaitFinished(cluster, exp)) << cluster.Logs();
  Json h = GetTrial(cluster, hung);
  EXPECT_EQ(StatusOf(h), "TERMINATED");
  EXPECT_EQ(IterationOf(h), 0);
  EXPECT_EQ(h["num_failures"], 0);
  Json n = GetTrial(cluster, next);
  EXPECT_EQ(StatusOf(n), "TERMINATED");
  EXPECT_EQ(IterationOf(n), 3);
  ExpectResultsOneToN(cluster, next, 3);

  std::string log = TrialLog(cluster, "a", hung);
  EXPECT_TRUE(Contains(log, "actor did not stop within 1000 ms; killed")) << log;
  EXPECT_FALSE(Contains(log, "stopped at iteration")) << log;

  auto workers = Workers(cluster);
  ASSERT_EQ(workers.count("a"), 1u);
  EXPECT_EQ(AvailableCpu(workers["a"]), 1.0);
  EXPECT_EQ(workers["a"]["actors"], 0);
  Json status = cluster.CliJson("status " + exp);
  EXPECT_EQ(status["resources"]["used"]["CPU"], 0);
  std::cerr << "[ force cleanup: CPU back " << released_after << " s after the stop ]\n";
}

// stop of a trial whose steps are short -> the actor stops after its current
// step, far before the (default, 600 s) kill deadline -> CPU back at once.
TEST(ExecutorE2ETest, GracefulStopReleasesResourcesQuickly) {
  LocalCluster cluster("graceful-stop");
  ASSERT_TRUE(cluster.StartHeadAndWorkers({"a"}, 1)) << cluster.Logs();

  const std::string exp = SubmitSleepTrial(cluster, 1000);
  ASSERT_FALSE(exp.empty());
  const std::string id = TrialId(exp, 0);
  ASSERT_TRUE(WaitRunningAt(cluster, id, 2)) << cluster.Logs();
  EXPECT_EQ(AvailableCpu(Workers(cluster)["a"]), 0.0);

  auto t0 = Clock::now();
  ASSERT_EQ(cluster.Cli("stop " + id).exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return AvailableCpu(Workers(cluster)["a"]) == 1.0; }, seconds(5)))
      << cluster.Logs();
  double released_after = SecondsSince(t0);
  EXPECT_LT(released_after, 1.0) << cluster.Logs();

  Json t = GetTrial(cluster, id);
  EXPECT_EQ(StatusOf(t), "TERMINATED");
  EXPECT_EQ(t["num_failures"], 0);
  ExpectResultsOneToN(cluster, id, IterationOf(t));
  EXPECT_EQ(cluster.CliJson("status " + exp)["resources"]["used"]["CPU"], 0);
  ASSERT_TRUE(WaitFor([&] {
    return Contains(TrialLog(cluster, "a", id), "stopped at iteration");
  }, seconds(5)));
  EXPECT_FALSE(Contains(TrialLog(cluster, "a", id), "killed"));
  std::cerr << "[ graceful stop: CPU back " << released_after << " s after the stop ]\n";
}

// reuse_actors, 4 trials on one 1-CPU worker -> one actor is created and RESET
// into each next trial -> every trial TERMINATED with results 1..3 once, and
// each trial's log file holds that trial's lines.
TEST(ExecutorE2ETest, ReuseActorsResetsOneActorForEveryTrial) {
  LocalCluster cluster("reuse");
  ASSERT_TRUE(cluster.StartHeadAndWorkers({"a"}, 1)) << cluster.Logs();

  std::string exp = Submit(cluster, R"({"trainable": "sleep", "param_space": {"sleep_s": 0.01},
      "num_samples": 4, "stop": {"training_iteration": 3}, "reuse_actors": true})");
  ASSERT_FALSE(exp.empty());
  ASSERT_TRUE(WaitFinished(cluster, exp)) << cluster.Logs();

  std::string all_logs;
  for (int k = 0; k < 4; ++k) {
    const std::string id = TrialId(exp, k);
    Json t = GetTrial(cluster, id);
    EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
    EXPECT_EQ(t["num_failures"], 0);
    ExpectResultsOneToN(cluster, id, 3);

    std::string log = TrialLog(cluster, "a", id);
    all_logs += log;
    SCOPED_TRACE(id + " log:\n" + log);
    if (k == 0) {
      EXPECT_TRUE(Contains(log, "created actor for trial " + id + " attempt 1 (trainable sleep)"));
    } else {
      // The first line of a reused actor's log is in the new trial's file.
      EXPECT_TRUE(Contains(log, "actor reused from trial " + TrialId(exp, k - 1) +
                                    " attempt 1 (trainable sleep)"));
      EXPECT_FALSE(Contains(log, "created actor"));
    }
    if (k < 3) {
      // The handover is the old trial's last line; nothing of the next trial follows it.
      EXPECT_TRUE(Contains(log, "actor reset: now serves trial " + TrialId(exp, k + 1) +
                                    " attempt 1"));
      EXPECT_FALSE(Contains(log, "stopped at iteration"));
      EXPECT_TRUE(Contains(LastLine(log), "actor reset: now serves"));
    } else {
      EXPECT_FALSE(Contains(log, "actor reset"));
      EXPECT_TRUE(Contains(log, "stopped at iteration 3"));
    }
    EXPECT_FALSE(Contains(log, "Failure"));
  }
  EXPECT_EQ(Count(all_logs, "created actor"), 1u) << all_logs;
  EXPECT_EQ(Count(all_logs, "actor reused from"), 3u) << all_logs;
  EXPECT_EQ(AvailableCpu(Workers(cluster)["a"]), 1.0);
}

// reuse_actors with a trainable that cannot reset (`fail`) -> the second trial,
// handed the first one's actor, ends in ERROR naming reset_config().
TEST(ExecutorE2ETest, ReuseWithoutResetSupportIsATrialError) {
  LocalCluster cluster("reuse-no-reset");
  ASSERT_TRUE(cluster.StartHeadAndWorkers({"a"}, 1)) << cluster.Logs();

  std::string exp = Submit(cluster, R"({"trainable": "fail", "param_space": {"fail_at": 1000},
      "num_samples": 2, "stop": {"training_iteration": 2}, "reuse_actors": true})");
  ASSERT_FALSE(exp.empty());
  ASSERT_TRUE(WaitFinished(cluster, exp)) << cluster.Logs();

  Json first = GetTrial(cluster, TrialId(exp, 0));
  EXPECT_EQ(StatusOf(first), "TERMINATED") << first.dump();
  ExpectResultsOneToN(cluster, TrialId(exp, 0), 2);
  Json second = GetTrial(cluster, TrialId(exp, 1));
  EXPECT_EQ(StatusOf(second), "ERROR") << second.dump();
  ASSERT_TRUE(second["error"].is_string()) << second.dump();
  EXPECT_TRUE(Contains(second["error"].get<std::string>(), "reuse requires reset_config()"))
      << second["error"];
  EXPECT_EQ(IterationOf(second), 0);
  // The refused actor is stopped, and the CPU comes back.
  ASSERT_TRUE(WaitFor([&] { return AvailableCpu(Workers(cluster)["a"]) == 1.0; }, seconds(5)))
      << cluster.Logs();
  EXPECT_TRUE(WaitFor([&] {
    return Contains(TrialLog(cluster, "a", TrialId(exp, 0)), "stopped at iteration 2");
  }, seconds(5))) << TrialLog(cluster, "a", TrialId(exp, 0));
}

// pause from the CLI -> PAUSED, CPU free, no progress -> resume -> runs on from
// the memory checkpoint to TERMINATED with iterations 1..40 exactly once.
TEST(ExecutorE2ETest, PauseAndResumeFromTheCli) {
  LocalCluster cluster("pause-resume");
  ASSERT_TRUE(cluster.StartHeadAndWorkers({"a"}, 1)) << cluster.Logs();

  const std::string exp = SubmitSleepTrial(cluster, 40);
  ASSERT_FALSE(exp.empty());
  const std::string id = TrialId(exp, 0);
  ASSERT_TRUE(WaitRunningAt(cluster, id, 3)) << cluster.Logs();

  auto r = cluster.Cli("pause " + id);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_TRUE(WaitFor([&] { return StatusOf(GetTrial(cluster, id)) == "PAUSED"; }, seconds(5)))
      << cluster.Logs();
  ASSERT_TRUE(WaitFor([&] { return AvailableCpu(Workers(cluster)["a"]) == 1.0; }, seconds(3)))
      << cluster.Logs();
  Json paused = GetTrial(cluster, id);
  EXPECT_EQ(paused["held"], true);
  EXPECT_TRUE(paused["worker"].is_null()) << paused.dump();
  const int64_t at_pause = IterationOf(paused);
  EXPECT_GE(at_pause, 3);
  EXPECT_LT(at_pause, 40);
  std::this_thread::sleep_for(milliseconds(300));
  Json still = GetTrial(cluster, id);
  EXPECT_EQ(StatusOf(still), "PAUSED");
  EXPECT_EQ(IterationOf(still), at_pause);
  EXPECT_EQ(cluster.CliJson("results " + id)["results"].size(), static_cast<size_t>(at_pause));

  r = cluster.Cli("resume " + id);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_TRUE(WaitFinished(cluster, exp)) << cluster.Logs();
  Json done = GetTrial(cluster, id);
  EXPECT_EQ(StatusOf(done), "TERMINATED");
  EXPECT_EQ(IterationOf(done), 40);
  EXPECT_EQ(done["num_restores"], 1);
  EXPECT_EQ(done["num_failures"], 0);
  EXPECT_EQ(done["held"], false);
  ExpectResultsOneToN(cluster, id, 40);

  std::string log = TrialLog(cluster, "a", id);
  EXPECT_TRUE(Contains(log, "saved checkpoint at iteration " + std::to_string(at_pause))) << log;
  EXPECT_TRUE(Contains(log, "restored from checkpoint at iteration " + std::to_string(at_pause)))
      << log;
  EXPECT_EQ(Count(log, "created actor"), 2u) << log;

  r = cluster.Cli("resume " + id);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Contains(r.out, "error: FailedPrecondition")) << r.out;
  r = cluster.Cli("pause " + id);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(AvailableCpu(Workers(cluster)["a"]), 1.0);
}

// A 64 MiB checkpoint each way with 300 ms liveness: saved at the end of one
// trial (worker -> head in chunks), then restored into a new trial started
// from it (head -> worker in chunks, its first TRAIN waiting behind the
// payload). Heartbeats keep flowing through both transfers and through the
// head's commit of the checkpoint: nobody is declared dead, nothing retried.
TEST(ExecutorE2ETest, LargeCheckpointsTravelInChunksAndHeartbeatsKeepFlowing) {
  LocalCluster cluster("large-checkpoint");
  ASSERT_TRUE(cluster.StartHeadAndWorkers({"a"}, 1)) << cluster.Logs();
  const char* kConfig = R"({"checkpoint_bytes": 67108864})";
  std::string exp = Submit(cluster, std::string(R"({"trainable": "blob", "param_space": )") +
                                        kConfig + R"(, "stop": {"training_iteration": 2},
      "checkpoint": {"at_end": true}})");
  ASSERT_FALSE(exp.empty());
  const std::string first = TrialId(exp, 0);
  ASSERT_TRUE(WaitFinished(cluster, exp, 60)) << cluster.Logs();
  Json t0 = GetTrial(cluster, first);
  ASSERT_EQ(StatusOf(t0), "TERMINATED") << t0.dump();
  ASSERT_EQ(t0["checkpoints"].size(), 1u) << t0.dump();

  // A finished experiment takes no new trial: the new one goes into a second
  // experiment kept waiting (unfinished) by a blocker that holds the CPU.
  std::string blocker = Submit(cluster, R"({"trainable": "sleep", "param_space": {"sleep_s": 0.05},
      "stop": {"training_iteration": 100000}})");
  ASSERT_FALSE(blocker.empty());
  ASSERT_TRUE(WaitFor([&] { return StatusOf(GetTrial(cluster, TrialId(blocker, 0))) == "RUNNING"; },
                      seconds(10))) << cluster.Logs();
  std::string exp2 = Submit(cluster, std::string(R"({"trainable": "blob", "param_space": )") +
                                         kConfig + R"(, "stop": {"training_iteration": 3}})");
  ASSERT_FALSE(exp2.empty());
  auto r = cluster.Cli("add-trial " + exp2 + " '" + kConfig + "' --restore-from " + first);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string second = TrialId(exp2, 1);
  r = cluster.Cli("stop " + blocker);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_TRUE(WaitFinished(cluster, exp2, 60)) << cluster.Logs();
  Json t1 = GetTrial(cluster, second);
  EXPECT_EQ(StatusOf(t1), "TERMINATED") << t1.dump();
  EXPECT_EQ(IterationOf(t1), 3) << t1.dump();
  EXPECT_EQ(t1["num_restores"], 1) << t1.dump();
  EXPECT_EQ(t1["num_failures"], 0) << t1.dump();
  EXPECT_EQ(t0["num_failures"], 0) << t0.dump();
  // Restored at iteration 2: its own results start at 3.
  Json results = cluster.CliJson("results " + second);
  ASSERT_EQ(results["results"].size(), 1u) << results.dump();
  EXPECT_EQ(results["results"][0]["training_iteration"], 3);
  std::string log = TrialLog(cluster, "a", second);
  EXPECT_TRUE(Contains(log, "restored from checkpoint at iteration 2")) << log;

  const std::string head_log = ReadFile(cluster.head_log());
  EXPECT_FALSE(Contains(head_log, "no heartbeat")) << cluster.Logs();
  const std::string worker_log = ReadFile(cluster.dir() + "/logs/worker-a.log");
  EXPECT_TRUE(Contains(worker_log, "sending 67108")) << "the SAVE did not go in chunks";
  EXPECT_TRUE(Contains(worker_log, "receiving 67108")) << "the RESTORE did not go in chunks";
  EXPECT_FALSE(Contains(worker_log, "head silent")) << cluster.Logs();
  EXPECT_EQ(Count(worker_log, "REGISTER worker"), 1u) << cluster.Logs();
}

// Two `sleep` trials (0.05 s steps, stop at 60, checkpoints every 5,
// max_failures 1) on workers a and b, one each, both past iteration 6.
struct TwoTrialRun {
  std::string exp, victim, survivor, a_id;  // victim runs on a
};

bool StartTwoTrialRun(LocalCluster& cluster, TwoTrialRun& run) {
  cluster.StartHead();
  cluster.StartWorker("a", 1);
  cluster.StartWorker("b", 1);
  if (!cluster.WaitForWorkers(2)) return false;
  run.a_id = Workers(cluster)["a"]["worker_id"].get<std::string>();
  run.exp = Submit(cluster, R"({"trainable": "sleep", "param_space": {"sleep_s": 0.05},
      "num_samples": 2, "stop": {"training_iteration": 60},
      "checkpoint": {"frequency": 5}, "max_failures": 1})");
  if (run.exp.empty()) return false;
  const std::string& exp = run.exp;
  return WaitFor([&] {
    Json t0 = GetTrial(cluster, TrialId(exp, 0)), t1 = GetTrial(cluster, TrialId(exp, 1));
    if (StatusOf(t0) != "RUNNING" || StatusOf(t1) != "RUNNING") return false;
    if (IterationOf(t0) < 6 || IterationOf(t1) < 6) return false;
    run.victim = t0["worker"] == "a" ? TrialId(exp, 0) : TrialId(exp, 1);
    run.survivor = run.victim == TrialId(exp, 0) ? TrialId(exp, 1) : TrialId(exp, 0);
    return true;
  }, seconds(10));
}

// kill -9 of a worker with a running trial -> the head notices within the
// liveness window -> the trial is retried on the other worker from its newest
// persistent checkpoint -> both TERMINATED, results 1..60 exactly once.
TEST(ExecutorE2ETest, KilledWorkerTrialRetriesElsewhereFromItsCheckpoint) {
  LocalCluster cluster("worker-killed");
  TwoTrialRun run;
  ASSERT_TRUE(StartTwoTrialRun(cluster, run)) << cluster.Logs();
  const std::string &exp = run.exp, &victim = run.victim, &survivor = run.survivor;
  const std::string& dead_id = run.a_id;
  Json workers;
  ASSERT_EQ(GetTrial(cluster, victim)["worker"], "a");
  ASSERT_EQ(GetTrial(cluster, survivor)["worker"], "b");

  auto t0 = Clock::now();
  cluster.worker(0).Kill(SIGKILL);
  ASSERT_TRUE(WaitFor([&] { return GetTrial(cluster, victim)["num_failures"] == 1; }, seconds(5)))
      << cluster.Logs();
  double noticed_after = SecondsSince(t0);
  EXPECT_LT(noticed_after, 1.5) << "liveness window is 300 ms";

  ASSERT_TRUE(WaitFinished(cluster, exp)) << cluster.Logs();
  Json v = GetTrial(cluster, victim);
  EXPECT_EQ(StatusOf(v), "TERMINATED") << v.dump();
  EXPECT_EQ(v["num_failures"], 1);
  EXPECT_EQ(v["num_restores"], 1);
  EXPECT_EQ(IterationOf(v), 60);
  ASSERT_TRUE(v["error"].is_string()) << v.dump();
  EXPECT_TRUE(Contains(v["error"].get<std::string>(), dead_id)) << v["error"];
  ExpectResultsOneToN(cluster, victim, 60);
  Json s = GetTrial(cluster, survivor);
  EXPECT_EQ(StatusOf(s), "TERMINATED");
  EXPECT_EQ(s["num_failures"], 0);
  ExpectResultsOneToN(cluster, survivor, 60);

  // The retry ran on b, restored from a persistent checkpoint (a multiple of 5).
  std::string log = TrialLog(cluster, "b", victim);
  auto p = log.find("restored from checkpoint at iteration ");
  ASSERT_NE(p, std::string::npos) << log;
  int64_t restored_at = std::stoll(log.substr(p + 38));
  EXPECT_GE(restored_at, 5) << log;
  EXPECT_EQ(restored_at % 5, 0) << log;

  workers = Workers(cluster);
  EXPECT_EQ(workers["a"]["alive"], false);
  EXPECT_EQ(workers["b"]["alive"], true);
  EXPECT_EQ(AvailableCpu(workers["b"]), 1.0);
  Json status = cluster.CliJson("status " + exp);
  EXPECT_EQ(status["resources"]["used"]["CPU"], 0);
  EXPECT_EQ(status["resources"]["total"]["CPU"], 1);
  std::cerr << "[ worker death noticed " << noticed_after << " s after kill -9; restored at "
            << restored_at << " ]\n";
}

// SIGSTOP of a worker (its connection stays up, only heartbeats stop) -> the
// head declares it dead after the liveness window (6 x 50 ms) -> its trial is
// retried on the other worker -> SIGCONT: the worker re-registers, its stale
// actor is stopped and its late results are fenced -> results 1..60 once.
TEST(ExecutorE2ETest, FrozenWorkerIsDeclaredDeadByHeartbeatAndFencedOnReturn) {
  LocalCluster cluster("worker-frozen");
  TwoTrialRun run;
  ASSERT_TRUE(StartTwoTrialRun(cluster, run)) << cluster.Logs();
  const std::string &exp = run.exp, &victim = run.victim, &survivor = run.survivor;
  const std::string& frozen_id = run.a_id;
  ASSERT_EQ(GetTrial(cluster, victim)["worker"], "a");

  auto t0 = Clock::now();
  cluster.worker(0).Signal(SIGSTOP);
  ASSERT_TRUE(WaitFor([&] { return GetTrial(cluster, victim)["num_failures"] == 1; }, seconds(5)))
      << cluster.Logs();
  double noticed_after = SecondsSince(t0);
  cluster.worker(0).Signal(SIGCONT);
  EXPECT_GE(noticed_after, 0.2) << "declared dead before the liveness window passed";
  EXPECT_LT(noticed_after, 1.5) << cluster.Logs();
  Json v = GetTrial(cluster, victim);
  ASSERT_TRUE(v["error"].is_string()) << v.dump();
  EXPECT_TRUE(Contains(v["error"].get<std::string>(), frozen_id)) << v["error"];
  EXPECT_TRUE(Contains(v["error"].get<std::string>(), "no heartbeat")) << v["error"];

  // Back from SIGCONT, the worker registers again.
  ASSERT_TRUE(cluster.WaitForWorkers(2)) << cluster.Logs();
  ASSERT_TRUE(WaitFinished(cluster, exp)) << cluster.Logs();
  v = GetTrial(cluster, victim);
  EXPECT_EQ(StatusOf(v), "TERMINATED") << v.dump();
  EXPECT_EQ(v["num_failures"], 1);
  EXPECT_EQ(IterationOf(v), 60);
  ExpectResultsOneToN(cluster, victim, 60);
  Json s = GetTrial(cluster, survivor);
  EXPECT_EQ(StatusOf(s), "TERMINATED");
  EXPECT_EQ(s["num_failures"], 0);
  ExpectResultsOneToN(cluster, survivor, 60);

  // Every actor a hosted for the victim (the stale attempt 1, and attempt 2 if
  // the retry landed on a again) is stopped, and both ledgers end full.
  EXPECT_TRUE(WaitFor([&] {
    std::string log = TrialLog(cluster, "a", victim);
    return Count(log, "created actor") >= 1 &&
           Count(log, "stopped at iteration") == Count(log, "created actor");
  }, seconds(5))) << TrialLog(cluster, "a", victim) << cluster.Logs();
  ASSERT_TRUE(WaitFor([&] {
    auto w = Workers(cluster);
    return w.size() == 2 && AvailableCpu(w["a"]) == 1.0 && AvailableCpu(w["b"]) == 1.0 &&
           w["a"]["actors"] == 0 && w["b"]["actors"] == 0;
  }, seconds(5))) << cluster.CliJson("workers").dump(2) << cluster.Logs();
  EXPECT_EQ(cluster.CliJson("status " + exp)["resources"]["used"]["CPU"], 0);
  std::cerr << "[ frozen worker declared dead " << noticed_after << " s after SIGSTOP ]\n";
}

// --train-with-ack-ms below the steps -> after each result the head holds
// the trial's next TRAIN for the commit and sends it inside its ACK, which
// the worker runs -> both trials TERMINATED with iterations 1..8 once, and
// head-stats counts the TRAINs that went inside ACKs: 7 per trial (those
// after results 1 to 7), and at most the first TRAIN of each besides.
TEST(ExecutorE2ETest, TrainsOfLongStepsGoInsideTheAcks) {
  LocalCluster cluster("ack-trains");
  cluster.StartHead({"--train-with-ack-ms", "5"});
  cluster.StartWorker("a", 2);
  ASSERT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();
  // Steps of 20 ms: every TRAIN's round trip is at least 4 x the threshold.
  const std::string exp = Submit(cluster, R"({"trainable": "sleep", "num_samples": 2,
      "param_space": {"sleep_s": 0.02}, "stop": {"training_iteration": 8}})");
  ASSERT_FALSE(exp.empty()) << cluster.Logs();
  ASSERT_TRUE(WaitFinished(cluster, exp)) << cluster.Logs();
  for (int k = 0; k < 2; ++k) {
    const std::string id = TrialId(exp, k);
    Json t = GetTrial(cluster, id);
    EXPECT_EQ(StatusOf(t), "TERMINATED") << cluster.Logs();
    ExpectResultsOneToN(cluster, id, 8);
  }
  const Json stats = cluster.CliJson("head-stats");
  ASSERT_TRUE(stats.is_object()) << cluster.Logs();
  const int64_t in_acks = stats["head"]["trains_in_acks"].get<int64_t>();
  EXPECT_GE(in_acks, 14) << stats.dump();
  EXPECT_LE(in_acks, 16) << stats.dump();
}

// 4 x {CPU: 1} SPREAD on 4 one-CPU workers -> the first trial holds every
// worker's CPU, the second waits PENDING until it ends -> both finish.
TEST(ExecutorE2ETest, SpreadBundlesTakeEveryWorkerAndTheNextTrialWaits) {
  LocalCluster cluster("spread");
  cluster.StartHead();
  for (const char* name : {"a", "b", "c", "d"}) cluster.StartWorker(name, 1);
  ASSERT_TRUE(cluster.WaitForWorkers(4)) << cluster.Logs();

  // 0.2 s steps (not shorter): each trial runs ~1 s so that polling sees it.
  std::string exp = Submit(cluster, R"({"trainable": "sleep", "param_space": {"sleep_s": 0.2},
      "num_samples": 2, "stop": {"training_iteration": 5},
      "resources": {"bundles": [{"CPU": 1}, {"CPU": 1}, {"CPU": 1}, {"CPU": 1}],
                    "strategy": "SPREAD"}})");
  ASSERT_FALSE(exp.empty());
  const std::string first = TrialId(exp, 0), second = TrialId(exp, 1);

  // One `trials` call is one snapshot of both trials (the head answers it in
  // one loop turn); two `trial` calls are not. A workers snapshot taken
  // between two trial snapshots that both show the same trial RUNNING was
  // taken while it ran (a trial that leaves RUNNING here never comes back).
  auto snapshot = [&](Json& first_doc, Json& second_doc) {
    Json all = TrialsOf(cluster, exp);
    first_doc = Json();
    second_doc = Json();
    for (const auto& t : all) {
      if (t["trial_id"] == first) first_doc = t;
      if (t["trial_id"] == second) second_doc = t;
    }
  };
  int seen_first = 0, seen_second = 0;
  ASSERT_TRUE(WaitFor([&] {
    Json a0, a1, b0, b1;
    snapshot(a0, a1);
    auto workers = Workers(cluster);
    snapshot(b0, b1);
    if (StatusOf(b0) == "TERMINATED" && StatusOf(b1) == "TERMINATED") return true;
    bool first_ran = StatusOf(a0) == "RUNNING" && StatusOf(b0) == "RUNNING";
    bool second_ran = StatusOf(a1) == "RUNNING" && StatusOf(b1) == "RUNNING";
    EXPECT_FALSE(StatusOf(a0) == "RUNNING" && StatusOf(a1) == "RUNNING")
        << "both trials RUNNING at once: " << a0.dump() << "\n" << a1.dump();
    EXPECT_FALSE(StatusOf(b0) == "RUNNING" && StatusOf(b1) == "RUNNING")
        << "both trials RUNNING at once: " << b0.dump() << "\n" << b1.dump();
    if (first_ran) {
      ++seen_first;
      EXPECT_EQ(StatusOf(a1), "PENDING");
      EXPECT_EQ(StatusOf(b1), "PENDING");
    }
    if (second_ran) {
      ++seen_second;
      EXPECT_EQ(StatusOf(a0), "TERMINATED");
    }
    if (first_ran || second_ran) {
      EXPECT_EQ(workers.size(), 4u);
      for (auto& [name, w] : workers) EXPECT_EQ(AvailableCpu(w), 0.0) << name << ": " << w.dump();
    }
    return false;
  }, seconds(20))) << cluster.Logs();
  EXPECT_GT(seen_first, 0);
  EXPECT_GT(seen_second, 0);

  ASSERT_TRUE(WaitFinished(cluster, exp)) << cluster.Logs();
  Json t0 = GetTrial(cluster, first), t1 = GetTrial(cluster, second);
  EXPECT_EQ(StatusOf(t0), "TERMINATED");
  EXPECT_EQ(StatusOf(t1), "TERMINATED");
  ExpectResultsOneToN(cluster, first, 5);
  ExpectResultsOneToN(cluster, second, 5);
  EXPECT_GE(t1["start_time"].get<double>(), t0["end_time"].get<double>());
  EXPECT_EQ(t0["resources"]["strategy"], "SPREAD");
  EXPECT_EQ(t0["resources"]["bundles"].size(), 4u);
  for (auto& [name, w] : Workers(cluster)) EXPECT_EQ(AvailableCpu(w), 1.0) << name;
}

}  // namespace
}  // namespace ztune::e2e
