// Reductions of a contiguous run with independent accumulator lanes: a single
// accumulator is a chain of dependent operations (one add per cycle at best),
// independent lanes vectorise. Shared by the Reduce* ops and the global pools.
#pragma once

#include <array>
#include <cstdint>

namespace tessera::kernels {

// comb-folds load(0) .. load(n-1) into init, kLanes at a time, then folds the
// lanes pairwise (the wide steps vectorise too; one by one, a short run spent
// most of its time there), then the tail in order.
template <int kLanes, class A, class Load, class Comb>
inline A fold_lanes(int64_t n, A init, Load load, Comb comb) {
  std::array<A, kLanes> acc;
  acc.fill(init);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    // Unrolled fully, the lanes become scalars that GCC cannot vectorize.
#pragma GCC unroll 1
    for (int j = 0; j < kLanes; ++j) acc[static_cast<size_t>(j)] = comb(acc[static_cast<size_t>(j)], load(i + j));
  }
  for (int w = kLanes / 2; w >= 1; w /= 2) {
    for (int j = 0; j < w; ++j) {
      acc[static_cast<size_t>(j)] = comb(acc[static_cast<size_t>(j)], acc[static_cast<size_t>(j + w)]);
    }
  }
  A r = acc[0];
  for (; i < n; ++i) r = comb(r, load(i));
  return r;
}

}  // namespace tessera::kernels
