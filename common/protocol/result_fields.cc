#include "common/protocol/result_fields.h"

#include <string>

#include "common/check.h"
#include "common/protocol/msgpack_io.h"

namespace ztune::protocol {
namespace {

using msgpack_io::Packer;

void PackString(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

// As PackJson packs the Json the same value would make.
void PackValue(Packer& pk, const AutoField& f) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, double>) {
          msgpack_io::PackDouble(pk, v);
        } else if constexpr (std::is_same_v<T, std::string_view>) {
          PackString(pk, v);
        } else {
          pk.pack(v);
        }
      },
      f.value);
}

}  // namespace

RawResult PackWithAutoFields(const Json& result, std::span<const AutoField> fields) {
  CHECK(result.is_object());
  for (size_t k = 1; k < fields.size(); ++k) CHECK(fields[k - 1].key < fields[k].key);
  const Json::object_t& members = result.get_ref<const Json::object_t&>();
  // The map's keys and the fields' are both in byte order: one merge counts
  // the keys the result gains, a second writes them.
  size_t count = members.size();
  auto it = members.begin();
  for (const AutoField& f : fields) {
    while (it != members.end() && std::string_view(it->first) < f.key) ++it;
    if (it == members.end() || std::string_view(it->first) != f.key) ++count;
  }
  msgpack_io::ScratchBuffer scratch;
  Packer pk(scratch.get());
  pk.pack_map(static_cast<uint32_t>(count));
  it = members.begin();
  size_t k = 0;
  while (it != members.end() || k < fields.size()) {
    const bool member_first =
        k == fields.size() || (it != members.end() && std::string_view(it->first) < fields[k].key);
    if (member_first) {
      PackString(pk, it->first);
      msgpack_io::PackJson(pk, it->second);
      ++it;
      continue;
    }
    const AutoField& f = fields[k++];
    PackString(pk, f.key);
    if (it != members.end() && std::string_view(it->first) == f.key) {
      if (f.rule == AutoField::Rule::kSetDefault) {
        msgpack_io::PackJson(pk, it->second);
      } else {
        PackValue(pk, f);
      }
      ++it;
    } else {
      PackValue(pk, f);
    }
  }
  return RawResult{std::string(scratch.get().data(), scratch.get().size())};
}

}  // namespace ztune::protocol
