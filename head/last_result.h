// LastResult: a trial's newest stored result. A result from a worker is kept
// as the value the store holds for it (ResultProcessor::StoredValue: msgpack;
// head/stored_result.h) and one read back from a trial record as its JSON
// text. Either is turned into a DOM on first read, and into JSON text only
// when a record or a client's document embeds it: most results are never
// read before the next replaces them, and building then freeing a DOM per
// result was a tenth of the head's loop, the JSON text another tenth
// (docs/benchmarks.md, "results as bytes").
//
// Loop thread only: Get() and Metric() cache in mutable members.
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "common/json.h"

namespace ztune::head {

class LastResult {
 public:
  LastResult() = default;
  // A DOM (a stored record read back, an exploit, tests); null clears.
  LastResult& operator=(Json j) {
    stored_.clear();
    json_ = std::move(j);
    metric_.reset();
    return *this;
  }
  // `value`: a stored result (head/stored_result.h), msgpack or one JSON
  // object as nlohmann's dump() writes it (the record text embeds its JSON
  // text, TrialRecordText equal to ToJson().dump()). `metric_key` and
  // `metric_value`: what Metric(metric_key) is to answer (the caller read it
  // from the result's bytes), so that a read of every trial's metric (the
  // best trial of an experiment, at each `status`) parses nothing.
  void SetStored(std::string value, std::string metric_key = {},
                 std::optional<double> metric_value = {}) {
    stored_ = std::move(value);
    json_.reset();
    metric_.reset();
    if (!metric_key.empty()) {
      metric_ = MetricCache{std::move(metric_key), Finite(metric_value)};
    }
  }

  bool is_null() const { return stored_.empty() && (!json_ || json_->is_null()); }
  // The result, null when there is none. Parses the value on first call.
  const Json& Get() const;
  // The result as a DOM of the caller's own: a parse of the value that is not
  // kept (a page of trial documents read once must not leave a DOM behind on
  // every trial it showed), or a copy of the DOM held.
  Json Copy() const;
  // Appends the result's JSON text (dump() of Get()) without a DOM.
  void AppendText(std::string& out) const;
  // The number at `flat_key` (FindFlatKey's rule) when it is finite: what
  // the JSON text holds there (it writes NaN and infinities as null).
  // nullopt when there is no result, no such key, or no finite number.
  // Remembered for the last key asked.
  std::optional<double> Metric(const std::string& flat_key) const;

 private:
  struct MetricCache {
    std::string key;
    std::optional<double> value;
  };
  static std::optional<double> Finite(std::optional<double> v);
  static Json Parse(const std::string& value);

  // A stored value (msgpack or JSON text); when set, the source of truth.
  std::string stored_;
  mutable std::optional<Json> json_;  // Get()'s parse of stored_, or a DOM set directly
  mutable std::optional<MetricCache> metric_;
};

}  // namespace ztune::head
