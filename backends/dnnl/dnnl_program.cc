// The program's shape rule (check_op) and its blob encoding.
//
// Blob, little-endian (BlobWriter/BlobReader):
//   "TSRDNNL\0"  u32 format version
//   u32 #values  { str name, u32 kind, i32 dtype, u32 rank, i64 dims[rank] }
//   u32 #ops     { u32 kind, i32 alg, u32 flags (bit 0: bf16, bit 1: bf16 destination), str impl,
//                  u32 #nodes, str nodes[], u32 #in, i32 in[], i32 out, u32 #ints, i64 ints[],
//                  u32 #floats, f32 floats[], u32 #post, { u32 kind, i32 alg, f32 alpha, f32 beta, i32 operand } }
//   u32 #inputs  i32[]     u32 #outputs i32[]
// Bump kBlobVersion on any change so that load refuses old blobs instead of
// misreading them.
#include "dnnl_program.h"

#include <oneapi/dnnl/dnnl_types.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>

#include "plugin_util.h"

namespace tessera_dnnl {

using tessera_plugin::BlobReader;
using tessera_plugin::BlobWriter;
using tessera_plugin::fail;

static_assert(std::endian::native == std::endian::little, "the blob format is little-endian");
constexpr char kMagic[8] = {'T', 'S', 'R', 'D', 'N', 'N', 'L', '\0'};
// 8: the implementation chosen; 7: bilinear Resize; 6: Resize; 5: QuantParams, DynConv, DynMatMul; 4: QConv, Lookup,
// integer values; 3: op flags (bf16); 2: an op names all its nodes.
constexpr uint32_t kBlobVersion = 10;

bool own_eltwise(const Op& op) {
  return op.kind == OpKind::kEltwise && op.post.empty() &&
         (op.alg == dnnl_eltwise_logistic || op.alg == dnnl_eltwise_swish || op.alg == dnnl_eltwise_hardswish ||
          op.alg == dnnl_eltwise_linear);
}

const char* op_kind_name(OpKind k) {
  static constexpr const char* kNames[] = {
      "Conv",   "Deconv",   "Pool",       "MatMul",   "BatchNorm", "Lrn",         "Softmax", "LayerNorm", "Eltwise",
      "Binary", "Sum",      "Concat",     "View",     "Transpose", "Reduce",      "PRelu",   "Slice",     "QConv",
      "Lookup", "Quantize", "Dequantize", "DqBinary", "QMatMul",   "QuantParams", "DynConv", "DynMatMul", "Resize"};
  static_assert(std::size(kNames) == kNumOpKinds);
  return kNames[static_cast<size_t>(k)];
}

bool broadcast(const Dims& a, const Dims& b, Dims* out) {
  size_t r = std::max(a.size(), b.size());
  out->assign(r, 1);
  for (size_t i = 0; i < r; ++i) {
    int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (x != y && x != 1 && y != 1) return false;
    (*out)[i] = x == 1 ? y : x;
  }
  return true;
}

Dims pad_to_rank(const Dims& d, size_t rank) {
  Dims r(rank > d.size() ? rank - d.size() : 0, 1);
  r.insert(r.end(), d.begin(), d.end());
  return r;
}

bool post_operand_view(const Dims& operand, const Dims& value, const Dims& dst, Dims* view) {
  if (pad_to_rank(value, dst.size()) == dst) {
    if (operand.size() > dst.size()) return false;
    *view = pad_to_rank(operand, dst.size());
    return true;
  }
  auto strip = [](const Dims& d) {
    size_t i = 0;
    while (i + 1 < d.size() && d[i] == 1) ++i;
    return Dims(d.begin() + static_cast<std::ptrdiff_t>(i), d.end());
  };
  if (numel(value) != numel(dst) || dst.empty() || value.empty() || value.back() != dst.back()) return false;
  const Dims o = strip(operand);
  if (o == strip(value)) {
    *view = dst;
    return true;
  }
  if (o.size() <= 1 && (o.empty() || o[0] == 1 || o[0] == dst.back())) {
    *view = pad_to_rank(o, dst.size());
    return true;
  }
  return false;
}

namespace {

// The element count of dims read from a blob, or -1 past kMaxElements (no
// overflow on the way).
int64_t bounded_numel(const Dims& d) {
  double n = 1;
  for (int64_t x : d) {
    if (x < 0) return -1;
    n *= static_cast<double>(x);
    if (n > static_cast<double>(kMaxElements)) return -1;
  }
  return static_cast<int64_t>(n);
}

bool is_eltwise_alg(int32_t a) {
  switch (a) {
    case dnnl_eltwise_relu: case dnnl_eltwise_tanh: case dnnl_eltwise_elu: case dnnl_eltwise_square:
    case dnnl_eltwise_abs: case dnnl_eltwise_sqrt: case dnnl_eltwise_linear: case dnnl_eltwise_soft_relu:
    case dnnl_eltwise_logistic: case dnnl_eltwise_exp: case dnnl_eltwise_gelu_tanh: case dnnl_eltwise_gelu_erf:
    case dnnl_eltwise_swish: case dnnl_eltwise_log: case dnnl_eltwise_clip: case dnnl_eltwise_clip_v2:
    case dnnl_eltwise_pow: case dnnl_eltwise_round: case dnnl_eltwise_logsigmoid: case dnnl_eltwise_mish:
    case dnnl_eltwise_hardswish:
      return true;
    default:
      return false;
  }
}

bool is_reduction_alg(int32_t a) {
  switch (a) {
    case dnnl_reduction_max: case dnnl_reduction_min: case dnnl_reduction_sum: case dnnl_reduction_mul:
    case dnnl_reduction_mean: case dnnl_reduction_norm_lp_sum: case dnnl_reduction_norm_lp_power_p_sum:
      return true;
    default:
      return false;
  }
}

bool is_binary_alg(int32_t a) {
  return a == dnnl_binary_add || a == dnnl_binary_sub || a == dnnl_binary_mul || a == dnnl_binary_div ||
         a == dnnl_binary_max || a == dnnl_binary_min;
}

// Output spatial size of a convolution/pooling axis; -1 when the window does
// not fit. In 128 bits: the operands come from a blob and may be anything in
// their bounds.
int64_t window_out(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe) {
  const __int128 span = static_cast<__int128>(in) + pb + pe - (static_cast<__int128>(k - 1) * d + 1);
  return span < 0 ? -1 : static_cast<int64_t>(span / s + 1);
}

// Output spatial size of a deconvolution axis, or -1 when out of range.
int64_t deconv_out(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe) {
  const __int128 out = static_cast<__int128>(in - 1) * s + static_cast<__int128>(k - 1) * d + 1 - pb - pe;
  return out < 0 || out > kMaxElements ? -1 : static_cast<int64_t>(out);
}

// The spatial parameters shared by kConv, kDeconv and kPool, checked.
struct Spatial {
  int64_t r = 0;
  Dims kernel, strides, dil, pb, pe;
};

std::string read_spatial(const Op& op, bool with_kernel, Spatial* s) {
  if (op.ints.empty()) return "no parameters";
  s->r = op.ints[0];
  if (s->r < 1 || s->r > 3) return "spatial rank " + std::to_string(s->r);
  size_t r = static_cast<size_t>(s->r), want = 1 + (with_kernel ? 5 : 4) * r + (with_kernel ? 0 : 1);
  if (op.ints.size() != want) return "wrong parameter count";
  auto take = [&](size_t block) { return Dims(op.ints.begin() + 1 + block * r, op.ints.begin() + 1 + (block + 1) * r); };
  size_t b = 0;
  if (with_kernel) s->kernel = take(b++);
  s->strides = take(b++), s->dil = take(b++), s->pb = take(b++), s->pe = take(b++);
  for (size_t i = 0; i < r; ++i) {
    if (s->strides[i] < 1 || s->dil[i] < 1 || s->strides[i] > kMaxElements || s->dil[i] > kMaxElements) {
      return "bad strides or dilations";
    }
    // Negative end pads are how an output padding reaches a deconvolution.
    if (s->pb[i] < 0 || s->pb[i] > kMaxElements || s->pe[i] < -kMaxElements || s->pe[i] > kMaxElements) {
      return "bad pads";
    }
    if (with_kernel && (s->kernel[i] < 1 || s->kernel[i] > kMaxElements)) return "bad kernel";
  }
  return "";
}

}  // namespace

bool dyn_u8_post_ops(const Op& op, const std::vector<Value>& v) {
  size_t k = 0;
  if (k < op.post.size() && op.post[k].kind == PostKind::kBinary && op.post[k].alg == dnnl_binary_add) {
    const Dims& y = v[static_cast<size_t>(op.out)].dims;
    const int64_t m = op.kind == OpKind::kDynConv ? y[1] : y.back();
    Dims want(y.size(), 1);
    want[op.kind == OpKind::kDynConv ? 1 : y.size() - 1] = m;
    const Dims& b = v[static_cast<size_t>(op.post[k].operand)].dims;
    if (b.size() > y.size() || pad_to_rank(b, y.size()) != want) return false;
    ++k;
  }
  if (k < op.post.size() && op.post[k].kind == PostKind::kEltwise && op.post[k].alg == dnnl_eltwise_relu &&
      op.post[k].alpha == 0.f) {
    ++k;
  }
  return k == op.post.size();
}

namespace {

// kQMatMul's and kDynMatMul's ints {rows, K, N}: A holds rows x K elements ending in K, B is a constant [K, N], Y
// holds rows x N ending in N.
bool int8_matmul_views(const Op& op, const std::vector<Value>& v) {
  const int64_t rows = op.ints[0], k = op.ints[1], n = op.ints[2];
  const Dims &a = v[static_cast<size_t>(op.in[0])].dims, &y = v[static_cast<size_t>(op.out)].dims;
  const Value& b = v[static_cast<size_t>(op.in[1])];
  return rows >= 1 && k >= 1 && n >= 1 && b.dims == Dims{k, n} && b.kind == ValueKind::kConstant &&
         bounded_numel({rows, k}) == numel(a) && bounded_numel({rows, n}) == numel(y) && !a.empty() && a.back() == k &&
         !y.empty() && y.back() == n;
}

// The weight scales (and zero points) of kDynConv / kDynMatMul for `m` output channels or columns: int8 weights
// {scale[1 or m]}; uint8 weights {scale[m], zero_point[m]}, with no post-ops (dnnl_program.h).
std::string check_dyn_scales(const Op& op, const std::vector<Value>& v, int64_t m) {
  if (v[static_cast<size_t>(op.in[1])].dtype == TESSERA_DTYPE_UINT8) {
    if (op.floats.size() != static_cast<size_t>(2 * m) || !dyn_u8_post_ops(op, v)) {
      return "uint8 weights: scale and zero point counts or post-ops";
    }
    for (size_t k = 0; k < op.floats.size(); ++k) {
      const float f = op.floats[k];
      if (k < static_cast<size_t>(m) ? !(f > 0 && f < 3.4e38f) : (f != std::nearbyint(f) || f < 0 || f > 255)) {
        return "bad weight scale or zero point";
      }
    }
    return "";
  }
  if (op.floats.size() != 1 && op.floats.size() != static_cast<size_t>(m)) return "scale count";
  for (float f : op.floats) {
    if (!(f > 0 && f < 3.4e38f)) return "bad scale";
  }
  return "";
}

std::string check_conv(const Op& op, const std::vector<Value>& v, bool deconv) {
  Spatial s;
  if (std::string e = read_spatial(op, false, &s); !e.empty()) return e;
  if (op.in.size() != 3 || op.in[0] < 0 || op.in[1] < 0) return "operand count";
  const Dims &x = v[op.in[0]].dims, &w = v[op.in[1]].dims, &y = v[op.out].dims;
  const size_t nd = static_cast<size_t>(s.r) + 2;
  const int64_t g = op.ints.back();
  if (x.size() != nd || w.size() != nd || y.size() != nd) return "operand ranks differ from the spatial rank";
  if (g < 1 || g > x[1] || x[1] % g != 0) return "group " + std::to_string(g) + " does not divide the input channels";
  // Conv: W [M, C/g, k...], Y [N, M, ...]; ConvTranspose: W [C, M/g, k...], Y [N, M, ...]. Every dim is at most
  // kMaxElements (2^40), the group too, but their product may not fit.
  int64_t wg = 0;
  if (__builtin_mul_overflow(w[1], g, &wg)) return "weights " + dims_str(w) + " times group " + std::to_string(g);
  const int64_t m = deconv ? wg : w[0];
  if ((deconv ? w[0] != x[1] : wg != x[1]) || m % g != 0 || y[0] != x[0] || y[1] != m) {
    return "weights " + dims_str(w) + " do not fit input " + dims_str(x) + " and output " + dims_str(y);
  }
  if (op.in[2] >= 0 && v[op.in[2]].dims != Dims{m}) return "bias " + dims_str(v[op.in[2]].dims);
  for (size_t i = 0; i < static_cast<size_t>(s.r); ++i) {
    if (!deconv && s.pe[i] < 0) return "bad pads";
  }
  for (size_t i = 0; i < static_cast<size_t>(s.r); ++i) {
    const int64_t k = w[i + 2];
    int64_t want = deconv ? deconv_out(x[i + 2], k, s.strides[i], s.dil[i], s.pb[i], s.pe[i])
                          : window_out(x[i + 2], k, s.strides[i], s.dil[i], s.pb[i], s.pe[i]);
    if (want != y[i + 2]) return "output " + dims_str(y) + " does not follow from input " + dims_str(x);
  }
  return "";
}

std::string check_pool(const Op& op, const std::vector<Value>& v) {
  Spatial s;
  if (std::string e = read_spatial(op, true, &s); !e.empty()) return e;
  if (!op.floats.empty() && (op.floats.size() != 2 || !global_average_pool(op, v))) {
    return "a dequantizing pool that is not a global average";
  }
  if (op.alg != dnnl_pooling_max && op.alg != dnnl_pooling_avg_include_padding &&
      op.alg != dnnl_pooling_avg_exclude_padding) {
    return "bad pooling algorithm";
  }
  if (op.in.size() != 1 || op.in[0] < 0) return "operand count";
  const Dims &x = v[op.in[0]].dims, &y = v[op.out].dims;
  if (x.size() != static_cast<size_t>(s.r) + 2 || y.size() != x.size() || y[0] != x[0] || y[1] != x[1]) {
    return "output " + dims_str(y) + " does not fit input " + dims_str(x);
  }
  for (size_t i = 0; i < static_cast<size_t>(s.r); ++i) {
    if (s.pe[i] < 0) return "bad pads";
    if (window_out(x[i + 2], s.kernel[i], s.strides[i], s.dil[i], s.pb[i], s.pe[i]) != y[i + 2]) {
      return "output " + dims_str(y) + " does not follow from input " + dims_str(x);
    }
  }
  return "";
}

}  // namespace

bool global_average_pool(const Op& op, const std::vector<Value>& v) {
  Spatial s;
  if (op.kind != OpKind::kPool || op.alg == dnnl_pooling_max || op.in.size() != 1 || op.in[0] < 0 ||
      !read_spatial(op, true, &s).empty()) {
    return false;
  }
  const Dims& x = v[static_cast<size_t>(op.in[0])].dims;
  if (x.size() != static_cast<size_t>(s.r) + 2) return false;
  for (size_t i = 0; i < static_cast<size_t>(s.r); ++i) {
    if (s.kernel[i] != x[i + 2] || s.strides[i] != 1 || s.dil[i] != 1 || s.pb[i] != 0 || s.pe[i] != 0) return false;
  }
  return true;
}

bool matmul_operands(const Op& op, MatMulOperands* out) {
  if (op.ints.empty() || op.ints[0] < 2 || op.ints[0] > static_cast<int64_t>(kMaxRank)) return false;
  const auto r = static_cast<size_t>(op.ints[0]);
  if (op.ints.size() != 3 + 3 * r && op.ints.size() != 3 + 5 * r) return false;
  auto block = [&](size_t b) {
    return Dims(op.ints.begin() + static_cast<std::ptrdiff_t>(3 + b * r),
                op.ints.begin() + static_cast<std::ptrdiff_t>(3 + (b + 1) * r));
  };
  for (size_t k = 0; k < 2; ++k) {
    out->stored[k] = block(k);
    Dims perm(r);
    for (size_t d = 0; d < r; ++d) perm[d] = static_cast<int64_t>(d);
    if (op.ints.size() == 3 + 5 * r) perm = block(3 + k);
    std::vector<bool> seen(r, false);
    for (int64_t p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(r) || seen[static_cast<size_t>(p)]) return false;
      seen[static_cast<size_t>(p)] = true;
    }
    if (op.ints[1 + k] != 0) std::swap(perm[r - 2], perm[r - 1]);
    out->perm[k] = perm;
    out->read[k].clear();
    for (int64_t p : perm) out->read[k].push_back(out->stored[k][static_cast<size_t>(p)]);
  }
  out->bias = block(2);
  return true;
}

namespace {
// {lo, hi}: whole numbers with min <= lo <= hi <= max.
bool whole_bounds(float lo, float hi, float min, float max) {
  return lo == std::nearbyint(lo) && hi == std::nearbyint(hi) && lo >= min && lo <= hi && hi <= max;
}

std::string check_matmul(const Op& op, const std::vector<Value>& v) {
  if (op.in.size() != 3 || op.in[0] < 0 || op.in[1] < 0) return "operand count";
  MatMulOperands mo;
  if (!matmul_operands(op, &mo)) return "bad rank, parameter count or perm";
  const size_t r = static_cast<size_t>(op.ints[0]);
  for (const Dims* d : {&mo.stored[0], &mo.stored[1], &mo.bias}) {
    for (int64_t x : *d) {
      if (x < 1 || x > kMaxElements) return "bad operand view";
    }
  }
  if (bounded_numel(mo.stored[0]) != numel(v[op.in[0]].dims) || bounded_numel(mo.stored[1]) != numel(v[op.in[1]].dims)) {
    return "operand views";
  }
  const Dims& a = mo.read[0];
  const Dims& b = mo.read[1];
  const Dims& bias = mo.bias;
  if (a[r - 1] != b[r - 2]) return "inner dims differ: " + dims_str(a) + " x " + dims_str(b);
  Dims y;
  if (!broadcast(Dims(a.begin(), a.end() - 2), Dims(b.begin(), b.end() - 2), &y)) return "batch dims";
  y.push_back(a[r - 2]);
  y.push_back(b[r - 1]);
  // The output value may drop size-1 dims (a 1-D operand's): same elements, same order.
  if (bounded_numel(y) != numel(v[op.out].dims)) {
    return "output " + dims_str(v[op.out].dims) + ", expected " + dims_str(y);
  }
  if (op.in[2] >= 0) {
    Dims r2;
    if (bounded_numel(bias) != numel(v[op.in[2]].dims) || !broadcast(bias, y, &r2) || r2 != y) return "bias view";
  }
  return "";
}

std::string check_kind(const Op& op, const std::vector<Value>& v) {
  auto dims = [&](size_t k) -> const Dims& { return v[op.in[k]].dims; };
  const Dims& y = v[op.out].dims;
  auto arity = [&](size_t n, size_t nints, size_t nfloats) {
    return op.in.size() == n && op.ints.size() == nints && op.floats.size() == nfloats;
  };
  auto present = [&](size_t from) {
    for (size_t k = from; k < op.in.size(); ++k) {
      if (op.in[k] < 0) return false;
    }
    return true;
  };
  switch (op.kind) {
    case OpKind::kConv: return check_conv(op, v, false);
    case OpKind::kDeconv: return check_conv(op, v, true);
    case OpKind::kPool: return check_pool(op, v);
    case OpKind::kMatMul: return check_matmul(op, v);
    case OpKind::kBatchNorm:
      if (!arity(5, 0, 1) || !present(0) || dims(0).size() < 2) return "operands";
      for (size_t k = 1; k < 5; ++k) {
        if (dims(k) != Dims{dims(0)[1]}) return "parameter " + std::to_string(k) + " is not [C]";
      }
      return y == dims(0) ? "" : "output shape";
    case OpKind::kLrn:
      if (!arity(1, 1, 3) || !present(0) || dims(0).size() < 3 || op.ints[0] < 1 || op.ints[0] > (1 << 20)) {
        return "operands";
      }
      return y == dims(0) ? "" : "output shape";
    case OpKind::kSoftmax: {
      if (op.alg != dnnl_softmax_accurate && op.alg != dnnl_softmax_log) return "bad softmax algorithm";
      if (op.in.size() != 1 || op.in[0] < 0 || op.ints.empty() || op.ints[0] < 1 || op.ints[0] > static_cast<int64_t>(kMaxRank) ||
          op.ints.size() != static_cast<size_t>(op.ints[0]) + 2) {
        return "operands";
      }
      Dims view(op.ints.begin() + 1, op.ints.end() - 1);
      if (op.ints.back() < 0 || op.ints.back() >= op.ints[0]) return "axis";
      return bounded_numel(view) == numel(dims(0)) && y == dims(0) && *std::min_element(view.begin(), view.end()) >= 1
                 ? ""
                 : "view";
    }
    case OpKind::kLayerNorm: {
      if (op.in.size() != 3 || op.in[0] < 0 || op.ints.size() != 2 || op.floats.size() != 1) return "operands";
      const int64_t rows = op.ints[0], cols = op.ints[1];
      if (rows < 1 || cols < 1 || bounded_numel({rows, cols}) != numel(dims(0))) {
        return "view";
      }
      if ((op.in[1] >= 0 && numel(dims(1)) != cols) || (op.in[2] >= 0 && numel(dims(2)) != cols)) {
        return "scale or bias size";
      }
      return y == dims(0) ? "" : "output shape";
    }
    case OpKind::kEltwise:
      if (!is_eltwise_alg(op.alg)) return "bad eltwise algorithm";
      if (!arity(1, 0, 2) || !present(0)) return "operands";
      return y == dims(0) ? "" : "output shape";
    case OpKind::kBinary: {
      if (!is_binary_alg(op.alg)) return "bad binary algorithm";
      if (!arity(2, 0, 0) || !present(0)) return "operands";
      Dims r;
      if (!broadcast(dims(0), dims(1), &r)) return "shapes " + dims_str(dims(0)) + " and " + dims_str(dims(1));
      return r == y ? "" : "output shape";
    }
    case OpKind::kSum:
      if (op.in.size() < 2 || !op.ints.empty() || !op.floats.empty() || !present(0)) return "operands";
      for (size_t k = 0; k < op.in.size(); ++k) {
        if (dims(k) != y) return "operand shapes differ";
      }
      return "";
    case OpKind::kConcat: {
      if (op.in.empty() || op.ints.size() != 1 || !present(0)) return "operands";
      const int64_t axis = op.ints[0];
      if (axis < 0 || axis >= static_cast<int64_t>(y.size())) return "axis";
      int64_t total = 0;
      for (size_t k = 0; k < op.in.size(); ++k) {
        if (dims(k).size() != y.size()) return "operand ranks differ";
        for (size_t d = 0; d < y.size(); ++d) {
          if (static_cast<int64_t>(d) != axis && dims(k)[d] != y[d]) return "operand shapes differ";
        }
        total += dims(k)[static_cast<size_t>(axis)];
      }
      return total == y[static_cast<size_t>(axis)] ? "" : "output shape";
    }
    case OpKind::kView:
      if (!arity(1, 0, 0) || !present(0)) return "operands";
      return numel(dims(0)) == numel(y) ? "" : "element counts differ";
    case OpKind::kTranspose: {
      if (op.in.size() != 1 || !present(0) || op.ints.size() != dims(0).size() || y.size() != dims(0).size()) {
        return "operands";
      }
      std::vector<bool> seen(y.size(), false);
      for (size_t d = 0; d < y.size(); ++d) {
        const int64_t p = op.ints[d];
        if (p < 0 || p >= static_cast<int64_t>(y.size()) || seen[static_cast<size_t>(p)]) return "perm";
        seen[static_cast<size_t>(p)] = true;
        if (y[d] != dims(0)[static_cast<size_t>(p)]) return "output shape";
      }
      return "";
    }
    case OpKind::kSlice: {
      if (op.in.size() != 1 || !present(0) || op.ints.size() != dims(0).size() || y.size() != dims(0).size()) {
        return "operands";
      }
      for (size_t d = 0; d < y.size(); ++d) {
        if (op.ints[d] < 0 || op.ints[d] + y[d] > dims(0)[d]) return "box outside the input";
      }
      return "";
    }
    case OpKind::kReduce: {
      if (!is_reduction_alg(op.alg)) return "bad reduction algorithm";
      if (op.in.size() != 1 || !present(0) || op.floats.size() != 2 || op.ints.empty()) return "operands";
      const Dims& x = dims(0);
      if (op.ints[0] != static_cast<int64_t>(x.size()) || op.ints.size() != x.size() + 1) return "rank";
      Dims kept(op.ints.begin() + 1, op.ints.end());
      for (size_t d = 0; d < x.size(); ++d) {
        if (kept[d] != 1 && kept[d] != x[d]) return "reduced dims";
      }
      return bounded_numel(kept) == numel(y) ? "" : "output shape";
    }
    case OpKind::kQConv: {
      Op conv = op;  // the shape rule of kConv, then the quantization parameters
      conv.kind = OpKind::kConv;
      conv.floats.clear();
      if (std::string e = check_conv(conv, v, false); !e.empty()) return e;
      const int64_t m = v[op.out].dims.size() > 1 ? v[op.out].dims[1] : 0;
      if (op.floats.size() != 3 && op.floats.size() != static_cast<size_t>(2 + m)) return "scale count";
      for (size_t k = 0; k < op.floats.size(); ++k) {
        const float f = op.floats[k];
        if (k < 2 ? (f != std::nearbyint(f) || f < -128 || f > 255) : !(f > 0 && f < 3.4e38f)) {
          return "bad zero point or scale";
        }
      }
      return "";
    }
    case OpKind::kQMatMul: {
      if (op.in.size() != 2 || !present(0) || op.ints.size() != 3) return "operands";
      if (!int8_matmul_views(op, v)) return "operand views";
      const int64_t n = op.ints[2];
      if (op.floats.size() != 3 && op.floats.size() != static_cast<size_t>(2 + n)) return "scale count";
      for (size_t j = 0; j < op.floats.size(); ++j) {
        const float f = op.floats[j];
        if (j < 2 ? (f != std::nearbyint(f) || f < -128 || f > 255) : !(f > 0 && f < 3.4e38f)) {
          return "bad zero point or scale";
        }
      }
      return "";
    }
    case OpKind::kLookup: {
      if (op.in.size() != 2 && op.in.size() != 3) return "operands";
      if (!present(0) || !op.ints.empty()) return "operands";
      if (op.in.size() == 3 &&
          !op.floats.empty()) {  // a QLinearAdd/Mul form (dnnl_program.h); the engine checks its table
        if ((op.floats.size() != 3 && op.floats.size() != 4) ||
            !std::all_of(op.floats.begin(), op.floats.end(), [](float f) { return std::isfinite(f); })) {
          return "QLinearAdd form";
        }
      } else if (!op.floats.empty() &&  // a clamp table's bounds (dnnl_program.h)
                 (op.in.size() != 2 || op.floats.size() != 2 || !whole_bounds(op.floats[0], op.floats[1], -128, 255))) {
        return "clamp bounds";
      }
      const size_t t = op.in.size() - 1;
      if (numel(dims(t)) != (t == 1 ? 256 : 65536) || v[op.in[t]].kind != ValueKind::kConstant) return "table";
      if (t == 2 && dims(1) != dims(0)) return "operand shapes differ";
      return y == dims(0) ? "" : "output shape";
    }
    case OpKind::kQuantParams:
      if (!arity(1, 0, 0) || !present(0)) return "operands";
      return y == Dims{2} ? "" : "output shape";
    case OpKind::kResize: {
      if (op.in.size() != 1 || !present(0)) return "operands";
      const Dims& x = dims(0);
      if (!op.floats.empty()) {  // bilinear: H and W's neighbours and weights
        if (x.size() != 4 || y.size() != 4 || y[0] != x[0] || y[1] != x[1] || op.ints.empty() || op.ints[0] != 4 ||
            op.ints.size() != 1 + 2 * static_cast<size_t>(y[2] + y[3]) ||
            op.floats.size() != 2 * static_cast<size_t>(y[2] + y[3])) {
          return "bilinear tables";
        }
        size_t at = 1;
        for (size_t d = 2; d < 4; ++d) {
          for (int64_t k = 0; k < 2 * y[d]; ++k, ++at) {
            if (op.ints[at] < 0 || op.ints[at] >= x[d]) return "bilinear tables";
          }
        }
        if (!std::all_of(op.floats.begin(), op.floats.end(), [](float f) { return f >= 0.f && f <= 1.f; })) {
          return "bilinear weights";
        }
        return "";
      }
      if (x.size() < 3 || x.size() > 5 || y.size() != x.size() || op.ints.empty() ||
          op.ints[0] != static_cast<int64_t>(x.size()) ||
          static_cast<int64_t>(op.ints.size()) != 1 + std::accumulate(y.begin(), y.end(), int64_t{0})) {
        return "index tables";
      }
      size_t at = 1;
      for (size_t d = 0; d < y.size(); ++d) {
        for (int64_t o = 0; o < y[d]; ++o, ++at) {
          const int64_t i = op.ints[at];
          if (i < 0 || i >= x[d] || (d < 2 && (i != o || y[d] != x[d]))) return "index tables";
        }
      }
      return "";
    }
    case OpKind::kDynConv: {
      if (op.in.size() != 3) return "operand count";
      Op conv = op;  // the shape rule of kConv (P is no convolution operand), then the weight scales
      conv.kind = OpKind::kConv;
      conv.floats.clear();
      conv.in[2] = -1;
      if (std::string e = check_conv(conv, v, false); !e.empty()) return e;
      if (!present(0) || dims(2) != Dims{2}) return "operands";
      if (v[op.in[1]].dtype == TESSERA_DTYPE_UINT8 && op.ints.back() != 1) return "uint8 weights in groups";
      return check_dyn_scales(op, v, v[op.out].dims[1]);
    }
    case OpKind::kDynMatMul: {
      if (op.in.size() != 3 || !present(0) || op.ints.size() != 3 || dims(2) != Dims{2}) return "operands";
      if (!int8_matmul_views(op, v)) return "operand views";
      return check_dyn_scales(op, v, op.ints[2]);
    }
    case OpKind::kQuantize:
      if (op.in.size() == 2) {  // scale and zero point from a kQuantParams at run time
        if (!arity(2, 0, 0) || !present(0) || dims(1) != Dims{2}) return "operands";
        return y == dims(0) ? "" : "output shape";
      }
      [[fallthrough]];
    case OpKind::kDequantize: {
      if (!arity(1, 0, 2) || !present(0)) return "operands";
      const float scale = op.floats[0], zp = op.floats[1];
      if (!(scale > 0 && scale < 3.4e38f) || zp != std::nearbyint(zp) || zp < -128 || zp > 255) {
        return "bad scale or zero point";
      }
      return y == dims(0) ? "" : "output shape";
    }
    case OpKind::kDqBinary: {
      if (!is_binary_alg(op.alg)) return "bad binary algorithm";
      if (!arity(2, 0, 4) || !present(0) || dims(0) != y || dims(1) != y) return "operands";
      for (size_t k = 0; k < 2; ++k) {
        const float scale = op.floats[2 * k], zp = op.floats[2 * k + 1];
        if (!(scale >= 0 && scale < 3.4e38f) || zp != std::nearbyint(zp) || zp < -128 || zp > 255) {
          return "bad scale or zero point";
        }
      }
      return "";
    }
    case OpKind::kPRelu: {
      if (!arity(2, 0, 0) || !present(0)) return "operands";
      Dims r;
      if (!broadcast(dims(1), dims(0), &r) || r != dims(0)) return "slope " + dims_str(dims(1)) + " does not broadcast";
      return y == dims(0) ? "" : "output shape";
    }
  }
  return "unknown op kind";
}

bool is_8bit(int32_t dtype) { return dtype == TESSERA_DTYPE_UINT8 || dtype == TESSERA_DTYPE_INT8; }

// A residual QLinearAdd folded into a convolution (absorb_qlinear_adds, dnnl_fusion.cc): post-ops {clip of round(v)
// to whole bounds, linear, sum of a value of the destination's 8-bit type scaled by alpha}.
bool qlinear_add_posts(const Op& op, const std::vector<Value>& v) {
  if (op.kind != OpKind::kQConv || op.post.size() != 3) return false;
  const PostOp& c = op.post[0];
  const PostOp& l = op.post[1];
  const PostOp& s = op.post[2];
  const bool finite = std::isfinite(l.alpha) && std::isfinite(l.beta) && std::isfinite(s.alpha);
  return c.kind == PostKind::kEltwise && c.alg == dnnl_eltwise_clip && c.operand < 0 &&
         whole_bounds(c.alpha, c.beta, -383, 383) && l.kind == PostKind::kEltwise && l.alg == dnnl_eltwise_linear &&
         l.operand < 0 && s.kind == PostKind::kSum && s.operand >= 0 && s.operand < static_cast<int32_t>(v.size()) &&
         v[static_cast<size_t>(s.operand)].dtype == v[static_cast<size_t>(op.out)].dtype && finite;
}

// The data types each operand must have: float32 everywhere but the integer
// operands of kQConv and kLookup; no post-ops on those.
// Whether zero point zp lies in the range of the 8-bit type `dtype`.
bool zero_point_fits(int32_t dtype, float zp) {
  const float lo = dtype == TESSERA_DTYPE_INT8 ? -128.f : 0.f;
  return zp >= lo && zp <= lo + 255;
}

std::string check_dtypes(const Op& op, const std::vector<Value>& v) {
  auto dt = [&](int32_t id) { return v[static_cast<size_t>(id)].dtype; };
  if (op.kind == OpKind::kDqBinary) {
    if (op.bf16 || op.post.size() > 1 ||
        (op.post.size() == 1 && (op.post[0].kind != PostKind::kEltwise || op.post[0].alg != dnnl_eltwise_relu ||
                                 op.post[0].alpha != 0.f))) {
      return "DqBinary takes at most a relu";
    }
    for (size_t k = 0; k < 2; ++k) {
      if (op.floats[2 * k] > 0 ? !is_8bit(dt(op.in[k])) : dt(op.in[k]) != TESSERA_DTYPE_FLOAT32) {
        return "DqBinary operand " + std::to_string(k) + " is not of its kind";
      }
    }
    return dt(op.out) == TESSERA_DTYPE_FLOAT32 ? "" : "DqBinary output is not float32";
  }
  if (op.kind == OpKind::kQuantParams) {
    if (!op.post.empty() || op.bf16) return "post-ops or bf16 on a quantization";
    return dt(op.in[0]) == TESSERA_DTYPE_FLOAT32 && dt(op.out) == TESSERA_DTYPE_FLOAT32 ? "" : "QuantParams is not float32";
  }
  if (op.kind == OpKind::kDynConv || op.kind == OpKind::kDynMatMul) {
    if (op.bf16) return "bf16 on an integer op";
    if (dt(op.in[0]) != TESSERA_DTYPE_UINT8 || !is_8bit(dt(op.in[1])) || dt(op.in[2]) != TESSERA_DTYPE_FLOAT32 ||
        dt(op.out) != TESSERA_DTYPE_FLOAT32) {
      return "dynamically quantized product's operands are not uint8 X, uint8/int8 W, float32 parameters and Y";
    }
    for (const PostOp& po : op.post) {
      if (po.operand >= 0 && dt(po.operand) != TESSERA_DTYPE_FLOAT32) return "a value that is not float32";
    }
    return "";
  }
  if (op.kind == OpKind::kPool && !op.floats.empty()) {
    if (!op.post.empty() || op.bf16) return "post-ops or bf16 on a dequantizing pool";
    const int32_t in = dt(op.in[0]);
    if (!is_8bit(in) || dt(op.out) != TESSERA_DTYPE_FLOAT32) return "a dequantizing pool is not uint8/int8 to float32";
    return zero_point_fits(in, op.floats[1]) ? "" : "zero point out of the 8-bit type's range";
  }
  if (op.kind == OpKind::kQuantize || op.kind == OpKind::kDequantize) {
    if (!op.post.empty() || op.bf16) return "post-ops or bf16 on a quantization";
    const bool q = op.kind == OpKind::kQuantize;
    const int32_t in = dt(op.in[0]), out = dt(op.out);
    if (q ? (in != TESSERA_DTYPE_FLOAT32 || !is_8bit(out)) : (!is_8bit(in) || out != TESSERA_DTYPE_FLOAT32)) {
      return q ? "Quantize is not float32 to uint8/int8" : "Dequantize is not uint8/int8 to float32";
    }
    if (op.in.size() == 2) {  // DynamicQuantizeLinear's Y
      return out == TESSERA_DTYPE_UINT8 && dt(op.in[1]) == TESSERA_DTYPE_FLOAT32 ? "" : "dynamic Quantize is not to uint8";
    }
    return zero_point_fits(q ? out : in, op.floats[1]) ? "" : "zero point out of the 8-bit type's range";
  }
  if (op.kind == OpKind::kQConv || op.kind == OpKind::kQMatMul || op.kind == OpKind::kLookup) {
    // A quantized product may end in one clip of its rounded result: a clamp table folded into it (fusion), its
    // 8-bit bounds less the zero point.
    const bool clamp = op.kind != OpKind::kLookup && op.post.size() == 1 && op.post[0].kind == PostKind::kEltwise &&
                       op.post[0].alg == dnnl_eltwise_clip && op.post[0].operand < 0 &&
                       whole_bounds(op.post[0].alpha, op.post[0].beta, -383, 383);
    if ((!op.post.empty() && !clamp && !qlinear_add_posts(op, v)) || op.bf16)
      return "post-ops or bf16 on an integer op";
    if (op.kind == OpKind::kQMatMul) {
      return is_8bit(dt(op.in[0])) && dt(op.in[1]) == TESSERA_DTYPE_INT8 && is_8bit(dt(op.out))
                 ? ""
                 : "QMatMul operands are not uint8/int8 A and Y, int8 B";
    }
    if (op.kind == OpKind::kQConv) {
      if (!is_8bit(dt(op.in[0])) || dt(op.in[1]) != TESSERA_DTYPE_INT8 || !is_8bit(dt(op.out)) ||
          (op.in[2] >= 0 && dt(op.in[2]) != TESSERA_DTYPE_INT32)) {
        return "QConv operands are not uint8/int8 X and Y, int8 W, int32 B";
      }
      return "";
    }
    for (int32_t id : op.in) {
      if (!is_8bit(dt(id))) return "Lookup operands are not uint8/int8";
    }
    return dt(op.out) == dt(op.in.back()) ? "" : "Lookup output is not of its table's dtype";
  }
  // Ops that move or select values (views, transposes, max pooling) take 8-bit values as they are: in and out of one
  // type, nothing after.
  const bool moves = op.kind == OpKind::kView || op.kind == OpKind::kTranspose ||
                     (op.kind == OpKind::kResize && op.floats.empty()) ||
                     (op.kind == OpKind::kPool && op.alg == dnnl_pooling_max);
  if (moves && is_8bit(dt(op.out))) {
    if (!op.post.empty() || op.bf16) return "post-ops or bf16 on 8-bit values";
    for (int32_t id : op.in) {
      if (id >= 0 && dt(id) != dt(op.out)) return "8-bit values moved to another type";
    }
    return "";
  }
  if (dt(op.out) != TESSERA_DTYPE_FLOAT32) return "a value that is not float32";
  for (int32_t id : op.in) {
    if (id >= 0 && dt(id) != TESSERA_DTYPE_FLOAT32) return "a value that is not float32";
  }
  for (const PostOp& po : op.post) {
    if (po.operand >= 0 && dt(po.operand) != TESSERA_DTYPE_FLOAT32) return "a value that is not float32";
  }
  return "";
}

}  // namespace

bool plugin_dtype(int32_t dtype) {
  return dtype == TESSERA_DTYPE_FLOAT32 || is_8bit(dtype) || dtype == TESSERA_DTYPE_INT32;
}

std::string check_op(const Op& op, const std::vector<Value>& v) {
  const int32_t n = static_cast<int32_t>(v.size());
  auto valid = [&](int32_t id) { return id >= 0 && id < n; };
  if (!valid(op.out)) return "bad output";
  for (int32_t id : op.in) {
    if (id != -1 && !valid(id)) return "bad operand";
  }
  std::string e = check_kind(op, v);
  if (!e.empty()) return e;
  const Dims& y = v[op.out].dims;
  for (const PostOp& p : op.post) {
    switch (p.kind) {
      case PostKind::kEltwise:
        if (!is_eltwise_alg(p.alg) || p.operand != -1) return "bad eltwise post-op";
        break;
      case PostKind::kSum:
        if (!valid(p.operand) || v[p.operand].dims != y) return "bad sum post-op";
        break;
      case PostKind::kBinary: {
        Dims r;
        if (!is_binary_alg(p.alg) || !valid(p.operand) || !broadcast(v[p.operand].dims, y, &r) || r != y) {
          return "bad binary post-op";
        }
        break;
      }
      default:
        return "bad post-op";
    }
  }
  return check_dtypes(op, v);
}

std::string nodes_str(const Op& op) {
  std::string s;
  for (const std::string& n : op.nodes) s += (s.empty() ? "" : "+") + n;
  return s;
}

// ---- blob ------------------------------------------------------------------

std::string serialize(const Program& p) {
  BlobWriter w;
  w.bytes(kMagic, sizeof(kMagic));
  w.u32(kBlobVersion);
  w.u32(static_cast<uint32_t>(p.values.size()));
  for (const Value& v : p.values) {
    w.str(v.name);
    w.u32(static_cast<uint32_t>(v.kind));
    w.i32(v.dtype);
    w.u32(static_cast<uint32_t>(v.dims.size()));
    for (int64_t d : v.dims) w.i64(d);
  }
  w.u32(static_cast<uint32_t>(p.ops.size()));
  for (const Op& op : p.ops) {
    w.u32(static_cast<uint32_t>(op.kind));
    w.i32(op.alg);
    w.u32((op.bf16 ? 1u : 0u) | (op.bf16_dst ? 2u : 0u));
    w.str(op.impl);
    w.u32(static_cast<uint32_t>(op.nodes.size()));
    for (const std::string& n : op.nodes) w.str(n);
    w.u32(static_cast<uint32_t>(op.in.size()));
    for (int32_t i : op.in) w.i32(i);
    w.i32(op.out);
    w.u32(static_cast<uint32_t>(op.ints.size()));
    for (int64_t i : op.ints) w.i64(i);
    w.u32(static_cast<uint32_t>(op.floats.size()));
    for (float f : op.floats) w.f32(f);
    w.u32(static_cast<uint32_t>(op.post.size()));
    for (const PostOp& po : op.post) {
      w.u32(static_cast<uint32_t>(po.kind));
      w.i32(po.alg);
      w.f32(po.alpha);
      w.f32(po.beta);
      w.i32(po.operand);
    }
  }
  for (const auto* list : {&p.inputs, &p.outputs}) {
    w.u32(static_cast<uint32_t>(list->size()));
    for (int32_t i : *list) w.i32(i);
  }
  return w.data();
}

namespace {

[[noreturn]] void corrupt(const std::string& what) {
  fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "corrupt oneDNN blob: " + what);
}

// A count that must not exceed what the remaining bytes could hold.
uint32_t count(BlobReader& r, uint32_t limit, const char* what) {
  uint32_t n = r.u32();
  if (n > limit) corrupt(std::string("too many ") + what);
  return n;
}

}  // namespace

Program deserialize(const void* blob, size_t size) {
  if (!blob || size < sizeof(kMagic) || std::memcmp(blob, kMagic, sizeof(kMagic)) != 0) {
    fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "not a blob of the oneDNN backend (bad magic)");
  }
  BlobReader r(static_cast<const char*>(blob) + sizeof(kMagic), size - sizeof(kMagic));
  if (uint32_t v = r.u32(); v != kBlobVersion) {
    fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "oneDNN blob format version " + std::to_string(v) +
                                              ", this plugin reads version " + std::to_string(kBlobVersion));
  }
  const uint32_t limit = static_cast<uint32_t>(std::min<size_t>(size, 1u << 24));
  Program p;
  for (uint32_t n = count(r, limit, "values"); n > 0; --n) {
    Value v;
    v.name = r.str(1 << 16);
    uint32_t kind = r.u32();
    v.dtype = r.i32();
    uint32_t rank = r.u32();
    if (kind > static_cast<uint32_t>(ValueKind::kComputed) || rank > kMaxRank || v.dtype < 1 || v.dtype > 16 ||
        tessera_plugin::dtype_size(v.dtype) == 0) {
      corrupt("bad value header");
    }
    v.kind = static_cast<ValueKind>(kind);
    // In double, over the dims that are not 0: then no int64 product of any of these dims (a stride, a count) can
    // overflow later, however a 0 elsewhere empties the value.
    double elements = 1;
    for (uint32_t d = 0; d < rank; ++d) {
      v.dims.push_back(r.i64_in(0, kMaxElements, "dim"));
      elements *= static_cast<double>(std::max<int64_t>(v.dims.back(), 1));
    }
    if (elements > static_cast<double>(kMaxElements)) corrupt("value '" + v.name + "' is too large");
    p.values.push_back(std::move(v));
  }
  const size_t nv = p.values.size();
  std::vector<bool> written(nv, false);
  // What ops touch must have elements and a dtype ops take (check_op says
  // which op takes which); only an unread region input may be anything else.
  auto touched_ok = [&](int32_t id) {
    const Value& v = p.values[static_cast<size_t>(id)];
    return plugin_dtype(v.dtype) && numel(v.dims) >= 1;
  };
  auto readable = [&](int32_t id) {
    return p.values[static_cast<size_t>(id)].kind != ValueKind::kComputed || written[static_cast<size_t>(id)];
  };
  for (uint32_t n = count(r, limit, "ops"); n > 0; --n) {
    Op op;
    uint32_t kind = r.u32();
    if (kind >= kNumOpKinds) corrupt("unknown op kind " + std::to_string(kind));
    op.kind = static_cast<OpKind>(kind);
    op.alg = r.i32();
    const uint32_t flags = r.u32();
    if (flags > 3 || flags == 2) corrupt("unknown op flags");
    op.bf16 = (flags & 1u) != 0;
    op.bf16_dst = (flags & 2u) != 0;
    if (op.bf16 && op.kind != OpKind::kConv && op.kind != OpKind::kDeconv && op.kind != OpKind::kMatMul) {
      corrupt("bf16 on an op that is not a convolution or a matmul");
    }
    op.impl = r.str(256);
    if (!op.impl.empty() && !impl_choice_kind(op.kind))
      corrupt("an implementation named for a " + std::string(op_kind_name(op.kind)));
    for (uint32_t k = count(r, 1024, "node names"); k > 0; --k) op.nodes.push_back(r.str(1 << 16));
    for (uint32_t k = count(r, 1024, "operands"); k > 0; --k) op.in.push_back(r.i32());
    op.out = r.i32();
    // Ints hold a Resize's index tables (an entry per output index of each axis), floats a scale per output channel
    // (QConv) or a bilinear Resize's weights: as many as the blob's bytes allow.
    for (uint32_t k = count(r, limit / 8, "parameters"); k > 0; --k) op.ints.push_back(r.i64());
    for (uint32_t k = count(r, limit / 4, "parameters"); k > 0; --k) op.floats.push_back(r.f32());
    for (uint32_t k = count(r, 64, "post-ops"); k > 0; --k) {
      PostOp po;
      uint32_t pk = r.u32();
      if (pk > static_cast<uint32_t>(PostKind::kBinary)) corrupt("unknown post-op kind");
      po.kind = static_cast<PostKind>(pk);
      po.alg = r.i32();
      po.alpha = r.f32();
      po.beta = r.f32();
      po.operand = r.i32();
      op.post.push_back(po);
    }
    if (std::string why = check_op(op, p.values); !why.empty()) corrupt("op '" + nodes_str(op) + "': " + why);
    bool ok = touched_ok(op.out);
    for (int32_t id : op.in) ok = ok && (id < 0 || touched_ok(id));
    for (const PostOp& po : op.post) ok = ok && (po.operand < 0 || touched_ok(po.operand));
    if (!ok) corrupt("op '" + nodes_str(op) + "' touches a value of another dtype or with no elements");
    for (int32_t id : op.in) {
      if (id >= 0 && !readable(id)) corrupt("operand read before it is written");
    }
    for (const PostOp& po : op.post) {
      if (po.operand >= 0 && (!readable(po.operand) || po.operand == op.out)) corrupt("bad post-op operand");
    }
    if (p.values[static_cast<size_t>(op.out)].kind != ValueKind::kComputed || written[static_cast<size_t>(op.out)]) {
      corrupt("op output is not a fresh computed value");
    }
    written[static_cast<size_t>(op.out)] = true;
    p.ops.push_back(std::move(op));
  }
  for (auto* list : {&p.inputs, &p.outputs}) {
    for (uint32_t n = count(r, limit, "boundary values"); n > 0; --n) {
      int32_t id = r.i32();
      if (id < 0 || static_cast<size_t>(id) >= nv) corrupt("boundary value out of range");
      list->push_back(id);
    }
  }
  std::vector<bool> is_input(nv, false);
  for (int32_t i : p.inputs) {
    if (p.values[static_cast<size_t>(i)].kind != ValueKind::kInput || is_input[static_cast<size_t>(i)]) {
      corrupt("bad region input");
    }
    is_input[static_cast<size_t>(i)] = true;
  }
  for (size_t v = 0; v < nv; ++v) {
    if (p.values[v].kind == ValueKind::kInput && !is_input[v]) corrupt("input value missing from the inputs");
  }
  for (int32_t i : p.outputs) {
    if (!readable(i) || !touched_ok(i)) corrupt("bad region output");
  }
  if (!r.at_end()) corrupt("trailing bytes");
  return p;
}

}  // namespace tessera_dnnl
