// The dashboard page (common/dashboard/dashboard.html, compiled in at build
// time): one self-contained HTML file with its styles, scripts and SVG plots,
// nothing fetched from the network. `ztune report` fills it with an
// experiment's data (docs/dashboard.md). Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/json.h"

namespace ztune::dashboard {

// The page as written in the source tree, with its data placeholder.
std::string_view PageTemplate();

// The page with `data` in place of the placeholder. Every '<' of the data is
// written as \u003c (and U+2028/U+2029 escaped), so no string in it can end
// the script element or break the script; invalid UTF-8 is replaced.
std::string Page(const Json& data);

}  // namespace ztune::dashboard
