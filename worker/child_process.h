// Starting a trainable's program as a child process in its own process group,
// wired to the worker by pipes (docs/process-protocol.md), and ending the
// whole group.
//
// Thread affinity: a ChildProcess belongs to the thread that spawned it (an
// actor's runner thread): only that thread reaps. Its ProcessGroup handle is
// shared with the control thread, which may signal the group and ask whether
// any of it is left while the runner thread is busy or abandoned.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace ztune::worker {

// The process group of one child. Thread-safe.
class ProcessGroup {
 public:
  // Called once by the spawner; `grace_ms` is how long the group gets after
  // SIGTERM before SIGKILL.
  void Started(pid_t pgid, int64_t grace_ms);
  // 0 before Started.
  pid_t pgid() const { return pgid_.load(); }
  int64_t grace_ms() const { return grace_ms_.load(); }
  // Sends `sig` to every process of the group; false if none is left or the
  // group never started.
  bool Signal(int sig) const;
  // True when no process of the group exists any more (every member exited
  // and was reaped), or when it never started.
  bool Empty() const;
  // Called by the owner once Empty() turned true: from then on Signal and
  // Empty never look at the id again, which the kernel may give to a new,
  // unrelated group.
  void Ended() { pgid_.store(0); }

 private:
  std::atomic<pid_t> pgid_{0};
  std::atomic<int64_t> grace_ms_{0};
};

struct SpawnOptions {
  // argv[0] is run as is when it holds a '/', else looked up in `path_env`.
  std::vector<std::string> argv;
  // The complete environment, "NAME=value" each.
  std::vector<std::string> env;
  // The PATH used to find argv[0] (the worker's own).
  std::string path_env;
  std::string cwd;
  int64_t grace_ms = 5000;
};

// How a child ended, as waitpid reported it.
struct ExitStatus {
  bool signaled = false;
  int code = 0;  // exit status, or the signal number when signaled
  // "exited with status 3" / "was killed by signal 11 (Segmentation fault)"
  std::string ToString() const;
};

// Reaps zombie children that no ChildProcess waits for: descendants of a
// trainable that left its process group (setsid, start_new_session=True, a
// daemon) re-parent to the worker, which is a child subreaper once it has
// spawned a trainable, and would stay zombies for the worker's life. Left
// alone: members of `managed_groups` (the groups of live and dying actors,
// reaped by their owners), group leaders in the worker's own session (a
// trainable's main process, whose group may not be recorded yet), and
// anything in the worker's own process group. Returns how many were reaped.
// Control thread, about once per heartbeat; a no-op before the first Spawn.
int ReapOrphanedDescendants(const std::set<pid_t>& managed_groups);

class ChildProcess {
 public:
  // Forks and executes options.argv. The child: its own process group, SIGKILL
  // when the spawning thread's process dies (PR_SET_PDEATHSIG), default
  // signal dispositions and mask, stdin /dev/null, stdout/stderr/commands/
  // replies on pipes (fds 1, 2, 3, 4), every other descriptor closed, and
  // options.cwd as working directory. InvalidArgument (naming argv[0] and the
  // reason) when the program cannot be found or executed or cwd is unusable:
  // the exec error travels back over a close-on-exec pipe, so a failed exec
  // is reported here, not as a mysterious exit 127.
  // `group` receives the child's pgid. Ignores SIGPIPE process-wide (once):
  // writing to a child that died must fail with EPIPE, not kill the worker.
  static Result<std::unique_ptr<ChildProcess>> Spawn(const SpawnOptions& options,
                                                     std::shared_ptr<ProcessGroup> group);
  ~ChildProcess();  // kills and reaps the group if that was not done (Terminate)
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Parent ends of the pipes; non-blocking. -1 once closed.
  int command_fd() const { return command_fd_; }
  int reply_fd() const { return reply_fd_; }
  // Taken by the output pump (which then owns and closes them).
  int TakeStdoutFd();
  int TakeStderrFd();
  void CloseCommandFd();

  // Reaps the main child if it has exited (non-blocking); its status once it
  // has.
  std::optional<ExitStatus> Poll();
  const std::optional<ExitStatus>& exit_status() const { return exit_; }

  // Ends the group: SIGTERM, up to grace_ms for every member to exit, SIGKILL,
  // then waits until none is left, reaping what is ours. Returns false if
  // members were still there `give_up_ms` after SIGKILL (a process stuck in
  // the kernel); the group is then logged and left. Blocks the calling thread.
  bool Terminate(int64_t grace_ms, int64_t give_up_ms = 10000);

  // Reaps every exited member of the group that is our child (the main
  // child, and members re-parented to this worker, a child subreaper).
  void ReapGroup();

 private:
  ChildProcess(pid_t pid, std::shared_ptr<ProcessGroup> group);

  pid_t pid_ = -1;
  std::shared_ptr<ProcessGroup> group_;
  int command_fd_ = -1;
  int reply_fd_ = -1;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
  std::optional<ExitStatus> exit_;
  bool terminated_ = false;
};

// Resolves `program` against `path_env` like execvp does (a name with a '/'
// is returned as is). NotFound naming the program when nothing executable is
// found.
Result<std::string> FindProgram(const std::string& program, const std::string& path_env);

}  // namespace ztune::worker
