#include "head/searcher.h"

#include <utility>

#include "common/check.h"

namespace ztune::head {

void Searcher::Start(const std::string& experiment_id, SearchSpace space) {
  spaces_.insert_or_assign(experiment_id, std::move(space));
}

void Searcher::End(const std::string& experiment_id) { spaces_.erase(experiment_id); }

std::vector<std::string> Searcher::SearchingNow() const {
  std::vector<std::string> ids;
  ids.reserve(spaces_.size());
  for (const auto& [id, space] : spaces_) ids.push_back(id);
  return ids;
}

Json Searcher::Next(Experiment& e) const {
  auto it = spaces_.find(e.experiment_id);
  CHECK(it != spaces_.end());  // the runner generates only for searching experiments
  return it->second.Variant(e.spec.seed, e.next_variant++);
}

}  // namespace ztune::head
