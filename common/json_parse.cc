#include "common/json_parse.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace ztune {

namespace {

Result<Json> Parse(std::string_view text, int max_depth, bool refuse_duplicate_keys) {
  int deepest = 0;
  // Keys seen in each object being parsed, innermost last.
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  // The callback sees every value with its depth; values below the limit are
  // discarded as they are parsed, so a deep document never becomes a deep
  // tree (whose dump would recurse).
  auto limit = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) {
      deepest = std::max(deepest, depth + 1);
    }
    if (refuse_duplicate_keys && depth <= max_depth) {
      if (event == Json::parse_event_t::object_start) keys.emplace_back();
      if (event == Json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
      if (event == Json::parse_event_t::key && !keys.empty() && parsed.is_string() &&
          !keys.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
        duplicate = parsed.get<std::string>();
      }
    }
    return depth <= max_depth;
  };
  try {
    Json j = Json::parse(text.begin(), text.end(), limit);
    if (deepest > max_depth) {
      return Status::InvalidArgument("JSON nested deeper than " + std::to_string(max_depth) +
                                     " levels");
    }
    if (!duplicate.empty()) {
      return Status::InvalidArgument("key '" + duplicate + "' appears twice in one object");
    }
    return j;
  } catch (const Json::exception& e) {
    return Status::InvalidArgument(std::string("invalid JSON: ") + e.what());
  }
}

}  // namespace

Result<Json> ParseJson(std::string_view text, int max_depth) {
  return Parse(text, max_depth, /*refuse_duplicate_keys=*/false);
}

Result<Json> ParseJsonNoDuplicateKeys(std::string_view text, int max_depth) {
  return Parse(text, max_depth, /*refuse_duplicate_keys=*/true);
}

}  // namespace ztune
