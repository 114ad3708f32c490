// Submitted code through the real binaries (docs/process-protocol.md
// "Submitted code"): `ztune submit --working-dir` packs and uploads a project
// once; only workers started with --allow-submitted-code advertise it, fetch
// it from the head (a worker that never saw it, in pages) and run its Python
// function as trials; a spec naming it is refused while no such worker is
// registered, and a client with the read role can upload nothing. The store
// keeps one archive, which `ztune-head --check` counts and verifies.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/cluster.h"
#include "tests/e2e/trial_queries.h"

namespace ztune::e2e {
namespace {

namespace fs = std::filesystem;

// tests/e2e/<this file> -> the repository root.
std::string RepoRoot() {
  fs::path p(__FILE__);
  if (p.is_relative()) p = fs::absolute(p);
  return p.parent_path().parent_path().parent_path().lexically_normal().string();
}

// As the process-trainable tests: each step is a Python round trip and a
// head commit; a 300 ms liveness is too tight on a loaded 2-core machine.
constexpr LocalCluster::Timing kTiming{100, 10};
constexpr size_t kDataBytes = (1 << 20) + (1 << 19);  // the archive spans two pages

void WriteFile(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// A project: a function trainable that imports a module of its own package
// and reads a data file relative to ZTUNE_CODE_DIR; plus what the client
// leaves out (.git, __pycache__).
std::string WriteProject(const LocalCluster& cluster) {
  const std::string dir = cluster.dir() + "/project";
  WriteFile(dir + "/train.py",
            "import os\n"
            "import ztune\n"
            "from lib.helper import increment\n"
            "def train(config):\n"
            "    data = os.path.join(os.environ['ZTUNE_CODE_DIR'], 'data', 'blob.bin')\n"
            "    size = os.path.getsize(data)\n"
            "    value = 0\n"
            "    while True:\n"
            "        value += increment(config)\n"
            "        ztune.report({'value': value, 'data_bytes': size})\n");
  WriteFile(dir + "/lib/__init__.py", "");
  WriteFile(dir + "/lib/helper.py", "def increment(config):\n    return config['increment']\n");
  std::string data(kDataBytes, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 2654435761u) >> 13);
  WriteFile(dir + "/data/blob.bin", data);
  WriteFile(dir + "/.git/HEAD", "ref: refs/heads/main\n");
  WriteFile(dir + "/lib/__pycache__/helper.cpython-311.pyc", "stale");
  return dir;
}

// The spec names the project by a path relative to itself (the CLI uploads
// it), or by nothing when the test passes --working-dir.
std::string WriteSpec(const LocalCluster& cluster, const std::string& name, bool with_path) {
  Json spec{{"trainable", {{"python", "train.py:train"}}},
            {"param_space", {{"increment", {{"grid_search", {1, 2}}}}}},
            {"stop", {{"training_iteration", 3}}}};
  if (with_path) spec["working_dir"] = "project";
  const std::string path = cluster.dir() + "/" + name + ".json";
  std::ofstream(path) << spec.dump(2);
  return path;
}

std::vector<std::string> SubmittedCodeFlags() {
  return {"--allow-submitted-code", "--python", "/usr/bin/python3", "--python-path",
          RepoRoot() + "/python"};
}

// The experiment id a merged-output submit printed: its last line (the
// project line goes to stderr before the submit is sent).
std::string LastLine(std::string s) {
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s.substr(s.rfind('\n') + 1);
}

// The project's code directory on `worker` (the only one its cache holds).
std::string CodeDirOn(const LocalCluster& cluster, const std::string& worker) {
  const std::string cache = cluster.dir() + "/work-" + worker + "/.ztune-code";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(cache, ec)) {
    if (e.is_directory()) return e.path().string();
  }
  return "";
}

// Both trials TERMINATED after 3 steps of their increment, on `worker`.
void ExpectRanOn(LocalCluster& cluster, const std::string& exp, const std::string& worker) {
  ExpectAllTerminatedOnce(cluster, exp, 2, 3);
  for (int k = 0; k < 2; ++k) {
    const std::string id = TrialId(exp, k);
    Json results = cluster.CliJson("results " + id)["results"];
    ASSERT_EQ(results.size(), 3u) << id;
    const int increment = GetTrial(cluster, id)["config"]["increment"].get<int>();
    EXPECT_EQ(results[2]["value"], 3 * increment) << results.dump();
    EXPECT_EQ(results[2]["data_bytes"], kDataBytes) << results.dump();
    EXPECT_TRUE(fs::exists(cluster.dir() + "/work-" + worker + "/" + id)) << id;
  }
}

TEST(SubmittedCodeE2ETest, RunsOnAWorkerThatNeverSawItAndIsStoredOnce) {
  LocalCluster cluster("submitted-code", kTiming);
  ASSERT_TRUE(fs::exists(RepoRoot() + "/python/ztune/entry.py"));
  const std::string reader = cluster.keys().AddClient("reader", "read");
  const std::string alice = cluster.keys().AddClient("alice", "submit");
  cluster.StartHead();
  cluster.StartWorker("plain", 2);  // hosts the built-ins only
  cluster.StartWorker("py", 2, SubmittedCodeFlags());
  ASSERT_TRUE(cluster.WaitForWorkers(2)) << cluster.Logs();
  WriteProject(cluster);
  const std::string spec = WriteSpec(cluster, "with-path", /*with_path=*/true);

  // A read client uploads nothing and submits nothing.
  auto refused = cluster.CliAs(reader, "submit " + spec);
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_TRUE(Contains(refused.out, "PermissionDenied")) << refused.out;
  EXPECT_TRUE(Contains(refused.out, "may not put_code")) << refused.out;
  EXPECT_EQ(cluster.CliJson("experiments")["experiments"].size(), 0u);

  auto submitted = cluster.CliAs(alice, "submit " + spec);
  ASSERT_EQ(submitted.exit_code, 0) << submitted.out << cluster.Logs();
  EXPECT_TRUE(Contains(submitted.out, "uploaded")) << submitted.out;
  const std::string exp = LastLine(submitted.out);
  ASSERT_TRUE(WaitFinished(cluster, exp, 60)) << cluster.Logs();
  ExpectRanOn(cluster, exp, "py");
  EXPECT_FALSE(fs::exists(cluster.dir() + "/work-plain/" + TrialId(exp, 0)));
  Json docs = cluster.CliJson("experiments");
  ASSERT_EQ(docs["experiments"].size(), 1u) << docs.dump();
  EXPECT_EQ(docs["experiments"][0]["trainable"], "python:train.py:train") << docs.dump();
  // What the worker unpacked is the project without what the client leaves out.
  const std::string code = CodeDirOn(cluster, "py");
  ASSERT_FALSE(code.empty()) << cluster.Logs();
  EXPECT_EQ(fs::file_size(code + "/data/blob.bin"), kDataBytes);
  EXPECT_FALSE(fs::exists(code + "/.git"));
  EXPECT_FALSE(fs::exists(code + "/lib/__pycache__/helper.cpython-311.pyc"));

  // A fresh worker that never saw the project: the head has it already, the
  // worker fetches it.
  ASSERT_EQ(cluster.worker(1).Stop(), 0);
  cluster.StartWorker("py2", 2, SubmittedCodeFlags());
  ASSERT_TRUE(WaitFor([&] {
    auto w = Workers(cluster);
    return w.count("py2") > 0 && w["py2"]["alive"].get<bool>();
  })) << cluster.Logs();
  const std::string flag_spec = WriteSpec(cluster, "with-flag", /*with_path=*/false);
  auto again =
      cluster.CliAs(alice, "submit " + flag_spec + " --working-dir " + cluster.dir() + "/project");
  ASSERT_EQ(again.exit_code, 0) << again.out << cluster.Logs();
  EXPECT_TRUE(Contains(again.out, "already on the head")) << again.out;
  const std::string exp2 = LastLine(again.out);
  ASSERT_TRUE(WaitFinished(cluster, exp2, 60)) << cluster.Logs();
  ExpectRanOn(cluster, exp2, "py2");
  EXPECT_FALSE(CodeDirOn(cluster, "py2").empty());
  EXPECT_TRUE(Contains(ReadFile(cluster.dir() + "/logs/worker-py2.log"), "fetched"))
      << cluster.Logs();

  // One archive in the store, whole.
  ASSERT_EQ(cluster.head().Stop(), 0) << cluster.Logs();
  auto check =
      e2e::Run(std::string(ZTUNE_HEAD_BIN) + " --check --json --data-dir " + cluster.data_dir(),
               /*merge_stderr=*/false);
  ASSERT_EQ(check.exit_code, 0) << check.out;
  Json report = Json::parse(check.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << check.out;
  EXPECT_EQ(report["code_archives"], 1) << check.out;
  EXPECT_GT(report["code_bytes"].get<int64_t>(), static_cast<int64_t>(kDataBytes));
}

TEST(SubmittedCodeE2ETest, IsRefusedWhileNoWorkerRunsSubmittedCode) {
  LocalCluster cluster("submitted-code-off", kTiming);
  ASSERT_TRUE(cluster.StartHeadAndWorkers({"plain"}, 2)) << cluster.Logs();
  WriteProject(cluster);
  auto r = cluster.Cli("submit " + WriteSpec(cluster, "spec", /*with_path=*/true));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Contains(r.out, "no registered worker runs submitted code")) << r.out;
  EXPECT_TRUE(Contains(r.out, "--allow-submitted-code")) << r.out;
  EXPECT_TRUE(Contains(r.out, "quadratic")) << r.out;  // what the workers do offer
  EXPECT_EQ(cluster.CliJson("experiments")["experiments"].size(), 0u);
}

}  // namespace
}  // namespace ztune::e2e
