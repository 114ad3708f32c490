#include "client/json_util.h"

namespace ztune::client {

Result<Json> ParseJson(std::string_view text) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    return Status::InvalidArgument(e.what());
  }
}

std::string DumpJson(const Json& j, int indent) {
  return j.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

const Json* FindField(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end()) return nullptr;
  return &*it;
}

const Json& FieldOrNull(const Json& obj, std::string_view key) {
  static const Json kNull;
  const Json* f = FindField(obj, key);
  return f == nullptr ? kNull : *f;
}

std::string StringField(const Json& obj, std::string_view key, std::string_view fallback) {
  const Json* f = FindField(obj, key);
  if (f == nullptr || !f->is_string()) return std::string(fallback);
  return f->get_ref<const std::string&>();
}

std::optional<double> AsNumber(const Json& j) {
  if (j.is_number_integer() && j.is_number_unsigned()) {
    return static_cast<double>(j.get<uint64_t>());
  }
  if (j.is_number_integer()) return static_cast<double>(j.get<int64_t>());
  if (j.is_number_float()) return j.get<double>();
  return std::nullopt;
}

std::optional<double> NumberField(const Json& obj, std::string_view key) {
  const Json* f = FindField(obj, key);
  if (f == nullptr) return std::nullopt;
  return AsNumber(*f);
}

int64_t IntField(const Json& obj, std::string_view key, int64_t fallback) {
  const Json* f = FindField(obj, key);
  if (f == nullptr) return fallback;
  if (f->is_number_unsigned()) return static_cast<int64_t>(f->get<uint64_t>());
  if (f->is_number_integer()) return f->get<int64_t>();
  if (f->is_number_float()) return static_cast<int64_t>(f->get<double>());
  return fallback;
}

bool BoolField(const Json& obj, std::string_view key, bool fallback) {
  const Json* f = FindField(obj, key);
  if (f == nullptr || !f->is_boolean()) return fallback;
  return f->get<bool>();
}

const Json& ObjectField(const Json& obj, std::string_view key) {
  static const Json kEmptyObject = Json::object();
  const Json* f = FindField(obj, key);
  return (f != nullptr && f->is_object()) ? *f : kEmptyObject;
}

const Json& ArrayField(const Json& obj, std::string_view key) {
  static const Json kEmptyArray = Json::array();
  const Json* f = FindField(obj, key);
  return (f != nullptr && f->is_array()) ? *f : kEmptyArray;
}

}  // namespace ztune::client
