// A 256 MiB checkpoint through the real binaries, with the head killed (-9)
// in the middle of its upload and in the middle of a restore: the trial goes
// on from the previous complete checkpoint each time, the partial file does
// not survive the restart, `ztune checkpoint` downloads it whole,
// `ztune-head --check` passes, and neither process
// ever held the checkpoint more than once: the head's peak RSS (VmHWM, from
// /proc) stays within 64 MiB of its RSS at start, the worker's within the
// trainable's own copy plus 64 MiB (issue 13's bound).
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/cluster.h"
#include "tests/e2e/trial_queries.h"

namespace ztune::e2e {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

constexpr int64_t kMiB = 1 << 20;
constexpr int64_t kCheckpointBytes = 256 * kMiB;
constexpr int64_t kBound = 64 * kMiB;

// A field of /proc/<pid>/status in bytes (VmRSS, VmHWM); -1 if unreadable.
int64_t ProcStatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return -1;
}

// Names in the head's checkpoint directory ending with `suffix`.
std::set<std::string> FilesEndingWith(const LocalCluster& cluster, const std::string& suffix) {
  std::set<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(cluster.data_dir() + "/checkpoint-files", ec), end;
       !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix) {
      names.insert(name);
    }
  }
  return names;
}

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

struct HeadPeak {
  int64_t at_start = 0;
  int64_t peak = 0;
};

TEST(LargeCheckpointE2ETest, A256MiBCheckpointSurvivesHeadKillsMidUploadAndMidRestore) {
  LocalCluster cluster("large-checkpoint-kill");
  const std::vector<std::string> head_args = {"--reattach-grace-ms", "5000"};
  std::vector<HeadPeak> heads;
  auto start_head = [&] {
    cluster.StartHead(head_args);
    heads.push_back({ProcStatusBytes(cluster.head().pid(), "VmRSS"), 0});
  };
  auto kill_head = [&] {
    heads.back().peak = ProcStatusBytes(cluster.head().pid(), "VmHWM");
    cluster.head().Kill(SIGKILL);
  };
  start_head();
  cluster.StartWorker("a", 1);
  ASSERT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();
  const int64_t worker_at_start = ProcStatusBytes(cluster.worker(0).pid(), "VmRSS");

  // 1. Checkpoints at 2, 4 and 6 (the end); the head dies while the one at
  //    iteration 4 is arriving, after the one at 2 is committed.
  const std::string config = R"({"checkpoint_bytes": )" + std::to_string(kCheckpointBytes) + "}";
  std::string exp = SubmitSpec(cluster,
                               R"({"trainable": "blob", "param_space": )" + config +
                                   R"(, "stop": {"training_iteration": 6},
      "checkpoint": {"frequency": 2, "num_to_keep": 1}, "max_failures": 2})",
                               "upload");
  ASSERT_FALSE(exp.empty());
  const std::string first = TrialId(exp, 0);
  std::set<std::string> partial;
  ASSERT_TRUE(WaitFor(
      [&] {
        partial = FilesEndingWith(cluster, ".part");
        return !FilesEndingWith(cluster, ".ckpt").empty() && !partial.empty();
      },
      seconds(60)))
      << cluster.Logs();
  kill_head();
  std::cerr << "[ head kill -9 while " << *partial.begin() << " was arriving ]\n";
  start_head();
  for (const auto& p : partial) {
    EXPECT_FALSE(fs::exists(cluster.data_dir() + "/checkpoint-files/" + p))
        << p << " survived the restart";
  }
  ASSERT_TRUE(WaitFinished(cluster, exp, 120)) << cluster.Logs();
  Json t0 = GetTrial(cluster, first);
  ASSERT_EQ(StatusOf(t0), "TERMINATED") << t0.dump();
  EXPECT_EQ(IterationOf(t0), 6) << t0.dump();
  ExpectResultsOneToN(cluster, first, 6);
  ASSERT_EQ(t0["checkpoints"].size(), 1u) << t0.dump();
  EXPECT_EQ(t0["checkpoints"][0]["iteration"], 6) << t0.dump();
  // num_to_keep 1: only the newest file is left.
  EXPECT_EQ(FilesEndingWith(cluster, ".ckpt").size(), 1u);
  // Downloaded page by page from the file: the trainable's bytes, whole.
  const std::string out = cluster.dir() + "/downloaded";
  auto dl = cluster.Cli("checkpoint " + first + " -o " + out);
  ASSERT_EQ(dl.exit_code, 0) << dl.out;
  EXPECT_EQ(fs::file_size(out + "/checkpoint.bin"), static_cast<uintmax_t>(kCheckpointBytes + 20))
      << dl.out;
  fs::remove_all(out);

  // 2. A new trial restored from it, in a second experiment kept open by a
  //    blocker; the head dies while the RESTORE streams.
  std::string blocker =
      SubmitSpec(cluster, R"({"trainable": "sleep", "param_space": {"sleep_s": 0.05},
      "stop": {"training_iteration": 100000}})",
                 "blocker");
  ASSERT_FALSE(blocker.empty());
  ASSERT_TRUE(WaitFor([&] { return StatusOf(GetTrial(cluster, TrialId(blocker, 0))) == "RUNNING"; },
                      seconds(20)))
      << cluster.Logs();
  std::string exp2 = SubmitSpec(cluster,
                                R"({"trainable": "blob", "param_space": )" + config +
                                    R"(, "stop": {"training_iteration": 8},
      "max_failures": 2})",
                                "restore");
  ASSERT_FALSE(exp2.empty());
  auto r = cluster.Cli("add-trial " + exp2 + " '" + config + "' --restore-from " + first);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string second = TrialId(exp2, 1);
  const std::string worker_log = cluster.dir() + "/logs/worker-a.log";
  const size_t restores_before = Count(ReadFile(worker_log), "for RESTORE");
  r = cluster.Cli("stop " + blocker);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_TRUE(WaitFor([&] { return Count(ReadFile(worker_log), "for RESTORE") > restores_before; },
                      seconds(60)))
      << cluster.Logs();
  kill_head();
  std::cerr << "[ head kill -9 while the RESTORE of " << second << " was streaming ]\n";
  start_head();
  ASSERT_TRUE(WaitFinished(cluster, exp2, 120)) << cluster.Logs();
  Json t1 = GetTrial(cluster, second);
  EXPECT_EQ(StatusOf(t1), "TERMINATED") << t1.dump();
  EXPECT_EQ(IterationOf(t1), 8) << t1.dump();
  EXPECT_GE(t1["num_restores"].get<int64_t>(), 1) << t1.dump();
  // Restored at iteration 6: its own results are 7 and 8, once each.
  Json results = cluster.CliJson("results " + second);
  ASSERT_EQ(results["results"].size(), 2u) << results.dump();
  EXPECT_EQ(results["results"][0]["training_iteration"], 7);
  EXPECT_EQ(results["results"][1]["training_iteration"], 8);

  // 3. Memory: each head incarnation, and the worker over the whole run.
  heads.back().peak = ProcStatusBytes(cluster.head().pid(), "VmHWM");
  const int64_t worker_peak = ProcStatusBytes(cluster.worker(0).pid(), "VmHWM");
  for (size_t i = 0; i < heads.size(); ++i) {
    std::cerr << "[ head " << i << ": RSS at start " << heads[i].at_start / kMiB << " MiB, peak "
              << heads[i].peak / kMiB << " MiB ]\n";
    ASSERT_GT(heads[i].at_start, 0);
    EXPECT_LE(heads[i].peak, heads[i].at_start + kBound) << "head " << i;
  }
  std::cerr << "[ worker: RSS at start " << worker_at_start / kMiB << " MiB, peak "
            << worker_peak / kMiB << " MiB ]\n";
  ASSERT_GT(worker_at_start, 0);
  EXPECT_LE(worker_peak, worker_at_start + kCheckpointBytes + kBound);

  ASSERT_EQ(cluster.head().Stop(), 0) << cluster.Logs();
  auto check = e2e::Run(std::string(ZTUNE_HEAD_BIN) + " --check --data-dir " + cluster.data_dir());
  EXPECT_EQ(check.exit_code, 0) << check.out;
  EXPECT_TRUE(Contains(check.out, "checkpoint")) << check.out;
}

}  // namespace
}  // namespace ztune::e2e
