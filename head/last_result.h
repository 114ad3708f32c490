// LastResult: a trial's newest stored result. A result from a worker is kept
// as the JSON text the store holds for it (ResultProcessor::StoredText) and
// parsed on first read: most results are never read as a DOM before the next
// replaces them, and building then freeing one per result was a tenth of the
// head's loop (docs/benchmarks.md, "results as bytes").
//
// Loop thread only: Get() caches its parse in a mutable member.
#pragma once

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
    return *this;
  }
  // `text`: one JSON object as nlohmann's dump() writes it (the record text
  // embeds it as it is, TrialRecordText equal to ToJson().dump()).
  void SetText(std::string text) {
    text_ = std::move(text);
    json_.reset();
  }

  bool is_null() const { return text_.empty() && (!json_ || json_->is_null()); }
  // The result, null when there is none. Parses the text on first call.
  const Json& Get() const;
  // Appends the result's JSON text (dump() of Get()) without parsing it.
  void AppendText(std::string& out) const;

 private:
  std::string text_;                  // when set, the source of truth
  mutable std::optional<Json> json_;  // Get()'s parse of text_, or a DOM set directly
};

}  // namespace ztune::head
