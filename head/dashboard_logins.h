// DashboardLogins: who may read the dashboard when it serves other machines
// (docs/dashboard.md, "Who can read it"). A client whose key the head allows asks for
// a login over the authenticated client endpoint (`ztune dashboard`); it gets
// a one-use token, good for a minute, that its browser trades at /login for a
// session cookie. So the dashboard trusts exactly the keys clients.allow
// trusts, and a browser never holds a key.
//
// Tokens and sessions are 256 random bits, kept only as their SHA-256 (a
// lookup's timing tells nothing about a live one) and only in memory: a head
// restart logs everyone out. Both are bounded in number.
//
// Thread-safe: the loop thread issues tokens, the dashboard's HTTP threads
// redeem and check them.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/status.h"

namespace ztune::head {

struct DashboardLoginOptions {
  TimeMs token_ttl_ms = 60'000;
  // From login, however active the session is: a stolen cookie is good for
  // this long at most (and only while its key is allowed).
  TimeMs session_ttl_ms = 12 * 3600'000;
  size_t max_tokens = 1024;
  size_t max_sessions = 4096;
};

// The client key a login was issued to, and its name in clients.allow.
struct DashboardUser {
  std::string key;  // Z85
  std::string name;
};

class DashboardLogins {
 public:
  explicit DashboardLogins(const Clock& clock, DashboardLoginOptions options = {});

  // A one-use token for `user`, valid token_ttl_ms. ResourceExhausted while
  // max_tokens unused ones are pending.
  Result<std::string> IssueToken(const DashboardUser& user);
  // Trades a token for a new session id; PermissionDenied for a token that
  // is unknown, used or expired. At max_sessions the oldest session ends.
  Result<std::string> Redeem(std::string_view token);
  // The user of a live session; PermissionDenied for an unknown or expired one.
  Result<DashboardUser> Check(std::string_view session);
  // Ends a session (logout); an unknown one is ignored.
  void End(std::string_view session);

  size_t num_tokens() const;
  size_t num_sessions() const;
  const DashboardLoginOptions& options() const { return options_; }

 private:
  struct Entry {
    DashboardUser user;
    TimeMs expires_ms = 0;
    TimeMs created_ms = 0;
  };
  using Table = std::map<std::string, Entry, std::less<>>;  // by SHA-256 hex
  // Drops what has expired. Holds mu_.
  void Prune(Table& table, TimeMs now);

  const Clock& clock_;
  const DashboardLoginOptions options_;
  mutable std::mutex mu_;
  Table tokens_;    // guarded by mu_
  Table sessions_;  // guarded by mu_
};

// 256 bits from the kernel's random source as 64 hex digits.
std::string RandomSecretHex();

}  // namespace ztune::head
