#include "head/last_result.h"

#include "common/check.h"
#include "common/flat_key.h"
#include "head/stored_result.h"

namespace ztune::head {

Json LastResult::Parse(const std::string& value) {
  // Written by the head and checked when read back from a record: a failure
  // is a bug, not input.
  Result<Json> j = ParseStoredResult(value);
  CHECK(j.ok());
  return std::move(j).value();
}

const Json& LastResult::Get() const {
  static const Json kNull;
  if (!json_) {
    if (stored_.empty()) return kNull;
    json_ = Parse(stored_);
  }
  return *json_;
}

Json LastResult::Copy() const {
  if (json_ || stored_.empty()) return Get();
  return Parse(stored_);
}

void LastResult::AppendText(std::string& out) const {
  if (!stored_.empty()) {
    AppendStoredResultText(stored_, out);
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
