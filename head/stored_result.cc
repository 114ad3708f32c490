#include "head/stored_result.h"

#include "common/check.h"
#include "common/json_parse.h"
#include "common/protocol/result_view.h"

namespace ztune::head {

bool IsStoredAsJsonText(std::string_view value) { return !value.empty() && value[0] == '{'; }

Result<std::string> StoredResultText(std::string_view value) {
  if (IsStoredAsJsonText(value)) return std::string(value);
  const protocol::ResultView view(value);
  if (!view.is_object()) {
    return Status::Corruption("is neither JSON text nor a msgpack map");
  }
  return view.JsonText();
}

void AppendStoredResultText(std::string_view value, std::string& out) {
  if (IsStoredAsJsonText(value)) {
    out += value;
    return;
  }
  Result<std::string> text = StoredResultText(value);
  // Callers hold values the head wrote and read back whole (LastResult).
  CHECK(text.ok());
  out += *text;
}

Result<Json> ParseStoredResult(std::string_view value) {
  ASSIGN_OR_RETURN(std::string text, StoredResultText(value));
  // Results nest at most kMaxJsonDepth levels below the object itself.
  Result<Json> j = ParseJson(text, kMaxJsonDepth + 2);
  if (!j.ok()) return Status::Corruption("is not JSON: " + j.status().message());
  if (!j->is_object()) return Status::Corruption("is not a JSON object");
  return j;
}

std::string StoredResultValue(const Json& result) {
  // nlohmann's packer, not the codec's: msgpack-c packs an integral double
  // (3.0) as an integer, and the value must read back as the DOM it was.
  std::string out;
  Json::to_msgpack(result, out);
  return out;
}

}  // namespace ztune::head
