#include "head/dashboard_logins.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "common/check.h"
#include "common/sha256.h"

namespace ztune::head {

std::string RandomSecretHex() {
  Sha256::Digest bytes;  // 32 bytes, the size DigestHex writes as hex
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::getrandom(bytes.data() + got, bytes.size() - got, 0);
    // getrandom only fails for bad arguments or a signal; without randomness
    // there is no safe login to hand out.
    if (n < 0 && errno == EINTR) continue;
    CHECK(n > 0);
    got += static_cast<size_t>(n);
  }
  return DigestHex(bytes);
}

DashboardLogins::DashboardLogins(const Clock& clock, DashboardLoginOptions options)
    : clock_(clock), options_(options) {}

void DashboardLogins::Prune(Table& table, TimeMs now) {
  for (auto it = table.begin(); it != table.end();) {
    it = it->second.expires_ms <= now ? table.erase(it) : std::next(it);
  }
}

Result<std::string> DashboardLogins::IssueToken(const DashboardUser& user) {
  const TimeMs now = clock_.NowMs();
  std::lock_guard<std::mutex> lock(mu_);
  if (tokens_.size() >= options_.max_tokens) Prune(tokens_, now);
  if (tokens_.size() >= options_.max_tokens) {
    return Status::ResourceExhausted(
        std::to_string(tokens_.size()) + " dashboard logins are waiting to be used; try again in " +
        std::to_string(options_.token_ttl_ms / 1000) + " s, when they have expired");
  }
  std::string token = RandomSecretHex();
  tokens_[Sha256Hex(token)] = Entry{user, now + options_.token_ttl_ms, now};
  return token;
}

Result<std::string> DashboardLogins::Redeem(std::string_view token) {
  const TimeMs now = clock_.NowMs();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tokens_.find(Sha256Hex(token));
  if (it == tokens_.end() || it->second.expires_ms <= now) {
    if (it != tokens_.end()) tokens_.erase(it);
    return Status::PermissionDenied(
        "this login link is unknown, used or expired (a link works once, within " +
        std::to_string(options_.token_ttl_ms / 1000) + " s); run `ztune dashboard` for a new one");
  }
  DashboardUser user = std::move(it->second.user);
  tokens_.erase(it);
  if (sessions_.size() >= options_.max_sessions) Prune(sessions_, now);
  if (sessions_.size() >= options_.max_sessions) {
    auto oldest = std::min_element(sessions_.begin(), sessions_.end(), [](auto& a, auto& b) {
      return a.second.created_ms < b.second.created_ms;
    });
    sessions_.erase(oldest);
  }
  std::string session = RandomSecretHex();
  sessions_[Sha256Hex(session)] = Entry{std::move(user), now + options_.session_ttl_ms, now};
  return session;
}

Result<DashboardUser> DashboardLogins::Check(std::string_view session) {
  const TimeMs now = clock_.NowMs();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(Sha256Hex(session));
  if (it == sessions_.end() || it->second.expires_ms <= now) {
    if (it != sessions_.end()) sessions_.erase(it);
    return Status::PermissionDenied("not logged in, or the login expired");
  }
  return it->second.user;
}

void DashboardLogins::End(std::string_view session) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = sessions_.find(Sha256Hex(session)); it != sessions_.end()) sessions_.erase(it);
}

size_t DashboardLogins::num_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tokens_.size();
}

size_t DashboardLogins::num_sessions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.size();
}

}  // namespace ztune::head
