#include "worker/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

namespace ztune::worker {
namespace {

// What the child reports over the exec-error pipe when it cannot start.
struct ExecFailure {
  int stage;  // 1 chdir, 2 execve, 3 moving the descriptors to 0..5
  int error;
};

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// The child between fork and exec: only async-signal-safe calls. fds: the
// six descriptors to become 0..5 (5: the exec-error pipe, kept close-on-exec).
[[noreturn]] void RunChild(pid_t parent, const int (&fds)[6], const char* program,
                           char* const* argv, char* const* envp, const char* cwd) {
  setpgid(0, 0);
  // Bound to the thread that forked: the runner thread lives as long as the
  // actor, so the child dies with the actor's thread or the whole worker.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the worker died before the prctl
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  // The worker ignores SIGPIPE; a trainable should see the default.
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);
  // Until the descriptors are in place the error pipe is wherever it is now.
  int error_fd = fds[5];
  auto fail = [&error_fd](int stage) {
    ExecFailure f{stage, errno};
    ssize_t n = write(error_fd, &f, sizeof(f));
    (void)n;
    _exit(127);
  };
  int high[6];
  for (int i = 0; i < 6; ++i) {
    high[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 10);
    if (high[i] < 0) fail(3);
  }
  error_fd = high[5];
  for (int i = 0; i < 6; ++i) {
    if (dup2(high[i], i) < 0) fail(3);
  }
  error_fd = 5;
  fcntl(5, F_SETFD, FD_CLOEXEC);
  if (close_range(6, ~0U, 0) != 0) {
    for (int fd = 6; fd < 65536; ++fd) close(fd);
  }
  if (cwd[0] != '\0' && chdir(cwd) != 0) fail(1);
  execve(program, argv, envp);
  fail(2);
  _exit(127);  // not reached
}

bool ReapOne(pid_t who, pid_t main_pid, std::optional<ExitStatus>& main_exit, int flags) {
  int status = 0;
  pid_t r = waitpid(who, &status, flags);
  if (r <= 0) return false;
  if (r == main_pid && !main_exit) {
    ExitStatus e;
    if (WIFSIGNALED(status)) {
      e.signaled = true;
      e.code = WTERMSIG(status);
    } else {
      e.code = WEXITSTATUS(status);
    }
    main_exit = e;
  }
  return true;
}

// Set once this process became a child subreaper (the first Spawn).
std::atomic<bool> g_subreaper{false};

// State, process group and session of `pid` from /proc/<pid>/stat; false if
// it is gone. The command name may hold spaces and parentheses: parse after
// the last ')'.
bool ReadStat(pid_t pid, char& state, pid_t& pgrp, pid_t& session) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return false;
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(text.substr(close + 1));
  pid_t ppid = 0;
  return static_cast<bool>(rest >> state >> ppid >> pgrp >> session);
}

}  // namespace

int ReapOrphanedDescendants(const std::set<pid_t>& managed_groups) {
  if (!g_subreaper.load()) return 0;
  const pid_t own_group = getpgrp();
  const pid_t own_session = getsid(0);
  // Children hang off the thread that forked them, or, re-parented, off any
  // thread of this process: read every task's list.
  std::vector<pid_t> children;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream in(task.path() / "children");
    pid_t pid = 0;
    while (in >> pid) children.push_back(pid);
  }
  int reaped = 0;
  for (pid_t pid : children) {
    char state = 0;
    pid_t pgrp = 0, session = 0;
    if (!ReadStat(pid, state, pgrp, session) || state != 'Z') continue;
    if (managed_groups.count(pgrp) > 0 || pgrp == own_group) continue;
    if (session == own_session && pgrp == pid) continue;
    if (waitpid(pid, nullptr, WNOHANG) == pid) ++reaped;
  }
  return reaped;
}

// ---------------- ProcessGroup ----------------

void ProcessGroup::Started(pid_t pgid, int64_t grace_ms) {
  grace_ms_.store(grace_ms);
  pgid_.store(pgid);
}

bool ProcessGroup::Signal(int sig) const {
  const pid_t g = pgid_.load();
  if (g <= 0) return false;
  return kill(-g, sig) == 0;
}

bool ProcessGroup::Empty() const {
  const pid_t g = pgid_.load();
  if (g <= 0) return true;
  // A zombie still counts: it is gone only once reaped.
  return kill(-g, 0) != 0 && errno == ESRCH;
}

// ---------------- ExitStatus ----------------

std::string ExitStatus::ToString() const {
  if (!signaled) return "exited with status " + std::to_string(code);
  const char* name = sigdescr_np(code);
  return "was killed by signal " + std::to_string(code) +
         (name != nullptr ? " (" + std::string(name) + ")" : std::string());
}

// ---------------- FindProgram ----------------

Result<std::string> FindProgram(const std::string& program, const std::string& path_env) {
  if (program.empty()) return Status::InvalidArgument("empty program name");
  if (program.find('/') != std::string::npos) return program;
  size_t start = 0;
  while (start <= path_env.size()) {
    size_t end = path_env.find(':', start);
    if (end == std::string::npos) end = path_env.size();
    std::string dir = path_env.substr(start, end - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + program;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    start = end + 1;
  }
  return Status::NotFound("'" + program + "' is not an executable file in PATH (" + path_env + ")");
}

// ---------------- ChildProcess ----------------

ChildProcess::ChildProcess(pid_t pid, std::shared_ptr<ProcessGroup> group)
    : pid_(pid), group_(std::move(group)) {}

Result<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(const SpawnOptions& options,
                                                          std::shared_ptr<ProcessGroup> group) {
  static std::once_flag once;
  std::call_once(once, [] {
    signal(SIGPIPE, SIG_IGN);
    // Orphans of a trainable (its own children, once it died) re-parent to
    // this process, stay in the group and are reaped by Terminate.
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    g_subreaper.store(true);
  });
  if (options.argv.empty()) return Status::InvalidArgument("argv is empty");
  const std::string& argv0 = options.argv[0];
  auto program = FindProgram(argv0, options.path_env);
  if (!program.ok()) {
    return Status::InvalidArgument("cannot start " + argv0 + ": " + program.status().message());
  }
  // Everything the child touches is prepared before fork: after it, this
  // multithreaded process may only make async-signal-safe calls.
  std::vector<char*> argv;
  for (const auto& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : options.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int cmd[2] = {-1, -1}, rep[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1},
      exec_err[2] = {-1, -1};
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  auto close_all = [&] {
    for (int* p : {cmd, rep, out, err, exec_err}) {
      CloseFd(p[0]);
      CloseFd(p[1]);
    }
    CloseFd(devnull);
  };
  if (devnull < 0 || pipe2(cmd, O_CLOEXEC) != 0 || pipe2(rep, O_CLOEXEC) != 0 ||
      pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(exec_err, O_CLOEXEC) != 0) {
    const int e = errno;
    close_all();
    return Status::IOError(std::string("cannot create the pipes for a child: ") + strerror(e));
  }
  const int child_fds[6] = {devnull, out[1], err[1], cmd[0], rep[1], exec_err[1]};
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    close_all();
    return Status::IOError(std::string("fork: ") + strerror(e));
  }
  if (pid == 0) {
    RunChild(parent, child_fds, program->c_str(), argv.data(), envp.data(), options.cwd.c_str());
  }
  // Both sides set the group, so it exists whichever runs first.
  setpgid(pid, pid);
  CloseFd(out[1]);
  CloseFd(err[1]);
  CloseFd(cmd[0]);
  CloseFd(rep[1]);
  CloseFd(exec_err[1]);
  CloseFd(devnull);
  std::unique_ptr<ChildProcess> child(new ChildProcess(pid, group));
  child->command_fd_ = cmd[1];
  child->reply_fd_ = rep[0];
  child->stdout_fd_ = out[0];
  child->stderr_fd_ = err[0];
  for (int fd : {cmd[1], rep[0], out[0], err[0]}) SetNonBlocking(fd);
  group->Started(pid, options.grace_ms);

  ExecFailure failure{};
  ssize_t n;
  do {
    n = read(exec_err[0], &failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  CloseFd(exec_err[0]);
  if (n == static_cast<ssize_t>(sizeof(failure))) {
    child->Terminate(0);
    const std::string what = failure.stage == 1   ? "chdir to " + options.cwd
                             : failure.stage == 2 ? "execve " + *program
                                                  : std::string("setting up its descriptors 0..5");
    return Status::InvalidArgument("cannot start " + argv0 + ": " + what + ": " +
                                   strerror(failure.error));
  }
  return child;
}

ChildProcess::~ChildProcess() {
  if (!terminated_ && pid_ > 0) Terminate(0);
  CloseFd(command_fd_);
  CloseFd(reply_fd_);
  CloseFd(stdout_fd_);
  CloseFd(stderr_fd_);
}

int ChildProcess::TakeStdoutFd() {
  int fd = stdout_fd_;
  stdout_fd_ = -1;
  return fd;
}

int ChildProcess::TakeStderrFd() {
  int fd = stderr_fd_;
  stderr_fd_ = -1;
  return fd;
}

void ChildProcess::CloseCommandFd() { CloseFd(command_fd_); }

std::optional<ExitStatus> ChildProcess::Poll() {
  if (!exit_ && ReapOne(pid_, pid_, exit_, WNOHANG) && group_->Empty()) group_->Ended();
  return exit_;
}

void ChildProcess::ReapGroup() {
  const pid_t g = group_->pgid();
  if (g <= 0) return;
  while (ReapOne(-g, pid_, exit_, WNOHANG)) {
  }
}

bool ChildProcess::Terminate(int64_t grace_ms, int64_t give_up_ms) {
  terminated_ = true;
  using Clock = std::chrono::steady_clock;
  auto wait_empty = [&](int64_t ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
    auto nap = std::chrono::milliseconds(1);
    while (true) {
      ReapGroup();
      if (group_->Empty()) {
        group_->Ended();
        return true;
      }
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::milliseconds(20));
    }
  };
  ReapGroup();
  if (group_->Empty()) {
    group_->Ended();
    return true;
  }
  if (grace_ms > 0) {
    group_->Signal(SIGTERM);
    if (wait_empty(grace_ms)) return true;
  }
  group_->Signal(SIGKILL);
  if (wait_empty(give_up_ms)) return true;
  spdlog::error("process group {} still has members {} ms after SIGKILL; left behind",
                group_->pgid(), give_up_ms);
  return false;
}

}  // namespace ztune::worker
