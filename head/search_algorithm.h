// SearchAlgorithm: where the configs of one experiment's trials come from
// (Ray's Searcher, its `suggest`). The runner asks for a config whenever the
// experiment has a trial slot (head/trial_runner.cc GenerateTrials: Ray's
// max_pending_trials and the spec's ConcurrencyLimit, its
// ConcurrencyLimiter); how far the search stands is stored on the
// Experiment (next_variant of total_variants), so a restarted head resumes
// it exactly.
//
// Two kinds exist:
// - BasicVariantSearch: grid and random search over param_space; variant k
//   is a pure function of the seed and k, so it needs no state of its own.
// - ExternalSearch: the searcher runs in a client (ask/tell, e.g. Optuna
//   through python/ztune/optuna_search.py). It suggests nothing here; each
//   config a client adds with add_trial is one of its num_samples. A
//   client learns of results and completions through the client API
//   (`wait_trials`, `results`): those are Ray's on_trial_result and
//   on_trial_complete for a searcher that lives outside the head.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <optional>

#include "common/json.h"
#include "head/search_space.h"
#include "head/trial.h"

namespace ztune::head {

class SearchAlgorithm {
 public:
  virtual ~SearchAlgorithm() = default;
  // The config of e's next trial, advancing e.next_variant; nullopt when
  // this searcher gives none now. Called only while !e.SearchFinished().
  virtual std::optional<Json> Suggest(Experiment& e) = 0;
};

class BasicVariantSearch final : public SearchAlgorithm {
 public:
  explicit BasicVariantSearch(SearchSpace space) : space_(std::move(space)) {}
  std::optional<Json> Suggest(Experiment& e) override {
    return space_.Variant(e.spec.seed, e.next_variant++);
  }

 private:
  SearchSpace space_;
};

class ExternalSearch final : public SearchAlgorithm {
 public:
  std::optional<Json> Suggest(Experiment&) override { return std::nullopt; }
};

}  // namespace ztune::head
