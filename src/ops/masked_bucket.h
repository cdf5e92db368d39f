// The ops of a masked shape bucket (passes/masked_bucket.h): an engine compiled at the bucket's largest dims serves
// every request up to them, its input zero-padded at the end of the varying dims, the padding kept zero where a
// convolution would read it, and each result sliced back to the request's size. All three are ai.tessera ops the
// native backend runs; R is the request's input, read for its dims alone.
//
//   PadTo(X) -> Y            dims: Y's dims (each >= X's). Y = X in X's box, 0 elsewhere.
//   ValidMask(R) -> M        dims: M's dims (float32). M = 1 where every masked axis's index is below that axis's
//                            valid size, 0 elsewhere.
//   SliceValid(X, R) -> Y    Y = X's box from 0 to the valid size along each masked axis (its other dims whole).
//
// The masked axes (ValidMask, SliceValid): attributes `axes` (the axes of M or X), `sources` (per axis, the dim of R
// its size follows from) and `steps` (per axis, a count n then n pairs a, s): the valid size along the axis is R's
// dim, then v = floor((v + a) / s) + 1 for each pair, as each convolution or pool on the way transforms it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "util/status.h"

namespace tessera::masked {

// A masked axis: where its valid size comes from and how each op on the way changed it.
struct Extent {
  int64_t source = 0;                              // the dim of R
  std::vector<std::pair<int64_t, int64_t>> steps;  // (a, s): v -> floor((v + a) / s) + 1
  bool operator==(const Extent& o) const { return source == o.source && steps == o.steps; }
  bool operator<(const Extent& o) const { return source != o.source ? source < o.source : steps < o.steps; }
};

// The valid size along an extent for a request whose R dims are `r`; <= 0 where the request is too small for the ops.
int64_t valid_size(const Extent& e, const std::vector<int64_t>& r);

// The attributes `axes`, `sources`, `steps` of a ValidMask / SliceValid node for these (axis, extent) pairs.
void set_extent_attrs(Node& n, const std::vector<std::pair<int64_t, Extent>>& axes);
// Reads them back; an error naming the node where they do not make sense for a tensor of rank `rank`.
Expected<std::vector<std::pair<int64_t, Extent>>> extent_attrs(const Node& n, int64_t rank);

inline constexpr const char* kDomain = "ai.tessera";

}  // namespace tessera::masked
