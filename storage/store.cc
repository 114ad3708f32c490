#include "storage/store.h"

namespace ztune::storage {

const char* FamilyName(Family f) {
  switch (f) {
    case Family::kMeta:
      return "meta";
    case Family::kExperiments:
      return "experiments";
    case Family::kTrials:
      return "trials";
    case Family::kResults:
      return "results";
    case Family::kCheckpoints:
      return "checkpoints";
  }
  return "unknown";
}

}  // namespace ztune::storage
