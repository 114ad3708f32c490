// StoreLoader: what a starting head reads back from its store, checked, before
// the runner takes it over (the first half of recovery; docs/recovery.md).
// Reads the head epoch, the experiments with their search spaces and every
// trial with its child records, and says what the first commit must rewrite
// (a schema-1 store's inline lists). Decides nothing about running trials:
// DispositionAfterRestart (head/recovery_policy.h) does, per trial.
//
// A pure read of the store; no thread affinity.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "head/search_space.h"
#include "head/trial.h"
#include "storage/store.h"

namespace ztune::head {

struct LoadedStore {
  // This start's epoch: the stored one plus one (1 for a new store). The
  // caller writes it in its first commit, before any request goes out.
  uint64_t epoch = 1;
  std::vector<Experiment> experiments;  // in id order
  // The search space of every experiment that may still yield trials.
  std::map<std::string, SearchSpace> searching;
  std::vector<Trial> trials;  // in creation order (seq), each of a loaded experiment
  // Trials stored by schema 1, with their lists inline: the first commit
  // moves their lists to child records and rewrites them without.
  std::set<TrialId> inline_lists;
  // The schema the store was written with, when older than this build's:
  // the first commit writes the current one.
  std::optional<std::string> schema_upgrade_from;
};

// Corruption (naming the record) if any record cannot be read, an experiment
// is stored twice, its search space does not parse, or a trial belongs to no
// stored experiment; store errors as they are.
Result<LoadedStore> LoadStore(storage::Store& store);

}  // namespace ztune::head
