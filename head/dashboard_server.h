// DashboardServer: the head's read-only web dashboard (docs/dashboard.md).
// An HTTP server (cpp-httplib, Debian's libcpp-httplib) on its own threads
// serves the dashboard page (common/dashboard/dashboard_page.h) and
// /api/dashboard, the page's data: the experiments, the trials of one and
// each trial's metric series. It reads the head's state only through
// LoopReads, so the loop answers those reads between its turns like any
// client's; the series are kept here and only new results are read again.
//
// Loopback only: the dashboard has no authentication of its own, so Bind
// refuses any other address (reach it through an SSH tunnel), and requests
// whose Host is not a loopback name are refused (DNS rebinding).
//
// Thread-safe; Start/Stop from the thread that owns it.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/json.h"
#include "common/status.h"
#include "head/loop_reads.h"

namespace httplib {
class Server;
}

namespace ztune::head {

struct HttpEndpoint {
  std::string host;  // a loopback address or "localhost"
  int port = 0;      // 0 = any free port
};

// "PORT" (on 127.0.0.1) or "HOST:PORT"; InvalidArgument for a malformed one
// or a host that is not loopback (saying why and what to do instead).
Result<HttpEndpoint> ParseHttpEndpoint(const std::string& text);

class DashboardServer {
 public:
  explicit DashboardServer(LoopReads& reads,
                           std::chrono::milliseconds read_timeout = std::chrono::seconds(10));
  ~DashboardServer();
  DashboardServer(const DashboardServer&) = delete;
  DashboardServer& operator=(const DashboardServer&) = delete;

  // Binds `endpoint`; IOError when it cannot (the port is taken).
  Status Bind(const HttpEndpoint& endpoint);
  // "http://127.0.0.1:PORT/" once bound.
  std::string url() const { return url_; }
  // Serves on a thread of its own until Stop().
  void Start();
  void Stop();

  // The JSON of /api/dashboard?experiment=ID ("" = the newest experiment):
  // {generated_at, live: true, experiments, trials: {ID: [TrialDoc without
  // exports]}, series: {trial id: [[iteration, metric|null, timestamp]]}}.
  Result<Json> DashboardData(const std::string& experiment_id);

 private:
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
  const std::chrono::milliseconds read_timeout_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  std::string url_;
  int port_ = 0;
  std::mutex mu_;  // one data read at a time; guards the members below
  std::string series_experiment_;
  std::map<std::string, Series> series_;
};

}  // namespace ztune::head
