#include "head/search_space.h"

#include <cmath>
#include <random>
#include <set>

#include "common/did_you_mean.h"
#include "common/mix64.h"

namespace ztune::head {
namespace {

const std::set<std::string> kSamplers = {"grid_search", "choice",  "uniform", "quniform",
                                         "loguniform",  "randint", "normal"};

std::string PathString(const std::vector<std::string>& path) {
  std::string s = "param_space";
  for (const auto& p : path) s += "." + p;
  return s;
}

Status Bad(const std::vector<std::string>& path, const std::string& what) {
  return Status::InvalidArgument(PathString(path) + ": " + what);
}

bool IsFiniteNumber(const Json& j) { return j.is_number() && std::isfinite(j.get<double>()); }

Status ValidateSampler(const std::vector<std::string>& path, const std::string& kind,
                       const Json& args) {
  if (kind == "grid_search" || kind == "choice") {
    if (!args.is_array() || args.empty()) return Bad(path, kind + " needs a non-empty list");
    return Status::Ok();
  }
  if (!args.is_array()) return Bad(path, kind + " needs a list of numbers");
  for (const auto& a : args) {
    if (!IsFiniteNumber(a)) return Bad(path, kind + " arguments must be finite numbers");
  }
  auto n = [&](size_t i) { return args[i].get<double>(); };
  if (kind == "uniform") {
    if (args.size() != 2 || !(n(0) < n(1))) return Bad(path, "uniform needs [low, high] with low < high");
    if (!std::isfinite(n(1) - n(0))) return Bad(path, "uniform range high - low must be finite");
  } else if (kind == "quniform") {
    if (args.size() != 3 || !(n(0) < n(1)) || !(n(2) > 0)) {
      return Bad(path, "quniform needs [low, high, q] with low < high and q > 0");
    }
    if (!std::isfinite(n(1) - n(0))) return Bad(path, "quniform range high - low must be finite");
  } else if (kind == "loguniform") {
    if (args.size() != 2 || !(n(0) > 0) || !(n(0) < n(1))) {
      return Bad(path, "loguniform needs [low, high] with 0 < low < high");
    }
  } else if (kind == "randint") {
    if (args.size() != 2 || !args[0].is_number_integer() || !args[1].is_number_integer() ||
        !(args[0].get<int64_t>() < args[1].get<int64_t>())) {
      return Bad(path, "randint needs integers [low, high) with low < high");
    }
  } else if (kind == "normal") {
    if (args.size() != 2 || !(n(1) > 0)) return Bad(path, "normal needs [mean, sd] with sd > 0");
  }
  return Status::Ok();
}

// A sampler object holds its sampler key alone, and a one-key object whose
// key is a near miss of a sampler's name, with a list as its value, is a typo
// rather than a constant: either would otherwise run every trial with a
// config the user did not mean (issue 14: `{"log_uniform": [...]}` was the
// constant `lr.log_uniform`, and every trial failed).
Status CheckSamplerShape(const std::vector<std::string>& path, const Json& node) {
  if (!node.is_object()) return Status::Ok();
  std::string sampler;
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (kSamplers.count(it.key())) sampler = it.key();
  }
  if (!sampler.empty() && node.size() > 1) {
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (it.key() == sampler) continue;
      return Bad(path, "unknown key '" + it.key() + "' beside sampler '" + sampler +
                           "' (a sampler is an object with its one key)");
    }
  }
  if (node.size() == 1 && sampler.empty() && node.begin().value().is_array()) {
    static const std::vector<std::string> kNames(kSamplers.begin(), kSamplers.end());
    if (auto near = ClosestName(node.begin().key(), kNames)) {
      return Bad(path, "unknown sampler '" + node.begin().key() + "' (did you mean '" + *near +
                           "'?); for a constant object with this key write {\"choice\": [VALUE]}");
    }
  }
  return Status::Ok();
}

Json* PathRef(Json& root, const std::vector<std::string>& path) {
  Json* cur = &root;
  for (const auto& p : path) cur = &(*cur)[p];
  return cur;
}

}  // namespace

bool IsSamplerName(const std::string& key) { return kSamplers.count(key) > 0; }

Result<SearchSpace> SearchSpace::Parse(const Json& space) {
  if (!space.is_object()) return Status::InvalidArgument("param_space must be an object");
  SearchSpace s;
  s.space_ = space;
  // Depth-first walk; leaves are kept in document (sorted key) order.
  std::vector<std::pair<std::vector<std::string>, const Json*>> stack;
  stack.push_back({{}, &space});
  std::vector<Leaf> leaves;
  while (!stack.empty()) {
    auto [path, node] = stack.back();
    stack.pop_back();
    if (path.size() > 32) return Bad(path, "nested too deeply");
    RETURN_IF_ERROR(CheckSamplerShape(path, *node));
    if (node->is_object() && node->size() == 1 && kSamplers.count(node->begin().key())) {
      const std::string kind = node->begin().key();
      RETURN_IF_ERROR(ValidateSampler(path, kind, node->begin().value()));
      leaves.push_back(Leaf{path, kind, node->begin().value(), 0});
      continue;
    }
    if (node->is_object()) {
      // Reverse so that the stack pops keys in order.
      std::vector<std::string> keys;
      for (auto it = node->begin(); it != node->end(); ++it) keys.push_back(it.key());
      for (auto it = keys.rbegin(); it != keys.rend(); ++it) {
        auto child = path;
        child.push_back(*it);
        stack.push_back({child, &(*node)[*it]});
      }
    }
  }
  // The last grid leaf varies fastest.
  uint64_t stride = 1;
  for (auto it = leaves.rbegin(); it != leaves.rend(); ++it) {
    if (it->kind != "grid_search") continue;
    it->grid_stride = stride;
    if (stride > (uint64_t{1} << 40) / it->args.size()) {
      return Bad(it->path, "grid is too large (more than 2^40 combinations)");
    }
    stride *= it->args.size();
  }
  s.grid_size_ = stride;
  s.leaves_ = std::move(leaves);
  return s;
}

Json SearchSpace::Variant(uint64_t seed, uint64_t index) const {
  Json config = space_;
  const uint64_t grid_index = index % grid_size_;
  for (size_t li = 0; li < leaves_.size(); ++li) {
    const Leaf& leaf = leaves_[li];
    Json* slot = PathRef(config, leaf.path);
    if (leaf.kind == "grid_search") {
      *slot = leaf.args[(grid_index / leaf.grid_stride) % leaf.args.size()];
      continue;
    }
    std::mt19937_64 rng(Mix64(Mix64(seed) ^ Mix64(index * 1315423911ULL + li)));
    auto n = [&](size_t i) { return leaf.args[i].get<double>(); };
    if (leaf.kind == "choice") {
      std::uniform_int_distribution<size_t> d(0, leaf.args.size() - 1);
      *slot = leaf.args[d(rng)];
    } else if (leaf.kind == "uniform") {
      *slot = std::uniform_real_distribution<double>(n(0), n(1))(rng);
    } else if (leaf.kind == "quniform") {
      double v = std::uniform_real_distribution<double>(n(0), n(1))(rng);
      *slot = std::round(v / n(2)) * n(2);
    } else if (leaf.kind == "loguniform") {
      double v = std::uniform_real_distribution<double>(std::log(n(0)), std::log(n(1)))(rng);
      *slot = std::exp(v);
    } else if (leaf.kind == "randint") {
      *slot = std::uniform_int_distribution<int64_t>(leaf.args[0].get<int64_t>(),
                                                     leaf.args[1].get<int64_t>() - 1)(rng);
    } else if (leaf.kind == "normal") {
      *slot = std::normal_distribution<double>(n(0), n(1))(rng);
    }
  }
  return config;
}

}  // namespace ztune::head
