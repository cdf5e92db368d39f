// Masked shape buckets: one engine for a range of sizes, exact at every size in it.
//
// A shape bucket compiled at exact dims serves those dims alone, and a new size runs on native. A masked bucket is
// the graph rewritten so that engines compiled at the bucket's largest dims U serve every request at dims up to U
// along the model's varying (symbolic) dims, with ONNX's results at the request's own dims:
//
//   - the varying input is zero-padded at the end of its varying dims to U (ai.tessera PadTo);
//   - the ops after it that only look at neighbouring positions along those dims (convolutions with explicit pads,
//     pools without end padding along them, max pools with end padding over tensors without negative elements (a
//     Relu's), average pools that count their pads, pointwise ops, BatchNormalization, binary ops with constants
//     that do not vary along them, Concat across other axes) run at U; each tensor keeps a valid size per varying
//     axis, the request's size transformed by each convolution and pool on the way (ops/masked_bucket.h);
//   - before a convolution whose end padding would read past a tensor's valid size, the positions past it are
//     multiplied by 0 (ValidMask, Mul): they read as the zero padding they stand for. (The padded input is zero
//     there already; a Relu keeps it so.) The same zeros stand for a max pool's -inf padding where no element is
//     negative (each window of a valid output holds a valid element, at least 0), and for an average pool's padding
//     where the pads are counted. A convolution or pool reads no further than its end padding past the valid size,
//     so every position within the valid sizes is what ONNX computes at the request's dims;
//   - where a tensor reaches an op of another kind (a reduction, a reshape, a MatMul over the axis, anything not
//     listed) or a graph output, it is sliced back to its valid size (SliceValid) and the rest of the graph runs as
//     it was, at the request's dims.
//
// The padded positions hold what the ops compute from zeros, finite where the model is (only ops that keep finite
// values finite are allowed before a mask). What is wasted is the padding: a bucket every 32 columns wastes 16 on
// average.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "util/status.h"

namespace tessera {

// The graph of a masked bucket of `g` at `upper`, the largest dims of the bucket for each graph input (an input
// whose dims `g` knows keeps them). One input may have symbolic dims, all at spatial positions (dim 2 on) of a rank
// 3 to 5 tensor; those are the varying dims. The result has `g`'s inputs (the varying one still symbolic) and
// outputs. Fails with the reason where `g` has no such bucket: another input has symbolic dims, a symbolic dim is
// the batch or channels, or no convolution reads the padded input.
Expected<Graph> masked_bucket_graph(const Graph& g, const std::vector<Dims>& upper);

}  // namespace tessera
