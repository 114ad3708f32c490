// Process trainables through the real binaries: a ztune-worker started with
// `--trainables FILE` runs the Python SDK scripts of tests/python/trainables/
// as child processes (docs/process-protocol.md). Class and function API round
// trips, exact resumption after a worker kill -9 and across workers after a
// pause, actor reuse with per-trial output files, every way a child can fail
// (each an ERROR naming its cause, with no process left behind), placement by
// trainable, CUDA_VISIBLE_DEVICES, and the per-trial stdout/stderr headers.
//
// "No process left" is checked against the process table: every process a
// worker starts for a trial (and whatever that process starts) carries
// ZTUNE_TRIAL_DIR=<work-dir>/<trial_id> in its environment, and every work dir
// lies inside the cluster's temp dir, so a scan of /proc/*/environ finds them
// all, grandchildren included, and nothing of another test or test run.
#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>

#include "tests/e2e/cluster.h"
#include "tests/e2e/trial_queries.h"

namespace ztune::e2e {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// ---------------------------------------------------------------------------
// Set-up helpers.

// tests/e2e/<this file> -> the repository root.
std::string RepoRoot() {
  fs::path p(__FILE__);
  if (p.is_relative()) p = fs::absolute(p);
  return p.parent_path().parent_path().parent_path().lexically_normal().string();
}

// Liveness of 1 s (100 ms x 10) rather than the clusters' default 300 ms:
// these tests keep several trials stepping as fast as they can (each step a
// head commit and a Python round trip), and on a loaded 2-core machine a
// 300 ms window once declared a live worker dead. Nothing here tests liveness;
// the kill -9 test only waits one window longer.
constexpr LocalCluster::Timing kTiming{100, 10};

constexpr const char* kPython = "/usr/bin/python3";
const char* const kScripts[] = {"counter_class", "counter_function", "misbehave", "gpu_report"};

// Writes a trainables file hosting every SDK test script (name = script stem)
// with `stop_grace_s`; returns its path.
std::string WriteTrainables(const LocalCluster& cluster, const std::string& name,
                            double stop_grace_s) {
  const std::string root = RepoRoot();
  Json file = Json::object();
  for (const char* script : kScripts) {
    file[script] = Json{{"argv", {kPython, root + "/tests/python/trainables/" + script + ".py"}},
                        {"env", {{"PYTHONPATH", root + "/python"}}},
                        {"cwd", nullptr},
                        {"stop_grace_s", stop_grace_s}};
  }
  const std::string path = cluster.dir() + "/" + name;
  std::ofstream(path) << file.dump(2);
  return path;
}

// The worker flags that host the SDK scripts.
std::vector<std::string> Hosting(const LocalCluster& cluster, double stop_grace_s = 0.5,
                                 std::vector<std::string> extra = {}) {
  extra.push_back("--trainables");
  extra.push_back(WriteTrainables(cluster, "trainables-" + std::to_string(stop_grace_s) + ".json",
                                  stop_grace_s));
  return extra;
}

// Starts `cluster`'s head and one worker "a" of `cpus` CPUs hosting the SDK
// scripts (Hosting, default grace), and waits until it is registered.
::testing::AssertionResult StartHostingWorker(LocalCluster& cluster, int cpus) {
  cluster.StartHead();
  cluster.StartWorker("a", cpus, Hosting(cluster));
  if (!cluster.WaitForWorkers(1)) return ::testing::AssertionFailure() << cluster.Logs();
  return ::testing::AssertionSuccess();
}

// Preconditions of every test: the SDK and the scripts are where the trainables
// file says, and the interpreter exists.
void CheckEnvironment() {
  const std::string root = RepoRoot();
  ASSERT_TRUE(fs::exists(root + "/python/ztune/__init__.py")) << root;
  ASSERT_TRUE(fs::exists(root + "/tests/python/trainables/counter_class.py")) << root;
  ASSERT_TRUE(fs::exists(kPython));
}

std::string WorkDir(const LocalCluster& cluster, const std::string& worker) {
  return cluster.dir() + "/work-" + worker;
}
std::string TrialDir(const LocalCluster& cluster, const std::string& worker,
                     const std::string& trial_id) {
  return WorkDir(cluster, worker) + "/" + trial_id;
}
std::string TrialFile(const LocalCluster& cluster, const std::string& worker,
                      const std::string& trial_id, const std::string& file) {
  return ReadFile(TrialDir(cluster, worker, trial_id) + "/" + file);
}

// ---------------------------------------------------------------------------
// Snapshots.

// One `trials --json` call: trial id -> TrialDoc.
std::map<std::string, Json> Snapshot(const LocalCluster& cluster, const std::string& exp) {
  std::map<std::string, Json> out;
  for (const auto& t : TrialsOf(cluster, exp)) out[t["trial_id"].get<std::string>()] = t;
  return out;
}

Json ResultsOf(const LocalCluster& cluster, const std::string& id) {
  Json r = cluster.CliJson("results " + id);
  return r.is_object() && r["results"].is_array() ? r["results"] : Json::array();
}

std::string ErrorOf(const Json& trial) {
  return trial.is_object() && trial["error"].is_string() ? trial["error"].get<std::string>() : "";
}

int64_t NewestCheckpoint(const Json& trial) {
  int64_t newest = 0;
  if (!trial.is_object() || !trial["checkpoints"].is_array()) return 0;
  for (const auto& c : trial["checkpoints"])
    newest = std::max(newest, c["iteration"].get<int64_t>());
  return newest;
}

// The counter's value after n steps, computed as the scripts do (repeated
// IEEE-754 double additions), so that results compare exactly.
double CounterValue(double start, double increment, int64_t n) {
  double v = start;
  for (int64_t i = 0; i < n; ++i) v += increment;
  return v;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

// What to print when an experiment does not finish: its trials, each trial's
// trial.log from every work dir, and the cluster's logs.
std::string Diagnostics(const LocalCluster& cluster, const std::string& exp) {
  std::string out = "trials of " + exp + ":\n" + TrialsOf(cluster, exp).dump(1) + "\n";
  std::error_code ec;
  for (const auto& work : fs::directory_iterator(cluster.dir(), ec)) {
    if (!StartsWith(work.path().filename().string(), "work-")) continue;
    for (const auto& trial : fs::directory_iterator(work.path(), ec)) {
      if (!StartsWith(trial.path().filename().string(), exp + "_")) continue;
      out += "==== " + trial.path().string() + "/trial.log\n" +
             ReadFile(trial.path().string() + "/trial.log");
    }
  }
  return out + cluster.Logs();
}

// ---------------------------------------------------------------------------
// The process table.

struct TrialProcess {
  pid_t pid = 0;
  std::string trial_dir;  // its ZTUNE_TRIAL_DIR
  std::string cmdline;
  uint64_t sig_ignored = 0;  // SigIgn of /proc/PID/status
};

std::string Describe(const std::vector<TrialProcess>& procs) {
  std::string s;
  for (const auto& p : procs) {
    s += "  pid " + std::to_string(p.pid) + " [" + p.cmdline + "] ZTUNE_TRIAL_DIR=" + p.trial_dir +
         "\n";
  }
  return s.empty() ? "  (none)\n" : s;
}

// Every live process whose environment has ZTUNE_TRIAL_DIR equal to `dir` or
// below it (a cluster dir finds every trial process of the cluster). Zombies
// have no readable environment: they count as gone (the worker reaps its own;
// it is the subreaper of the orphans).
std::vector<TrialProcess> TrialProcesses(const std::string& dir) {
  std::vector<TrialProcess> out;
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    const std::string env = ReadFile("/proc/" + name + "/environ");
    const std::string key = "ZTUNE_TRIAL_DIR=";
    for (size_t start = 0; start < env.size();) {
      size_t stop = env.find('\0', start);
      if (stop == std::string::npos) stop = env.size();
      const std::string var = env.substr(start, stop - start);
      start = stop + 1;
      if (!StartsWith(var, key)) continue;
      const std::string value = var.substr(key.size());
      if (value != dir && !StartsWith(value, dir + "/")) continue;
      TrialProcess p;
      p.pid = static_cast<pid_t>(std::stol(name));
      p.trial_dir = value;
      std::string cmd = ReadFile("/proc/" + name + "/cmdline");
      std::replace(cmd.begin(), cmd.end(), '\0', ' ');
      p.cmdline = cmd;
      for (const auto& line : Lines(ReadFile("/proc/" + name + "/status"))) {
        if (StartsWith(line, "SigIgn:")) p.sig_ignored = std::stoull(line.substr(7), nullptr, 16);
      }
      out.push_back(p);
      break;
    }
  }
  return out;
}

// Waits until no process of `dir` is left; the survivors in `left` if some are.
bool NoProcessLeft(const std::string& dir, milliseconds timeout,
                   std::vector<TrialProcess>* left = nullptr) {
  std::vector<TrialProcess> procs;
  bool gone = WaitFor(
      [&] {
        procs = TrialProcesses(dir);
        return procs.empty();
      },
      timeout);
  if (left != nullptr) *left = procs;
  return gone;
}

// Every process of the cluster's trials is gone within 5 s (else the
// survivors and the logs are printed).
void ExpectNoProcessLeft(const LocalCluster& cluster) {
  std::vector<TrialProcess> left;
  EXPECT_TRUE(NoProcessLeft(cluster.dir(), seconds(5), &left)) << Describe(left) << cluster.Logs();
}

// This file's cluster (slow heartbeats: Python children start slowly). At
// teardown, before the workers are stopped, every process started for a trial
// of this cluster that is still alive is killed with SIGKILL, so that a failing
// test leaves no orphan behind (a grandchild of a trainable has no PDEATHSIG).
class ProcessCluster : public LocalCluster {
 public:
  explicit ProcessCluster(const std::string& tag) : LocalCluster(tag, kTiming) {}
  ~ProcessCluster() {
    for (const auto& p : TrialProcesses(dir())) kill(p.pid, SIGKILL);
  }
};

// Every test checks its preconditions first: the SDK and the scripts are where
// the trainables file says, and the interpreter exists.
class ProcessTrainableE2ETest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(CheckEnvironment()); }
};

// Every result of a counter trial (either API): training_iteration 1..n
// exactly once, the exact counter value, and the automatic fields the worker
// fills. `step_key`: the function API's own step counter, equal to the
// iteration throughout. `one_run`: the results come from one uninterrupted
// run (or runs restored exactly where the previous one stopped), so
// time_total_s never decreases; after a failure the head keeps the first copy
// of each iteration, and the history splices two attempts whose clocks differ.
void ExpectCounterResults(const Json& results, const std::string& id, double start,
                          double increment, int64_t n, bool step_key, const std::string& why,
                          bool one_run = true) {
  SCOPED_TRACE(id + " " + why);
  ASSERT_EQ(results.size(), static_cast<size_t>(n)) << results.dump();
  double last_total = -1;
  for (int64_t i = 1; i <= n; ++i) {
    const Json& r = results[i - 1];
    ASSERT_EQ(r["training_iteration"], i) << r.dump();
    EXPECT_EQ(r["trial_id"], id) << r.dump();
    ASSERT_TRUE(r["value"].is_number()) << r.dump();
    EXPECT_EQ(r["value"].get<double>(), CounterValue(start, increment, i)) << r.dump();
    EXPECT_EQ(r["score"], r["value"]) << r.dump();
    if (step_key) {
      EXPECT_EQ(r["step"], i) << r.dump();
    }
    EXPECT_TRUE(r["done"].is_boolean()) << r.dump();
    EXPECT_TRUE(r["time_this_iter_s"].is_number()) << r.dump();
    EXPECT_TRUE(r["timestamp"].is_number()) << r.dump();
    EXPECT_TRUE(r["hostname"].is_string()) << r.dump();
    EXPECT_TRUE(r["pid"].is_number_integer()) << r.dump();
    ASSERT_TRUE(r["time_total_s"].is_number()) << r.dump();
    if (one_run) {
      EXPECT_GE(r["time_total_s"].get<double>(), last_total) << r.dump();
    }
    last_total = r["time_total_s"].get<double>();
  }
}

// The stdout lines "step N of trial X" of a counter_class trial's file, as (N, X).
std::vector<std::pair<int64_t, std::string>> StepLines(const std::string& text) {
  std::vector<std::pair<int64_t, std::string>> out;
  for (const auto& line : Lines(text)) {
    if (!StartsWith(line, "step ")) continue;
    const size_t of = line.find(" of trial ");
    if (of == std::string::npos) continue;
    out.emplace_back(std::stoll(line.substr(5, of - 5)), line.substr(of + 10));
  }
  return out;
}

std::string HeaderPrefix(const std::string& id, int attempt) {
  return "==== ztune: trial " + id + " attempt " + std::to_string(attempt) + " on worker ";
}

std::vector<std::string> Headers(const std::string& text) {
  std::vector<std::string> out;
  for (const auto& line : Lines(text)) {
    if (StartsWith(line, "==== ztune: ")) out.push_back(line);
  }
  return out;
}

// The child pid a header line names: "... (pid P) at ..." or "(pid P, actor reused)".
int64_t HeaderPid(const std::string& header) {
  const size_t p = header.find("(pid ");
  return p == std::string::npos ? -1 : std::stoll(header.substr(p + 5));
}

// ---------------------------------------------------------------------------
// 1. Class API round trip.

// counter_class, two configs, stop at 5, export "json" -> both TERMINATED;
// results 1..5 once each with value = start + 5 x increment (exact), the
// automatic fields filled by the worker (its pid), the export's value; each
// trial's stdout holds its own step lines 1..5; no process left.
TEST_F(ProcessTrainableE2ETest, ClassApiRunsToTheStopCriterion) {
  ProcessCluster cluster("proc-class");
  ASSERT_TRUE(StartHostingWorker(cluster, 2));
  const int64_t worker_pid = Workers(cluster)["a"]["pid"].get<int64_t>();

  std::string exp = SubmitSpec(cluster, R"({"trainable": "counter_class",
      "param_space": {"start": {"grid_search": [1.5, 100]}, "increment": 0.1},
      "stop": {"training_iteration": 5}, "export_formats": ["json"]})",
                               "spec");
  ASSERT_FALSE(exp.empty());
  ASSERT_TRUE(WaitFinished(cluster, exp)) << Diagnostics(cluster, exp);

  auto trials = Snapshot(cluster, exp);
  ASSERT_EQ(trials.size(), 2u);
  for (auto& [id, t] : trials) {
    SCOPED_TRACE(t.dump());
    const double start = t["config"]["start"].get<double>();
    EXPECT_EQ(StatusOf(t), "TERMINATED") << cluster.Logs();
    EXPECT_EQ(t["num_failures"], 0);
    EXPECT_EQ(IterationOf(t), 5);
    Json results = ResultsOf(cluster, id);
    ExpectCounterResults(results, id, start, 0.1, 5, false, "class API");
    for (const auto& r : results) {
      EXPECT_EQ(r["pid"], worker_pid) << "the worker fills pid with its own: " << r.dump();
      EXPECT_EQ(r["iterations_since_restore"], r["training_iteration"]) << r.dump();
    }
    ASSERT_TRUE(t["exports"].is_object());
    EXPECT_EQ(t["exports"]["json"]["value"].get<double>(), CounterValue(start, 0.1, 5));

    const std::string out = TrialFile(cluster, "a", id, "stdout");
    auto steps = StepLines(out);
    ASSERT_EQ(steps.size(), 5u) << out;
    for (int64_t i = 1; i <= 5; ++i) {
      EXPECT_EQ(steps[i - 1].first, i) << out;
      EXPECT_EQ(steps[i - 1].second, id) << out;
    }
    const std::string err = TrialFile(cluster, "a", id, "stderr");
    for (int i = 1; i <= 5; ++i) {
      EXPECT_EQ(Count(err, "stderr line " + std::to_string(i) + "\n"), 1u) << err;
    }
    EXPECT_TRUE(Contains(TrialFile(cluster, "a", id, "trial.log"), "stopped at iteration 5"));
  }
  ExpectNoProcessLeft(cluster);
}

// A trainables entry without export_formats declares nothing: a spec asking
// for a format it cannot produce is accepted, the trial still terminates,
// and the export's error is what the trial's exports hold.
TEST_F(ProcessTrainableE2ETest, AnUndeclaredExportFormatIsTriedAtTheEnd) {
  ProcessCluster cluster("proc-export");
  ASSERT_TRUE(StartHostingWorker(cluster, 1));
  std::string exp = SubmitSpec(cluster, R"({"trainable": "counter_class",
      "param_space": {"start": 0, "increment": 1},
      "stop": {"training_iteration": 2}, "export_formats": ["json", "onnx"]})",
                               "spec");
  ASSERT_FALSE(exp.empty());
  ASSERT_TRUE(WaitFinished(cluster, exp)) << Diagnostics(cluster, exp);
  Json t = GetTrial(cluster, TrialId(exp, 0));
  EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
  ASSERT_TRUE(t["exports"].is_object()) << t.dump();
  ASSERT_TRUE(t["exports"]["error"].is_string()) << t["exports"].dump();
  EXPECT_TRUE(Contains(t["exports"]["error"].get<std::string>(),
                       "unsupported export format 'onnx' (only 'json')"))
      << t["exports"].dump();
  ExpectNoProcessLeft(cluster);
}

// ---------------------------------------------------------------------------
// 2. Function API round trip.

// counter_function, stop at 5 -> TERMINATED; results 1..5 once with the exact
// value and step == training_iteration; the checkpoint the function reports
// with every result is taken (should_checkpoint) and kept; no process left.
TEST_F(ProcessTrainableE2ETest, FunctionApiRunsToTheStopCriterion) {
  ProcessCluster cluster("proc-function");
  ASSERT_TRUE(StartHostingWorker(cluster, 2));

  std::string exp = SubmitSpec(cluster, R"({"trainable": "counter_function",
      "param_space": {"start": {"grid_search": [0, 7.25]}, "increment": 0.3},
      "stop": {"training_iteration": 5}})",
                               "spec");
  ASSERT_FALSE(exp.empty());
  ASSERT_TRUE(WaitFinished(cluster, exp)) << Diagnostics(cluster, exp);

  auto trials = Snapshot(cluster, exp);
  ASSERT_EQ(trials.size(), 2u);
  for (auto& [id, t] : trials) {
    SCOPED_TRACE(t.dump());
    EXPECT_EQ(StatusOf(t), "TERMINATED") << cluster.Logs();
    EXPECT_EQ(t["num_failures"], 0);
    EXPECT_EQ(IterationOf(t), 5);
    Json results = ResultsOf(cluster, id);
    ExpectCounterResults(results, id, t["config"]["start"].get<double>(), 0.3, 5, true,
                         "function API");
    for (const auto& r : results) EXPECT_EQ(r["should_checkpoint"], true) << r.dump();
    // Every result asked for a checkpoint: the head took one (kept: all).
    EXPECT_GE(t["checkpoints"].size(), 1u);
    EXPECT_EQ(NewestCheckpoint(t), 5);
    // The function removes its ckpt_<i> directories once report() returns;
    // the worker removes its save/restore directories.
    for (const auto& entry : fs::directory_iterator(TrialDir(cluster, "a", id))) {
      const std::string name = entry.path().filename().string();
      EXPECT_FALSE(entry.is_directory() && StartsWith(name, ".ztune-"))
          << "left behind: " << entry.path();
    }
  }
  ExpectNoProcessLeft(cluster);
}

// ---------------------------------------------------------------------------
// 3. Function API resumes exactly after its worker's kill -9.

// counter_function with a checkpoint at every step on workers a and b (one
// CPU each), max_failures 1 -> once it has a persistent checkpoint at >= 5,
// kill -9 of its worker (its child dies with it: PDEATHSIG) -> retried on the
// other worker from the newest checkpoint; the function resumes from
// get_checkpoint() -> stopped further on: results 1..N exactly once, value
// exact and step == training_iteration throughout.
TEST_F(ProcessTrainableE2ETest, FunctionApiResumesExactlyAfterItsWorkerIsKilled) {
  ProcessCluster cluster("proc-function-kill");
  cluster.StartHead();
  cluster.StartWorker("a", 1, Hosting(cluster));
  cluster.StartWorker("b", 1, Hosting(cluster));
  ASSERT_TRUE(cluster.WaitForWorkers(2)) << cluster.Logs();
  auto workers = Workers(cluster);
  const std::map<std::string, size_t> slot = {{"a", 0}, {"b", 1}};

  // No stop criterion within reach: the test stops the trial itself, so that
  // the kill always lands mid-run however fast or slow the machine is.
  std::string exp = SubmitSpec(cluster, R"({"trainable": "counter_function",
      "param_space": {"start": 2, "increment": 0.1},
      "stop": {"training_iteration": 1000000}, "max_failures": 1})",
                               "spec");
  ASSERT_FALSE(exp.empty());
  const std::string id = TrialId(exp, 0);

  Json before;
  ASSERT_TRUE(WaitFor(
      [&] {
        before = GetTrial(cluster, id);
        return StatusOf(before) == "RUNNING" && before["worker"].is_string() &&
               NewestCheckpoint(before) >= 5;
      },
      seconds(20)))
      << before.dump() << cluster.Logs();
  const std::string victim = before["worker"].get<std::string>();
  const std::string survivor = victim == "a" ? "b" : "a";
  const std::string victim_id = workers[victim]["worker_id"].get<std::string>();
  cluster.worker(slot.at(victim)).Kill(SIGKILL);
  const int64_t checkpoint_at_kill = NewestCheckpoint(before);

  // The dead worker's child dies with it (PR_SET_PDEATHSIG).
  std::vector<TrialProcess> left;
  EXPECT_TRUE(NoProcessLeft(WorkDir(cluster, victim), seconds(5), &left))
      << "the killed worker's child outlived it:\n"
      << Describe(left);

  // The failure is recorded; by then the trial's iteration is the last one
  // attempt 1 stored (the kill lands some steps after `before`), or more.
  Json after;
  ASSERT_TRUE(WaitFor(
      [&] {
        after = GetTrial(cluster, id);
        return after["num_failures"] == 1;
      },
      seconds(20)))
      << after.dump() << cluster.Logs();
  const int64_t at_failure = IterationOf(after);
  // Retried on the survivor, restored there, and past anything attempt 1 stored.
  ASSERT_TRUE(WaitFor(
      [&] {
        after = GetTrial(cluster, id);
        return StatusOf(after) == "RUNNING" && after["worker"] == survivor &&
               IterationOf(after) >= at_failure + 5 &&
               Contains(TrialFile(cluster, survivor, id, "trial.log"), "restored from checkpoint");
      },
      seconds(20)))
      << after.dump() << cluster.Logs();
  ASSERT_EQ(cluster.Cli("stop " + id).exit_code, 0);
  ASSERT_TRUE(WaitFinished(cluster, exp)) << Diagnostics(cluster, exp);

  Json t = GetTrial(cluster, id);
  SCOPED_TRACE(t.dump());
  EXPECT_EQ(StatusOf(t), "TERMINATED");
  EXPECT_EQ(t["num_failures"], 1);
  EXPECT_EQ(t["num_restores"], 1);
  EXPECT_TRUE(Contains(ErrorOf(t), victim_id)) << "the error names the lost worker";
  const int64_t n = IterationOf(t);
  ASSERT_GE(n, at_failure + 5);
  ExpectCounterResults(ResultsOf(cluster, id), id, 2, 0.1, n, true, "resumed after kill -9",
                       /*one_run=*/false);

  // The retry restored the newest checkpoint the head had (>= the one seen
  // before the kill), and the function's first step after it continued there.
  const std::string log = TrialFile(cluster, survivor, id, "trial.log");
  const size_t p = log.find("restored from checkpoint at iteration ");
  ASSERT_NE(p, std::string::npos) << log;
  const int64_t restored_at = std::stoll(log.substr(p + 38));
  EXPECT_GE(restored_at, checkpoint_at_kill) << log;
  EXPECT_TRUE(NoProcessLeft(cluster.dir(), seconds(5), &left)) << Describe(left) << cluster.Logs();
  std::cerr << "[ function API: killed at iteration >= " << IterationOf(before)
            << " (<= " << at_failure << "), restored at " << restored_at << ", stopped at " << n
            << " ]\n";
}

// ---------------------------------------------------------------------------
// 4. A directory checkpoint moves to another worker.

// counter_class on worker a -> pause (a SAVE: the directory packed into the
// head's memory checkpoint) -> worker b starts, a is stopped -> resume: the
// trial restores on b (the directory unpacked there) and continues with the
// exact value; the script's own step numbering continues too.
TEST_F(ProcessTrainableE2ETest, PausedClassTrialResumesOnAnotherWorker) {
  ProcessCluster cluster("proc-pause-move");
  ASSERT_TRUE(StartHostingWorker(cluster, 1));

  std::string exp = SubmitSpec(cluster, R"({"trainable": "counter_class",
      "param_space": {"start": 3, "increment": 0.1},
      "stop": {"training_iteration": 1000000}})",
                               "spec");
  ASSERT_FALSE(exp.empty());
  const std::string id = TrialId(exp, 0);
  Json t;
  ASSERT_TRUE(WaitFor(
      [&] {
        t = GetTrial(cluster, id);
        return StatusOf(t) == "RUNNING" && IterationOf(t) >= 3;
      },
      seconds(20)))
      << t.dump() << cluster.Logs();
  ASSERT_EQ(t["worker"], "a");

  auto r = cluster.Cli("pause " + id);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_TRUE(WaitFor(
      [&] {
        t = GetTrial(cluster, id);
        return StatusOf(t) == "PAUSED";
      },
      seconds(10)))
      << t.dump() << cluster.Logs();
  const int64_t at_pause = IterationOf(t);
  ASSERT_GE(at_pause, 3);
  // The paused trial's actor is stopped: its process is gone.
  std::vector<TrialProcess> left;
  EXPECT_TRUE(NoProcessLeft(cluster.dir(), seconds(5), &left)) << Describe(left);

  cluster.StartWorker("b", 1, Hosting(cluster));
  cluster.worker(0).Stop();
  ASSERT_TRUE(WaitFor(
      [&] {
        auto w = Workers(cluster);
        return w.count("b") && w["b"]["alive"] == true &&
               (!w.count("a") || w["a"]["alive"] == false);
      },
      seconds(10)))
      << cluster.CliJson("workers").dump(2) << cluster.Logs();

  r = cluster.Cli("resume " + id);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_TRUE(WaitFor(
      [&] {
        t = GetTrial(cluster, id);
        return StatusOf(t) == "RUNNING" && t["worker"] == "b" && IterationOf(t) >= at_pause + 3;
      },
      seconds(20)))
      << t.dump() << cluster.Logs();
  ASSERT_EQ(cluster.Cli("stop " + id).exit_code, 0);
  ASSERT_TRUE(WaitFinished(cluster, exp)) << Diagnostics(cluster, exp);

  t = GetTrial(cluster, id);
  SCOPED_TRACE(t.dump());
  EXPECT_EQ(StatusOf(t), "TERMINATED");
  EXPECT_EQ(t["num_failures"], 0);
  EXPECT_EQ(t["num_restores"], 1);
  const int64_t n = IterationOf(t);
  ExpectCounterResults(ResultsOf(cluster, id), id, 3, 0.1, n, false, "moved a -> b");

  const std::string log_a = TrialFile(cluster, "a", id, "trial.log");
  EXPECT_TRUE(Contains(log_a, "saved checkpoint at iteration " + std::to_string(at_pause)))
      << log_a;
  const std::string log_b = TrialFile(cluster, "b", id, "trial.log");
  EXPECT_TRUE(Contains(log_b, "restored from checkpoint at iteration " + std::to_string(at_pause)))
      << log_b;
  // On b the script was told the restored iteration: its first step is at_pause + 1.
  const std::string out_b = TrialFile(cluster, "b", id, "stdout");
  auto steps = StepLines(out_b);
  ASSERT_FALSE(steps.empty()) << out_b;
  EXPECT_EQ(steps.front().first, at_pause + 1) << out_b;
  // The step in flight when `stop` came may have run (and printed) without
  // its result being kept.
  EXPECT_GE(steps.back().first, n) << out_b;
  EXPECT_LE(steps.back().first, n + 1) << out_b;
  for (size_t i = 1; i < steps.size(); ++i) EXPECT_EQ(steps[i].first, steps[i - 1].first + 1);
  const auto headers = Headers(out_b);
  ASSERT_EQ(headers.size(), 1u) << out_b;
  EXPECT_TRUE(StartsWith(headers[0], HeaderPrefix(id, 2))) << out_b;
  EXPECT_TRUE(NoProcessLeft(cluster.dir(), seconds(5), &left)) << Describe(left) << cluster.Logs();
}

// ---------------------------------------------------------------------------
// 5. reset_config: one process serves every trial; output stays per trial.

// reuse_actors, four counter_class trials with distinct starts on a 1-CPU
// worker -> one actor, created once and RESET into each next trial (the same
// child pid in every header); each trial's values follow its own config; each
// trial's stdout/stderr hold exactly its own lines.
TEST_F(ProcessTrainableE2ETest, ReusedActorKeepsEachTrialsOutputApart) {
  ProcessCluster cluster("proc-reuse");
  ASSERT_TRUE(StartHostingWorker(cluster, 1));

  std::string exp = SubmitSpec(cluster, R"({"trainable": "counter_class",
      "param_space": {"start": {"grid_search": [0, 100, 200, 300]}, "increment": 1},
      "stop": {"training_iteration": 3}, "reuse_actors": true})",
                               "spec");
  ASSERT_FALSE(exp.empty());
  ASSERT_TRUE(WaitFinished(cluster, exp)) << Diagnostics(cluster, exp);

  auto trials = Snapshot(cluster, exp);
  ASSERT_EQ(trials.size(), 4u);
  std::set<int64_t> child_pids;
  std::string all_logs;
  for (int k = 0; k < 4; ++k) {
    const std::string id = TrialId(exp, k);
    const Json& t = trials[id];
    SCOPED_TRACE(t.dump());
    EXPECT_EQ(StatusOf(t), "TERMINATED") << cluster.Logs();
    EXPECT_EQ(t["num_failures"], 0);
    ExpectCounterResults(ResultsOf(cluster, id), id, t["config"]["start"].get<double>(), 1, 3,
                         false, "reused actor");

    const std::string log = TrialFile(cluster, "a", id, "trial.log");
    all_logs += log;
    if (k > 0) {
      EXPECT_TRUE(Contains(log, "actor reused from trial " + TrialId(exp, k - 1))) << log;
    }
    for (const std::string file : {"stdout", "stderr"}) {
      const std::string text = TrialFile(cluster, "a", id, file);
      SCOPED_TRACE(file + ":\n" + text);
      const auto headers = Headers(text);
      ASSERT_EQ(headers.size(), 1u);
      EXPECT_TRUE(StartsWith(headers[0], HeaderPrefix(id, 1)));
      EXPECT_EQ(Contains(headers[0], ", actor reused)"), k > 0);
      child_pids.insert(HeaderPid(headers[0]));
      // Nothing but the header and this trial's three lines.
      const auto lines = Lines(text);
      ASSERT_EQ(lines.size(), 4u);
      for (int i = 1; i <= 3; ++i) {
        EXPECT_EQ(lines[i], file == "stdout" ? "step " + std::to_string(i) + " of trial " + id
                                             : "stderr line " + std::to_string(i));
      }
    }
  }
  EXPECT_EQ(Count(all_logs, "created actor"), 1u) << all_logs;
  EXPECT_EQ(Count(all_logs, "actor reused from"), 3u) << all_logs;
  EXPECT_EQ(child_pids.size(), 1u) << "one process serves every trial";
  ExpectNoProcessLeft(cluster);
}

// ---------------------------------------------------------------------------
// 6. Failures: each an ERROR naming its cause; no process left.

// misbehave at step 2 with max_failures 1: a segfault, exit(3) and a raised
// exception -> each trial fails twice (attempt 1, then its retry from scratch)
// and ends ERROR with a message naming the cause: the signal, the status and
// the child's stderr, the exception; every process is gone.
TEST_F(ProcessTrainableE2ETest, CrashingChildrenAreErrorsNamingTheCause) {
  ProcessCluster cluster("proc-crash");
  ASSERT_TRUE(StartHostingWorker(cluster, 3));

  std::string exp = SubmitSpec(cluster, R"({"trainable": "misbehave",
      "param_space": {"mode": {"grid_search": ["segfault", "exit3", "raise"]}, "at_step": 2},
      "stop": {"training_iteration": 5}, "max_failures": 1})",
                               "spec");
  ASSERT_FALSE(exp.empty());
  ASSERT_TRUE(WaitFinished(cluster, exp)) << Diagnostics(cluster, exp);

  const std::map<std::string, std::vector<std::string>> expected = {
      {"segfault", {"killed by signal 11", "during step of iteration 2"}},
      {"exit3", {"exited with status 3", "during step of iteration 2", "about to exit 3"}},
      {"raise", {"ValueError: bad step"}},
  };
  auto trials = Snapshot(cluster, exp);
  ASSERT_EQ(trials.size(), 3u);
  for (auto& [id, t] : trials) {
    const std::string mode = t["config"]["mode"];
    SCOPED_TRACE(mode + ": " + t.dump(2));
    EXPECT_EQ(StatusOf(t), "ERROR") << cluster.Logs();
    EXPECT_EQ(t["num_failures"], 2);
    EXPECT_EQ(t["attempt"], 2);
    EXPECT_EQ(IterationOf(t), 1);
    ExpectResultsOneToN(cluster, id, 1);
    ASSERT_EQ(t["error_log"].size(), 2u);
    for (const auto& e : t["error_log"]) {
      for (const auto& needle : expected.at(mode)) {
        EXPECT_TRUE(Contains(e.get<std::string>(), needle)) << "missing '" << needle << "'";
      }
    }
    for (const auto& needle : expected.at(mode))
      EXPECT_TRUE(Contains(ErrorOf(t), needle)) << needle;
    // Both attempts' headers in the trial's files.
    const std::string err = TrialFile(cluster, "a", id, "stderr");
    const auto headers = Headers(err);
    ASSERT_EQ(headers.size(), 2u) << err;
    EXPECT_TRUE(StartsWith(headers[0], HeaderPrefix(id, 1))) << err;
    EXPECT_TRUE(StartsWith(headers[1], HeaderPrefix(id, 2))) << err;
    if (mode == "exit3") {
      EXPECT_EQ(Count(err, "about to exit 3\n"), 2u) << err;
    }
    if (mode == "raise") {
      // The SDK writes each error reply to stderr too: one traceback per attempt.
      EXPECT_EQ(Count(err, "Traceback (most recent call last)"), 2u) << err;
    }
  }
  ExpectNoProcessLeft(cluster);
  ASSERT_TRUE(WaitFor([&] { return AvailableCpu(Workers(cluster)["a"]) == 3.0; }, seconds(5)))
      << cluster.Logs();
}

// misbehave hanging in step 1 (one plainly, one ignoring SIGTERM) with
// timeouts.step_s 1, force_cleanup_s 1 and stop_grace_s 0.2 -> each trial ERROR
// naming the step timeout; the worker kills the group at the STOP's deadline
// (SIGTERM, then SIGKILL after the grace) -> no process left within
// force_cleanup_s + grace + margin of the ERROR, and the worker's CPUs come
// back only once the processes are gone.
TEST_F(ProcessTrainableE2ETest, HungChildrenAreKilledAfterTheStepTimeout) {
  // A grace well under the head's own 1 s wait for a STOP reply past its
  // deadline (head/executor.cc kStopReplyGraceMs); a longer one is the case of
  // ANextTrialWaitsUntilAKilledChildWithALongGraceIsGone.
  constexpr double kForceCleanupS = 1, kGraceS = 0.2;
  // Beyond force_cleanup_s + grace: polling, 50 ms heartbeats, a loaded machine.
  constexpr double kMarginS = 2;
  ProcessCluster cluster("proc-hang");
  cluster.StartHead();
  cluster.StartWorker("a", 2, Hosting(cluster, kGraceS));
  ASSERT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();
  const std::string worker_id = Workers(cluster)["a"]["worker_id"].get<std::string>();

  std::string exp = SubmitSpec(cluster, R"({"trainable": "misbehave",
      "param_space": {"mode": {"grid_search": ["hang", "ignore_sigterm"]}, "at_step": 1},
      "stop": {"training_iteration": 5}, "timeouts": {"step_s": 1}, "force_cleanup_s": 1})",
                               "spec");
  ASSERT_FALSE(exp.empty());
  const std::string hang = TrialId(exp, 0), deaf = TrialId(exp, 1);

  // Both children are there while their step hangs, the deaf one ignoring
  // SIGTERM (so that the test below sees the SIGKILL path).
  const uint64_t kSigTermBit = uint64_t{1} << (SIGTERM - 1);
  std::vector<TrialProcess> procs;
  ASSERT_TRUE(WaitFor(
      [&] {
        procs = TrialProcesses(cluster.dir());
        bool hang_seen = false, deaf_ignoring = false;
        for (const auto& p : procs) {
          if (p.trial_dir == TrialDir(cluster, "a", hang)) hang_seen = true;
          if (p.trial_dir == TrialDir(cluster, "a", deaf) && (p.sig_ignored & kSigTermBit)) {
            deaf_ignoring = true;
          }
        }
        return hang_seen && deaf_ignoring;
      },
      seconds(20)))
      << Describe(procs) << cluster.Logs();

  std::map<std::string, Json> trials;
  ASSERT_TRUE(WaitFor(
      [&] {
        trials = Snapshot(cluster, exp);
        return StatusOf(trials[hang]) == "ERROR" && StatusOf(trials[deaf]) == "ERROR";
      },
      seconds(20)))
      << Json(trials).dump(2) << cluster.Logs();
  const auto t_error = Clock::now();
  // Each round reads the worker's free CPUs, then the process table: a process
  // found after a reading that showed the CPUs free was alive at that reading.
  std::vector<TrialProcess> left;
  std::string freed_early;
  double gone_after = -1;
  const auto deadline =
      milliseconds(static_cast<int64_t>((kForceCleanupS + kGraceS + kMarginS) * 1000));
  EXPECT_TRUE(WaitFor(
      [&] {
        const bool cpus_free = AvailableCpu(Workers(cluster)["a"]) == 2.0;
        left = TrialProcesses(cluster.dir());
        if (left.empty() && gone_after < 0) gone_after = SecondsSince(t_error);
        if (cpus_free && !left.empty() && freed_early.empty()) freed_early = Describe(left);
        return cpus_free && left.empty();
      },
      deadline))
      << "after " << SecondsSince(t_error) << " s, processes:\n"
      << Describe(left) << cluster.Logs();
  EXPECT_TRUE(freed_early.empty())
      << "the CPUs came back while processes of the killed actors lived:\n"
      << freed_early;

  for (const auto& id : {hang, deaf}) {
    const Json& t = trials[id];
    SCOPED_TRACE(t.dump(2));
    EXPECT_EQ(t["num_failures"], 1);
    EXPECT_EQ(IterationOf(t), 0);
    EXPECT_TRUE(Contains(ErrorOf(t), "TRAIN of attempt 1 got no answer from worker " + worker_id +
                                         " within 1 s (spec timeouts.step_s)"));
    // SIGTERM comes stop_grace_s before the STOP's deadline: the hung child
    // that obeys it ends there (its step fails naming the signal); the one
    // that ignores it is SIGKILLed at the deadline.
    const std::string log = TrialFile(cluster, "a", id, "trial.log");
    EXPECT_TRUE(Contains(
        log, id == hang ? "was killed by signal 15" : "actor did not stop within 1000 ms; killed"))
        << log;
  }
  std::cerr << "[ hung children gone " << gone_after << " s after the trials' ERROR ]\n";
}

// A trainable that leaves a `sleep 1000` behind in its process group: while
// the trial runs, the sleep is there (the scan sees grandchildren) -> stop ->
// TERMINATED, and the sleep is gone too.
TEST_F(ProcessTrainableE2ETest, ALeftoverGrandchildIsEndedWithItsTrial) {
  ProcessCluster cluster("proc-leftover");
  ASSERT_TRUE(StartHostingWorker(cluster, 1));

  std::string exp = SubmitSpec(cluster, R"({"trainable": "misbehave",
      "param_space": {"mode": "spawn_child", "at_step": 2},
      "stop": {"training_iteration": 1000000}})",
                               "spec");
  ASSERT_FALSE(exp.empty());
  const std::string id = TrialId(exp, 0);
  std::vector<TrialProcess> procs;
  ASSERT_TRUE(WaitFor(
      [&] {
        procs = TrialProcesses(TrialDir(cluster, "a", id));
        for (const auto& p : procs) {
          if (StartsWith(p.cmdline, "sleep 1000")) return true;
        }
        return false;
      },
      seconds(20)))
      << Describe(procs) << cluster.Logs();
  EXPECT_EQ(procs.size(), 2u) << Describe(procs);

  ASSERT_EQ(cluster.Cli("stop " + id).exit_code, 0);
  ASSERT_TRUE(WaitFinished(cluster, exp)) << Diagnostics(cluster, exp);
  Json t = GetTrial(cluster, id);
  EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
  EXPECT_EQ(t["num_failures"], 0) << t.dump();
  std::vector<TrialProcess> left;
  // The worker ends the group within 2 x stop_grace_s of the stop.
  EXPECT_TRUE(NoProcessLeft(cluster.dir(), seconds(4), &left)) << Describe(left) << cluster.Logs();
  ASSERT_TRUE(WaitFor([&] { return AvailableCpu(Workers(cluster)["a"]) == 1.0; }, seconds(5)))
      << cluster.Logs();
}

// ---------------------------------------------------------------------------
// 7. Placement by trainable.

// Worker a hosts the SDK scripts (2 CPUs), worker b does not (4 CPUs) -> a spec
// naming an unknown trainable is refused, listing what the workers offer; a
// counter_class request only b could hold is infeasible; four counter_class
// trials all run on a (never on b) and succeed.
TEST_F(ProcessTrainableE2ETest, TrialsArePlacedOnlyOnWorkersHostingTheirTrainable) {
  ProcessCluster cluster("proc-placement");
  cluster.StartHead();
  cluster.StartWorker("a", 2, Hosting(cluster));
  cluster.StartWorker("b", 4);
  ASSERT_TRUE(cluster.WaitForWorkers(2)) << cluster.Logs();
  auto workers = Workers(cluster);
  const int64_t a_pid = workers["a"]["pid"].get<int64_t>();

  const std::string bad = cluster.dir() + "/bad.json";
  std::ofstream(bad) << R"({"trainable": "no_such_thing", "stop": {"training_iteration": 1}})";
  auto r = cluster.Cli("submit " + bad);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  for (const char* name : {"no_such_thing", "noop", "quadratic", "counter_class",
                           "counter_function", "misbehave", "gpu_report"}) {
    EXPECT_TRUE(Contains(r.out, name)) << name << " not in: " << r.out;
  }
  EXPECT_EQ(cluster.CliJson("experiments")["experiments"].size(), 0u) << "nothing stored";

  const std::string big = cluster.dir() + "/big.json";
  std::ofstream(big) << R"({"trainable": "counter_class", "stop": {"training_iteration": 1},
      "resources": {"bundles": [{"CPU": 3}]}})";
  r = cluster.Cli("submit " + big);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Contains(r.out, "infeasible")) << r.out;
  EXPECT_TRUE(Contains(r.out, "counter_class")) << r.out;

  std::string exp = SubmitSpec(cluster, R"({"trainable": "counter_class",
      "param_space": {"start": {"grid_search": [0, 10, 20, 30]}},
      "stop": {"training_iteration": 4}})",
                               "spec");
  ASSERT_FALSE(exp.empty());
  // Every snapshot until the end: a trial with a worker has a.
  bool finished = false;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto snapshot = Snapshot(cluster, exp);
        size_t done = 0;
        for (auto& [id, t] : snapshot) {
          EXPECT_TRUE(t["worker"].is_null() || t["worker"] == "a") << t.dump();
          done += StatusOf(t) == "TERMINATED" || StatusOf(t) == "ERROR";
        }
        finished = snapshot.size() == 4 && done == 4;
        return finished;
      },
      seconds(25)))
      << cluster.Logs();

  auto trials = Snapshot(cluster, exp);
  for (auto& [id, t] : trials) {
    SCOPED_TRACE(t.dump());
    EXPECT_EQ(StatusOf(t), "TERMINATED");
    Json results = ResultsOf(cluster, id);
    ExpectCounterResults(results, id, t["config"]["start"].get<double>(), 1, 4, false,
                         "placed by trainable");
    for (const auto& res : results) EXPECT_EQ(res["pid"], a_pid) << "ran on a: " << res.dump();
    EXPECT_TRUE(fs::exists(TrialDir(cluster, "a", id) + "/stdout"));
    EXPECT_FALSE(fs::exists(TrialDir(cluster, "b", id)));
  }
  EXPECT_EQ(Workers(cluster)["b"]["alive"], true);
}

// ---------------------------------------------------------------------------
// 8. GPUs.

// `n` gpu_report trials, each asking for `gpu` GPUs with one CPU, that run
// until stopped; the experiment id ("" if refused).
std::string SubmitEndlessGpuTrials(LocalCluster& cluster, int n, double gpu,
                                   const std::string& name) {
  Json spec = Json::parse(R"({"trainable": "gpu_report", "param_space": {"steps": 1000000000},
      "stop": {"training_iteration": 1000000000}})");
  spec["num_samples"] = n;
  spec["resources"] = Json{{"bundles", Json::array({Json{{"CPU", 1}, {"GPU", gpu}}})}};
  return SubmitSpec(cluster, spec.dump(), name);
}

// The devices of DevicesWhenAllRunning, one entry per trial.
std::multiset<std::string> DeviceSet(const std::map<std::string, std::string>& devices) {
  std::multiset<std::string> seen;
  for (const auto& [id, d] : devices) seen.insert(d);
  return seen;
}

// Trials that run until stopped: each trial's CUDA_VISIBLE_DEVICES, read once
// all `n` of them are RUNNING with a result in one snapshot (so that they
// held their GPUs together).
std::map<std::string, std::string> DevicesWhenAllRunning(LocalCluster& cluster,
                                                         const std::string& exp, size_t n) {
  std::map<std::string, std::string> devices;
  std::map<std::string, Json> snapshot;
  bool ok = WaitFor(
      [&] {
        snapshot = Snapshot(cluster, exp);
        devices.clear();
        for (auto& [id, t] : snapshot) {
          if (StatusOf(t) != "RUNNING" || !t["last_result"].is_object()) return false;
          const Json& v = t["last_result"]["cuda_visible_devices"];
          if (!v.is_string()) return false;
          devices[id] = v.get<std::string>();
        }
        return snapshot.size() == n;
      },
      seconds(20));
  EXPECT_TRUE(ok) << Json(snapshot).dump(2) << cluster.Logs();
  return devices;
}

// A worker with --gpus 2 -> two concurrent {CPU 1, GPU 1} trials see disjoint
// CUDA_VISIBLE_DEVICES "0" and "1"; four concurrent {GPU 0.5} trials share the
// devices two by two; a CPU-only trial sees an empty (set) variable.
TEST_F(ProcessTrainableE2ETest, TrialsSeeTheirBundlesGpusInCudaVisibleDevices) {
  ProcessCluster cluster("proc-gpu");
  cluster.StartHead();
  cluster.StartWorker("g", 6, Hosting(cluster, 0.5, {"--gpus", "2"}));
  ASSERT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();
  EXPECT_EQ(Workers(cluster)["g"]["gpu_ids"], Json::array({0, 1}));

  std::string whole = SubmitEndlessGpuTrials(cluster, 2, 1, "whole");
  ASSERT_FALSE(whole.empty());
  auto devices = DevicesWhenAllRunning(cluster, whole, 2);
  EXPECT_EQ(DeviceSet(devices), (std::multiset<std::string>{"0", "1"})) << Json(devices).dump();
  ASSERT_EQ(cluster.Cli("stop " + whole).exit_code, 0);
  ASSERT_TRUE(WaitFinished(cluster, whole)) << Diagnostics(cluster, whole);

  std::string half = SubmitEndlessGpuTrials(cluster, 4, 0.5, "half");
  ASSERT_FALSE(half.empty());
  std::string cpu_only = SubmitSpec(cluster, R"({"trainable": "gpu_report",
      "param_space": {"steps": 2}, "stop": {"training_iteration": 10}})",
                                    "cpu");
  ASSERT_FALSE(cpu_only.empty());
  devices = DevicesWhenAllRunning(cluster, half, 4);
  EXPECT_EQ(DeviceSet(devices), (std::multiset<std::string>{"0", "0", "1", "1"}))
      << Json(devices).dump();
  ASSERT_EQ(cluster.Cli("stop " + half).exit_code, 0);
  ASSERT_TRUE(WaitFinished(cluster, half)) << Diagnostics(cluster, half);

  ASSERT_TRUE(WaitFinished(cluster, cpu_only)) << Diagnostics(cluster, cpu_only);
  const std::string cpu_id = TrialId(cpu_only, 0);
  Json t = GetTrial(cluster, cpu_id);
  EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
  Json results = ResultsOf(cluster, cpu_id);
  ASSERT_EQ(results.size(), 2u) << results.dump();
  for (const auto& r : results) {
    EXPECT_EQ(r["cuda_visible_devices"], "") << "set and empty, as Ray: " << r.dump();
  }
  EXPECT_EQ(results[1]["done"], true);
  ExpectNoProcessLeft(cluster);
}

// A worker started where CUDA_VISIBLE_DEVICES is set (a Slurm step or a
// container on a shared machine, given devices 5 and 7) advertises those
// devices, and its trials get them, never 0 or 1, which belong to someone
// else; --gpus N takes the first N of them.
TEST_F(ProcessTrainableE2ETest, WorkersHandOutTheDevicesTheirCudaVisibleDevicesLists) {
  ProcessCluster cluster("proc-gpu-env");
  cluster.StartHead();
  cluster.StartWorker("g", 4, Hosting(cluster), {"CUDA_VISIBLE_DEVICES=5,7"});
  cluster.StartWorker("h", 4, Hosting(cluster, 0.5, {"--gpus", "1"}), {"CUDA_VISIBLE_DEVICES=3,2"});
  ASSERT_TRUE(cluster.WaitForWorkers(2)) << cluster.Logs();
  Json workers = Workers(cluster);
  EXPECT_EQ(workers["g"]["gpu_ids"], Json::array({5, 7})) << workers.dump();
  EXPECT_EQ(workers["g"]["resources_total"]["GPU"], 2) << workers.dump();
  EXPECT_EQ(workers["h"]["gpu_ids"], Json::array({3})) << workers.dump();

  std::string exp = SubmitEndlessGpuTrials(cluster, 3, 1, "env");
  ASSERT_FALSE(exp.empty());
  auto devices = DevicesWhenAllRunning(cluster, exp, 3);
  EXPECT_EQ(DeviceSet(devices), (std::multiset<std::string>{"3", "5", "7"}))
      << Json(devices).dump();
  ASSERT_EQ(cluster.Cli("stop " + exp).exit_code, 0);
  ASSERT_TRUE(WaitFinished(cluster, exp)) << Diagnostics(cluster, exp);
  ExpectNoProcessLeft(cluster);
}

// ---------------------------------------------------------------------------
// 9. Per-trial stdout/stderr across a retry.

// Two counter_class trials side by side on one worker, max_failures 1 -> the
// child of the first is killed with SIGKILL -> the trial fails ("signal 9")
// and its retry, attempt 2, starts from scratch on the same worker -> its
// stdout/stderr hold two headers (attempts 1 and 2) each followed by its own
// lines only, counting from 1 again; the other trial's files one header and
// only its lines.
TEST_F(ProcessTrainableE2ETest, PerTrialOutputFilesGetAHeaderPerAttempt) {
  ProcessCluster cluster("proc-logs");
  ASSERT_TRUE(StartHostingWorker(cluster, 2));

  std::string exp = SubmitSpec(cluster, R"({"trainable": "counter_class",
      "param_space": {"start": {"grid_search": [0, 1000]}},
      "stop": {"training_iteration": 1000000}, "max_failures": 1})",
                               "spec");
  ASSERT_FALSE(exp.empty());
  const std::string victim = TrialId(exp, 0), other = TrialId(exp, 1);
  const std::string victim_dir = TrialDir(cluster, "a", victim);

  std::map<std::string, Json> trials;
  ASSERT_TRUE(WaitFor(
      [&] {
        trials = Snapshot(cluster, exp);
        return trials.size() == 2 && IterationOf(trials[victim]) >= 3 &&
               IterationOf(trials[other]) >= 3;
      },
      seconds(20)))
      << Json(trials).dump(2) << cluster.Logs();
  auto procs = TrialProcesses(victim_dir);
  ASSERT_EQ(procs.size(), 1u) << Describe(procs);
  ASSERT_TRUE(Contains(procs[0].cmdline, "counter_class.py")) << Describe(procs);
  ASSERT_EQ(kill(procs[0].pid, SIGKILL), 0);

  // Attempt 2 is running and has printed a few steps.
  Json t;
  ASSERT_TRUE(WaitFor(
      [&] {
        t = GetTrial(cluster, victim);
        if (StatusOf(t) != "RUNNING" || t["attempt"] != 2) return false;
        const std::string out = ReadFile(victim_dir + "/stdout");
        const size_t h2 = out.find(HeaderPrefix(victim, 2));
        return h2 != std::string::npos && StepLines(out.substr(h2)).size() >= 3;
      },
      seconds(20)))
      << t.dump() << cluster.Logs();
  ASSERT_EQ(cluster.Cli("stop " + exp).exit_code, 0);
  ASSERT_TRUE(WaitFinished(cluster, exp)) << Diagnostics(cluster, exp);

  trials = Snapshot(cluster, exp);
  t = trials[victim];
  EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
  EXPECT_EQ(t["num_failures"], 1) << t.dump();
  ASSERT_EQ(t["error_log"].size(), 1u) << t.dump();
  EXPECT_TRUE(Contains(t["error_log"][0].get<std::string>(), "killed by signal 9")) << t.dump();
  ExpectCounterResults(ResultsOf(cluster, victim), victim, 0, 1, IterationOf(t), false,
                       "retried from scratch", /*one_run=*/false);
  EXPECT_EQ(StatusOf(trials[other]), "TERMINATED");
  EXPECT_EQ(trials[other]["num_failures"], 0);

  // The victim's files: header 1, its lines from 1, header 2, its lines from 1
  // again. The SIGKILL may land inside a line (with PYTHONUNBUFFERED set,
  // print() writes the text and its newline separately); the worker then
  // writes header 2 on a new line after that partial line (see
  // EveryHeaderStartsOnALineOfItsOwn below): such a line is split
  // here, and its first part must be the start of the expected line.
  for (const std::string file : {"stdout", "stderr"}) {
    const std::string text = ReadFile(victim_dir + "/" + file);
    SCOPED_TRACE(victim + " " + file + ":\n" + text);
    std::vector<std::string> lines;
    for (const auto& line : Lines(text)) {
      const size_t h = line.find("==== ztune: ");
      if (h != std::string::npos && h > 0) {
        lines.push_back(line.substr(0, h));
        lines.push_back(line.substr(h));
      } else {
        lines.push_back(line);
      }
    }
    ASSERT_FALSE(lines.empty());
    EXPECT_TRUE(StartsWith(lines[0], HeaderPrefix(victim, 1)));
    std::vector<std::string> headers;
    for (const auto& line : lines) {
      if (StartsWith(line, "==== ztune: ")) headers.push_back(line);
    }
    ASSERT_EQ(headers.size(), 2u);
    EXPECT_TRUE(StartsWith(headers[1], HeaderPrefix(victim, 2)));
    EXPECT_NE(HeaderPid(headers[0]), HeaderPid(headers[1])) << "a new process for attempt 2";
    int64_t expect = 0;
    int header_count = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string& line = lines[i];
      if (StartsWith(line, "==== ztune: ")) {
        ++header_count;
        EXPECT_TRUE(header_count == 1 || expect >= 4) << "attempt 1 printed at least 3 steps";
        expect = 1;
        continue;
      }
      const std::string want = file == "stdout"
                                   ? "step " + std::to_string(expect) + " of trial " + victim
                                   : "stderr line " + std::to_string(expect);
      const bool cut_by_the_kill = header_count == 1 && i + 1 < lines.size() &&
                                   StartsWith(lines[i + 1], HeaderPrefix(victim, 2));
      if (cut_by_the_kill && line != want) {
        EXPECT_TRUE(!line.empty() && StartsWith(want, line))
            << "'" << line << "' vs '" << want << "'";
      } else {
        EXPECT_EQ(line, want);
      }
      ++expect;
    }
  }
  for (const std::string file : {"stdout", "stderr"}) {
    const std::string text = TrialFile(cluster, "a", other, file);
    SCOPED_TRACE(other + " " + file + ":\n" + text);
    const auto lines = Lines(text);
    ASSERT_GE(lines.size(), 4u);
    EXPECT_TRUE(StartsWith(lines[0], HeaderPrefix(other, 1)));
    EXPECT_EQ(Headers(text).size(), 1u);
    for (size_t i = 1; i < lines.size(); ++i) {
      EXPECT_EQ(lines[i], file == "stdout" ? "step " + std::to_string(i) + " of trial " + other
                                           : "stderr line " + std::to_string(i));
    }
  }
  ExpectNoProcessLeft(cluster);
}

// ---------------------------------------------------------------------------
// 10. A killed actor's resources with a stop_grace_s above one second.

// The head frees a killed actor's resources about a second after the STOP's
// deadline, whatever the worker's stop_grace_s: the worker sends SIGTERM one
// grace period before the deadline (here at once: force_cleanup_s 1 < grace
// 3) and SIGKILL at it, and answers the STOP only once the group is empty,
// so a 1-CPU worker's next trial never runs beside the killed trial's child
// (it did, for two seconds, when the SIGTERM came only at the deadline).
TEST_F(ProcessTrainableE2ETest, ANextTrialWaitsUntilAKilledChildWithALongGraceIsGone) {
  ProcessCluster cluster("proc-long-grace");
  cluster.StartHead();
  cluster.StartWorker("a", 1, Hosting(cluster, 3));
  ASSERT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();
  std::string exp = SubmitSpec(cluster, R"({"trainable": "misbehave",
      "param_space": {"mode": {"grid_search": ["ignore_sigterm", "normal"]}, "at_step": 1},
      "stop": {"training_iteration": 3}, "timeouts": {"step_s": 1}, "force_cleanup_s": 1})",
                               "spec");
  ASSERT_FALSE(exp.empty());
  const std::string deaf = TrialId(exp, 0), next = TrialId(exp, 1);
  ASSERT_TRUE(WaitFor([&] { return StatusOf(GetTrial(cluster, deaf)) == "RUNNING"; }, seconds(20)))
      << cluster.Logs();
  // The one CPU is taken by the deaf trial until its process is gone.
  ASSERT_TRUE(WaitFor([&] { return StatusOf(GetTrial(cluster, next)) != "PENDING"; }, seconds(20)))
      << cluster.Logs();
  const auto left = TrialProcesses(TrialDir(cluster, "a", deaf));
  EXPECT_TRUE(left.empty())
      << "the next trial got the CPU while the killed trial's process lives:\n"
      << Describe(left) << cluster.Logs();
  ASSERT_TRUE(WaitFinished(cluster, exp)) << Diagnostics(cluster, exp);
  std::vector<TrialProcess> still;
  EXPECT_TRUE(NoProcessLeft(cluster.dir(), seconds(10), &still)) << Describe(still);
}

// ---------------------------------------------------------------------------
// 11. A header is a line of its own.

// docs/process-protocol.md: "each start of a process, and each reuse of an
// actor for another trial (reset), first writes a header line to both"
// files. When the previous attempt's output ends without a newline (a process
// killed mid-line, a progress bar, print(end="")) the header starts on a new
// line (it used to be glued to the partial line). Deterministic here: the
// program prints "no newline" before it becomes misbehave.py (exit 3 at step
// 1, max_failures 1: two attempts).
TEST_F(ProcessTrainableE2ETest, EveryHeaderStartsOnALineOfItsOwn) {
  ProcessCluster cluster("proc-header-line");
  const std::string root = RepoRoot();
  Json file = {{"no_newline",
                {{"argv",
                  {"/bin/sh", "-c", "printf 'no newline'; exec " + std::string(kPython) + " \"$0\"",
                   root + "/tests/python/trainables/misbehave.py"}},
                 {"env", {{"PYTHONPATH", root + "/python"}}},
                 {"stop_grace_s", 0.5}}}};
  const std::string path = cluster.dir() + "/no-newline.json";
  std::ofstream(path) << file.dump(2);
  cluster.StartHead();
  cluster.StartWorker("a", 1, {"--trainables", path});
  ASSERT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();
  std::string exp = SubmitSpec(cluster, R"({"trainable": "no_newline",
      "param_space": {"mode": "exit3", "at_step": 1},
      "stop": {"training_iteration": 3}, "max_failures": 1})",
                               "spec");
  ASSERT_FALSE(exp.empty());
  ASSERT_TRUE(WaitFinished(cluster, exp)) << Diagnostics(cluster, exp);
  const std::string id = TrialId(exp, 0);
  Json t = GetTrial(cluster, id);
  ASSERT_EQ(t["num_failures"], 2) << t.dump();
  const std::string out = TrialFile(cluster, "a", id, "stdout");
  ASSERT_EQ(Count(out, "no newline"), 2u) << out;
  ASSERT_EQ(Count(out, "==== ztune: "), 2u) << out;
  for (size_t p = out.find("==== ztune: "); p != std::string::npos;
       p = out.find("==== ztune: ", p + 1)) {
    EXPECT_TRUE(p == 0 || out[p - 1] == '\n') << "a header in the middle of a line:\n" << out;
  }
}

// ---------------------------------------------------------------------------
// 11. `ztune logs`: a trial's output read through the head from its worker.

// What `ztune logs ARGS` printed to stdout, and its exit code.
CommandResult Logs(const LocalCluster& cluster, const std::string& args) {
  return cluster.Cli("logs " + args, /*stdout_only=*/true);
}

// Every attempt, one attempt, stderr, each trial only its own bytes (the
// worker's files byte for byte), --follow on a finished trial, and refusals.
// misbehave exit3 at step 2 with max_failures 1 gives two attempts for sure.
TEST_F(ProcessTrainableE2ETest, LogsShowEachAttemptsOutputThroughTheHead) {
  ProcessCluster cluster("proc-logs-cli");
  ASSERT_TRUE(StartHostingWorker(cluster, 2));
  const std::string failing = SubmitSpec(cluster, R"({"trainable": "misbehave",
      "param_space": {"mode": "exit3", "at_step": 2},
      "stop": {"training_iteration": 3}, "max_failures": 1})",
                                         "failing");
  const std::string counting = SubmitSpec(cluster, R"({"trainable": "counter_class",
      "param_space": {"start": {"grid_search": [0, 1000]}},
      "stop": {"training_iteration": 5}})",
                                          "counting");
  ASSERT_FALSE(failing.empty());
  ASSERT_FALSE(counting.empty());
  ASSERT_TRUE(WaitFinished(cluster, failing)) << Diagnostics(cluster, failing);
  ASSERT_TRUE(WaitFinished(cluster, counting)) << Diagnostics(cluster, counting);

  const std::string f = TrialId(failing, 0);
  ASSERT_EQ(GetTrial(cluster, f)["num_failures"], 2);
  const std::string err_file = TrialFile(cluster, "a", f, "stderr");
  ASSERT_EQ(Headers(err_file).size(), 2u) << err_file;
  const size_t second = err_file.find(HeaderPrefix(f, 2));
  ASSERT_NE(second, std::string::npos);

  auto all = Logs(cluster, f + " --stderr");
  EXPECT_EQ(all.exit_code, 0) << all.out;
  EXPECT_EQ(all.out, err_file);
  EXPECT_EQ(Count(all.out, "about to exit 3"), 2u) << all.out;
  auto first = Logs(cluster, f + " --stderr --attempt 1");
  EXPECT_EQ(first.exit_code, 0);
  EXPECT_EQ(first.out, err_file.substr(0, second));
  auto retry = Logs(cluster, f + " --stderr --attempt 2");
  EXPECT_EQ(retry.exit_code, 0);
  EXPECT_EQ(retry.out, err_file.substr(second));
  EXPECT_EQ(Logs(cluster, f).out, TrialFile(cluster, "a", f, "stdout"));
  auto missing = cluster.Cli("logs " + f + " --attempt 3");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_TRUE(Contains(missing.out, "no output of attempt 3 (attempts with output: [1,2])"))
      << missing.out;

  for (int k = 0; k < 2; ++k) {
    const std::string id = TrialId(counting, k);
    const std::string other = TrialId(counting, 1 - k);
    const std::string file = TrialFile(cluster, "a", id, "stdout");
    auto out = Logs(cluster, id);
    EXPECT_EQ(out.exit_code, 0);
    EXPECT_EQ(out.out, file);
    EXPECT_EQ(StepLines(out.out).size(), 5u) << out.out;
    EXPECT_FALSE(Contains(out.out, other)) << out.out;
    // A finished trial: --follow shows it all and ends.
    auto follow = Logs(cluster, id + " --follow");
    EXPECT_EQ(follow.exit_code, 0);
    EXPECT_EQ(follow.out, file);
  }
  auto unknown = cluster.Cli("logs e0999_00000");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_TRUE(Contains(unknown.out, "unknown trial 'e0999_00000'")) << unknown.out;
}

// --follow started with the submission (the trial may not have started yet)
// shows the output as it grows and ends when the trial has finished, with
// everything the trial printed.
TEST_F(ProcessTrainableE2ETest, LogsFollowARunningTrialToItsEnd) {
  ProcessCluster cluster("proc-logs-follow");
  ASSERT_TRUE(StartHostingWorker(cluster, 1));
  const std::string exp = SubmitSpec(cluster, R"({"trainable": "counter_class",
      "param_space": {"start": 0}, "stop": {"training_iteration": 300}})",
                                     "spec");
  ASSERT_FALSE(exp.empty());
  const std::string id = TrialId(exp, 0);
  auto follow = Logs(cluster, id + " --follow");
  EXPECT_EQ(follow.exit_code, 0) << cluster.Logs();
  EXPECT_EQ(StatusOf(GetTrial(cluster, id)), "TERMINATED");
  EXPECT_EQ(follow.out, TrialFile(cluster, "a", id, "stdout"));
  const auto steps = StepLines(follow.out);
  ASSERT_EQ(steps.size(), 300u) << follow.out;
  EXPECT_EQ(steps.back().first, 300);
}

// The live dashboard shows a trial's output: /api/logs reads it from the
// worker through the head, only the last 64 KiB of a longer one, and says why
// when there is none to show.
TEST_F(ProcessTrainableE2ETest, TheDashboardShowsTheTailOfATrialsOutput) {
  ProcessCluster cluster("proc-logs-dashboard");
  cluster.StartHead({"--http-endpoint", "127.0.0.1:0"});
  cluster.StartWorker("a", 2, Hosting(cluster));
  ASSERT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();
  // About 30 bytes a step to stdout, 17 to stderr: 5,000 steps are past the
  // 64 KiB tail in both.
  const std::string exp = SubmitSpec(cluster, R"({"trainable": "counter_class",
      "param_space": {"start": 0}, "stop": {"training_iteration": 5000}})",
                                     "spec");
  const std::string builtin = SubmitSpec(cluster, R"({"trainable": "quadratic",
      "param_space": {"lr": 0.1}, "stop": {"training_iteration": 2}})",
                                         "builtin");
  ASSERT_FALSE(exp.empty());
  ASSERT_FALSE(builtin.empty());
  ASSERT_TRUE(WaitFinished(cluster, exp, 180)) << Diagnostics(cluster, exp);
  ASSERT_TRUE(WaitFinished(cluster, builtin)) << Diagnostics(cluster, builtin);
  const std::string id = TrialId(exp, 0);
  const std::string url = cluster.http_url();
  httplib::Client http("127.0.0.1", std::stoi(url.substr(url.rfind(':') + 1)));
  http.set_read_timeout(30);

  for (const std::string stream : {"stdout", "stderr"}) {
    SCOPED_TRACE(stream);
    const std::string file = TrialFile(cluster, "a", id, stream);
    ASSERT_GT(file.size(), 65536u);
    auto res = http.Get(("/api/logs?trial_id=" + id + "&stream=" + stream).c_str());
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    ASSERT_EQ(res->status, 200) << res->body;
    const Json doc = Json::parse(res->body);
    EXPECT_EQ(doc["size"], file.size());
    EXPECT_EQ(doc["offset"], file.size() - 65536);
    EXPECT_EQ(doc["text"], file.substr(file.size() - 65536));
    EXPECT_EQ(doc["attempt"], 1);
    EXPECT_EQ(doc["complete"], true);
    EXPECT_EQ(doc["trial_status"], "TERMINATED");
  }
  auto none = http.Get(("/api/logs?trial_id=" + TrialId(builtin, 0)).c_str());
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404);
  EXPECT_TRUE(Contains(none->body, "only process trainables write stdout")) << none->body;
  auto unknown = http.Get("/api/logs?trial_id=e0999_00000");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  auto bad = http.Get(("/api/logs?trial_id=" + id + "&attempt=x").c_str());
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
}

// A built-in trainable writes no stdout: the refusal says so. Once its worker
// is gone, the refusal says where the output stays.
TEST_F(ProcessTrainableE2ETest, LogsOfABuiltInTrainableOrAGoneWorkerSayWhy) {
  ProcessCluster cluster("proc-logs-refusals");
  ASSERT_TRUE(cluster.StartHeadAndWorkers({"a"}, 1)) << cluster.Logs();
  const std::string exp = SubmitSpec(cluster, R"({"trainable": "quadratic",
      "param_space": {"lr": 0.1}, "stop": {"training_iteration": 2}})",
                                     "spec");
  ASSERT_FALSE(exp.empty());
  ASSERT_TRUE(WaitFinished(cluster, exp)) << Diagnostics(cluster, exp);
  const std::string id = TrialId(exp, 0);
  auto builtin = cluster.Cli("logs " + id);
  EXPECT_EQ(builtin.exit_code, 1);
  EXPECT_TRUE(Contains(builtin.out, "NotFound")) << builtin.out;
  EXPECT_TRUE(Contains(builtin.out, "only process trainables write stdout")) << builtin.out;

  cluster.worker(0).Kill(SIGKILL);
  ASSERT_TRUE(WaitFor([&] {
    Json w = cluster.CliJson("workers");
    return w.is_object() && w["workers"].size() == 1 && w["workers"][0]["alive"] == false;
  })) << cluster.Logs();
  auto gone = cluster.Cli("logs " + id);
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_TRUE(Contains(gone.out, "Unavailable")) << gone.out;
  EXPECT_TRUE(Contains(gone.out, "not connected")) << gone.out;
  EXPECT_TRUE(Contains(gone.out, "on host ")) << gone.out;
}

}  // namespace
}  // namespace ztune::e2e
