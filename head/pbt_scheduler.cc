#include "head/pbt_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

#include <spdlog/spdlog.h>

#include "common/check.h"
#include "common/mix64.h"
#include "head/experiment_spec.h"
#include "head/score_json.h"
#include "head/search_space.h"

namespace ztune::head {
namespace {

// The generators' salts: one stream per kind of draw.
constexpr uint64_t kDonorSalt = 1;
constexpr uint64_t kExploreSalt = 2;

double Uniform(std::mt19937_64& rng) { return std::uniform_real_distribution<double>(0, 1)(rng); }

size_t Pick(std::mt19937_64& rng, size_t n) {
  return std::uniform_int_distribution<size_t>(0, n - 1)(rng);
}

bool IsSampler(const Json& m) {
  return m.is_object() && m.size() == 1 && IsSamplerName(m.begin().key());
}

}  // namespace

PbtScheduler::PbtScheduler(PbtOptions options) : options_(std::move(options)) {
  CHECK(options_.Validate().ok());
  next_sync_ = std::max(options_.perturbation_interval, options_.burn_in_period);
}

PbtScheduler::Member* PbtScheduler::Find(const TrialId& trial) {
  auto it = index_of_.find(trial);
  if (it == index_of_.end()) return nullptr;
  auto m = members_.find(it->second);
  return m == members_.end() ? nullptr : &m->second;
}

const PbtScheduler::Member* PbtScheduler::Find(const TrialId& trial) const {
  return const_cast<PbtScheduler*>(this)->Find(trial);
}

// ---------------------------------------------------------------- membership

Status PbtScheduler::AddTrial(Trial& t, const StoredResultsReader&) {
  const uint64_t index = IndexOfTrial(t);
  if (!t.scheduler_state.is_null()) return Restore(t, index);
  Member m;
  m.id = t.trial_id;
  m.config = t.config;
  t.scheduler_state = StateOf(m);
  index_of_[t.trial_id] = index;
  members_[index] = std::move(m);
  return Status::Ok();
}

Status PbtScheduler::Restore(const Trial& t, uint64_t index) {
  const std::string what = "pbt state of trial " + t.trial_id.str();
  const Json& s = t.scheduler_state;
  if (!s.is_object()) return Status::Corruption(what + " is not an object");
  Member m;
  m.id = t.trial_id;
  m.config = t.config;
  m.finished = IsFinished(t.status);
  auto number = [&](const char* key, double& out) -> Status {
    auto it = s.find(key);
    if (it == s.end() || !it->is_number() || !std::isfinite(it->get<double>())) {
      return Status::Corruption(what + ": " + key + " missing or not a finite number");
    }
    out = it->get<double>();
    return Status::Ok();
  };
  RETURN_IF_ERROR(number("perturbed_at", m.perturbed_at));
  RETURN_IF_ERROR(number("trained_at", m.trained_at));
  auto score = s.find("score");
  if (score == s.end()) return Status::Corruption(what + ": score missing");
  if (!score->is_null()) {
    m.score = ScoreFromJson(*score);
    if (!m.score) return Status::Corruption(what + ": score is not a number");
  }
  auto checkpoint = s.find("checkpoint");
  if (checkpoint == s.end() || !(checkpoint->is_null() || (checkpoint->is_number_integer() &&
                                                           checkpoint->get<int64_t>() >= 0))) {
    return Status::Corruption(what + ": checkpoint missing or not an iteration");
  }
  if (!checkpoint->is_null()) m.checkpoint = checkpoint->get<int64_t>();
  auto exploits = s.find("exploits");
  if (exploits == s.end() || !exploits->is_number_integer() || exploits->get<int64_t>() < 0) {
    return Status::Corruption(what + ": exploits missing or not a count");
  }
  m.exploits = exploits->get<uint64_t>();
  if (options_.synch) {
    m.paused = t.status == TrialStatus::kPaused;
    if (auto sync = s.find("sync"); sync != s.end()) {
      if (!sync->is_number() || !std::isfinite(sync->get<double>())) {
        return Status::Corruption(what + ": sync is not a finite number");
      }
      next_sync_ = std::max(next_sync_, sync->get<double>());
    }
  }
  index_of_[t.trial_id] = index;
  members_[index] = std::move(m);
  return Status::Ok();
}

Json PbtScheduler::StateOf(const Member& m) const {
  Json s{{"score", m.score ? ScoreToJson(*m.score) : Json()},
         {"perturbed_at", m.perturbed_at},
         {"trained_at", m.trained_at},
         {"checkpoint", m.checkpoint ? Json(*m.checkpoint) : Json()},
         {"exploits", m.exploits}};
  if (options_.synch) s["sync"] = next_sync_;
  return s;
}

void PbtScheduler::OnTrialComplete(Trial& t) {
  if (Member* m = Find(t.trial_id)) m->finished = true;
  if (options_.synch) MaybeSync(nullptr);  // the others may all wait for none but it
}

void PbtScheduler::OnTrialError(Trial& t) {
  // A retried trial stays in the population with what it had.
  if (Member* m = Find(t.trial_id)) m->finished = IsFinished(t.status);
  if (options_.synch) MaybeSync(nullptr);
}

void PbtScheduler::OnTrialPaused(Trial& t) {
  if (!options_.synch) return;
  Member* m = Find(t.trial_id);
  if (m == nullptr) return;
  m->paused = true;
  MaybeSync(&t);
}

bool PbtScheduler::MayStart(const Trial& t) const {
  if (!options_.synch) return true;
  const Member* m = Find(t.trial_id);
  return m == nullptr || m->finished || m->trained_at < next_sync_;
}

std::vector<SchedulerAction> PbtScheduler::TakeActions() {
  std::vector<SchedulerAction> out;
  out.swap(actions_);
  return out;
}

void PbtScheduler::MaybeSync(Trial* current) {
  bool any = false;
  double latest = next_sync_;
  for (const auto& [index, m] : members_) {
    latest = std::max(latest, m.trained_at);  // Ray: every trial's, finished ones too
    if (m.finished) continue;
    if (!m.paused || m.trained_at < next_sync_) return;  // someone is not there yet
    any = true;
  }
  if (!any) return;
  const auto [lower, upper] = Quantiles();
  std::unordered_set<TrialId> exploited;
  for (const TrialId& id : lower) {
    auto idx = index_of_.find(id);
    CHECK(idx != index_of_.end());  // Quantiles ranks members only
    Member* m = Find(id);
    CHECK(m != nullptr);
    std::mt19937_64 rng = Stream(idx->second, m->exploits, kDonorSalt);
    const Member* donor = Find(upper[Pick(rng, upper.size())]);
    CHECK(donor != nullptr);
    if (!Cloneable(*donor, has_checkpoint_)) {
      spdlog::info("pbt: trial {} would clone {}, which has no checkpoint; it goes on", id,
                   donor->id);
      continue;
    }
    exploits_[id] = MakeExploit(*m, idx->second, *donor);
    exploited.insert(id);
  }
  const double synced_at = next_sync_;
  next_sync_ = std::max(next_sync_ + options_.perturbation_interval, latest);
  spdlog::info(
      "pbt: population synchronised at {} = {}: {} of {} trials clone another; next "
      "sync at {}",
      options_.time_attr, synced_at, exploited.size(), lower.size() + upper.size(), next_sync_);
  for (auto& [index, m] : members_) {
    if (m.finished) continue;
    const bool exploit = exploited.count(m.id) > 0;
    if (current != nullptr && m.id == current->trial_id) {
      current->scheduler_state = StateOf(m);
      // Queued by the runner when its pause completes; an exploit restarts it.
      if (exploit) actions_.push_back({m.id, SchedulerAction::Kind::kExploit, StateOf(m)});
      continue;
    }
    actions_.push_back({m.id,
                        exploit ? SchedulerAction::Kind::kExploit : SchedulerAction::Kind::kRelease,
                        StateOf(m)});
  }
}

double PbtScheduler::QueuePriority(const Trial& t) const {
  const Member* m = Find(t.trial_id);
  return m == nullptr ? 0 : m->trained_at;
}

// ---------------------------------------------------------------- decisions

std::pair<std::vector<TrialId>, std::vector<TrialId>> PbtScheduler::Quantiles() const {
  std::vector<const Member*> ranked;
  for (const auto& [index, m] : members_) {
    if (!m.finished && m.score) ranked.push_back(&m);
  }
  if (ranked.size() <= 1) return {};
  // Ascending by score, stable (ties keep the order trials joined in); a NaN
  // score ranks lowest.
  std::stable_sort(ranked.begin(), ranked.end(), [](const Member* a, const Member* b) {
    const double x = *a->score, y = *b->score;
    if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && !std::isnan(y);
    return x < y;
  });
  const size_t n = ranked.size();
  size_t k = static_cast<size_t>(std::ceil(static_cast<double>(n) * options_.quantile_fraction));
  if (static_cast<double>(k) > static_cast<double>(n) / 2) k = n / 2;
  std::pair<std::vector<TrialId>, std::vector<TrialId>> out;
  for (size_t i = 0; i < k; ++i) out.first.push_back(ranked[i]->id);
  // Ray slices trials[-k:], which for k = 0 is every trial: with
  // quantile_fraction 0 all are top (they checkpoint) and none is exploited.
  for (size_t i = k == 0 ? 0 : n - k; i < n; ++i) out.second.push_back(ranked[i]->id);
  return out;
}

SchedulerDecision PbtScheduler::OnTrialResult(Trial& t, const Json& result,
                                              const ExperimentView& experiment) {
  auto idx = index_of_.find(t.trial_id);
  if (idx == index_of_.end()) return SchedulerDecision::kContinue;
  const uint64_t index = idx->second;
  Member* m = Find(t.trial_id);
  CHECK(m != nullptr);
  const Json* time = FindFlatKey(result, options_.time_attr);
  const Json* metric = FindFlatKey(result, options_.metric);
  if (time == nullptr || !time->is_number() || metric == nullptr || !metric->is_number()) {
    return SchedulerDecision::kContinue;
  }
  const double now = time->get<double>();
  const Json* iteration = FindFlatKey(result, "training_iteration");
  const int64_t at = iteration != nullptr && iteration->is_number_integer()
                         ? iteration->get<int64_t>()
                         : t.iteration + 1;
  const double value = metric->get<double>();
  if (options_.synch) {
    // It waits at the sync point, with a stored checkpoint: a donor for the
    // others, or cloned itself, once all are there (MaybeSync).
    m->paused = false;
    if (now < next_sync_) return SchedulerDecision::kContinue;
    m->score = options_.maximize ? value : -value;
    m->trained_at = now;
    m->perturbed_at = now;
    m->checkpoint = at;
    ++num_checkpoints_;
    t.scheduler_state = StateOf(*m);
    return SchedulerDecision::kCheckpointPause;
  }
  if (now < options_.burn_in_period) return SchedulerDecision::kContinue;
  if (now - m->perturbed_at < options_.perturbation_interval) return SchedulerDecision::kContinue;
  m->score = options_.maximize ? value : -value;
  m->trained_at = now;
  m->perturbed_at = now;
  const auto [lower, upper] = Quantiles();
  const bool others_wait = experiment.num_waiting > 0;
  SchedulerDecision d = others_wait ? SchedulerDecision::kPause : SchedulerDecision::kContinue;
  const auto in = [](const std::vector<TrialId>& q, const TrialId& id) {
    return std::find(q.begin(), q.end(), id) != q.end();
  };
  if (in(upper, t.trial_id)) {
    m->checkpoint = at;
    ++num_checkpoints_;
    d = others_wait ? SchedulerDecision::kCheckpointPause : SchedulerDecision::kCheckpointContinue;
  } else {
    m->checkpoint.reset();
  }
  if (in(lower, t.trial_id)) {
    std::mt19937_64 rng = Stream(index, m->exploits, kDonorSalt);
    const TrialId& donor_id = upper[Pick(rng, upper.size())];
    const Member* donor = Find(donor_id);
    CHECK(donor != nullptr);
    if (!Cloneable(*donor, experiment.has_checkpoint)) {
      spdlog::info("pbt: trial {} would clone {}, which has no checkpoint yet; it goes on",
                   t.trial_id, donor_id);
    } else {
      exploits_[t.trial_id] = MakeExploit(*m, index, *donor);
      d = SchedulerDecision::kExploit;
    }
  }
  t.scheduler_state = StateOf(*m);
  return d;
}

bool PbtScheduler::Cloneable(
    const Member& donor, const std::function<bool(const TrialId&, int64_t)>& has_checkpoint) const {
  return donor.checkpoint.has_value() && has_checkpoint &&
         has_checkpoint(donor.id, *donor.checkpoint);
}

Exploit PbtScheduler::MakeExploit(Member& m, uint64_t index, const Member& donor) {
  Exploit e;
  e.donor = donor.id;
  e.donor_iteration = *donor.checkpoint;
  e.old_config = m.config;
  e.new_config = Explore(donor.config, index, m.exploits);
  m.config = e.new_config;
  m.perturbed_at = donor.perturbed_at;
  m.trained_at = donor.trained_at;
  m.exploits++;
  ++num_exploits_;
  return e;
}

std::optional<Exploit> PbtScheduler::TakeExploit(const TrialId& trial) {
  auto it = exploits_.find(trial);
  if (it == exploits_.end()) return std::nullopt;
  Exploit e = std::move(it->second);
  exploits_.erase(it);
  return e;
}

// ---------------------------------------------------------------- explore

std::mt19937_64 PbtScheduler::Stream(uint64_t trial_index, uint64_t exploits, uint64_t salt) const {
  return std::mt19937_64(
      Mix64(Mix64(options_.seed) ^ Mix64(trial_index * 0x100000001b3ULL + exploits) ^ salt));
}

Json PbtScheduler::Explore(const Json& config, uint64_t trial_index, uint64_t exploits) const {
  std::mt19937_64 rng = Stream(trial_index, exploits, kExploreSalt);
  Json out = config;
  uint64_t stream = 0;
  for (auto it = options_.hyperparam_mutations.begin(); it != options_.hyperparam_mutations.end();
       ++it) {
    if (!out.is_object() || !out.contains(it.key())) continue;  // CheckAgainst: never
    out[it.key()] = ExploreValue(out[it.key()], it.value(), rng, stream++);
  }
  return out;
}

Json PbtScheduler::ExploreValue(const Json& value, const Json& mutation, std::mt19937_64& rng,
                                uint64_t stream) const {
  if (mutation.is_array()) {
    // Ray: resample with resample_probability (or when the value is not in
    // the list), else move to a neighbour, staying inside the list.
    auto pos = std::find(mutation.begin(), mutation.end(), value);
    if (Uniform(rng) < options_.resample_probability || pos == mutation.end()) {
      return mutation[Pick(rng, mutation.size())];
    }
    const size_t i = static_cast<size_t>(pos - mutation.begin());
    if (Uniform(rng) > 0.5) return mutation[i == 0 ? 0 : i - 1];
    return mutation[std::min(mutation.size() - 1, i + 1)];
  }
  if (IsSampler(mutation)) {
    const bool resample = Uniform(rng) < options_.resample_probability;
    if (resample || !value.is_number()) {
      // A fresh draw from the sampler (also for a value that is not a number,
      // which no factor can scale).
      auto space = SearchSpace::Parse(Json{{"v", mutation}});
      CHECK(space.ok());  // validated with the spec
      return space->Variant(rng() ^ stream, 0)["v"];
    }
    const double factor =
        options_.perturbation_factors[Pick(rng, options_.perturbation_factors.size())];
    if (value.is_number_integer()) {
      // Python's int(): toward zero; held inside int64 (a factor may be huge).
      const double scaled = std::trunc(value.get<double>() * factor);
      constexpr double kLimit = 9.2e18;
      return static_cast<int64_t>(std::clamp(scaled, -kLimit, kLimit));
    }
    return value.get<double>() * factor;
  }
  // A nested object of mutations.
  if (!value.is_object()) return value;
  Json out = value;
  uint64_t inner = 0;
  for (auto it = mutation.begin(); it != mutation.end(); ++it) {
    if (!out.contains(it.key())) continue;
    out[it.key()] = ExploreValue(out[it.key()], it.value(), rng, stream * 131 + ++inner);
  }
  return out;
}

}  // namespace ztune::head
