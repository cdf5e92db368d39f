// Lowering of convolutions to GEMM for NC[D]HW float32 tensors.
//
// Conv: Y[oc, p] = sum_k W[oc, k] * col[k, p] where k runs over (c, kernel
// offsets) and p over output positions. Im2colSource produces `col` straight
// into the GEMM's packed B panels, one block at a time, so the full im2col
// matrix is never materialised.
//
// ConvTranspose: col = W^T * X, then col2im scatters col into Y.
//
// Depthwise convolution (one input channel per group) has too little reuse
// for GEMM; depthwise_conv2d computes it directly, row by row.
#pragma once

#include <cstdint>

#include "ops/conv_util.h"
#include "ops/kernels/gemm.h"
#include "util/parallel.h"

namespace tessera {

class Im2colSource final : public kernels::BPackSource {
 public:
  // `x` points at the first of `channels` input planes of one image/group.
  Im2colSource(const float* x, int64_t channels, const Geometry& g);
  void pack(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const override;

 private:
  const float* x_;
  int64_t channels_;
  const Geometry& g_;
};

// A 1-D or 2-D convolution without im2col: per band of output rows, the
// input rows it reads are copied once with their padding (and, at strides
// above 1, split into stride phases along each axis, so that the inputs of
// consecutive output columns sit side by side), and the GEMM reads the copy in
// place (GemmB::offsets): row k = (c, kh, kw) of the im2col matrix is the copy
// at an offset, its columns the output positions, row by row, with a few
// columns past each output row's end that are computed and dropped. The copy
// costs about the input's size, where im2col's costs the kernel's size times
// the output's. Bands are sized to stay in the L2 cache; with several, each
// thread of `pool` takes whole bands.
bool rows_conv_applies(const Geometry& g, int64_t channels);
// y[m, output positions] (row stride: the output size) = a * im2col(x), with beta and the epilogue as in
// kernels::gemm; x: `channels` input planes.
void conv_by_rows(Parallel* pool, int64_t m, const kernels::GemmA& a, const float* x, int64_t channels,
                  const Geometry& g, float beta, float* y, const kernels::Epilogue& ep);

// Output rows [oh0, oh0 + rows) of a 2-D convolution that runs by rows (rows_conv_applies) or is pointwise
// (is_pointwise), on the calling thread: y[c, r, :] (channel c at y + c * ldc, rows ow floats apart) = (a * im2col(x))
// with the epilogue, as conv_by_rows computes them (the same kernels and order of sums, so the same bits). For
// kernels that use the rows while they are in the cache (a max pool after the convolution).
void conv_band(int64_t m, const kernels::GemmA& a, const float* x, int64_t channels, const Geometry& g, int64_t oh0,
               int64_t rows, float* y, int64_t ldc, const kernels::Epilogue& ep);
// The output rows of a band by rows whose input copy stays in half the L2 cache, as conv_by_rows bands them (at
// least 1).
int64_t conv_band_rows(const Geometry& g, int64_t channels);

// True when the convolution is a plain GEMM on the input planes (every kernel
// extent 1, stride 1, no padding).
bool is_pointwise(const Geometry& g);

// Depthwise 2-D (or 1-D) convolution of one input plane `x` into `mult`
// output planes `y` with weights `w` (mult x kernel). When `accumulate` is
// set, y already holds values to add to. Applies bias (per output plane) and
// the epilogue's activation.
void depthwise_conv2d(const float* x, const float* w, const float* bias, int64_t mult, const Geometry& g,
                      bool accumulate, const kernels::Epilogue& ep, float* y);

// Scatters col [(mult * kernel), in_positions] into `mult` output planes of
// ConvTranspose, each starting from its `bias` value (0 when null). `g`
// describes the forward convolution from the output to the input: g.in =
// ConvTranspose output, g.out = its input.
void col2im(const float* col, int64_t mult, const Geometry& g, const float* bias, float* y);

// True when ConvTranspose's windows tile its (1-D or 2-D) output exactly: kernel == stride, no dilation, pads or
// output padding, so that every output is one input position times one tap.
bool convtranspose_tiles(const Geometry& g);
// col2im of such a geometry for input rows [i0, i1) alone: col holds [(mult * kernel), (i1 - i0) * input width],
// and only the output rows those input rows tile are written (no zeroing needed).
void col2im_tiles(const float* col, int64_t mult, const Geometry& g, int64_t i0, int64_t i1, const float* bias,
                  float* y);

}  // namespace tessera
