#include "head/trial_book.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/check.h"
#include "head/experiment_spec.h"
#include "head/trial_records.h"

namespace ztune::head {

std::string TrialBook::NextExperimentId() { return ExperimentIdFor(next_experiment_++); }

Experiment& TrialBook::AddExperiment(Experiment e, bool loaded) {
  // "e0001": counted past, so that a new id never repeats a stored one.
  const uint64_t n = std::strtoull(e.experiment_id.c_str() + 1, nullptr, 10);
  next_experiment_ = std::max(next_experiment_, n + 1);
  const std::string id = e.experiment_id;
  e.request_key = RequestKeyFor(e.spec);
  auto [it, inserted] = experiments_.emplace(id, std::move(e));
  CHECK(inserted);  // ids come from NextExperimentId or from distinct store keys
  if (!loaded) MarkDirty(it->second);
  return it->second;
}

Experiment* TrialBook::FindExperiment(const std::string& experiment_id) {
  auto it = experiments_.find(experiment_id);
  return it == experiments_.end() ? nullptr : &it->second;
}

const Experiment* TrialBook::FindExperiment(const std::string& experiment_id) const {
  auto it = experiments_.find(experiment_id);
  return it == experiments_.end() ? nullptr : &it->second;
}

Experiment& TrialBook::ExperimentOf(const Trial& t) {
  Experiment* e = FindExperiment(t.experiment_id);
  CHECK(e != nullptr);  // added before its trials, never removed
  return *e;
}

const Experiment& TrialBook::ExperimentOf(const Trial& t) const {
  const Experiment* e = FindExperiment(t.experiment_id);
  CHECK(e != nullptr);  // as above
  return *e;
}

void TrialBook::Count(Experiment& e, TrialStatus s, int delta) {
  e.counts[s] += delta;
  if (s == TrialStatus::kPending) num_pending_ += delta;
  if (s == TrialStatus::kRunning) num_running_ += delta;
  if (!IsFinished(s)) e.live_trials += delta;
}

Trial& TrialBook::AddTrial(Experiment& e, Json config) {
  Trial t;
  t.trial_id = TrialIdFor(e.experiment_id, e.next_trial_index++);
  t.experiment_id = e.experiment_id;
  t.seq = NextSeq();
  t.config = std::move(config);
  t.status = TrialStatus::kPending;
  const TrialId id = t.trial_id;
  auto [it, inserted] = trials_.emplace(id, std::move(t));
  CHECK(inserted);  // next_trial_index is stored with the experiment
  e.trial_ids.push_back(id);
  Count(e, TrialStatus::kPending, +1);
  MarkDirty(it->second);
  MarkDirty(e);
  return it->second;
}

Trial& TrialBook::AddLoadedTrial(Trial t, bool changed) {
  Experiment& e = ExperimentOf(t);
  next_seq_ = std::max(next_seq_, t.seq + 1);
  const TrialId id = t.trial_id;
  auto [it, inserted] = trials_.emplace(id, std::move(t));
  CHECK(inserted);  // one record per key
  e.trial_ids.push_back(id);
  e.best.known = false;  // it came with its last result
  Count(e, it->second.status, +1);
  if (changed) MarkDirty(it->second);
  if (verify_records_) written_[id] = RecordWithoutProgress(it->second);
  return it->second;
}

Trial* TrialBook::FindTrial(const TrialId& trial_id) {
  auto it = trials_.find(trial_id);
  return it == trials_.end() ? nullptr : &it->second;
}

const Trial* TrialBook::FindTrial(const TrialId& trial_id) const {
  auto it = trials_.find(trial_id);
  return it == trials_.end() ? nullptr : &it->second;
}

Trial& TrialBook::TrialRef(const TrialId& trial_id) {
  Trial* t = FindTrial(trial_id);
  CHECK(t != nullptr);  // callers hold ids of the book's trials
  return *t;
}

const Trial& TrialBook::TrialRef(const TrialId& trial_id) const {
  const Trial* t = FindTrial(trial_id);
  CHECK(t != nullptr);  // as above
  return *t;
}

void TrialBook::SetStatus(Trial& t, TrialStatus s) {
  if (t.status == s) return;
  Experiment& e = ExperimentOf(t);
  Count(e, t.status, -1);
  Count(e, s, +1);
  t.status = s;
  MarkDirty(t);
}

void TrialBook::WriteDirty(storage::WriteBatch& batch) {
  for (const auto& id : dirty_experiments_) {
    if (const Experiment* e = FindExperiment(id)) {
      batch.Put(storage::Family::kExperiments, id, e->ToJson().dump());
    }
  }
  dirty_experiments_.clear();
  for (const auto& id : dirty_trials_) {
    const Trial* t = FindTrial(id);
    if (t == nullptr) continue;
    PutTrialRecord(batch, *t);
    if (verify_records_) written_[id] = RecordWithoutProgress(*t);
  }
  for (const auto& id : progressed_) {
    const Trial* t = FindTrial(id);
    if (t == nullptr || dirty_trials_.count(id)) continue;
    auto it = written_.find(id);
    CHECK(it != written_.end());  // added or loaded, and so recorded, before any result
    if (it->second != RecordWithoutProgress(*t)) {
      spdlog::critical("trial {}: its record changed without MarkDirty (stored: {}; now: {})", id,
                       it->second, RecordWithoutProgress(*t));
      CHECK(it->second == RecordWithoutProgress(*t));
    }
  }
  progressed_.clear();
  dirty_trials_.clear();
}

std::string TrialBook::RecordWithoutProgress(const Trial& t) {
  Json j = t.ToJson();
  j.erase("iteration");
  j.erase("last_result");
  return j.dump();
}

const Trial* TrialBook::WalkForBestTrial(const Experiment& e) const {
  const Trial* best = nullptr;
  double best_v = 0;
  const bool maximize = e.spec.mode == "max";
  for (const auto& id : e.trial_ids) {
    const Trial& t = TrialRef(id);
    // No parse of the result: its metric was kept when it was stored.
    const std::optional<double> v = t.last_result.Metric(e.spec.metric);
    if (!v) continue;
    const double x = *v;
    if (best == nullptr || (maximize ? x > best_v : x < best_v)) {
      best = &t;
      best_v = x;
    }
  }
  return best;
}

const Trial* TrialBook::BestTrial(const Experiment& e) const {
  if (e.spec.metric.empty()) return nullptr;
  Experiment::BestTrialCache& c = e.best;
  const bool maximize = e.spec.mode == "max";
  const bool known = c.known && c.metric == e.spec.metric && c.maximize == maximize;
  if (known && !verify_records_) return c.trial;
  const Trial* walked = WalkForBestTrial(e);
  if (known) CHECK(walked == c.trial);  // a change of a last result went unnoted
  c.known = true;
  c.metric = e.spec.metric;
  c.maximize = maximize;
  c.trial = walked;
  c.value = walked == nullptr ? 0 : *walked->last_result.Metric(e.spec.metric);
  return walked;
}

void TrialBook::NoteLastResult(const Experiment& e, const Trial& t) {
  CHECK(t.experiment_id == e.experiment_id);
  Experiment::BestTrialCache& c = e.best;
  if (!c.known) return;  // the next BestTrial walks anyway
  const std::optional<double> v = t.last_result.Metric(c.metric);
  auto better = [&c](double a, double b) { return c.maximize ? a > b : a < b; };
  if (c.trial == &t) {
    // As good as before or better: every trial created before it is still
    // worse, every later one no better.
    if (v && !better(c.value, *v)) {
      c.value = *v;
    } else {
      c.known = false;  // worse, or no metric: any trial may be best now
    }
    return;
  }
  if (!v) return;
  if (c.trial == nullptr || better(*v, c.value)) {
    c.trial = &t;
    c.value = *v;
  } else if (*v == c.value) {
    c.known = false;  // a tie: the first in creation order is best
  }
}

}  // namespace ztune::head
