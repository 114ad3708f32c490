#include "head/last_result_scan.h"

#include <cmath>
#include <optional>
#include <vector>

#include "common/utf8.h"
#include "head/json_text.h"

namespace ztune::head {
namespace {

// JSON as RFC 8259 and nlohmann's lexer take it (strict UTF-8, no control
// characters in strings, surrogate escapes in pairs), read in one pass
// without recursion or allocation per token, tracking what the scan needs:
// the `done` and `should_checkpoint` members and the metric's path. Anything
// it cannot be sure nlohmann reads the same (an escaped key, a number that
// might overflow a double, nesting past kMaxScanDepth) makes it give up with
// needs_dom: the DOM then decides. It accepts nothing nlohmann refuses
// (LastResult::Get parses the kept text and CHECKs that it parses).
class Scanner {
 public:
  Scanner(std::string_view text, const std::string& metric_key)
      : s_(text), metric_key_(metric_key) {
    if (metric_key_.empty()) return;
    for (size_t from = 0;;) {
      const size_t slash = metric_key_.find('/', from);
      parts_.push_back(metric_key_.substr(from, slash == std::string::npos ? slash : slash - from));
      if (slash == std::string::npos) break;
      from = slash + 1;
    }
  }

  LastResultScan Run() {
    LastResultScan out;
    const bool parsed = Parse();
    if (needs_dom_) {
      out.needs_dom = true;
      return out;
    }
    if (!parsed) {
      out.status = Status::Corruption("trial record: last_result" +
                                      (error_.empty() ? std::string(" is not JSON") : error_));
      return out;
    }
    const std::optional<double> v = exact_seen_ ? exact_ : nested_;
    if (v && std::isfinite(*v)) out.metric = v;
    return out;
  }

 private:
  enum class Kind { kBoolean, kNumber, kOther };

  struct Level {
    bool object = false;
    // This object is reached by parts_[0 .. depth-1] (the root always is).
    bool on_path = false;
    bool empty = true;  // nothing read in it yet
    // About the current key (objects only).
    bool key_is_part = false;    // parts_[depth - 1]
    bool key_is_exact = false;   // the whole metric key, at depth 1
    const char* flag = nullptr;  // "done" / "should_checkpoint", at depth 1
    int seen = 0;                // bits of the keys above already seen
  };

  bool Fail() { return false; }
  bool GiveUp() {
    needs_dom_ = true;
    return false;
  }
  void SkipSpace() { i_ = json_text::SkipSpace(s_, i_); }

  // The whole text: one value, then only whitespace.
  bool Parse() {
    SkipSpace();
    if (i_ >= s_.size()) return Fail();
    if (s_[i_] != '{') {
      error_ = " is not an object";
      return false;
    }
    if (!Value()) return false;
    while (!levels_.empty()) {
      SkipSpace();
      if (i_ >= s_.size()) return Fail();
      Level& level = levels_.back();  // not used after Value(), which may push
      if (s_[i_] == (level.object ? '}' : ']')) {
        ++i_;
        levels_.pop_back();
        continue;
      }
      if (!level.empty) {
        if (s_[i_] != ',') return Fail();
        ++i_;
        SkipSpace();
      }
      if (level.object) {
        if (!Key()) return false;
        SkipSpace();
        if (i_ >= s_.size() || s_[i_] != ':') return Fail();
        ++i_;
        SkipSpace();
      }
      level.empty = false;
      if (!Value()) return false;
    }
    SkipSpace();
    return i_ == s_.size();
  }

  bool Key() {
    if (i_ >= s_.size() || s_[i_] != '"') return Fail();
    const size_t begin = i_ + 1;
    bool escaped = false;
    if (!String(&escaped)) return false;
    // An escaped key may spell one the scan reads ("d\u006fne").
    if (escaped) return GiveUp();
    const std::string_view k = s_.substr(begin, i_ - 1 - begin);
    Level& level = levels_.back();
    level.key_is_part = false;
    level.key_is_exact = false;
    level.flag = nullptr;
    const size_t depth = levels_.size();  // 1: a member of the result itself
    if (depth == 1) {
      if (k == "done") level.flag = "done";
      if (k == "should_checkpoint") level.flag = "should_checkpoint";
      if (!metric_key_.empty() && k == metric_key_) level.key_is_exact = true;
    }
    if (level.on_path && depth <= parts_.size() && k == parts_[depth - 1]) {
      level.key_is_part = true;
    }
    // A repeated key the scan reads: the DOM keeps its last value.
    const int bits = (level.flag == nullptr ? 0 : (k == "done" ? 1 : 2)) |
                     (level.key_is_exact ? 4 : 0) | (level.key_is_part ? 8 : 0);
    if ((level.seen & bits) != 0) return GiveUp();
    level.seen |= bits;
    return true;
  }

  // A value at i_: a scalar is read whole, a container is opened (Parse
  // reads its members).
  bool Value() {
    if (i_ >= s_.size()) return Fail();
    const char c = s_[i_];
    if (c == '{' || c == '[') {
      if (!Note(Kind::kOther, std::nullopt)) return false;
      if (levels_.size() >= kMaxScanDepth) return GiveUp();
      const bool object = c == '{';
      const bool on_path =
          levels_.empty() ||
          (object && levels_.back().object && levels_.back().on_path && levels_.back().key_is_part);
      levels_.push_back(Level{object, on_path});
      ++i_;
      return true;
    }
    if (c == '"') {
      bool escaped = false;
      return String(&escaped) && Note(Kind::kOther, std::nullopt);
    }
    if (c == 't') return Literal("true") && Note(Kind::kBoolean, std::nullopt);
    if (c == 'f') return Literal("false") && Note(Kind::kBoolean, std::nullopt);
    if (c == 'n') return Literal("null") && Note(Kind::kOther, std::nullopt);
    std::optional<double> number;
    return Number(&number) && Note(Kind::kNumber, number);
  }

  bool Literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return Fail();
    i_ += word.size();
    return true;
  }

  // A number, and its value when it is surely finite (nlohmann refuses an
  // overflow: the DOM then says so).
  bool Number(std::optional<double>* value) {
    double v = 0;
    switch (json_text::ReadNumber(s_, &i_, &v)) {
      case json_text::NumberRead::kOk: *value = v; return true;
      case json_text::NumberRead::kNotANumber: return Fail();
      case json_text::NumberRead::kUnsure: return GiveUp();
    }
    return Fail();
  }

  // A string at i_ (its opening quote); i_ ends after the closing one.
  bool String(bool* escaped) {
    ++i_;
    while (i_ < s_.size()) {
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return true;
      }
      if (c < 0x20) return Fail();
      if (c == '\\') {
        *escaped = true;
        if (++i_ >= s_.size()) return Fail();
        const char e = s_[i_];
        if (e == 'u') {
          const std::optional<unsigned> code = Hex4(i_ + 1);
          if (!code) return Fail();
          i_ += 5;
          if (*code >= 0xDC00 && *code <= 0xDFFF) return Fail();  // a lone low surrogate
          if (*code >= 0xD800 && *code <= 0xDBFF) {
            if (s_.substr(i_, 2) != "\\u") return Fail();
            const std::optional<unsigned> low = Hex4(i_ + 2);
            if (!low || *low < 0xDC00 || *low > 0xDFFF) return Fail();
            i_ += 6;
          }
          continue;
        }
        if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r' &&
            e != 't') {
          return Fail();
        }
        ++i_;
        continue;
      }
      // RFC 3629, as nlohmann's lexer: no overlong forms, no surrogates,
      // nothing past U+10FFFF.
      const size_t n = Utf8SequenceLength(s_, i_);
      if (n == 0) return Fail();
      i_ += n;
    }
    return Fail();
  }

  std::optional<unsigned> Hex4(size_t at) const {
    if (at + 4 > s_.size()) return std::nullopt;
    unsigned v = 0;
    for (size_t k = at; k < at + 4; ++k) {
      const char h = s_[k];
      v <<= 4;
      if (h >= '0' && h <= '9') {
        v |= static_cast<unsigned>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        v |= static_cast<unsigned>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        v |= static_cast<unsigned>(h - 'A' + 10);
      } else {
        return std::nullopt;
      }
    }
    return v;
  }

  // A value (or a container starting) in the current level.
  bool Note(Kind kind, std::optional<double> number) {
    if (levels_.empty()) return true;  // the result itself
    const Level& level = levels_.back();
    if (!level.object) return true;
    if (level.flag != nullptr && kind != Kind::kBoolean) {
      error_ = std::string(".") + level.flag + " is not a boolean";
      return false;
    }
    if (level.key_is_exact) {
      exact_seen_ = true;
      exact_ = number;
    }
    if (level.key_is_part && levels_.size() == parts_.size()) nested_ = number;
    return true;
  }

  std::string_view s_;
  size_t i_ = 0;
  const std::string& metric_key_;
  std::vector<std::string> parts_;  // metric_key_ split at '/'
  std::vector<Level> levels_;
  bool needs_dom_ = false;
  std::string error_;
  bool exact_seen_ = false;
  std::optional<double> exact_;
  std::optional<double> nested_;
};

}  // namespace

LastResultScan ScanLastResultText(std::string_view text, const std::string& metric_key) {
  return Scanner(text, metric_key).Run();
}

}  // namespace ztune::head
