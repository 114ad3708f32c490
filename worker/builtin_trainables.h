// Built-in trainables for tests, examples and benchmarks (docs/trainables.md).
// Their names and configs are a contract other suites rely on:
//
//   noop       reports only the auto-filled fields.
//   quadratic  gradient descent on (x - target)^2; config lr (0.1), x0 (10), target (0).
//   sleep      sleeps sleep_s (0.1) per step; loss = 1 / iteration.
//   fail       quadratic that fails in the step of iteration fail_at (2); persistent
//              (false) fails every time, else only when not restored; raise (false)
//              throws a C++ exception instead of returning an error. No reset.
//   blob       checkpoints of checkpoint_bytes (1 MiB) deterministic bytes, verified
//              on restore; loss = 1 / iteration.
//
// Same thread affinity as Trainable. The config readers below are public so
// user trainables can validate configs the same way.
#pragma once

#include <memory>
#include <string>

#include "common/json.h"
#include "common/status.h"
#include "worker/trainable.h"

namespace ztune::worker {

std::unique_ptr<Trainable> MakeNoopTrainable();
std::unique_ptr<Trainable> MakeQuadraticTrainable();
std::unique_ptr<Trainable> MakeSleepTrainable();
std::unique_ptr<Trainable> MakeFailTrainable();
std::unique_ptr<Trainable> MakeBlobTrainable();

// Config readers: `config` must be an object or null (= empty). A missing or
// null key gives `fallback`; a key of the wrong type is InvalidArgument naming
// it ("config key 'lr' must be a number, got string").
Result<double> ConfigNumber(const Json& config, const std::string& key, double fallback);
Result<int64_t> ConfigInt(const Json& config, const std::string& key, int64_t fallback);
Result<bool> ConfigBool(const Json& config, const std::string& key, bool fallback);

// The deterministic content of a blob checkpoint (exposed for tests), as a
// stream: Fill continues where the previous call stopped.
class BlobContentGenerator {
 public:
  BlobContentGenerator(const Json& config, int64_t iteration);
  void Fill(char* out, size_t n);

 private:
  uint64_t state_ = 0;
  uint64_t word_ = 0;  // the current word's bytes not handed out yet
  int left_ = 0;
};
void WriteBlobContent(const Json& config, int64_t iteration, char* out, size_t size);
std::string BlobContent(const Json& config, int64_t iteration, size_t size);

}  // namespace ztune::worker
