// The dashboard with logins (HTTPS) on loopback, over a fake loop: what a
// browser without a session gets, a login link's one use, the cookie it sets,
// a revoked key's session, logout; and the TLS files the server refuses.
// Real sockets and TLS: an integration test, outside the unit label.
#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/ssl.h>

#include <atomic>
#include <thread>

#include "head/dashboard_logins.h"
#include "head/dashboard_server.h"
#include "head/dashboard_tls.h"
#include "head/loop_reads.h"
#include "tests/fakes/fake_loop.h"
#include "tests/fakes/self_signed_cert.h"
#include "tests/fakes/temp_dir.h"

namespace ztune::head {
namespace {

// The loop's answers to the dashboard's reads: one experiment, no trials.
Json AnswerRead(const Json& r) {
  if (r["op"] == "experiments") {
    return Json{{"ok", true}, {"experiments", Json::array({{{"experiment_id", "e0001"}}})}};
  }
  return Json{{"ok", true}, {"trials", Json::array()}};
}

class DashboardHttpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cert_ = testing::WriteSelfSignedCert(dir_.Sub("dash"));
    DashboardServerOptions options;
    options.login =
        DashboardLoginMode{{cert_.cert, cert_.key}, &logins_, [this](const std::string& key) {
                             return key == "alice-key" && alice_allowed_.load();
                           }};
    server_ = std::make_unique<DashboardServer>(reads_, options);
    auto bound = server_->Bind(HttpEndpoint{"127.0.0.1", 0});
    ASSERT_TRUE(bound.ok()) << bound.ToString();
    server_->Start();
    port_ = std::stoi(server_->url().substr(server_->url().rfind(':') + 1));
    cookie_name_ = "ztune_session_" + std::to_string(port_);
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  // A client that trusts only the test's certificate.
  std::unique_ptr<httplib::SSLClient> Client() {
    auto c = std::make_unique<httplib::SSLClient>("127.0.0.1", port_);
    c->set_ca_cert_path(cert_.cert.c_str());
    c->enable_server_certificate_verification(true);
    c->set_follow_location(false);
    c->set_connection_timeout(5);
    c->set_read_timeout(10);
    return c;
  }

  // The session a login link sets, from its Set-Cookie; "" if none.
  std::string LogIn(const std::string& token, int* status = nullptr) {
    auto res = Client()->Get(("/login?token=" + token).c_str());
    EXPECT_TRUE(res) << httplib::to_string(res.error());
    if (!res) return "";
    if (status != nullptr) *status = res->status;
    const std::string set_cookie = res->get_header_value("Set-Cookie");
    const std::string prefix = cookie_name_ + "=";
    if (set_cookie.rfind(prefix, 0) != 0) return "";
    return set_cookie.substr(prefix.size(), set_cookie.find(';') - prefix.size());
  }

  httplib::Result Get(const std::string& path, const std::string& session) {
    httplib::Headers headers;
    if (!session.empty()) headers.emplace("Cookie", "other=1; " + cookie_name_ + "=" + session);
    return Client()->Get(path.c_str(), headers);
  }

  testing::TempDir dir_;
  testing::CertFiles cert_;
  LoopReads reads_;
  testing::FakeLoop loop_{reads_, AnswerRead};
  SteadyClock clock_;
  DashboardLogins logins_{clock_};
  std::atomic<bool> alice_allowed_{true};
  std::unique_ptr<DashboardServer> server_;
  int port_ = 0;
  std::string cookie_name_;
};

TEST_F(DashboardHttpsTest, WithoutALoginNothingButTheLoginHelpIsServed) {
  EXPECT_EQ(server_->url().rfind("https://127.0.0.1:", 0), 0u) << server_->url();
  for (const std::string path : {"/", "/api/dashboard", "/api/dashboard?experiment=e0001"}) {
    auto res = Get(path, "");
    ASSERT_TRUE(res) << path << ": " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 401) << path;
    EXPECT_EQ(res->body.find("e0001"), std::string::npos) << path << ": " << res->body;
    EXPECT_NE(res->body.find("ztune dashboard"), std::string::npos) << res->body;
  }
  // A made-up session is no session.
  auto forged = Get("/api/dashboard", std::string(64, 'a'));
  ASSERT_TRUE(forged);
  EXPECT_EQ(forged->status, 401);
  // Plain HTTP to the HTTPS port gets no page.
  httplib::Client plain("127.0.0.1", port_);
  plain.set_connection_timeout(5);
  plain.set_read_timeout(5);
  auto res = plain.Get("/api/dashboard");
  EXPECT_TRUE(!res || res->status != 200);
}

TEST_F(DashboardHttpsTest, ALoginLinkWorksOnceAndItsCookieReadsTheDashboard) {
  auto token = logins_.IssueToken({"alice-key", "alice"});
  ASSERT_TRUE(token.ok());
  auto res = Client()->Get(("/login?token=" + *token).c_str());
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 303);
  EXPECT_EQ(res->get_header_value("Location"), "/");
  EXPECT_EQ(res->get_header_value("Referrer-Policy"), "no-referrer");
  const std::string set_cookie = res->get_header_value("Set-Cookie");
  for (const char* attribute :
       {"; Secure", "; HttpOnly", "; SameSite=Lax", "; Path=/", "; Max-Age=43200"}) {
    EXPECT_NE(set_cookie.find(attribute), std::string::npos) << set_cookie;
  }
  const std::string prefix = cookie_name_ + "=";
  ASSERT_EQ(set_cookie.rfind(prefix, 0), 0u) << set_cookie;
  const std::string session =
      set_cookie.substr(prefix.size(), set_cookie.find(';') - prefix.size());

  auto data = Get("/api/dashboard", session);
  ASSERT_TRUE(data);
  EXPECT_EQ(data->status, 200) << data->body;
  EXPECT_EQ(Json::parse(data->body)["experiment_id"], "e0001");
  auto page = Get("/", session);
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("<html"), std::string::npos);

  int status = 0;
  EXPECT_EQ(LogIn(*token, &status), "") << "a link logs in one browser";
  EXPECT_EQ(status, 401);
  // A foreign Host does not matter with logins: the cookie does.
  httplib::Headers headers{{"Host", "dashboard.example.org"},
                           {"Cookie", cookie_name_ + "=" + session}};
  auto foreign = Client()->Get("/api/dashboard", headers);
  ASSERT_TRUE(foreign);
  EXPECT_EQ(foreign->status, 200);
}

TEST_F(DashboardHttpsTest, ARevokedKeysSessionEndsAndLogoutEndsOne) {
  const std::string first = LogIn(*logins_.IssueToken({"alice-key", "alice"}));
  const std::string second = LogIn(*logins_.IssueToken({"alice-key", "alice"}));
  ASSERT_FALSE(first.empty());
  ASSERT_FALSE(second.empty());
  EXPECT_NE(first, second);

  auto logout = Get("/logout", first);
  ASSERT_TRUE(logout);
  EXPECT_EQ(logout->status, 200);
  EXPECT_NE(logout->get_header_value("Set-Cookie").find("Max-Age=0"), std::string::npos);
  EXPECT_EQ(Get("/api/dashboard", first)->status, 401);
  EXPECT_EQ(Get("/api/dashboard", second)->status, 200);

  alice_allowed_ = false;
  auto revoked = Get("/api/dashboard", second);
  ASSERT_TRUE(revoked);
  EXPECT_EQ(revoked->status, 401);
  EXPECT_NE(revoked->body.find("no longer allowed"), std::string::npos) << revoked->body;
  alice_allowed_ = true;
  EXPECT_EQ(Get("/api/dashboard", second)->status, 401) << "the session ended with the key";
  EXPECT_EQ(logins_.num_sessions(), 0u);

  // A key another head's list names is no key here.
  const std::string bob = LogIn(*logins_.IssueToken({"bob-key", "bob"}));
  ASSERT_FALSE(bob.empty());
  EXPECT_EQ(Get("/api/dashboard", bob)->status, 401);
}

TEST(DashboardTlsTest, UnusableFilesAreRefusedWithTheReason) {
  testing::TempDir dir;
  const auto good = testing::WriteSelfSignedCert(dir.Sub("good"));
  EXPECT_TRUE(CheckDashboardTls({good.cert, good.key}).ok());
  // TLS 1.2 is the oldest version the server offers.
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  ASSERT_NE(ctx, nullptr);
  ASSERT_TRUE(ConfigureDashboardTls(ctx, {good.cert, good.key}).ok());
  EXPECT_EQ(SSL_CTX_get_min_proto_version(ctx), TLS1_2_VERSION);
  SSL_CTX_free(ctx);

  auto expect = [](const TlsFiles& files, StatusCode code, const std::string& words) {
    Status s = CheckDashboardTls(files);
    ASSERT_FALSE(s.ok()) << words;
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
  };
  const auto open_key = testing::WriteSelfSignedCert(dir.Sub("open"), -60, 3600, 0644);
  expect({open_key.cert, open_key.key}, StatusCode::kFailedPrecondition,
         "others can read it. Run: chmod 600 " + open_key.key);
  const auto other = testing::WriteSelfSignedCert(dir.Sub("other"));
  expect({good.cert, other.key}, StatusCode::kInvalidArgument,
         "does not belong to the certificate");
  const auto expired = testing::WriteSelfSignedCert(dir.Sub("expired"), -7200, -3600);
  expect({expired.cert, expired.key}, StatusCode::kInvalidArgument, "has expired");
  const auto future = testing::WriteSelfSignedCert(dir.Sub("future"), 3600, 7200);
  expect({future.cert, future.key}, StatusCode::kInvalidArgument, "not valid yet");
  expect({dir.Sub("missing.crt"), good.key}, StatusCode::kInvalidArgument,
         "cannot read the dashboard's TLS certificate");
  expect({good.key, good.key}, StatusCode::kInvalidArgument, "want PEM");
  expect({good.cert, dir.Sub("missing.pem")}, StatusCode::kInvalidArgument,
         "cannot read the dashboard's TLS key");
  // A key under a passphrase is refused, never asked for on a terminal.
  const std::string encrypted = dir.Sub("encrypted.pem");
  {
    FILE* in = std::fopen(good.key.c_str(), "r");
    ASSERT_NE(in, nullptr);
    EVP_PKEY* key = PEM_read_PrivateKey(in, nullptr, nullptr, nullptr);
    std::fclose(in);
    ASSERT_NE(key, nullptr);
    FILE* out = std::fopen(encrypted.c_str(), "w");
    ASSERT_NE(out, nullptr);
    unsigned char passphrase[] = "secret";
    EXPECT_EQ(PEM_write_PrivateKey(out, key, EVP_aes_256_cbc(), passphrase, 6, nullptr, nullptr),
              1);
    std::fclose(out);
    EVP_PKEY_free(key);
    ::chmod(encrypted.c_str(), 0600);
  }
  expect({good.cert, encrypted}, StatusCode::kInvalidArgument, "want an unencrypted PEM key");

  // The server's Bind says the same.
  LoopReads reads;
  SteadyClock clock;
  DashboardLogins logins(clock);
  DashboardServerOptions options;
  options.login =
      DashboardLoginMode{{good.cert, other.key}, &logins, [](const std::string&) { return true; }};
  DashboardServer server(reads, options);
  Status bound = server.Bind(HttpEndpoint{"127.0.0.1", 0});
  ASSERT_FALSE(bound.ok());
  EXPECT_NE(bound.message().find("does not belong"), std::string::npos) << bound.ToString();
}

}  // namespace
}  // namespace ztune::head
