// Quantiles as NumPy computes them (the default "linear" method), so that a
// scheduler's cutoffs match Ray Tune's to the last bit: ASHA's cutoff is
// np.nanpercentile of the values recorded at a rung, median stopping takes
// np.median / np.nanmedian.
#pragma once

#include <vector>

namespace ztune::head {

// np.nanpercentile(values, q) for q in [0, 100]: NaN values are left out;
// NaN when nothing is left. Interpolates between neighbours like NumPy's
// _lerp (from the nearer end), so an infinite neighbour gives NaN or an
// infinity exactly where NumPy does. Takes `values` by value: it sorts.
double NanPercentile(std::vector<double> values, double q);

}  // namespace ztune::head
