#include "head/spec_fields.h"

#include <cmath>

#include "common/did_you_mean.h"
#include "common/printable.h"

namespace ztune::head {

Status BadSpecField(const std::string& key, const std::string& what) {
  return Status::InvalidArgument("spec." + key + ": " + what);
}

Status CheckSpecKeys(const Json& j, const std::string& where,
                     const std::set<std::string>& allowed) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!allowed.count(it.key())) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      const std::vector<std::string> names(allowed.begin(), allowed.end());
      return Status::InvalidArgument("spec" + (where.empty() ? "" : "." + where) +
                                     ": unknown key '" + it.key() + "'" +
                                     DidYouMean(it.key(), names) + " (allowed: " + list + ")");
    }
  }
  return Status::Ok();
}

Result<int64_t> ReadSpecInt(const Json& j, const std::string& key, int64_t min) {
  if (!j.is_number_integer()) return BadSpecField(key, "must be an integer");
  if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return BadSpecField(key, "must be at most " + std::to_string(INT64_MAX) + ", got " +
                                 std::to_string(j.get<uint64_t>()));
  }
  int64_t v = j.get<int64_t>();
  if (v < min) {
    return BadSpecField(key, "must be >= " + std::to_string(min) + ", got " + std::to_string(v));
  }
  return v;
}

Result<double> ReadSpecNonNegative(const Json& j, const std::string& key) {
  if (!j.is_number()) return BadSpecField(key, "must be a number");
  double v = j.get<double>();
  if (!std::isfinite(v) || v < 0) return BadSpecField(key, "must be a finite number >= 0");
  return v;
}

Result<double> ReadSpecNumber(const Json& j, const std::string& key) {
  if (!j.is_number() || !std::isfinite(j.get<double>())) {
    return BadSpecField(key, "must be a finite number");
  }
  return j.get<double>();
}

Result<bool> ReadSpecBool(const Json& j, const std::string& key) {
  if (!j.is_boolean()) return BadSpecField(key, "must be true or false");
  return j.get<bool>();
}

Result<std::string> ReadSpecName(const Json& j, const std::string& key) {
  if (!j.is_string() || j.get_ref<const std::string&>().empty()) {
    return BadSpecField(key, "must be a non-empty string");
  }
  const std::string& s = j.get_ref<const std::string&>();
  if (s.size() > 200) return BadSpecField(key, "must be at most 200 characters");
  if (HasControl(s)) return BadSpecField(key, "must not contain control characters");
  return s;
}

}  // namespace ztune::head
