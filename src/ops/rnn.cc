// Recurrent layers: RNN, GRU and LSTM (ONNX opsets 7-17, including the
// opset-14 `layout` attribute).
//
// Input: X [T,B,I] (layout 0) or [B,T,I] (layout 1), weights W [D,G*H,I],
// R [D,G*H,H], optional bias, sequence_lens, initial states and peepholes.
// Output: Y [T,D,B,H] / [B,T,D,H] and the final states Y_h (and Y_c).
//
// Method: per direction, the input projection of every time step X*W^T (+ the
// biases that are plain additive terms) is one large GEMM up front; the
// recurrence then does one small GEMM per step (H_{t-1}*R^T for the whole
// batch) followed by the gate arithmetic in vector-friendly passes over
// contiguous rows. W and R are packed transposed ([I,G*H], [H,G*H]) once at
// kernel creation when they are constants.
//
// com.microsoft DynamicQuantizeLSTM (what ONNX Runtime's quantize_dynamic
// makes of an LSTM) is the LSTM with 8-bit weights, stored transposed
// (W [D,I,4H], R [D,H,4H]) with a scale per direction or per gate column and
// one zero point per direction. As ONNX Runtime computes it, each product
// quantizes its float operand at run time as DynamicQuantizeLinear does (X
// once over every step that runs, H at every step), multiplies exactly in
// int32, and scales the sums by a_scale * w_scale[column] to float; the
// bias is added after both products, just before each gate's activation.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ops/dynamic_quantize_math.h"
#include "ops/elementwise_math.h"
#include "ops/kernels/gemm.h"
#include "ops/op_registry.h"
#include "ops/quantize_gemm.h"
#include "ops/rnn_gemm.h"

namespace tessera {
namespace {

enum class Cell { kRnn, kGru, kLstm };

// Inputs 8-11 of DynamicQuantizeLSTM: the scales and zero points of W and R.
constexpr int kWScale = 8, kWZeroPoint = 9, kRScale = 10, kRZeroPoint = 11;

int gates_of(Cell c) { return c == Cell::kRnn ? 1 : c == Cell::kGru ? 3 : 4; }
int acts_of(Cell c) { return c == Cell::kRnn ? 1 : c == Cell::kGru ? 2 : 3; }

// ---- activation functions -------------------------------------------------

enum class ActKind {
  kSigmoid, kTanh, kRelu, kAffine, kLeakyRelu, kThresholdedRelu, kScaledTanh, kHardSigmoid, kElu,
  kSoftsign, kSoftplus
};

struct Act {
  ActKind kind = ActKind::kSigmoid;
  float alpha = 0.f;
  float beta = 0.f;
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Parses the `activations` attribute. Alphas and betas are consumed in order
// by the activations that take them; missing ones take the defaults of the
// corresponding ONNX operators.
Status parse_activations(const Node& node, Cell cell, int num_dirs, std::vector<Act>* out) {
  static const char* kDefaults[3][3] = {{"Tanh"}, {"Sigmoid", "Tanh"}, {"Sigmoid", "Tanh", "Tanh"}};
  int per_dir = acts_of(cell);
  std::vector<std::string> names = node.has_attr("activations") ? node.attr("activations")->strings
                                                                 : std::vector<std::string>{};
  if (names.empty()) {
    for (int d = 0; d < num_dirs; ++d)
      for (int k = 0; k < per_dir; ++k) names.push_back(kDefaults[static_cast<int>(cell)][k]);
  }
  if (static_cast<int>(names.size()) == per_dir && num_dirs == 2) {
    std::vector<std::string> twice = names;
    twice.insert(twice.end(), names.begin(), names.end());
    names = twice;
  }
  if (static_cast<int>(names.size()) != per_dir * num_dirs) {
    return InvalidModel(node.describe() + ": expected " + std::to_string(per_dir * num_dirs) +
                        " activations, got " + std::to_string(names.size()));
  }
  std::vector<float> alphas = node.attr_floats("activation_alpha");
  std::vector<float> betas = node.attr_floats("activation_beta");
  size_t ai = 0, bi = 0;
  auto take_alpha = [&](float def) { return ai < alphas.size() ? alphas[ai++] : def; };
  auto take_beta = [&](float def) { return bi < betas.size() ? betas[bi++] : def; };
  out->clear();
  for (const std::string& raw : names) {
    std::string n = lower(raw);
    Act a;
    if (n == "sigmoid") {
      a.kind = ActKind::kSigmoid;
    } else if (n == "tanh") {
      a.kind = ActKind::kTanh;
    } else if (n == "relu") {
      a.kind = ActKind::kRelu;
    } else if (n == "affine") {
      a.kind = ActKind::kAffine;
      a.alpha = take_alpha(1.f);
      a.beta = take_beta(0.f);
    } else if (n == "leakyrelu") {
      a.kind = ActKind::kLeakyRelu;
      a.alpha = take_alpha(0.01f);
    } else if (n == "thresholdedrelu") {
      a.kind = ActKind::kThresholdedRelu;
      a.alpha = take_alpha(1.f);
    } else if (n == "scaledtanh") {
      a.kind = ActKind::kScaledTanh;
      a.alpha = take_alpha(1.f);
      a.beta = take_beta(1.f);
    } else if (n == "hardsigmoid") {
      a.kind = ActKind::kHardSigmoid;
      a.alpha = take_alpha(0.2f);
      a.beta = take_beta(0.5f);
    } else if (n == "elu") {
      a.kind = ActKind::kElu;
      a.alpha = take_alpha(1.f);
    } else if (n == "softsign") {
      a.kind = ActKind::kSoftsign;
    } else if (n == "softplus") {
      a.kind = ActKind::kSoftplus;
    } else {
      return Unsupported(node.describe() + ": unsupported activation '" + raw + "'");
    }
    out->push_back(a);
  }
  return Status::Ok();
}

// Applies `a` in place to n values, optionally clipping the input first.
template <class T>
void apply_act(const Act& a, T* x, int64_t n, T clip) {
  if (clip > T(0)) {
    for (int64_t i = 0; i < n; ++i) x[i] = std::min(std::max(x[i], -clip), clip);
  }
  const T al = static_cast<T>(a.alpha), be = static_cast<T>(a.beta);
  switch (a.kind) {
    case ActKind::kSigmoid:
      if constexpr (std::is_same_v<T, float>) {
        for (int64_t i = 0; i < n; ++i) x[i] = fastmath::sigmoid(x[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) x[i] = T(1) / (T(1) + std::exp(-x[i]));
      }
      break;
    case ActKind::kTanh:
      if constexpr (std::is_same_v<T, float>) {
        for (int64_t i = 0; i < n; ++i) x[i] = fastmath::tanh(x[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
      }
      break;
    case ActKind::kRelu:
      for (int64_t i = 0; i < n; ++i) x[i] = std::max(x[i], T(0));
      break;
    case ActKind::kAffine:
      for (int64_t i = 0; i < n; ++i) x[i] = al * x[i] + be;
      break;
    case ActKind::kLeakyRelu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] < T(0) ? al * x[i] : x[i];
      break;
    case ActKind::kThresholdedRelu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] > al ? x[i] : T(0);
      break;
    case ActKind::kScaledTanh:
      for (int64_t i = 0; i < n; ++i) x[i] = al * std::tanh(be * x[i]);
      break;
    case ActKind::kHardSigmoid:
      for (int64_t i = 0; i < n; ++i) x[i] = std::min(T(1), std::max(T(0), al * x[i] + be));
      break;
    case ActKind::kElu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] < T(0) ? al * (std::exp(x[i]) - T(1)) : x[i];
      break;
    case ActKind::kSoftsign:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (T(1) + std::abs(x[i]));
      break;
    case ActKind::kSoftplus:
      for (int64_t i = 0; i < n; ++i) x[i] = std::log1p(std::exp(x[i]));
      break;
  }
}

// ---- attributes -----------------------------------------------------------

struct RnnAttrs {
  Cell cell = Cell::kLstm;
  int64_t hidden = -1;  // -1: take from R
  int num_dirs = 1;
  bool reverse_only = false;
  int64_t layout = 0;
  float clip = 0.f;  // 0 = no clipping
  bool input_forget = false;
  bool linear_before_reset = false;
  std::vector<Act> acts;  // acts_of(cell) per direction
};

Status parse_attrs(const Node& node, Cell cell, RnnAttrs* a) {
  a->cell = cell;
  a->hidden = node.attr_int("hidden_size", -1);
  std::string dir = node.attr_string("direction", "forward");
  if (dir == "forward") {
    a->num_dirs = 1;
  } else if (dir == "reverse") {
    a->num_dirs = 1;
    a->reverse_only = true;
  } else if (dir == "bidirectional") {
    a->num_dirs = 2;
  } else {
    return InvalidModel(node.describe() + ": bad direction '" + dir + "'");
  }
  a->layout = node.attr_int("layout", 0);
  if (a->layout != 0 && a->layout != 1) return InvalidModel(node.describe() + ": layout must be 0 or 1");
  a->clip = node.has_attr("clip") ? node.attr_float("clip", 0.f) : 0.f;
  if (node.has_attr("clip") && !(a->clip > 0.f)) return InvalidModel(node.describe() + ": clip must be positive");
  a->input_forget = node.attr_int("input_forget", 0) != 0;
  a->linear_before_reset = node.attr_int("linear_before_reset", 0) != 0;
  return parse_activations(node, cell, a->num_dirs, &a->acts);
}

// ---- inference --------------------------------------------------------------

template <Cell kCell>
Status infer_rnn(InferContext& ctx) {
  const Node& node = ctx.node();
  RnnAttrs a;
  TSR_RETURN_IF_ERROR(parse_attrs(node, kCell, &a));
  const Shape& xs = ctx.in_shape(0);
  if (xs.rank_known && xs.rank() != 3) return ctx.error("X must be 3-D, got " + xs.str());
  const Shape& ws = ctx.in_shape(1);
  const Shape& rs = ctx.in_shape(2);
  if (ws.rank_known && ws.rank() != 3) return ctx.error("W must be 3-D, got " + ws.str());
  if (rs.rank_known && rs.rank() != 3) return ctx.error("R must be 3-D, got " + rs.str());
  // DynamicQuantizeLSTM: W [D, I, 4H] and R [D, H, 4H], 8-bit, with 12 inputs (the last four its scales and zero
  // points); its X is float32 and has no layout attribute.
  const bool quantized = node.op_type == "DynamicQuantizeLSTM";
  if (quantized) {
    if (node.inputs.size() != 12 || node.inputs[kWScale].empty() || node.inputs[kWZeroPoint].empty() ||
        node.inputs[kRScale].empty() || node.inputs[kRZeroPoint].empty()) {
      return ctx.error("takes 12 inputs, the last four (the scales and zero points of W and R) required");
    }
    if (ctx.in_dtype(0) != DType::kFloat32) return ctx.error("X must be float32");
    if (a.layout != 0) return ctx.error("has no layout attribute");
  }
  const int w_rows = quantized ? 2 : 1, w_cols = quantized ? 1 : 2;  // W's gate and input dims
  Dim hidden = a.hidden > 0 ? Dim(a.hidden) : (rs.rank_known ? rs[quantized ? 1 : 2] : Dim());
  Dim seq, batch;
  if (xs.rank_known) {
    seq = a.layout == 0 ? xs[0] : xs[1];
    batch = a.layout == 0 ? xs[1] : xs[0];
  }
  if (ws.rank_known && ws[w_rows].known() && hidden.known() && ws[w_rows].value != gates_of(kCell) * hidden.value) {
    return ctx.error("W has " + ws[w_rows].str() + " gate rows, expected " + std::to_string(gates_of(kCell)) +
                     " * hidden_size " + hidden.str());
  }
  if (ws.rank_known && ws[0].known() && ws[0].value != a.num_dirs) {
    return ctx.error("W's first dim " + ws[0].str() + " does not match the direction count");
  }
  if (xs.rank_known && ws.rank_known && xs[2].known() && ws[w_cols].known() && xs[2].value != ws[w_cols].value) {
    return ctx.error("X's input size " + xs[2].str() + " does not match W's " + ws[w_cols].str());
  }
  DType dt = ctx.in_dtype(0);
  Dim dirs(a.num_dirs);
  if (a.layout == 0) {
    ctx.set_output(0, dt, Shape({seq, dirs, batch, hidden}));
    ctx.set_output(1, dt, Shape({dirs, batch, hidden}));
    ctx.set_output(2, dt, Shape({dirs, batch, hidden}));
  } else {
    ctx.set_output(0, dt, Shape({batch, seq, dirs, hidden}));
    ctx.set_output(1, dt, Shape({batch, dirs, hidden}));
    ctx.set_output(2, dt, Shape({batch, dirs, hidden}));
  }
  return Status::Ok();
}

// ---- kernel -----------------------------------------------------------------

// Weights of one direction prepared for the matrix products: for float, the
// shared SGEMM's pre-packed panels of W^T and R^T (GRU's R split into its
// z|r and h column blocks); for double, plain transposes for rnn_gemm.
template <class T>
struct DirWeights {
  std::vector<T> wt, rt;  // double: [I,G*H], [H,G*H]
  kernels::PackedMatrix wp, rp, rp_zr, rp_h;  // float
};

template <class T>
struct PackedWeights {
  int64_t input = 0, hidden = 0;
  std::vector<DirWeights<T>> dirs;
  bool empty() const { return dirs.empty(); }
};

enum class RCols { kAll, kZr, kH };

template <class T>
PackedWeights<T> pack_weights(const Tensor& w, const Tensor& r, int num_dirs, Cell cell) {
  PackedWeights<T> p;
  p.input = w.dim(2);
  p.hidden = r.dim(2);
  const int64_t H = p.hidden, I = p.input;
  const int64_t n = gates_of(cell) * H;
  for (int d = 0; d < num_dirs; ++d) {
    DirWeights<T> dw;
    const T* wd = w.data<T>() + d * n * I;
    const T* rd = r.data<T>() + d * n * H;
    if constexpr (std::is_same_v<T, float>) {
      dw.wp = kernels::PackedMatrix::PackB(wd, I, true, I, n);
      if (cell == Cell::kGru) {
        dw.rp_zr = kernels::PackedMatrix::PackB(rd, H, true, H, 2 * H);
        dw.rp_h = kernels::PackedMatrix::PackB(rd + 2 * H * H, H, true, H, H);
      } else {
        dw.rp = kernels::PackedMatrix::PackB(rd, H, true, H, n);
      }
    } else {
      dw.wt = transpose_pack(wd, n, I);
      dw.rt = transpose_pack(rd, n, H);
    }
    p.dirs.push_back(std::move(dw));
  }
  return p;
}

// out[M, G*H] = x[M, I] * W^T + bias.
template <class T>
void project(Parallel* pool, int64_t M, int64_t N, int64_t K, const T* x, const DirWeights<T>& dw, T* out,
             const T* bias) {
  if constexpr (std::is_same_v<T, float>) {
    kernels::Epilogue ep;
    ep.bias_kind = kernels::Epilogue::Bias::kPerCol;
    ep.bias = bias;
    kernels::GemmA a{x, K, false, nullptr};
    kernels::GemmB b{nullptr, 0, false, &dw.wp, nullptr};
    kernels::gemm(pool, M, N, K, 1.f, a, b, 0.f, out, N, ep);
  } else {
    rnn_gemm<T>(pool, M, N, K, x, K, dw.wt.data(), N, out, N, bias);
  }
}

// c[M, cols] += a[M, H] * R^T[:, cols].
template <class T>
void recur(Parallel* pool, int64_t M, int64_t H, int64_t GH, RCols cols, const T* a, const DirWeights<T>& dw,
           T* c, int64_t ldc) {
  const int64_t n = cols == RCols::kAll ? GH : cols == RCols::kZr ? 2 * H : H;
  if constexpr (std::is_same_v<T, float>) {
    const kernels::PackedMatrix* pm = cols == RCols::kAll ? &dw.rp : cols == RCols::kZr ? &dw.rp_zr : &dw.rp_h;
    kernels::GemmA ga{a, H, false, nullptr};
    kernels::GemmB gb{nullptr, 0, false, pm, nullptr};
    kernels::gemm(pool, M, n, H, 1.f, ga, gb, 1.f, c, ldc);
  } else {
    const int64_t off = cols == RCols::kH ? 2 * H : 0;
    rnn_gemm_acc<T>(pool, M, n, H, a, H, dw.rt.data() + off, GH, c, ldc);
  }
}

// ---- DynamicQuantizeLSTM ------------------------------------------------------

// One direction's 8-bit weights packed for the integer GEMM (their zero point
// taken off), and each gate column's weight scale.
struct QuantDir {
  qgemm::QPackedB w, r;                 // [I, 4H], [H, 4H]
  std::vector<float> w_scale, r_scale;  // 4H each
};

struct QuantWeights {
  int64_t input = 0, hidden = 0;
  std::vector<QuantDir> dirs;
  bool empty() const { return dirs.empty(); }
};

// Checks one weight (W or R: [D, K, 4H], int8 or uint8) with its scale and
// zero point ([D], or [D, 4H] with one zero point value, 0 for int8, as ONNX
// Runtime requires) and packs it per direction.
Status pack_quant_weight(const Node& node, const char* name, const Tensor& w, const Tensor& scale,
                         const Tensor& zero_point, int D, int64_t K, int64_t GH, std::vector<QuantDir>* dirs,
                         bool recurrent) {
  const std::string what = node.describe() + ": " + name;
  if (w.dtype() != DType::kInt8 && w.dtype() != DType::kUInt8) return InvalidModel(what + " must be int8 or uint8");
  if (w.dims() != Dims{D, K, GH}) {
    return InvalidModel(what + " is " + dims_str(w.dims()) + ", expected " + dims_str(Dims{D, K, GH}));
  }
  const bool per_column = scale.rank() == 2;
  const Dims qdims = per_column ? Dims{D, GH} : Dims{D};
  if (scale.dtype() != DType::kFloat32 || (scale.dims() != Dims{D} && scale.dims() != Dims{D, GH})) {
    return InvalidModel(what + "'s scale must be float32 of shape [" + std::to_string(D) + "] or [" +
                        std::to_string(D) + "," + std::to_string(GH) + "]");
  }
  if (zero_point.dtype() != w.dtype() || zero_point.dims() != qdims) {
    return InvalidModel(what + "'s zero point must be " + dtype_name(w.dtype()) + " of shape " + dims_str(qdims));
  }
  const int64_t per_dir = per_column ? GH : 1;
  for (int d = 0; d < D; ++d) {
    const auto zp = static_cast<int32_t>(zero_point.as_int64(d * per_dir));
    for (int64_t j = 0; j < per_dir; ++j) {
      if (zero_point.as_int64(d * per_dir + j) != zp) {
        return Unsupported(what + "'s zero point must be one value per direction");
      }
    }
    if (w.dtype() == DType::kInt8 && zp != 0) return Unsupported(what + "'s int8 zero point must be 0");
    const qgemm::Int8Ref ref{static_cast<const uint8_t*>(w.raw()) + d * K * GH, w.dtype() == DType::kInt8};
    const qgemm::QMatrixB src(ref, GH, K, GH, qgemm::ZeroPoints{&zp, 0});
    QuantDir& qd = (*dirs)[static_cast<size_t>(d)];
    (recurrent ? qd.r : qd.w) = qgemm::QPackedB::Pack(src, K, GH);
    std::vector<float>& sc = recurrent ? qd.r_scale : qd.w_scale;
    sc.resize(static_cast<size_t>(GH));
    for (int64_t j = 0; j < GH; ++j)
      sc[static_cast<size_t>(j)] = scale.data<float>()[d * per_dir + (per_column ? j : 0)];
  }
  return Status::Ok();
}

Expected<QuantWeights> pack_quant(const Node& node, const Tensor& w, const Tensor& r, const Tensor& w_scale,
                                  const Tensor& w_zp, const Tensor& r_scale, const Tensor& r_zp, int D,
                                  int64_t hidden) {
  if (w.rank() != 3 || r.rank() != 3) return InvalidModel(node.describe() + ": W and R must be 3-D");
  QuantWeights q;
  q.hidden = hidden > 0 ? hidden : r.dim(1);
  q.input = w.dim(1);
  q.dirs.resize(static_cast<size_t>(D));
  const int64_t GH = 4 * q.hidden;
  TSR_RETURN_IF_ERROR(pack_quant_weight(node, "W", w, w_scale, w_zp, D, q.input, GH, &q.dirs, false));
  TSR_RETURN_IF_ERROR(pack_quant_weight(node, "R", r, r_scale, r_zp, D, q.hidden, GH, &q.dirs, true));
  return q;
}

// Buffers of the quantized products, reused over the steps.
struct QuantScratch {
  std::vector<uint8_t> a;
  std::vector<int32_t> acc;
  std::vector<float> mult;
};

// One direction's working memory: the input projection of a chunk of steps and the states.
template <class T>
struct DirScratch {
  std::vector<T> xw, xg, h, c, tmp, tmp2, addb, rbh;
  QuantScratch quant;
};

// The quantization of x[0, n) as DynamicQuantizeLinear computes it.
dynq::Params quant_params(const float* x, int64_t n) {
  float mn = 0.f, mx = 0.f;
  dynq::min_max_with_zero(x, static_cast<size_t>(n), &mn, &mx);
  return dynq::params_from_range(mn, mx);
}

// c[M, N] = (accumulate ? c : 0) + float(sum_k (q(a)[m,k] - zp) * B[k,n]) * (p.scale * b_scale[n]),
// where q(a) is a[M, K] quantized with p (zero when p's scale is 0: a is all zeros).
void quant_product(Parallel* pool, const float* a, int64_t M, int64_t K, const dynq::Params& p,
                   const qgemm::QPackedB& b, const std::vector<float>& b_scale, float* c, int64_t ldc, bool accumulate,
                   QuantScratch* s) {
  const int64_t N = static_cast<int64_t>(b_scale.size());
  if (p.scale == 0.f) {
    if (!accumulate) {
      for (int64_t m = 0; m < M; ++m) std::fill(c + m * ldc, c + m * ldc + N, 0.f);
    }
    return;
  }
  const auto zp = static_cast<int32_t>(p.zero_point);
  s->a.resize(static_cast<size_t>(M * K));
  dynq::quantize_run<uint8_t>(a, M * K, p.scale, zp, s->a.data());
  const qgemm::QPackedA qa =
      qgemm::QPackedA::Pack(qgemm::Int8Ref{s->a.data(), false}, K, M, K, qgemm::ZeroPoints{&zp, 0});
  s->acc.resize(static_cast<size_t>(M * N));
  qgemm::qgemm(pool, qa, b, N, s->acc.data(), N);
  s->mult.resize(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) s->mult[static_cast<size_t>(n)] = p.scale * b_scale[static_cast<size_t>(n)];
  for (int64_t m = 0; m < M; ++m) {
    const int32_t* am = s->acc.data() + m * N;
    float* cm = c + m * ldc;
    if (accumulate) {
      for (int64_t n = 0; n < N; ++n) cm[n] += static_cast<float>(am[n]) * s->mult[static_cast<size_t>(n)];
    } else {
      for (int64_t n = 0; n < N; ++n) cm[n] = static_cast<float>(am[n]) * s->mult[static_cast<size_t>(n)];
    }
  }
}

bool is_half(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }

Tensor to_float(const Tensor& t) {
  Tensor f(DType::kFloat32, t.dims());
  for (int64_t i = 0; i < t.numel(); ++i) f.data<float>()[i] = static_cast<float>(t.as_double(i));
  return f;
}

class RnnKernel final : public Kernel {
 public:
  RnnKernel(RnnAttrs attrs) : a_(std::move(attrs)) {}

  static Expected<std::unique_ptr<Kernel>> create(const KernelInit& init, Cell cell) {
    RnnAttrs a;
    TSR_RETURN_IF_ERROR(parse_attrs(init.node, cell, &a));
    auto k = std::make_unique<RnnKernel>(std::move(a));
    if (init.node.op_type == "DynamicQuantizeLSTM") {
      k->quantized_ = true;
      auto c = [&](int i) { return static_cast<int>(init.const_inputs.size()) > i ? init.const_inputs[i] : nullptr; };
      if (c(1) && c(2) && c(kWScale) && c(kWZeroPoint) && c(kRScale) && c(kRZeroPoint)) {
        TSR_ASSIGN_OR_RETURN(k->quant_, pack_quant(init.node, *c(1), *c(2), *c(kWScale), *c(kWZeroPoint), *c(kRScale),
                                                   *c(kRZeroPoint), k->a_.num_dirs, k->a_.hidden));
      }
      return std::unique_ptr<Kernel>(std::move(k));
    }
    const Tensor* w = init.const_inputs.size() > 1 ? init.const_inputs[1] : nullptr;
    const Tensor* r = init.const_inputs.size() > 2 ? init.const_inputs[2] : nullptr;
    if (w && r && w->rank() == 3 && r->rank() == 3 && w->dtype() == r->dtype() &&
        w->dim(0) == k->a_.num_dirs && r->dim(0) == k->a_.num_dirs &&
        w->dim(1) == gates_of(cell) * r->dim(2) && r->dim(1) == w->dim(1)) {
      if (w->dtype() == DType::kFloat32) k->packed_f_ = pack_weights<float>(*w, *r, k->a_.num_dirs, cell);
      if (w->dtype() == DType::kFloat64) k->packed_d_ = pack_weights<double>(*w, *r, k->a_.num_dirs, cell);
      if (is_half(w->dtype())) {
        k->packed_f_ = pack_weights<float>(to_float(*w), to_float(*r), k->a_.num_dirs, cell);
      }
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }

  Status run(KernelContext& ctx) const override {
    const Tensor* x = ctx.input(0);
    if (quantized_) {
      if (x->dtype() != DType::kFloat32) return ctx.error("X must be float32");
      return run_typed<float>(ctx, packed_f_, &quant_);
    }
    switch (x->dtype()) {
      case DType::kFloat32: return run_typed<float>(ctx, packed_f_);
      case DType::kFloat64: return run_typed<double>(ctx, packed_d_);
      case DType::kFloat16:
      case DType::kBFloat16: return run_half(ctx);
      default: return Unsupported(ctx.node().describe() + ": dtype " + dtype_name(x->dtype()) + " is not supported");
    }
  }

 private:
  // `quant`: the weights of DynamicQuantizeLSTM (empty when they are not constants), null for the float ops.
  template <class T>
  Status run_typed(KernelContext& ctx, const PackedWeights<T>& prepacked, const QuantWeights* quant = nullptr) const;

  // float16/bfloat16: computes in float32 and rounds the outputs back.
  Status run_half(KernelContext& ctx) const {
    std::vector<Tensor> in(static_cast<size_t>(ctx.num_inputs()));
    std::vector<const Tensor*> in_ptrs(in.size(), nullptr);
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor* t = ctx.input(i);
      if (!t) continue;
      in[static_cast<size_t>(i)] = is_half(t->dtype()) ? to_float(*t) : *t;
      in_ptrs[static_cast<size_t>(i)] = &in[static_cast<size_t>(i)];
    }
    std::vector<Tensor> out(static_cast<size_t>(ctx.num_outputs()));
    std::vector<Tensor*> out_ptrs(out.size(), nullptr);
    for (int i = 0; i < ctx.num_outputs(); ++i) {
      const Tensor* t = ctx.output(i);
      if (!t || !t->defined()) continue;
      out[static_cast<size_t>(i)] = Tensor(DType::kFloat32, t->dims());
      out_ptrs[static_cast<size_t>(i)] = &out[static_cast<size_t>(i)];
    }
    KernelContext fctx(ctx.node(), in_ptrs, out_ptrs, &ctx.pool(), ctx.subgraphs());
    TSR_RETURN_IF_ERROR(run_typed<float>(fctx, packed_f_));
    for (int i = 0; i < ctx.num_outputs(); ++i) {
      Tensor* t = ctx.output(i);
      if (!out_ptrs[static_cast<size_t>(i)]) continue;
      const float* src = out[static_cast<size_t>(i)].data<float>();
      visit_dtype(t->dtype(), [&](auto tag) {
        using U = decltype(tag);
        if constexpr (std::is_same_v<U, Float16> || std::is_same_v<U, BFloat16>) {
          U* dst = t->data<U>();
          for (int64_t j = 0; j < t->numel(); ++j) dst[j] = U(src[j]);
        }
      });
    }
    return Status::Ok();
  }

  RnnAttrs a_;
  PackedWeights<float> packed_f_;
  PackedWeights<double> packed_d_;
  bool quantized_ = false;  // DynamicQuantizeLSTM
  QuantWeights quant_;
};

template <class T>
Status RnnKernel::run_typed(KernelContext& ctx, const PackedWeights<T>& prepacked, const QuantWeights* quant) const {
  const Node& node = ctx.node();
  const Tensor* x = ctx.input(0);
  const Tensor* w = ctx.input(1);
  const Tensor* r = ctx.input(2);
  const Tensor* bias = ctx.input(3);
  const Tensor* seq_lens = ctx.input(4);
  const Tensor* init_h = ctx.input(5);
  const Tensor* init_c = a_.cell == Cell::kLstm ? ctx.input(6) : nullptr;
  const Tensor* peep = a_.cell == Cell::kLstm ? ctx.input(7) : nullptr;
  const int G = gates_of(a_.cell);
  const int D = a_.num_dirs;
  if (!x || !w || !r || x->rank() != 3 || w->rank() != 3 || r->rank() != 3) {
    return ctx.error("X, W and R must be present and 3-D");
  }
  for (const Tensor* t : {quant ? nullptr : w, quant ? nullptr : r, bias, init_h, init_c, peep}) {
    if (t && t->dtype() != x->dtype()) return ctx.error("all float inputs must share X's dtype");
  }
  const int64_t T_ = a_.layout == 0 ? x->dim(0) : x->dim(1);
  const int64_t B = a_.layout == 0 ? x->dim(1) : x->dim(0);
  const int64_t I = x->dim(2);
  const int64_t H = quant ? r->dim(1) : r->dim(2);  // DynamicQuantizeLSTM's R is [D, H, 4H]
  const int64_t GH = G * H;
  if (a_.hidden > 0 && a_.hidden != H) return ctx.error("R's dims do not match hidden_size");
  QuantWeights quant_local;
  if (quant && (quant->empty() || quant->input != I || quant->hidden != H)) {
    const Tensor* qs[4] = {ctx.input(kWScale), ctx.input(kWZeroPoint), ctx.input(kRScale), ctx.input(kRZeroPoint)};
    for (const Tensor* t : qs) {
      if (!t) return ctx.error("the scales and zero points of W and R are required");
    }
    TSR_ASSIGN_OR_RETURN(quant_local, pack_quant(node, *w, *r, *qs[0], *qs[1], *qs[2], *qs[3], D, H));
    if (quant_local.input != I) {
      return ctx.error("W " + dims_str(w->dims()) + " does not match X " + dims_str(x->dims()));
    }
    quant = &quant_local;
  }
  if (!quant && (w->dim(0) != D || r->dim(0) != D || w->dim(1) != GH || r->dim(1) != GH || w->dim(2) != I)) {
    return ctx.error("W " + dims_str(w->dims()) + " / R " + dims_str(r->dims()) + " do not match X " +
                     dims_str(x->dims()) + " and hidden size " + std::to_string(H));
  }
  if (bias && (bias->rank() != 2 || bias->dim(0) != D || bias->dim(1) != 2 * GH)) {
    return ctx.error("B must be [" + std::to_string(D) + "," + std::to_string(2 * GH) + "]");
  }
  const Dims state_dims = a_.layout == 0 ? Dims{D, B, H} : Dims{B, D, H};
  if (init_h && init_h->dims() != state_dims) return ctx.error("initial_h must be " + dims_str(state_dims));
  if (init_c && init_c->dims() != state_dims) return ctx.error("initial_c must be " + dims_str(state_dims));
  if (peep && (peep->rank() != 2 || peep->dim(0) != D || peep->dim(1) != 3 * H)) {
    return ctx.error("P must be [" + std::to_string(D) + "," + std::to_string(3 * H) + "]");
  }
  std::vector<int64_t> lens(static_cast<size_t>(B), T_);
  if (seq_lens) {
    if (seq_lens->numel() != B) return ctx.error("sequence_lens must have batch_size entries");
    for (int64_t b = 0; b < B; ++b) {
      lens[static_cast<size_t>(b)] = seq_lens->as_int64(b);
      if (lens[static_cast<size_t>(b)] < 0 || lens[static_cast<size_t>(b)] > T_) {
        return ctx.error("sequence_lens entry out of range [0, seq_length]");
      }
    }
  }

  PackedWeights<T> local;
  const PackedWeights<T>* pw = &prepacked;
  if (!quant && (prepacked.empty() || prepacked.input != I || prepacked.hidden != H)) {
    local = pack_weights<T>(*w, *r, D, a_.cell);
    pw = &local;
  }

  Tensor* y = ctx.output(0);
  Tensor* yh = ctx.output(1);
  Tensor* yc = a_.cell == Cell::kLstm ? ctx.output(2) : nullptr;
  if (y && y->defined()) std::memset(y->raw(), 0, y->nbytes());
  if (yh && yh->defined()) std::memset(yh->raw(), 0, yh->nbytes());
  if (yc && yc->defined()) std::memset(yc->raw(), 0, yc->nbytes());

  const T clip = static_cast<T>(a_.clip);
  const T* xd = x->data<T>();
  // Row of X / XW for (t, b).
  auto xrow = [&](int64_t t, int64_t b) { return a_.layout == 0 ? t * B + b : b * T_ + t; };
  auto yoff = [&](int64_t t, int d, int64_t b) {
    return a_.layout == 0 ? ((t * D + d) * B + b) * H : ((b * T_ + t) * D + d) * H;
  };
  auto soff = [&](int d, int64_t b) { return a_.layout == 0 ? (d * B + b) * H : (b * D + d) * H; };

  // The input projection is computed for `chunk` steps at a time: all of
  // them unless that buffer would exceed 64 MiB (long sequences, big batches).
  const int64_t chunk = std::clamp<int64_t>((int64_t{64} << 20) / static_cast<int64_t>(sizeof(T)) /
                                                std::max<int64_t>(B * GH, 1),
                                            1, std::max<int64_t>(T_, 1));
  // One direction's working memory, the calling thread's own (directions side by side run on two threads). Kept
  // from run to run: allocated afresh, its megabytes were page-faulted in again on every run (a 589-step
  // bidirectional LSTM spent 6 ms of its 8 there on this VM).
  auto thread_scratch = [&]() -> DirScratch<T>& {
    thread_local DirScratch<T> s;
    s.xw.resize(static_cast<size_t>(chunk * B * GH));
    s.h.resize(static_cast<size_t>(B * H));
    s.c.resize(static_cast<size_t>(B * H));
    s.tmp.resize(static_cast<size_t>(B * H));
    s.tmp2.resize(static_cast<size_t>(B * H));
    s.addb.resize(static_cast<size_t>(GH));  // bias folded into the input projection
    s.rbh.resize(static_cast<size_t>(H));    // GRU linear_before_reset: Rb_h
    return s;
  };
  const bool all_full = std::all_of(lens.begin(), lens.end(), [&](int64_t l) { return l == T_; });
  // DynamicQuantizeLSTM: X is quantized once, over the steps any sequence runs (the rows both directions read).
  dynq::Params x_quant;
  if (quant) {
    if (a_.layout != 0) return ctx.error("layout must be 0");
    x_quant = quant_params(reinterpret_cast<const float*>(xd), *std::max_element(lens.begin(), lens.end()) * B * I);
  }

  auto run_direction = [&](int d) {
    DirScratch<T>& ds = thread_scratch();
    std::vector<T>&xw = ds.xw, &xg = ds.xg, &h = ds.h, &c = ds.c, &tmp = ds.tmp, &tmp2 = ds.tmp2, &addb = ds.addb,
    &rbh = ds.rbh;
    QuantScratch& scratch = ds.quant;
    const bool reverse = a_.reverse_only || d == 1;
    const Act* acts = &a_.acts[static_cast<size_t>(d * acts_of(a_.cell))];
    // Folded bias: Wb + Rb, except GRU's Rb_h under linear_before_reset.
    std::fill(addb.begin(), addb.end(), T(0));
    std::fill(rbh.begin(), rbh.end(), T(0));
    if (bias) {
      const T* bd = bias->data<T>() + d * 2 * GH;
      for (int64_t j = 0; j < GH; ++j) addb[j] = bd[j] + bd[GH + j];
      if (a_.cell == Cell::kGru && a_.linear_before_reset) {
        for (int64_t j = 0; j < H; ++j) {
          addb[2 * H + j] = bd[2 * H + j];
          rbh[j] = bd[GH + 2 * H + j];
        }
      }
    }
    static const DirWeights<T> kQuantized;  // the float weights DynamicQuantizeLSTM does not have
    const DirWeights<T>& dw = quant ? kQuantized : pw->dirs[static_cast<size_t>(d)];
    const QuantDir* qd = quant ? &quant->dirs[static_cast<size_t>(d)] : nullptr;
    // DynamicQuantizeLSTM adds the bias after both products, just before each gate's activation.
    const T* late_bias = quant && bias ? addb.data() : nullptr;

    // Initial states.
    for (int64_t b = 0; b < B; ++b) {
      T* hb = h.data() + b * H;
      T* cb = c.data() + b * H;
      if (init_h)
        std::memcpy(hb, init_h->data<T>() + soff(d, b), sizeof(T) * H);
      else
        std::fill(hb, hb + H, T(0));
      if (init_c)
        std::memcpy(cb, init_c->data<T>() + soff(d, b), sizeof(T) * H);
      else
        std::fill(cb, cb + H, T(0));
    }
    const T* pi = peep ? peep->data<T>() + d * 3 * H : nullptr;
    const T* po = pi ? pi + H : nullptr;
    const T* pf = pi ? pi + 2 * H : nullptr;

    for (int64_t step = 0; step < T_; ++step) {
      const int64_t t = reverse ? T_ - 1 - step : step;
      // For reversed sequences of length L < T, batch b's step s reads time
      // L-1-s; handle that by per-batch time indices.
      auto time_of = [&](int64_t b) { return reverse ? lens[static_cast<size_t>(b)] - 1 - step : step; };
      auto active = [&](int64_t b) { return step < lens[static_cast<size_t>(b)]; };
      if (step % chunk == 0) {
        // Rows (step, batch) of X * W^T + addb for the next chunk of steps;
        // batch entry b reads its own time index (reversed, shorter sequences).
        const int64_t len = std::min(chunk, T_ - step);
        const T* a = xd + step * B * I;
        if (!(a_.layout == 0 && !reverse)) {
          xg.resize(static_cast<size_t>(len * B * I));
          for (int64_t s = 0; s < len; ++s) {
            for (int64_t b = 0; b < B; ++b) {
              const int64_t st = step + s;
              int64_t tb = reverse ? lens[static_cast<size_t>(b)] - 1 - st : st;
              if (st >= lens[static_cast<size_t>(b)]) tb = 0;
              std::memcpy(xg.data() + (s * B + b) * I, xd + xrow(tb, b) * I, sizeof(T) * I);
            }
          }
          a = xg.data();
        }
        bool projected = false;
        if constexpr (std::is_same_v<T, float>) {
          if (qd) {
            quant_product(&ctx.pool(), a, len * B, I, x_quant, qd->w, qd->w_scale, xw.data(), GH, false, &scratch);
            projected = true;
          }
        }
        if (!projected) project<T>(&ctx.pool(), len * B, GH, I, a, dw, xw.data(), addb.data());
      }
      // gates = XW[step] (+ H*R^T below), updated in place.
      T* const gates = xw.data() + (step % chunk) * B * GH;
      if (a_.cell == Cell::kGru) {
        // z and r: gates[:, 0:2H] += H * R[0:2H]^T.
        recur<T>(&ctx.pool(), B, H, GH, RCols::kZr, h.data(), dw, gates, GH);
        for (int64_t b = 0; b < B; ++b) {
          T* g = gates + b * GH;
          apply_act(acts[0], g, 2 * H, clip);  // z and r share f
        }
        if (a_.linear_before_reset) {
          // tmp = H * Rh^T + Rb_h; then h~ = g(xw_h + r . tmp).
          for (int64_t b = 0; b < B; ++b) std::copy(rbh.begin(), rbh.end(), tmp.begin() + b * H);
          recur<T>(&ctx.pool(), B, H, GH, RCols::kH, h.data(), dw, tmp.data(), H);
          for (int64_t b = 0; b < B; ++b) {
            T* g = gates + b * GH;
            const T* tb = tmp.data() + b * H;
            for (int64_t j = 0; j < H; ++j) g[2 * H + j] += g[H + j] * tb[j];
          }
        } else {
          // tmp = r . H; h~ = g(xw_h + tmp * Rh^T).
          for (int64_t b = 0; b < B; ++b) {
            const T* g = gates + b * GH;
            const T* hb = h.data() + b * H;
            T* tb = tmp.data() + b * H;
            for (int64_t j = 0; j < H; ++j) tb[j] = g[H + j] * hb[j];
          }
          // Write into a contiguous temp then add, since gates' h block is strided.
          std::fill(tmp2.begin(), tmp2.end(), T(0));
          recur<T>(&ctx.pool(), B, H, GH, RCols::kH, tmp.data(), dw, tmp2.data(), H);
          for (int64_t b = 0; b < B; ++b) {
            T* g = gates + b * GH + 2 * H;
            const T* t2 = tmp2.data() + b * H;
            for (int64_t j = 0; j < H; ++j) g[j] += t2[j];
          }
        }
        for (int64_t b = 0; b < B; ++b) {
          if (!active(b)) continue;
          T* g = gates + b * GH;
          apply_act(acts[1], g + 2 * H, H, clip);
          T* hb = h.data() + b * H;
          const T* z = g;
          const T* hc = g + 2 * H;
          for (int64_t j = 0; j < H; ++j) hb[j] = (T(1) - z[j]) * hc[j] + z[j] * hb[j];
        }
      } else {
        bool recurred = false;
        if constexpr (std::is_same_v<T, float>) {
          if (qd) {
            // ONNX Runtime reads H back from Y when Y is an output, where a sequence that ended a step ago or
            // more has zeros: those rows quantize as zeros (their products are not used).
            const float* hq = h.data();
            if (!all_full && y && y->defined()) {
              for (int64_t b = 0; b < B; ++b) {
                const bool ended = step > lens[static_cast<size_t>(b)];
                std::copy_n(h.data() + b * H, H, tmp2.data() + b * H);
                if (ended) std::fill_n(tmp2.data() + b * H, H, 0.f);
              }
              hq = tmp2.data();
            }
            quant_product(&ctx.pool(), hq, B, H, quant_params(hq, B * H), qd->r, qd->r_scale, gates, GH, true,
                          &scratch);
            recurred = true;
          }
        }
        if (!recurred) recur<T>(&ctx.pool(), B, H, GH, RCols::kAll, h.data(), dw, gates, GH);
        for (int64_t b = 0; b < B; ++b) {
          if (!active(b)) continue;
          T* g = gates + b * GH;
          T* hb = h.data() + b * H;
          if (a_.cell == Cell::kRnn) {
            apply_act(acts[0], g, H, clip);
            std::memcpy(hb, g, sizeof(T) * H);
            continue;
          }
          // LSTM gate blocks: i, o, f, c.
          T* gi = g;
          T* go = g + H;
          T* gf = g + 2 * H;
          T* gc = g + 3 * H;
          T* cb = c.data() + b * H;
          if (pi) {
            for (int64_t j = 0; j < H; ++j) gi[j] += pi[j] * cb[j];
            for (int64_t j = 0; j < H; ++j) gf[j] += pf[j] * cb[j];
          }
          if (late_bias) {
            for (int64_t j = 0; j < H; ++j) gi[j] += late_bias[j];
            for (int64_t j = 0; j < H; ++j) gf[j] += late_bias[2 * H + j];
            for (int64_t j = 0; j < H; ++j) gc[j] += late_bias[3 * H + j];
          }
          apply_act(acts[0], gi, H, clip);
          if (a_.input_forget) {
            for (int64_t j = 0; j < H; ++j) gf[j] = T(1) - gi[j];
          } else {
            apply_act(acts[0], gf, H, clip);
          }
          apply_act(acts[1], gc, H, clip);
          for (int64_t j = 0; j < H; ++j) cb[j] = gf[j] * cb[j] + gi[j] * gc[j];
          if (po) {
            for (int64_t j = 0; j < H; ++j) go[j] += po[j] * cb[j];
          }
          if (late_bias) {
            for (int64_t j = 0; j < H; ++j) go[j] += late_bias[H + j];
          }
          apply_act(acts[0], go, H, clip);
          T* th = tmp.data() + b * H;
          std::memcpy(th, cb, sizeof(T) * H);
          apply_act(acts[2], th, H, T(0));
          for (int64_t j = 0; j < H; ++j) hb[j] = go[j] * th[j];
        }
      }
      if (y && y->defined()) {
        T* yd = y->data<T>();
        for (int64_t b = 0; b < B; ++b) {
          if (!active(b)) continue;
          int64_t tb = all_full ? t : time_of(b);
          std::memcpy(yd + yoff(tb, d, b), h.data() + b * H, sizeof(T) * H);
        }
      }
    }
    for (int64_t b = 0; b < B; ++b) {
      if (yh && yh->defined()) std::memcpy(yh->data<T>() + soff(d, b), h.data() + b * H, sizeof(T) * H);
      if (yc && yc->defined()) std::memcpy(yc->data<T>() + soff(d, b), c.data() + b * H, sizeof(T) * H);
    }
    // A long sequence's projection (up to 64 MiB) and gathered input are not kept by the thread after the run.
    if (xw.capacity() * sizeof(T) > (size_t{16} << 20)) std::vector<T>().swap(xw);
    if (xg.capacity() * sizeof(T) > (size_t{16} << 20)) std::vector<T>().swap(xg);
  };
  // A bidirectional layer whose steps are too small to split between threads (batch 1: a step is a product of one
  // row) runs its two directions side by side, one per thread: they share nothing but X, and each writes its own
  // half of Y. Otherwise the directions run one after the other with every thread on each step's product.
  const int64_t step_flops = 2 * B * GH * H;
  if (D == 2 && ctx.pool().num_threads() >= 2 && !ctx.pool().in_parallel_region() && step_flops <= (1 << 20)) {
    ctx.pool().parallel_for(2, 1, [&](int64_t d0, int64_t d1) {
      for (int64_t d = d0; d < d1; ++d) run_direction(static_cast<int>(d));
    });
  } else {
    for (int d = 0; d < D; ++d) run_direction(d);
  }
  (void)node;
  return Status::Ok();
}

Expected<std::unique_ptr<Kernel>> create_rnn(const KernelInit& init) { return RnnKernel::create(init, Cell::kRnn); }
Expected<std::unique_ptr<Kernel>> create_gru(const KernelInit& init) { return RnnKernel::create(init, Cell::kGru); }
Expected<std::unique_ptr<Kernel>> create_lstm(const KernelInit& init) {
  return RnnKernel::create(init, Cell::kLstm);
}

}  // namespace

TSR_REGISTER_OPS(rnn) {
  reg.add(OpSchema{"RNN", "", infer_rnn<Cell::kRnn>, create_rnn, nullptr, {}});
  reg.add(OpSchema{"GRU", "", infer_rnn<Cell::kGru>, create_gru, nullptr, {}});
  reg.add(OpSchema{"LSTM", "", infer_rnn<Cell::kLstm>, create_lstm, nullptr, {}});
  reg.add(OpSchema{"DynamicQuantizeLSTM", "com.microsoft", infer_rnn<Cell::kLstm>, create_lstm, nullptr, {}});
}

}  // namespace tessera
