// Chaos through the real binaries: kill -9 of the head (restarted on the same
// data dir) and of workers at moments drawn from a fixed-seed generator, a
// head crash in the middle of a grid search, head crashes while a result or
// a checkpoint is in flight, a head crash while a pause is in flight (also
// with the trial's worker frozen, or lost), and a head refusing data dirs it
// must not touch. What must hold: no result is lost or stored
// twice, values equal the quadratic's closed form, trials whose actor survived
// every head crash were re-attached (never restarted), and nothing is reset.
#include <rocksdb/db.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "storage/keys.h"
#include "storage/rocksdb_store.h"
#include "tests/fakes/file_damage.h"
#include "tests/e2e/cluster.h"
#include "tests/e2e/stored_result_json.h"
#include "tests/e2e/trial_queries.h"

namespace ztune::e2e {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

double ClosedForm(const Json& config, int64_t i) {
  double lr = config.value("lr", 0.1), x0 = config.value("x0", 10.0),
         target = config.value("target", 0.0);
  return target + (x0 - target) * std::pow(1 - 2 * lr, static_cast<double>(i));
}

// Starts of trial `id` that a head crash lost: the attempt was committed but
// its CREATE_ACTOR died with the head, so no worker re-attached it (or a
// reconnecting worker never got it). Each costs the trial an attempt, never a
// failure or a result, and the head logs each one.
std::vector<std::string> LostStartLines(const std::string& head_log, const std::string& id) {
  std::vector<std::string> lines;
  std::istringstream in(head_log);
  for (std::string line; std::getline(in, line);) {
    const bool not_reattached = Contains(line, "trial " + id + ": ") &&
                                Contains(line, "restarting it from its newest checkpoint");
    const bool not_delivered =
        Contains(line, "trial " + id + " attempt ") && Contains(line, "it starts again");
    if (not_reattached || not_delivered) lines.push_back(line);
  }
  return lines;
}

std::string JoinLines(const std::vector<std::string>& lines) {
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  return all;
}

bool NearRelative(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::fabs(b) + 1e-300; }

// `results` (in stored order) are training_iteration 1..n exactly once with
// the closed-form x and loss of `config`.
void ExpectQuadraticResults(const std::vector<Json>& results, const Json& config,
                            const std::string& id, int64_t n, const std::string& where) {
  ASSERT_EQ(results.size(), static_cast<size_t>(n)) << where << " " << id;
  for (int64_t i = 1; i <= n; ++i) {
    const Json& r = results[i - 1];
    ASSERT_EQ(r["training_iteration"], i) << where << " " << id << ": " << r.dump();
    EXPECT_EQ(r["trial_id"], id) << where;
    const double x = r["x"].get<double>(), want = ClosedForm(config, i);
    EXPECT_TRUE(NearRelative(x, want))
        << where << " " << id << " iteration " << i << ": x " << x << " vs closed form " << want;
    EXPECT_TRUE(NearRelative(r["loss"].get<double>(), want * want))
        << where << " " << id << " iteration " << i;
  }
}

// ---------------------------------------------------------------------------
// 1. Three head crashes and one worker crash at seeded moments.

constexpr int kChaosTrials = 24;
constexpr int64_t kChaosIterations = 60;

int64_t StoredResults(const Json& trials) {
  int64_t sum = 0;
  for (const auto& t : trials) sum += std::max<int64_t>(0, IterationOf(t));
  return sum;
}

// 24 quadratic trials x 60 iterations on 3 workers x 2 CPUs. The moments of
// three kill -9s of the head (each restarted on the same data dir after a short
// seeded downtime) and of one kill -9 of a worker (replaced by a worker with a
// new name) are numbers of stored results drawn from a fixed-seed mt19937.
// -> every trial TERMINATED with iterations 1..60 exactly once and closed-form
// values (CLI and store agree); every trial that was not on the killed worker
// was re-attached through every head crash: attempt 1, no restore, no failure.
TEST(ChaosE2ETest, HeadAndWorkerKillsLoseNothing) {
  auto t_start = Clock::now();
  LocalCluster cluster("chaos");
  const std::vector<std::string> head_args = {"--reattach-grace-ms", "3000"};
  cluster.StartHead(head_args);
  std::vector<std::string> names = {"w0", "w1", "w2"};
  for (const auto& n : names) cluster.StartWorker(n, 2);
  ASSERT_TRUE(cluster.WaitForWorkers(3)) << cluster.Logs();

  std::string exp = SubmitSpec(cluster, R"({"name": "chaos", "trainable": "quadratic",
      "param_space": {"lr": {"uniform": [0.01, 0.2]}, "x0": {"grid_search": [5, 10, 15]},
                      "step_sleep_s": 0.03},
      "num_samples": 8, "metric": "loss", "mode": "min",
      "stop": {"training_iteration": 60},
      "checkpoint": {"frequency": 10}, "max_failures": 3, "seed": 20240611})",
                           "spec");
  ASSERT_FALSE(exp.empty());

  // The chaos plan: event k fires once >= threshold[k] results are stored;
  // thresholds lie in disjoint windows so that the run recovers between them.
  // Steps of 30 ms (6 slots: about 200 results/s) leave the last event (at
  // most 1,050 of 1,440 results) seconds before the end, with workers that
  // re-register within milliseconds of a head restart (at 10 ms a loaded run
  // reached 1,440 before its last event and found no trial to kill).
  std::mt19937 rng(77);
  std::vector<int64_t> thresholds;
  for (int k = 0; k < 4; ++k) thresholds.push_back(100 + 250 * k + static_cast<int64_t>(rng() % 200));
  const int worker_event = static_cast<int>(rng() % 4);
  std::string victim;  // chosen at the worker event
  size_t victim_slot = 0;

  std::set<std::string> on_victim;  // trials that ran on the victim when it died
  std::string victim_id;
  for (int k = 0; k < 4; ++k) {
    int64_t stored = 0;
    ASSERT_TRUE(WaitFor([&] {
      stored = StoredResults(TrialsOf(cluster, exp));
      return stored >= thresholds[k];
    }, seconds(40))) << "event " << k << ": stuck at " << stored << " results\n" << cluster.Logs();

    if (k != worker_event) {
      const int downtime_ms = static_cast<int>(rng() % 300);
      cluster.head().Kill(SIGKILL);
      std::this_thread::sleep_for(milliseconds(downtime_ms));
      cluster.StartHead(head_args);
      std::cerr << "[ chaos: head kill -9 at " << stored << " results, down " << downtime_ms
                << " ms ]\n";
      continue;
    }

    // Every live trial re-attached (its worker known) and every worker back,
    // so that the snapshot below names every trial on the victim.
    ASSERT_TRUE(cluster.WaitForWorkers(3)) << cluster.Logs();
    auto running_on = [&](const Json& trials, std::set<std::string>& out) {
      for (const auto& t : trials) {
        if (t["worker"] == victim) out.insert(t["trial_id"].get<std::string>());
      }
    };
    Json before;
    // The victim: the worker of a trial that has a persistent checkpoint (so
    // that its retry restores) and some way to go, drawn among such trials.
    ASSERT_TRUE(WaitFor([&] {
      before = TrialsOf(cluster, exp);
      std::vector<std::string> candidates;
      for (const auto& t : before) {
        if (StatusOf(t) != "RUNNING") continue;
        if (t["worker"].is_null()) return false;
        if (!t["checkpoints"].empty() && IterationOf(t) < 45) {
          candidates.push_back(t["worker"].get<std::string>());
        }
      }
      if (candidates.empty()) return false;
      victim = candidates[rng() % candidates.size()];
      return true;
    }, seconds(20))) << before.dump() << cluster.Logs();
    victim_slot = static_cast<size_t>(std::find(names.begin(), names.end(), victim) - names.begin());
    ASSERT_LT(victim_slot, names.size()) << victim;
    auto workers = Workers(cluster);
    ASSERT_EQ(workers.count(victim), 1u) << cluster.CliJson("workers").dump(2);
    victim_id = workers[victim]["worker_id"].get<std::string>();
    running_on(before, on_victim);
    cluster.worker(victim_slot).Kill(SIGKILL);
    // Until the head declares the victim dead it may still place trials there:
    // those ran on the victim as well.
    ASSERT_TRUE(WaitFor([&] {
      running_on(TrialsOf(cluster, exp), on_victim);
      auto w = Workers(cluster);
      return w.count(victim) == 1 && w[victim]["alive"] == false;
    }, seconds(10))) << cluster.Logs();
    cluster.StartWorker("w3", 2);
    std::cerr << "[ chaos: worker " << victim << " kill -9 at " << stored << " results with "
              << on_victim.size() << " trials on it ]\n";
  }

  ASSERT_TRUE(WaitFinished(cluster, exp, 60)) << cluster.Logs();
  Json trials = TrialsOf(cluster, exp);
  ASSERT_EQ(trials.size(), static_cast<size_t>(kChaosTrials)) << trials.dump();
  std::map<std::string, Json> docs;
  // A trial never on the killed worker runs one attempt, plus one for each
  // start that a head crash lost (the head logs those).
  const std::string head_log_at_end = ReadFile(cluster.head_log());
  std::map<std::string, std::vector<std::string>> lost_starts;
  int restored = 0;
  for (const auto& t : trials) {
    const std::string id = t["trial_id"];
    docs[id] = t;
    lost_starts[id] = LostStartLines(head_log_at_end, id);
    EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
    EXPECT_EQ(IterationOf(t), kChaosIterations) << id;
    if (on_victim.count(id) == 0) {
      EXPECT_EQ(t["attempt"].get<size_t>(), 1 + lost_starts[id].size())
          << id << " was never on the killed worker: " << t.dump()
          << "\nits lost starts in the head log:\n" << JoinLines(lost_starts[id]);
      EXPECT_EQ(t["num_restores"], 0) << id;
      EXPECT_EQ(t["num_failures"], 0) << id << ": " << t["error"];
    } else {
      EXPECT_LE(t["num_failures"].get<int64_t>(), 1) << t.dump();
      if (t["num_failures"] == 1) {
        EXPECT_TRUE(Contains(t["error"].get<std::string>(), victim_id)) << t["error"];
      }
      restored += t["num_restores"].get<int>();
      std::cerr << "[ chaos: " << id << " was on " << victim << ": attempt " << t["attempt"]
                << ", " << t["num_failures"] << " failures, " << t["num_restores"]
                << " restores ]\n";
    }
    Json r = cluster.CliJson("results " + id);
    ASSERT_TRUE(r.is_object()) << id;
    std::vector<Json> results(r["results"].begin(), r["results"].end());
    ExpectQuadraticResults(results, t["config"], id, kChaosIterations, "CLI");
  }
  // No trial sampled twice: 8 of each x0, and 24 distinct lr values.
  std::set<double> lrs;
  std::map<int, int> x0s;
  for (const auto& [id, t] : docs) {
    lrs.insert(t["config"]["lr"].get<double>());
    x0s[t["config"]["x0"].get<int>()]++;
  }
  EXPECT_EQ(lrs.size(), static_cast<size_t>(kChaosTrials));
  EXPECT_EQ(x0s, (std::map<int, int>{{5, 8}, {10, 8}, {15, 8}}));

  // Every actor stopped, every CPU back, on the 3 live workers.
  ASSERT_TRUE(WaitFor([&] {
    auto w = Workers(cluster);
    int alive = 0;
    for (auto& [name, doc] : w) {
      if (doc["alive"] != true) continue;
      ++alive;
      if (doc["actors"] != 0 || doc["resources_available"]["CPU"] != 2) return false;
    }
    return alive == 3 && w[victim]["alive"] == false;
  }, seconds(10))) << cluster.CliJson("workers").dump(2) << cluster.Logs();
  EXPECT_GE(restored, 1) << "no trial of the killed worker restored from its checkpoint";
  const std::string head_log = ReadFile(cluster.head_log());
  const size_t reattached = Count(head_log, "re-attached trial");
  EXPECT_GT(reattached, 0u) << "no trial was re-attached after a head crash";

  // The store, offline: the head's own check, then the records directly.
  ASSERT_EQ(cluster.head().Stop(), 0) << cluster.Logs();
  auto check = e2e::Run(std::string(ZTUNE_HEAD_BIN) + " --check --data-dir " + cluster.data_dir());
  EXPECT_EQ(check.exit_code, 0) << check.out;
  auto store = storage::RocksDbStore::Open(cluster.data_dir());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  for (const auto& [id, doc] : docs) {
    auto rec = (*store)->Get(storage::Family::kTrials, id);
    ASSERT_TRUE(rec.ok() && rec->has_value()) << id;
    Json trial = Json::parse(**rec);
    EXPECT_EQ(trial["status"], "TERMINATED") << id;
    EXPECT_EQ(trial["iteration"], kChaosIterations) << id;
    EXPECT_EQ(trial["attempt"], doc["attempt"]) << id;
    EXPECT_EQ(trial["num_restores"], doc["num_restores"]) << id;
    if (on_victim.count(id) == 0) {
      EXPECT_EQ(trial["attempt"].get<size_t>(), 1 + lost_starts[id].size()) << id;
      EXPECT_EQ(trial["num_restores"], 0) << id;
      EXPECT_EQ(trial["num_failures"], 0) << id;
    }
    std::vector<Json> stored;
    ASSERT_TRUE((*store)
                    ->Scan(storage::Family::kResults, storage::TrialPrefix(id),
                           [&](std::string_view key, std::string_view v) {
                             Json r = StoredResultJson(v);
                             EXPECT_EQ(storage::KeySuffixNumber(key),
                                       std::optional<uint64_t>(r["training_iteration"].get<uint64_t>()))
                                 << id;
                             stored.push_back(std::move(r));
                             return true;
                           })
                    .ok());
    ExpectQuadraticResults(stored, trial["config"], id, kChaosIterations, "store");
    EXPECT_EQ(stored.back()["done"], true) << id;
  }
  std::cerr << "[ chaos: " << on_victim.size() << " trials on the killed worker (" << restored
            << " restores), " << reattached << " re-attachments, " << SecondsSince(t_start)
            << " s ]\n";
}

// ---------------------------------------------------------------------------
// 2. A grid search generated one trial at a time, interrupted by a head crash.

// 3 x 3 grid x 3 samples, one trial at a time, one worker; kill -9 of the head
// once 20 trials exist -> restarted, the search goes on at the next trial ->
// exactly 27 trials (ids 0..26), all TERMINATED, each (a, b) pair 3 times.
TEST(ChaosE2ETest, GridOf27SurvivesAHeadCrash) {
  LocalCluster cluster("chaos-grid");
  const std::vector<std::string> head_args = {"--reattach-grace-ms", "3000"};
  cluster.StartHead(head_args);
  cluster.StartWorker("w0", 1);
  ASSERT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();
  std::string exp = SubmitSpec(cluster, R"({"trainable": "quadratic",
      "param_space": {"a": {"grid_search": [1, 2, 3]}, "b": {"grid_search": [1, 2, 3]},
                      "step_sleep_s": 0.005},
      "num_samples": 3, "max_concurrent_trials": 1, "seed": 5,
      "stop": {"training_iteration": 3}})",
                           "grid");
  ASSERT_FALSE(exp.empty());

  size_t seen = 0;
  ASSERT_TRUE(WaitFor([&] {
    Json trials = TrialsOf(cluster, exp);
    seen = trials.size();
    size_t unfinished = 0;
    for (const auto& t : trials) unfinished += StatusOf(t) == "TERMINATED" ? 0 : 1;
    EXPECT_LE(unfinished, 1u) << "max_concurrent_trials 1: " << trials.dump();
    return seen >= 20;
  }, seconds(40))) << seen << " trials\n" << cluster.Logs();
  cluster.head().Kill(SIGKILL);
  cluster.StartHead(head_args);
  std::cerr << "[ grid: head kill -9 with " << seen << " trials ]\n";

  ASSERT_TRUE(WaitFinished(cluster, exp, 60)) << cluster.Logs();
  Json trials = TrialsOf(cluster, exp);
  ASSERT_EQ(trials.size(), 27u) << trials.dump();
  std::map<std::pair<int, int>, int> pairs;
  std::map<int, int> as, bs;
  std::set<std::string> ids;
  for (const auto& t : trials) {
    const std::string id = t["trial_id"];
    ids.insert(id);
    EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
    EXPECT_EQ(IterationOf(t), 3) << id;
    const int a = t["config"]["a"].get<int>(), b = t["config"]["b"].get<int>();
    pairs[{a, b}]++;
    as[a]++;
    bs[b]++;
    ExpectResultsOneToN(cluster, id, 3);
  }
  for (int k = 0; k < 27; ++k) EXPECT_EQ(ids.count(TrialId(exp, k)), 1u) << TrialId(exp, k);
  EXPECT_EQ(pairs.size(), 9u);
  for (const auto& [ab, n] : pairs) {
    EXPECT_EQ(n, 3) << "(a, b) = (" << ab.first << ", " << ab.second << ")";
  }
  for (int v = 1; v <= 3; ++v) {
    EXPECT_EQ(as[v], 9) << "a = " << v;
    EXPECT_EQ(bs[v], 9) << "b = " << v;
  }
  Json e = cluster.CliJson("experiments");
  ASSERT_TRUE(e.is_object());
  ASSERT_EQ(e["experiments"].size(), 1u);
  EXPECT_EQ(e["experiments"][0]["total_trials"], 27);
  EXPECT_EQ(e["experiments"][0]["trial_counts"]["TERMINATED"], 27);
  EXPECT_EQ(e["experiments"][0]["finished"], true);
}

// A head crash while the step that reaches a checkpoint iteration, and later
// the step that reaches the stop criterion, is in flight: the worker keeps
// the actor and re-sends that result to the restarted head. That result must
// be handled like any other: the checkpoint taken at iteration 3, and the
// trial stopped at iteration 6, not driven on to iteration 7.
TEST(ChaosE2ETest, ResultInFlightAtAHeadCrashStillCheckpointsAndStops) {
  LocalCluster cluster("chaos-inflight");
  const std::vector<std::string> head_args = {"--reattach-grace-ms", "5000"};
  cluster.StartHead(head_args);
  cluster.StartWorker("w0", 1);
  ASSERT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();
  std::string exp = SubmitSpec(cluster, R"({"trainable": "quadratic",
      "param_space": {"lr": 0.05, "step_sleep_s": 0.3},
      "stop": {"training_iteration": 6}, "checkpoint": {"frequency": 3, "at_end": true}})",
                           "inflight");
  ASSERT_FALSE(exp.empty());
  const std::string id = TrialId(exp, 0);
  // Kill while iteration 2 is the last stored one (step 3 in flight), then
  // while 5 is (step 6 in flight): each step takes 300 ms.
  for (int64_t at : {2, 5}) {
    int64_t seen = -1;
    ASSERT_TRUE(WaitFor([&] {
      seen = IterationOf(GetTrial(cluster, id));
      return seen >= at;
    }, seconds(15))) << cluster.Logs();
    cluster.head().Kill(SIGKILL);
    std::cerr << "[ in flight: head kill -9 at iteration " << seen << " (aimed at " << at
              << ") ]\n";
    cluster.StartHead(head_args);
  }
  ASSERT_TRUE(WaitFinished(cluster, exp, 30)) << cluster.Logs();
  Json t = GetTrial(cluster, id);
  EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
  EXPECT_EQ(IterationOf(t), 6) << t.dump();
  EXPECT_EQ(t["attempt"], 1) << t.dump();
  EXPECT_EQ(t["num_restores"], 0) << t.dump();
  std::vector<int64_t> checkpointed;
  for (const auto& c : t["checkpoints"]) checkpointed.push_back(c["iteration"].get<int64_t>());
  EXPECT_EQ(checkpointed, (std::vector<int64_t>{3, 6})) << t.dump();
  Json r = cluster.CliJson("results " + id);
  ASSERT_TRUE(r.is_object());
  std::vector<Json> results(r["results"].begin(), r["results"].end());
  ExpectQuadraticResults(results, t["config"], id, 6, "CLI");
  if (!results.empty()) {
    EXPECT_EQ(results.back()["done"], true);
  }
  EXPECT_TRUE(Contains(ReadFile(cluster.head_log()), "re-attached trial " + id)) << cluster.Logs();
}

// A head crash after the result that meets the stop criterion is stored but
// before its checkpoint (a large one, so that the SAVE takes a while) is: the
// restarted head re-attaches the actor. The trial must end at the stop
// (iteration 3, results 1..3, checkpoint 3 taken), not be driven to iteration 4.
TEST(ChaosE2ETest, HeadCrashDuringTheCheckpointAtTheStopDoesNotRunPastIt) {
  LocalCluster cluster("chaos-final-save");
  const std::vector<std::string> head_args = {"--reattach-grace-ms", "5000"};
  cluster.StartHead(head_args);
  cluster.StartWorker("w0", 1);
  ASSERT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();
  std::string exp = SubmitSpec(cluster, R"({"trainable": "blob",
      "param_space": {"checkpoint_bytes": 67108864},
      "stop": {"training_iteration": 3}, "checkpoint": {"frequency": 3}})",
                           "final-save");
  ASSERT_FALSE(exp.empty());
  const std::string id = TrialId(exp, 0);
  Json seen;
  ASSERT_TRUE(WaitFor([&] {
    seen = GetTrial(cluster, id);
    return IterationOf(seen) >= 3;
  }, seconds(30))) << cluster.Logs();
  cluster.head().Kill(SIGKILL);
  const bool in_window = StatusOf(seen) == "RUNNING" && seen["checkpoints"].empty();
  std::cerr << "[ final save: head kill -9 at iteration " << IterationOf(seen) << ", "
            << StatusOf(seen) << ", " << seen["checkpoints"].size() << " checkpoints ]\n";
  cluster.StartHead(head_args);
  ASSERT_TRUE(WaitFinished(cluster, exp, 30)) << cluster.Logs();
  Json t = GetTrial(cluster, id);
  EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
  EXPECT_EQ(IterationOf(t), 3) << t.dump();
  ExpectResultsOneToN(cluster, id, 3);
  std::vector<int64_t> checkpointed;
  for (const auto& c : t["checkpoints"]) checkpointed.push_back(c["iteration"].get<int64_t>());
  EXPECT_EQ(checkpointed, (std::vector<int64_t>{3})) << t.dump();
  if (in_window) {
    EXPECT_TRUE(Contains(ReadFile(cluster.head_log()), "re-attached trial " + id)) << cluster.Logs();
  }
}

// ---------------------------------------------------------------------------
// 3. A head crash while a pause is in flight.

constexpr int64_t kPauseIterations = 100;

// The trial becomes PAUSED (held) and makes no progress; `resume` runs it to
// TERMINATED with results 1..kPauseIterations exactly once.
void ExpectHeldThenResume(LocalCluster& cluster, const std::string& exp, const std::string& id) {
  Json t;
  ASSERT_TRUE(WaitFor([&] {
    t = GetTrial(cluster, id);
    return StatusOf(t) == "PAUSED";
  }, seconds(15))) << t.dump() << cluster.Logs();
  EXPECT_EQ(t["held"], true) << t.dump();
  EXPECT_TRUE(t["worker"].is_null()) << t.dump();
  const int64_t at_pause = IterationOf(t);
  EXPECT_LT(at_pause, kPauseIterations);
  // Held: the scheduler leaves it alone (several scheduling turns).
  const auto t0 = Clock::now();
  EXPECT_FALSE(WaitFor([&] {
    Json now = GetTrial(cluster, id);
    return StatusOf(now) != "PAUSED" || IterationOf(now) != at_pause;
  }, milliseconds(400))) << GetTrial(cluster, id).dump();
  EXPECT_GE(SecondsSince(t0), 0.35);
  EXPECT_EQ(cluster.CliJson("results " + id)["results"].size(), static_cast<size_t>(at_pause));

  auto r = cluster.Cli("resume " + id);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_TRUE(WaitFinished(cluster, exp, 30)) << cluster.Logs();
  Json done = GetTrial(cluster, id);
  EXPECT_EQ(StatusOf(done), "TERMINATED") << done.dump();
  EXPECT_EQ(IterationOf(done), kPauseIterations);
  EXPECT_EQ(done["held"], false);
  ExpectResultsOneToN(cluster, id, kPauseIterations);
  std::cerr << "[ pause: held at iteration " << at_pause << ", attempt " << done["attempt"]
            << ", " << done["num_restores"] << " restores ]\n";
}

std::string SubmitSleepTrial(LocalCluster& cluster, const std::string& name) {
  return SubmitSpec(cluster, R"({"trainable": "sleep", "param_space": {"sleep_s": 0.02},
      "stop": {"training_iteration": 100}, "checkpoint": {"frequency": 5}})",
                name);
}

// (a) `pause`, answered, then at once kill -9 of the head: the pause may have
// completed or not. (b) the worker frozen (SIGSTOP) before `pause`, so the
// pause cannot complete before the head dies; SIGCONT after the restart: the
// worker re-attaches the actor and the pause completes then. Both times the
// acknowledged pause outlives the head: PAUSED, held, resumable.
TEST(ChaosE2ETest, FrozenWorkerWithPausedTrialAndRestart) {
  LocalCluster cluster("chaos-pause");
  const std::vector<std::string> head_args = {"--reattach-grace-ms", "5000"};
  cluster.StartHead(head_args);
  cluster.StartWorker("w0", 1);
  ASSERT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();

  for (const bool frozen : {false, true}) {
    SCOPED_TRACE(frozen ? "worker frozen" : "worker running");
    std::string exp = SubmitSleepTrial(cluster, frozen ? "frozen" : "running");
    ASSERT_FALSE(exp.empty());
    const std::string id = TrialId(exp, 0);
    ASSERT_TRUE(WaitRunningAt(cluster, id, 7)) << cluster.Logs();

    if (frozen) cluster.worker(0).Signal(SIGSTOP);
    auto r = cluster.Cli("pause " + id, /*stdout_only=*/true);
    cluster.head().Kill(SIGKILL);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_TRUE(Contains(r.out, id)) << r.out;
    cluster.StartHead(head_args);
    if (frozen) cluster.worker(0).Signal(SIGCONT);
    ExpectHeldThenResume(cluster, exp, id);
    if (frozen) {
      // The pause could only complete on the re-attached actor.
      EXPECT_TRUE(Contains(ReadFile(cluster.head_log()), "re-attached trial " + id))
          << cluster.Logs();
    }
    Json t = GetTrial(cluster, id);
    EXPECT_EQ(t["num_failures"], 0) << t.dump();
  }
  ASSERT_TRUE(WaitFor([&] {
    auto w = Workers(cluster);
    return w.size() == 1 && w["w0"]["alive"] == true && w["w0"]["actors"] == 0 &&
           w["w0"]["resources_available"]["CPU"] == 1;
  }, seconds(10))) << cluster.CliJson("workers").dump(2) << cluster.Logs();
}

// `pause` of a trial whose worker is frozen, kill -9 of the head, and the
// worker never comes back (killed): the restarted head gives up waiting for the
// actor after the re-attach grace. The acknowledged pause must still hold: the
// trial becomes PAUSED (held), not PENDING and run again on the new worker;
// `resume` continues it from its newest persistent checkpoint.
TEST(ChaosE2ETest, PauseOutlivesAHeadCrashWhenTheWorkerIsLost) {
  LocalCluster cluster("chaos-pause-lost");
  const std::vector<std::string> head_args = {"--reattach-grace-ms", "500"};
  cluster.StartHead(head_args);
  cluster.StartWorker("w0", 1);
  ASSERT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();
  std::string exp = SubmitSleepTrial(cluster, "lost");
  ASSERT_FALSE(exp.empty());
  const std::string id = TrialId(exp, 0);
  ASSERT_TRUE(WaitRunningAt(cluster, id, 7)) << cluster.Logs();

  cluster.worker(0).Signal(SIGSTOP);
  auto r = cluster.Cli("pause " + id, /*stdout_only=*/true);
  cluster.head().Kill(SIGKILL);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  cluster.worker(0).Kill(SIGKILL);
  cluster.StartHead(head_args);
  cluster.StartWorker("w1", 1);
  ASSERT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();
  // Past the grace, the head has given up on the old actor.
  ASSERT_TRUE(WaitFor([&] {
    return Contains(ReadFile(cluster.head_log()), "did not re-attach its actor");
  }, seconds(10))) << cluster.Logs();
  ExpectHeldThenResume(cluster, exp, id);
  Json t = GetTrial(cluster, id);
  EXPECT_GE(t["num_restores"].get<int>(), 1) << t.dump();
}

// ---------------------------------------------------------------------------
// 4. Data dirs the head must refuse, untouched.

struct HeadRun {
  int exit_code;
  std::string out;
  double seconds;
};

// Runs ztune-head on `data_dir` (bounded by `timeout`, which would exit 124).
HeadRun RunHead(const std::string& data_dir) {
  auto t0 = Clock::now();
  auto r = e2e::Run("timeout 30 " + std::string(ZTUNE_HEAD_BIN) + " --data-dir " + Quote(data_dir) +
               " --worker-endpoint 'tcp://127.0.0.1:*' --client-endpoint 'tcp://127.0.0.1:*'");
  return HeadRun{r.exit_code, r.out, SecondsSince(t0)};
}

// relative path -> content of every regular file under `dir`.
std::map<std::string, std::string> FilesUnder(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string rel = fs::relative(e.path(), dir).string();
    files[rel] = e.is_regular_file() ? ReadFile(e.path().string()) : std::string("<dir>");
  }
  return files;
}

// A data directory opened through RocksDB read-only with every column
// family it lists (the ztune store refuses to open a store with a newer
// schema, and a read-only open changes nothing). Closed at scope exit.
class ReadOnlyDb {
 public:
  explicit ReadOnlyDb(const std::string& dir) {
    rocksdb::DBOptions options;
    std::vector<std::string> names;
    rocksdb::Status s = rocksdb::DB::ListColumnFamilies(options, dir, &names);
    EXPECT_TRUE(s.ok()) << s.ToString();
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    for (const auto& n : names) descriptors.emplace_back(n, rocksdb::ColumnFamilyOptions());
    s = rocksdb::DB::OpenForReadOnly(options, dir, descriptors, &handles_, &db_);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  ~ReadOnlyDb() {
    if (db_ == nullptr) return;
    for (auto* h : handles_) EXPECT_TRUE(db_->DestroyColumnFamilyHandle(h).ok());
    EXPECT_TRUE(db_->Close().ok());
    delete db_;
  }
  ReadOnlyDb(const ReadOnlyDb&) = delete;
  ReadOnlyDb& operator=(const ReadOnlyDb&) = delete;

  // Null when the open failed (a test failure is recorded).
  rocksdb::DB* db() const { return db_; }
  const std::vector<rocksdb::ColumnFamilyHandle*>& families() const { return handles_; }

 private:
  rocksdb::DB* db_ = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
};

// Every key/value of every column family.
std::map<std::string, std::map<std::string, std::string>> DumpStore(const std::string& dir) {
  std::map<std::string, std::map<std::string, std::string>> dump;
  ReadOnlyDb store(dir);
  if (store.db() == nullptr) return dump;
  for (auto* h : store.families()) {
    rocksdb::ReadOptions ro;
    ro.verify_checksums = true;
    std::unique_ptr<rocksdb::Iterator> it(store.db()->NewIterator(ro, h));
    auto& family = dump[h->GetName()];
    for (it->SeekToFirst(); it->Valid(); it->Next()) family[it->key().ToString()] = it->value().ToString();
    EXPECT_TRUE(it->status().ok()) << it->status().ToString();
  }
  return dump;
}

// The live SST files of column family `family`, by size, largest first.
std::vector<std::string> SstFilesOf(const std::string& dir, const std::string& family) {
  ReadOnlyDb store(dir);
  if (store.db() == nullptr) return {};
  std::vector<rocksdb::LiveFileMetaData> files;
  store.db()->GetLiveFilesMetaData(&files);
  std::sort(files.begin(), files.end(),
            [](const auto& a, const auto& b) { return a.size > b.size; });
  std::vector<std::string> out;
  for (const auto& f : files) {
    if (f.column_family_name == family) out.push_back(dir + "/" + fs::path(f.name).filename().string());
  }
  return out;
}

// name -> content of the *.sst files in `dir`.
std::map<std::string, std::string> SstFiles(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".sst") out[e.path().filename().string()] = ReadFile(e.path().string());
  }
  return out;
}

// A data dir written by a real head: an experiment of `n` noop trials, run to
// the end, head stopped cleanly. The cluster's workers are stopped too.
void MakeStoreWithData(LocalCluster& cluster, int n) {
  ASSERT_TRUE(cluster.StartHeadAndWorkers({"w0"}, 2)) << cluster.Logs();
  std::string exp = SubmitSpec(cluster, R"({"trainable": "noop", "num_samples": )" + std::to_string(n) +
                                        R"(, "stop": {"training_iteration": 2}})",
                           "noop");
  ASSERT_FALSE(exp.empty());
  ASSERT_TRUE(WaitFinished(cluster, exp, 30)) << cluster.Logs();
  ASSERT_EQ(cluster.head().Stop(), 0) << cluster.Logs();
  cluster.worker(0).Stop();
}

// Runs the head on `data_dir` and expects a prompt refusal whose output names
// each of `words`; reports it on stderr under `label`.
// `exit_code` -1: any failure.
void ExpectHeadRefuses(const std::string& data_dir, const std::vector<std::string>& words,
                       const std::string& label, int exit_code = -1) {
  HeadRun run = RunHead(data_dir);
  EXPECT_NE(run.exit_code, 0) << run.out;
  if (exit_code >= 0) {
    EXPECT_EQ(run.exit_code, exit_code) << run.out;
  }
  EXPECT_NE(run.exit_code, 124) << "still running after 30 s:\n" << run.out;
  EXPECT_LT(run.seconds, 5.0) << run.out;
  for (const auto& w : words) EXPECT_TRUE(Contains(run.out, w)) << "'" << w << "' not in:\n" << run.out;
  std::cerr << "[ " << label << ": exit " << run.exit_code << " after " << run.seconds
            << " s: " << run.out << "]\n";
}

// Removes a temp dir at scope exit (kept with ZTUNE_KEEP_TEST_DIRS).
struct RemoveAtExit {
  std::string dir;
  ~RemoveAtExit() {
    if (!dir.empty() && std::getenv("ZTUNE_KEEP_TEST_DIRS") == nullptr) fs::remove_all(dir);
  }
};

TEST(StoreErrorsE2ETest, RefusesADirectoryThatIsNotAZtuneStore) {
  const std::string dir = TempDir("not-a-store");
  RemoveAtExit cleanup{dir};
  ASSERT_FALSE(dir.empty());
  std::ofstream(dir + "/notes.txt") << "my thesis, do not delete\n";
  fs::create_directories(dir + "/photos");
  std::ofstream(dir + "/photos/cat.jpg") << std::string(1000, 'c');
  const auto before = FilesUnder(dir);

  ExpectHeadRefuses(dir, {"not a ztune data directory", dir}, "not a store");
  EXPECT_EQ(FilesUnder(dir), before) << "the head changed a directory that is not its own";
}

TEST(StoreErrorsE2ETest, RefusesAStoreWithANewerSchema) {
  LocalCluster cluster("newer-schema");
  MakeStoreWithData(cluster, 4);
  if (HasFatalFailure()) return;
  {
    auto store = storage::RocksDbStore::Open(cluster.data_dir());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    storage::WriteBatch b;
    b.Put(storage::Family::kMeta, storage::kMetaSchema, "99");
    ASSERT_TRUE((*store)->Commit(b).ok());
  }
  const auto before = DumpStore(cluster.data_dir());
  ASSERT_EQ(before.at("meta").at("schema"), "99");
  ASSERT_EQ(before.at("trials").size(), 4u);
  ASSERT_EQ(before.at("results").size(), 8u);

  ExpectHeadRefuses(cluster.data_dir(), {"newer", "schema 99", "upgrade ztune", cluster.data_dir()},
                    "newer schema");
  EXPECT_EQ(DumpStore(cluster.data_dir()), before) << "the refused store was modified";
  // The offline check refuses it just the same.
  auto check = e2e::Run(std::string(ZTUNE_HEAD_BIN) + " --check --data-dir " + cluster.data_dir());
  EXPECT_NE(check.exit_code, 0) << check.out;
  EXPECT_TRUE(Contains(check.out, "newer")) << check.out;
}

TEST(StoreErrorsE2ETest, RefusesAStoreWithADamagedTrialsSst) {
  LocalCluster cluster("damaged-sst");
  MakeStoreWithData(cluster, 64);
  if (HasFatalFailure()) return;
  {
    // Reopened once: the WAL is replayed into SST files.
    auto store = storage::RocksDbStore::Open(cluster.data_dir());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
  }
  const auto ssts = SstFilesOf(cluster.data_dir(), "trials");
  ASSERT_FALSE(ssts.empty()) << "no SST file of the trials family";
  testing::DamageMiddle(ssts.front());
  if (HasFatalFailure()) return;
  const auto before = SstFiles(cluster.data_dir());

  const std::string damaged = "damaged sst " + fs::path(ssts.front()).filename().string() + " (" +
                              std::to_string(fs::file_size(ssts.front())) + " bytes)";
  // The head's start finds it in its checksummed read of the trial records
  // (the open no longer reads them first): a corrupt store all the same,
  // exit 3, naming --salvage (docs/recovery.md).
  ExpectHeadRefuses(cluster.data_dir(), {"corrupt", cluster.data_dir(), "trials", "--salvage"},
                    damaged, 3);
  EXPECT_TRUE(SstFiles(cluster.data_dir()) == before)
      << "the SST files of the refused store changed";
  EXPECT_TRUE(fs::exists(ssts.front()));
  // Refused again: nothing was repaired or reset by the first attempt.
  ExpectHeadRefuses(cluster.data_dir(), {"corrupt"}, damaged + ", again", 3);
  // The offline check, whose open reads the trials family, refuses it too.
  auto check = e2e::Run(std::string(ZTUNE_HEAD_BIN) + " --check --data-dir " + cluster.data_dir());
  EXPECT_EQ(check.exit_code, 3) << check.out;
  EXPECT_TRUE(Contains(check.out, "corrupt")) << check.out;
}

}  // namespace
}  // namespace ztune::e2e
