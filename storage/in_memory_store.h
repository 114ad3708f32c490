// InMemoryStore: a Store backed by one std::map per family, for unit tests of
// head logic (no disk, no fsync). Commit applies a batch all at once, so the
// atomicity contract of Store holds trivially; "durable" means "until the
// object is destroyed".
//
// Not thread-safe; owned by the thread that drives the code under test (the
// head loop thread in production-shaped tests).
#pragma once

#include <array>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "storage/store.h"

namespace ztune::storage {

class InMemoryStore final : public Store {
 public:
  InMemoryStore() = default;
  InMemoryStore(const InMemoryStore&) = delete;
  InMemoryStore& operator=(const InMemoryStore&) = delete;

  // Applies every op of `batch` in order. Never fails.
  Status Commit(const WriteBatch& batch) override;

  // The value or std::nullopt. Never fails.
  Result<std::optional<std::string>> Get(Family f, std::string_view key) override;

  // Calls `fn` in key order (bytewise, like RocksDB's default comparator) for
  // every key with `prefix`, until it returns false. The views are valid only
  // during the call; `fn` must not Commit to this store. Never fails.
  Status Scan(Family f, std::string_view prefix,
              const std::function<bool(std::string_view, std::string_view)>& fn) override;
  Result<std::optional<Entry>> Last(Family f, std::string_view prefix) override;

  // Number of keys in family `f`.
  size_t Count(Family f) const;

 private:
  // std::string compares bytewise as unsigned char (char_traits<char>::lt),
  // which is RocksDB's BytewiseComparator order.
  using Map = std::map<std::string, std::string, std::less<>>;

  Map& map(Family f) { return maps_[static_cast<size_t>(f)]; }
  const Map& map(Family f) const { return maps_[static_cast<size_t>(f)]; }

  std::array<Map, kNumFamilies> maps_;
};

}  // namespace ztune::storage
