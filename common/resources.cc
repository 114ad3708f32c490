#include "common/resources.h"

#include <cmath>
#include <limits>
#include <sstream>

namespace ztune {
namespace {

std::string FormatDouble(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string FormatAmount(int64_t fixed) {
  if (fixed % ResourceSet::kUnit == 0) return std::to_string(fixed / ResourceSet::kUnit);
  std::ostringstream os;
  os << static_cast<double>(fixed) / ResourceSet::kUnit;
  return os.str();
}

}  // namespace

Result<ResourceSet> ResourceSet::FromJson(const Json& j) {
  if (!j.is_object()) return Status::InvalidArgument("a resource bundle must be an object");
  ResourceSet rs;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key().empty()) return Status::InvalidArgument("resource names must not be empty");
    if (!it.value().is_number()) {
      return Status::InvalidArgument("resource '" + it.key() + "' must be a number");
    }
    double v = it.value().get<double>();
    if (!std::isfinite(v) || v < 0) {
      return Status::InvalidArgument("resource '" + it.key() + "' must be >= 0");
    }
    if (v > kMaxAmount) {
      return Status::InvalidArgument("resource '" + it.key() + "' = " + FormatDouble(v) +
                                     " is infeasible: no worker can offer more than " +
                                     FormatDouble(kMaxAmount));
    }
    rs.SetFixed(it.key(), static_cast<int64_t>(std::llround(v * kUnit)));
  }
  return rs;
}

double ResourceSet::MaxOffered(const std::string& name) {
  if (name == "CPU") return kMaxCpus;
  if (name == "GPU") return kMaxGpus;
  return kMaxAmount;
}

Result<ResourceSet> ResourceSet::FromDoublesChecked(const std::map<std::string, double>& m) {
  ResourceSet rs;
  for (const auto& [name, v] : m) {
    if (name.empty() || name.size() > 128) {
      return Status::InvalidArgument("resource names must have 1 to 128 bytes");
    }
    for (unsigned char c : name) {
      if (c < 0x20 || c > 0x7e) {
        return Status::InvalidArgument("resource names must be printable ASCII");
      }
    }
    const double max = MaxOffered(name);
    if (!std::isfinite(v) || v < 0 || v > max) {
      return Status::InvalidArgument("resource '" + name + "' = " + FormatDouble(v) +
                                     ": amounts must be finite, >= 0 and at most " +
                                     FormatDouble(max));
    }
    rs.SetFixed(name, static_cast<int64_t>(std::llround(v * kUnit)));
  }
  return rs;
}

ResourceSet ResourceSet::FromDoubles(const std::map<std::string, double>& m) {
  ResourceSet rs;
  for (const auto& [k, v] : m) rs.SetFixed(k, static_cast<int64_t>(std::llround(v * kUnit)));
  return rs;
}

Json ResourceSet::ToJson() const {
  Json j = Json::object();
  for (const auto& [k, v] : amounts_) {
    if (v % kUnit == 0) {
      j[k] = v / kUnit;
    } else {
      j[k] = static_cast<double>(v) / kUnit;
    }
  }
  return j;
}

std::map<std::string, double> ResourceSet::ToDoubles() const {
  std::map<std::string, double> m;
  for (const auto& [k, v] : amounts_) m[k] = static_cast<double>(v) / kUnit;
  return m;
}

double ResourceSet::Get(const std::string& name) const {
  return static_cast<double>(GetFixed(name)) / kUnit;
}

int64_t ResourceSet::GetFixed(const std::string& name) const {
  auto it = amounts_.find(name);
  return it == amounts_.end() ? 0 : it->second;
}

void ResourceSet::SetFixed(const std::string& name, int64_t amount) {
  if (amount <= 0) {
    amounts_.erase(name);
  } else {
    amounts_[name] = amount;
  }
}

bool ResourceSet::Contains(const ResourceSet& need) const {
  for (const auto& [k, v] : need.amounts_) {
    if (GetFixed(k) < v) return false;
  }
  return true;
}

void ResourceSet::Add(const ResourceSet& other) {
  for (const auto& [k, v] : other.amounts_) {
    int64_t& mine = amounts_[k];
    if (__builtin_add_overflow(mine, v, &mine)) mine = std::numeric_limits<int64_t>::max();
  }
}

void ResourceSet::Subtract(const ResourceSet& other) {
  for (const auto& [k, v] : other.amounts_) SetFixed(k, GetFixed(k) - v);
}

std::string ResourceSet::ToString() const {
  if (amounts_.empty()) return "{}";
  std::string s = "{";
  bool first = true;
  for (const auto& [k, v] : amounts_) {
    if (!first) s += ", ";
    first = false;
    s += k + ": " + FormatAmount(v);
  }
  return s + "}";
}

const char* PlacementStrategyName(PlacementStrategy s) {
  switch (s) {
    case PlacementStrategy::kPack: return "PACK";
    case PlacementStrategy::kSpread: return "SPREAD";
    case PlacementStrategy::kStrictPack: return "STRICT_PACK";
    case PlacementStrategy::kStrictSpread: return "STRICT_SPREAD";
  }
  return "PACK";
}

Result<PlacementStrategy> ParsePlacementStrategy(const std::string& s) {
  if (s == "PACK") return PlacementStrategy::kPack;
  if (s == "SPREAD") return PlacementStrategy::kSpread;
  if (s == "STRICT_PACK") return PlacementStrategy::kStrictPack;
  if (s == "STRICT_SPREAD") return PlacementStrategy::kStrictSpread;
  return Status::InvalidArgument("resources.strategy must be one of PACK, SPREAD, STRICT_PACK, "
                                 "STRICT_SPREAD, got '" + s + "'");
}

Result<PlacementRequest> PlacementRequest::FromJson(const Json& j) {
  PlacementRequest req;
  if (j.is_null()) {
    req.bundles.push_back(ResourceSet::FromDoubles({{"CPU", 1}}));
    return req;
  }
  if (!j.is_object()) return Status::InvalidArgument("resources must be an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "bundles" && it.key() != "strategy") {
      return Status::InvalidArgument("resources: unknown key '" + it.key() +
                                     "' (allowed: bundles, strategy)");
    }
  }
  if (j.contains("strategy")) {
    if (!j["strategy"].is_string()) {
      return Status::InvalidArgument("resources.strategy must be a string");
    }
    ASSIGN_OR_RETURN(req.strategy, ParsePlacementStrategy(j["strategy"].get<std::string>()));
  }
  if (!j.contains("bundles")) {
    req.bundles.push_back(ResourceSet::FromDoubles({{"CPU", 1}}));
    return req;
  }
  const Json& b = j["bundles"];
  if (!b.is_array() || b.empty()) {
    return Status::InvalidArgument("resources.bundles must be a non-empty array of objects");
  }
  for (size_t i = 0; i < b.size(); ++i) {
    auto rs = ResourceSet::FromJson(b[i]);
    if (!rs.ok()) {
      return Status::InvalidArgument("resources.bundles[" + std::to_string(i) +
                                     "]: " + rs.status().message());
    }
    req.bundles.push_back(std::move(rs).value());
  }
  if (req.bundles.front().empty()) {
    req.head_bundle_empty = true;
    req.bundles.erase(req.bundles.begin());
    if (req.bundles.empty()) {
      return Status::InvalidArgument(
          "resources.bundles: cannot use an empty head bundle and zero worker bundles");
    }
  }
  return req;
}

Json PlacementRequest::ToJson() const {
  Json b = Json::array();
  if (head_bundle_empty) b.push_back(Json::object());
  for (const auto& rs : bundles) b.push_back(rs.ToJson());
  return Json{{"bundles", b}, {"strategy", PlacementStrategyName(strategy)}};
}

ResourceSet PlacementRequest::Total() const {
  ResourceSet total;
  for (const auto& rs : bundles) total.Add(rs);
  return total;
}

std::string PlacementRequest::Key() const {
  std::string k = PlacementStrategyName(strategy);
  k += head_bundle_empty ? "|empty-head" : "|";
  // Names are length-prefixed: a resource name may hold any of the
  // separators ({"a=10000;b": 1} and {"a": 1, "b": 1} shared a pool).
  for (const auto& rs : bundles) {
    k += "[";
    for (const auto& [name, v] : rs.amounts()) {
      k += std::to_string(name.size()) + ":" + name + "=" + std::to_string(v) + ";";
    }
    k += "]";
  }
  if (!actor_trainable.empty()) {
    k += "|trainable:" + std::to_string(actor_trainable.size()) + ":" + actor_trainable;
  }
  return k;
}

std::string PlacementRequest::ToString() const {
  std::string s = "[";
  if (head_bundle_empty) s += "{}";
  for (size_t i = 0; i < bundles.size(); ++i) {
    if (i > 0 || head_bundle_empty) s += ", ";
    s += bundles[i].ToString();
  }
  return s + "] " + PlacementStrategyName(strategy);
}

}  // namespace ztune
