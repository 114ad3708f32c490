#include "storage/rocksdb_info_log.h"

#include <pthread.h>
#include <sys/time.h>

#include <algorithm>
#include <cinttypes>
#include <ctime>
#include <filesystem>
#include <system_error>

namespace ztune::storage::internal {
namespace {

namespace fs = std::filesystem;

// Old info logs kept next to LOG (RocksDB's keep_log_file_num, as before).
constexpr size_t kKeepOldInfoLogs = 5;

uint64_t NowMicros() {
  struct timeval tv {};
  ::gettimeofday(&tv, nullptr);
  return static_cast<uint64_t>(tv.tv_sec) * 1000000u + static_cast<uint64_t>(tv.tv_usec);
}

// Renames dir/LOG to dir/LOG.old.<micros> and removes all but the newest
// kKeepOldInfoLogs old logs. Best effort: a log is not worth failing for.
void RotateInfoLog(const std::string& dir) {
  std::error_code ec;
  const fs::path log = fs::path(dir) / "LOG";
  if (fs::exists(log, ec) && fs::file_size(log, ec) > 0 && !ec) {
    fs::rename(log, fs::path(dir) / ("LOG.old." + std::to_string(NowMicros())), ec);
  }
  std::vector<std::string> old;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("LOG.old.", 0) == 0) old.push_back(name);
  }
  // Same-width microsecond stamps: name order is age order.
  std::sort(old.begin(), old.end());
  for (size_t i = 0; i + kKeepOldInfoLogs < old.size(); ++i) {
    fs::remove(fs::path(dir) / old[i], ec);
  }
}

const char* LevelName(rocksdb::InfoLogLevel level) {
  switch (level) {
    case rocksdb::InfoLogLevel::DEBUG_LEVEL:
      return "DEBUG";
    case rocksdb::InfoLogLevel::INFO_LEVEL:
      return "INFO";
    case rocksdb::InfoLogLevel::WARN_LEVEL:
      return "WARN";
    case rocksdb::InfoLogLevel::ERROR_LEVEL:
      return "ERROR";
    case rocksdb::InfoLogLevel::FATAL_LEVEL:
      return "FATAL";
    default:
      return "HEADER";
  }
}

// INFO lines that describe WAL recovery or repair: worth quoting in a report.
bool IsNotableInfo(const std::string& line) {
  for (const char* needle : {"Point in time", "dropping", "Archiving", "ops saved", "Repaired",
                             "ignoring", "Recovering log", "Log #"}) {
    if (line.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

std::shared_ptr<InfoLog> InfoLog::ToFile(const std::string& dir) {
  std::shared_ptr<InfoLog> log(new InfoLog(dir));
  std::lock_guard<std::mutex> lock(log->mu_);
  RotateInfoLog(dir);
  log->OpenFile();
  return log;
}

std::shared_ptr<InfoLog> InfoLog::InMemory() { return std::shared_ptr<InfoLog>(new InfoLog("")); }

InfoLog::InfoLog(std::string dir)
    : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL), dir_(std::move(dir)) {}

InfoLog::~InfoLog() {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
}

void InfoLog::OpenFile() {
  if (dir_.empty()) return;
  file_ = std::fopen((dir_ + "/LOG").c_str(), "ae");
  file_bytes_ = 0;
}

void InfoLog::Logv(const char* format, va_list ap) {
  Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
}

void InfoLog::Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) {
  if (level < GetInfoLogLevel()) return;
  char stack[512];
  va_list copy;
  va_copy(copy, ap);
  const int n = std::vsnprintf(stack, sizeof(stack), format, copy);
  va_end(copy);
  if (n < 0) return;
  std::string message;
  if (static_cast<size_t>(n) < sizeof(stack)) {
    message.assign(stack, static_cast<size_t>(n));
  } else {
    message.resize(static_cast<size_t>(n) + 1);
    std::vsnprintf(message.data(), message.size(), format, ap);
    message.resize(static_cast<size_t>(n));
  }
  while (!message.empty() && message.back() == '\n') message.pop_back();
  std::lock_guard<std::mutex> lock(mu_);
  Write(level, message);
}

void InfoLog::Write(rocksdb::InfoLogLevel level, const std::string& message) {
  // (RocksDB 7.8 warns about every table file it opens without a unique id
  // to verify, e.g. those its own recovery just wrote: noise in a report.)
  const bool notable = ((level >= rocksdb::InfoLogLevel::WARN_LEVEL &&
                         level != rocksdb::InfoLogLevel::HEADER_LEVEL) ||
                        (level == rocksdb::InfoLogLevel::INFO_LEVEL && IsNotableInfo(message))) &&
                       message.find("without unique ID to verify") == std::string::npos;
  if (notable) {
    // Without RocksDB's "[db/db_impl/db_impl_open.cc:982] " source prefix.
    const size_t close = message.find("] ");
    notable_.push_back(message.size() > 1 && message[0] == '[' && close != std::string::npos
                           ? message.substr(close + 2)
                           : message);
    if (notable_.size() > kMaxNotable) notable_.pop_front();
  }
  if (file_ == nullptr) return;
  if (file_bytes_ > kMaxFileBytes) {
    std::fclose(file_);
    file_ = nullptr;
    RotateInfoLog(dir_);
    OpenFile();
    if (file_ == nullptr) return;
  }
  const uint64_t micros = NowMicros();
  const time_t secs = static_cast<time_t>(micros / 1000000);
  struct tm t {};
  ::localtime_r(&secs, &t);
  char prefix[96];
  std::snprintf(prefix, sizeof(prefix), "%04d/%02d/%02d-%02d:%02d:%02d.%06llu %llx [%s] ",
                t.tm_year + 1900, t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec,
                static_cast<unsigned long long>(micros % 1000000),
                static_cast<unsigned long long>(::pthread_self()), LevelName(level));
  const std::string line = prefix + message + "\n";
  // A failed write (a full disk) ends file logging for this store; RocksDB
  // must never see it.
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    std::fclose(file_);
    file_ = nullptr;
    return;
  }
  file_bytes_ += line.size();
}

void InfoLog::Flush() {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ != nullptr && std::fflush(file_) != 0) {
    std::fclose(file_);
    file_ = nullptr;
  }
}

rocksdb::Status InfoLog::CloseImpl() {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
  return rocksdb::Status::OK();
}

std::vector<std::string> InfoLog::Notable() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::vector<std::string>(notable_.begin(), notable_.end());
}

std::string RocksDbSaid(const InfoLog& log) {
  std::vector<std::string> picked;
  for (const std::string& line : log.Notable()) {
    if (line.find(".log") != std::string::npos || line.find("MANIFEST") != std::string::npos ||
        line.find(".sst") != std::string::npos || line.find("dropping") != std::string::npos) {
      picked.push_back(line);
    }
  }
  if (picked.empty()) return "";
  // The last few are the ones that ended the open.
  if (picked.size() > 3) picked.erase(picked.begin(), picked.end() - 3);
  std::string s = " RocksDB said: ";
  for (size_t i = 0; i < picked.size(); ++i) s += (i ? " | " : "") + picked[i];
  return s + ".";
}

}  // namespace ztune::storage::internal
