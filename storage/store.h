// The durable store seam. The head writes every state change of a loop turn
// into one WriteBatch and commits it with one fsync; after a crash the store
// holds the whole batch or none of it. Implementations: RocksDbStore (RocksDB,
// production) and InMemoryStore (unit tests). Not thread-safe: one thread at
// a time (the head's loop thread; its store thread for large reads while the
// loop waits; its commit thread, head/pipelined_store.h, whose commits every
// other use waits for).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ztune::storage {

// The smallest string greater than every string starting with `prefix`, or ""
// if there is none (the prefix is empty or all 0xff bytes): the exclusive upper
// bound of a prefix's keys.
std::string PrefixSuccessor(std::string_view prefix);

// One column family per record kind (docs/storage.md).
enum class Family { kMeta = 0, kExperiments, kTrials, kResults, kCheckpoints };
inline constexpr int kNumFamilies = 5;
const char* FamilyName(Family f);

// An ordered list of puts and deletes; applied atomically by Store::Commit.
class WriteBatch {
 public:
  struct Op {
    Family family;
    bool is_delete;
    std::string key;
    std::string value;
  };

  void Put(Family f, std::string key, std::string value) {
    bytes_ += key.size() + value.size();
    ops_.push_back({f, false, std::move(key), std::move(value)});
  }
  void Delete(Family f, std::string key) {
    bytes_ += key.size();
    ops_.push_back({f, true, std::move(key), {}});
  }
  // The batch's newest write of `key`, as a read after its commit would see
  // it: nullptr when the batch does not touch the key; else the op (a Put or
  // a Delete), valid while the batch is unchanged. Scans the batch: for rare
  // reads of what was written in the same turn (read-your-writes).
  const Op* NewestWrite(Family f, std::string_view key) const {
    for (auto it = ops_.rbegin(); it != ops_.rend(); ++it) {
      if (it->family == f && it->key == key) return &*it;
    }
    return nullptr;
  }
  // Moves `other`'s ops after this batch's (one commit of several turns'
  // batches, in their order).
  void Append(WriteBatch&& other) {
    if (ops_.empty()) {
      ops_ = std::move(other.ops_);
    } else {
      ops_.reserve(ops_.size() + other.ops_.size());
      for (Op& op : other.ops_) ops_.push_back(std::move(op));
    }
    bytes_ += other.bytes_;
    other.Clear();
  }
  bool empty() const { return ops_.empty(); }
  size_t size() const { return ops_.size(); }
  size_t bytes() const { return bytes_; }
  const std::vector<Op>& ops() const { return ops_; }
  void Clear() {
    ops_.clear();
    bytes_ = 0;
  }

 private:
  std::vector<Op> ops_;
  size_t bytes_ = 0;
};

class Store {
 public:
  virtual ~Store() = default;

  // Applies the batch atomically; returns only after it is durable (fsync).
  // IOError if the write failed (nothing of the batch is applied).
  virtual Status Commit(const WriteBatch& batch) = 0;

  // The value, std::nullopt if absent, or IOError/Corruption.
  virtual Result<std::optional<std::string>> Get(Family f, std::string_view key) = 0;

  // Calls `fn(key, value)` for each key starting with `prefix`, in key order,
  // until `fn` returns false.
  virtual Status Scan(Family f, std::string_view prefix,
                      const std::function<bool(std::string_view, std::string_view)>& fn) = 0;

  // The last key starting with `prefix` and its value, std::nullopt if there
  // is none. The default scans the prefix; stores that can seek backwards
  // override it (a trial's newest result at load, whatever its length).
  struct Entry {
    std::string key;
    std::string value;
  };
  virtual Result<std::optional<Entry>> Last(Family f, std::string_view prefix);
};

}  // namespace ztune::storage
