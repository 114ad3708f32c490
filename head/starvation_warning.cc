#include "head/starvation_warning.h"

namespace ztune::head {

bool StarvationWarning::Due(TimeMs now, bool any_running, bool any_waiting) {
  last_now_ = now;
  if (any_running || !any_waiting) {
    since_ = -1;
    return false;
  }
  if (since_ < 0) {
    since_ = now;
    return false;
  }
  if (now - since_ < interval_ms_) return false;
  if (last_warning_ >= 0 && now - last_warning_ < interval_ms_) return false;
  last_warning_ = now;
  return true;
}

}  // namespace ztune::head
