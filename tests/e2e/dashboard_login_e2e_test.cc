// The dashboard served to other machines (docs/dashboard.md, "Logins"),
// through the real binaries: a head on every address over HTTPS, a client key
// that gets a login link with `ztune dashboard`, a browser (an HTTPS client
// trusting the head's certificate) that trades it for a session and reads the
// experiment, and loses it when the key is revoked; and the starts the head
// refuses.
#include <sys/stat.h>

#include <csignal>
#include <string>

#include <gtest/gtest.h>
#include <httplib.h>

#include "tests/e2e/cluster.h"
#include "tests/e2e/trial_queries.h"
#include "tests/fakes/self_signed_cert.h"

namespace ztune::e2e {
namespace {

int PortOfUrl(const std::string& url) {
  const size_t colon = url.rfind(':');
  return std::stoi(url.substr(colon + 1, url.find('/', colon) - colon - 1));
}

std::unique_ptr<httplib::SSLClient> Browser(int port, const std::string& ca) {
  auto c = std::make_unique<httplib::SSLClient>("127.0.0.1", port);
  c->set_ca_cert_path(ca.c_str());
  c->enable_server_certificate_verification(true);
  c->set_follow_location(false);
  c->set_connection_timeout(5);
  c->set_read_timeout(15);
  return c;
}

// The session cookie a /login answer sets ("NAME=VALUE"), "" if none.
std::string SessionCookie(const httplib::Result& res) {
  if (!res) return "";
  const std::string set_cookie = res->get_header_value("Set-Cookie");
  return set_cookie.rfind("ztune_session_", 0) == 0 ? set_cookie.substr(0, set_cookie.find(';'))
                                                    : "";
}

TEST(DashboardLoginE2ETest, AClientKeyLogsABrowserInOverHttpsUntilTheKeyIsRevoked) {
  LocalCluster cluster("dash-login");
  const std::string carol = cluster.keys().AddClient("carol", "read");
  const auto cert = testing::WriteSelfSignedCert(cluster.dir() + "/keys/dashboard");
  cluster.StartHead(
      {"--http-endpoint", "0.0.0.0:0", "--http-tls-cert", cert.cert, "--http-tls-key", cert.key});
  ASSERT_EQ(cluster.http_url().rfind("https://0.0.0.0:", 0), 0u) << cluster.http_url();
  const int port = PortOfUrl(cluster.http_url());
  cluster.StartWorker("w0", 2);
  ASSERT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();
  const std::string exp = SubmitSpec(cluster, R"({"trainable": "quadratic", "num_samples": 3,
      "param_space": {"lr": {"uniform": [0.01, 0.2]}, "x0": 5, "target": 1},
      "metric": "loss", "mode": "min", "stop": {"training_iteration": 4}})",
                                     "dash");
  ASSERT_FALSE(exp.empty());
  ASSERT_TRUE(WaitFinished(cluster, exp)) << cluster.Logs();

  // Nothing without a login, whatever the path.
  for (const std::string& path :
       std::vector<std::string>{"/", "/api/dashboard", "/api/dashboard?experiment=" + exp}) {
    auto res = Browser(port, cert.cert)->Get(path.c_str());
    ASSERT_TRUE(res) << path << ": " << httplib::to_string(res.error()) << cluster.Logs();
    EXPECT_EQ(res->status, 401) << path;
    EXPECT_FALSE(Contains(res->body, exp)) << res->body;
  }

  // `ztune dashboard` prints a link naming the address the client reached
  // the head at (the head binds every address).
  auto link = cluster.CliAs(carol, "dashboard", /*stdout_only=*/true);
  ASSERT_EQ(link.exit_code, 0) << link.out << cluster.Logs();
  const std::string url = link.out.substr(0, link.out.find('\n'));
  const std::string prefix = "https://127.0.0.1:" + std::to_string(port) + "/login?token=";
  ASSERT_EQ(url.rfind(prefix, 0), 0u) << url;
  const std::string path = url.substr(url.find("/login"));

  auto login = Browser(port, cert.cert)->Get(path.c_str());
  ASSERT_TRUE(login) << httplib::to_string(login.error());
  EXPECT_EQ(login->status, 303);
  const std::string cookie = SessionCookie(login);
  ASSERT_FALSE(cookie.empty()) << login->get_header_value("Set-Cookie");
  auto again = Browser(port, cert.cert)->Get(path.c_str());
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 401) << "a link logs in once";

  auto data = Browser(port, cert.cert)
                  ->Get(("/api/dashboard?experiment=" + exp).c_str(), {{"Cookie", cookie}});
  ASSERT_TRUE(data);
  ASSERT_EQ(data->status, 200) << data->body;
  const Json doc = Json::parse(data->body);
  EXPECT_EQ(doc["experiment_id"], exp);
  EXPECT_EQ(doc["trials"][exp].size(), 3u) << data->body;
  EXPECT_EQ(doc["series"].size(), 3u) << data->body;
  const std::string log = ReadFile(cluster.head_log());
  EXPECT_TRUE(Contains(log, "login link issued to client 'carol'")) << log;
  EXPECT_TRUE(Contains(log, "client 'carol' logged in a browser from 127.0.0.1")) << log;

  auto json = cluster.CliAs(carol, "dashboard --json", /*stdout_only=*/true);
  ASSERT_EQ(json.exit_code, 0) << json.out;
  const Json reply = Json::parse(json.out);
  EXPECT_EQ(reply["login"], true);
  EXPECT_EQ(reply["user"], "carol");
  EXPECT_EQ(reply["expires_in_s"], 60);

  // Revoked: the session ends at the head's reload, like the key's connections.
  cluster.keys().Revoke(carol);
  cluster.head().Signal(SIGHUP);
  ASSERT_TRUE(WaitFor([&] {
    return Contains(ReadFile(cluster.head_log()),
                    "allow-lists reloaded: 1 worker key(s), 1 client");
  })) << cluster.Logs();
  auto revoked = Browser(port, cert.cert)->Get("/api/dashboard", {{"Cookie", cookie}});
  ASSERT_TRUE(revoked);
  EXPECT_EQ(revoked->status, 401);
  EXPECT_TRUE(Contains(revoked->body, "no longer allowed")) << revoked->body;
  // Others log in as before.
  auto admin_link = cluster.Cli("dashboard", /*stdout_only=*/true);
  ASSERT_EQ(admin_link.exit_code, 0) << admin_link.out;
  const std::string admin_path = admin_link.out.substr(admin_link.out.find("/login"));
  auto admin = Browser(port, cert.cert)->Get(admin_path.substr(0, admin_path.find('\n')).c_str());
  ASSERT_TRUE(admin);
  EXPECT_EQ(admin->status, 303);
  EXPECT_FALSE(SessionCookie(admin).empty());
}

TEST(DashboardLoginE2ETest, TheHeadRefusesADashboardItCannotServeSafely) {
  LocalCluster cluster("dash-refuse");
  const std::string data = cluster.data_dir();
  const auto cert = testing::WriteSelfSignedCert(cluster.dir() + "/keys/dashboard");
  const auto open_key = testing::WriteSelfSignedCert(cluster.dir() + "/keys/open", -60, 3600, 0644);
  const std::string head = std::string(ZTUNE_HEAD_BIN) + " --data-dir " + data +
                           " --client-endpoint tcp://127.0.0.1:0 --worker-endpoint "
                           "tcp://127.0.0.1:0 ";
  ExpectExit(e2e::Run(head + "--http-endpoint 0.0.0.0:0"), 2,
             {"loopback only", "--http-tls-cert", "ssh -L"});
  auto half = e2e::Run(head + "--http-endpoint 0.0.0.0:0 --http-tls-cert " + cert.cert);
  EXPECT_NE(half.exit_code, 0) << half.out;
  EXPECT_TRUE(Contains(half.out, "--http-tls-cert requires --http-tls-key")) << half.out;
  ExpectExit(e2e::Run(head + "--insecure --http-endpoint 127.0.0.1:0 --http-tls-cert " + cert.cert +
                      " --http-tls-key " + cert.key),
             2, {"drop --insecure"});
  ExpectExit(e2e::Run(head + "--http-endpoint 0.0.0.0:0 --http-tls-cert " + open_key.cert +
                      " --http-tls-key " + open_key.key),
             2, {"others can read it", "chmod 600 " + open_key.key});
  ExpectExit(e2e::Run(head + "--http-endpoint 0.0.0.0:0 --http-tls-cert " + cert.cert +
                      " --http-tls-key " + open_key.key),
             2, {"chmod 600"});

  // Without a dashboard, `ztune dashboard` says so; with the open one on
  // loopback it prints its URL (no login there).
  cluster.StartHead();
  ExpectExit(cluster.Cli("dashboard"), 1, {"serves no dashboard", "--http-endpoint"});
  cluster.StartHead({"--http-endpoint", "127.0.0.1:0"});
  auto open = cluster.Cli("dashboard", /*stdout_only=*/true);
  ASSERT_EQ(open.exit_code, 0) << open.out;
  EXPECT_EQ(open.out, cluster.http_url() + "\n");
  EXPECT_EQ(cluster.http_url().rfind("http://127.0.0.1:", 0), 0u) << cluster.http_url();
}

}  // namespace
}  // namespace ztune::e2e
