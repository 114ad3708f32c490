#include "client/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "client/json_util.h"
#include "client/table.h"

namespace ztune::client {
namespace {

// A budget from a JSON number that is a positive whole count.
std::optional<int64_t> PositiveCount(const Json* v) {
  if (v == nullptr) return std::nullopt;
  const std::optional<double> d = AsNumber(*v);
  if (!d || !(*d >= 1) || *d > 1e15) return std::nullopt;
  return static_cast<int64_t>(std::ceil(*d));
}

}  // namespace

std::optional<int64_t> IterationBudget(const Json& experiment) {
  const Json& spec = ObjectField(experiment, "spec");
  const Json& stop = ObjectField(spec, "stop");
  std::optional<int64_t> budget = PositiveCount(FindField(stop, "training_iteration"));
  const Json& scheduler = ObjectField(spec, "scheduler");
  const std::string type = StringField(scheduler, "type");
  if ((type == "asha" || type == "hyperband") &&
      StringField(scheduler, "time_attr", "training_iteration") == "training_iteration" &&
      BoolField(scheduler, "stop_last_trials", true)) {
    if (std::optional<int64_t> max_t = PositiveCount(FindField(scheduler, "max_t"))) {
      budget = budget ? std::min(*budget, *max_t) : *max_t;
    }
  }
  return budget;
}

double Progress::Fraction() const {
  if (finished) return 1.0;
  double f = 0;
  if (iterations_done && iterations_total > 0) {
    f = static_cast<double>(*iterations_done) / static_cast<double>(iterations_total);
  } else if (trials_total > 0) {
    f = static_cast<double>(trials_done) / static_cast<double>(trials_total);
  }
  return std::clamp(f, 0.0, 1.0);
}

Progress MeasureProgress(const Json& experiment, const std::vector<const Json*>* trials) {
  Progress p;
  const Json& counts = ObjectField(experiment, "trial_counts");
  p.trials_done = IntField(counts, "TERMINATED") + IntField(counts, "ERROR");
  p.trials_total = std::max(IntField(experiment, "total_trials"), p.trials_done);
  p.finished = BoolField(experiment, "finished");
  const std::optional<int64_t> budget = IterationBudget(experiment);
  if (!budget || trials == nullptr) return p;
  int64_t done = 0;
  for (const Json* t : *trials) {
    const std::string status = StringField(*t, "status");
    if (status == "TERMINATED" || status == "ERROR") {
      done += *budget;
    } else {
      done += std::clamp<int64_t>(IntField(*t, "iteration"), 0, *budget);
    }
  }
  p.iterations_done = done;
  p.iterations_total = *budget * p.trials_total;
  return p;
}

std::string ProgressBar(double fraction, int width) {
  width = std::max(1, width);
  const int full = static_cast<int>(std::floor(std::clamp(fraction, 0.0, 1.0) * width));
  return "[" + std::string(full, '#') + std::string(width - full, '-') + "]";
}

std::string FormatDuration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::ceil(std::max(0.0, seconds)));
  char buf[48];
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%llds", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else if (s < 86400) {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s % 3600 / 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lldd%02lldh", static_cast<long long>(s / 86400),
                  static_cast<long long>(s % 86400 / 3600));
  }
  return buf;
}

std::string ProgressText(const Progress& progress, std::optional<double> eta_s) {
  const double f = progress.Fraction();
  std::string text = ProgressBar(f, 30) + " " +
                     std::to_string(static_cast<int>(std::floor(f * 100))) + "% \u00b7 " +
                     std::to_string(progress.trials_done) + "/" +
                     std::to_string(progress.trials_total) + " trials done";
  if (progress.iterations_done) {
    text += " \u00b7 " + std::to_string(*progress.iterations_done) + "/" +
            std::to_string(progress.iterations_total) + " iterations";
  }
  if (eta_s && !progress.finished) text += " \u00b7 ETA " + FormatDuration(*eta_s);
  return text;
}

std::optional<double> EtaEstimator::Observe(const std::string& experiment_id, double fraction,
                                            double created_at_s, double now_s) {
  auto [it, inserted] = first_.try_emplace(experiment_id, First{fraction, now_s});
  if (fraction >= 1.0) return std::nullopt;
  double gained = fraction - it->second.fraction;
  double span = now_s - it->second.at_s;
  if (!(gained > 0 && span > 0)) {
    // Nothing seen moving yet: the average since the experiment was created.
    if (!(created_at_s > 0)) return std::nullopt;
    gained = fraction;
    span = now_s - created_at_s;
  }
  if (!(gained > 0) || !(span > 0) || !std::isfinite(span)) return std::nullopt;
  return (1.0 - fraction) * span / gained;
}

}  // namespace ztune::client
