// The dynamic value type for configs, results and trial state (nlohmann::json).
#pragma once

#include <nlohmann/json.hpp>

namespace ztune {
using Json = nlohmann::json;
}  // namespace ztune
