#include "worker/trial_output.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "worker/trial_output_index.h"

namespace ztune::worker {
namespace {

constexpr size_t kTailLines = 20;
constexpr size_t kTailBytes = 4096;

}  // namespace

TrialOutput::TrialOutput(int stdout_fd, int stderr_fd, const std::string& dir, uint64_t attempt,
                         std::string_view header)
    : stdout_fd_(stdout_fd), stderr_fd_(stderr_fd) {
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    spdlog::error("trial output pipe: {}", std::strerror(errno));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    OpenLocked(dir);
    HeaderLocked(attempt, header);
  }
  thread_ = std::thread([this] { Run(); });
}

TrialOutput::~TrialOutput() {
  Stop();
  for (int& fd : wake_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

void TrialOutput::OpenLocked(const std::string& dir) {
  dir_ = dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string out = dir + "/stdout";
  const std::string err = dir + "/stderr";
  out_ = std::fopen(out.c_str(), "ae");
  err_ = std::fopen(err.c_str(), "ae");
  // An earlier attempt may have ended mid-line (killed, or a progress bar).
  auto ends_mid_line = [](const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "re");
    if (f == nullptr) return false;
    bool mid = std::fseek(f, -1, SEEK_END) == 0 && std::fgetc(f) != '\n';
    std::fclose(f);
    return mid;
  };
  out_mid_line_ = ends_mid_line(out);
  err_mid_line_ = ends_mid_line(err);
  // Losing a log must not fail the trial; the worker's log says why.
  if (out_ == nullptr) spdlog::warn("cannot open {}: {}", out, std::strerror(errno));
  if (err_ == nullptr) spdlog::warn("cannot open {}: {}", err, std::strerror(errno));
}

void TrialOutput::CloseFilesLocked() {
  if (out_ != nullptr) std::fclose(out_);
  if (err_ != nullptr) std::fclose(err_);
  out_ = nullptr;
  err_ = nullptr;
}

void TrialOutput::RememberStderrLocked(std::string_view bytes) {
  partial_.append(bytes);
  size_t nl;
  while ((nl = partial_.find('\n')) != std::string::npos) {
    tail_.push_back(partial_.substr(0, nl));
    partial_.erase(0, nl + 1);
    if (tail_.size() > kTailLines) tail_.pop_front();
  }
  // A line without an end (a progress bar) must not grow without bound.
  if (partial_.size() > kTailBytes) partial_.erase(0, partial_.size() - kTailBytes);
}

bool TrialOutput::DrainLocked(int& fd, std::FILE* file, bool is_stderr) {
  if (fd < 0) return false;
  char buf[65536];
  while (true) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      if (file != nullptr) {
        std::fwrite(buf, 1, static_cast<size_t>(n), file);
        MidLineLocked(file) = buf[n - 1] != '\n';
      }
      if (is_stderr) RememberStderrLocked(std::string_view(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (file != nullptr) std::fflush(file);
      return true;
    }
    // End of file: every writer (the child and whatever it started) is gone.
    if (file != nullptr) std::fflush(file);
    close(fd);
    fd = -1;
    return false;
  }
}

void TrialOutput::Run() {
  while (true) {
    pollfd fds[3];
    int n = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stdout_fd_ < 0 && stderr_fd_ < 0) return;
      if (stdout_fd_ >= 0) fds[n++] = {stdout_fd_, POLLIN, 0};
      if (stderr_fd_ >= 0) fds[n++] = {stderr_fd_, POLLIN, 0};
    }
    fds[n++] = {wake_[0], POLLIN, 0};
    int r = poll(fds, static_cast<nfds_t>(n), -1);
    if (r < 0 && errno != EINTR) {
      spdlog::error("trial output poll: {}", std::strerror(errno));
      return;
    }
    if (fds[n - 1].revents != 0) return;  // Stop(): it drains what is left
    std::lock_guard<std::mutex> lock(mu_);
    DrainLocked(stdout_fd_, out_, false);
    DrainLocked(stderr_fd_, err_, true);
  }
}

void TrialOutput::SwitchLocked(const std::string& dir) {
  DrainLocked(stdout_fd_, out_, false);
  DrainLocked(stderr_fd_, err_, true);
  tail_.clear();  // an error of the next trial quotes only its own stderr
  partial_.clear();
  CloseFilesLocked();
  OpenLocked(dir);
}

void TrialOutput::SwitchTo(const std::string& dir, uint64_t attempt, std::string_view header) {
  std::lock_guard<std::mutex> lock(mu_);
  SwitchLocked(dir);
  HeaderLocked(attempt, header);
}

void TrialOutput::ReturnTo(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  SwitchLocked(dir);
}

void TrialOutput::Flush() {
  std::lock_guard<std::mutex> lock(mu_);
  DrainLocked(stdout_fd_, out_, false);
  DrainLocked(stderr_fd_, err_, true);
}

void TrialOutput::HeaderLocked(uint64_t attempt, std::string_view line) {
  long offsets[2] = {0, 0};
  int i = 0;
  for (std::FILE* f : {out_, err_}) {
    long& offset = offsets[i++];
    if (f == nullptr) continue;
    if (MidLineLocked(f)) std::fputc('\n', f);
    MidLineLocked(f) = false;
    std::fflush(f);
    offset = std::max(0L, std::ftell(f));
  }
  if (Status s = AppendOutputIndex(dir_, attempt, static_cast<uint64_t>(offsets[0]),
                                   static_cast<uint64_t>(offsets[1]));
      !s.ok()) {
    // `ztune logs` then cannot find this attempt's part; the trial goes on.
    spdlog::warn("trial output index: {}", s.message());
  }
  for (std::FILE* f : {out_, err_}) {
    if (f == nullptr) continue;
    std::fwrite(line.data(), 1, line.size(), f);
    std::fputc('\n', f);
    std::fflush(f);
  }
}

std::string TrialOutput::StderrTail() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& line : tail_) out += line + "\n";
  out += partial_;
  if (out.size() > kTailBytes) out.erase(0, out.size() - kTailBytes);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void TrialOutput::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (wake_[1] >= 0) {
    char one = 1;
    ssize_t n = write(wake_[1], &one, 1);
    (void)n;
  }
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  DrainLocked(stdout_fd_, out_, false);
  DrainLocked(stderr_fd_, err_, true);
  for (int* fd : {&stdout_fd_, &stderr_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
  CloseFilesLocked();
}

}  // namespace ztune::worker
