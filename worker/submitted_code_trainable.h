// SubmittedCodeTrainable: a process trainable whose program is the user's
// uploaded project (docs/process-protocol.md "Submitted code"): `<python> -m
// ztune.entry FILE:NAME` with ZTUNE_CODE_DIR naming the unpacked project.
// Setup first waits for the project (CodeCache::Await: fetched by the control
// thread, unpacked here); every call then goes to the ProcessTrainable.
//
// Thread affinity: as every Trainable, the actor's runner thread;
// process_group() on the control thread.
#pragma once

#include <memory>
#include <string>

#include "worker/code_cache.h"
#include "worker/process_trainable.h"

namespace ztune::worker {

struct SubmittedCodeOptions {
  std::string python = "python3";
  std::string python_path;  // ':'-separated, before the inherited PYTHONPATH
  int64_t stop_grace_ms = 5000;
};

// The process trainable spec of `entry` in the project unpacked at `code_dir`.
ProcessTrainableSpec SubmittedCodeSpec(const SubmittedCodeOptions& options,
                                       const std::string& entry, const std::string& code_dir);

class SubmittedCodeTrainable : public Trainable {
 public:
  SubmittedCodeTrainable(std::shared_ptr<CodeCache> cache, std::string code, std::string entry,
                         const SubmittedCodeOptions& options);

  Status Setup(const Json& config, const TrialContext& ctx) override;
  Result<Json> Step(const TrialContext& ctx) override { return process_.Step(ctx); }
  Result<std::string> Save(const TrialContext& ctx) override { return process_.Save(ctx); }
  Status Restore(std::string_view bytes, const TrialContext& ctx) override {
    return process_.Restore(bytes, ctx);
  }
  bool ResetConfig(const Json& new_config, const TrialContext& ctx) override {
    return process_.ResetConfig(new_config, ctx);
  }
  void Cleanup() override { process_.Cleanup(); }
  Result<Json> ExportModel(const std::vector<std::string>& formats,
                           const TrialContext& ctx) override {
    return process_.ExportModel(formats, ctx);
  }
  std::shared_ptr<ProcessGroup> process_group() const override { return process_.process_group(); }

 private:
  const std::shared_ptr<CodeCache> cache_;
  const std::string code_;
  ProcessTrainable process_;
};

}  // namespace ztune::worker
