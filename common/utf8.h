// UTF-8 for text from peers: nlohmann::json refuses to dump a string that is
// not valid UTF-8 (it throws), so a worker's or trainable's bad bytes crashed
// the head when it stored them. Invalid sequences are replaced at the decode
// seam instead.
#pragma once

#include <string>
#include <string_view>

namespace ztune {

// The length of the well-formed UTF-8 sequence starting at s[i] (1 for
// ASCII), or 0 when the bytes there are not one. Requires i < s.size().
size_t Utf8SequenceLength(std::string_view s, size_t i);

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates, or code
// points above U+10FFFF).
bool IsValidUtf8(std::string_view s);
// `s` with every invalid byte sequence replaced by U+FFFD; `s` itself when it
// is valid (the common case costs one scan).
std::string Utf8OrReplaced(std::string_view s);

}  // namespace ztune
