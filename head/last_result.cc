#include "head/last_result.h"

#include "common/check.h"

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

void LastResult::AppendText(std::string& out) const {
  if (!text_.empty()) {
    out += text_;
  } else {
    out += Get().dump();
  }
}

}  // namespace ztune::head
