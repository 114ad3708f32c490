// Printable: escapes control characters in text that came from users or peers
// (experiment names, trainable errors, worker names) before it reaches a
// terminal or a log line, so that it can neither inject log lines nor send
// escape sequences to a terminal. Pure function; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace ztune {

enum class Newlines { kEscape, kKeep };

// C0 controls (and DEL) become "\n", "\r", "\t" or "\xNN"; C1 controls
// (U+0080..U+009F, UTF-8 C2 80..C2 9F) become "\u00NN"; a backslash stays as
// it is. With Newlines::kKeep, '\n' and '\t' pass (multi-line error texts on a
// terminal); '\r' is always escaped (it rewrites the current line).
std::string EscapeControl(std::string_view text, Newlines newlines = Newlines::kEscape);

// For a log line: EscapeControl (newlines escaped too: one record, one
// line) and every byte of an invalid UTF-8 sequence as "\xNN", so binary
// bytes from a peer never reach a log file raw. `text` itself when it is
// printable ASCII (the common case costs one scan).
std::string EscapeForLog(std::string_view text);

// Whether `text` holds a C0/C1 control character or DEL.
bool HasControl(std::string_view text);

}  // namespace ztune
