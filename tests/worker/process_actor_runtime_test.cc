// A real WorkerRuntime hosting a process trainable (tests/worker/fixtures/
// protocol_child.py) against a fake head over loopback: results flow, a STOP
// is answered only once the process group is gone, a killed actor's group
// gets SIGTERM at once and SIGKILL after its grace, and the answers that free
// its resources at the head wait until no process of the group is left; a
// worker shutdown leaves no process behind. Every "gone" is checked against
// the process table (kill(-pgid, 0) == ESRCH; a zombie still counts).
#include <dirent.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "actor_harness.h"
#include "fake_head.h"
#include "running_worker.h"
#include "worker/process_trainable.h"
#include "worker/worker_runtime.h"

namespace ztune::worker {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using namespace protocol;

const std::string kChild = std::string(ZTUNE_TEST_FIXTURES) + "/protocol_child.py";
constexpr int64_t kHeartbeatMs = 50;
// The process trainable "child": its stop grace (after `stop`, and again
// after SIGTERM). "child_long_grace": a grace no test waits for.
constexpr int64_t kGraceMs = 300;
constexpr int64_t kLongGraceMs = 5000;
// Slack for a loaded machine on top of the waits the product owes.
constexpr int64_t kSlackMs = 1500;

int64_t MsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
}

bool GroupGone(pid_t pgid) { return kill(-pgid, 0) != 0 && errno == ESRCH; }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Live processes whose environment holds ZTUNE_TRIAL_ID=<a value starting
// with `prefix`> (a zombie has no readable environment: see GroupGone).
std::vector<pid_t> ProcessesOfTrials(const std::string& prefix) {
  std::vector<pid_t> out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  const std::string needle = "ZTUNE_TRIAL_ID=" + prefix;
  while (dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    const std::string env = ReadFile(std::string("/proc/") + e->d_name + "/environ");
    size_t start = 0;
    while (start < env.size()) {
      size_t nul = env.find('\0', start);
      if (nul == std::string::npos) nul = env.size();
      if (env.compare(start, needle.size(), needle) == 0) {
        out.push_back(static_cast<pid_t>(pid));
        break;
      }
      start = nul + 1;
    }
  }
  closedir(proc);
  return out;
}

// Whether `pid` ignores SIGTERM now (/proc/<pid>/status, SigIgn).
bool IgnoresSigterm(pid_t pid) {
  std::istringstream status(ReadFile("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("SigIgn:", 0) != 0) continue;
    const unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
    return (mask >> (SIGTERM - 1)) & 1;
  }
  return false;
}

// A protocol speaker whose setup starts `sleep 0.3` in a session of its own
// (start_new_session: out of the actor's process group), whose steps report
// that process's pid, and which exits on stop: the sleep is orphaned and,
// the worker being a child subreaper, becomes the worker's child.
constexpr const char* kSessionChild = R"(
import json, os, subprocess
commands = os.fdopen(3, "r")
def send(o):
    os.write(4, (json.dumps(o) + "\n").encode())
send({"protocol": 1, "sdk": "session_child"})
orphan = None
for line in commands:
    cmd = json.loads(line)["cmd"]
    if cmd == "setup":
        orphan = subprocess.Popen(["sleep", "0.3"], start_new_session=True)
        send({"ok": True})
    elif cmd == "step":
        send({"ok": True, "result": {"orphan": orphan.pid}})
    elif cmd == "stop":
        send({"ok": True})
        os._exit(0)
    else:
        send({"ok": False, "error": "unsupported"})
)";

// Registers the process trainables the tests host.
void RegisterChildren(TrainableRegistry& registry) {
  for (auto [name, grace] :
       {std::pair<const char*, int64_t>{"child", kGraceMs}, {"child_long_grace", kLongGraceMs}}) {
    ProcessTrainableSpec spec;
    spec.name = name;
    spec.argv = {"/usr/bin/python3", kChild};
    spec.stop_grace_ms = grace;
    EXPECT_TRUE(
        registry.Register(name, [spec] { return std::make_unique<ProcessTrainable>(spec); }).ok());
  }
  ProcessTrainableSpec session;
  session.name = "session_child";
  session.argv = {"/usr/bin/python3", "-c", kSessionChild};
  session.stop_grace_ms = kGraceMs;
  EXPECT_TRUE(
      registry
          .Register(session.name, [session] { return std::make_unique<ProcessTrainable>(session); })
          .ok());
}

class ProcessActorRuntimeTest : public ::testing::Test {
 protected:
  void Start(int64_t shutdown_grace_ms = 2000) {
    head_ = std::make_unique<FakeHead>(context_, kHeartbeatMs, 6);
    WorkerOptions o = head_->WorkerOptionsFor(dir_.path());
    o.shutdown_grace_ms = shutdown_grace_ms;
    worker_ = std::make_unique<RunningWorker>(context_, o, RegisterChildren);
    auto reg = head_->WaitFor<Register>();
    ASSERT_TRUE(reg.has_value());
    EXPECT_EQ(reg->trainables,
              (std::vector<std::string>{"child", "child_long_grace", "session_child"}));
  }

  // A trial id unique in this process (tests repeat) and findable in /proc.
  std::string NewTrial() {
    static std::atomic<int> counter{0};
    return prefix_ + std::to_string(++counter) + "-t";  // no id a prefix of another
  }

  // Creates the actor; returns the pid of its process (which leads its
  // group), read from the header line the worker writes to its stdout file.
  pid_t Create(uint64_t rid, const std::string& trial, const std::string& trainable, Json config) {
    head_->Send(CreateActor{rid, trial, 1, trainable, std::move(config), {{"CPU", 1}}, {}, {}, {}});
    auto r = head_->WaitReply(rid);
    EXPECT_TRUE(r.has_value());
    if (!r) return -1;
    EXPECT_TRUE(r->ok) << r->error;
    const std::string out = ReadFile(dir_.path() + "/" + trial + "/stdout");
    const size_t at = out.rfind("(pid ");  // appended: the last start's header
    EXPECT_NE(at, std::string::npos) << out;
    if (at == std::string::npos) return -1;
    const pid_t pid = std::atoi(out.c_str() + at + 5);
    EXPECT_GT(pid, 0) << out;
    EXPECT_EQ(getpgid(pid), pid);
    const std::vector<pid_t> procs = ProcessesOfTrials(trial);
    EXPECT_NE(std::find(procs.begin(), procs.end(), pid), procs.end());
    return pid;
  }

  // Keeps the link alive until `pred` holds; false after `timeout`.
  template <class Pred>
  bool PumpUntil(Pred pred, milliseconds timeout = milliseconds(5000)) {
    const auto deadline = Clock::now() + timeout;
    while (!pred()) {
      if (Clock::now() >= deadline) return false;
      if (auto m = head_->Recv(milliseconds(5))) head_->others.push_back(std::move(*m));
    }
    return true;
  }

  // Creates `trial`'s actor (request 1) as a child that ignores SIGTERM once
  // its step runs, and starts that step (TRAIN request 2, which hangs).
  // Returns its process group once the step runs, -1 if it did not start.
  pid_t StartHungStep(const std::string& trial) {
    const pid_t pgid = Create(1, trial, "child", Json{{"fail_at", 1}, {"mode", "ignore_sigterm"}});
    if (pgid <= 0) return -1;
    head_->Send(Train{2, trial, 1, 1, 60});
    return PumpUntil([&] { return IgnoresSigterm(pgid); }) ? pgid : -1;
  }

  // What a test learns about an answer at the moment it arrives.
  struct Arrival {
    bool seen = false;
    int64_t after_ms = 0;     // since the reference time
    bool group_gone = false;  // kill(-pgid, 0) == ESRCH when it arrived
  };
  // Receives until the REPLY to `stop_rid` and the RESULT batch of
  // `train_rid` (0: none expected) have arrived, noting for each the time
  // and whether the group was gone at that moment.
  // The answers to a STOP (and to the TRAIN in flight, if any), each with
  // what was true when it arrived.
  struct StopAnswers {
    Reply reply;
    Arrival reply_at;
    ResultBatch batch;
    Arrival batch_at;
  };

  // Sends STOP (rid 3, deadline `kill_after_ms`) to `trial`'s actor, process
  // group `pgid`, and waits for its reply and, when `train_rid` is not 0, for
  // the answer to that TRAIN; times are from the STOP's sending.
  StopAnswers StopAndAwait(const std::string& trial, pid_t pgid, int64_t kill_after_ms,
                           uint64_t train_rid) {
    constexpr uint64_t kStopRid = 3;
    StopAnswers a;
    for (const auto& m : head_->others) {  // answers already set aside
      if (auto* b = std::get_if<ResultBatch>(&m.body); b && train_rid != 0 && b->rid == train_rid) {
        ADD_FAILURE() << "the TRAIN was answered before the STOP was sent: " << b->error;
      }
    }
    const auto t0 = Clock::now();
    head_->Send(Stop{kStopRid, trial, 1, kill_after_ms});
    const auto deadline = t0 + milliseconds(10'000);
    while ((!a.reply_at.seen || (train_rid != 0 && !a.batch_at.seen)) && Clock::now() < deadline) {
      auto m = head_->Recv(milliseconds(50));
      if (!m) continue;
      const bool gone = GroupGone(pgid);
      if (auto* r = std::get_if<Reply>(&m->body); r && r->rid == kStopRid) {
        a.reply = *r;
        a.reply_at = {true, MsSince(t0), gone};
      } else if (auto* b = std::get_if<ResultBatch>(&m->body); b && b->rid == train_rid) {
        a.batch = *b;
        a.batch_at = {true, MsSince(t0), gone};
      } else {
        head_->others.push_back(std::move(*m));
      }
    }
    EXPECT_TRUE(a.reply_at.seen) << "no reply to the STOP";
    EXPECT_TRUE(train_rid == 0 || a.batch_at.seen) << "no answer to the TRAIN";
    return a;
  }

  void TearDown() override {
    worker_.reset();
    head_.reset();
    // Nothing this test started may be left; end it if it is, so that the
    // next test (or repeat) starts clean.
    const std::vector<pid_t> left = ProcessesOfTrials(prefix_);
    for (pid_t pid : left) {
      ADD_FAILURE() << "process " << pid << " of this test outlived it";
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
    }
    const auto deadline = Clock::now() + milliseconds(2000);
    for (pid_t pid : left) {
      // Reaped here if the worker spawned it (a zombie still has its pid).
      while (kill(pid, 0) == 0 && Clock::now() < deadline) {
        waitpid(pid, nullptr, WNOHANG);
        std::this_thread::sleep_for(milliseconds(2));
      }
    }
  }

  const std::string prefix_ = "pa-" + std::to_string(getpid()) + "-";
  zmq::context_t context_{1};
  TempDir dir_;
  std::unique_ptr<FakeHead> head_;
  std::unique_ptr<RunningWorker> worker_;
};

// (a) create -> train -> stop: results arrive, and by the time the STOP's
// reply arrives the process group is gone.
TEST_F(ProcessActorRuntimeTest, TrainsAndStopsWithTheGroupGoneByTheStopReply) {
  Start();
  const std::string trial = NewTrial();
  const pid_t pgid = Create(1, trial, "child", Json{{"start", 10}, {"increment", 2}});
  ASSERT_GT(pgid, 0);

  head_->Send(Train{2, trial, 1, 3, 60});
  auto b = head_->WaitBatch(2);
  ASSERT_TRUE(b.has_value());
  EXPECT_FALSE(b->failed) << b->error;
  ASSERT_EQ(b->results.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const Json r = b->results[i].result.ToJson();
    EXPECT_EQ(b->results[i].seq, static_cast<uint64_t>(i + 1));
    EXPECT_EQ(r["training_iteration"], i + 1);
    EXPECT_EQ(r["value"], 10.0 + 2 * (i + 1));
    EXPECT_EQ(r["trial"], trial);
    EXPECT_EQ(r["trial_id"], trial);
  }
  head_->Send(Ack{trial, 1, 3, {}, {}});

  const auto [reply, reply_at, unused, unused_at] = StopAndAwait(trial, pgid, 5000, 0);
  EXPECT_TRUE(reply.ok) << reply.error;
  EXPECT_TRUE(reply_at.group_gone) << "STOP answered while process group " << pgid << " lived";
  // A cooperative child exits on `stop`: no grace period is waited.
  EXPECT_LT(reply_at.after_ms, kGraceMs + kSlackMs);
  EXPECT_TRUE(ProcessesOfTrials(trial).empty());
  const std::string out = ReadFile(dir_.path() + "/" + trial + "/stdout");
  EXPECT_NE(out.find("out " + trial + " 3\n"), std::string::npos) << out;
}

// (b) a step hangs in a child that ignores SIGTERM; the STOP's deadline
// passes: the worker sends SIGTERM a grace before the deadline (here at once:
// the deadline is shorter than the grace), SIGKILL at it, and answers the
// STOP (failed, "killed") and the TRAIN only once the group is empty.
TEST_F(ProcessActorRuntimeTest, AKilledActorIsAnsweredOnlyOnceItsGroupIsEmpty) {
  constexpr int64_t kKillAfterMs = 100;
  Start();
  const std::string trial = NewTrial();
  const pid_t pgid = StartHungStep(trial);
  ASSERT_GT(pgid, 0) << "the step did not start";

  const auto [reply, reply_at, batch, batch_at] = StopAndAwait(trial, pgid, kKillAfterMs, 2);

  EXPECT_FALSE(reply.ok);
  EXPECT_EQ(reply.error,
            "actor did not stop within " + std::to_string(kKillAfterMs) + " ms; killed");
  EXPECT_TRUE(reply_at.group_gone) << "STOP answered while process group " << pgid << " lived";
  // SIGTERM is ignored: only the SIGKILL at the deadline ends it.
  EXPECT_GE(reply_at.after_ms, kKillAfterMs);
  EXPECT_LT(reply_at.after_ms, kKillAfterMs + kSlackMs);

  EXPECT_TRUE(batch.failed);
  EXPECT_TRUE(batch.results.empty());
  EXPECT_NE(batch.error.find("was killed"), std::string::npos) << batch.error;
  EXPECT_TRUE(batch_at.group_gone) << "TRAIN answered while process group " << pgid << " lived";
  EXPECT_GE(batch_at.after_ms, kKillAfterMs);

  EXPECT_TRUE(ProcessesOfTrials(trial).empty());
  // The key is free again, for a healthy actor.
  const pid_t again = Create(4, trial, "child", Json::object());
  EXPECT_GT(again, 0);
  EXPECT_NE(again, pgid);
  head_->Send(Stop{5, trial, 1, 5000});
  auto stopped = head_->WaitReply(5);
  ASSERT_TRUE(stopped.has_value());
  EXPECT_TRUE(stopped->ok) << stopped->error;
}

// A STOP whose deadline is shorter than the grace sends SIGTERM at once: a
// hung child that obeys SIGTERM ends long before the deadline, its step
// fails naming the signal, and the STOP is answered as soon as the group is
// empty.
TEST_F(ProcessActorRuntimeTest, AStopDeadlineShorterThanTheGraceSendsSigtermAtOnce) {
  constexpr int64_t kKillAfterMs = 100;
  Start();
  const std::string trial = NewTrial();
  const pid_t pgid = Create(1, trial, "child_long_grace", Json{{"fail_at", 1}, {"mode", "hang"}});
  ASSERT_GT(pgid, 0);
  head_->Send(Train{2, trial, 1, 1, 60});
  const std::string out_file = dir_.path() + "/" + trial + "/stdout";
  ASSERT_TRUE(PumpUntil([&] {
    return ReadFile(out_file).find("out " + trial + " 1\n") != std::string::npos;
  })) << "the step did not start";

  const auto [reply, reply_at, batch, batch_at] = StopAndAwait(trial, pgid, kKillAfterMs, 2);
  EXPECT_TRUE(reply_at.group_gone);
  EXPECT_TRUE(batch_at.group_gone);
  EXPECT_TRUE(batch.failed);
  EXPECT_NE(batch.error.find("signal 15"), std::string::npos) << batch.error;
  EXPECT_LT(reply_at.after_ms, kKillAfterMs + kSlackMs);
  static_assert(kKillAfterMs + kSlackMs < kLongGraceMs, "the grace must not be waited");
  EXPECT_TRUE(ProcessesOfTrials(trial).empty());
}

// (c) shutdown with a hung process actor that ignores SIGTERM: Run() returns
// once the group is gone (shutdown grace, then SIGTERM, the stop grace,
// SIGKILL), and no process is left. Under ASan it found KillActor reading
// the key of the actors_ entry it had just erased (Shutdown passed
// actors_.begin()->first by reference).
TEST_F(ProcessActorRuntimeTest, ShutdownWithAHungProcessActorLeavesNoProcess) {
  constexpr int64_t kShutdownGraceMs = 200;
  Start(kShutdownGraceMs);
  const std::string trial = NewTrial();
  const pid_t pgid = StartHungStep(trial);
  ASSERT_GT(pgid, 0) << "the step did not start";

  const auto t0 = Clock::now();
  Status s = worker_->Stop();
  const int64_t took = MsSince(t0);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(GroupGone(pgid)) << "Run() returned while process group " << pgid << " lived";
  EXPECT_TRUE(ProcessesOfTrials(trial).empty());
  EXPECT_GE(took, kShutdownGraceMs + kGraceMs);
  EXPECT_LT(took, kShutdownGraceMs + kGraceMs + kSlackMs);
  // The head heard that the worker left.
  auto bye = head_->WaitFor<Disconnect>(milliseconds(2000));
  EXPECT_TRUE(bye.has_value());
}

// Shutdown with an idle, healthy process actor: it is stopped through the
// protocol at once (no grace waited), and no process is left.
TEST_F(ProcessActorRuntimeTest, ShutdownStopsAnIdleProcessActorPromptly) {
  Start(/*shutdown_grace_ms=*/3000);
  const std::string trial = NewTrial();
  const pid_t pgid = Create(1, trial, "child_long_grace", Json::object());
  ASSERT_GT(pgid, 0);
  const auto t0 = Clock::now();
  Status s = worker_->Stop();
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_LT(MsSince(t0), kSlackMs);
  EXPECT_TRUE(GroupGone(pgid));
  EXPECT_TRUE(ProcessesOfTrials(trial).empty());
}

// The process state letter of `pid` ('Z': zombie), and its parent; '\0'
// when no such process exists.
char ProcessState(pid_t pid, pid_t* ppid = nullptr) {
  std::istringstream stat(ReadFile("/proc/" + std::to_string(pid) + "/stat"));
  std::string pid_s, comm, state;
  pid_t parent = 0;
  if (!(stat >> pid_s >> comm >> state >> parent) || state.empty()) return '\0';
  if (ppid != nullptr) *ppid = parent;
  return state[0];
}

// ChildProcess::Spawn makes the worker a child subreaper (PR_SET_CHILD_SUBREAPER),
// so every orphaned descendant of a trainable becomes the worker's child. A
// descendant that left the group (setsid, start_new_session=True, a daemon)
// and outlives its parent is reaped by the worker's sweep
// (ReapOrphanedDescendants, once per heartbeat), not left a zombie for the
// worker's whole life (it was, before the sweep existed).
TEST_F(ProcessActorRuntimeTest, AnOrphanThatLeftTheGroupIsReapedNotLeftAZombie) {
  Start();
  const std::string trial = NewTrial();
  const pid_t pgid = Create(1, trial, "session_child", Json::object());
  ASSERT_GT(pgid, 0);
  head_->Send(Train{2, trial, 1, 1, 60});
  auto b = head_->WaitBatch(2);
  ASSERT_TRUE(b.has_value());
  ASSERT_FALSE(b->failed) << b->error;
  ASSERT_EQ(b->results.size(), 1u);
  const pid_t orphan = b->results[0].result.ToJson()["orphan"].get<pid_t>();
  ASSERT_GT(orphan, 0);
  // Whatever happens below, the zombie (if any) does not outlive the test.
  struct Reap {
    pid_t pid;
    ~Reap() {
      pid_t parent = 0;
      if (ProcessState(pid, &parent) == 'Z' && parent == getpid()) waitpid(pid, nullptr, 0);
    }
  } reap{orphan};
  EXPECT_EQ(getpgid(orphan), orphan) << "the sleep left the actor's group";

  head_->Send(Stop{3, trial, 1, 5000});
  auto stopped = head_->WaitReply(3);
  ASSERT_TRUE(stopped.has_value());
  EXPECT_TRUE(stopped->ok) << stopped->error;
  EXPECT_TRUE(GroupGone(pgid));

  // The orphan is now the worker's child; it exits 0.3 s after setup.
  pid_t parent = 0;
  ASSERT_TRUE(PumpUntil([&] {
    const char st = ProcessState(orphan, &parent);
    return st == '\0' || st == 'Z';
  })) << "the orphan did not end";
  // Time enough for any reaper the worker runs (several heartbeats).
  head_->Pump(milliseconds(10 * kHeartbeatMs));
  const char state = ProcessState(orphan, &parent);
  EXPECT_EQ(state, '\0') << "process " << orphan << " is a zombie (state " << state
                         << ") of process " << parent << " (the worker is " << getpid() << ")";
}

}  // namespace
}  // namespace ztune::worker
