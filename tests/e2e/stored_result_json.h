// A result as the head stored it, read as JSON without the head's code (the
// e2e tests read the store of a stopped head directly): msgpack since schema
// 3, JSON text in a store written before (docs/storage.md, "results").
// Enough for the tests' results, which hold no NaN: the head reads a stored
// NaN as null, MsgpackToJson as a NaN double.
#pragma once

#include <string_view>

#include "common/json.h"
#include "common/protocol/codec.h"

namespace ztune::e2e {

inline Json StoredResultJson(std::string_view value) {
  if (!value.empty() && value[0] == '{') return Json::parse(value);
  return protocol::MsgpackToJson(value).value();
}

}  // namespace ztune::e2e
