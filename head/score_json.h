// Scores in scheduler state: JSON numbers cannot hold NaN or infinities, so
// these travel as the strings "nan", "inf" and "-inf". Plain functions.
#pragma once

#include <optional>

#include "common/json.h"

namespace ztune::head {

Json ScoreToJson(double v);
// nullopt when `j` is neither a number nor one of those strings.
std::optional<double> ScoreFromJson(const Json& j);

}  // namespace ztune::head
