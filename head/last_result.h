// LastResult: a trial's newest stored result. A result from a worker is kept
// as the JSON text the store holds for it (ResultProcessor::StoredText) and
// parsed on first read: most results are never read as a DOM before the next
// replaces them, and building then freeing one per result was a tenth of the
// head's loop (docs/benchmarks.md, "results as bytes").
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
    text_.clear();
    json_ = std::move(j);
    metric_.reset();
    return *this;
  }
  // `text`: one JSON object as nlohmann's dump() writes it (the record text
  // embeds it as it is, TrialRecordText equal to ToJson().dump()).
  // `metric_key` and `metric_value`: what Metric(metric_key) is to answer
  // (the caller read it from the result's bytes), so that a read of every
  // trial's metric (the best trial of an experiment, at each `status`)
  // parses no text.
  void SetText(std::string text, std::string metric_key = {},
               std::optional<double> metric_value = {}) {
    text_ = std::move(text);
    json_.reset();
    metric_.reset();
    if (!metric_key.empty()) {
      metric_ = MetricCache{std::move(metric_key), Finite(metric_value)};
    }
  }

  bool is_null() const { return text_.empty() && (!json_ || json_->is_null()); }
  // The result, null when there is none. Parses the text on first call.
  const Json& Get() const;
  // The result as a DOM of the caller's own: a parse of the text that is not
  // kept (a page of trial documents read once must not leave a DOM behind on
  // every trial it showed), or a copy of the DOM held.
  Json Copy() const;
  // Appends the result's JSON text (dump() of Get()) without parsing it.
  void AppendText(std::string& out) const;
  // The number at `flat_key` (FindFlatKey's rule) when it is finite: what
  // the stored text holds there (it writes NaN and infinities as null).
  // nullopt when there is no result, no such key, or no finite number.
  // Remembered for the last key asked.
  std::optional<double> Metric(const std::string& flat_key) const;

 private:
  struct MetricCache {
    std::string key;
    std::optional<double> value;
  };
  static std::optional<double> Finite(std::optional<double> v);

  std::string text_;                  // when set, the source of truth
  mutable std::optional<Json> json_;  // Get()'s parse of text_, or a DOM set directly
  mutable std::optional<MetricCache> metric_;
};

}  // namespace ztune::head
