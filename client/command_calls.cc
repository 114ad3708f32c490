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

std::optional<Json> CallAllPages(const CommandContext& ctx, const std::string& op, Json args,
                                 const char* list_key, int* exit_code) {
  std::optional<Json> merged;
  uint64_t offset = 0;
  while (true) {
    Json page_args = args;
    page_args["offset"] = offset;
    std::optional<Json> reply = CallOrReport(ctx, op, std::move(page_args), exit_code);
    if (!reply) return std::nullopt;
    Json items = (*reply)[list_key].is_array() ? (*reply)[list_key] : Json::array();
    // Read before the reply is moved from (a moved-from reply has no
    // next_offset, and every read stopped after its first page).
    const Json next = (*reply)["next_offset"];
    if (!merged) {
      merged = std::move(*reply);
    } else {
      for (auto& item : items) (*merged)[list_key].push_back(std::move(item));
      for (const char* key : {"experiments", "resources", "workers_alive"}) {
        if (reply->contains(key)) (*merged)[key] = std::move((*reply)[key]);
      }
    }
    if (!next.is_number_unsigned() || next.get<uint64_t>() <= offset) break;
    offset = next.get<uint64_t>();
  }
  for (const char* key : {"offset", "next_offset", "total"}) merged->erase(key);
  return merged;
}

}  // namespace ztune::client
