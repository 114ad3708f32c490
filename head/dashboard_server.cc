#include "head/dashboard_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>

#include "common/clock.h"
#include "common/dashboard/dashboard_page.h"
#include "common/flat_key.h"

namespace ztune::head {
namespace {

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

// The Host header names this machine's loopback: a page on another site
// that resolved its own name to 127.0.0.1 (DNS rebinding) gets nothing.
bool IsLoopbackHostHeader(const std::string& host_header) {
  std::string host = host_header;
  if (!host.empty() && host.front() == '[') {
    host = host.substr(0, host.find(']') + 1);
  } else if (const size_t colon = host.rfind(':'); colon != std::string::npos) {
    host = host.substr(0, colon);
  }
  return IsLoopbackHost(host);
}

}  // namespace

Result<HttpEndpoint> ParseHttpEndpoint(const std::string& text) {
  HttpEndpoint e;
  std::string port = text;
  if (const size_t colon = text.rfind(':'); colon != std::string::npos) {
    e.host = text.substr(0, colon);
    port = text.substr(colon + 1);
  } else {
    e.host = "127.0.0.1";
  }
  if (!e.host.empty() && e.host.front() == '[' && e.host.back() == ']') {
    e.host = e.host.substr(1, e.host.size() - 2);
  }
  char* end = nullptr;
  const long value = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || end == nullptr || *end != '\0' || value < 0 || value > 65535) {
    return Status::InvalidArgument("--http-endpoint '" + text +
                                   "': want PORT or HOST:PORT (PORT 0 = any free port)");
  }
  e.port = static_cast<int>(value);
  if (!IsLoopbackHost(e.host)) {
    return Status::InvalidArgument(
        "--http-endpoint '" + text +
        "': the dashboard has no authentication, so it binds loopback only (127.0.0.1, ::1, "
        "localhost); from another machine, tunnel to it: ssh -L 8265:127.0.0.1:PORT HEAD_HOST");
  }
  return e;
}

DashboardServer::DashboardServer(LoopReads& reads, std::chrono::milliseconds read_timeout)
    : reads_(reads), read_timeout_(read_timeout), http_(std::make_unique<httplib::Server>()) {
  // Two handler threads: the reads queue on the loop anyway.
  http_->new_task_queue = [] { return new httplib::ThreadPool(2); };
  http_->set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!IsLoopbackHostHeader(req.get_header_value("Host"))) {
      res.status = 403;
      res.set_content("this dashboard answers only requests addressed to a loopback name\n",
                      "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("X-Frame-Options", "DENY");
    res.set_header("Cache-Control", "no-store");
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                   "connect-src 'self'; img-src 'self' data:");
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http_->Get("/", [](const httplib::Request&, httplib::Response& res) {
    // No data in the page: it reads api/dashboard and refreshes itself.
    res.set_content(dashboard::Page(Json()), "text/html; charset=utf-8");
  });
  http_->Get("/api/dashboard", [this](const httplib::Request& req, httplib::Response& res) {
    Result<Json> data = DashboardData(req.get_param_value("experiment"));
    if (!data.ok()) {
      res.status = data.status().code() == StatusCode::kNotFound ? 404 : 503;
      res.set_content(Json{{"error", data.status().message()}}.dump(), "application/json");
      return;
    }
    res.set_content(data->dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
  });
}

DashboardServer::~DashboardServer() { Stop(); }

Status DashboardServer::Bind(const HttpEndpoint& endpoint) {
  const std::string host = endpoint.host == "localhost" ? "127.0.0.1" : endpoint.host;
  if (endpoint.port == 0) {
    port_ = http_->bind_to_any_port(host);
    if (port_ < 0) return Status::IOError("cannot bind the dashboard on " + host);
  } else {
    if (!http_->bind_to_port(host, endpoint.port)) {
      return Status::IOError("cannot bind the dashboard on " + host + ":" +
                             std::to_string(endpoint.port) + " (in use?)");
    }
    port_ = endpoint.port;
  }
  url_ = "http://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port_) + "/";
  return Status::Ok();
}

void DashboardServer::Start() {
  thread_ = std::thread([this] {
    if (!http_->listen_after_bind()) spdlog::error("the dashboard at {} stopped serving", url_);
  });
}

void DashboardServer::Stop() {
  // Handlers waiting on the loop return at once: the loop may be gone.
  reads_.Close();
  http_->stop();
  if (thread_.joinable()) thread_.join();
}

Result<Json> DashboardServer::ReadAll(const std::string& op, Json args, const char* list_key) {
  Json items = Json::array();
  uint64_t offset = 0;
  while (true) {
    Json request = args;
    request["op"] = op;
    request["offset"] = offset;
    ASSIGN_OR_RETURN(Json reply, reads_.Ask(std::move(request), read_timeout_));
    if (!reply.value("ok", false)) {
      const Json& error = reply["error"];
      const std::string message = error.is_object() ? error.value("message", "") : "";
      if (error.is_object() && error.value("code", "") == "NotFound") {
        return Status::NotFound(message);
      }
      return Status::Internal(op + " failed: " + message);
    }
    Json& page = reply[list_key];
    if (page.is_array()) {
      for (Json& item : page) items.push_back(std::move(item));
    }
    const Json& next = reply["next_offset"];
    if (!next.is_number_unsigned() || next.get<uint64_t>() <= offset) break;
    offset = next.get<uint64_t>();
  }
  return items;
}

Status DashboardServer::UpdateSeries(const Json& trial, const std::string& metric) {
  const std::string id = trial.value("trial_id", "");
  if (id.empty()) return Status::Ok();
  Series& s = series_[id];
  // PBT rewrites a trial's results at an exploit: read them all again then.
  const Json& exploits = trial.contains("exploits") ? trial["exploits"] : Json();
  std::string rewrite_key = exploits.is_array() && !exploits.empty()
                                ? std::to_string(exploits.size()) + "@" + exploits.back().dump()
                                : "";
  const int64_t iteration = trial.value("iteration", int64_t{0});
  if (rewrite_key != s.rewrite_key || iteration < static_cast<int64_t>(s.points.size())) {
    s.points = Json::array();
    s.rewrite_key = std::move(rewrite_key);
  }
  if (iteration <= static_cast<int64_t>(s.points.size())) return Status::Ok();
  uint64_t offset = s.points.size();
  while (true) {
    ASSIGN_OR_RETURN(
        Json reply,
        reads_.Ask(Json{{"op", "results"}, {"trial_id", id}, {"offset", offset}}, read_timeout_));
    if (!reply.value("ok", false)) return Status::Internal("results of " + id + " failed");
    const Json& results = reply["results"];
    if (results.is_array()) {
      for (const Json& r : results) {
        const Json* value = r.is_object() ? FindFlatKey(r, metric) : nullptr;
        s.points.push_back(Json::array(
            {r.is_object() && r.contains("training_iteration") ? r["training_iteration"] : Json(),
             value != nullptr && value->is_number() ? *value : Json(),
             r.is_object() && r.contains("timestamp") ? r["timestamp"] : Json()}));
      }
    }
    const Json& next = reply["next_offset"];
    if (!next.is_number_unsigned() || next.get<uint64_t>() <= offset) break;
    offset = next.get<uint64_t>();
  }
  return Status::Ok();
}

Result<Json> DashboardServer::DashboardData(const std::string& experiment_id) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Json experiments, reads_.Ask(Json{{"op", "experiments"}}, read_timeout_));
  Json list = experiments.value("ok", false) && experiments["experiments"].is_array()
                  ? std::move(experiments["experiments"])
                  : Json::array();
  std::string chosen = experiment_id;
  if (chosen.empty() && !list.empty()) chosen = list.back().value("experiment_id", "");
  Json trials = Json::array();
  Json series = Json::object();
  if (!chosen.empty()) {
    const Json* doc = nullptr;
    for (const Json& e : list) {
      if (e.value("experiment_id", "") == chosen) doc = &e;
    }
    if (doc == nullptr) return Status::NotFound("unknown experiment '" + chosen + "'");
    const std::string metric =
        (*doc)["metric"].is_string() ? (*doc)["metric"].get<std::string>() : "";
    ASSIGN_OR_RETURN(trials, ReadAll("trials", Json{{"experiment_id", chosen}}, "trials"));
    // Only the shown experiment's series are kept.
    if (series_experiment_ != chosen) series_.clear();
    series_experiment_ = chosen;
    for (Json& t : trials) {
      if (t.is_object()) t.erase("exports");
      if (metric.empty()) continue;
      RETURN_IF_ERROR(UpdateSeries(t, metric));
      series[t.value("trial_id", "")] = series_[t.value("trial_id", "")].points;
    }
  }
  return Json{{"generated_at", WallSeconds()},
              {"live", true},
              {"experiment_id", chosen},
              {"experiments", std::move(list)},
              {"trials", Json{{chosen, std::move(trials)}}},
              {"series", std::move(series)}};
}

}  // namespace ztune::head
