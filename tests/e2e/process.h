// Helpers for end-to-end tests: spawn the real binaries, run CLI commands,
// wait for conditions with a deadline. Test-thread only.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/json.h"

namespace ztune::e2e {

// A child process whose stdout/stderr go to `log_path`, with this process's
// environment changed by `env`: a NAME=VALUE entry adds or replaces, a bare
// NAME removes. Killed (SIGKILL) on destruction if still running.
class Process {
 public:
  Process(const std::string& binary, const std::vector<std::string>& args,
          const std::string& log_path, const std::vector<std::string>& env = {}) {
    // Built before fork: the child only execs.
    auto name_of = [](const std::string& var) { return var.substr(0, var.find('=')); };
    std::vector<std::string> vars;
    for (const auto& v : env) {
      if (v.find('=') != std::string::npos) vars.push_back(v);
    }
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string var = *e;
      bool changed = false;
      for (const auto& v : env) changed |= name_of(v) == name_of(var);
      if (!changed) vars.push_back(var);
    }
    std::vector<char*> envp;
    for (auto& v : vars) envp.push_back(v.data());
    envp.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      FILE* log = std::fopen(log_path.c_str(), "a");
      if (log != nullptr) {
        dup2(fileno(log), 1);
        dup2(fileno(log), 2);
      }
      setpgid(0, 0);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(binary.c_str()));
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execve(binary.c_str(), argv.data(), envp.data());
      std::perror("execve");
      _exit(127);
    }
  }
  ~Process() { Kill(SIGKILL); }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  bool Running() {
    if (pid_ <= 0) return false;
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_status_ = status;
      pid_ = -1;
      return false;
    }
    return true;
  }
  void Signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }
  // Sends `sig` and reaps the process.
  void Kill(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    exit_status_ = status;
    pid_ = -1;
  }
  // Waits up to `timeout` for a clean exit after SIGTERM; SIGKILL otherwise.
  int Stop(std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
    if (pid_ <= 0) return exit_status_;
    kill(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (!Running()) return exit_status_;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    Kill(SIGKILL);
    return exit_status_;
  }

 private:
  pid_t pid_ = -1;
  int exit_status_ = 0;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;
};

// Runs a command line through the shell; stdout captured, stderr merged when
// `merge_stderr`.
inline CommandResult Run(const std::string& command, bool merge_stderr = true) {
  CommandResult r;
  std::string cmd = command + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

// Polls `cond` every 20 ms until it holds or `timeout` passes.
inline bool WaitFor(const std::function<bool()>& cond,
                    std::chrono::milliseconds timeout = std::chrono::milliseconds(30000)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return cond();
}

// Seconds on the steady clock since `t0`.
inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline std::string TempDir(const std::string& tag) {
  std::string tmpl = (std::filesystem::temp_directory_path() / ("ztune-" + tag + "-XXXXXX")).string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  char* d = mkdtemp(buf.data());
  return d == nullptr ? std::string() : std::string(d);
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline bool Contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// Expects `r` to have exited with `exit_code` and its output to name each of `words`.
inline void ExpectExit(const CommandResult& r, int exit_code,
                       const std::vector<std::string>& words) {
  EXPECT_EQ(r.exit_code, exit_code) << r.out;
  for (const auto& w : words) EXPECT_TRUE(Contains(r.out, w)) << "'" << w << "' not in:\n" << r.out;
}

}  // namespace ztune::e2e
