#include "common/dashboard/dashboard_page.h"

#include "common/check.h"

namespace ztune::dashboard {
namespace {

constexpr std::string_view kPlaceholder = "/*ZTUNE_DATA*/null";

// JSON text that is safe inside <script>: '<' only occurs in strings, where
// \u003c means the same; U+2028 and U+2029 end a line in older JavaScript.
std::string ScriptSafe(const std::string& json) {
  std::string out;
  out.reserve(json.size() + 64);
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '\xE2' && i + 2 < json.size() && json[i + 1] == '\x80' &&
               (json[i + 2] == '\xA8' || json[i + 2] == '\xA9')) {
      out += json[i + 2] == '\xA8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string Page(const Json& data) {
  const std::string_view page = PageTemplate();
  const size_t at = page.find(kPlaceholder);
  CHECK(at != std::string_view::npos);  // the page has its placeholder (a test checks it)
  std::string out;
  const std::string json = ScriptSafe(data.dump(-1, ' ', false, Json::error_handler_t::replace));
  out.reserve(page.size() + json.size());
  out.append(page.substr(0, at));
  out += json;
  out.append(page.substr(at + kPlaceholder.size()));
  return out;
}

}  // namespace ztune::dashboard
