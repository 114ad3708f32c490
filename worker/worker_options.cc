#include "worker/worker_options.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <random>

#include "common/json.h"
#include "common/printable.h"

namespace ztune::worker {
namespace {

// The most device ids a head accepts in a REGISTER (docs/protocol.md).
constexpr size_t kMaxGpuDevices = 1024;

}  // namespace

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

Result<std::vector<int64_t>> GpuIds(std::optional<int64_t> gpus,
                                    std::optional<std::string_view> visible) {
  if (gpus && *gpus < 0) return Status::InvalidArgument("--gpus must be >= 0");
  if (gpus && *gpus > static_cast<int64_t>(kMaxGpuDevices)) {
    return Status::InvalidArgument("--gpus " + std::to_string(*gpus) + ": a head accepts at most " +
                                   std::to_string(kMaxGpuDevices) + " devices per worker");
  }
  std::vector<int64_t> ids;
  if (!visible || *visible == "NoDevFiles") {
    for (int64_t i = 0; i < gpus.value_or(0); ++i) ids.push_back(i);
    return ids;
  }
  const std::string shown = "CUDA_VISIBLE_DEVICES='" + EscapeForLog(*visible) + "'";
  std::string_view rest = *visible == "-1" ? std::string_view() : *visible;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view entry = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    while (!entry.empty() && std::isspace(static_cast<unsigned char>(entry.front()))) {
      entry.remove_prefix(1);
    }
    while (!entry.empty() && std::isspace(static_cast<unsigned char>(entry.back()))) {
      entry.remove_suffix(1);
    }
    if (entry.empty() || entry.size() > 9 ||
        entry.find_first_not_of("0123456789") != std::string_view::npos) {
      return Status::InvalidArgument(
          shown + ": '" + EscapeForLog(entry) +
          "' is not a device index (ztune hands GPUs to trials by index; list indices, or "
          "unset it and pass --gpus N for devices 0..N-1)");
    }
    int64_t id = 0;
    std::from_chars(entry.data(), entry.data() + entry.size(), id);
    if (std::find(ids.begin(), ids.end(), id) != ids.end()) {
      return Status::InvalidArgument(shown + " lists device " + std::to_string(id) + " twice");
    }
    ids.push_back(id);
  }
  if (gpus && *gpus > static_cast<int64_t>(ids.size())) {
    return Status::InvalidArgument("--gpus " + std::to_string(*gpus) + " but " + shown +
                                   " leaves this worker " + std::to_string(ids.size()) +
                                   " device(s)");
  }
  if (gpus) ids.resize(static_cast<size_t>(*gpus));
  if (ids.size() > kMaxGpuDevices) {
    return Status::InvalidArgument(shown + " lists " + std::to_string(ids.size()) +
                                   " devices: a head accepts at most " +
                                   std::to_string(kMaxGpuDevices) + " per worker");
  }
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
