#include "common/printable.h"

#include <cstdio>

#include "common/utf8.h"

namespace ztune {
namespace {

bool IsC1Lead(std::string_view text, size_t i) {
  return static_cast<unsigned char>(text[i]) == 0xC2 && i + 1 < text.size() &&
         static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
         static_cast<unsigned char>(text[i + 1]) <= 0x9F;
}

}  // namespace

std::string EscapeControl(std::string_view text, Newlines newlines) {
  std::string out;
  out.reserve(text.size());
  char buf[8];
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (IsC1Lead(text, i)) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(text[i + 1]));
      out += buf;
      ++i;
      continue;
    }
    if (c >= 0x20 && c != 0x7f) {
      out += static_cast<char>(c);
      continue;
    }
    if (newlines == Newlines::kKeep && (c == '\n' || c == '\t')) {
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

std::string EscapeForLog(std::string_view text) {
  size_t plain = 0;
  while (plain < text.size() && static_cast<unsigned char>(text[plain]) >= 0x20 &&
         static_cast<unsigned char>(text[plain]) < 0x7f) {
    ++plain;
  }
  if (plain == text.size()) return std::string(text);
  std::string out(text.substr(0, plain));
  char buf[8];
  for (size_t i = plain; i < text.size();) {
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(text[i]));
      out += buf;
      ++i;
    } else {
      out += EscapeControl(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

bool HasControl(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f || IsC1Lead(text, i)) return true;
  }
  return false;
}

}  // namespace ztune
