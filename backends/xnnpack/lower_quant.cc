// Lowerings of the quantized ops: QLinearMatMul (XNNPACK's int8 fully
// connected), QuantizeLinear (the plugin's own loop: XNNPACK's conversion
// multiplies by 1 / scale, which rounds some ties the other way),
// DequantizeLinear (XNNPACK's conversion, (q - zero point) * scale, exact),
// and ai.tessera.QLinearLookup (the plugin's own table loop). QLinearConv is
// in lower_window.cc. Input: one ONNX node. Output: XNNPACK nodes or own steps
// on int8 tensors (uint8 values flipped into the int8 domain, program.h).
// Method: constant per-tensor scales and zero points, recorded per value
// (set_quant), so that every tensor of a value carries its quantization.
#include <cmath>

#include "lowering.h"

namespace tessera_xnn {

namespace {

float one_scale(Lowering& L, const onnx::NodeProto& n, int i, const std::string& what) {
  if (n.input_size() <= i || n.input(i).empty()) refuse(what + " is missing");
  const std::vector<float> v = L.constant_floats(n.input(i), what.c_str());
  if (v.size() != 1) refuse(what + " is not one value (per-axis quantization)");
  return v[0];
}

// An absent zero point is 0; a present one is a constant of `of`'s type.
int64_t one_zero_point(Lowering& L, const onnx::NodeProto& n, int i, const std::string& of, const std::string& what) {
  if (n.input_size() <= i || n.input(i).empty()) return 0;
  if (L.model().type(n.input(i)).dtype != L.model().type(of).dtype) refuse(what + " is not of its value's type");
  const std::vector<int64_t> v = L.constant_ints(n.input(i), what.c_str());
  if (v.size() != 1) refuse(what + " is not one value (per-axis quantization)");
  return v[0];
}

}  // namespace

QuantScales product_scales(Lowering& L, const onnx::NodeProto& n, int64_t count, const char* w, bool per_channel) {
  const std::string x = n.op_type() == "QLinearMatMul" ? "a" : "x";
  const float xs = one_scale(L, n, 1, x + "_scale"), ys = one_scale(L, n, 6, "y_scale");
  L.set_quant(n.input(0), xs, one_zero_point(L, n, 2, n.input(0), x + "_zero_point"));
  L.set_quant(n.output(0), ys, one_zero_point(L, n, 7, n.output(0), "y_zero_point"));
  const std::string ws_name = std::string(w) + "_scale", wz_name = std::string(w) + "_zero_point";
  const std::vector<float> ws = L.constant_floats(n.input(4), ws_name.c_str());
  if (ws.size() != 1 && (!per_channel || static_cast<int64_t>(ws.size()) != count)) {
    refuse(ws_name + " has " + std::to_string(ws.size()) + " values for " + std::to_string(count) + " outputs" +
           (per_channel ? "" : " (XNNPACK's int8 fully connected takes one)"));
  }
  const bool u8 = L.model().type(n.input(3)).dtype == TESSERA_DTYPE_UINT8;
  if (n.input_size() > 5 && !n.input(5).empty()) {
    if (L.model().type(n.input(5)).dtype != L.model().type(n.input(3)).dtype) refuse(wz_name + " is not of W's type");
    for (int64_t z : L.constant_ints(n.input(5), wz_name.c_str())) {
      if (z != (u8 ? 128 : 0)) {
        refuse(std::string(w) + " with zero point " + std::to_string(z) +
               " (XNNPACK takes int8 weights with zero point 0, or uint8 ones with 128)");
      }
    }
  } else if (u8) {
    refuse("uint8 weights with zero point 0 (XNNPACK takes uint8 weights with zero point 128)");
  }
  QuantScales q;
  for (int64_t j = 0; j < count; ++j) {
    const float s = ws[ws.size() == 1 ? 0 : static_cast<size_t>(j)];
    if (!std::isfinite(s) || !(s > 0)) refuse(ws_name + " is not positive");
    // XNNPACK's requantization scale, computed as native and ONNX Runtime compute it, must lie in [2^-32, 256).
    const float r = xs * s / ys;
    if (!(r >= 0x1p-32f && r < 256.f)) refuse("requantization scale " + std::to_string(r) + " outside [2^-32, 256)");
    q.weights.push_back(s);
    q.bias.push_back(xs * s);
  }
  return q;
}

// QLinearMatMul (a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp): A of
// rank 2 or more read as rows, a constant 2-D B with one scale.
void lower_qlinear_matmul(Lowering& L, const onnx::NodeProto& n) {
  if (n.input_size() != 8 || n.output_size() != 1) refuse("QLinearMatMul needs 8 inputs");
  const std::string &a = n.input(0), &b = n.input(3), &y = n.output(0);
  const Dims& ad = L.q_dims(a);
  if (ad.size() < 2) refuse("A of rank " + std::to_string(ad.size()));
  if (!L.is_constant(b)) refuse("B not constant");
  const Dims& bd = L.q_dims(b);
  if (bd.size() != 2) refuse("B of rank " + std::to_string(bd.size()) + " (XNNPACK takes a 2-D one)");
  L.q_dims(y);
  if (ad.back() != bd[0]) refuse("A " + dims_str(ad) + " and B " + dims_str(bd) + " do not multiply");
  const QuantScales q = product_scales(L, n, bd[1], "b", false);
  int32_t filter = L.qconstant(Transform::kCopy, b, bd, DType::kQS8, {q.weights[0]});
  L.emit(Op::kFullyConnected, {L.input(a, kPlain), filter}, L.output(y, kPlain), {1}, {-kInf, kInf});
}

// QuantizeLinear (x, y_scale, y_zero_point?): float32 x, 8-bit y, per tensor.
void lower_quantize(Lowering& L, const onnx::NodeProto& n) {
  if (n.input_size() < 2 || n.output_size() != 1) refuse("QuantizeLinear needs x and y_scale");
  const std::string &x = n.input(0), &y = n.output(0);
  L.float_dims(x);
  L.q_dims(y);
  L.set_quant(y, one_scale(L, n, 1, "y_scale"), one_zero_point(L, n, 2, y, "y_zero_point"));
  const Layout layout = L.preferred(x);
  const int32_t from = L.step_input(x, layout);
  L.add_step(Step{StepKind::kQuantize, from, L.step_output(y, layout)});
}

// DequantizeLinear (x, x_scale, x_zero_point?): 8-bit x, float32 y, per tensor.
void lower_dequantize(Lowering& L, const onnx::NodeProto& n) {
  if (n.input_size() < 2 || n.output_size() != 1) refuse("DequantizeLinear needs x and x_scale");
  const std::string &x = n.input(0), &y = n.output(0);
  L.q_dims(x);
  L.float_dims(y);
  L.set_quant(x, one_scale(L, n, 1, "x_scale"), one_zero_point(L, n, 2, x, "x_zero_point"));
  const Layout layout = L.preferred(x);
  L.emit(Op::kConvert, {L.input(x, layout)}, L.output(y, layout));
}

// ai.tessera.QLinearLookup (X, X2?, Table): a constant table of 256 entries
// (or 65,536 for two operands of one shape) in Y's type.
void lower_lookup(Lowering& L, const onnx::NodeProto& n) {
  if ((n.input_size() != 2 && n.input_size() != 3) || n.output_size() != 1) refuse("QLinearLookup takes 2 or 3 inputs");
  const bool binary = n.input_size() == 3;
  const std::string &x = n.input(0), &table = n.input(n.input_size() - 1), &y = n.output(0);
  const Dims& xd = L.q_dims(x);
  L.q_dims(y);
  if (!L.is_constant(table)) refuse("Table not constant");
  const int64_t entries = binary ? 65536 : 256;
  if (L.q_dims(table) != Dims{entries}) refuse("Table is not [" + std::to_string(entries) + "]");
  if (L.model().type(table).dtype != L.model().type(y).dtype) refuse("Table and Y differ in type");
  if (binary && L.q_dims(n.input(1)) != xd) refuse("X and X2 differ in shape");
  const Layout layout = L.preferred(x);
  const int32_t a = L.step_input(x, layout);
  const int32_t a2 = binary ? L.step_input(n.input(1), layout) : -1;
  const int32_t t = L.qconstant(Transform::kLookup, table, {entries}, DType::kQS8, {1.f});
  L.add_step(Step{StepKind::kLookup, a, L.step_output(y, layout), t, a2});
}

}  // namespace tessera_xnn
