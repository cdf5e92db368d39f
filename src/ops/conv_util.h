// Geometry shared by the convolution and pooling families: reading the
// kernel/stride/dilation/pad attributes, the output size of one spatial axis
// under each auto_pad mode, and float32 conversion helpers for the dtypes the
// float kernels serve by conversion.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/shape.h"
#include "ir/tensor.h"
#include "ops/op_registry.h"
#include "util/status.h"

namespace tessera {

enum class AutoPad { kNotSet, kValid, kSameUpper, kSameLower };

struct SpatialAttrs {
  int rank = 0;                    // number of spatial axes
  AutoPad auto_pad = AutoPad::kNotSet;
  std::vector<int64_t> kernel;     // may hold -1 when unknown (Conv without kernel_shape)
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  std::vector<int64_t> pads;       // 2*rank: begins then ends
  bool ceil_mode = false;
};

// Reads auto_pad, kernel_shape, strides, dilations, pads (and ceil_mode when
// `with_ceil`) for `rank` spatial axes. `kernel_from_weights` is used when
// kernel_shape is absent (Conv); pools pass an empty vector and require it.
Status read_spatial_attrs(const Node& node, int rank, const std::vector<int64_t>& kernel_from_weights, bool with_ceil,
                          SpatialAttrs* out);

// Output size and the pads actually applied on one axis of a convolution or
// pooling window. `out` is -1 when `in` is unknown.
struct AxisGeometry {
  int64_t out = -1;
  int64_t pad_begin = 0;
  int64_t pad_end = 0;
};
AxisGeometry conv_axis(int64_t in, const SpatialAttrs& a, int axis);

// Concrete geometry of every spatial axis; fails when an output size would
// be negative (window larger than the padded input).
struct Geometry {
  std::vector<int64_t> in, out, kernel, strides, dilations, pad_begin, pad_end;
  int64_t in_size() const;   // product of in
  int64_t out_size() const;  // product of out
  int64_t kernel_size() const;
  // The flat offset, over the first `axes` spatial axes, of the input element
  // that kernel position kidx reads for output position oidx; false when it
  // falls in the padding.
  bool input_offset(const int64_t* oidx, const int64_t* kidx, size_t axes, int64_t* offset) const;
};
Expected<Geometry> conv_geometry(const Dims& in_spatial, const SpatialAttrs& a, const std::string& who);

// Spatial output shape for inference, with unknown input dims giving unknown
// output dims.
std::vector<Dim> conv_output_dims(const Shape& x, const SpatialAttrs& a);

// Concrete shape checks and geometry of a convolution-like node: X [N,C,D...]
// and W [M,C/group,K...] must agree in rank, channels and group, and the
// kernel_shape attribute (if any) must match W.
struct ConvSetup {
  int64_t n = 0, c = 0, m = 0, group = 1, cg = 0, mg = 0;
  Geometry g;
};
Expected<ConvSetup> conv_setup(const Node& node, const Dims& xd, const Dims& wd);

// Output 0 of a convolution-like node (Conv, ConvInteger, QLinearConv): X at
// input x_index [N,C,D...], W at w_index [M,C/group,K...]; symbolic-aware.
Status infer_conv_output(InferContext& ctx, int x_index, int w_index, DType out_dtype);

// Tensors of float16/bfloat16/float64 are served by float32 kernels through
// these conversions.
Tensor to_float32(const Tensor& t);
void assign_from_float32(const Tensor& src, Tensor* dst);

}  // namespace tessera
