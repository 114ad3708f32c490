#include "storage/in_memory_store.h"

#include <iterator>

namespace ztune::storage {

Status InMemoryStore::Commit(const WriteBatch& batch) {
  for (const WriteBatch::Op& op : batch.ops()) {
    if (op.is_delete) {
      map(op.family).erase(op.key);
    } else {
      map(op.family).insert_or_assign(op.key, op.value);
    }
  }
  return Status::Ok();
}

Result<std::optional<std::string>> InMemoryStore::Get(Family f, std::string_view key) {
  const Map& m = map(f);
  auto it = m.find(key);
  if (it == m.end()) return std::optional<std::string>();
  return std::optional<std::string>(it->second);
}

Status InMemoryStore::Scan(Family f, std::string_view prefix,
                           const std::function<bool(std::string_view, std::string_view)>& fn) {
  const Map& m = map(f);
  for (auto it = m.lower_bound(prefix); it != m.end() && it->first.starts_with(prefix); ++it) {
    if (!fn(it->first, it->second)) break;
  }
  return Status::Ok();
}

Result<std::optional<Store::Entry>> InMemoryStore::Last(Family f, std::string_view prefix) {
  const Map& m = map(f);
  const std::string upper = PrefixSuccessor(prefix);
  auto end = upper.empty() ? m.end() : m.lower_bound(upper);
  if (end == m.begin()) return std::optional<Entry>();
  auto last = std::prev(end);
  if (!last->first.starts_with(prefix)) return std::optional<Entry>();
  return std::optional<Entry>(Entry{last->first, last->second});
}

size_t InMemoryStore::Count(Family f) const { return map(f).size(); }

}  // namespace ztune::storage
