// `ztune dashboard` (docs/dashboard.md): asks the head for a login link to
// its dashboard over the authenticated client connection and prints it.
#include <string_view>

#include "client/command_calls.h"
#include "client/commands.h"
#include "client/json_util.h"
#include "common/printable.h"

namespace ztune::client {
namespace {

// Whether `host` (as a URL writes it) binds every address rather than naming one.
bool IsWildcardHost(std::string_view host) {
  return host == "0.0.0.0" || host == "[::]" || host == "[::0]" || host.empty();
}

}  // namespace

std::string DashboardUrlFor(const std::string& url, const std::string& client_endpoint) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return url;
  const size_t host_begin = scheme_end + 3;
  size_t host_end;
  if (url.compare(host_begin, 1, "[") == 0) {
    host_end = url.find(']', host_begin);
    if (host_end == std::string::npos) return url;
    ++host_end;
  } else {
    host_end = url.find_first_of(":/", host_begin);
    if (host_end == std::string::npos) host_end = url.size();
  }
  if (!IsWildcardHost(std::string_view(url).substr(host_begin, host_end - host_begin))) {
    return url;
  }
  // The head binds every address: the one this client reached it at is one
  // of them.
  if (client_endpoint.rfind("tcp://", 0) != 0) return url;
  const std::string rest = client_endpoint.substr(6);
  const size_t port_colon = rest.rfind(':');
  if (port_colon == std::string::npos || port_colon == 0) return url;
  const std::string host = rest.substr(0, port_colon);
  if (host == "*" || IsWildcardHost(host)) return url;
  return url.substr(0, host_begin) + host + url.substr(host_end);
}

int RunDashboard(const CommandContext& ctx, bool json) {
  int code = kExitOk;
  std::optional<Json> reply = CallOrReport(ctx, "dashboard_login", Json::object(), &code);
  if (!reply) return code;
  Json doc = StripEnvelope(std::move(*reply));
  const std::string url = DashboardUrlFor(StringField(doc, "url"), ctx.client.endpoint());
  doc["url"] = url;
  if (json) {
    PrintJson(ctx.out, doc);
    return kExitOk;
  }
  const bool login = doc.value("login", false);
  if (!login) {
    ctx.out << url << '\n';
    ctx.err << "(the dashboard is open to whoever reaches this address; it serves loopback "
               "only: from another machine, ssh -L 8265:127.0.0.1:PORT HEAD_HOST)\n";
    return kExitOk;
  }
  ctx.out << url << '\n';
  const auto expires = NumberField(doc, "expires_in_s");
  ctx.err << "(logs one browser in as '" << EscapeControl(StringField(doc, "user"))
          << "'; the link works once, within " << (expires ? static_cast<int64_t>(*expires) : 60)
          << " s; keep it to yourself)\n";
  return kExitOk;
}

}  // namespace ztune::client
