// ProcessTrainable against a real child process (tests/worker/fixtures/
// protocol_child.py, a minimal protocol speaker independent of the Python
// SDK): the protocol round trip, directory checkpoints across processes,
// per-trial output, GPUs, and every way a child can fail or refuse to die,
// each checked against the process table.
#include "worker/process_trainable.h"

#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "actor_harness.h"
#include "common/checkpoint/directory_archive.h"

namespace ztune::worker {
namespace {

namespace fs = std::filesystem;

const std::string kChild = std::string(ZTUNE_TEST_FIXTURES) + "/protocol_child.py";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ProcessTrainableTest : public ::testing::Test {
 protected:
  ProcessTrainableSpec Spec(int64_t grace_ms = 2000) {
    ProcessTrainableSpec spec;
    spec.name = "child";
    spec.argv = {"/usr/bin/python3", kChild};
    spec.stop_grace_ms = grace_ms;
    return spec;
  }
  TrialContext Context(const std::string& trial, int64_t iteration = 0) {
    TrialContext ctx;
    ctx.trial_id = trial;
    ctx.attempt = 1;
    ctx.worker_id = "w-test";
    ctx.iteration = iteration;
    ctx.logdir = dir_.path() + "/" + trial;
    ctx.stop_flag = &stop_;
    return ctx;
  }
  // Whether any process of `group` exists (zombies included).
  static bool GroupAlive(pid_t pgid) { return pgid > 0 && kill(-pgid, 0) == 0; }

  TempDir dir_;
  std::atomic<bool> stop_{false};
};

TEST_F(ProcessTrainableTest, RunsStepsAndStopsCleanly) {
  ProcessTrainable t(Spec());
  auto ctx = Context("t1");
  ASSERT_TRUE(t.Setup(Json{{"start", 10}, {"increment", 2}}, ctx).ok());
  const pid_t pgid = t.process_group()->pgid();
  ASSERT_GT(pgid, 0);
  auto r1 = t.Step(ctx);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  EXPECT_EQ((*r1)["value"], 12.0);
  EXPECT_EQ((*r1)["trial"], "t1");
  // The working directory is the trial's directory.
  EXPECT_EQ(fs::canonical((*r1)["cwd"].get<std::string>()), fs::canonical(ctx.logdir));
  ctx.iteration = 1;
  auto r2 = t.Step(ctx);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ((*r2)["value"], 14.0);
  auto exported = t.ExportModel({"json"}, ctx);
  ASSERT_TRUE(exported.ok()) << exported.status().ToString();
  EXPECT_EQ((*exported)["json"]["value"], 14.0);
  t.Cleanup();
  EXPECT_FALSE(GroupAlive(pgid));
  const std::string out = ReadFile(ctx.logdir + "/stdout");
  EXPECT_NE(out.find("==== ztune: trial t1 attempt 1 on worker w-test"), std::string::npos) << out;
  EXPECT_NE(out.find("out t1 1\nout t1 2\n"), std::string::npos) << out;
  const std::string err = ReadFile(ctx.logdir + "/stderr");
  EXPECT_NE(err.find("err t1 2"), std::string::npos) << err;
  EXPECT_EQ(err.find("out t1"), std::string::npos) << err;
}

TEST_F(ProcessTrainableTest, CheckpointDirectoryRestoresInAnotherProcess) {
  std::string bytes;
  {
    ProcessTrainable t(Spec());
    auto ctx = Context("t1");
    ASSERT_TRUE(t.Setup(Json{{"start", 1}}, ctx).ok());
    for (int i = 0; i < 3; ++i) {
      ctx.iteration = i;
      ASSERT_TRUE(t.Step(ctx).ok());
    }
    ctx.iteration = 3;
    auto saved = t.Save(ctx);
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    bytes = std::move(saved).value();
    t.Cleanup();
    // The save directory was packed and removed.
    for (const auto& e : fs::directory_iterator(ctx.logdir)) {
      EXPECT_EQ(e.path().filename().string().find(".ztune-save"), std::string::npos);
    }
  }
  ProcessTrainable t2(Spec());
  auto ctx = Context("t2", 3);
  ASSERT_TRUE(t2.Setup(Json{{"start", 100}}, ctx).ok());
  ASSERT_TRUE(t2.Restore(bytes, ctx).ok());
  auto r = t2.Step(ctx);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)["value"], 5.0);  // 1 + 3 steps, restored, + 1
  // Damaged bytes fail the restore before the child sees them.
  std::string damaged = bytes;
  damaged[damaged.size() / 2] ^= 0x40;
  Status s = t2.Restore(damaged, ctx);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("checksum"), std::string::npos) << s.ToString();
  t2.Cleanup();
}

TEST_F(ProcessTrainableTest, ResetSendsTheOutputToTheNewTrialsFiles) {
  ProcessTrainable t(Spec());
  auto a = Context("ta");
  ASSERT_TRUE(t.Setup(Json::object(), a).ok());
  ASSERT_TRUE(t.Step(a).ok());
  auto b = Context("tb");
  ASSERT_TRUE(t.ResetConfig(Json{{"start", 50}}, b));
  auto r = t.Step(b);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)["value"], 51.0);
  EXPECT_EQ((*r)["trial"], "tb");
  t.Cleanup();
  const std::string out_a = ReadFile(a.logdir + "/stdout");
  const std::string out_b = ReadFile(b.logdir + "/stdout");
  EXPECT_NE(out_a.find("out ta 1"), std::string::npos) << out_a;
  EXPECT_EQ(out_a.find("tb"), std::string::npos) << out_a;
  EXPECT_NE(out_b.find("actor reused"), std::string::npos) << out_b;
  EXPECT_NE(out_b.find("out tb 1"), std::string::npos) << out_b;
  EXPECT_EQ(out_b.find("out ta"), std::string::npos) << out_b;
}

TEST_F(ProcessTrainableTest, ADeclinedResetKeepsTheOldTrialsFiles) {
  ProcessTrainable t(Spec());
  auto a = Context("ta");
  ASSERT_TRUE(t.Setup(Json{{"no_reset", true}}, a).ok());
  EXPECT_FALSE(t.ResetConfig(Json::object(), Context("tb")));
  ASSERT_TRUE(t.Step(a).ok());
  t.Cleanup();
  EXPECT_NE(ReadFile(a.logdir + "/stdout").find("out ta 1"), std::string::npos);
  EXPECT_EQ(ReadFile(dir_.path() + "/tb/stdout").find("out ta"), std::string::npos);
}

TEST_F(ProcessTrainableTest, GpuIdsBecomeCudaVisibleDevices) {
  for (const auto& [ids, expected] :
       std::vector<std::pair<std::vector<int64_t>, std::string>>{{{1, 3}, "1,3"}, {{}, ""}}) {
    ProcessTrainable t(Spec());
    auto ctx = Context("g");
    ctx.gpu_ids = ids;
    ASSERT_TRUE(t.Setup(Json::object(), ctx).ok());
    auto r = t.Step(ctx);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ((*r)["cuda"], expected);
    t.Cleanup();
  }
}

TEST_F(ProcessTrainableTest, AChildThatExitsMidStepIsAnErrorWithItsStatusAndStderr) {
  ProcessTrainable t(Spec());
  auto ctx = Context("t1");
  ASSERT_TRUE(t.Setup(Json{{"fail_at", 1}, {"mode", "exit3"}}, ctx).ok());
  const pid_t pgid = t.process_group()->pgid();
  auto r = t.Step(ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("exited with status 3 during step of iteration 1"),
            std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find("about to exit 3"), std::string::npos)
      << r.status().ToString();
  EXPECT_FALSE(GroupAlive(pgid));
  // The actor is of no more use: later calls fail at once with the same cause.
  auto again = t.Step(ctx);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("status 3"), std::string::npos);
  t.Cleanup();
}

TEST_F(ProcessTrainableTest, ASegfaultNamesTheSignal) {
  ProcessTrainable t(Spec());
  auto ctx = Context("t1");
  ASSERT_TRUE(t.Setup(Json{{"fail_at", 1}, {"mode", "segfault"}}, ctx).ok());
  auto r = t.Step(ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("killed by signal 11"), std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find("err t1 1"), std::string::npos) << r.status().ToString();
}

TEST_F(ProcessTrainableTest, AnErrorReplyFailsTheStepAndKeepsTheProcess) {
  ProcessTrainable t(Spec());
  auto ctx = Context("t1");
  ASSERT_TRUE(t.Setup(Json{{"fail_at", 1}, {"mode", "error"}}, ctx).ok());
  auto r = t.Step(ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "bad step 1");
  ctx.iteration = 1;
  EXPECT_TRUE(t.Step(ctx).ok());
  t.Cleanup();
}

TEST_F(ProcessTrainableTest, BrokenFramingEndsTheProcess) {
  ProcessTrainable t(Spec());
  auto ctx = Context("t-garbage");
  ASSERT_TRUE(t.Setup(Json{{"fail_at", 1}, {"mode", "garbage"}}, ctx).ok());
  const pid_t pgid = t.process_group()->pgid();
  auto r = t.Step(ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("broke the protocol during step of iteration 1: its reply "
                                      "is not JSON"),
            std::string::npos)
      << r.status().ToString();
  EXPECT_FALSE(GroupAlive(pgid));
}

TEST_F(ProcessTrainableTest, ALineNobodyAskedForEndsTheProcessAtTheNextCommand) {
  ProcessTrainable t(Spec());
  auto ctx = Context("t-two");
  ASSERT_TRUE(t.Setup(Json{{"fail_at", 1}, {"mode", "two_lines"}}, ctx).ok());
  const pid_t pgid = t.process_group()->pgid();
  ASSERT_TRUE(t.Step(ctx).ok());  // the first of its two replies answers step 1
  // The child wrote both lines in one write: the second is buffered now.
  ctx.iteration = 1;
  auto r = t.Step(ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("a line nobody asked for"), std::string::npos)
      << r.status().ToString();
  EXPECT_FALSE(GroupAlive(pgid));
}

TEST_F(ProcessTrainableTest, StartUpFailuresSayWhatWentWrong) {
  {
    auto spec = Spec();
    spec.argv = {dir_.path() + "/no-such-program"};
    ProcessTrainable t(spec);
    Status s = t.Setup(Json::object(), Context("t1"));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("execve"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("No such file"), std::string::npos) << s.ToString();
  }
  {
    auto spec = Spec();
    spec.argv = {"no-such-program-in-path-ztune"};
    ProcessTrainable t(spec);
    Status s = t.Setup(Json::object(), Context("t1"));
    EXPECT_NE(s.message().find("not an executable file in PATH"), std::string::npos)
        << s.ToString();
  }
  {
    auto spec = Spec();
    spec.cwd = dir_.path() + "/missing-dir";
    ProcessTrainable t(spec);
    Status s = t.Setup(Json::object(), Context("t1"));
    EXPECT_NE(s.message().find("chdir"), std::string::npos) << s.ToString();
  }
  for (const auto& [mode, expected] : std::vector<std::pair<std::string, std::string>>{
           {"no_hello", "exited with status 0 during start-up"},
           {"bad_hello", "first line must be the hello"},
           {"version_2", "speaks protocol 2"}}) {
    auto spec = Spec(200);
    spec.env["PROTOCOL_CHILD_MODE"] = mode;
    ProcessTrainable t(spec);
    Status s = t.Setup(Json::object(), Context("t-" + mode));
    EXPECT_FALSE(s.ok()) << mode;
    EXPECT_NE(s.message().find(expected), std::string::npos) << s.ToString();
    EXPECT_FALSE(GroupAlive(t.process_group()->pgid()));
  }
}

TEST_F(ProcessTrainableTest, AHungChildIsKilledWhenTheWorkerGivesUp) {
  ProcessTrainable t(Spec(/*grace_ms=*/200));
  auto ctx = Context("t1");
  ASSERT_TRUE(t.Setup(Json{{"fail_at", 1}, {"mode", "ignore_sigterm"}}, ctx).ok());
  const pid_t pgid = t.process_group()->pgid();
  std::thread giver([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stop_.store(true);
  });
  auto r = t.Step(ctx);
  giver.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kAborted) << r.status().ToString();
  // It ignored SIGTERM: SIGKILL after the grace period, and nothing is left.
  EXPECT_FALSE(GroupAlive(pgid));
}

TEST_F(ProcessTrainableTest, StopEndsAChildThatIgnoresStopAndSigterm) {
  ProcessTrainable t(Spec(/*grace_ms=*/150));
  auto ctx = Context("t1");
  ASSERT_TRUE(t.Setup(Json{{"stop_mode", "ignore_sigterm_and_hang"}}, ctx).ok());
  const pid_t pgid = t.process_group()->pgid();
  ASSERT_TRUE(t.Step(ctx).ok());
  const auto start = std::chrono::steady_clock::now();
  t.Cleanup();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(GroupAlive(pgid));
  // stop (grace), SIGTERM (grace), SIGKILL: at least two grace periods.
  EXPECT_GE(took, std::chrono::milliseconds(2 * 150));
}

TEST_F(ProcessTrainableTest, LeftoverProcessesOfTheGroupAreEndedAtStop) {
  ProcessTrainable t(Spec(/*grace_ms=*/500));
  auto ctx = Context("t1");
  ASSERT_TRUE(t.Setup(Json{{"fail_at", 1}, {"mode", "spawn"}}, ctx).ok());
  const pid_t pgid = t.process_group()->pgid();
  ASSERT_TRUE(t.Step(ctx).ok());
  t.Cleanup();
  EXPECT_FALSE(GroupAlive(pgid));
}

TEST_F(ProcessTrainableTest, DestroyingWithoutCleanupEndsTheGroup) {
  pid_t pgid = 0;
  {
    ProcessTrainable t(Spec(/*grace_ms=*/100));
    auto ctx = Context("t1");
    ASSERT_TRUE(t.Setup(Json{{"fail_at", 1}, {"mode", "spawn"}}, ctx).ok());
    pgid = t.process_group()->pgid();
    ASSERT_TRUE(t.Step(ctx).ok());
  }
  EXPECT_FALSE(GroupAlive(pgid));
}

}  // namespace
}  // namespace ztune::worker
