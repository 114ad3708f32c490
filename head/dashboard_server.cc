#include "head/dashboard_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>

#include "common/base64.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/dashboard/dashboard_page.h"
#include "common/flat_key.h"
#include "common/printable.h"

namespace ztune::head {
namespace {

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

// The value of cookie `name` in a Cookie header ("a=1; b=2"); "" if absent.
std::string CookieValue(const std::string& header, const std::string& name) {
  size_t at = 0;
  while (at < header.size()) {
    size_t end = header.find(';', at);
    if (end == std::string::npos) end = header.size();
    std::string_view pair(header.data() + at, end - at);
    while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
    if (pair.size() > name.size() && pair.substr(0, name.size()) == name &&
        pair[name.size()] == '=') {
      return std::string(pair.substr(name.size() + 1));
    }
    at = end + 1;
  }
  return "";
}

// A page of its own for what is not the dashboard: login problems, logout.
std::string MessagePage(const std::string& title, const std::string& text) {
  auto escape = [](const std::string& in) {
    std::string out;
    for (char c : in) {
      switch (c) {
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '&': out += "&amp;"; break;
        case '"': out += "&quot;"; break;
        default: out.push_back(c);
      }
    }
    return out;
  };
  return "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>ztune: " + escape(title) +
         "</title><style>body{font:15px system-ui,sans-serif;margin:3em;max-width:40em}"
         "code{background:#eee;padding:1px 4px}</style></head><body><h1>" +
         escape(title) + "</h1><p>" + escape(text) +
         "</p><p>To log in, run <code>ztune dashboard</code> where you have a ztune client key "
         "this head allows: it prints a link that logs this browser in (once, within a minute)."
         "</p></body></html>\n";
}

// obj[key] when obj is an object holding a string there, else "" (a const
// operator[] on a missing key is undefined).
std::string StringAt(const Json& obj, const char* key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

constexpr const char* kLoginHelp = "run `ztune dashboard` for a login link";

}  // namespace

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

Result<HttpEndpoint> ParseHttpEndpoint(const std::string& text, bool with_logins) {
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
  if (e.host.empty()) {
    return Status::InvalidArgument("--http-endpoint '" + text +
                                   "': no host before the port (want PORT or HOST:PORT)");
  }
  if (!with_logins && !IsLoopbackHost(e.host)) {
    return Status::InvalidArgument(
        "--http-endpoint '" + text +
        "': without logins the dashboard binds loopback only (127.0.0.1, ::1, localhost). To "
        "serve other machines, add --http-tls-cert and --http-tls-key (HTTPS, and logins from "
        "`ztune dashboard`); or tunnel to it: ssh -L 8265:127.0.0.1:PORT HEAD_HOST");
  }
  return e;
}

DashboardServer::DashboardServer(LoopReads& reads, DashboardServerOptions options)
    : reads_(reads), options_(std::move(options)) {
  if (options_.login) {
    CHECK(options_.login->logins != nullptr && options_.login->key_allowed);
    const TlsFiles files = options_.login->tls;
    http_ = std::make_unique<httplib::SSLServer>([this, files](SSL_CTX& ctx) {
      tls_status_ = ConfigureDashboardTls(&ctx, files);
      return tls_status_.ok();
    });
  } else {
    http_ = std::make_unique<httplib::Server>();
  }
  // Two handler threads: the reads queue on the loop anyway.
  http_->new_task_queue = [] { return new httplib::ThreadPool(2); };
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("X-Frame-Options", "DENY");
    res.set_header("Cache-Control", "no-store");
    // A login link must not leave in a Referer.
    res.set_header("Referrer-Policy", "no-referrer");
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                   "connect-src 'self'; img-src 'self' data:");
    if (!options_.login) {
      if (IsLoopbackHostHeader(req.get_header_value("Host"))) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      res.status = 403;
      res.set_content("this dashboard answers only requests addressed to a loopback name\n",
                      "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }
    // With logins, a foreign Host gets nothing anyway: its page's requests
    // carry no cookie of ours.
    if (req.path == "/login" || req.path == "/logout" || Authenticate(req, res)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    return httplib::Server::HandlerResponse::Handled;
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
  http_->Get("/api/logs", [this](const httplib::Request& req, httplib::Response& res) {
    uint64_t attempt = 0;
    const std::string attempt_text = req.get_param_value("attempt");
    if (!attempt_text.empty()) {
      char* end = nullptr;
      attempt = std::strtoull(attempt_text.c_str(), &end, 10);
      if (end == nullptr || *end != '\0' || attempt == 0) {
        res.status = 400;
        res.set_content(Json{{"error", "attempt must be an integer >= 1"}}.dump(),
                        "application/json");
        return;
      }
    }
    const std::string stream = req.get_param_value("stream");
    Result<Json> logs =
        TrialLogs(req.get_param_value("trial_id"), stream.empty() ? "stdout" : stream, attempt);
    if (!logs.ok()) {
      const StatusCode code = logs.status().code();
      res.status = code == StatusCode::kNotFound          ? 404
                   : code == StatusCode::kInvalidArgument ? 400
                                                          : 503;
      res.set_content(Json{{"error", logs.status().message()}}.dump(-1, ' ', false,
                                                                    Json::error_handler_t::replace),
                      "application/json");
      return;
    }
    // Output is whatever the trainable wrote: bytes that are not UTF-8 are
    // shown as U+FFFD.
    res.set_content(logs->dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
  });
  if (options_.login) {
    http_->Get("/login",
               [this](const httplib::Request& req, httplib::Response& res) { Login(req, res); });
    http_->Get("/logout",
               [this](const httplib::Request& req, httplib::Response& res) { Logout(req, res); });
  }
}

std::string DashboardServer::CookieName() const { return "ztune_session_" + std::to_string(port_); }

bool DashboardServer::Authenticate(const httplib::Request& req, httplib::Response& res) {
  const DashboardLoginMode& mode = *options_.login;
  const std::string session = CookieValue(req.get_header_value("Cookie"), CookieName());
  Result<DashboardUser> user =
      session.empty() ? Result<DashboardUser>(Status::PermissionDenied("not logged in"))
                      : mode.logins->Check(session);
  if (user.ok() && !mode.key_allowed(user->key)) {
    // Revoked since the login: the session ends with the key's access.
    mode.logins->End(session);
    user = Status::PermissionDenied("the client key this login came from ('" + user->name +
                                    "') is no longer allowed");
  }
  if (user.ok()) return true;
  res.status = 401;
  if (req.path.rfind("/api/", 0) == 0) {
    res.set_content(Json{{"error", user.status().message() + "; " + kLoginHelp}}.dump(),
                    "application/json");
  } else {
    res.set_content(MessagePage("log in", user.status().message() + "."),
                    "text/html; charset=utf-8");
  }
  return false;
}

void DashboardServer::Login(const httplib::Request& req, httplib::Response& res) {
  DashboardLogins& logins = *options_.login->logins;
  Result<std::string> session = logins.Redeem(req.get_param_value("token"));
  Result<DashboardUser> user =
      session.ok() ? logins.Check(*session) : Result<DashboardUser>(session.status());
  if (!user.ok()) {
    res.status = 401;
    res.set_content(MessagePage("log in", user.status().message() + "."),
                    "text/html; charset=utf-8");
    return;
  }
  // Secure: never over plain HTTP; HttpOnly: no script reads it; Lax: not
  // sent with other sites' requests but for following a link here.
  res.set_header("Set-Cookie", CookieName() + "=" + *session +
                                   "; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age=" +
                                   std::to_string(logins.options().session_ttl_ms / 1000));
  res.set_redirect("/", 303);
  spdlog::info("dashboard: client '{}' logged in a browser from {}", EscapeForLog(user->name),
               EscapeForLog(req.remote_addr));
}

void DashboardServer::Logout(const httplib::Request& req, httplib::Response& res) {
  const std::string session = CookieValue(req.get_header_value("Cookie"), CookieName());
  if (!session.empty()) options_.login->logins->End(session);
  res.set_header("Set-Cookie",
                 CookieName() + "=; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age=0");
  res.set_content(MessagePage("logged out", "This browser's dashboard session has ended."),
                  "text/html; charset=utf-8");
}

DashboardServer::~DashboardServer() { Stop(); }

Status DashboardServer::Bind(const HttpEndpoint& endpoint) {
  if (!http_->is_valid()) {
    return tls_status_.ok() ? Status::Internal("cannot set up the dashboard's TLS") : tls_status_;
  }
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
  url_ = std::string(options_.login ? "https://" : "http://") +
         (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
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
    ASSIGN_OR_RETURN(Json reply, reads_.Ask(std::move(request), options_.read_timeout));
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

Result<Json> DashboardServer::ReadLogPage(Json request, uint64_t offset, uint64_t limit) {
  request["offset"] = offset;
  request["limit"] = limit;
  ASSIGN_OR_RETURN(Json reply, reads_.Ask(std::move(request), options_.read_timeout));
  if (!reply.value("ok", false)) {
    const Json& error = reply["error"];
    std::string message = StringAt(error, "message");
    if (message.empty()) message = "the logs read failed";
    const std::string code = StringAt(error, "code");
    if (code == "NotFound") return Status::NotFound(message);
    if (code == "InvalidArgument") return Status::InvalidArgument(message);
    return Status::Unavailable(message);
  }
  return reply;
}

Result<Json> DashboardServer::TrialLogs(const std::string& trial_id, const std::string& stream,
                                        uint64_t attempt) {
  if (trial_id.empty()) return Status::InvalidArgument("want trial_id");
  Json request{{"op", "logs"}, {"trial_id", trial_id}, {"stream", stream}};
  if (attempt > 0) request["attempt"] = attempt;
  ASSIGN_OR_RETURN(Json page, ReadLogPage(request, 0, kLogTailBytes));
  const Json& size_field = page["size"];
  const uint64_t size = size_field.is_number_integer() && size_field.get<int64_t>() > 0
                            ? size_field.get<uint64_t>()
                            : 0;
  uint64_t offset = 0;
  if (size > kLogTailBytes) {
    // Only the tail: the output may be gigabytes, the page wants its end.
    offset = size - kLogTailBytes;
    if (page["attempt"].is_number_integer()) request["attempt"] = page["attempt"];
    ASSIGN_OR_RETURN(page, ReadLogPage(request, offset, kLogTailBytes));
  }
  Result<std::string> text =
      page["data"].is_string() ? Base64Decode(page["data"].get<std::string>()) : std::string();
  if (!text.ok()) return Status::Internal("the worker's output page is not base64");
  Json out{{"trial_id", trial_id},
           {"stream", stream},
           {"offset", offset},
           {"text", std::move(*text)},
           {"size", page["size"]},
           {"attempt", page["attempt"]},
           {"attempts", page["attempts"]},
           {"complete", page["complete"]},
           {"trial_status", page["trial_status"]},
           {"worker", page["worker"]}};
  return out;
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
    ASSIGN_OR_RETURN(Json reply,
                     reads_.Ask(Json{{"op", "results"}, {"trial_id", id}, {"offset", offset}},
                                options_.read_timeout));
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
  ASSIGN_OR_RETURN(Json experiments,
                   reads_.Ask(Json{{"op", "experiments"}}, options_.read_timeout));
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
    const std::string metric = StringAt(*doc, "metric");
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
