// DashboardServer: the head's read-only web dashboard (docs/dashboard.md).
// An HTTP server (cpp-httplib, Debian's libcpp-httplib) on its own threads
// serves the dashboard page (common/dashboard/dashboard_page.h) and
// /api/dashboard, the page's data: the experiments, the trials of one and
// each trial's metric series. It reads the head's state only through
// LoopReads, so the loop answers those reads between its turns like any
// client's; the series are kept here and only new results are read again.
//
// Two modes (docs/dashboard.md):
// - open, over HTTP, on loopback only: whoever can reach the port reads it,
//   so ParseHttpEndpoint refuses other addresses and requests whose Host is
//   not a loopback name are refused (DNS rebinding);
// - with logins, over HTTPS (DashboardServerOptions::tls), on any address:
//   every request but /login needs the session cookie a login link gives
//   (head/dashboard_logins.h), and the session's client key must still be in
//   clients.allow (checked at every request, so a revoked key loses the
//   dashboard at the head's next reload).
//
// Thread-safe; Start/Stop from the thread that owns it.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/json.h"
#include "common/status.h"
#include "head/dashboard_logins.h"
#include "head/dashboard_tls.h"
#include "head/loop_reads.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace ztune::head {

struct HttpEndpoint {
  std::string host;  // an address or a name; loopback unless logins are on
  int port = 0;      // 0 = any free port
};

// "PORT" (on 127.0.0.1) or "HOST:PORT"; InvalidArgument for a malformed one,
// or for a host that is not loopback when `with_logins` is false (saying why
// and what to do instead).
Result<HttpEndpoint> ParseHttpEndpoint(const std::string& text, bool with_logins = false);

// Whether `host` (an address or "localhost", without brackets) is loopback.
bool IsLoopbackHost(const std::string& host);

struct DashboardLoginMode {
  TlsFiles tls;
  // Issues and checks the logins; outlives the server.
  DashboardLogins* logins = nullptr;
  // Whether a client key (Z85) is in clients.allow now; called from the
  // HTTP threads.
  std::function<bool(const std::string& key)> key_allowed;
};

struct DashboardServerOptions {
  std::chrono::milliseconds read_timeout = std::chrono::seconds(10);
  // Set: HTTPS with logins. Unset: HTTP, loopback, open.
  std::optional<DashboardLoginMode> login;
};

class DashboardServer {
 public:
  explicit DashboardServer(LoopReads& reads, DashboardServerOptions options = {});
  ~DashboardServer();
  DashboardServer(const DashboardServer&) = delete;
  DashboardServer& operator=(const DashboardServer&) = delete;

  // Binds `endpoint`; IOError when it cannot (the port is taken),
  // InvalidArgument for TLS files that cannot be used (dashboard_tls.h).
  Status Bind(const HttpEndpoint& endpoint);
  // "http://127.0.0.1:PORT/" (or https://) once bound.
  std::string url() const { return url_; }
  // Serves on a thread of its own until Stop().
  void Start();
  void Stop();

  // The JSON of /api/dashboard?experiment=ID ("" = the newest experiment):
  // {generated_at, live: true, experiments, trials: {ID: [TrialDoc without
  // exports]}, series: {trial id: [[iteration, metric|null, timestamp]]}}.
  Result<Json> DashboardData(const std::string& experiment_id);

  // The JSON of /api/logs?trial_id=ID&stream=stdout|stderr[&attempt=N]: the
  // last kLogTailBytes of what an attempt (the newest with output unless
  // `attempt` > 0) of a process trainable wrote, read from its worker
  // through the loop: {trial_id, attempt, attempts, stream, trial_status,
  // worker, size, offset (where text starts), text, complete}. Errors as the
  // `logs` op's: NotFound (unknown trial, no output), Unavailable (worker
  // gone), InvalidArgument.
  Result<Json> TrialLogs(const std::string& trial_id, const std::string& stream, uint64_t attempt);
  static constexpr uint64_t kLogTailBytes = 64 * 1024;

 private:
  // The name of the session cookie: one per port, so that two heads on one
  // host do not log each other out.
  std::string CookieName() const;
  // With logins: whether `req` carries a live session of an allowed key;
  // fills `res` with the refusal otherwise.
  bool Authenticate(const httplib::Request& req, httplib::Response& res);
  void Login(const httplib::Request& req, httplib::Response& res);
  void Logout(const httplib::Request& req, httplib::Response& res);

  // A `logs` read of [offset, offset + limit).
  Result<Json> ReadLogPage(Json request, uint64_t offset, uint64_t limit);
  // Every page of a paged read.
  Result<Json> ReadAll(const std::string& op, Json args, const char* list_key);
  // Brings the cached series of `trial` up to date.
  Status UpdateSeries(const Json& trial, const std::string& metric);

  struct Series {
    Json points = Json::array();
    // What PBT changes when it rewrites a trial's results (its exploits).
    std::string rewrite_key;
  };

  LoopReads& reads_;
  const DashboardServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  // A TLS context that could not be set up (Bind reports it).
  Status tls_status_;
  std::thread thread_;
  std::string url_;
  int port_ = 0;
  std::mutex mu_;  // one data read at a time; guards the members below
  std::string series_experiment_;
  std::map<std::string, Series> series_;
};

}  // namespace ztune::head
