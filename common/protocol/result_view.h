// ResultView: reads a RawResult's msgpack bytes in place, without building a
// JSON DOM. The head judges each result through it (training_iteration, done,
// the stopping criteria), stamps the bytes it stores (StampedMsgpack) and
// writes JSON text only when a result is read (JsonText): a DOM built, dumped
// and freed per result was a quarter of the head's loop, and the JSON text
// alone a tenth (docs/benchmarks.md, "results as bytes", "results stored as
// msgpack").
//
// The constructor walks the bytes once and checks them (bounds, nesting, no
// ext types); an invalid view answers no lookup. Borrows the bytes: they must
// outlive it. Thread-compatible.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ztune::protocol {

class ResultView {
 public:
  enum class Kind : uint8_t {
    kNull,
    kBoolean,
    kUnsigned,  // a non-negative integer (nlohmann's number_unsigned)
    kInteger,   // a negative integer (number_integer)
    kFloat,
    kString,
    kBinary,
    kArray,
    kObject,
  };

  // One value, read in place. `str` borrows the view's bytes.
  struct Value {
    Kind kind = Kind::kNull;
    bool boolean = false;
    uint64_t u = 0;
    int64_t i = 0;
    double f = 0;
    std::string_view str;  // kString, kBinary
    uint32_t count = 0;    // kArray, kObject: elements or entries
    size_t body = 0;       // kArray, kObject: where the first element starts

    bool is_number() const {
      return kind == Kind::kUnsigned || kind == Kind::kInteger || kind == Kind::kFloat;
    }
    bool is_integer() const { return kind == Kind::kUnsigned || kind == Kind::kInteger; }
    // Precondition: is_number(). As nlohmann's get<double>().
    double AsDouble() const;
    // Precondition: is_integer(). As nlohmann's get<int64_t>(): an unsigned
    // value above INT64_MAX wraps.
    int64_t AsInt64() const;
    // nlohmann's type_name(): "number", "string", "object", ...
    const char* TypeName() const;
  };

  explicit ResultView(std::string_view bytes);

  // The bytes are one complete msgpack value of the kinds above, nested at
  // most 64 deep.
  bool valid() const { return valid_; }
  bool is_object() const { return valid_ && top_.kind == Kind::kObject; }

  // A top-level key; with repeated keys the last one, as a DOM built from the
  // bytes would keep. nullopt when absent or the view is not an object.
  std::optional<Value> Find(std::string_view key) const;
  // FindFlatKey's rule (common/flat_key.h): the whole key at the top
  // level, else "a/b" as key b of object a.
  std::optional<Value> FindFlat(std::string_view flat_key) const;

  // The bytes the head stores for the result (docs/storage.md, schema 3):
  // these bytes with "trial_id" and "done" set, replacing the result's own:
  // JsonText() of them is what nlohmann's dump() gives for the DOM of these
  // bytes after the same two assignments (what schema 2 stored). The members
  // keep their bytes and order; the two fields go where they sort (before
  // the first greater key). When the result already holds both values (a
  // worker stamps its own trial id, and `done` unless the head ends the
  // trial), a copy of the bytes. Precondition: is_object().
  std::string StampedMsgpack(std::string_view trial_id, bool done) const;

  // The JSON text of the value, byte for byte what nlohmann's dump() gives
  // for the DOM of the bytes: keys in std::map order, the last of repeated
  // keys, nlohmann's number format and string escapes. Precondition: valid().
  std::string JsonText() const;

 private:
  // Reads the value at `pos`; false if it runs past the end or is not allowed.
  bool ReadValue(size_t pos, Value* v, size_t* after_head) const;
  // The position after the value at `pos`, or npos; checks `depth`.
  size_t Skip(size_t pos, int depth) const;
  std::optional<Value> FindIn(const Value& object, std::string_view key) const;
  void AppendJson(const Value& v, std::string& out) const;
  void AppendObject(const Value& object, std::string& out) const;

  // A top-level member: its key and where its value starts.
  struct Member {
    std::string_view key;
    size_t value = 0;
  };
  // The top-level members in byte order, read once by the constructor so a
  // lookup compares keys instead of re-reading the bytes; results have a
  // dozen. A larger object is not indexed (lookups walk it).
  static constexpr size_t kIndexed = 32;
  bool IndexMembers();
  // Writes the top-level object from the index when its keys are sorted and
  // distinct (a worker's always are): no sort, no allocation.
  bool AppendIndexed(std::string& out) const;

  std::string_view bytes_;
  bool valid_ = false;
  Value top_;
  std::array<Member, kIndexed> members_;
  size_t num_members_ = 0;
  bool indexed_ = false;
};

}  // namespace ztune::protocol
