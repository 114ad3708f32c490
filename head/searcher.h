// Searcher: the trial generation of Ray's BasicVariantGenerator across
// experiments. Holds the search space of every experiment that may still
// yield trials, and yields the next variant of one. What and how many to
// generate per turn (max_pending_trials, max_concurrent_trials) is the
// runner's decision; where an experiment's search stands (next_variant,
// total_variants) is stored on the Experiment, so a restarted head resumes
// the sequence exactly (variant k is a pure function of seed and k).
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "common/json.h"
#include "head/search_space.h"
#include "head/trial.h"

namespace ztune::head {

class Searcher {
 public:
  // `experiment_id` searches `space` from its next_variant on.
  void Start(const std::string& experiment_id, SearchSpace space);
  // It yields no more (search finished, experiment finished or stopped): its
  // space goes. Unknown ids are ignored.
  void End(const std::string& experiment_id);
  bool Searching(const std::string& experiment_id) const {
    return spaces_.count(experiment_id) > 0;
  }
  // The experiments searching now, in id order (a copy: End may be called
  // while going through it).
  std::vector<std::string> SearchingNow() const;
  // Variant e.next_variant of e's space, seeded by e.spec.seed; advances
  // e.next_variant. `e` must be searching (CHECKed).
  Json Next(Experiment& e) const;
  size_t NumSearching() const { return spaces_.size(); }

 private:
  std::map<std::string, SearchSpace> spaces_;  // by experiment id
};

}  // namespace ztune::head
