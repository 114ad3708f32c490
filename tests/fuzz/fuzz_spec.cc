// Fuzz target: the experiment spec and its search space
// (head/experiment_spec.h ExperimentSpec::Parse, head/search_space.h).
//
// Input: a JSON document, parsed with ParseJson as the head parses a submit
// request. The document goes through ExperimentSpec::Parse (as a submitted
// spec) and, independently, through SearchSpace::Parse (as if it were a
// param_space), so that both grammars are explored from one corpus.
//
// Beyond "never crash": an accepted spec is stored as Experiment::ToJson() and
// read back at every head restart with Experiment::FromJson, so the normalised
// spec must parse again to the same spec; and every variant the search space
// can produce must be computable and dumpable. A violation aborts.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/flat_key.h"
#include "common/json_parse.h"
#include "head/experiment_spec.h"
#include "head/search_space.h"
#include "head/trial.h"

namespace ztune::fuzz {
namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_spec: %s: %s\n", what, detail.c_str());
  std::abort();
}

// Samples a few variants, including the last one (the largest grid index).
void ExploreSpace(const head::SearchSpace& space, uint64_t seed, int64_t num_samples,
                  const std::string& metric) {
  // An overflowing size is refused at submit (TrialRunner::Submit): nothing to sample.
  const uint64_t total = space.NumVariants(num_samples).value_or(0);
  for (uint64_t k : {uint64_t{0}, uint64_t{1}, uint64_t{2}, total - 1, total}) {
    if (total == 0 || k >= total) continue;
    Json config = space.Variant(seed, k);
    if (!config.is_object()) Fail("a variant is not an object", config.dump());
    (void)config.dump();
    if (!metric.empty()) (void)FindFlatKey(config, metric);
  }
}

void CheckSpec(const Json& doc) {
  auto spec = head::ExperimentSpec::Parse(doc, /*default_seed=*/12345);
  if (!spec.ok()) return;
  auto space = head::SearchSpace::Parse(spec->param_space);
  if (!space.ok()) Fail("an accepted spec's param_space does not parse", space.status().ToString());
  ExploreSpace(*space, spec->seed, spec->num_samples, spec->metric);

  // What the head stores and reads back after a restart.
  head::Experiment e;
  e.experiment_id = "e0001";
  e.spec = *spec;
  e.total_variants = space->NumVariants(spec->num_samples).value_or(0);
  const std::string stored = e.ToJson().dump();
  Json reread = Json::parse(stored, nullptr, /*allow_exceptions=*/false);
  if (reread.is_discarded()) Fail("a stored experiment is not JSON", stored);
  auto loaded = head::Experiment::FromJson(reread);
  if (!loaded.ok()) Fail("a stored experiment does not load", loaded.status().ToString());
  if (loaded->spec.ToJson() != spec->ToJson()) {
    Fail("the spec changed across store and load",
         spec->ToJson().dump() + " became " + loaded->spec.ToJson().dump());
  }
  // Criteria are any-of: their order does not matter, their set does.
  auto before = spec->stop, after = loaded->spec.stop;
  std::sort(before.begin(), before.end());
  std::sort(after.begin(), after.end());
  if (before != after) {
    Fail("the stopping criteria changed across store and load", doc.dump());
  }
}

}  // namespace
}  // namespace ztune::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ztune::fuzz;
  auto doc = ztune::ParseJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!doc.ok()) return 0;
  CheckSpec(*doc);
  auto space = ztune::head::SearchSpace::Parse(*doc);
  if (space.ok()) ExploreSpace(*space, 7, 3, "a/b");
  return 0;
}
