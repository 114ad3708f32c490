#include "head/experiment_scheduler.h"

#include "common/check.h"
#include "head/asha_scheduler.h"
#include "head/hyperband_scheduler.h"
#include "head/median_stopping_scheduler.h"
#include "head/pbt_scheduler.h"

namespace ztune::head {

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
