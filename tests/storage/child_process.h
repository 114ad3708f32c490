// Runs tests/storage/store_child_main.cc (the storage_test_child binary) as a
// child process whose stdout-like report channel is a pipe, for tests that
// need a second process: SIGKILL crash atomicity and the cross-process lock.
//
// The child is started with fork + exec, never fork alone: by the time a test
// runs, earlier tests have started RocksDB's process-wide background threads,
// and using RocksDB in a forked copy of a multi-threaded process can deadlock.
// Test-thread only.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace ztune::storage::testutil {

class ChildProcess {
 public:
  // Starts `storage_test_child <args...> <report fd>`. pid() is -1 on failure.
  explicit ChildProcess(std::vector<std::string> args) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    const std::string report_fd = std::to_string(kChildReportFd);
    std::vector<std::string> argv_storage;
    argv_storage.push_back(ZTUNE_STORAGE_TEST_CHILD);
    for (std::string& a : args) argv_storage.push_back(std::move(a));
    argv_storage.push_back(report_fd);
    std::vector<char*> argv;
    for (std::string& a : argv_storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();

    pid_ = ::fork();
    if (pid_ == 0) {
      // Child: async-signal-safe calls only until exec.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(3);
      // dup2 clears O_CLOEXEC on the new descriptor, unless it is the same.
      if (fds[1] == kChildReportFd) {
        if (::fcntl(fds[1], F_SETFD, 0) != 0) ::_exit(3);
      } else if (::dup2(fds[1], kChildReportFd) < 0) {
        ::_exit(3);
      }
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    if (pid_ < 0) {
      ::close(fds[0]);
      return;
    }
    read_fd_ = fds[0];
  }

  ~ChildProcess() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      Wait();
    }
    if (read_fd_ >= 0) ::close(read_fd_);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // The next '\n'-terminated report line, or nullopt on EOF, error or after
  // `timeout` without one.
  std::optional<std::string> ReadLine(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{read_fd_, POLLIN, 0};
      const int n = ::poll(&p, 1, static_cast<int>(left.count()));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::nullopt;
      char chunk[4096];
      const ssize_t got = ::read(read_fd_, chunk, sizeof chunk);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(got));
    }
  }

  void Kill() { ::kill(pid_, SIGKILL); }

  // Reaps the child; its wait status.
  int Wait() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    return status;
  }

 private:
  // Where the child finds the write end of the report pipe.
  static constexpr int kChildReportFd = 3;

  pid_t pid_ = -1;
  int read_fd_ = -1;
  bool reaped_ = false;
  std::string buffer_;
};

}  // namespace ztune::storage::testutil
