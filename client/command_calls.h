// The calls every ztune subcommand makes to the head: one request, or every
// page of a paged read, with a failure reported on ctx.err and turned into
// the exit code (commands.h); and JSON output. Shared by commands.cc (the
// commands that change something) and view_commands.cc (the read-only views).
//
// Thread affinity: that of the HeadClient in the context.
#pragma once

#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include "client/commands.h"
#include "common/json.h"

namespace ztune::client {

void PrintJson(std::ostream& out, const Json& j);

// Calls `op`; on failure reports and sets *exit_code.
std::optional<Json> CallOrReport(const CommandContext& ctx, const std::string& op, Json args,
                                 int* exit_code);

// A paged read, page by page: calls `on_page` with each reply in turn (its
// `list_key` holds that page's items) until the last page or until on_page
// returns false. False (and *exit_code set) when a call failed.
bool ForEachPage(const CommandContext& ctx, const std::string& op, const Json& args,
                 const char* list_key, const std::function<bool(Json& page)>& on_page,
                 int* exit_code);

// A paged read (status, trials, results): asks for every page in turn and
// returns the last reply with `list_key` holding the items of all pages. The
// head answers each page between its commits and heartbeats.
std::optional<Json> CallAllPages(const CommandContext& ctx, const std::string& op, Json args,
                                 const char* list_key, int* exit_code);

}  // namespace ztune::client
