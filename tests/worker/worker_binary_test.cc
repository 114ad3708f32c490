// The real ztune-worker binary, spawned: flag validation and signal handling.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/security/curve_keys.h"
#include "tests/worker/actor_harness.h"
#include "tests/worker/fake_head.h"

extern char** environ;

namespace ztune::worker {
namespace {

class WorkerBinaryTest : public ::testing::Test {
 protected:
  // Spawns ztune-worker with `args`; stderr goes to a file in the temp dir.
  pid_t Spawn(std::vector<std::string> args) {
    args.insert(args.begin(), ZTUNE_WORKER_BINARY);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, stderr_path().c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(rc, 0) << "cannot spawn " << ZTUNE_WORKER_BINARY;
    if (rc == 0) spawned_.push_back(pid);
    return pid;
  }

  // Waits up to `timeout` for `pid`; returns its exit code, or -1 (killed).
  int Wait(pid_t pid, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        spawned_.erase(std::remove(spawned_.begin(), spawned_.end(), pid), spawned_.end());
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ADD_FAILURE() << "ztune-worker did not exit";
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    spawned_.erase(std::remove(spawned_.begin(), spawned_.end(), pid), spawned_.end());
    return -1;
  }

  // A failed test must not leave a worker process behind.
  void TearDown() override {
    for (pid_t pid : spawned_) {
      kill(pid, SIGKILL);
      int status = 0;
      waitpid(pid, &status, 0);
    }
  }

  std::string stderr_path() const { return dir_.path() + "/stderr.txt"; }
  std::string Stderr() const {
    std::ifstream in(stderr_path());
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  TempDir dir_;
  std::vector<pid_t> spawned_;
};

TEST_F(WorkerBinaryTest, ExitsWithCode2OnBadResources) {
  pid_t pid = Spawn({"--head", "tcp://127.0.0.1:1", "--resources", R"({"memory": "lots"})"});
  EXPECT_EQ(Wait(pid), 2);
  EXPECT_NE(Stderr().find("'memory' must be a number"), std::string::npos) << Stderr();
  pid = Spawn({"--head", "tcp://127.0.0.1:1", "--resources", "{oops"});
  EXPECT_EQ(Wait(pid), 2);
  EXPECT_NE(Stderr().find("not valid JSON"), std::string::npos) << Stderr();
  pid = Spawn({"--cpus", "2"});  // --head missing
  EXPECT_EQ(Wait(pid), 2);
}

TEST_F(WorkerBinaryTest, RefusesToStartWithoutKeysOrWithAReadableSecretKey) {
  pid_t pid = Spawn({"--head", "tcp://127.0.0.1:1"});
  EXPECT_EQ(Wait(pid), 2);
  EXPECT_NE(Stderr().find("no key: pass --key FILE"), std::string::npos) << Stderr();

  auto pair = security::GenerateKeyPair();
  ASSERT_TRUE(pair.ok());
  const std::string base = dir_.path() + "/w";
  ASSERT_TRUE(security::WriteKeyPairFiles(base, *pair, false).ok());
  pid = Spawn({"--head", "tcp://127.0.0.1:1", "--key", base + ".key"});
  EXPECT_EQ(Wait(pid), 2);
  EXPECT_NE(Stderr().find("no head key"), std::string::npos) << Stderr();

  std::filesystem::permissions(base + ".key", std::filesystem::perms::others_read,
                               std::filesystem::perm_options::add);
  pid = Spawn({"--head", "tcp://127.0.0.1:1", "--key", base + ".key", "--head-key",
               pair->public_key.z85()});
  EXPECT_EQ(Wait(pid), 2);
  EXPECT_NE(Stderr().find("chmod 600 " + base + ".key"), std::string::npos) << Stderr();
}

TEST_F(WorkerBinaryTest, RegistersAndLeavesCleanlyOnSigterm) {
  zmq::context_t context(1);
  FakeHead head(context, 50, 6);
  pid_t pid = Spawn({"--head", head.endpoint(), "--gpus", "2", "--resources",
                     R"({"memory": 8e9, "custom": 4})", "--name", "bin", "--work-dir",
                     dir_.path() + "/work", "--heartbeat-ms", "50", "--liveness", "20",
                     "--log-level", "info", "--insecure"});  // the fake head speaks plain TCP
  auto reg = head.WaitFor<protocol::Register>();
  ASSERT_TRUE(reg.has_value()) << Stderr();
  EXPECT_EQ(reg->name, "bin");
  EXPECT_EQ(reg->worker_id.rfind("bin-", 0), 0u);
  EXPECT_EQ(reg->pid, pid);
  EXPECT_EQ(reg->resources.at("CPU"),
            static_cast<double>(std::max(1u, std::thread::hardware_concurrency())));
  EXPECT_EQ(reg->resources.at("GPU"), 2);
  EXPECT_EQ(reg->resources.at("memory"), 8e9);
  EXPECT_EQ(reg->resources.at("custom"), 4);
  EXPECT_EQ(reg->gpu_ids, (std::vector<int64_t>{0, 1}));

  head.Send(protocol::CreateActor{1, "t", 1, "quadratic", Json::object(), {}, {1}, {}, {}});
  auto r = head.WaitReply(1);
  ASSERT_TRUE(r.has_value()) << Stderr();
  EXPECT_TRUE(r->ok) << r->error;

  kill(pid, SIGTERM);
  auto d = head.WaitFor<protocol::Disconnect>();
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(Wait(pid), 0);
  std::ifstream log(dir_.path() + "/work/t/trial.log");
  std::stringstream ss;
  ss << log.rdbuf();
  EXPECT_NE(ss.str().find("stopped at iteration 0"), std::string::npos) << ss.str();
}

}  // namespace
}  // namespace ztune::worker
