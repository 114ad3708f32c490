#include "head/asha_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/check.h"
#include "common/mix64.h"
#include "head/experiment_spec.h"
#include "head/quantile.h"
#include "head/score_json.h"

namespace ztune::head {

AshaScheduler::AshaScheduler(AshaOptions options) : options_(std::move(options)) {
  CHECK(options_.Validate().ok());
  const double rf = options_.reduction_factor;
  for (int64_t s = 0; s < options_.brackets; ++s) {
    // Ray: int(np.log(max_t / min_t) / np.log(rf) - s + 1), in floating
    // point, so log(1000)/log(10) = 2.9999999999999996 gives 3 rungs.
    const double count = std::log(options_.max_t / options_.grace_period) / std::log(rf) -
                         static_cast<double>(s) + 1;
    const int64_t rungs = count > 0 ? static_cast<int64_t>(count) : 0;
    Bracket b;
    for (int64_t k = rungs - 1; k >= 0; --k) {
      b.rungs.push_back(Rung{options_.grace_period * std::pow(rf, static_cast<double>(k + s)), {}});
    }
    brackets_.push_back(std::move(b));
  }
}

size_t AshaScheduler::DrawBracket(uint64_t trial_index) const {
  if (brackets_.size() == 1) return 0;
  size_t most = 0;
  for (const Bracket& b : brackets_) most = std::max(most, b.rungs.size());
  std::vector<double> weights;
  double total = 0;
  for (const Bracket& b : brackets_) {
    weights.push_back(std::exp(static_cast<double>(b.rungs.size()) - static_cast<double>(most)));
    total += weights.back();
  }
  const uint64_t bits = Mix64(options_.seed ^ Mix64(trial_index));
  double u = static_cast<double>(bits >> 11) * 0x1.0p-53 * total;  // [0, total)
  for (size_t i = 0; i < weights.size(); ++i) {
    if (u < weights[i]) return i;
    u -= weights[i];
  }
  return weights.size() - 1;  // rounding at the very top
}

Status AshaScheduler::AddTrial(Trial& t, const StoredResultsReader&) {
  if (!t.scheduler_state.is_null()) return RestoreTrial(t.trial_id, t.scheduler_state);
  const uint64_t index = IndexOfTrial(t);
  AddTrial(t.trial_id, index);
  t.scheduler_state = StateOf(t.trial_id);
  return Status::Ok();
}

SchedulerDecision AshaScheduler::OnTrialResult(Trial& t, const Json& result,
                                               const ExperimentView&) {
  const size_t recorded_before = NumRecorded(t.trial_id);
  const SchedulerDecision d = OnResult(t.trial_id, result);
  if (NumRecorded(t.trial_id) != recorded_before) t.scheduler_state = StateOf(t.trial_id);
  return d;
}

void AshaScheduler::OnTrialComplete(Trial& t) {
  const size_t recorded_before = NumRecorded(t.trial_id);
  OnComplete(t.trial_id, t.last_result.Get());
  if (NumRecorded(t.trial_id) != recorded_before) t.scheduler_state = StateOf(t.trial_id);
}

size_t AshaScheduler::NumRecorded(const TrialId& trial) const {
  auto it = bracket_of_.find(trial);
  if (it == bracket_of_.end()) return 0;
  size_t n = 0;
  for (const Rung& r : brackets_[it->second].rungs) n += r.recorded.count(trial);
  return n;
}

void AshaScheduler::AddTrial(const TrialId& trial, uint64_t trial_index) {
  bracket_of_.try_emplace(trial, DrawBracket(trial_index));
}

std::optional<double> AshaScheduler::SignedMetric(const Json& result) const {
  const Json* v = FindFlatKey(result, options_.metric);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  const double x = v->get<double>();
  return options_.maximize ? x : -x;
}

SchedulerDecision AshaScheduler::OnResult(const TrialId& trial, const Json& result) {
  const Json* time = FindFlatKey(result, options_.time_attr);
  const std::optional<double> value = SignedMetric(result);
  if (time == nullptr || !time->is_number() || !value) return SchedulerDecision::kContinue;
  const double t = time->get<double>();
  SchedulerDecision d = SchedulerDecision::kContinue;
  if (t >= options_.max_t && options_.stop_last_trials) {
    d = SchedulerDecision::kStop;
  } else {
    d = JudgeAtRung(trial, t, *value);
  }
  if (d == SchedulerDecision::kStop) ++num_stopped_;
  return d;
}

void AshaScheduler::OnComplete(const TrialId& trial, const Json& last_result) {
  const Json* time = FindFlatKey(last_result, options_.time_attr);
  const std::optional<double> value = SignedMetric(last_result);
  if (time == nullptr || !time->is_number() || !value) return;
  JudgeAtRung(trial, time->get<double>(), *value);
}

SchedulerDecision AshaScheduler::JudgeAtRung(const TrialId& trial, double time, double value) {
  auto it = bracket_of_.find(trial);
  if (it == bracket_of_.end()) {
    // The runner adds every trial before its first result; a trial it did
    // not is judged in the first bracket rather than not at all.
    it = bracket_of_.emplace(trial, 0).first;
  }
  for (Rung& rung : brackets_[it->second].rungs) {
    const bool recorded = rung.recorded.count(trial) > 0;
    if (time >= rung.milestone && recorded && !options_.stop_last_trials) {
      // Ray: the decision to go on past this rung was made already.
      break;
    }
    if (time < rung.milestone || recorded) continue;
    const std::optional<double> cutoff = CutoffOf(rung);
    // Strictly worse: ties continue; a NaN value or cutoff never stops.
    const bool stop = cutoff.has_value() && value < *cutoff;
    rung.recorded[trial] = value;
    return stop ? SchedulerDecision::kStop : SchedulerDecision::kContinue;
  }
  return SchedulerDecision::kContinue;
}

std::optional<double> AshaScheduler::CutoffOf(const Rung& rung) const {
  if (rung.recorded.empty()) return std::nullopt;
  std::vector<double> values;
  values.reserve(rung.recorded.size());
  for (const auto& [id, v] : rung.recorded) values.push_back(v);
  return NanPercentile(std::move(values), (1 - 1 / options_.reduction_factor) * 100);
}

Json AshaScheduler::StateOf(const TrialId& trial) const {
  auto it = bracket_of_.find(trial);
  if (it == bracket_of_.end()) return Json();
  Json rungs = Json::array();
  // Lowest rung first: the order the values were recorded in.
  const auto& all = brackets_[it->second].rungs;
  for (auto r = all.rbegin(); r != all.rend(); ++r) {
    auto v = r->recorded.find(trial);
    if (v != r->recorded.end())
      rungs.push_back(Json::array({r->milestone, ScoreToJson(v->second)}));
  }
  return Json{{"bracket", it->second}, {"rungs", std::move(rungs)}};
}

Status AshaScheduler::RestoreTrial(const TrialId& trial, const Json& state) {
  const std::string what = "asha state of trial " + trial.str();
  if (!state.is_object()) return Status::Corruption(what + " is not an object");
  auto b = state.find("bracket");
  if (b == state.end() || !b->is_number_unsigned() || b->get<uint64_t>() >= brackets_.size()) {
    return Status::Corruption(what + ": bracket missing or not one of the " +
                              std::to_string(brackets_.size()) + " brackets");
  }
  const size_t bracket = b->get<size_t>();
  auto r = state.find("rungs");
  if (r == state.end() || !r->is_array()) return Status::Corruption(what + ": rungs not a list");
  // Everything is checked before anything changes.
  std::vector<std::pair<size_t, double>> values;  // (rung index, value)
  for (const Json& entry : *r) {
    if (!entry.is_array() || entry.size() != 2 || !entry[0].is_number()) {
      return Status::Corruption(what + ": a rung entry is not [milestone, value]");
    }
    const double milestone = entry[0].get<double>();
    const std::optional<double> value = ScoreFromJson(entry[1]);
    if (!value) return Status::Corruption(what + ": a recorded value is not a number");
    const auto& rungs = brackets_[bracket].rungs;
    auto at = std::find_if(rungs.begin(), rungs.end(),
                           [&](const Rung& x) { return x.milestone == milestone; });
    if (at == rungs.end()) {
      return Status::Corruption(what + ": " + Json(milestone).dump() +
                                " is not a rung of bracket " + std::to_string(bracket));
    }
    values.emplace_back(static_cast<size_t>(at - rungs.begin()), *value);
  }
  bracket_of_[trial] = bracket;
  for (const auto& [index, value] : values) brackets_[bracket].rungs[index].recorded[trial] = value;
  return Status::Ok();
}

std::vector<double> AshaScheduler::Milestones(size_t bracket) const {
  std::vector<double> out;
  if (bracket >= brackets_.size()) return out;
  for (const Rung& r : brackets_[bracket].rungs) out.push_back(r.milestone);
  return out;
}

std::optional<double> AshaScheduler::Cutoff(size_t bracket, double milestone) const {
  if (bracket >= brackets_.size()) return std::nullopt;
  for (const Rung& r : brackets_[bracket].rungs) {
    if (r.milestone == milestone) return CutoffOf(r);
  }
  return std::nullopt;
}

std::optional<size_t> AshaScheduler::BracketOf(const TrialId& trial) const {
  auto it = bracket_of_.find(trial);
  if (it == bracket_of_.end()) return std::nullopt;
  return it->second;
}

}  // namespace ztune::head
