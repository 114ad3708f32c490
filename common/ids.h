// Ids as types: a WorkerId cannot be passed where a trial id is wanted, nor a
// std::string read off the wire where either is. A StrongId is built
// explicitly from a std::string (at the seam where text becomes an id: a
// decoded frame, a stored record) or implicitly from a string literal (tests
// and fixed names, unambiguous where they are written), and reads as its text
// wherever text is wanted (logs, keys, messages).
//
// Value type; thread-compatible.
#pragma once

#include <compare>
#include <cstddef>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace ztune {

template <class Tag>
class StrongId {
 public:
  StrongId() = default;
  explicit StrongId(std::string text) : text_(std::move(text)) {}
  // NOLINTNEXTLINE(google-explicit-constructor): literals name one kind of id
  StrongId(const char* literal) : text_(literal) {}

  const std::string& str() const { return text_; }
  // NOLINTNEXTLINE(google-explicit-constructor): reads as text in logs and keys
  operator const std::string&() const { return text_; }
  // NOLINTNEXTLINE(google-explicit-constructor): and as a view (store keys)
  operator std::string_view() const { return text_; }
  bool empty() const { return text_.empty(); }
  void clear() { text_.clear(); }

  friend bool operator==(const StrongId&, const StrongId&) = default;
  friend auto operator<=>(const StrongId&, const StrongId&) = default;

  friend std::string operator+(const std::string& a, const StrongId& b) { return a + b.text_; }
  friend std::string operator+(const char* a, const StrongId& b) { return a + b.text_; }
  friend std::string operator+(const StrongId& a, const std::string& b) { return a.text_ + b; }
  friend std::string operator+(const StrongId& a, const char* b) { return a.text_ + b; }
  friend std::ostream& operator<<(std::ostream& os, const StrongId& id) { return os << id.text_; }

 private:
  std::string text_;
};

// JSON (nlohmann, found by ADL): an id is its text.
template <class BasicJson, class Tag>
void to_json(BasicJson& j, const StrongId<Tag>& id) {
  j = id.str();
}

// A worker: its registered id, which is also its ZeroMQ routing id.
using WorkerId = StrongId<struct WorkerIdTag>;
// A trial: "<experiment id>_<index>" (head/trial.h TrialIdFor); also the key
// of its actor on a worker (an actor reused by a RESET is re-keyed).
using TrialId = StrongId<struct TrialIdTag>;

}  // namespace ztune

template <class Tag>
struct std::hash<ztune::StrongId<Tag>> {
  size_t operator()(const ztune::StrongId<Tag>& id) const noexcept {
    return std::hash<std::string>()(id.str());
  }
};

template <class Tag>
struct fmt::formatter<ztune::StrongId<Tag>> : fmt::formatter<std::string_view> {
  template <class FormatContext>
  auto format(const ztune::StrongId<Tag>& id, FormatContext& ctx) const {
    return fmt::formatter<std::string_view>::format(id.str(), ctx);
  }
};
