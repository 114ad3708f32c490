// Maps trainable names to factories. A worker hosts only trainables registered
// here (no message carries code); REGISTER advertises Names().
//
// Filled during startup on one thread, then read-only: concurrent const calls
// are safe. Factories run on the worker's control thread and must be cheap
// (construct only; heavy work belongs in Trainable::Setup).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/trainable.h"

namespace ztune::worker {

using TrainableFactory = std::function<std::unique_ptr<Trainable>()>;

class TrainableRegistry {
 public:
  // InvalidArgument for an empty name or a null factory; AlreadyExists for a
  // name registered before. `export_formats`: the formats its ExportModel
  // can produce (REGISTER tells the head, which refuses a spec asking for
  // others at submit); nullopt: not declared.
  Status Register(const std::string& name, TrainableFactory factory,
                  std::optional<std::vector<std::string>> export_formats = std::nullopt);

  bool Contains(const std::string& name) const { return factories_.count(name) > 0; }

  // NotFound: "unknown trainable 'X' (this worker has: a, b, ...)".
  Result<std::unique_ptr<Trainable>> Create(const std::string& name) const;

  // Registered names, sorted.
  std::vector<std::string> Names() const;

  // The declared export formats, by trainable name (undeclared ones absent).
  const std::map<std::string, std::vector<std::string>>& ExportFormats() const {
    return export_formats_;
  }

 private:
  std::map<std::string, TrainableFactory> factories_;
  std::map<std::string, std::vector<std::string>> export_formats_;
};

// Registers the built-ins: noop, quadratic, sleep, fail, blob
// (builtin_trainables.h, docs/trainables.md).
void RegisterBuiltinTrainables(TrainableRegistry& registry);

}  // namespace ztune::worker
