#include "worker/submitted_code_trainable.h"

#include <cstdlib>
#include <utility>

#include "common/protocol/messages.h"

namespace ztune::worker {

ProcessTrainableSpec SubmittedCodeSpec(const SubmittedCodeOptions& options,
                                       const std::string& entry, const std::string& code_dir) {
  ProcessTrainableSpec spec;
  spec.name = protocol::kSubmittedPythonTrainable;
  spec.argv = {options.python, "-m", "ztune.entry", entry};
  std::string path = options.python_path;
  if (const char* inherited = std::getenv("PYTHONPATH"); inherited != nullptr && *inherited) {
    path += (path.empty() ? "" : ":") + std::string(inherited);
  }
  if (!path.empty()) spec.env["PYTHONPATH"] = path;
  spec.env["ZTUNE_CODE_DIR"] = code_dir;
  // The project directory is shared by every trial of its upload: Python
  // must not write __pycache__ into it while another trial imports from it.
  spec.env["PYTHONDONTWRITEBYTECODE"] = "1";
  spec.stop_grace_ms = options.stop_grace_ms;
  return spec;
}

SubmittedCodeTrainable::SubmittedCodeTrainable(std::shared_ptr<CodeCache> cache, std::string code,
                                               std::string entry,
                                               const SubmittedCodeOptions& options)
    : cache_(std::move(cache)),
      code_(std::move(code)),
      process_(SubmittedCodeSpec(options, entry, cache_->DirOf(code_))) {}

Status SubmittedCodeTrainable::Setup(const Json& config, const TrialContext& ctx) {
  Result<std::string> dir = cache_->Await(code_, ctx.stop_flag);
  if (!dir.ok()) return dir.status();
  return process_.Setup(config, ctx);
}

}  // namespace ztune::worker
