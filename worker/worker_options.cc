#include "worker/worker_options.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "common/json.h"

namespace ztune::worker {

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

std::string DefaultWorkerName() { return HostName() + "-" + std::to_string(getpid()); }

std::string MakeWorkerId(const std::string& name) {
  std::random_device rd;
  uint32_t r = (static_cast<uint32_t>(rd()) << 16) ^ static_cast<uint32_t>(rd());
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08x", r);
  return name + "-" + hex;
}

Result<std::map<std::string, double>> ParseExtraResources(const std::string& json_text) {
  std::map<std::string, double> out;
  if (json_text.empty()) return out;
  Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return Status::InvalidArgument("--resources is not valid JSON: " + json_text);
  }
  if (!j.is_object()) {
    return Status::InvalidArgument("--resources must be a JSON object such as "
                                   "{\"memory\": 8e9, \"custom\": 4}");
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    if (name.empty()) return Status::InvalidArgument("--resources: empty resource name");
    if (name == "CPU" || name == "GPU") {
      return Status::InvalidArgument("--resources: set " + name + " with --" +
                                     (name == "CPU" ? "cpus" : "gpus"));
    }
    if (!it.value().is_number()) {
      return Status::InvalidArgument("--resources: '" + name + "' must be a number, got " +
                                     it.value().type_name());
    }
    double v = it.value().get<double>();
    if (!std::isfinite(v) || v < 0) {
      return Status::InvalidArgument("--resources: '" + name + "' must be a finite number >= 0");
    }
    out[name] = v;
  }
  return out;
}

Result<std::map<std::string, double>> BuildResources(double cpus, int64_t gpus,
                                                     const std::map<std::string, double>& extra) {
  if (!std::isfinite(cpus) || cpus < 0) return Status::InvalidArgument("--cpus must be >= 0");
  if (gpus < 0) return Status::InvalidArgument("--gpus must be >= 0");
  std::map<std::string, double> out = extra;
  out["CPU"] = cpus;
  if (gpus > 0) out["GPU"] = static_cast<double>(gpus);
  return out;
}

std::vector<int64_t> GpuIds(int64_t gpus) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < gpus; ++i) ids.push_back(i);
  return ids;
}

Status ValidateOptions(const WorkerOptions& o) {
  if (o.head_endpoint.empty()) return Status::InvalidArgument("--head is required");
  if (o.name.empty()) return Status::InvalidArgument("--name must not be empty");
  if (o.heartbeat_ms < 1) return Status::InvalidArgument("--heartbeat-ms must be >= 1");
  if (o.liveness < 1) return Status::InvalidArgument("--liveness must be >= 1");
  if (o.max_backoff_ms < 1) return Status::InvalidArgument("--max-backoff-ms must be >= 1");
  if (o.shutdown_grace_ms < 0) return Status::InvalidArgument("shutdown grace must be >= 0");
  if (o.work_dir.empty()) return Status::InvalidArgument("--work-dir must not be empty");
  return Status::Ok();
}

}  // namespace ztune::worker
