#include "head/quantile.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ztune::head {

namespace {

// NumPy's _lerp: from `a` for t < 0.5, from `b` otherwise.
double Lerp(double a, double b, double t) {
  const double diff = b - a;
  return t >= 0.5 ? b - diff * (1 - t) : a + diff * t;
}

}  // namespace

double NanPercentile(std::vector<double> values, double q) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return std::isnan(v); }),
               values.end());
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  // np.percentile divides by 100 first; the virtual index is (n - 1) * q.
  const double virtual_index = static_cast<double>(n - 1) * (q / 100.0);
  size_t previous;
  size_t next;
  if (virtual_index < 0) {
    previous = next = 0;
  } else if (virtual_index >= static_cast<double>(n - 1)) {
    previous = next = n - 1;
  } else {
    previous = static_cast<size_t>(std::floor(virtual_index));
    next = previous + 1;
  }
  const double gamma = virtual_index - std::floor(virtual_index);
  return Lerp(values[previous], values[next], gamma);
}

}  // namespace ztune::head
