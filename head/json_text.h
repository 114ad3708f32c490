// Reading JSON text without a DOM: the pieces the stored-record scanners
// (head/last_result_scan.h, head/trial_record_scan.h) share. A head's start
// reads 100,000 trial records; a DOM of each was most of it
// (docs/benchmarks.md, "recovery").
//
// Pure functions; thread-safe (the start parses records on two threads).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"

namespace ztune::head::json_text {

inline constexpr size_t kNone = std::string_view::npos;

// The index of the first character at or after `i` that is not JSON
// whitespace (space, tab, line feed, carriage return).
size_t SkipSpace(std::string_view s, size_t i);

// `i` at an opening quote: the index after the closing one, or kNone.
// Escapes are stepped over, not checked.
size_t SkipString(std::string_view s, size_t i);

// `i` at the first character of a value: the index after it, or kNone.
// Containers are matched by counting brackets (without recursion) and a
// scalar runs to the next delimiter: nothing is checked, so whatever a
// caller keeps of the span it must read strictly (nlohmann, ReadNumber).
size_t SkipValue(std::string_view s, size_t i);

enum class NumberRead {
  kOk,
  kNotANumber,  // not RFC 8259's grammar: nlohmann refuses it too
  // Valid, but it might overflow a double (nlohmann refuses an overflow) or
  // its exponent is longer than the check below reads: let nlohmann decide.
  kUnsure,
};

// The number -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at s[*i]: on
// kOk, *i is the index after it and *value the double nlohmann reads of it
// (strtod and from_chars both round correctly; an integer nlohmann types as
// one converts to the same double).
NumberRead ReadNumber(std::string_view s, size_t* i, double* value);

// `v` is one whole JSON string (quotes included, nothing around them): its
// value as nlohmann reads it. Printable ASCII without escapes is the text
// itself; nlohmann reads the rest (escapes, UTF-8, control characters).
// False when `v` is not a valid JSON string.
bool ReadString(std::string_view v, std::string* out);

// `v` is exactly an integer token -?(0|[1-9][0-9]*): *out is nlohmann's
// value of it, an int64 when negative, else a uint64. False when `v` is not
// one or does not fit (nlohmann then reads a double).
bool ReadInteger(std::string_view v, Json* out);

// Containers deeper than this are left to nlohmann (ReadDom's nullopt).
inline constexpr size_t kMaxDomDepth = 64;

// nlohmann's DOM of `s`, which must be one JSON value and nothing else,
// built without its lexer (which reads a character at a time and copies
// every token into a buffer): the same types (an integer that fits is an
// int64 when negative, else a uint64, and a double otherwise), the last of a
// repeated key, the same strings. nullopt when `s` is not JSON, and when it
// is not sure to read `s` as nlohmann does (an escaped or non-ASCII string is
// handed to nlohmann, and so are deep containers and unsure numbers): a
// caller then parses `s` with nlohmann, which decides.
std::optional<Json> ReadDom(std::string_view s);

}  // namespace ztune::head::json_text
