// Searcher: the search algorithms of the experiments that may still yield
// trials (head/search_algorithm.h), by experiment id. What and how many to
// generate per turn is the runner's decision; where an experiment's search
// stands (next_variant, total_variants) is stored on the Experiment.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "head/experiment_spec.h"
#include "head/search_algorithm.h"
#include "head/search_space.h"
#include "head/trial.h"

namespace ztune::head {

class Searcher {
 public:
  // `experiment_id` searches from its next_variant on: `space` by grid and
  // random search, or (search_alg external) through configs clients add.
  void Start(const std::string& experiment_id, const SearchAlgSpec& alg, SearchSpace space);
  // It yields no more (search finished, experiment finished or stopped): its
  // algorithm goes. Unknown ids are ignored.
  void End(const std::string& experiment_id);
  bool Searching(const std::string& experiment_id) const {
    return algorithms_.count(experiment_id) > 0;
  }
  // The experiments searching now, in id order (a copy: End may be called
  // while going through it).
  std::vector<std::string> SearchingNow() const;
  // e's search algorithm's next config (SearchAlgorithm::Suggest). `e` must
  // be searching (CHECKed).
  std::optional<Json> Suggest(Experiment& e) const;
  size_t NumSearching() const { return algorithms_.size(); }

 private:
  std::map<std::string, std::unique_ptr<SearchAlgorithm>> algorithms_;  // by experiment id
};

}  // namespace ztune::head
