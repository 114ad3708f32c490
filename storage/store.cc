#include "storage/store.h"

namespace ztune::storage {

const char* FamilyName(Family f) {
  switch (f) {
    case Family::kMeta:
      return "meta";
    case Family::kExperiments:
      return "experiments";
    case Family::kTrials:
      return "trials";
    case Family::kResults:
      return "results";
    case Family::kCheckpoints:
      return "checkpoints";
  }
  return "unknown";
}

std::string PrefixSuccessor(std::string_view prefix) {
  std::string s(prefix);
  while (!s.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(s.back());
    if (last != 0xff) {
      ++last;
      return s;
    }
    s.pop_back();
  }
  return s;
}

Result<std::optional<Store::Entry>> Store::Last(Family f, std::string_view prefix) {
  std::optional<Entry> last;
  RETURN_IF_ERROR(Scan(f, prefix, [&](std::string_view key, std::string_view value) {
    if (!last) last.emplace();
    last->key.assign(key);
    last->value.assign(value);
    return true;
  }));
  return last;
}

}  // namespace ztune::storage
