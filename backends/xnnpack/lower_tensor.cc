// Lowerings of the remaining ops: Gemm and MatMul (fully connected with a
// constant weight), Softmax, the reshapes (Reshape, Flatten, Squeeze,
// Unsqueeze), Pad, Resize/Upsample (bilinear) and DepthToSpace. Input: one
// ONNX node. Output: XNNPACK nodes. Layout matters here: fully connected,
// softmax and reshapes read ONNX (plain) order, so an NHWC input is converted
// first (or read as is when both orders coincide); Pad follows its input's
// layout; Resize and DepthToSpace are NHWC ops.
#include <cmath>

#include "lowering.h"

namespace tessera_xnn {

using tessera_plugin::attr_float;
using tessera_plugin::attr_int;
using tessera_plugin::attr_ints;
using tessera_plugin::attr_string;
using tessera_plugin::has_attr;

namespace {

bool present(const onnx::NodeProto& n, int i) { return n.input_size() > i && !n.input(i).empty(); }

}  // namespace

void lower_gemm(Lowering& L, const onnx::NodeProto& n) {
  if (!present(n, 0) || !present(n, 1) || n.output_size() != 1) refuse("Gemm needs A and B");
  if (attr_int(n, "transA", 0)) refuse("Gemm with transA=1");
  if (!L.is_constant(n.input(1))) refuse("weights not constant");
  const Dims& a = L.float_dims(n.input(0));
  const Dims& b = L.float_dims(n.input(1));
  const Dims& y = L.float_dims(n.output(0));
  if (a.size() != 2 || b.size() != 2) refuse("Gemm operands must be 2-D");
  const bool trans_b = attr_int(n, "transB", 0) != 0;
  const float alpha = attr_float(n, "alpha", 1.f), beta = attr_float(n, "beta", 1.f);
  const int64_t cols = trans_b ? b[0] : b[1];
  if (!std::isfinite(alpha) || !std::isfinite(beta)) refuse("Gemm with a non-finite alpha or beta");
  // B [K,N] is XNNPACK's transposed filter; B^T [N,K] its plain one.
  int32_t filter = L.constant(Transform::kCopy, {n.input(1)}, b, alpha);
  int32_t in = L.input(n.input(0), kPlain);
  std::vector<int32_t> ins{in, filter};
  // C: a bias row when it is one value or one row, else an Add after.
  bool has_c = present(n, 2) && beta != 0.f;
  std::string c = has_c ? n.input(2) : "";
  if (has_c && L.is_constant(c)) {
    int64_t cn = numel(L.float_dims(c));
    const Dims& cd = L.float_dims(c);
    if (cn == 1 || (cd.back() == cols && cn == cols)) {
      ins.push_back(L.constant(Transform::kBroadcastRow, {c}, {cols}, beta));
      has_c = false;
    }
  }
  if (!has_c) {
    L.emit(Op::kFullyConnected, ins, L.output(n.output(0), kPlain), {trans_b ? 0 : 1}, {-kInf, kInf});
    return;
  }
  if (broadcast_dims(L.float_dims(c), y) != y) refuse("Gemm with a C that does not broadcast to the output");
  int32_t product = L.temp(y);
  L.emit(Op::kFullyConnected, ins, product, {trans_b ? 0 : 1}, {-kInf, kInf});
  int32_t bias;
  if (L.is_constant(c)) {
    bias = L.constant(Transform::kCopy, {c}, xnn_dims(L.float_dims(c), false), beta);
  } else {
    if (beta != 1.f) refuse("Gemm with a runtime C and beta != 1");
    bias = L.input(c, kPlain);
  }
  L.emit(Op::kAdd, {product, bias}, L.output(n.output(0), kPlain), {}, {-kInf, kInf});
}

void lower_matmul(Lowering& L, const onnx::NodeProto& n) {
  if (!present(n, 0) || !present(n, 1) || n.output_size() != 1) refuse("MatMul needs two inputs");
  const Dims& a = L.float_dims(n.input(0));
  const Dims& b = L.float_dims(n.input(1));
  L.float_dims(n.output(0));
  if (!L.is_constant(n.input(1))) refuse("weights not constant (the right operand is computed at run time)");
  if (b.size() != 2) refuse("MatMul with a rank-" + std::to_string(b.size()) + " right operand (only 2-D weights)");
  if (a.back() != b[0]) refuse("MatMul inner dims differ");
  int32_t filter = L.constant(Transform::kCopy, {n.input(1)}, b);
  L.emit(Op::kFullyConnected, {L.input(n.input(0), kPlain), filter}, L.output(n.output(0), kPlain), {1}, {-kInf, kInf});
}

void lower_softmax(Lowering& L, const onnx::NodeProto& n) {
  if (!present(n, 0) || n.output_size() != 1) refuse("Softmax needs an input");
  const Dims& x = L.float_dims(n.input(0));
  L.float_dims(n.output(0));
  const int64_t rank = static_cast<int64_t>(x.size());
  int64_t axis = attr_int(n, "axis", L.opset() >= 13 ? -1 : 1);
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1))
    refuse("Softmax axis " + std::to_string(axis) + " out of range");
  if (axis < 0) axis += rank;
  // XNNPACK normalizes over the last dim. Before opset 13 the axis splits the
  // input into [outer, inner] (a reshape); from 13 on it is one dim, which is
  // the last one once the trailing 1s are reshaped away.
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < rank; ++i) (i < axis ? outer : inner) *= x[static_cast<size_t>(i)];
  if (L.opset() >= 13) {
    for (int64_t i = axis + 1; i < rank; ++i) {
      if (x[static_cast<size_t>(i)] != 1) {
        refuse("Softmax over axis " + std::to_string(axis) + " of " + dims_str(x) + " (only the last axis)");
      }
    }
  }
  if (rank <= 1 || (axis == rank - 1)) {
    L.emit(Op::kSoftmax, {L.input(n.input(0), kPlain)}, L.output(n.output(0), kPlain));
    return;
  }
  int32_t flat = L.temp({outer, inner}), soft = L.temp({outer, inner});
  L.emit(Op::kReshape, {L.input_plain_memory(n.input(0))}, flat);
  L.emit(Op::kSoftmax, {flat}, soft);
  L.emit(Op::kReshape, {soft}, L.output(n.output(0), kPlain));
}

void lower_reshape(Lowering& L, const onnx::NodeProto& n) {
  if (!present(n, 0) || n.output_size() != 1) refuse(n.op_type() + " needs an input");
  // The output's static shape is known; the shape operands only have to be
  // constants (so the engine never depends on them).
  for (int i = 1; i < n.input_size(); ++i) {
    if (!n.input(i).empty() && !L.is_constant(n.input(i)))
      refuse(n.op_type() + " with a shape or axes input that is not constant");
  }
  // Float32 or 8-bit: an 8-bit value keeps its quantization.
  const Dims& x = L.dims(n.input(0));
  const Dims& y = L.dims(n.output(0));
  if (numel(x) != numel(y)) refuse("element count changes");
  if (L.model().type(n.input(0)).dtype != L.model().type(n.output(0)).dtype) refuse("element type changes");
  if (L.model().type(n.input(0)).dtype != TESSERA_DTYPE_FLOAT32) L.same_quant(n.input(0), n.output(0));
  L.emit(Op::kReshape, {L.input_plain_memory(n.input(0))}, L.output(n.output(0), kPlain));
}

void lower_pad(Lowering& L, const onnx::NodeProto& n) {
  if (!present(n, 0) || n.output_size() != 1) refuse("Pad needs an input");
  std::string mode = attr_string(n, "mode", "constant");
  if (mode != "constant") refuse("Pad mode " + mode + " (only constant)");
  const Dims& x = L.float_dims(n.input(0));
  L.float_dims(n.output(0));
  std::vector<int64_t> pads;
  float value = 0.f;
  if (L.opset() < 11) {
    pads = attr_ints(n, has_attr(n, "pads") ? "pads" : "paddings");
    value = attr_float(n, "value", 0.f);
  } else {
    if (!present(n, 1)) refuse("Pad without pads");
    pads = L.constant_ints(n.input(1), "pads");
    if (present(n, 2)) {
      std::vector<float> v = L.constant_floats(n.input(2), "constant_value");
      if (v.size() != 1) refuse("constant_value with " + std::to_string(v.size()) + " elements");
      value = v[0];
    }
    if (present(n, 3)) refuse("Pad with axes");
  }
  const size_t r = x.size();
  if (pads.size() != 2 * r)
    refuse("pads of length " + std::to_string(pads.size()) + " for a rank-" + std::to_string(r) + " input");
  for (int64_t p : pads) {
    if (p < 0) refuse("negative pads (cropping)");
  }
  if (r == 0) refuse("Pad of a scalar");
  Layout layout = L.preferred(n.input(0));
  std::vector<int64_t> ints(pads);
  if (layout == kNhwc) {  // channels-first order -> channels-last order, begins then ends
    for (size_t half = 0; half < 2; ++half) {
      Dims part(pads.begin() + static_cast<std::ptrdiff_t>(half * r),
                pads.begin() + static_cast<std::ptrdiff_t>((half + 1) * r));
      Dims perm = to_nhwc(part);
      std::copy(perm.begin(), perm.end(), ints.begin() + static_cast<std::ptrdiff_t>(half * r));
    }
  }
  L.emit(Op::kConstantPad, {L.input(n.input(0), layout)}, L.output(n.output(0), layout), ints, {value});
}

void lower_resize(Lowering& L, const onnx::NodeProto& n) {
  if (!present(n, 0) || n.output_size() != 1) refuse(n.op_type() + " needs an input");
  const Dims& x = L.float_dims(n.input(0));
  const Dims& y = L.float_dims(n.output(0));
  std::string mode = attr_string(n, "mode", "nearest");
  if (mode != "linear" && mode != "bilinear") refuse(n.op_type() + " mode " + mode + " (only linear)");
  if (x.size() != 4 || y.size() != 4 || y[0] != x[0] || y[1] != x[1]) {
    refuse(n.op_type() + " other than bilinear over the last two dims of a 4-D input");
  }
  // Coordinate mapping: before Resize-11 it is asymmetric.
  std::string coord = "asymmetric";
  if (n.op_type() == "Resize" && L.opset() >= 11)
    coord = attr_string(n, "coordinate_transformation_mode", "half_pixel");
  if (attr_int(n, "antialias", 0) != 0) refuse("Resize with antialias");
  if (has_attr(n, "axes")) refuse("Resize with axes");
  if (attr_int(n, "exclude_outside", 0) != 0) refuse("Resize with exclude_outside");
  int64_t flags = 0;
  if (coord == "align_corners") {
    flags = 8;  // XNN_FLAG_ALIGN_CORNERS
  } else if (coord == "asymmetric") {
    flags = 4;  // XNN_FLAG_TENSORFLOW_LEGACY_MODE
  } else if (coord == "pytorch_half_pixel") {
    if (y[2] == 1 || y[3] == 1) refuse("pytorch_half_pixel with an output dim of 1");
  } else if (coord != "half_pixel") {
    refuse("coordinate_transformation_mode " + coord);
  }
  // XNNPACK maps coordinates with input/output sizes; ONNX with the given
  // scales when there are any. They must agree.
  std::vector<float> scales;
  if (n.op_type() == "Upsample" && L.opset() < 9) {
    for (const auto& a : n.attribute()) {
      if (a.name() == "scales") scales.assign(a.floats().begin(), a.floats().end());
    }
  } else {
    int scales_at = n.op_type() == "Upsample" || L.opset() < 11 ? 1 : 2;
    if (present(n, scales_at)) scales = L.constant_floats(n.input(scales_at), "scales");
    if (n.op_type() == "Resize" && L.opset() >= 11 && present(n, 3)) L.constant_ints(n.input(3), "sizes");
  }
  if (!scales.empty() && flags != 8) {
    if (scales.size() != 4) refuse("scales of length " + std::to_string(scales.size()));
    for (size_t a = 2; a < 4; ++a) {
      double exact = static_cast<double>(y[a]) / static_cast<double>(x[a]);
      if (std::fabs(static_cast<double>(scales[a]) - exact) > 1e-6 * exact) {
        refuse("scale " + std::to_string(scales[a]) + " differs from output/input size " + std::to_string(exact));
      }
    }
  }
  L.emit(Op::kResizeBilinear, {L.input(n.input(0), kNhwc)}, L.output(n.output(0), kNhwc), {y[2], y[3], flags});
}

void lower_depth_to_space(Lowering& L, const onnx::NodeProto& n) {
  if (!present(n, 0) || n.output_size() != 1) refuse("DepthToSpace needs an input");
  const Dims& x = L.float_dims(n.input(0));
  L.float_dims(n.output(0));
  if (x.size() != 4) refuse("DepthToSpace on a rank-" + std::to_string(x.size()) + " input");
  std::string mode = attr_string(n, "mode", "DCR");
  if (mode != "DCR") refuse("DepthToSpace mode " + mode + " (only DCR)");
  int64_t block = attr_int(n, "blocksize", 0);
  if (block < 2) refuse("DepthToSpace blocksize " + std::to_string(block));
  L.emit(Op::kDepthToSpace, {L.input(n.input(0), kNhwc)}, L.output(n.output(0), kNhwc), {block});
}

}  // namespace tessera_xnn
