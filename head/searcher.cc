#include "head/searcher.h"

#include <utility>

#include "common/check.h"

namespace ztune::head {

void Searcher::Start(const std::string& experiment_id, const SearchAlgSpec& alg,
                     SearchSpace space) {
  std::unique_ptr<SearchAlgorithm> algorithm;
  switch (alg.type) {
    case SearchAlgType::kBasicVariant:
      algorithm = std::make_unique<BasicVariantSearch>(std::move(space));
      break;
    case SearchAlgType::kExternal:
      algorithm = std::make_unique<ExternalSearch>();
      break;
  }
  CHECK(algorithm != nullptr);
  algorithms_.insert_or_assign(experiment_id, std::move(algorithm));
}

void Searcher::End(const std::string& experiment_id) { algorithms_.erase(experiment_id); }

std::vector<std::string> Searcher::SearchingNow() const {
  std::vector<std::string> ids;
  ids.reserve(algorithms_.size());
  for (const auto& [id, algorithm] : algorithms_) ids.push_back(id);
  return ids;
}

std::optional<Json> Searcher::Suggest(Experiment& e) const {
  auto it = algorithms_.find(e.experiment_id);
  CHECK(it != algorithms_.end());  // the runner generates only for searching experiments
  return it->second->Suggest(e);
}

}  // namespace ztune::head
