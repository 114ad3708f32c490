#include "worker/builtin_trainables.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <thread>

namespace ztune::worker {
namespace {

const char* JsonTypeName(const Json& j) { return j.type_name(); }

Status CheckConfigObject(const Json& config) {
  if (config.is_null() || config.is_object()) return Status::Ok();
  return Status::InvalidArgument(std::string("config must be a JSON object, got ") +
                                 JsonTypeName(config));
}

// Fixed-width little-endian encoding, so checkpoints are portable between workers.
void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetU64(std::string_view in, size_t pos) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(in[pos + i])) << (8 * i);
  return v;
}

// ---- noop ----

class NoopTrainable : public Trainable {
 public:
  Status Setup(const Json& config, const TrialContext&) override {
    RETURN_IF_ERROR(CheckConfigObject(config));
    ASSIGN_OR_RETURN(report_step_clock_, ConfigBool(config, "report_step_clock", false));
    return Status::Ok();
  }
  // With report_step_clock, each result carries the worker's steady clock
  // (ns) at its step: consecutive differences are the step cycle as the
  // worker sees it (bench/throughput --latency).
  Result<Json> Step(const TrialContext&) override {
    if (!report_step_clock_) return Json::object();
    return Json{{"step_clock_ns", std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::steady_clock::now().time_since_epoch())
                                      .count()}};
  }
  Result<std::string> Save(const TrialContext&) override { return std::string(); }
  Status Restore(std::string_view, const TrialContext&) override { return Status::Ok(); }
  bool ResetConfig(const Json& new_config, const TrialContext& ctx) override {
    return Setup(new_config, ctx).ok();
  }
  bool RunsInline(const Json&) const override { return true; }

 private:
  bool report_step_clock_ = false;
};

// ---- quadratic (and fail, which extends it) ----

class QuadraticTrainable : public Trainable {
 public:
  Status Setup(const Json& config, const TrialContext& ctx) override {
    RETURN_IF_ERROR(CheckConfigObject(config));
    ASSIGN_OR_RETURN(lr_, ConfigNumber(config, "lr", 0.1));
    ASSIGN_OR_RETURN(double x0, ConfigNumber(config, "x0", 10.0));
    ASSIGN_OR_RETURN(target_, ConfigNumber(config, "target", 0.0));
    // Optional wall time per step, so that demos and chaos tests can watch
    // (and interrupt) a quadratic run; it does not change any value.
    ASSIGN_OR_RETURN(step_sleep_s_, ConfigNumber(config, "step_sleep_s", 0.0));
    if (step_sleep_s_ < 0 || step_sleep_s_ > 3600) {
      return Status::InvalidArgument("config key 'step_sleep_s' must be in [0, 3600]");
    }
    x_ = x0;
    iteration_ = ctx.iteration;
    return Status::Ok();
  }

  Result<Json> Step(const TrialContext& ctx) override {
    if (step_sleep_s_ > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(step_sleep_s_));
    }
    x_ = x_ - lr_ * 2.0 * (x_ - target_);
    iteration_ = ctx.iteration + 1;
    double d = x_ - target_;
    return Json{{"loss", d * d}, {"x", x_}};
  }

  // "QUA1" + the exact bit pattern of x: a restored actor continues bit-identically.
  Result<std::string> Save(const TrialContext&) override {
    std::string out = kMagic;
    PutU64(out, std::bit_cast<uint64_t>(x_));
    return out;
  }

  Status Restore(std::string_view bytes, const TrialContext& ctx) override {
    if (bytes.size() != 12 || bytes.substr(0, 4) != kMagic) {
      return Status::Corruption("not a quadratic checkpoint (" + std::to_string(bytes.size()) +
                                " bytes)");
    }
    x_ = std::bit_cast<double>(GetU64(bytes, 4));
    iteration_ = ctx.iteration;
    return Status::Ok();
  }

  bool ResetConfig(const Json& new_config, const TrialContext& ctx) override {
    return Setup(new_config, ctx).ok();
  }

  // Inline unless it sleeps per step (demos and chaos tests interrupt those).
  // A config whose step_sleep_s is not a number is not inline either: its
  // Setup fails, on a thread like any other.
  bool RunsInline(const Json& config) const override {
    if (!config.is_object()) return false;
    auto it = config.find("step_sleep_s");
    return it == config.end() || (it->is_number() && it->get<double>() == 0);
  }

  Result<Json> ExportModel(const std::vector<std::string>& formats,
                           const TrialContext&) override {
    Json out = Json::object();
    for (const auto& f : formats) {
      if (f != "json") {
        return Status::InvalidArgument("cannot export format '" + f + "' (supported: json)");
      }
      out["json"] = Json{{"x", x_}, {"iteration", iteration_}}.dump();
    }
    return out;
  }

 private:
  static constexpr char kMagic[] = "QUA1";
  double lr_ = 0.1;
  double target_ = 0;
  double step_sleep_s_ = 0;
  double x_ = 10;
  int64_t iteration_ = 0;
};

class FailTrainable : public QuadraticTrainable {
 public:
  Status Setup(const Json& config, const TrialContext& ctx) override {
    RETURN_IF_ERROR(QuadraticTrainable::Setup(config, ctx));
    ASSIGN_OR_RETURN(fail_at_, ConfigInt(config, "fail_at", 2));
    ASSIGN_OR_RETURN(persistent_, ConfigBool(config, "persistent", false));
    ASSIGN_OR_RETURN(raise_, ConfigBool(config, "raise", false));
    return Status::Ok();
  }

  Result<Json> Step(const TrialContext& ctx) override {
    int64_t iteration = ctx.iteration + 1;
    if (iteration == fail_at_ && (persistent_ || !ctx.restored)) {
      std::string what = "intentional failure at iteration " + std::to_string(iteration);
      if (raise_) throw std::runtime_error(what);
      return Status::Aborted(what);
    }
    return QuadraticTrainable::Step(ctx);
  }

  bool ResetConfig(const Json&, const TrialContext&) override { return false; }

 private:
  int64_t fail_at_ = 2;
  bool persistent_ = false;
  bool raise_ = false;
};

// ---- sleep ----

class SleepTrainable : public Trainable {
 public:
  Status Setup(const Json& config, const TrialContext&) override {
    RETURN_IF_ERROR(CheckConfigObject(config));
    ASSIGN_OR_RETURN(sleep_s_, ConfigNumber(config, "sleep_s", 0.1));
    if (!(sleep_s_ >= 0)) return Status::InvalidArgument("config key 'sleep_s' must be >= 0");
    return Status::Ok();
  }

  Result<Json> Step(const TrialContext& ctx) override {
    // Sleeps in short slices so an abandoned actor's thread ends soon after.
    auto end = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   std::chrono::duration<double>(sleep_s_));
    while (true) {
      auto now = std::chrono::steady_clock::now();
      if (now >= end) break;
      if (ctx.StopRequested()) return Status::Aborted("sleep interrupted: actor is stopping");
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
          end - now, std::chrono::milliseconds(10)));
    }
    return Json{{"loss", 1.0 / static_cast<double>(ctx.iteration + 1)}};
  }

  Result<std::string> Save(const TrialContext&) override { return std::string(); }
  Status Restore(std::string_view, const TrialContext&) override { return Status::Ok(); }
  bool ResetConfig(const Json& new_config, const TrialContext& ctx) override {
    return Setup(new_config, ctx).ok();
  }

 private:
  double sleep_s_ = 0.1;
};

// ---- blob ----

class BlobTrainable : public Trainable {
 public:
  Status Setup(const Json& config, const TrialContext&) override {
    RETURN_IF_ERROR(CheckConfigObject(config));
    ASSIGN_OR_RETURN(int64_t n, ConfigInt(config, "checkpoint_bytes", int64_t{1} << 20));
    if (n < 0 || n > (int64_t{1} << 30)) {
      return Status::InvalidArgument("config key 'checkpoint_bytes' must be in [0, 2^30]");
    }
    size_ = static_cast<size_t>(n);
    ASSIGN_OR_RETURN(int64_t r, ConfigInt(config, "result_bytes", 0));
    if (r < 0 || r > (int64_t{1} << 30)) {
      return Status::InvalidArgument("config key 'result_bytes' must be in [0, 2^30]");
    }
    result_bytes_ = static_cast<size_t>(r);
    config_ = config.is_null() ? Json::object() : config;
    return Status::Ok();
  }

  Result<Json> Step(const TrialContext& ctx) override {
    Json result{{"loss", 1.0 / static_cast<double>(ctx.iteration + 1)}};
    if (result_bytes_ > 0) result["pad"] = std::string(result_bytes_, 'x');
    return result;
  }

  // "BLB1" + iteration + size + content.
  Result<std::string> Save(const TrialContext& ctx) override {
    std::string out = kMagic;
    PutU64(out, static_cast<uint64_t>(ctx.iteration));
    PutU64(out, size_);
    // Generated in place: a gigabyte blob is held once, not built and copied.
    out.resize(out.size() + size_);
    WriteBlobContent(config_, ctx.iteration, out.data() + 20, size_);
    return out;
  }

  Status Restore(std::string_view bytes, const TrialContext& ctx) override {
    if (bytes.size() < 20 || bytes.substr(0, 4) != kMagic) {
      return Status::Corruption("not a blob checkpoint");
    }
    auto iteration = static_cast<int64_t>(GetU64(bytes, 4));
    uint64_t size = GetU64(bytes, 12);
    if (iteration != ctx.iteration) {
      return Status::Corruption("blob checkpoint is of iteration " + std::to_string(iteration) +
                                ", expected " + std::to_string(ctx.iteration));
    }
    if (size != size_ || bytes.size() - 20 != size) {
      return Status::Corruption("blob checkpoint holds " + std::to_string(bytes.size() - 20) +
                                " bytes, expected " + std::to_string(size_));
    }
    // Compared a block at a time: the expected content is never whole in memory.
    std::string_view got = bytes.substr(20);
    std::string want;
    BlobContentGenerator gen(config_, iteration);
    for (size_t at = 0; at < size; at += kCompareBlock) {
      want.resize(std::min<size_t>(kCompareBlock, size - at));
      gen.Fill(want.data(), want.size());
      const std::string_view have = got.substr(at, want.size());
      if (have != want) {
        size_t i = 0;
        while (have[i] == want[i]) ++i;
        return Status::Corruption("blob checkpoint content differs at byte " +
                                  std::to_string(at + i));
      }
    }
    return Status::Ok();
  }

  bool ResetConfig(const Json& new_config, const TrialContext& ctx) override {
    return Setup(new_config, ctx).ok();
  }

 private:
  static constexpr char kMagic[] = "BLB1";
  static constexpr size_t kCompareBlock = 1 << 20;
  size_t size_ = 1 << 20;
  size_t result_bytes_ = 0;
  Json config_;
};

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

std::unique_ptr<Trainable> MakeNoopTrainable() { return std::make_unique<NoopTrainable>(); }
std::unique_ptr<Trainable> MakeQuadraticTrainable() {
  return std::make_unique<QuadraticTrainable>();
}
std::unique_ptr<Trainable> MakeSleepTrainable() { return std::make_unique<SleepTrainable>(); }
std::unique_ptr<Trainable> MakeFailTrainable() { return std::make_unique<FailTrainable>(); }
std::unique_ptr<Trainable> MakeBlobTrainable() { return std::make_unique<BlobTrainable>(); }

Result<double> ConfigNumber(const Json& config, const std::string& key, double fallback) {
  if (!config.is_object()) return fallback;
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  if (!it->is_number()) {
    return Status::InvalidArgument("config key '" + key + "' must be a number, got " +
                                   JsonTypeName(*it));
  }
  double v = it->get<double>();
  if (!std::isfinite(v)) return Status::InvalidArgument("config key '" + key + "' must be finite");
  return v;
}

Result<int64_t> ConfigInt(const Json& config, const std::string& key, int64_t fallback) {
  if (!config.is_object()) return fallback;
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  if (it->is_number_integer()) {
    if (it->is_number_unsigned() &&
        it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Status::InvalidArgument("config key '" + key + "' is too large");
    }
    return it->get<int64_t>();
  }
  // Accept integral floats (2.0), as JSON producers often write them.
  if (it->is_number_float()) {
    double v = it->get<double>();
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.0e18) {
      return static_cast<int64_t>(v);
    }
  }
  return Status::InvalidArgument("config key '" + key + "' must be an integer, got " +
                                 (it->is_number() ? std::string("a fraction")
                                                  : std::string(JsonTypeName(*it))));
}

Result<bool> ConfigBool(const Json& config, const std::string& key, bool fallback) {
  if (!config.is_object()) return fallback;
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return Status::InvalidArgument("config key '" + key + "' must be a boolean, got " +
                                   JsonTypeName(*it));
  }
  return it->get<bool>();
}

BlobContentGenerator::BlobContentGenerator(const Json& config, int64_t iteration) {
  // FNV-1a of the canonical config text (nlohmann sorts object keys), mixed with
  // the iteration: every (trial config, iteration) has its own content.
  std::string text = config.is_null() ? "{}" : config.dump();
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : text) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  state_ = h ^ (static_cast<uint64_t>(iteration) * 0x9e3779b97f4a7c15ULL);
}

void BlobContentGenerator::Fill(char* out, size_t n) {
  size_t i = 0;
  auto byte = [&] {
    if (left_ == 0) {
      word_ = SplitMix64(state_);
      left_ = 8;
    }
    out[i++] = static_cast<char>(word_ & 0xff);
    word_ >>= 8;
    --left_;
  };
  while (i < n && left_ > 0) byte();
  // Whole words: the byte loop ran at 1 ns a byte, a second per gigabyte.
  for (; n - i >= 8; i += 8) {
    const uint64_t w = SplitMix64(state_);
    for (int k = 0; k < 8; ++k) out[i + k] = static_cast<char>((w >> (8 * k)) & 0xff);
  }
  while (i < n) byte();
}

void WriteBlobContent(const Json& config, int64_t iteration, char* out, size_t size) {
  BlobContentGenerator(config, iteration).Fill(out, size);
}

std::string BlobContent(const Json& config, int64_t iteration, size_t size) {
  std::string out(size, '\0');
  WriteBlobContent(config, iteration, out.data(), size);
  return out;
}

}  // namespace ztune::worker
