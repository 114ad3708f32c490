#include "worker/trial_log.h"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <system_error>

#include <spdlog/spdlog.h>

#include "worker/trainable.h"

namespace ztune::worker {

std::string SanitizeForPath(std::string_view trial_id) {
  std::string out;
  out.reserve(trial_id.size());
  for (char c : trial_id) {
    bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_' || c == '-';
    out.push_back(keep ? c : '_');
  }
  if (out.empty() || out == "." || out == "..") return std::string(1, '_');
  return out;
}

std::string TrialDir(const std::string& work_dir, std::string_view trial_id) {
  return (std::filesystem::path(work_dir) / SanitizeForPath(trial_id)).string();
}

TrialLog::TrialLog(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) {
    spdlog::warn("cannot create trial directory {}: {}", dir_, ec.message());
    return;
  }
  std::string path = (std::filesystem::path(dir_) / "trial.log").string();
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) {
    spdlog::warn("cannot open trial log {}", path);
    return;
  }
  path_ = std::move(path);
}

TrialLog::~TrialLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void TrialLog::Write(std::string_view line) {
  if (file_ == nullptr) return;
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() %
            1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
  std::lock_guard<std::mutex> lock(mu_);
  std::fprintf(file_, "%s.%03d %.*s\n", stamp, static_cast<int>(ms),
               static_cast<int>(line.size()), line.data());
  std::fflush(file_);
}

void TrialContext::Log(std::string_view line) const {
  if (log_sink != nullptr) log_sink->Write(line);
}

bool TrialContext::StopRequested() const {
  return stop_flag != nullptr && stop_flag->load(std::memory_order_relaxed);
}

}  // namespace ztune::worker
