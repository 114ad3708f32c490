#include "head/last_result.h"

#include "common/check.h"
#include "common/flat_key.h"

namespace ztune::head {

const Json& LastResult::Get() const {
  static const Json kNull;
  if (!json_) {
    if (text_.empty()) return kNull;
    // Written by ResultView::StampedJson: a parse failure is a bug, not input.
    json_ = Json::parse(text_, nullptr, /*allow_exceptions=*/false);
    CHECK(!json_->is_discarded());
  }
  return *json_;
}

Json LastResult::Copy() const {
  if (json_ || text_.empty()) return Get();
  Json parsed = Json::parse(text_, nullptr, /*allow_exceptions=*/false);
  CHECK(!parsed.is_discarded());
  return parsed;
}

void LastResult::AppendText(std::string& out) const {
  if (!text_.empty()) {
    out += text_;
  } else {
    out += Get().dump();
  }
}

std::optional<double> LastResult::Finite(std::optional<double> v) {
  if (v && !std::isfinite(*v)) return std::nullopt;
  return v;
}

std::optional<double> LastResult::Metric(const std::string& flat_key) const {
  if (metric_ && metric_->key == flat_key) return metric_->value;
  std::optional<double> value;
  if (!is_null()) {
    const Json* v = FindFlatKey(Get(), flat_key);
    if (v != nullptr && v->is_number()) value = Finite(v->get<double>());
  }
  metric_ = MetricCache{flat_key, value};
  return value;
}

}  // namespace ztune::head
