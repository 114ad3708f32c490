#include "client/command_calls.h"

#include <cstdint>
#include <utility>

#include "client/json_util.h"

namespace ztune::client {

void PrintJson(std::ostream& out, const Json& j) { out << DumpJson(j, 2) << '\n'; }

std::optional<Json> CallOrReport(const CommandContext& ctx, const std::string& op, Json args,
                                 int* exit_code) {
  Result<Json> r = ctx.client.Call(op, std::move(args));
  if (!r.ok()) {
    *exit_code = ReportCallError(ctx, r.status());
    return std::nullopt;
  }
  *exit_code = kExitOk;
  return std::move(r).value();
}

bool ForEachPage(const CommandContext& ctx, const std::string& op, const Json& args,
                 const char* list_key, const std::function<bool(Json& page)>& on_page,
                 int* exit_code) {
  uint64_t offset = 0;
  while (true) {
    Json page_args = args;
    page_args["offset"] = offset;
    std::optional<Json> reply = CallOrReport(ctx, op, std::move(page_args), exit_code);
    if (!reply) return false;
    if (!(*reply)[list_key].is_array()) (*reply)[list_key] = Json::array();
    // Read before on_page may move from the reply.
    const Json next = (*reply)["next_offset"];
    if (!on_page(*reply)) return true;
    if (!next.is_number_unsigned() || next.get<uint64_t>() <= offset) return true;
    offset = next.get<uint64_t>();
  }
}

std::optional<Json> CallAllPages(const CommandContext& ctx, const std::string& op, Json args,
                                 const char* list_key, int* exit_code) {
  std::optional<Json> merged;
  const bool ok = ForEachPage(
      ctx, op, args, list_key,
      [&](Json& reply) {
        if (!merged) {
          merged = std::move(reply);
          return true;
        }
        for (auto& item : reply[list_key]) (*merged)[list_key].push_back(std::move(item));
        for (const char* key : {"experiments", "resources", "workers_alive"}) {
          if (reply.contains(key)) (*merged)[key] = std::move(reply[key]);
        }
        return true;
      },
      exit_code);
  if (!ok) return std::nullopt;
  for (const char* key : {"offset", "next_offset", "total"}) merged->erase(key);
  return merged;
}

}  // namespace ztune::client
