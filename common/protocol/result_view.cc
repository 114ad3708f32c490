#include "common/protocol/result_view.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/check.h"

namespace ztune::protocol {
namespace {

constexpr int kMaxDepth = 64;  // the codec's kMaxJsonDepth
constexpr size_t kNone = std::string_view::npos;

uint64_t BigEndian(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int k = 0; k < n; ++k) v = (v << 8) | p[k];
  return v;
}

// nlohmann's dump_escaped with ensure_ascii off, for valid UTF-8: the two
// JSON escapes, the short control escapes, and \u00XX for other controls.
void AppendEscaped(std::string_view s, std::string& out) {
  out += '"';
  size_t run = 0;  // start of the bytes not yet copied
  for (size_t k = 0; k < s.size(); ++k) {
    const auto c = static_cast<unsigned char>(s[k]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + run, k - run);
    run = k + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\f': out += "\\f"; break;
      case '\r': out += "\\r"; break;
      default: {
        static constexpr char kHex[] = "0123456789abcdef";
        const char esc[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xf]};
        out.append(esc, sizeof(esc));
      }
    }
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
}

template <class T>
void AppendInteger(T v, std::string& out) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, r.ptr);
}

// nlohmann's dump_float: null for NaN and infinities, else its shortest
// round-trip digits.
void AppendFloat(double x, std::string& out) {
  if (!std::isfinite(x)) {
    out += "null";
    return;
  }
  char buf[64];
  char* end = nlohmann::detail::to_chars(buf, buf + sizeof(buf), x);
  out.append(buf, end);
}

// The two fields the head stamps, in key order.
constexpr std::string_view kStamps[2] = {"done", "trial_id"};

// msgpack's smallest header for a map of `n` entries and for a string, as
// msgpack-c packs them.
void AppendMsgpackMapHeader(size_t n, std::string& out) {
  if (n <= 15) {
    out += static_cast<char>(0x80 | n);
  } else if (n <= 0xffff) {
    const char h[3] = {'\xde', static_cast<char>(n >> 8), static_cast<char>(n)};
    out.append(h, sizeof(h));
  } else {
    const char h[5] = {'\xdf', static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                       static_cast<char>(n >> 8), static_cast<char>(n)};
    out.append(h, sizeof(h));
  }
}

void AppendMsgpackString(std::string_view s, std::string& out) {
  const size_t n = s.size();
  if (n <= 31) {
    out += static_cast<char>(0xa0 | n);
  } else if (n <= 0xff) {
    const char h[2] = {'\xd9', static_cast<char>(n)};
    out.append(h, sizeof(h));
  } else if (n <= 0xffff) {
    const char h[3] = {'\xda', static_cast<char>(n >> 8), static_cast<char>(n)};
    out.append(h, sizeof(h));
  } else {
    const char h[5] = {'\xdb', static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                       static_cast<char>(n >> 8), static_cast<char>(n)};
    out.append(h, sizeof(h));
  }
  out += s;
}

}  // namespace

double ResultView::Value::AsDouble() const {
  switch (kind) {
    case Kind::kUnsigned: return static_cast<double>(u);
    case Kind::kInteger: return static_cast<double>(i);
    default: return f;
  }
}

int64_t ResultView::Value::AsInt64() const {
  return kind == Kind::kUnsigned ? static_cast<int64_t>(u) : i;
}

const char* ResultView::Value::TypeName() const {
  switch (kind) {
    case Kind::kNull: return "null";
    case Kind::kBoolean: return "boolean";
    case Kind::kUnsigned:
    case Kind::kInteger:
    case Kind::kFloat: return "number";
    case Kind::kString: return "string";
    case Kind::kBinary: return "binary";
    case Kind::kArray: return "array";
    case Kind::kObject: return "object";
  }
  return "null";
}

ResultView::ResultView(std::string_view bytes) : bytes_(bytes) {
  size_t at = 0;
  if (!ReadValue(0, &top_, &at)) return;
  if (top_.kind != Kind::kObject) {
    valid_ = Skip(0, 0) == bytes_.size();
    return;
  }
  // Skip's walk of an object, indexing its members on the way.
  indexed_ = top_.count <= kIndexed;
  for (uint32_t k = 0; k < top_.count; ++k) {
    Value name;
    size_t value_at = 0;
    if (!ReadValue(at, &name, &value_at) || name.kind != Kind::kString) return;
    if (indexed_) members_[k] = {name.str, value_at};
    at = Skip(value_at, 1);
    if (at == kNone) return;
  }
  num_members_ = indexed_ ? top_.count : 0;
  valid_ = at == bytes_.size();
}

bool ResultView::ReadValue(size_t pos, Value* v, size_t* after_head) const {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes_.data());
  const size_t n = bytes_.size();
  if (pos >= n) return false;
  const unsigned char tag = p[pos];
  size_t at = pos + 1;
  auto fixed = [&](int width, uint64_t* out) {
    if (n - at < static_cast<size_t>(width)) return false;
    *out = BigEndian(p + at, width);
    at += width;
    return true;
  };
  auto sized = [&](Kind kind, uint64_t len) {
    if (n - at < len) return false;
    v->kind = kind;
    v->str = bytes_.substr(at, len);
    at += len;
    return true;
  };
  uint64_t x = 0;
  *v = Value{};
  bool ok = true;
  if (tag <= 0x7f) {
    v->kind = Kind::kUnsigned;
    v->u = tag;
  } else if (tag >= 0xe0) {
    v->kind = Kind::kInteger;
    v->i = static_cast<int8_t>(tag);
  } else if (tag <= 0x8f) {
    v->kind = Kind::kObject;
    v->count = tag & 0x0f;
  } else if (tag <= 0x9f) {
    v->kind = Kind::kArray;
    v->count = tag & 0x0f;
  } else if (tag <= 0xbf) {
    ok = sized(Kind::kString, tag & 0x1f);
  } else {
    switch (tag) {
      case 0xc0: v->kind = Kind::kNull; break;
      case 0xc2:
      case 0xc3:
        v->kind = Kind::kBoolean;
        v->boolean = tag == 0xc3;
        break;
      case 0xc4: ok = fixed(1, &x) && sized(Kind::kBinary, x); break;
      case 0xc5: ok = fixed(2, &x) && sized(Kind::kBinary, x); break;
      case 0xc6: ok = fixed(4, &x) && sized(Kind::kBinary, x); break;
      case 0xca:
        ok = fixed(4, &x);
        v->kind = Kind::kFloat;
        v->f = std::bit_cast<float>(static_cast<uint32_t>(x));
        break;
      case 0xcb:
        ok = fixed(8, &x);
        v->kind = Kind::kFloat;
        v->f = std::bit_cast<double>(x);
        break;
      case 0xcc:
      case 0xcd:
      case 0xce:
      case 0xcf:
        ok = fixed(1 << (tag - 0xcc), &x);
        v->kind = Kind::kUnsigned;
        v->u = x;
        break;
      case 0xd0:
      case 0xd1:
      case 0xd2:
      case 0xd3: {
        const int width = 1 << (tag - 0xd0);
        ok = fixed(width, &x);
        // Sign-extend from `width` bytes.
        const int shift = 64 - 8 * width;
        const int64_t s = static_cast<int64_t>(x << shift) >> shift;
        if (s >= 0) {
          v->kind = Kind::kUnsigned;  // as msgpack-c: a non-negative value is positive
          v->u = static_cast<uint64_t>(s);
        } else {
          v->kind = Kind::kInteger;
          v->i = s;
        }
        break;
      }
      case 0xd9: ok = fixed(1, &x) && sized(Kind::kString, x); break;
      case 0xda: ok = fixed(2, &x) && sized(Kind::kString, x); break;
      case 0xdb: ok = fixed(4, &x) && sized(Kind::kString, x); break;
      case 0xdc:
      case 0xdd:
        ok = fixed(tag == 0xdc ? 2 : 4, &x);
        v->kind = Kind::kArray;
        v->count = static_cast<uint32_t>(x);
        break;
      case 0xde:
      case 0xdf:
        ok = fixed(tag == 0xde ? 2 : 4, &x);
        v->kind = Kind::kObject;
        v->count = static_cast<uint32_t>(x);
        break;
      default: return false;  // 0xc1 (never used) and the ext types
    }
  }
  if (!ok) return false;
  v->body = at;
  *after_head = at;
  return true;
}

size_t ResultView::Skip(size_t pos, int depth) const {
  if (depth > kMaxDepth) return kNone;
  Value v;
  size_t at = 0;
  if (!ReadValue(pos, &v, &at)) return kNone;
  if (v.kind == Kind::kArray || v.kind == Kind::kObject) {
    const uint64_t items = v.kind == Kind::kObject ? 2ull * v.count : v.count;
    for (uint64_t k = 0; k < items; ++k) {
      // A key is a string, and only a string.
      if (v.kind == Kind::kObject && k % 2 == 0) {
        Value key;
        size_t after = 0;
        if (!ReadValue(at, &key, &after) || key.kind != Kind::kString) return kNone;
        at = after;
        continue;
      }
      at = Skip(at, depth + 1);
      if (at == kNone) return kNone;
    }
  }
  return at;
}

std::optional<ResultView::Value> ResultView::FindIn(const Value& object,
                                                    std::string_view key) const {
  std::optional<Value> found;
  size_t at = object.body;
  for (uint32_t k = 0; k < object.count; ++k) {
    Value name;
    size_t value_at = 0;
    ReadValue(at, &name, &value_at);  // valid_: every read succeeds
    if (name.str == key) {
      Value v;
      size_t unused = 0;
      ReadValue(value_at, &v, &unused);
      found = v;
    }
    at = Skip(value_at, 0);
  }
  return found;
}

std::optional<ResultView::Value> ResultView::Find(std::string_view key) const {
  if (!is_object()) return std::nullopt;
  if (!indexed_) return FindIn(top_, key);
  for (size_t k = num_members_; k-- > 0;) {  // the last of repeated keys
    if (members_[k].key != key) continue;
    Value v;
    size_t unused = 0;
    ReadValue(members_[k].value, &v, &unused);
    return v;
  }
  return std::nullopt;
}

std::optional<ResultView::Value> ResultView::FindFlat(std::string_view flat_key) const {
  if (!is_object()) return std::nullopt;
  if (auto direct = Find(flat_key)) return direct;
  Value cur = top_;
  size_t start = 0;
  while (true) {
    const size_t slash = flat_key.find('/', start);
    const std::string_view part = flat_key.substr(start, slash == kNone ? kNone : slash - start);
    if (cur.kind != Kind::kObject) return std::nullopt;
    auto next = start == 0 ? Find(part) : FindIn(cur, part);
    if (!next) return std::nullopt;
    cur = *next;
    if (slash == kNone) return cur;
    start = slash + 1;
  }
}

namespace {

// One member of an object being written: its key and where its value is.
struct Sortable {
  std::string_view key;
  size_t value;
};

}  // namespace

void ResultView::AppendJson(const Value& v, std::string& out) const {
  switch (v.kind) {
    case Kind::kNull: out += "null"; return;
    case Kind::kBoolean: out += v.boolean ? "true" : "false"; return;
    case Kind::kUnsigned: AppendInteger(v.u, out); return;
    case Kind::kInteger: AppendInteger(v.i, out); return;
    case Kind::kFloat: AppendFloat(v.f, out); return;
    case Kind::kString: AppendEscaped(v.str, out); return;
    case Kind::kBinary: {
      out += "{\"bytes\":[";
      for (size_t k = 0; k < v.str.size(); ++k) {
        if (k > 0) out += ',';
        AppendInteger(static_cast<unsigned>(static_cast<unsigned char>(v.str[k])), out);
      }
      out += "],\"subtype\":null}";
      return;
    }
    case Kind::kArray: {
      out += '[';
      size_t at = v.body;
      for (uint32_t k = 0; k < v.count; ++k) {
        if (k > 0) out += ',';
        Value e;
        size_t unused = 0;
        ReadValue(at, &e, &unused);
        AppendJson(e, out);
        at = Skip(at, 0);
      }
      out += ']';
      return;
    }
    case Kind::kObject: AppendObject(v, out); return;
  }
}

void ResultView::AppendObject(const Value& object, std::string& out) const {
  std::vector<Sortable> members;
  members.reserve(object.count);
  size_t at = object.body;
  for (uint32_t k = 0; k < object.count; ++k) {
    Value name;
    size_t value_at = 0;
    ReadValue(at, &name, &value_at);
    members.push_back({name.str, value_at});
    at = Skip(value_at, 0);
  }
  // A worker's map comes sorted (it is a std::map's dump).
  auto by_key = [](const Sortable& a, const Sortable& b) { return a.key < b.key; };
  if (!std::is_sorted(members.begin(), members.end(), by_key)) {
    std::stable_sort(members.begin(), members.end(), by_key);
  }
  out += '{';
  bool first = true;
  for (size_t k = 0; k < members.size(); ++k) {
    // Of repeated keys the last assignment wins; stable_sort kept their order.
    if (k + 1 < members.size() && members[k + 1].key == members[k].key) continue;
    const Sortable& m = members[k];
    if (!first) out += ',';
    first = false;
    AppendEscaped(m.key, out);
    out += ':';
    Value v;
    size_t unused = 0;
    ReadValue(m.value, &v, &unused);
    AppendJson(v, out);
  }
  out += '}';
}

bool ResultView::AppendIndexed(std::string& out) const {
  if (!indexed_) return false;
  for (size_t k = 1; k < num_members_; ++k) {
    if (!(members_[k - 1].key < members_[k].key)) return false;
  }
  out += '{';
  for (size_t k = 0; k < num_members_; ++k) {
    const Member& m = members_[k];
    if (k > 0) out += ',';
    AppendEscaped(m.key, out);
    out += ':';
    Value v;
    size_t unused = 0;
    ReadValue(m.value, &v, &unused);
    AppendJson(v, out);
  }
  out += '}';
  return true;
}

std::string ResultView::JsonText() const {
  CHECK(valid());
  std::string out;
  out.reserve(bytes_.size() * 2 + 16);
  if (!is_object()) {
    AppendJson(top_, out);
  } else if (!AppendIndexed(out)) {
    AppendObject(top_, out);
  }
  return out;
}

std::string ResultView::StampedMsgpack(std::string_view trial_id, bool done) const {
  CHECK(is_object());
  const std::optional<Value> own_id = Find(kStamps[1]);
  const std::optional<Value> own_done = Find(kStamps[0]);
  if (own_id && own_id->kind == Kind::kString && own_id->str == trial_id && own_done &&
      own_done->kind == Kind::kBoolean && own_done->boolean == done) {
    return std::string(bytes_);  // of repeated keys both readers take the last, as Find did
  }
  // The members other than the two, as byte ranges [begin, end) from key to
  // value's end.
  struct Kept {
    std::string_view key;
    size_t begin;
    size_t end;
  };
  std::vector<Kept> kept;
  kept.reserve(top_.count);
  size_t at = top_.body;
  for (uint32_t k = 0; k < top_.count; ++k) {
    const size_t begin = at;
    Value name;
    size_t value_at = 0;
    ReadValue(at, &name, &value_at);  // valid_: every read succeeds
    at = Skip(value_at, 0);
    if (name.str != kStamps[0] && name.str != kStamps[1]) kept.push_back({name.str, begin, at});
  }
  std::string out;
  out.reserve(bytes_.size() + trial_id.size() + 32);
  AppendMsgpackMapHeader(kept.size() + 2, out);
  size_t s = 0;
  auto stamp = [&] {
    AppendMsgpackString(kStamps[s], out);
    if (s == 0) {
      out += static_cast<char>(done ? 0xc3 : 0xc2);
    } else {
      AppendMsgpackString(trial_id, out);
    }
    ++s;
  };
  for (const Kept& m : kept) {
    while (s < 2 && kStamps[s] < m.key) stamp();
    out.append(bytes_, m.begin, m.end - m.begin);
  }
  while (s < 2) stamp();
  return out;
}

}  // namespace ztune::protocol
