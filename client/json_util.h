// Non-throwing JSON helpers for the client: parsing and dumping (the seam where
// nlohmann's exceptions are caught) and type-checked field reads for documents
// the head sent. A malformed document must never crash the CLI: every accessor
// tolerates a missing key, a wrong type or a non-object receiver. Plain
// functions, thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"
#include "common/status.h"

namespace ztune::client {

// Parses `text`. InvalidArgument with nlohmann's position message on failure.
Result<Json> ParseJson(std::string_view text);

// Serialises without throwing: invalid UTF-8 is replaced with U+FFFD. `indent`
// < 0 means compact.
std::string DumpJson(const Json& j, int indent = -1);

// The member `key` of `obj`, or nullptr when `obj` is not an object or lacks it.
const Json* FindField(const Json& obj, std::string_view key);

// The member `key` of `obj`, or a null value when missing.
const Json& FieldOrNull(const Json& obj, std::string_view key);

// Typed reads; the fallback is returned when the field is missing, null or of
// another type. Numbers accept any JSON number (integer or float).
std::string StringField(const Json& obj, std::string_view key, std::string_view fallback = "");
std::optional<double> NumberField(const Json& obj, std::string_view key);
int64_t IntField(const Json& obj, std::string_view key, int64_t fallback = 0);
bool BoolField(const Json& obj, std::string_view key, bool fallback = false);

// The field if it is an object / array, else an empty object / array.
const Json& ObjectField(const Json& obj, std::string_view key);
const Json& ArrayField(const Json& obj, std::string_view key);

// A JSON value as a number, if it is one.
std::optional<double> AsNumber(const Json& j);

}  // namespace ztune::client
