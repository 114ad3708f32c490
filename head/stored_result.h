// The value of one result in the store's results family (docs/storage.md).
// Schema 3 stores the worker's msgpack map with "trial_id" and "done" set by
// the head (ResultView::StampedMsgpack): usually the worker's bytes as they
// came, so the head writes no JSON per result. Schema 2 stored the JSON text
// of the same object, and a store upgraded in place keeps those values; so
// every reader takes both, told apart by the first byte: '{' begins every
// JSON text the head wrote, a msgpack map begins with 0x80-0x8f, 0xde or 0xdf.
// Clients, the results directory and `--check` see JSON text either way,
// byte for byte what schema 2 stored.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/json.h"
#include "common/status.h"

namespace ztune::head {

// Whether `value` is JSON text (schema 2) rather than msgpack (schema 3).
bool IsStoredAsJsonText(std::string_view value);

// The errors below are Corruption with a message that goes on a sentence
// naming the result: "result 3 of trial T " + "is not a JSON object".

// The JSON text of a stored result: nlohmann's dump() of its DOM, with NaN
// and infinities as null. Corruption when `value` is neither JSON text nor a
// complete msgpack map (a JSON text is returned as it is, not parsed).
Result<std::string> StoredResultText(std::string_view value);
void AppendStoredResultText(std::string_view value, std::string& out);

// The stored result as a DOM: the parse of StoredResultText, so a NaN reads
// as null whichever schema wrote it. Corruption when it is not an object.
Result<Json> ParseStoredResult(std::string_view value);

// The value to store for a result built as a DOM (PBT's cloned results):
// ParseStoredResult of it is `result` again (a float stays a float, even 3.0).
std::string StoredResultValue(const Json& result);

}  // namespace ztune::head
