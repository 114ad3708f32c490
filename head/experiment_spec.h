// ExperimentSpec: the validated form of a submitted experiment (docs/spec.md).
// Parsing rejects unknown keys and invalid values with a message naming the key.
// Plain value; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/flat_key.h"
#include "common/json.h"
#include "common/resources.h"
#include "common/status.h"
#include "head/scheduler_spec.h"

namespace ztune::head {

struct CheckpointPolicy {
  int64_t frequency = 0;  // persistent checkpoint every N iterations; 0 = never
  bool at_end = false;
  int64_t num_to_keep = 0;  // 0 = keep all
  std::string score_attribute = "training_iteration";
  bool score_max = true;  // score_order "max"
};

// How long a worker may take to answer the head's requests for a trial; 0 =
// no limit. An attempt whose request goes unanswered that long fails (and is
// retried within max_failures): a hung setup, step or save frees its slot.
struct RequestTimeoutsSpec {
  static constexpr double kMaxSeconds = 1e7;  // 115 days; keeps ms arithmetic exact
  double setup_s = 3600;       // CREATE_ACTOR (the trainable's setup), RESTORE, RESET
  double step_s = 0;           // one training step; none by default (steps may take hours)
  double checkpoint_s = 3600;  // SAVE
};

enum class SearchAlgType {
  kBasicVariant,  // grid and random search over param_space (Ray's BasicVariantGenerator)
  kExternal,      // a client suggests every config through add_trial (ask/tell)
};
const char* SearchAlgTypeName(SearchAlgType type);

// The `search_alg` object (docs/spec.md): where an experiment's configs come
// from, and how many of its trials may be live at once (Ray's
// ConcurrencyLimiter around the searcher).
struct SearchAlgSpec {
  SearchAlgType type = SearchAlgType::kBasicVariant;
  int64_t max_concurrent = 0;  // 0 = unlimited

  static Result<SearchAlgSpec> Parse(const Json& j);  // null = the default
  Json ToJson() const;
};

struct ExperimentSpec {
  std::string name;
  // A name the workers host, or protocol::kSubmittedPythonTrainable for
  // submitted code ({"python": "FILE:NAME"}), which then sets python_entry
  // and working_dir.
  std::string trainable;
  std::string python_entry;  // "FILE:NAME" in the uploaded project
  std::string working_dir;   // "sha256:<64 hex digits>" of the uploaded project archive
  Json param_space = Json::object();
  int64_t num_samples = 1;
  std::string metric;  // empty = none
  std::string mode;    // "min" | "max" | empty
  // Stopping criteria: (flattened key "a/b", threshold); stop when result >= threshold.
  std::vector<std::pair<std::string, double>> stop;
  PlacementRequest resources;
  CheckpointPolicy checkpoint;
  int64_t max_failures = 0;  // -1 = retry forever
  int64_t max_concurrent_trials = 0;  // 0 = unlimited
  uint64_t seed = 0;
  bool fail_fast = false;
  bool reuse_actors = false;  // hand a finished trial's actor to the next equal request
  std::vector<std::string> export_formats;  // exported when a trial terminates
  double force_cleanup_s = 0;  // kill deadline of STOP; 0 = the head's --force-cleanup-s
  RequestTimeoutsSpec timeouts;
  int64_t result_buffer_length = 1;
  double result_buffer_min_time_s = 0;
  double result_buffer_max_time_s = 100;
  SchedulerSpec scheduler;  // FIFO unless the spec names another
  SearchAlgSpec search_alg;  // basic_variant unless the spec names another

  // Validates `j`. A missing seed is filled with `default_seed` so that the
  // stored spec reproduces the same samples after a restart.
  static Result<ExperimentSpec> Parse(const Json& j, uint64_t default_seed);
  // The normalised spec (every field explicit), as stored and shown to clients.
  Json ToJson() const;

  // The most trials that may be live at once: the smaller of
  // max_concurrent_trials and search_alg.max_concurrent that is set; 0 =
  // unlimited.
  int64_t ConcurrencyLimit() const;
  // Whether clients suggest the configs (search_alg "external").
  bool ExternalSearch() const { return search_alg.type == SearchAlgType::kExternal; }

  bool IsSubmittedCode() const { return !python_entry.empty(); }
  // The hex digest of working_dir (empty without submitted code).
  std::string CodeHash() const;
  // The trainable as people read it: the name, or "python:FILE:NAME".
  std::string TrainableLabel() const;
  // What a user should hear about an accepted spec (submit's reply and the
  // experiment's status): a spec that sets no stop condition runs its trials
  // until their trainable reports done or someone stops them.
  std::vector<std::string> Warnings() const;
  // What makes two actors interchangeable besides resources: the name, and
  // for submitted code the entry and the code too.
  std::string TrainableKey() const;
};

// Checks a submitted-code entry "FILE:NAME": FILE a relative path ending in
// ".py" without "." or ".." parts, NAME a dotted ASCII identifier.
// InvalidArgument saying what is wrong (without the "spec." prefix).
Status CheckPythonEntry(const std::string& entry);

}  // namespace ztune::head
