#include "worker/trainable_registry.h"

#include "worker/builtin_trainables.h"

namespace ztune::worker {

Status TrainableRegistry::Register(const std::string& name, TrainableFactory factory,
                                   std::optional<std::vector<std::string>> export_formats) {
  if (name.empty()) return Status::InvalidArgument("trainable name must not be empty");
  if (!factory) return Status::InvalidArgument("trainable '" + name + "' has no factory");
  if (!factories_.emplace(name, std::move(factory)).second) {
    return Status::AlreadyExists("trainable '" + name + "' is already registered");
  }
  if (export_formats) export_formats_[name] = std::move(*export_formats);
  return Status::Ok();
}

Result<std::unique_ptr<Trainable>> TrainableRegistry::Create(const std::string& name) const {
  auto it = factories_.find(name);
  if (it == factories_.end()) {
    std::string names;
    for (const auto& [n, f] : factories_) {
      if (!names.empty()) names += ", ";
      names += n;
    }
    return Status::NotFound("unknown trainable '" + name + "' (this worker has: " + names + ")");
  }
  std::unique_ptr<Trainable> t = it->second();
  if (t == nullptr) return Status::Internal("factory of trainable '" + name + "' returned null");
  return t;
}

std::vector<std::string> TrainableRegistry::Names() const {
  std::vector<std::string> names;
  names.reserve(factories_.size());
  for (const auto& [n, f] : factories_) names.push_back(n);
  return names;
}

void RegisterBuiltinTrainables(TrainableRegistry& registry) {
  // Names are fixed; registering twice into one registry is a programming error
  // reported through the Status, which a fresh registry never returns.
  // Only quadratic exports (its parameters as "json"); the others export
  // nothing.
  const std::vector<std::string> none;
  registry
      .Register(
          "noop", [] { return MakeNoopTrainable(); }, none)
      .IgnoreError();
  registry
      .Register(
          "quadratic", [] { return MakeQuadraticTrainable(); }, std::vector<std::string>{"json"})
      .IgnoreError();
  registry
      .Register(
          "sleep", [] { return MakeSleepTrainable(); }, none)
      .IgnoreError();
  registry
      .Register(
          "fail", [] { return MakeFailTrainable(); }, none)
      .IgnoreError();
  registry
      .Register(
          "blob", [] { return MakeBlobTrainable(); }, none)
      .IgnoreError();
}

}  // namespace ztune::worker
