#include "common/flat_key.h"

namespace ztune {

const Json* FindFlatKey(const Json& result, const std::string& flat_key) {
  if (!result.is_object()) return nullptr;
  auto direct = result.find(flat_key);
  if (direct != result.end()) return &*direct;
  const Json* cur = &result;
  size_t start = 0;
  while (true) {
    size_t slash = flat_key.find('/', start);
    std::string part =
        flat_key.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(part);
    if (it == cur->end()) return nullptr;
    cur = &*it;
    if (slash == std::string::npos) return cur;
    start = slash + 1;
  }
}

}  // namespace ztune
