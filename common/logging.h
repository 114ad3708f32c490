// Process-wide logging setup (spdlog). Call once from main before any thread starts.
#pragma once

#include <string>

#include "common/status.h"

namespace ztune {

// `level` is one of trace, debug, info, warn, error, critical, off. `name` tags
// every line (e.g. "head", "worker-a").
Status InitLogging(const std::string& level, const std::string& name);

}  // namespace ztune
