#include "common/json_parse.h"

#include <string>

namespace ztune {

Result<Json> ParseJson(std::string_view text, int max_depth) {
  int deepest = 0;
  // The callback sees every value with its depth; values below the limit are
  // discarded as they are parsed, so a deep document never becomes a deep
  // tree (whose dump would recurse).
  auto limit = [&](int depth, Json::parse_event_t event, Json&) {
    if (event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) {
      deepest = std::max(deepest, depth + 1);
    }
    return depth <= max_depth;
  };
  try {
    Json j = Json::parse(text.begin(), text.end(), limit);
    if (deepest > max_depth) {
      return Status::InvalidArgument("JSON nested deeper than " + std::to_string(max_depth) +
                                     " levels");
    }
    return j;
  } catch (const Json::exception& e) {
    return Status::InvalidArgument(std::string("invalid JSON: ") + e.what());
  }
}

}  // namespace ztune
