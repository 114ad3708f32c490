#include "head/median_stopping_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/check.h"
#include "head/experiment_spec.h"

namespace ztune::head {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// np.median: NaN when any value is NaN; the mean of the two middle values
// of an even count.
double Median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  for (double x : v) {
    if (std::isnan(x)) return kNaN;
  }
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::optional<int64_t> IterationOf(const Json& result) {
  auto it = result.find("training_iteration");
  if (it == result.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

}  // namespace

MedianStoppingScheduler::MedianStoppingScheduler(MedianStoppingOptions options)
    : options_(std::move(options)) {
  CHECK(options_.Validate().ok());
}

std::optional<std::pair<double, double>> MedianStoppingScheduler::Read(const Json& result) const {
  const Json* time = FindFlatKey(result, options_.time_attr);
  const Json* value = FindFlatKey(result, options_.metric);
  if (time == nullptr || value == nullptr || !time->is_number() || !value->is_number()) {
    return std::nullopt;
  }
  return std::pair{time->get<double>(), value->get<double>()};
}

Status MedianStoppingScheduler::AddTrial(Trial& t, const StoredResultsReader& stored_results) {
  Record r;
  if (!t.scheduler_state.is_null()) {
    const Json& s = t.scheduler_state;
    auto stopped = s.find("stopped_at");
    auto pause = s.find("last_pause");
    auto completed = s.find("completed_at");
    auto seen = s.find("completed_seen");
    if (stopped == s.end() || !(stopped->is_null() || stopped->is_number_integer()) ||
        pause == s.end() || !(pause->is_null() || pause->is_number()) || completed == s.end() ||
        !(completed->is_null() || completed->is_number_integer()) || seen == s.end() ||
        !seen->is_boolean()) {
      return Status::Corruption("median_stopping state of trial " + t.trial_id.str() +
                                " is not {stopped_at, last_pause, completed_at, completed_seen}");
    }
    if (stopped->is_number_integer()) r.stopped_at = stopped->get<int64_t>();
    if (pause->is_number()) r.last_pause = pause->get<double>();
    if (completed->is_number_integer()) r.completed_at = completed->get<int64_t>();
    r.completed_seen = seen->get<bool>();
  }
  // What the rule counted: the stored results it saw (up to where it stopped
  // the trial; not a last result that ended the trial by itself), then the
  // one its completion counted.
  ASSIGN_OR_RETURN(std::vector<Json> results, stored_results());
  std::optional<Sample> completion;
  for (const Json& result : results) {
    const std::optional<int64_t> iteration = IterationOf(result);
    if (!iteration) {
      return Status::Corruption("a stored result of trial " + t.trial_id.str() +
                                " has no integer training_iteration");
    }
    const auto sample = Read(result);
    if (!sample) continue;
    const Sample x{*iteration, sample->first, sample->second};
    if (r.completed_at == *iteration) completion = x;
    if (r.stopped_at && *iteration > *r.stopped_at) continue;
    if (r.completed_at == *iteration && !r.completed_seen) continue;
    r.results.push_back(x);
  }
  if (r.completed_at) {
    if (!completion) {
      return Status::Corruption("median_stopping state of trial " + t.trial_id.str() +
                                " names a completion result that is not stored");
    }
    r.results.push_back(*completion);
  }
  t.scheduler_state = StateOf(r);
  trials_[t.trial_id] = std::move(r);
  return Status::Ok();
}

SchedulerDecision MedianStoppingScheduler::OnTrialResult(Trial& t, const Json& result,
                                                         const ExperimentView& experiment) {
  const auto sample = Read(result);
  const std::optional<int64_t> iteration = IterationOf(result);
  if (!sample || !iteration) return SchedulerDecision::kContinue;
  Record& r = trials_[t.trial_id];
  if (r.stopped_at) return SchedulerDecision::kContinue;  // paused once: FIFO from then on
  const double time = sample->first;
  r.results.push_back({*iteration, time, sample->second});
  if (time < options_.grace_period) return SchedulerDecision::kContinue;

  std::vector<double> means = MeansOfOthers(t.trial_id, time);
  if (means.size() < static_cast<size_t>(options_.min_samples_required)) {
    // Too few peers to judge: yield to a waiting trial (time slicing).
    const double since =
        r.last_pause ? time - *r.last_pause : std::numeric_limits<double>::infinity();
    if (since > options_.min_time_slice && experiment.num_waiting > 0) {
      r.last_pause = time;
      t.scheduler_state = StateOf(r);
      return SchedulerDecision::kPause;
    }
    return SchedulerDecision::kContinue;
  }
  const double median = Median(std::move(means));
  const double best = BestOf(r);
  // Python's max(median, best) / min(median, best) != best: a NaN on
  // either side never compares equal, so it stops.
  const double chosen =
      options_.maximize ? (best > median ? best : median) : (best < median ? best : median);
  if (!(chosen != best)) return SchedulerDecision::kContinue;
  r.stopped_at = *iteration;
  t.scheduler_state = StateOf(r);
  ++num_stopped_;
  return options_.hard_stop ? SchedulerDecision::kStop : SchedulerDecision::kPause;
}

void MedianStoppingScheduler::OnTrialComplete(Trial& t) {
  const auto sample = Read(t.last_result.Get());
  const std::optional<int64_t> iteration =
      t.last_result.Get().is_object() ? IterationOf(t.last_result.Get()) : std::nullopt;
  if (!sample || !iteration) return;
  Record& r = trials_[t.trial_id];
  if (r.completed_at) return;  // counted at its first completion
  // Ray appends the final result whether or not on_trial_result counted it.
  r.completed_seen = !r.results.empty() && r.results.back().iteration == *iteration;
  r.completed_at = *iteration;
  r.results.push_back({*iteration, sample->first, sample->second});
  t.scheduler_state = StateOf(r);
}

std::optional<double> MedianStoppingScheduler::MedianAt(const TrialId& except, double time) const {
  std::vector<double> means = MeansOfOthers(except, time);
  if (means.empty()) return std::nullopt;
  return Median(std::move(means));
}

std::vector<double> MedianStoppingScheduler::MeansOfOthers(const TrialId& except,
                                                           double time) const {
  std::vector<double> means;
  for (const auto& [id, o] : trials_) {
    if (id == except || o.results.empty() || o.results.back().time < time) continue;
    means.push_back(RunningMean(o, time));
  }
  return means;
}

double MedianStoppingScheduler::RunningMean(const Record& r, double time) const {
  double sum = 0;
  size_t n = 0;
  for (const Sample& s : r.results) {
    if (s.time < options_.grace_period || s.time > time) continue;
    sum += s.value;
    ++n;
  }
  return n == 0 ? kNaN : sum / static_cast<double>(n);  // np.mean([]) is NaN
}

double MedianStoppingScheduler::BestOf(const Record& r) const {
  // Python's max()/min() over the list: the first value, replaced by a later
  // one only when strictly better (so a NaN first stays, a NaN later is
  // never taken).
  double best = r.results.front().value;
  for (const Sample& s : r.results) {
    if (options_.maximize ? s.value > best : s.value < best) best = s.value;
  }
  return best;
}

Json MedianStoppingScheduler::StateOf(const Record& r) const {
  return Json{{"stopped_at", r.stopped_at ? Json(*r.stopped_at) : Json()},
              {"last_pause", r.last_pause ? Json(*r.last_pause) : Json()},
              {"completed_at", r.completed_at ? Json(*r.completed_at) : Json()},
              {"completed_seen", r.completed_seen}};
}

}  // namespace ztune::head
