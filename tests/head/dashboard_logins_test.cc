// DashboardLogins over a fake clock: tokens work once and expire, sessions
// expire, both are bounded, and nothing but the secrets' hashes is kept.
#include "head/dashboard_logins.h"

#include <gtest/gtest.h>

#include <set>

namespace ztune::head {
namespace {

const DashboardUser kAlice{"alice-key", "alice"};

TEST(DashboardLoginsTest, ATokenLogsInOnceAndTheSessionNamesItsUser) {
  FakeClock clock;
  DashboardLogins logins(clock);
  auto token = logins.IssueToken(kAlice);
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  EXPECT_EQ(token->size(), 64u);
  auto session = logins.Redeem(*token);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  EXPECT_NE(*session, *token);
  auto user = logins.Check(*session);
  ASSERT_TRUE(user.ok()) << user.status().ToString();
  EXPECT_EQ(user->key, "alice-key");
  EXPECT_EQ(user->name, "alice");

  auto again = logins.Redeem(*token);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(again.status().message().find("ztune dashboard"), std::string::npos);
  // A token is not a session, nor a session a token.
  EXPECT_FALSE(logins.Check(*token).ok());
  EXPECT_FALSE(logins.Redeem(*session).ok());
  EXPECT_FALSE(logins.Check("").ok());
  EXPECT_FALSE(logins.Redeem("").ok());
}

TEST(DashboardLoginsTest, TokensAndSessionsExpire) {
  FakeClock clock;
  DashboardLoginOptions options;
  options.token_ttl_ms = 60'000;
  options.session_ttl_ms = 3600'000;
  DashboardLogins logins(clock, options);
  auto late = logins.IssueToken(kAlice);
  auto on_time = logins.IssueToken(kAlice);
  ASSERT_TRUE(late.ok() && on_time.ok());
  clock.AdvanceMs(59'999);
  auto session = logins.Redeem(*on_time);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  clock.AdvanceMs(1);
  EXPECT_FALSE(logins.Redeem(*late).ok());
  EXPECT_EQ(logins.num_tokens(), 0u) << "an expired token is dropped when it is tried";

  clock.AdvanceMs(3600'000 - 2);
  EXPECT_TRUE(logins.Check(*session).ok());
  clock.AdvanceMs(1);
  auto expired = logins.Check(*session);
  ASSERT_FALSE(expired.ok());
  EXPECT_EQ(expired.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(logins.num_sessions(), 0u);
}

TEST(DashboardLoginsTest, LogoutEndsOnlyThatSession) {
  FakeClock clock;
  DashboardLogins logins(clock);
  auto a = logins.Redeem(*logins.IssueToken(kAlice));
  auto b = logins.Redeem(*logins.IssueToken({"bob-key", "bob"}));
  ASSERT_TRUE(a.ok() && b.ok());
  logins.End(*a);
  logins.End("no-such-session");
  EXPECT_FALSE(logins.Check(*a).ok());
  EXPECT_EQ(logins.Check(*b)->name, "bob");
}

TEST(DashboardLoginsTest, PendingTokensAreBoundedUntilTheyExpire) {
  FakeClock clock;
  DashboardLoginOptions options;
  options.max_tokens = 3;
  DashboardLogins logins(clock, options);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(logins.IssueToken(kAlice).ok());
  auto refused = logins.IssueToken(kAlice);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("try again in 60 s"), std::string::npos)
      << refused.status().message();
  clock.AdvanceMs(options.token_ttl_ms);
  EXPECT_TRUE(logins.IssueToken(kAlice).ok()) << "expired ones make room";
  EXPECT_EQ(logins.num_tokens(), 1u);
}

TEST(DashboardLoginsTest, AtTheSessionBoundTheOldestSessionEnds) {
  FakeClock clock;
  DashboardLoginOptions options;
  options.max_sessions = 2;
  DashboardLogins logins(clock, options);
  std::vector<std::string> sessions;
  for (int i = 0; i < 3; ++i) {
    auto s = logins.Redeem(*logins.IssueToken(kAlice));
    ASSERT_TRUE(s.ok());
    sessions.push_back(*s);
    clock.AdvanceMs(1);
  }
  EXPECT_EQ(logins.num_sessions(), 2u);
  EXPECT_FALSE(logins.Check(sessions[0]).ok());
  EXPECT_TRUE(logins.Check(sessions[1]).ok());
  EXPECT_TRUE(logins.Check(sessions[2]).ok());
}

TEST(DashboardLoginsTest, SecretsAreDistinctHex) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string s = RandomSecretHex();
    ASSERT_EQ(s.size(), 64u);
    ASSERT_EQ(s.find_first_not_of("0123456789abcdef"), std::string::npos) << s;
    seen.insert(s);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

}  // namespace
}  // namespace ztune::head
