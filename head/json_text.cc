#include "head/json_text.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <system_error>
#include <utility>

namespace ztune::head::json_text {

size_t SkipSpace(std::string_view s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  return i;
}

size_t SkipString(std::string_view s, size_t i) {
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == '"') {
      return i + 1;
    }
  }
  return kNone;
}

size_t SkipValue(std::string_view s, size_t i) {
  if (i >= s.size()) return kNone;
  if (s[i] == '"') return SkipString(s, i);
  if (s[i] == '{' || s[i] == '[') {
    size_t depth = 0;
    while (i < s.size()) {
      const char c = s[i];
      if (c == '"') {
        i = SkipString(s, i);
        if (i == kNone) return kNone;
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if ((c == '}' || c == ']') && --depth == 0) return i + 1;
      ++i;
    }
    return kNone;
  }
  const size_t begin = i;
  while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' && s[i] != '\t' &&
         s[i] != '\n' && s[i] != '\r') {
    ++i;
  }
  return i > begin ? i : kNone;
}

NumberRead ReadNumber(std::string_view s, size_t* at, double* value) {
  size_t i = *at;
  const size_t begin = i;
  auto digits = [&] {
    const size_t from = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i - from;
  };
  if (i < s.size() && s[i] == '-') ++i;
  if (i >= s.size()) return NumberRead::kNotANumber;
  size_t int_digits = 0;
  if (s[i] == '0') {
    ++i;
    int_digits = 1;
  } else {
    int_digits = digits();
    if (int_digits == 0) return NumberRead::kNotANumber;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (digits() == 0) return NumberRead::kNotANumber;
  }
  long exponent = 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool negative = false;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
    const size_t from = i;
    if (digits() == 0) return NumberRead::kNotANumber;
    if (i - from > 4) return NumberRead::kUnsure;
    for (size_t k = from; k < i; ++k) exponent = exponent * 10 + (s[k] - '0');
    if (negative) exponent = -exponent;
  }
  // Below 10^(int_digits + exponent): finite while that stays under 308.
  if (static_cast<long>(int_digits) + exponent > 300) return NumberRead::kUnsure;
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data() + begin, s.data() + i, v);
  if (ec != std::errc() || end != s.data() + i) return NumberRead::kUnsure;
  *value = v;
  *at = i;
  return NumberRead::kOk;
}

bool ReadString(std::string_view v, std::string* out) {
  if (v.size() < 2 || v.front() != '"' || v.back() != '"') return false;
  const std::string_view inner = v.substr(1, v.size() - 2);
  const bool plain = std::all_of(inner.begin(), inner.end(), [](char c) {
    return c >= 0x20 && c < 0x7f && c != '\\' && c != '"';
  });
  if (plain) {
    out->assign(inner);
    return true;
  }
  Json j = Json::parse(v.begin(), v.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_string()) return false;  // also when discarded
  *out = std::move(j.get_ref<std::string&>());
  return true;
}

bool ReadInteger(std::string_view v, Json* out) {
  const bool negative = !v.empty() && v.front() == '-';
  const std::string_view digits = v.substr(negative ? 1 : 0);
  if (digits.empty() || (digits.front() == '0' && digits.size() > 1)) return false;
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  const char* first = v.data();
  const char* last = v.data() + v.size();
  if (negative) {
    int64_t n = 0;
    const auto [p, ec] = std::from_chars(first, last, n);
    if (ec != std::errc() || p != last) return false;
    *out = n;
  } else {
    uint64_t n = 0;
    const auto [p, ec] = std::from_chars(first, last, n);
    if (ec != std::errc() || p != last) return false;
    *out = n;
  }
  return true;
}

namespace {

class DomReader {
 public:
  explicit DomReader(std::string_view s) : s_(s) {}

  std::optional<Json> Read() {
    Json out;
    i_ = SkipSpace(s_, 0);
    if (!Value(&out, 0) || SkipSpace(s_, i_) != s_.size()) return std::nullopt;
    return out;
  }

 private:
  // Each reads what starts at i_ and leaves i_ after it; false: not JSON,
  // or not sure.
  bool Value(Json* out, size_t depth) {
    if (i_ >= s_.size()) return false;
    switch (s_[i_]) {
      case '{': return Object(out, depth + 1);
      case '[': return Array(out, depth + 1);
      case '"': {
        std::string text;
        if (!String(&text)) return false;
        *out = std::move(text);
        return true;
      }
      case 't': return Literal("true", true, out);
      case 'f': return Literal("false", false, out);
      case 'n': return Literal("null", nullptr, out);
      default: return Number(out);
    }
  }

  bool Object(Json* out, size_t depth) {
    if (depth > kMaxDomDepth) return false;
    *out = Json::object();
    i_ = SkipSpace(s_, i_ + 1);
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      return true;
    }
    for (;;) {
      if (i_ >= s_.size() || s_[i_] != '"') return false;
      std::string key;
      if (!String(&key)) return false;
      i_ = SkipSpace(s_, i_);
      if (i_ >= s_.size() || s_[i_] != ':') return false;
      i_ = SkipSpace(s_, i_ + 1);
      Json value;
      if (!Value(&value, depth)) return false;
      (*out)[std::move(key)] = std::move(value);  // a repeated key: the last, as nlohmann
      const After after = Next('}');
      if (after != After::kMore) return after == After::kClosed;
    }
  }

  bool Array(Json* out, size_t depth) {
    if (depth > kMaxDomDepth) return false;
    *out = Json::array();
    i_ = SkipSpace(s_, i_ + 1);
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
      return true;
    }
    for (;;) {
      Json value;
      if (!Value(&value, depth)) return false;
      out->push_back(std::move(value));
      const After after = Next(']');
      if (after != After::kMore) return after == After::kClosed;
    }
  }

  enum class After { kMore, kClosed, kBad };

  // After a member: a comma (kMore, i_ at the next token) or `close`
  // (kClosed, i_ after it).
  After Next(char close) {
    i_ = SkipSpace(s_, i_);
    if (i_ >= s_.size()) return After::kBad;
    if (s_[i_] == close) {
      ++i_;
      return After::kClosed;
    }
    if (s_[i_] != ',') return After::kBad;
    i_ = SkipSpace(s_, i_ + 1);
    return After::kMore;
  }

  bool String(std::string* out) {
    const size_t end = SkipString(s_, i_);
    if (end == kNone || !ReadString(s_.substr(i_, end - i_), out)) return false;
    i_ = end;
    return true;
  }

  bool Literal(std::string_view word, Json value, Json* out) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    *out = std::move(value);
    return true;
  }

  // nlohmann's typing: an integer token is an int64 (negative) or a uint64
  // when it fits, a double otherwise (strtod, as from_chars, rounds
  // correctly).
  bool Number(Json* out) {
    size_t end = i_;
    double d = 0;
    if (ReadNumber(s_, &end, &d) != NumberRead::kOk) return false;
    const std::string_view token = s_.substr(i_, end - i_);
    i_ = end;
    if (token.find_first_of(".eE") != std::string_view::npos || !ReadInteger(token, out)) *out = d;
    return true;
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

std::optional<Json> ReadDom(std::string_view s) { return DomReader(s).Read(); }

}  // namespace ztune::head::json_text
