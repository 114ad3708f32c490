#include "head/experiment_scheduler.h"

#include "common/check.h"
#include "head/experiment_spec.h"
#include "head/asha_scheduler.h"
#include "head/hyperband_scheduler.h"
#include "head/median_stopping_scheduler.h"
#include "head/pbt_scheduler.h"

namespace ztune::head {

uint64_t IndexOfTrial(const Trial& t) {
  const std::optional<uint64_t> index = TrialIndexOf(t.experiment_id, t.trial_id);
  CHECK(index.has_value());
  return *index;
}

std::unique_ptr<ExperimentScheduler> MakeExperimentScheduler(const SchedulerSpec& spec) {
  switch (spec.type) {
    case SchedulerType::kFifo: return nullptr;
    case SchedulerType::kAsha: return std::make_unique<AshaScheduler>(spec.asha);
    case SchedulerType::kHyperBand: return std::make_unique<HyperBandScheduler>(spec.hyperband);
    case SchedulerType::kPbt: return std::make_unique<PbtScheduler>(spec.pbt);
    case SchedulerType::kMedianStopping:
      return std::make_unique<MedianStoppingScheduler>(spec.median_stopping);
  }
  CHECK(false);
  return nullptr;
}

}  // namespace ztune::head
