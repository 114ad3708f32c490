#include "worker/code_cache.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <spdlog/spdlog.h>

#include "common/checkpoint/directory_archive.h"

namespace ztune::worker {
namespace fs = std::filesystem;

namespace {

std::string AbsoluteOf(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  return (ec ? fs::path(path) : p).lexically_normal().string();
}

bool Exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

}  // namespace

CodeCache::CodeCache(std::string root) : root_(AbsoluteOf(root)) {
  std::error_code ec;
  if (!fs::is_directory(root_, ec)) return;
  for (fs::directory_iterator it(root_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 5 &&
        (name.ends_with(".part") || name.find(".unpack-") != std::string::npos)) {
      std::error_code rm;
      fs::remove_all(it->path(), rm);
    }
  }
}

std::string CodeCache::PathOf(std::string_view hex, const char* suffix) const {
  return root_ + "/" + std::string(hex) + suffix;
}

std::string CodeCache::DirOf(std::string_view hex) const { return PathOf(hex, ""); }

void CodeCache::Want(const std::string& hex) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(hex);
  if (it != entries_.end() && it->second.state != State::kFailed) return;
  if (Exists(DirOf(hex)) || Exists(PathOf(hex, ".zar"))) {
    entries_[hex].state = State::kFetched;
    return;
  }
  Entry& e = entries_[hex];
  e = Entry{};
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec) {
    FailLocked(hex, e, "cannot create " + root_ + ": " + ec.message());
    return;
  }
  e.file.open(PathOf(hex, ".part"), std::ios::binary | std::ios::trunc);
  if (!e.file) FailLocked(hex, e, "cannot write " + PathOf(hex, ".part"));
}

std::vector<protocol::FetchCode> CodeCache::DueRequests(TimeMs now, TimeMs resend_ms) {
  std::vector<protocol::FetchCode> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [hex, e] : entries_) {
    if (e.state != State::kFetching) continue;
    if (e.last_request >= 0 && now - e.last_request < resend_ms) continue;
    if (e.last_request >= 0) {
      spdlog::info("code sha256:{}: no page for {} ms; asking again at offset {}", hex,
                   now - e.last_request, e.offset);
    }
    e.last_request = now;
    out.push_back(protocol::FetchCode{hex, e.offset});
  }
  return out;
}

void CodeCache::ResendAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [hex, e] : entries_) e.last_request = -1;
}

void CodeCache::FailLocked(const std::string& hex, Entry& e, std::string error) {
  spdlog::error("code sha256:{}: {}", hex, error);
  if (e.file.is_open()) e.file.close();
  std::error_code ec;
  fs::remove(PathOf(hex, ".part"), ec);
  e.state = State::kFailed;
  e.error = std::move(error);
  changed_.notify_all();
}

std::optional<protocol::FetchCode> CodeCache::OnPage(const protocol::CodePage& page,
                                                     std::string_view bytes, TimeMs now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(page.code);
  if (it == entries_.end() || it->second.state != State::kFetching) return std::nullopt;
  Entry& e = it->second;
  const std::string& hex = it->first;
  if (page.offset != e.offset) return std::nullopt;  // an answer to a resent request
  if (!page.ok) {
    FailLocked(hex, e, "the head refused it: " + page.error);
    return std::nullopt;
  }
  if (e.offset == 0) {
    if (page.size == 0 || page.size > kMaxArchiveBytes) {
      FailLocked(hex, e,
                 "the head says it has " + std::to_string(page.size) +
                     " bytes (a worker takes 1 to " + std::to_string(kMaxArchiveBytes) + ")");
      return std::nullopt;
    }
    e.size = page.size;
  } else if (page.size != e.size) {
    FailLocked(hex, e,
               "its size changed during the fetch, from " + std::to_string(e.size) + " to " +
                   std::to_string(page.size) + " bytes");
    return std::nullopt;
  }
  const uint64_t want = std::min<uint64_t>(protocol::kCodePageBytes, e.size - e.offset);
  if (bytes.size() != want) {
    FailLocked(hex, e,
               "the page at offset " + std::to_string(e.offset) + " has " +
                   std::to_string(bytes.size()) + " bytes, not " + std::to_string(want));
    return std::nullopt;
  }
  e.file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!e.file) {
    FailLocked(hex, e, "cannot write " + PathOf(hex, ".part"));
    return std::nullopt;
  }
  e.hasher.Update(bytes);
  e.offset += bytes.size();
  if (e.offset < e.size) {
    e.last_request = now;
    return protocol::FetchCode{hex, e.offset};
  }
  e.file.close();
  if (!e.file) {
    FailLocked(hex, e, "cannot write " + PathOf(hex, ".part"));
    return std::nullopt;
  }
  const std::string got = DigestHex(e.hasher.Finish());
  if (got != hex) {
    FailLocked(hex, e, "the bytes the head sent have sha256 " + got + "; not used");
    return std::nullopt;
  }
  std::error_code ec;
  fs::rename(PathOf(hex, ".part"), PathOf(hex, ".zar"), ec);
  if (ec) {
    FailLocked(hex, e, "cannot rename " + PathOf(hex, ".part") + ": " + ec.message());
    return std::nullopt;
  }
  spdlog::info("code sha256:{} fetched ({} bytes)", hex, e.size);
  e.state = State::kFetched;
  changed_.notify_all();
  return std::nullopt;
}

Result<std::string> CodeCache::Await(const std::string& hex, const std::atomic<bool>* stop) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      auto it = entries_.find(hex);
      if (it == entries_.end()) {
        if (Exists(DirOf(hex)) || Exists(PathOf(hex, ".zar"))) break;
        return Status::FailedPrecondition("code sha256:" + hex + " was never asked for");
      }
      if (it->second.state == State::kFetched) break;
      if (it->second.state == State::kFailed) {
        return Status::Unavailable("cannot get code sha256:" + hex +
                                   " from the head: " + it->second.error);
      }
      if (stop != nullptr && stop->load()) {
        return Status::Aborted("abandoned while code sha256:" + hex + " was being fetched");
      }
      changed_.wait_for(lock, std::chrono::milliseconds(100));
    }
  }
  std::lock_guard<std::mutex> unpack(unpack_mu_);
  const std::string dir = DirOf(hex);
  if (Exists(dir)) return dir;
  const std::string archive = PathOf(hex, ".zar");
  std::string bytes;
  {
    std::ifstream in(archive, std::ios::binary);
    if (!in) return Status::IOError("cannot read " + archive);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (in.bad()) return Status::IOError("cannot read " + archive);
  }
  const std::string tmp = PathOf(hex, (".unpack-" + std::to_string(++unpack_serial_)).c_str());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return Status::IOError("cannot create " + tmp + ": " + ec.message());
  Status s = checkpoint::UnpackDirectory(bytes, tmp);
  if (s.ok()) {
    fs::rename(tmp, dir, ec);
    if (ec) s = Status::IOError("cannot rename " + tmp + " to " + dir + ": " + ec.message());
  }
  if (!s.ok()) {
    fs::remove_all(tmp, ec);
    // Unusable bytes (a project archive that is not one): fetched again next time.
    fs::remove(archive, ec);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = entries_.find(hex);
      if (it != entries_.end()) {
        it->second.state = State::kFailed;
        it->second.error = s.message();
      }
    }
    return Status(s.code(), "cannot unpack code sha256:" + hex + ": " + s.message());
  }
  fs::remove(archive, ec);  // the directory is the cache from now on
  spdlog::info("code sha256:{} unpacked into {}", hex, dir);
  return dir;
}

size_t CodeCache::fetching() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [hex, e] : entries_) n += e.state == State::kFetching;
  return n;
}

}  // namespace ztune::worker
