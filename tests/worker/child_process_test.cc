// ChildProcess, ProcessGroup, ExitStatus and FindProgram against real
// children (/bin/sh scripts and coreutils): what the child inherits (fds,
// environment, working directory, process group), how a failed exec is
// reported, how Terminate ends a group (SIGTERM, grace, SIGKILL, orphans
// reaped as a subreaper), and PR_SET_PDEATHSIG's tie to the spawning thread.
// Every check of "gone" is made against the process table (kill(.., 0) ==
// ESRCH: a zombie still counts as present).
#include "worker/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "actor_harness.h"

namespace ztune::worker {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kPath = "/usr/bin:/bin";

int64_t MsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
}

// No process of the group exists (zombies count as existing).
bool GroupGone(pid_t pgid) { return kill(-pgid, 0) != 0 && errno == ESRCH; }
bool ProcessGone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

// Reads `fd` (non-blocking or not) until `stop(text)` is true, end of file or
// `timeout`; returns what was read.
template <class Stop>
std::string ReadUntil(int fd, milliseconds timeout, Stop stop) {
  std::string text;
  const auto deadline = Clock::now() + timeout;
  while (!stop(text)) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      text.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    break;  // end of file or error
  }
  return text;
}
std::string ReadToEof(int fd, milliseconds timeout = milliseconds(5000)) {
  return ReadUntil(fd, timeout, [](const std::string&) { return false; });
}
std::string ReadLine(int fd, milliseconds timeout = milliseconds(5000)) {
  std::string s = ReadUntil(fd, timeout,
                            [](const std::string& t) { return t.find('\n') != std::string::npos; });
  const size_t nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

// Owns a stdout read end taken from a child.
struct Fd {
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int fd;
};

class ChildProcessTest : public ::testing::Test {
 protected:
  SpawnOptions Options(std::vector<std::string> argv, int64_t grace_ms = 1000) {
    SpawnOptions o;
    o.argv = std::move(argv);
    o.env = {"PATH=/usr/bin:/bin"};
    o.path_env = kPath;
    o.grace_ms = grace_ms;
    return o;
  }
  SpawnOptions Shell(const std::string& script, int64_t grace_ms = 1000) {
    return Options({"/bin/sh", "-c", script}, grace_ms);
  }
  // Spawns and remembers the group, so that TearDown can end it whatever
  // the test did.
  std::unique_ptr<ChildProcess> Start(const SpawnOptions& o,
                                      std::shared_ptr<ProcessGroup> group = nullptr) {
    if (group == nullptr) group = std::make_shared<ProcessGroup>();
    auto child = ChildProcess::Spawn(o, group);
    EXPECT_TRUE(child.ok()) << child.status().ToString();
    if (!child.ok()) return nullptr;
    pgids_.push_back((*child)->pid());
    return std::move(child).value();
  }

  void TearDown() override {
    // A test that failed half-way must leave nothing running.
    for (pid_t g : pgids_) {
      if (kill(-g, 0) == 0) {
        ADD_FAILURE() << "process group " << g << " outlived its test";
        kill(-g, SIGKILL);
        const auto deadline = Clock::now() + milliseconds(2000);
        while (!GroupGone(g) && Clock::now() < deadline) {
          while (waitpid(-g, nullptr, WNOHANG) > 0) {
          }
          std::this_thread::sleep_for(milliseconds(2));
        }
      }
    }
  }

  TempDir dir_;
  std::vector<pid_t> pgids_;
};

// ---------------------------------------------------------------- FindProgram

TEST_F(ChildProcessTest, FindProgramSkipsDirectoriesAndNonExecutables) {
  for (const char* d : {"a/prog", "b", "c"}) fs::create_directories(dir_.path() + "/" + d);
  const std::string b_prog = dir_.path() + "/b/prog";
  const std::string c_prog = dir_.path() + "/c/prog";
  std::ofstream(b_prog) << "#!/bin/sh\necho b\n";
  std::ofstream(c_prog) << "#!/bin/sh\necho c\n";
  ASSERT_EQ(chmod(b_prog.c_str(), 0644), 0);  // not executable (even by root: no x bit)
  ASSERT_EQ(chmod(c_prog.c_str(), 0755), 0);
  const std::string a = dir_.path() + "/a", b = dir_.path() + "/b", c = dir_.path() + "/c";

  auto found = FindProgram("prog", a + ":" + b + ":" + c);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(*found, c_prog);

  // Only the directory and the non-executable file: nothing.
  auto missing = FindProgram("prog", a + ":" + b);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'prog'"), std::string::npos)
      << missing.status().message();
  EXPECT_NE(missing.status().message().find(a + ":" + b), std::string::npos)
      << missing.status().message();
}

TEST_F(ChildProcessTest, FindProgramLooksUpNamesInPathAndKeepsNamesWithASlash) {
  auto sh = FindProgram("sh", kPath);
  ASSERT_TRUE(sh.ok()) << sh.status().ToString();
  EXPECT_EQ(fs::path(*sh).filename(), "sh");
  EXPECT_EQ(access(sh->c_str(), X_OK), 0);
  // A name holding a '/' is not looked up (nor checked) at all.
  EXPECT_EQ(FindProgram("./no/such/prog", "").value(), "./no/such/prog");
  EXPECT_EQ(FindProgram("/bin/sh", "/nonexistent").value(), "/bin/sh");

  auto missing = FindProgram("ztune-no-such-program", kPath);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("ztune-no-such-program"), std::string::npos);
  EXPECT_EQ(FindProgram("", kPath).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ChildProcessTest, SpawnLooksUpArgv0InPathEnvNotInTheChildsEnvironment) {
  fs::create_directories(dir_.path() + "/bin");
  const std::string prog = dir_.path() + "/bin/hello-prog";
  std::ofstream(prog) << "#!/bin/sh\necho hello from \"$0\"\n";
  ASSERT_EQ(chmod(prog.c_str(), 0755), 0);
  SpawnOptions o = Options({"hello-prog"});
  o.path_env = dir_.path() + "/bin";
  o.env = {"PATH=/nonexistent"};
  auto child = Start(o);
  ASSERT_NE(child, nullptr);
  Fd out(child->TakeStdoutFd());
  EXPECT_EQ(ReadToEof(out.fd), "hello from " + prog + "\n");
  EXPECT_TRUE(child->Terminate(1000));
  ASSERT_TRUE(child->exit_status().has_value());
  EXPECT_EQ(child->exit_status()->ToString(), "exited with status 0");
}

// ---------------------------------------------------------------- what the child gets

TEST_F(ChildProcessTest, TheChildHasExactlyFdsZeroToFourAndNothingElseOfTheParent) {
  // Descriptors of the parent without close-on-exec, at a low and a high
  // number: the child must not inherit them.
  int leaked_pipe[2];
  ASSERT_EQ(pipe(leaked_pipe), 0);
  const int leaked_high = dup2(leaked_pipe[0], 100);
  ASSERT_EQ(leaked_high, 100);
  ASSERT_EQ(fcntl(leaked_high, F_GETFD) & FD_CLOEXEC, 0);

  // ls -ln lists the fds ls has while it reads the directory: its own
  // directory fd (to /proc/<pid>/fd) comes on top of what it inherited.
  auto child = Start(Options({"ls", "-ln", "/proc/self/fd"}));
  close(leaked_pipe[0]);
  close(leaked_pipe[1]);
  close(leaked_high);
  ASSERT_NE(child, nullptr);
  Fd out(child->TakeStdoutFd());
  const std::string listing = ReadToEof(out.fd);
  EXPECT_TRUE(child->Terminate(1000));

  std::map<int, std::string> fds;  // fd -> link target
  std::istringstream lines(listing);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t arrow = line.find(" -> ");
    if (arrow == std::string::npos) continue;  // "total 0"
    const size_t space = line.rfind(' ', arrow - 1);
    fds[std::stoi(line.substr(space + 1, arrow - space - 1))] = line.substr(arrow + 4);
  }
  std::set<int> inherited;
  for (const auto& [fd, target] : fds) {
    const bool own_dir = target.rfind("/proc/", 0) == 0 && target.size() > 3 &&
                         target.compare(target.size() - 3, 3, "/fd") == 0;
    if (!own_dir) inherited.insert(fd);
  }
  EXPECT_EQ(inherited, (std::set<int>{0, 1, 2, 3, 4})) << listing;
  EXPECT_EQ(fds.size(), 6u) << "one more: ls's own directory fd\n" << listing;
  EXPECT_EQ(fds.count(100), 0u) << listing;
  EXPECT_EQ(fds[0], "/dev/null") << listing;
  std::set<std::string> pipes;
  for (int fd : {1, 2, 3, 4}) {
    EXPECT_EQ(fds[fd].rfind("pipe:[", 0), 0u) << fd << ": " << fds[fd];
    pipes.insert(fds[fd]);
  }
  EXPECT_EQ(pipes.size(), 4u) << "four distinct pipes\n" << listing;
}

TEST_F(ChildProcessTest, TheEnvironmentIsExactlyWhatWasPassed) {
  ASSERT_EQ(setenv("ZTUNE_CHILD_TEST_PARENT_ONLY", "x", 1), 0);
  SpawnOptions o = Options({"env", "-0"});
  o.env = {"ZA=1", "ZB=two words", "ZC=", "ZD=line\nbreak"};
  auto child = Start(o);
  unsetenv("ZTUNE_CHILD_TEST_PARENT_ONLY");
  ASSERT_NE(child, nullptr);
  Fd out(child->TakeStdoutFd());
  const std::string text = ReadToEof(out.fd);
  EXPECT_TRUE(child->Terminate(1000));
  std::vector<std::string> vars;
  size_t start = 0;
  for (size_t nul; (nul = text.find('\0', start)) != std::string::npos; start = nul + 1) {
    vars.push_back(text.substr(start, nul - start));
  }
  EXPECT_EQ(vars, o.env) << text;
}

TEST_F(ChildProcessTest, TheWorkingDirectoryIsApplied) {
  const std::string cwd = dir_.path() + "/work here";
  fs::create_directories(cwd);
  SpawnOptions o = Options({"pwd"});
  o.cwd = cwd;
  auto child = Start(o);
  ASSERT_NE(child, nullptr);
  Fd out(child->TakeStdoutFd());
  const std::string pwd = ReadLine(out.fd);
  EXPECT_TRUE(child->Terminate(1000));
  EXPECT_EQ(fs::canonical(pwd), fs::canonical(cwd));

  // An unusable cwd fails the spawn, naming it and the reason.
  auto group = std::make_shared<ProcessGroup>();
  o.cwd = dir_.path() + "/no-such-dir";
  auto failed = ChildProcess::Spawn(o, group);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(failed.status().message().find("chdir to " + o.cwd), std::string::npos)
      << failed.status().message();
  EXPECT_NE(failed.status().message().find(strerror(ENOENT)), std::string::npos)
      << failed.status().message();
  EXPECT_EQ(group->pgid(), 0);  // the failed child was reaped and the group ended
  EXPECT_TRUE(group->Empty());
}

TEST_F(ChildProcessTest, TheChildLeadsItsOwnProcessGroup) {
  auto group = std::make_shared<ProcessGroup>();
  auto child = Start(Shell("cut -d' ' -f5 /proc/self/stat; exec sleep 100"), group);
  ASSERT_NE(child, nullptr);
  Fd out(child->TakeStdoutFd());
  const pid_t pid = child->pid();
  EXPECT_EQ(group->pgid(), pid);
  EXPECT_EQ(group->grace_ms(), 1000);
  EXPECT_EQ(getpgid(pid), pid);
  EXPECT_NE(getpgid(pid), getpgrp());
  // What a process started by the child sees: the same group.
  EXPECT_EQ(ReadLine(out.fd), std::to_string(pid));
  EXPECT_FALSE(group->Empty());
  EXPECT_TRUE(child->Terminate(1000));
  EXPECT_TRUE(GroupGone(pid));
}

TEST_F(ChildProcessTest, AnExecFailureIsReportedWithTheErrno) {
  const std::string script = dir_.path() + "/not-executable.sh";
  std::ofstream(script) << "#!/bin/sh\necho never\n";
  ASSERT_EQ(chmod(script.c_str(), 0644), 0);
  auto group = std::make_shared<ProcessGroup>();
  auto failed = ChildProcess::Spawn(Options({script}), group);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = failed.status().message();
  EXPECT_NE(m.find("cannot start " + script), std::string::npos) << m;
  EXPECT_NE(m.find("execve " + script), std::string::npos) << m;
  EXPECT_NE(m.find(strerror(EACCES)), std::string::npos) << m;
  EXPECT_EQ(group->pgid(), 0);
  EXPECT_TRUE(group->Empty());

  // A missing file with a '/': ENOENT from execve.
  const std::string nowhere = dir_.path() + "/nowhere";
  failed = ChildProcess::Spawn(Options({nowhere}), std::make_shared<ProcessGroup>());
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find(strerror(ENOENT)), std::string::npos)
      << failed.status().message();

  // A name not in PATH: refused before any fork, naming it.
  failed =
      ChildProcess::Spawn(Options({"ztune-no-such-program"}), std::make_shared<ProcessGroup>());
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(failed.status().message().find("cannot start ztune-no-such-program"), std::string::npos)
      << failed.status().message();

  failed = ChildProcess::Spawn(Options({}), std::make_shared<ProcessGroup>());
  EXPECT_EQ(failed.status().code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------- Terminate

TEST_F(ChildProcessTest, TerminateKillsAChildThatIgnoresSigtermAfterTheGrace) {
  constexpr int64_t kGraceMs = 200;
  auto group = std::make_shared<ProcessGroup>();
  // `sleep` inherits the ignored SIGTERM across exec.
  auto child = Start(Shell("trap '' TERM; echo ready; exec sleep 100"), group);
  ASSERT_NE(child, nullptr);
  Fd out(child->TakeStdoutFd());
  ASSERT_EQ(ReadLine(out.fd), "ready");
  const pid_t pgid = child->pid();
  const auto t0 = Clock::now();
  EXPECT_TRUE(child->Terminate(kGraceMs));
  const int64_t took = MsSince(t0);
  EXPECT_GE(took, kGraceMs);
  EXPECT_LT(took, kGraceMs + 1000);
  EXPECT_TRUE(GroupGone(pgid));
  ASSERT_TRUE(child->exit_status().has_value());
  EXPECT_TRUE(child->exit_status()->signaled);
  EXPECT_EQ(child->exit_status()->code, SIGKILL);
  // The owner's handle no longer looks at the id.
  EXPECT_EQ(group->pgid(), 0);
  EXPECT_TRUE(group->Empty());
  EXPECT_FALSE(group->Signal(SIGKILL));
  // Terminate again: nothing to do, at once.
  const auto t1 = Clock::now();
  EXPECT_TRUE(child->Terminate(kGraceMs));
  EXPECT_LT(MsSince(t1), kGraceMs);
}

TEST_F(ChildProcessTest, TerminateDoesNotWaitTheGraceForAChildThatObeysSigterm) {
  constexpr int64_t kGraceMs = 5000;
  auto child = Start(Shell("echo ready; exec sleep 100"));
  ASSERT_NE(child, nullptr);
  Fd out(child->TakeStdoutFd());
  ASSERT_EQ(ReadLine(out.fd), "ready");
  const auto t0 = Clock::now();
  EXPECT_TRUE(child->Terminate(kGraceMs));
  EXPECT_LT(MsSince(t0), kGraceMs / 5);
  ASSERT_TRUE(child->exit_status().has_value());
  EXPECT_TRUE(child->exit_status()->signaled);
  EXPECT_EQ(child->exit_status()->code, SIGTERM);
  EXPECT_TRUE(GroupGone(child->pid()));
}

TEST_F(ChildProcessTest, TerminateWithoutGraceSendsSigkillAtOnce) {
  auto child = Start(Shell("trap '' TERM; echo ready; exec sleep 100"));
  ASSERT_NE(child, nullptr);
  Fd out(child->TakeStdoutFd());
  ASSERT_EQ(ReadLine(out.fd), "ready");
  const auto t0 = Clock::now();
  EXPECT_TRUE(child->Terminate(0));
  EXPECT_LT(MsSince(t0), 500);
  ASSERT_TRUE(child->exit_status().has_value());
  EXPECT_EQ(child->exit_status()->code, SIGKILL);
  EXPECT_TRUE(GroupGone(child->pid()));
}

TEST_F(ChildProcessTest, TerminateEndsAGrandchildInTheGroup) {
  auto child = Start(Shell("sleep 100 & echo $!; wait"));
  ASSERT_NE(child, nullptr);
  Fd out(child->TakeStdoutFd());
  const pid_t grandchild = std::stoi(ReadLine(out.fd));
  ASSERT_GT(grandchild, 0);
  EXPECT_EQ(getpgid(grandchild), child->pid());
  EXPECT_TRUE(child->Terminate(1000));
  EXPECT_TRUE(ProcessGone(grandchild));
  EXPECT_TRUE(GroupGone(child->pid()));
}

TEST_F(ChildProcessTest, TerminateEndsAndReapsAnOrphanedGrandchild) {
  // The main child exits at once and leaves `sleep` behind in the group; it
  // is re-parented to this process (a child subreaper), so Terminate can
  // reap it: no zombie is left.
  auto group = std::make_shared<ProcessGroup>();
  auto child = Start(Shell("sleep 100 & echo $!"), group);
  ASSERT_NE(child, nullptr);
  Fd out(child->TakeStdoutFd());
  const pid_t grandchild = std::stoi(ReadLine(out.fd));
  const auto deadline = Clock::now() + milliseconds(5000);
  while (!child->Poll() && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(2));
  ASSERT_TRUE(child->exit_status().has_value());
  EXPECT_EQ(child->exit_status()->ToString(), "exited with status 0");
  // The group lives on in the grandchild.
  EXPECT_FALSE(group->Empty());
  EXPECT_EQ(group->pgid(), child->pid());
  std::ifstream stat("/proc/" + std::to_string(grandchild) + "/stat");
  std::string pid_s, comm, state, ppid_s;
  stat >> pid_s >> comm >> state >> ppid_s;
  EXPECT_EQ(ppid_s, std::to_string(getpid())) << "re-parented to this process (subreaper)";
  EXPECT_TRUE(child->Terminate(1000));
  EXPECT_TRUE(ProcessGone(grandchild));
  EXPECT_TRUE(GroupGone(child->pid()));
}

TEST_F(ChildProcessTest, DestroyingAChildProcessEndsItsGroup) {
  auto child = Start(Shell("trap '' TERM; echo ready; exec sleep 100"));
  ASSERT_NE(child, nullptr);
  const pid_t pgid = child->pid();
  {
    Fd out(child->TakeStdoutFd());
    ASSERT_EQ(ReadLine(out.fd), "ready");
  }
  const auto t0 = Clock::now();
  child.reset();  // without Terminate: SIGKILL, no grace
  EXPECT_LT(MsSince(t0), 500);
  EXPECT_TRUE(GroupGone(pgid));
}

// ---------------------------------------------------------------- ProcessGroup

TEST_F(ChildProcessTest, AProcessGroupBeforeStartIsEmptyAndCannotBeSignalled) {
  ProcessGroup g;
  EXPECT_EQ(g.pgid(), 0);
  EXPECT_TRUE(g.Empty());
  EXPECT_FALSE(g.Signal(0));
  EXPECT_FALSE(g.Signal(SIGKILL));  // must not become kill(0, ..): our own group
  g.Ended();
  EXPECT_TRUE(g.Empty());
}

TEST_F(ChildProcessTest, AProcessGroupAfterEndedNeverLooksAtTheIdAgain) {
  auto child = Start(Shell("exec sleep 100"));
  ASSERT_NE(child, nullptr);
  // A second handle on the same (live) group.
  ProcessGroup handle;
  handle.Started(child->pid(), 300);
  EXPECT_EQ(handle.pgid(), child->pid());
  EXPECT_EQ(handle.grace_ms(), 300);
  EXPECT_FALSE(handle.Empty());
  EXPECT_TRUE(handle.Signal(0));
  handle.Ended();
  // The group still exists, but the handle no longer refers to it (the id
  // could belong to an unrelated group by now).
  EXPECT_EQ(kill(-child->pid(), 0), 0);
  EXPECT_EQ(handle.pgid(), 0);
  EXPECT_TRUE(handle.Empty());
  EXPECT_FALSE(handle.Signal(SIGKILL));
  EXPECT_EQ(kill(-child->pid(), 0), 0);
  EXPECT_TRUE(child->Terminate(1000));
}

TEST_F(ChildProcessTest, ExitStatusToString) {
  EXPECT_EQ((ExitStatus{false, 3}).ToString(), "exited with status 3");
  EXPECT_EQ((ExitStatus{false, 0}).ToString(), "exited with status 0");
  EXPECT_EQ((ExitStatus{true, SIGSEGV}).ToString(), "was killed by signal 11 (Segmentation fault)");
  EXPECT_EQ((ExitStatus{true, SIGKILL}).ToString(), "was killed by signal 9 (Killed)");
  EXPECT_EQ((ExitStatus{true, 200}).ToString(), "was killed by signal 200");
}

TEST_F(ChildProcessTest, PollReportsTheExitStatusOfARealChild) {
  auto child = Start(Shell("exit 3"));
  ASSERT_NE(child, nullptr);
  const auto deadline = Clock::now() + milliseconds(5000);
  while (!child->Poll() && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(2));
  ASSERT_TRUE(child->exit_status().has_value());
  EXPECT_EQ(child->exit_status()->ToString(), "exited with status 3");
  EXPECT_TRUE(GroupGone(child->pid()));
  EXPECT_TRUE(child->Terminate(1000));
}

// ---------------------------------------------------------------- PR_SET_PDEATHSIG

// PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not
// when its process does (prctl(2): "the parent" is the creating thread). The
// worker relies on exactly this: an actor's runner thread spawns its
// trainable's process, so the process cannot outlive the actor's thread.
// Conversely, whoever spawns a child must keep the spawning thread alive as
// long as the child is meant to run.
TEST_F(ChildProcessTest, PdeathsigKillsTheChildWhenTheSpawningThreadExits) {
  std::unique_ptr<ChildProcess> child;
  std::promise<void> spawned;
  std::promise<void> may_exit;
  std::shared_future<void> may_exit_f = may_exit.get_future().share();
  std::thread spawner([&] {
    child = Start(Shell("exec sleep 100"));
    spawned.set_value();
    may_exit_f.wait();
  });
  spawned.get_future().wait();
  if (child == nullptr) {
    may_exit.set_value();
    spawner.join();
    FAIL() << "spawn failed";
  }
  // While the spawning thread lives, so does the child.
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(child->Poll().has_value());
  EXPECT_EQ(kill(child->pid(), 0), 0);

  may_exit.set_value();
  spawner.join();
  // The thread is gone (the process is not): SIGKILL from PDEATHSIG. This
  // thread can reap it: waitpid serves any thread of the parent process.
  const auto deadline = Clock::now() + milliseconds(5000);
  while (!child->Poll() && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(2));
  ASSERT_TRUE(child->exit_status().has_value()) << "the child outlived its spawning thread";
  EXPECT_TRUE(child->exit_status()->signaled);
  EXPECT_EQ(child->exit_status()->code, SIGKILL);
  EXPECT_TRUE(GroupGone(child->pid()));
}

}  // namespace
}  // namespace ztune::worker
