#include "head/hyperband_scheduler.h"

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <limits>

#include "common/check.h"
#include "head/experiment_spec.h"

namespace ztune::head {
namespace {

// The entry of `key`, which the scheduler's invariants say is there.
template <typename Map, typename Key>
auto& Entry(Map& map, const Key& key) {
  auto it = map.find(key);
  CHECK(it != map.end());
  return it->second;
}

}  // namespace

HyperBandScheduler::HyperBandScheduler(HyperBandOptions options) : options_(std::move(options)) {
  CHECK(options_.Validate().ok());
  // np.round rounds halves to even, as nearbyint does in the default mode.
  CHECK(std::fegetround() == FE_TONEAREST);
  s_max_1_ = static_cast<int64_t>(
                 std::nearbyint(std::log(options_.max_t) / std::log(options_.reduction_factor))) +
             1;
}

int64_t HyperBandScheduler::InitialSize(int64_t s) const {
  // Ray: int(np.ceil(s_max_1 / (s + 1) * eta**s)), left to right in doubles.
  const double n = static_cast<double>(s_max_1_) / static_cast<double>(s + 1) *
                   std::pow(options_.reduction_factor, static_cast<double>(s));
  return static_cast<int64_t>(std::ceil(n));
}

int64_t HyperBandScheduler::InitialMilestone(int64_t s) const {
  // Ray: int(max_t * eta**(-s)).
  return static_cast<int64_t>(options_.max_t *
                              std::pow(options_.reduction_factor, -static_cast<double>(s)));
}

void HyperBandScheduler::SetHalvings(Bracket& b, int64_t halvings) const {
  b.halvings = halvings;
  b.size = InitialSize(b.s);
  b.milestone = InitialMilestone(b.s);
  for (int64_t k = 0; k < halvings; ++k) {
    b.size =
        static_cast<int64_t>(std::ceil(static_cast<double>(b.size) / options_.reduction_factor));
    b.milestone = static_cast<int64_t>(
        std::min(static_cast<double>(b.milestone) * options_.reduction_factor, options_.max_t));
  }
}

// ---------------------------------------------------------------- membership

void HyperBandScheduler::Join(const TrialId& trial, uint64_t index) {
  auto full = [&] {
    const Bracket& b = Entry(brackets_, *current_);
    return static_cast<int64_t>(b.live.size()) >= b.size;
  };
  if (!current_ || full()) {
    // The next bracket of the band, or the first of a new band; a bracket
    // whose first milestone would be 0 is skipped (Ray's None bracket).
    BracketKey next = current_ ? *current_ : BracketKey{0, -1};
    do {
      if (next.second + 1 >= s_max_1_) {
        next = {next.first + 1, 0};
      } else {
        next.second++;
      }
    } while (InitialMilestone(next.second) == 0);
    Bracket b;
    b.s = next.second;
    SetHalvings(b, 0);
    brackets_[next] = std::move(b);
    current_ = next;
  }
  Entry(brackets_, *current_).live[index] = Live{trial, 0, 0};
  member_of_[trial] = Member{*current_, index};
}

Status HyperBandScheduler::AddTrial(Trial& t, const StoredResultsReader&) {
  if (!t.scheduler_state.is_null()) return RestoreTrial(t);
  const uint64_t index = IndexOfTrial(t);
  Join(t.trial_id, index);
  t.scheduler_state = StateOf(t.trial_id);
  return Status::Ok();
}

Status HyperBandScheduler::RestoreTrial(const Trial& t) {
  const std::string what = "hyperband state of trial " + t.trial_id.str();
  const Json& state = t.scheduler_state;
  if (!state.is_object()) return Status::Corruption(what + " is not an object");
  auto read = [&](const char* key, int64_t max, int64_t& out) -> Status {
    auto it = state.find(key);
    if (it == state.end() || !it->is_number_integer() || it->get<int64_t>() < 0 ||
        it->get<int64_t>() > max) {
      return Status::Corruption(what + ": " + key + " missing or not an integer from 0 to " +
                                std::to_string(max));
    }
    out = it->get<int64_t>();
    return Status::Ok();
  };
  const uint64_t index = IndexOfTrial(t);
  int64_t band = 0, s = 0, halvings = 0;
  // Every band holds a trial, so there are no more bands than trials.
  RETURN_IF_ERROR(read("band", static_cast<int64_t>(index), band));
  RETURN_IF_ERROR(read("bracket", s_max_1_ - 1, s));
  RETURN_IF_ERROR(read("halvings", s, halvings));
  if (InitialMilestone(s) == 0) {
    return Status::Corruption(what + ": bracket " + std::to_string(s) +
                              " has no milestone above 0 and holds no trials");
  }
  const BracketKey key{band, s};
  auto [it, created] = brackets_.try_emplace(key);
  Bracket& b = it->second;
  if (created) {
    b.s = s;
    SetHalvings(b, halvings);
  } else if (halvings > b.halvings) {
    SetHalvings(b, halvings);
  }
  if (!current_ || key > *current_) current_ = key;
  member_of_[t.trial_id] = Member{key, index};
  if (!IsFinished(t.status)) {
    Live l{t.trial_id, 0, 0};
    const Json* time = FindFlatKey(t.last_result.Get(), options_.time_attr);
    if (time != nullptr && time->is_number()) l.time = time->get<double>();
    l.value = SignedMetric(t.last_result.Get()).value_or(std::numeric_limits<double>::quiet_NaN());
    b.live[index] = l;
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- decisions

std::optional<double> HyperBandScheduler::SignedMetric(const Json& result) const {
  const Json* v = FindFlatKey(result, options_.metric);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  const double x = v->get<double>();
  return options_.maximize ? x : -x;
}

bool HyperBandScheduler::IterationDone(const Bracket& b) const {
  for (const auto& [index, l] : b.live) {
    if (l.time < static_cast<double>(b.milestone)) return false;
  }
  return true;
}

bool HyperBandScheduler::Finished(const Bracket& b) const {
  return options_.stop_last_trials && b.halvings == b.s && IterationDone(b);
}

bool HyperBandScheduler::MayContinue(const Bracket& b, const Live& l) const {
  if (!options_.stop_last_trials && b.halvings == b.s) return true;
  return l.time < static_cast<double>(b.milestone);
}

SchedulerDecision HyperBandScheduler::OnTrialResult(Trial& t, const Json& result,
                                                    const ExperimentView&) {
  auto m = member_of_.find(t.trial_id);
  if (m == member_of_.end()) return SchedulerDecision::kContinue;
  Bracket& b = Entry(brackets_, m->second.bracket);
  auto l = b.live.find(m->second.index);
  // Not live: a halving decided to stop it and the stop is on its way.
  if (l == b.live.end()) return SchedulerDecision::kContinue;
  const Json* time = FindFlatKey(result, options_.time_attr);
  if (time != nullptr && time->is_number()) l->second.time = time->get<double>();
  l->second.value = SignedMetric(result).value_or(std::numeric_limits<double>::quiet_NaN());
  if (MayContinue(b, l->second)) return SchedulerDecision::kContinue;
  const int64_t halvings_before = b.halvings;
  const SchedulerDecision d = ProcessBracket(m->second.bracket, &t.trial_id);
  if (b.halvings != halvings_before) t.scheduler_state = StateOf(t.trial_id);
  return d;
}

SchedulerDecision HyperBandScheduler::ProcessBracket(const BracketKey& key,
                                                     const TrialId* trigger) {
  Bracket& b = Entry(brackets_, key);
  SchedulerDecision action = SchedulerDecision::kPause;
  if (!IterationDone(b)) return action;
  auto is_trigger = [&](const TrialId& id) { return trigger != nullptr && id == *trigger; };
  std::vector<std::pair<TrialId, SchedulerAction::Kind>> decided;
  if (Finished(b)) {
    // Ray's cleanup_full: the paused trials stop, and so does the trigger.
    for (const auto& [index, l] : b.live) {
      if (!is_trigger(l.id)) decided.emplace_back(l.id, SchedulerAction::Kind::kStop);
    }
    b.live.clear();
    for (const auto& [id, kind] : decided) Decide(id, kind);
    return SchedulerDecision::kStop;
  }
  if (b.halvings == b.s) return action;  // !stop_last_trials: nothing left to halve
  SetHalvings(b, b.halvings + 1);
  // Ray's successive_halving: a stable sort by signed metric, ascending; the
  // last `size` are good. NaN sorts first (worst).
  std::vector<std::pair<uint64_t, const Live*>> order;
  for (const auto& [index, l] : b.live) order.emplace_back(index, &l);
  std::stable_sort(order.begin(), order.end(), [](const auto& x, const auto& y) {
    const double a = x.second->value, c = y.second->value;
    if (std::isnan(a) || std::isnan(c)) return std::isnan(a) && !std::isnan(c);
    return a < c;
  });
  // The worst leave first, so that "finished" below counts the survivors only.
  const size_t bad = order.size() - std::min(order.size(), static_cast<size_t>(b.size));
  std::vector<TrialId> good;
  for (size_t i = 0; i < order.size(); ++i) {
    const TrialId id = order[i].second->id;
    if (i >= bad) {
      good.push_back(id);
      continue;
    }
    ++num_stopped_;
    if (is_trigger(id)) {
      action = SchedulerDecision::kStop;
    } else {
      decided.emplace_back(id, SchedulerAction::Kind::kStop);
    }
    b.live.erase(order[i].first);  // map nodes: the later entries of `order` stay valid
  }
  const bool finished = Finished(b);
  for (const TrialId& id : good) {
    const Member& m = Entry(member_of_, id);
    const Live& l = Entry(b.live, m.index);
    if (MayContinue(b, l)) {
      if (is_trigger(id)) {
        action = SchedulerDecision::kContinue;
      } else {
        decided.emplace_back(id, SchedulerAction::Kind::kRelease);
      }
    } else if (finished) {
      // Already at or past the last milestone: done (Ray 2.7).
      b.live.erase(m.index);
      if (is_trigger(id)) {
        action = SchedulerDecision::kStop;
      } else {
        decided.emplace_back(id, SchedulerAction::Kind::kStop);
      }
    } else if (!is_trigger(id)) {
      // Past the new milestone while the bracket goes on: it stays paused;
      // its state records the halving.
      decided.emplace_back(id, SchedulerAction::Kind::kRelease);
    }
  }
  for (const auto& [id, kind] : decided) Decide(id, kind);
  return action;
}

void HyperBandScheduler::Decide(const TrialId& trial, SchedulerAction::Kind kind) {
  if (kind == SchedulerAction::Kind::kStop) stopping_.insert(trial);
  actions_.push_back(SchedulerAction{trial, kind, StateOf(trial)});
}

void HyperBandScheduler::Remove(Trial& t) {
  auto m = member_of_.find(t.trial_id);
  if (m == member_of_.end()) return;
  const BracketKey key = m->second.bracket;
  Bracket& b = Entry(brackets_, key);
  if (b.live.erase(m->second.index) == 0) return;  // left already (stopped by a halving)
  const int64_t halvings_before = b.halvings;
  if (!Finished(b)) ProcessBracket(key, nullptr);
  if (b.halvings != halvings_before) t.scheduler_state = StateOf(t.trial_id);
}

void HyperBandScheduler::OnTrialComplete(Trial& t) { Remove(t); }

void HyperBandScheduler::OnTrialError(Trial& t) {
  Remove(t);
  if (IsFinished(t.status)) return;
  // Retried (Ray's _requeue_trial: on_trial_error, then on_trial_add): it
  // joins the current bracket again, from time 0.
  const uint64_t index = IndexOfTrial(t);
  stopping_.erase(t.trial_id);
  Join(t.trial_id, index);
  t.scheduler_state = StateOf(t.trial_id);
}

bool HyperBandScheduler::MayStart(const Trial& t) const {
  if (stopping_.count(t.trial_id) > 0) return false;
  auto m = member_of_.find(t.trial_id);
  if (m == member_of_.end()) return true;
  const Bracket& b = Entry(brackets_, m->second.bracket);
  auto l = b.live.find(m->second.index);
  return l == b.live.end() || MayContinue(b, l->second);
}

std::vector<SchedulerAction> HyperBandScheduler::TakeActions() {
  std::vector<SchedulerAction> out;
  out.swap(actions_);
  return out;
}

// ---------------------------------------------------------------- state

Json HyperBandScheduler::StateOf(const TrialId& trial) const {
  auto m = member_of_.find(trial);
  if (m == member_of_.end()) return Json();
  const Bracket& b = Entry(brackets_, m->second.bracket);
  return Json{{"band", m->second.bracket.first},
              {"bracket", m->second.bracket.second},
              {"halvings", b.halvings}};
}

std::optional<HyperBandScheduler::BracketView> HyperBandScheduler::BracketOf(
    const TrialId& trial) const {
  auto m = member_of_.find(trial);
  if (m == member_of_.end()) return std::nullopt;
  const Bracket& b = Entry(brackets_, m->second.bracket);
  BracketView v;
  v.band = m->second.bracket.first;
  v.s = b.s;
  v.halvings = b.halvings;
  v.size = b.size;
  v.milestone = b.milestone;
  for (const auto& [index, l] : b.live) v.live.push_back(l.id);
  return v;
}

}  // namespace ztune::head
