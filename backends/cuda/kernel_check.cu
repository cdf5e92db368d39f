// Standalone self-check of cuda_kernels.cu against straightforward CPU
// references (double precision where it matters). Prints "ok NAME" or
// "FAIL NAME max_abs_err=..." per check and exits 1 on any failure; without a
// CUDA device it prints "no CUDA device: <reason>" and exits 0.
//
// Build: nvcc -std=c++17 -O2 -arch=sm_90 -I backends/cuda backends/cuda/kernel_check.cu
//        backends/cuda/cuda_kernels.cu -o /tmp/kernel_check
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda_kernels.h"

using namespace tessera_cuda;

namespace {

int g_failures = 0;
int g_checks = 0;
std::mt19937 g_rng(12345);

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

#define CK(call)                                                                                           \
  do {                                                                                                     \
    cudaError_t e_ = (call);                                                                               \
    if (e_ != cudaSuccess) {                                                                               \
      std::printf("FAIL cuda error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #call); \
      std::exit(1);                                                                                        \
    }                                                                                                      \
  } while (0)

std::vector<float> rand_vec(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g_rng);
  return v;
}

template <class T>
T* to_dev(const std::vector<T>& h) {
  T* d = nullptr;
  CK(cudaMalloc(&d, std::max<size_t>(h.size(), 1) * sizeof(T)));
  if (!h.empty()) CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

template <class T>
std::vector<T> from_dev(const T* d, size_t n) {
  std::vector<T> h(n);
  CK(cudaDeviceSynchronize());
  if (n) CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

void report(const std::string& name, bool ok, double err) {
  ++g_checks;
  if (ok) {
    std::printf("ok %s\n", name.c_str());
  } else {
    ++g_failures;
    std::printf("FAIL %s max_abs_err=%g\n", name.c_str(), err);
  }
}

// |got - want| <= atol + rtol * scale (scale = |want| unless given); NaN must
// meet NaN and infinities must match exactly.
void compare(const std::string& name, const std::vector<float>& got, const std::vector<double>& want,
             double rtol = 1e-5, double atol = 1e-5, const std::vector<double>* scale = nullptr) {
  bool ok = got.size() == want.size();
  double max_err = 0;
  size_t first_bad = SIZE_MAX;
  for (size_t i = 0; ok && i < got.size(); ++i) {
    const double g = got[i];
    const double w = static_cast<double>(static_cast<float>(want[i]));  // the float the result rounds to
    bool good;
    if (std::isnan(w) || std::isnan(g)) {
      good = std::isnan(w) && std::isnan(g);
    } else if (std::isinf(w) || std::isinf(g)) {
      good = g == w;
    } else {
      const double err = std::fabs(g - w);
      max_err = std::max(max_err, err);
      const double s = scale ? (*scale)[i] : std::fabs(w);
      good = err <= atol + rtol * s;
    }
    if (!good && first_bad == SIZE_MAX) first_bad = i;
  }
  if (first_bad != SIZE_MAX) {
    ok = false;
    std::printf("  %s: first mismatch at %zu: got %.9g want %.9g\n", name.c_str(), first_bad,
                static_cast<double>(got[first_bad]), want[first_bad]);
    if (max_err == 0) max_err = std::numeric_limits<double>::infinity();
  }
  if (got.size() != want.size()) std::printf("  %s: size %zu vs %zu\n", name.c_str(), got.size(), want.size());
  report(name, ok, max_err);
}

// ---- chain reference --------------------------------------------------------------

double ref_unary(int code, double v, double alpha, double beta) {
  switch (code) {
    case kRelu:
      return v < 0 ? 0.0 : v;
    case kSigmoid:
      return 1.0 / (1.0 + std::exp(-v));
    case kTanh:
      return std::tanh(v);
    case kExp:
      return std::exp(v);
    case kLog:
      return std::log(v);
    case kSqrt:
      return std::sqrt(v);
    case kNeg:
      return -v;
    case kAbs:
      return std::fabs(v);
    case kErf:
      return std::erf(v);
    case kGeluErf:
      return 0.5 * v * std::erfc(-v / std::sqrt(2.0));
    case kGeluTanh:
      return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    case kLeakyRelu:
      return v < 0 ? alpha * v : v;
    case kClip: {
      double r = v < alpha ? alpha : v;
      return r > beta ? beta : r;
    }
    case kHardSigmoid: {
      double r = alpha * v + beta;
      r = r > 1 ? 1 : r;
      return r < 0 ? 0 : r;
    }
    case kHardSwish: {
      double r = v / 6.0 + 0.5;
      r = r > 1 ? 1 : r;
      r = r < 0 ? 0 : r;
      return v * r;
    }
    case kSoftplus:
      return std::log1p(std::exp(v));
    case kReciprocal:
      return 1.0 / v;
    case kFloor:
      return std::floor(v);
    case kCeil:
      return std::ceil(v);
    case kSin:
      return std::sin(v);
    case kCos:
      return std::cos(v);
    case kElu:
      return v < 0 ? alpha * std::expm1(v) : v;
    case kSelu:
      return v <= 0 ? beta * alpha * std::expm1(v) : beta * v;
    case kSign:
      return std::isnan(v) ? v : (v > 0 ? 1.0 : (v < 0 ? -1.0 : 0.0));
    case kRound:
      return std::nearbyint(v);
    case kSoftsign:
      return v / (1.0 + std::fabs(v));
    case kMish:
      return v * std::tanh(std::log1p(std::exp(v)));
    case kAffine:
      return alpha * v + beta;
  }
  return v;
}

double ref_binary(int code, double v, double x, bool swap) {
  if (code == kPRelu) return v < 0 ? v * x : v;
  const double a = swap ? x : v, b = swap ? v : x;
  switch (code) {
    case kAdd:
      return a + b;
    case kSub:
      return a - b;
    case kMul:
      return a * b;
    case kDiv:
      return a / b;
    case kPow:
      return std::pow(a, b);
    case kMax:
      return (a > b || std::isnan(a)) ? a : b;
    case kMin:
      return (a < b || std::isnan(a)) ? a : b;
  }
  return v;
}

// Host view of one chain operand: the base (host) buffer and the element
// offset that the device pointer adds to it.
struct HostOperand {
  const std::vector<float>* data;
  int64_t base;  // element offset of operands[k] within data
};

std::vector<double> ref_chain(const Chain& c, const std::vector<HostOperand>& ops) {
  int64_t n = 1;
  for (int d = 0; d < c.rank; ++d) n *= c.dims[d];
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t idx[kMaxRank] = {};
    int64_t rem = i;
    for (int d = c.rank - 1; d >= 0; --d) {
      idx[d] = rem % c.dims[d];
      rem /= c.dims[d];
    }
    double vals[kMaxOperands] = {};
    for (int k = 0; k < c.num_operands; ++k) {
      int64_t off = ops[k].base;
      for (int d = 0; d < c.rank; ++d) off += idx[d] * c.strides[k][d];
      vals[k] = (*ops[k].data)[static_cast<size_t>(off)];
    }
    double v = vals[0];
    for (int j = 0; j < c.num_ops; ++j) {
      const ChainOp& op = c.ops[j];
      v = op.operand >= 0 ? ref_binary(op.code, v, vals[op.operand], op.swap != 0)
                          : ref_unary(op.code, v, op.alpha, op.beta);
      v = static_cast<float>(v);  // round between ops to float as the device does
    }
    out[static_cast<size_t>(i)] = v;
  }
  return out;
}

void contiguous_strides(int rank, const int64_t* dims, int64_t* strides) {
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    strides[d] = s;
    s *= dims[d];
  }
}

// Specials first, then uniform values.
std::vector<float> chain_input(size_t n, float lo, float hi) {
  std::vector<float> v = rand_vec(n, lo, hi);
  const float specials[] = {0.0f, -0.0f, 0.5f,   1.5f,    2.5f,  -2.5f,  -0.5f, 1.0f,  -1.0f, kNaN,
                            kInf, -kInf, 100.0f, -100.0f, 20.0f, -20.0f, 3.0f,  -3.0f, 1e-4f, -1e-4f};
  for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]) && i < n; ++i) v[i] = specials[i];
  return v;
}

ChainOp unary_op(int code, float alpha = 0, float beta = 0) {
  ChainOp o;
  o.code = code;
  o.operand = -1;
  o.alpha = alpha;
  o.beta = beta;
  return o;
}
ChainOp binary_op(int code, int operand, bool swap = false) {
  ChainOp o;
  o.code = code;
  o.operand = operand;
  o.swap = swap ? 1 : 0;
  return o;
}

void run_chain_check(const std::string& name, Chain c, const std::vector<HostOperand>& hops, bool in_place = false,
                     double rtol = 1e-5, double atol = 1e-5) {
  int64_t n = 1;
  for (int d = 0; d < c.rank; ++d) n *= c.dims[d];
  std::vector<float*> devs;
  std::vector<const std::vector<float>*> seen;
  for (int k = 0; k < c.num_operands; ++k) {
    // One device buffer per distinct host buffer.
    float* d = nullptr;
    for (size_t s = 0; s < seen.size(); ++s)
      if (seen[s] == hops[k].data) d = devs[s];
    if (!d) {
      d = to_dev(*hops[k].data);
      devs.push_back(d);
      seen.push_back(hops[k].data);
    }
    c.operands[k] = d + hops[k].base;
  }
  std::vector<double> want = ref_chain(c, hops);
  float* out;
  if (in_place) {
    out = const_cast<float*>(c.operands[0]);
  } else {
    CK(cudaMalloc(&out, std::max<int64_t>(n, 1) * sizeof(float)));
  }
  CK(launch_chain(c, out, 0));
  std::vector<float> got = from_dev(out, static_cast<size_t>(n));
  compare(name, got, want, rtol, atol);
  if (!in_place) CK(cudaFree(out));
  for (float* d : devs) CK(cudaFree(d));
}

const char* code_name(int code) {
  switch (code) {
    case kAdd:
      return "Add";
    case kSub:
      return "Sub";
    case kMul:
      return "Mul";
    case kDiv:
      return "Div";
    case kPow:
      return "Pow";
    case kMax:
      return "Max";
    case kMin:
      return "Min";
    case kPRelu:
      return "PRelu";
    case kRelu:
      return "Relu";
    case kSigmoid:
      return "Sigmoid";
    case kTanh:
      return "Tanh";
    case kExp:
      return "Exp";
    case kLog:
      return "Log";
    case kSqrt:
      return "Sqrt";
    case kNeg:
      return "Neg";
    case kAbs:
      return "Abs";
    case kErf:
      return "Erf";
    case kGeluErf:
      return "GeluErf";
    case kGeluTanh:
      return "GeluTanh";
    case kLeakyRelu:
      return "LeakyRelu";
    case kClip:
      return "Clip";
    case kHardSigmoid:
      return "HardSigmoid";
    case kHardSwish:
      return "HardSwish";
    case kSoftplus:
      return "Softplus";
    case kReciprocal:
      return "Reciprocal";
    case kFloor:
      return "Floor";
    case kCeil:
      return "Ceil";
    case kSin:
      return "Sin";
    case kCos:
      return "Cos";
    case kElu:
      return "Elu";
    case kSelu:
      return "Selu";
    case kSign:
      return "Sign";
    case kRound:
      return "Round";
    case kSoftsign:
      return "Softsign";
    case kMish:
      return "Mish";
    case kAffine:
      return "Affine";
  }
  return "?";
}

void check_chains() {
  // Every unary code on a 1-D input with specials.
  {
    std::vector<float> x = chain_input(1000, -6.0f, 6.0f);
    const int unary[] = {kRelu,      kSigmoid,  kTanh,       kExp,      kLog,       kSqrt, kNeg,
                         kAbs,       kErf,      kGeluErf,    kGeluTanh, kLeakyRelu, kClip, kHardSigmoid,
                         kHardSwish, kSoftplus, kReciprocal, kFloor,    kCeil,      kSin,  kCos,
                         kElu,       kSelu,     kSign,       kRound,    kSoftsign,  kMish, kAffine};
    for (int code : unary) {
      Chain c;
      c.rank = 1;
      c.dims[0] = static_cast<int64_t>(x.size());
      c.num_operands = 1;
      c.strides[0][0] = 1;
      c.num_ops = 1;
      float alpha = 0, beta = 0;
      if (code == kLeakyRelu) alpha = 0.01f;
      if (code == kClip) alpha = -1.5f, beta = 2.25f;
      if (code == kHardSigmoid) alpha = 0.2f, beta = 0.5f;
      if (code == kElu) alpha = 1.3f;
      if (code == kSelu) alpha = 1.67326319217681884765625f, beta = 1.05070102214813232421875f;
      if (code == kAffine) alpha = -0.75f, beta = 0.3f;
      c.ops[0] = unary_op(code, alpha, beta);
      run_chain_check(std::string("chain_unary_") + code_name(code), c, {{&x, 0}});
    }
  }
  // Every binary code, both operand orders, with a broadcast 4-D operand.
  {
    const int64_t dims[4] = {2, 3, 4, 5};
    std::vector<float> a = chain_input(120, -4.0f, 4.0f);
    std::vector<float> b = chain_input(15, -3.0f, 3.0f);  // [3, 1, 5]
    std::vector<float> pos = rand_vec(120, 0.1f, 3.0f);
    const int binary[] = {kAdd, kSub, kMul, kDiv, kPow, kMax, kMin, kPRelu};
    for (int code : binary) {
      for (int swap = 0; swap < 2; ++swap) {
        if (code == kPRelu && swap) continue;
        Chain c;
        c.rank = 4;
        std::memcpy(c.dims, dims, sizeof(dims));
        c.num_operands = 2;
        contiguous_strides(4, dims, c.strides[0]);
        c.strides[1][0] = 0, c.strides[1][1] = 5, c.strides[1][2] = 0, c.strides[1][3] = 1;
        c.num_ops = 1;
        c.ops[0] = binary_op(code, 1, swap != 0);
        const std::vector<float>* lhs = code == kPow && !swap ? &pos : &a;
        run_chain_check(std::string("chain_binary_") + code_name(code) + (swap ? "_swap" : ""), c, {{lhs, 0}, {&b, 0}});
      }
    }
  }
  // A longer chain over 4-D broadcasting: contiguous, [3,1,5], scalar, a
  // transposed view, a reversed (negative-stride) view, [2,1,1,1].
  {
    const int64_t dims[4] = {2, 3, 4, 5};
    std::vector<float> x0 = rand_vec(120, -2.0f, 2.0f);
    std::vector<float> x1 = rand_vec(15, 0.5f, 1.5f);
    std::vector<float> x2 = {0.25f};
    std::vector<float> x3 = rand_vec(120, -1.0f, 1.0f);  // stored as [5, 4, 3, 2]
    std::vector<float> x4 = rand_vec(120, -1.0f, 1.0f);  // [2,3,4,5] read with the last axis reversed
    std::vector<float> x5 = rand_vec(2, -0.5f, 0.5f);
    Chain c;
    c.rank = 4;
    std::memcpy(c.dims, dims, sizeof(dims));
    c.num_operands = 6;
    contiguous_strides(4, dims, c.strides[0]);
    c.strides[1][1] = 5, c.strides[1][3] = 1;
    // strides[2] all zero: scalar
    c.strides[3][0] = 1, c.strides[3][1] = 2, c.strides[3][2] = 6, c.strides[3][3] = 24;
    contiguous_strides(4, dims, c.strides[4]);
    c.strides[4][3] = -1;
    c.strides[5][0] = 1;
    c.num_ops = 9;
    c.ops[0] = binary_op(kMul, 1);
    c.ops[1] = unary_op(kTanh);
    c.ops[2] = binary_op(kSub, 2, true);  // 0.25 - v
    c.ops[3] = binary_op(kAdd, 3);
    c.ops[4] = binary_op(kMax, 4);
    c.ops[5] = unary_op(kGeluErf);
    c.ops[6] = binary_op(kDiv, 1, true);  // x1 / v
    c.ops[7] = unary_op(kClip, -3.0f, 3.0f);
    c.ops[8] = binary_op(kPRelu, 5);
    run_chain_check("chain_long_4d_broadcast", c, {{&x0, 0}, {&x1, 0}, {&x2, 0}, {&x3, 0}, {&x4, 4}, {&x5, 0}});
  }
  // num_ops == 0: a broadcasting copy (Expand) of a [4,1,6] tensor to [3,4,5,6].
  {
    const int64_t dims[4] = {3, 4, 5, 6};
    std::vector<float> x = rand_vec(24, -1.0f, 1.0f);
    Chain c;
    c.rank = 4;
    std::memcpy(c.dims, dims, sizeof(dims));
    c.num_operands = 1;
    c.strides[0][1] = 6, c.strides[0][3] = 1;
    c.num_ops = 0;
    run_chain_check("chain_copy_broadcast", c, {{&x, 0}});
  }
  // In place: operand 0 is the output.
  {
    std::vector<float> x = rand_vec(777, -3.0f, 3.0f);
    std::vector<float> b = rand_vec(7, -1.0f, 1.0f);
    Chain c;
    c.rank = 2;
    c.dims[0] = 111, c.dims[1] = 7;
    c.num_operands = 2;
    c.strides[0][0] = 7, c.strides[0][1] = 1;
    c.strides[1][1] = 1;
    c.num_ops = 2;
    c.ops[0] = binary_op(kAdd, 1);
    c.ops[1] = unary_op(kRelu);
    run_chain_check("chain_in_place", c, {{&x, 0}, {&b, 0}}, true);
  }
  // Rank 0 (a scalar) and the same buffer as two operands.
  {
    std::vector<float> x = {1.75f};
    Chain c;
    c.rank = 0;
    c.num_operands = 2;
    c.num_ops = 2;
    c.ops[0] = binary_op(kMul, 1);
    c.ops[1] = unary_op(kSigmoid);
    run_chain_check("chain_rank0", c, {{&x, 0}, {&x, 0}});
  }
  // A dim of extent 1 with a junk stride still counts as contiguous; 8-D.
  {
    const int64_t dims[8] = {2, 1, 3, 2, 1, 2, 3, 2};
    std::vector<float> x = rand_vec(144, -2.0f, 2.0f);
    std::vector<float> y = rand_vec(144, -2.0f, 2.0f);
    Chain c;
    c.rank = 8;
    std::memcpy(c.dims, dims, sizeof(dims));
    c.num_operands = 2;
    contiguous_strides(8, dims, c.strides[0]);
    c.strides[0][1] = 999;
    // operand 1: reversed along axis 0
    contiguous_strides(8, dims, c.strides[1]);
    c.strides[1][0] = -c.strides[1][0];
    c.num_ops = 2;
    c.ops[0] = binary_op(kMin, 1);
    c.ops[1] = unary_op(kMish);
    run_chain_check("chain_rank8", c, {{&x, 0}, {&y, 72}});
  }
  // Empty output: nothing launched.
  {
    Chain c;
    c.rank = 2;
    c.dims[0] = 0, c.dims[1] = 5;
    c.num_operands = 1;
    c.operands[0] = nullptr;
    cudaError_t e = launch_chain(c, nullptr, 0);
    report("chain_empty", e == cudaSuccess, 0);
  }
  // Large enough for the grid cap and grid-stride loop (> 65535*8*256 elements).
  {
    const int64_t n = 65535LL * 8 * 256 + 1234;
    float* d;
    CK(cudaMalloc(&d, n * sizeof(float)));
    CK(launch_fill(d, n, 2.0f, 0));
    Chain c;
    c.rank = 1;
    c.dims[0] = n;
    c.num_operands = 1;
    c.operands[0] = d;
    c.strides[0][0] = 1;
    c.num_ops = 1;
    c.ops[0] = unary_op(kAffine, 3.0f, 1.0f);
    CK(launch_chain(c, d, 0));
    std::vector<float> h = from_dev(d, static_cast<size_t>(n));
    bool ok = true;
    for (int64_t i = 0; i < n && ok; ++i) ok = h[static_cast<size_t>(i)] == 7.0f;
    report("chain_and_fill_large_grid_stride", ok, ok ? 0 : 1);
    CK(cudaFree(d));
  }
}

// ---- strided copy -----------------------------------------------------------------

template <class T>
void run_copy_check(const std::string& name, const StridedCopy& c, size_t src_n, size_t dst_n) {
  std::vector<T> src(src_n), dst(dst_n);
  for (size_t i = 0; i < src_n; ++i) src[i] = static_cast<T>(i * 2654435761u + 17);
  for (size_t i = 0; i < dst_n; ++i) dst[i] = static_cast<T>(0x5a5a5a5a5a5a5a5aULL ^ i);
  T* ds = to_dev(src);
  T* dd = to_dev(dst);
  std::vector<T> want = dst;
  int64_t n = 1;
  for (int d = 0; d < c.rank; ++d) n *= c.dims[d];
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, so = c.src_offset, d_o = c.dst_offset;
    for (int d = c.rank - 1; d >= 0; --d) {
      const int64_t id = rem % c.dims[d];
      rem /= c.dims[d];
      so += id * c.src_strides[d];
      d_o += id * c.dst_strides[d];
    }
    want[static_cast<size_t>(d_o)] = src[static_cast<size_t>(so)];
  }
  CK(launch_strided_copy(c, ds, dd, 0));
  std::vector<T> got = from_dev(dd, dst_n);
  size_t bad = 0;
  for (size_t i = 0; i < dst_n; ++i) bad += got[i] != want[i];
  report(name, bad == 0, static_cast<double>(bad));
  CK(cudaFree(ds));
  CK(cudaFree(dd));
}

template <class T>
void copy_checks_for(const std::string& suffix) {
  // Transpose [3,4,5] -> [5,3,4] (perm 2,0,1), written contiguously.
  {
    StridedCopy c;
    c.rank = 3;
    c.dims[0] = 5, c.dims[1] = 3, c.dims[2] = 4;
    c.src_strides[0] = 1, c.src_strides[1] = 20, c.src_strides[2] = 5;
    c.dst_strides[0] = 12, c.dst_strides[1] = 4, c.dst_strides[2] = 1;
    c.elem_size = sizeof(T);
    run_copy_check<T>("copy_transpose_" + suffix, c, 60, 60);
  }
  // Negative-stride slice: x[::-2, 1:4] of a [7, 6] tensor -> [4, 3].
  {
    StridedCopy c;
    c.rank = 2;
    c.dims[0] = 4, c.dims[1] = 3;
    c.src_strides[0] = -12, c.src_strides[1] = 1;
    c.src_offset = 6 * 6 + 1;
    c.dst_strides[0] = 3, c.dst_strides[1] = 1;
    c.elem_size = sizeof(T);
    run_copy_check<T>("copy_negative_stride_slice_" + suffix, c, 42, 12);
  }
  // Concat: a [2,3,4] piece into a [2,7,4] output at offset 3 along axis 1.
  {
    StridedCopy c;
    c.rank = 3;
    c.dims[0] = 2, c.dims[1] = 3, c.dims[2] = 4;
    c.src_strides[0] = 12, c.src_strides[1] = 4, c.src_strides[2] = 1;
    c.dst_strides[0] = 28, c.dst_strides[1] = 4, c.dst_strides[2] = 1;
    c.dst_offset = 12;
    c.elem_size = sizeof(T);
    run_copy_check<T>("copy_concat_piece_" + suffix, c, 24, 56);
  }
  // Expand with a zero stride.
  {
    StridedCopy c;
    c.rank = 3;
    c.dims[0] = 4, c.dims[1] = 5, c.dims[2] = 3;
    c.src_strides[0] = 0, c.src_strides[1] = 3, c.src_strides[2] = 1;
    c.dst_strides[0] = 15, c.dst_strides[1] = 3, c.dst_strides[2] = 1;
    c.elem_size = sizeof(T);
    run_copy_check<T>("copy_expand_" + suffix, c, 15, 60);
  }
  // Contiguous both sides (memcpy path) with offsets and a size-1 dim with a junk stride.
  {
    StridedCopy c;
    c.rank = 3;
    c.dims[0] = 3, c.dims[1] = 1, c.dims[2] = 10;
    c.src_strides[0] = 10, c.src_strides[1] = 77, c.src_strides[2] = 1;
    c.dst_strides[0] = 10, c.dst_strides[1] = 5, c.dst_strides[2] = 1;
    c.src_offset = 5, c.dst_offset = 7;
    c.elem_size = sizeof(T);
    run_copy_check<T>("copy_contiguous_" + suffix, c, 40, 40);
  }
}

void check_copies() {
  copy_checks_for<uint8_t>("e1");
  copy_checks_for<uint16_t>("e2");
  copy_checks_for<uint32_t>("e4");
  copy_checks_for<uint64_t>("e8");
  // Rank 0: one element.
  {
    StridedCopy c;
    c.rank = 0;
    c.src_offset = 3, c.dst_offset = 1;
    c.elem_size = 4;
    run_copy_check<uint32_t>("copy_rank0", c, 5, 4);
  }
  // 8-D with a negative stride, a larger count.
  {
    StridedCopy c;
    c.rank = 8;
    const int64_t dims[8] = {2, 3, 2, 4, 3, 2, 5, 3};
    std::memcpy(c.dims, dims, sizeof(dims));
    contiguous_strides(8, dims, c.dst_strides);
    // src is the permutation reversing the axis order, with axis 6 walked backwards.
    int64_t rdims[8];
    for (int d = 0; d < 8; ++d) rdims[d] = dims[7 - d];
    int64_t rstr[8];
    contiguous_strides(8, rdims, rstr);
    for (int d = 0; d < 8; ++d) c.src_strides[d] = rstr[7 - d];
    c.src_offset = (dims[6] - 1) * c.src_strides[6];
    c.src_strides[6] = -c.src_strides[6];
    c.elem_size = 4;
    run_copy_check<uint32_t>("copy_rank8_negative", c, 4320, 4320);
  }
  {
    StridedCopy c;
    c.rank = 2;
    c.dims[0] = 3, c.dims[1] = 0;
    report("copy_empty", launch_strided_copy(c, nullptr, nullptr, 0) == cudaSuccess, 0);
  }
}

// ---- gather -----------------------------------------------------------------------

template <class T>
void run_gather_check(const std::string& name, int64_t outer, int64_t axis_len, int64_t inner,
                      const std::vector<int64_t>& idx, bool with_flag) {
  std::vector<T> data(static_cast<size_t>(outer * axis_len * inner));
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<T>(i * 40503u + 7);
  const int64_t ni = static_cast<int64_t>(idx.size());
  std::vector<T> want(static_cast<size_t>(outer * ni * inner));
  bool want_bad = false;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < ni; ++j)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t k = idx[static_cast<size_t>(j)];
        if (k < 0) k += axis_len;
        T v = T(0);
        if (k < 0 || k >= axis_len) {
          want_bad = true;
        } else {
          v = data[static_cast<size_t>((o * axis_len + k) * inner + i)];
        }
        want[static_cast<size_t>((o * ni + j) * inner + i)] = v;
      }
  T* dd = to_dev(data);
  int64_t* di = to_dev(idx);
  std::vector<T> junk(want.size(), static_cast<T>(0x77));
  T* dout = to_dev(junk);
  int32_t* dflag = nullptr;
  if (with_flag) dflag = to_dev(std::vector<int32_t>{0});
  CK(launch_gather(dd, di, dout, outer, axis_len, inner, ni, sizeof(T), dflag, 0));
  std::vector<T> got = from_dev(dout, want.size());
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) bad += got[i] != want[i];
  bool flag_ok = true;
  if (with_flag) flag_ok = (from_dev(dflag, 1)[0] != 0) == want_bad;
  report(name, bad == 0 && flag_ok, static_cast<double>(bad) + (flag_ok ? 0 : 1000));
  CK(cudaFree(dd));
  CK(cudaFree(di));
  CK(cudaFree(dout));
  if (dflag) CK(cudaFree(dflag));
}

void check_gathers() {
  run_gather_check<float>("gather_f32_axis0", 1, 10, 7, {3, 0, 9, -1, -10, 3}, true);
  run_gather_check<float>("gather_f32_middle", 3, 6, 4, {5, -2, 1}, true);
  run_gather_check<float>("gather_f32_last_axis", 4, 9, 1, {8, 0, -9, 4, 4}, true);
  run_gather_check<uint16_t>("gather_e2", 2, 5, 3, {1, -1}, true);
  run_gather_check<uint8_t>("gather_e1", 2, 5, 3, {4, 0, 2}, true);
  run_gather_check<int64_t>("gather_e8", 3, 4, 2, {-4, 3}, true);
  run_gather_check<float>("gather_out_of_range", 2, 5, 3, {1, 5, -6, 2}, true);
  run_gather_check<float>("gather_out_of_range_null_flag", 2, 5, 3, {7, 0}, false);
  report("gather_empty", launch_gather(nullptr, nullptr, nullptr, 3, 4, 5, 0, 4, nullptr, 0) == cudaSuccess, 0);
}

// ---- softmax / layernorm / reduce ------------------------------------------------

void check_softmax() {
  struct Case {
    int64_t outer, len, inner;
  };
  const Case cases[] = {{7, 1000, 1}, {3, 1, 1}, {5, 33, 1},   {2, 3000, 1},
                        {4, 17, 6},   {3, 1, 5}, {2, 300, 37}, {1, 257, 1}};
  for (const Case& cs : cases) {
    for (int lg = 0; lg < 2; ++lg) {
      const size_t n = static_cast<size_t>(cs.outer * cs.len * cs.inner);
      std::vector<float> x = rand_vec(n, -8.0f, 8.0f);
      std::vector<double> want(n);
      for (int64_t o = 0; o < cs.outer; ++o)
        for (int64_t i = 0; i < cs.inner; ++i) {
          auto at = [&](int64_t j) { return static_cast<size_t>((o * cs.len + j) * cs.inner + i); };
          double m = -INFINITY;
          for (int64_t j = 0; j < cs.len; ++j) m = std::max(m, static_cast<double>(x[at(j)]));
          double s = 0;
          for (int64_t j = 0; j < cs.len; ++j) s += std::exp(x[at(j)] - m);
          for (int64_t j = 0; j < cs.len; ++j)
            want[at(j)] = lg ? (x[at(j)] - m) - std::log(s) : std::exp(x[at(j)] - m) / s;
        }
      float* dx = to_dev(x);
      float* dy;
      CK(cudaMalloc(&dy, n * sizeof(float)));
      CK(launch_softmax(dx, dy, cs.outer, cs.len, cs.inner, lg != 0, 0));
      char name[128];
      std::snprintf(name, sizeof(name), "%s_%lldx%lldx%lld", lg ? "logsoftmax" : "softmax",
                    static_cast<long long>(cs.outer), static_cast<long long>(cs.len), static_cast<long long>(cs.inner));
      compare(name, from_dev(dy, n), want, 1e-5, 1e-6);
      CK(cudaFree(dx));
      CK(cudaFree(dy));
    }
  }
  report("softmax_empty", launch_softmax(nullptr, nullptr, 0, 5, 1, false, 0) == cudaSuccess, 0);
}

void check_layernorm() {
  struct Case {
    int64_t rows, cols;
    bool affine;
    float eps;
  };
  const Case cases[] = {{5, 768, true, 1e-5f}, {3, 1, true, 1e-5f},     {7, 1000, false, 1e-6f},
                        {4, 33, true, 1e-3f},  {2, 4096, false, 1e-5f}, {300, 64, true, 1e-5f}};
  for (const Case& cs : cases) {
    const size_t n = static_cast<size_t>(cs.rows * cs.cols);
    std::vector<float> x = rand_vec(n, -2.0f, 4.0f);  // a non-zero mean
    std::vector<float> g = rand_vec(static_cast<size_t>(cs.cols), 0.5f, 1.5f);
    std::vector<float> b = rand_vec(static_cast<size_t>(cs.cols), -0.5f, 0.5f);
    std::vector<double> want(n);
    for (int64_t r = 0; r < cs.rows; ++r) {
      const float* xr = x.data() + r * cs.cols;
      double mean = 0;
      for (int64_t j = 0; j < cs.cols; ++j) mean += xr[j];
      mean /= static_cast<double>(cs.cols);
      double var = 0;
      for (int64_t j = 0; j < cs.cols; ++j) var += (xr[j] - mean) * (xr[j] - mean);
      var /= static_cast<double>(cs.cols);
      const double rstd = 1.0 / std::sqrt(var + static_cast<double>(cs.eps));
      for (int64_t j = 0; j < cs.cols; ++j) {
        double v = (xr[j] - mean) * rstd;
        if (cs.affine) v = v * g[static_cast<size_t>(j)] + b[static_cast<size_t>(j)];
        want[static_cast<size_t>(r * cs.cols + j)] = v;
      }
    }
    float* dx = to_dev(x);
    float* dg = cs.affine ? to_dev(g) : nullptr;
    float* db = cs.affine ? to_dev(b) : nullptr;
    float* dy;
    CK(cudaMalloc(&dy, n * sizeof(float)));
    CK(launch_layernorm(dx, dg, db, dy, cs.rows, cs.cols, cs.eps, 0));
    char name[128];
    std::snprintf(name, sizeof(name), "layernorm_%lldx%lld%s", static_cast<long long>(cs.rows),
                  static_cast<long long>(cs.cols), cs.affine ? "_affine" : "");
    compare(name, from_dev(dy, n), want, 1e-5, 2e-5);
    CK(cudaFree(dx));
    if (dg) CK(cudaFree(dg));
    if (db) CK(cudaFree(db));
    CK(cudaFree(dy));
  }
  report("layernorm_empty", launch_layernorm(nullptr, nullptr, nullptr, nullptr, 0, 8, 1e-5f, 0) == cudaSuccess, 0);
}

void check_reduce() {
  struct Case {
    int64_t outer, len, inner;
  };
  const Case cases[] = {{6, 1000, 1}, {4, 50, 7},   {3, 1, 1},   {2, 0, 3},
                        {3, 0, 1},    {1, 5000, 1}, {5, 3, 130}, {1000, 17, 1}};
  const char* names[] = {"sum", "mean", "max", "min", "sumsquare", "l2"};
  for (const Case& cs : cases) {
    for (int code = kReduceSum; code <= kReduceL2; ++code) {
      const size_t n = static_cast<size_t>(cs.outer * cs.len * cs.inner);
      const size_t m = static_cast<size_t>(cs.outer * cs.inner);
      std::vector<float> x = rand_vec(n, -3.0f, 3.0f);
      std::vector<double> want(m), scale(m);
      for (int64_t o = 0; o < cs.outer; ++o)
        for (int64_t i = 0; i < cs.inner; ++i) {
          double s = 0, sa = 0, sq = 0, mx = -INFINITY, mn = INFINITY;
          for (int64_t j = 0; j < cs.len; ++j) {
            const double v = x[static_cast<size_t>((o * cs.len + j) * cs.inner + i)];
            s += v, sa += std::fabs(v), sq += v * v;
            mx = std::max(mx, v), mn = std::min(mn, v);
          }
          double w = 0, sc = 0;
          switch (code) {
            case kReduceSum:
              w = s, sc = sa;
              break;
            case kReduceMean:
              w = cs.len ? s / cs.len : NAN, sc = cs.len ? sa / cs.len : 0;
              break;
            case kReduceMax:
              w = mx;
              break;
            case kReduceMin:
              w = mn;
              break;
            case kReduceSumSquare:
              w = sq, sc = sq;
              break;
            case kReduceL2:
              w = std::sqrt(sq), sc = w;
              break;
          }
          want[static_cast<size_t>(o * cs.inner + i)] = w;
          scale[static_cast<size_t>(o * cs.inner + i)] = std::max(sc, std::fabs(w));
        }
      float* dx = to_dev(x);
      float* dy;
      CK(cudaMalloc(&dy, m * sizeof(float)));
      CK(launch_reduce(dx, dy, cs.outer, cs.len, cs.inner, code, 0));
      char name[128];
      std::snprintf(name, sizeof(name), "reduce_%s_%lldx%lldx%lld", names[code], static_cast<long long>(cs.outer),
                    static_cast<long long>(cs.len), static_cast<long long>(cs.inner));
      compare(name, from_dev(dy, m), want, 1e-5, 1e-6, &scale);
      CK(cudaFree(dx));
      CK(cudaFree(dy));
    }
  }
  // NaN propagation through Max/Min, rows and strided.
  for (int inner : {1, 3}) {
    for (int code : {kReduceMax, kReduceMin}) {
      const int64_t outer = 4, len = 300;
      std::vector<float> x = rand_vec(static_cast<size_t>(outer * len * inner), -3.0f, 3.0f);
      x[static_cast<size_t>((1 * len + 123) * inner)] = kNaN;  // row 1 (position i = 0)
      std::vector<double> want(static_cast<size_t>(outer * inner));
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          double r = code == kReduceMax ? -INFINITY : INFINITY;
          for (int64_t j = 0; j < len; ++j) {
            const double v = x[static_cast<size_t>((o * len + j) * inner + i)];
            if (std::isnan(v) || std::isnan(r))
              r = NAN;
            else
              r = code == kReduceMax ? std::max(r, v) : std::min(r, v);
          }
          want[static_cast<size_t>(o * inner + i)] = r;
        }
      float* dx = to_dev(x);
      float* dy;
      CK(cudaMalloc(&dy, want.size() * sizeof(float)));
      CK(launch_reduce(dx, dy, outer, len, inner, code, 0));
      compare(std::string("reduce_") + names[code] + "_nan_inner" + std::to_string(inner), from_dev(dy, want.size()),
              want);
      CK(cudaFree(dx));
      CK(cudaFree(dy));
    }
  }
}

// ---- pooling ------------------------------------------------------------------------

int64_t pool_out(int64_t in, int k, int s, int pad, int dil, bool ceil_mode) {
  const int64_t span = in + 2 * pad - static_cast<int64_t>(dil) * (k - 1) - 1;
  int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (o - 1) * s >= in + pad) --o;  // the last window must start inside input or left pad
  return o;
}

void check_pools() {
  struct Case {
    int64_t n, c, h, w;
    int kh, kw, sh, sw, ph, pw, dh, dw;
    bool ceil_mode;
  };
  const Case cases[] = {
      {2, 3, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1, true},    // ceil mode with padding
      {1, 2, 8, 9, 2, 2, 2, 2, 0, 0, 1, 1, false},   // plain 2x2
      {1, 2, 10, 11, 3, 2, 3, 2, 1, 1, 1, 1, true},  // uneven, ceil
      {2, 2, 9, 9, 3, 3, 1, 1, 2, 2, 2, 2, false},   // dilation 2, pad 2
      {1, 1, 6, 5, 2, 2, 1, 1, 1, 1, 1, 1, true},    // stride 1, pad 1
      {1, 3, 5, 5, 5, 5, 1, 1, 2, 2, 1, 1, false},   // global-ish with pads
      {1, 1, 4, 4, 3, 3, 1, 1, 2, 2, 1, 1, false},   // pad 2: corner windows hold one real row/column
      {1, 1, 7, 6, 3, 3, 2, 3, 1, 1, 2, 1, true},    // dilation with ceil
  };
  const char* names[] = {"max", "avg_include_pad", "avg_exclude_pad"};
  int ci = 0;
  for (const Case& cs : cases) {
    ++ci;
    for (int code = kPoolMax; code <= kPoolAvgExcludePad; ++code) {
      Pool2d p;
      p.n = cs.n, p.c = cs.c, p.h = cs.h, p.w = cs.w;
      p.kh = cs.kh, p.kw = cs.kw, p.stride_h = cs.sh, p.stride_w = cs.sw, p.pad_top = cs.ph, p.pad_left = cs.pw;
      p.dil_h = cs.dh, p.dil_w = cs.dw;
      p.oh = pool_out(cs.h, cs.kh, cs.sh, cs.ph, cs.dh, cs.ceil_mode);
      p.ow = pool_out(cs.w, cs.kw, cs.sw, cs.pw, cs.dw, cs.ceil_mode);
      p.code = code;
      const size_t nin = static_cast<size_t>(p.n * p.c * p.h * p.w);
      const size_t nout = static_cast<size_t>(p.n * p.c * p.oh * p.ow);
      std::vector<float> x = rand_vec(nin, -5.0f, 5.0f);
      std::vector<double> want(nout);
      for (int64_t pl = 0; pl < p.n * p.c; ++pl)
        for (int64_t oh = 0; oh < p.oh; ++oh)
          for (int64_t ow = 0; ow < p.ow; ++ow) {
            double mx = -INFINITY, sum = 0;
            int64_t real = 0, padded = 0;
            for (int ki = 0; ki < p.kh; ++ki)
              for (int kj = 0; kj < p.kw; ++kj) {
                const int64_t ih = oh * p.stride_h - p.pad_top + ki * p.dil_h;
                const int64_t iw = ow * p.stride_w - p.pad_left + kj * p.dil_w;
                // ONNX: the divisor with count_include_pad is the window clipped to the padded input
                // (symmetric pads: [-pad, in + pad)).
                if (ih >= -p.pad_top && ih < p.h + p.pad_top && iw >= -p.pad_left && iw < p.w + p.pad_left) ++padded;
                if (ih < 0 || ih >= p.h || iw < 0 || iw >= p.w) continue;
                const double v = x[static_cast<size_t>((pl * p.h + ih) * p.w + iw)];
                ++real;
                mx = std::max(mx, v);
                sum += v;
              }
            double r;
            if (code == kPoolMax)
              r = mx;
            else if (real == 0)
              r = 0;
            else
              r = sum / static_cast<double>(code == kPoolAvgIncludePad ? padded : real);
            want[static_cast<size_t>((pl * p.oh + oh) * p.ow + ow)] = r;
          }
      float* dx = to_dev(x);
      float* dy;
      CK(cudaMalloc(&dy, nout * sizeof(float)));
      CK(launch_pool2d(p, dx, dy, 0));
      compare(std::string("pool_") + names[code] + "_case" + std::to_string(ci), from_dev(dy, nout), want, 1e-5, 1e-5);
      CK(cudaFree(dx));
      CK(cudaFree(dy));
    }
  }
  Pool2d e;
  report("pool_empty", launch_pool2d(e, nullptr, nullptr, 0) == cudaSuccess, 0);
}

// ---- resize ---------------------------------------------------------------------------

double ref_coord(int64_t o, double scale, int64_t in, int coord) {
  const double xr = static_cast<double>(o), in_len = static_cast<double>(in), out_len = scale * in_len;
  switch (coord) {
    case kCoordHalfPixel:
      return (xr + 0.5) / scale - 0.5;
    case kCoordPytorchHalfPixel:
      return out_len > 1 ? (xr + 0.5) / scale - 0.5 : 0.0;
    case kCoordAlignCorners:
      return out_len == 1 ? 0.0 : xr * (in_len - 1) / (out_len - 1);
    case kCoordAsymmetric:
      return xr / scale;
  }
  return 0;
}

int64_t ref_clamp(int64_t i, int64_t in) { return std::min<int64_t>(std::max<int64_t>(i, 0), in - 1); }

int64_t ref_nearest(double x, int64_t in, int mode) {
  // Written from the ONNX reference's definitions rather than the kernel's floor/ratio form.
  double r;
  switch (mode) {
    case kNearestRoundPreferFloor:
      r = (x == std::floor(x) + 0.5) ? std::floor(x) : std::round(x);
      break;
    case kNearestRoundPreferCeil:
      r = (x == std::floor(x) + 0.5) ? std::ceil(x) : std::round(x);
      break;
    case kNearestFloor:
      r = std::floor(x);
      break;
    default:
      r = std::ceil(x);
      break;
  }
  return ref_clamp(static_cast<int64_t>(r), in);
}

void check_resizes() {
  struct Case {
    int64_t n, c, h, w;
    float sh, sw;
    bool sizes;
    int64_t oh, ow;
  };
  std::vector<Case> cases = {
      {1, 2, 4, 5, 2.0f, 2.0f, false, 0, 0},   // upsample x2
      {2, 1, 5, 3, 1.5f, 2.5f, false, 0, 0},   // fractional scales, floored sizes (7, 7)
      {1, 2, 8, 9, 0.5f, 0.6f, false, 0, 0},   // downsample
      {1, 1, 4, 6, 0.25f, 1.0f, false, 0, 0},  // output height 1
      {1, 3, 5, 7, 0, 0, true, 9, 4},          // sizes given: scale = out / in
      {1, 1, 1, 3, 3.0f, 1.0f, false, 0, 0},   // input height 1
  };
  const char* coord_names[] = {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"};
  const char* nearest_names[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  int ci = 0;
  for (Case cs : cases) {
    ++ci;
    if (cs.sizes) {
      cs.sh = static_cast<float>(static_cast<double>(cs.oh) / static_cast<double>(cs.h));
      cs.sw = static_cast<float>(static_cast<double>(cs.ow) / static_cast<double>(cs.w));
    } else {
      cs.oh = static_cast<int64_t>(std::floor(static_cast<double>(cs.sh) * static_cast<double>(cs.h)));
      cs.ow = static_cast<int64_t>(std::floor(static_cast<double>(cs.sw) * static_cast<double>(cs.w)));
    }
    const size_t nin = static_cast<size_t>(cs.n * cs.c * cs.h * cs.w);
    const size_t nout = static_cast<size_t>(cs.n * cs.c * cs.oh * cs.ow);
    std::vector<float> x = rand_vec(nin, -4.0f, 4.0f);
    float* dx = to_dev(x);
    float* dy;
    CK(cudaMalloc(&dy, nout * sizeof(float)));
    for (int mode = kResizeNearest; mode <= kResizeLinear; ++mode)
      for (int coord = kCoordHalfPixel; coord <= kCoordPytorchHalfPixel; ++coord)
        for (int nm = kNearestRoundPreferFloor; nm <= kNearestCeil; ++nm) {
          if (mode == kResizeLinear && nm != 0) continue;
          Resize2d r;
          r.n = cs.n, r.c = cs.c, r.h = cs.h, r.w = cs.w, r.oh = cs.oh, r.ow = cs.ow;
          r.scale_h = cs.sh, r.scale_w = cs.sw;
          r.mode = mode, r.coord = coord, r.nearest = nm;
          std::vector<double> want(nout);
          for (int64_t pl = 0; pl < cs.n * cs.c; ++pl)
            for (int64_t oh = 0; oh < cs.oh; ++oh)
              for (int64_t ow = 0; ow < cs.ow; ++ow) {
                const double yh = ref_coord(oh, cs.sh, cs.h, coord), xw = ref_coord(ow, cs.sw, cs.w, coord);
                const float* xp = x.data() + pl * cs.h * cs.w;
                double v;
                if (mode == kResizeNearest) {
                  v = xp[ref_nearest(yh, cs.h, nm) * cs.w + ref_nearest(xw, cs.w, nm)];
                } else {
                  // ONNX linear: the coordinate clamped to [0, in - 1], then bilinear.
                  const double ch = std::min(std::max(yh, 0.0), static_cast<double>(cs.h - 1));
                  const double cw = std::min(std::max(xw, 0.0), static_cast<double>(cs.w - 1));
                  const int64_t h0 = static_cast<int64_t>(std::floor(ch)), w0 = static_cast<int64_t>(std::floor(cw));
                  const int64_t h1 = std::min<int64_t>(h0 + 1, cs.h - 1), w1 = std::min<int64_t>(w0 + 1, cs.w - 1);
                  const double fh = ch - h0, fw = cw - w0;
                  v = (1 - fh) * ((1 - fw) * xp[h0 * cs.w + w0] + fw * xp[h0 * cs.w + w1]) +
                      fh * ((1 - fw) * xp[h1 * cs.w + w0] + fw * xp[h1 * cs.w + w1]);
                }
                want[static_cast<size_t>((pl * cs.oh + oh) * cs.ow + ow)] = v;
              }
          CK(launch_resize2d(r, dx, dy, 0));
          std::string name = std::string("resize_case") + std::to_string(ci) + "_" +
                             (mode == kResizeNearest ? "nearest_" : "linear_") + coord_names[coord] +
                             (mode == kResizeNearest ? std::string("_") + nearest_names[nm] : std::string());
          compare(name, from_dev(dy, nout), want, 1e-5, 1e-5);
        }
    CK(cudaFree(dx));
    CK(cudaFree(dy));
  }
  Resize2d e;
  report("resize_empty", launch_resize2d(e, nullptr, nullptr, 0) == cudaSuccess, 0);
}

void check_fill() {
  float* d;
  CK(cudaMalloc(&d, 1001 * sizeof(float)));
  CK(launch_fill(d, 1001, -3.5f, 0));
  std::vector<float> h = from_dev(d, 1001);
  bool ok = std::all_of(h.begin(), h.end(), [](float v) { return v == -3.5f; });
  report("fill", ok, ok ? 0 : 1);
  report("fill_empty", launch_fill(d, 0, 1.0f, 0) == cudaSuccess, 0);
  CK(cudaFree(d));
}

}  // namespace

int main() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("no CUDA device: %s\n", e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
    return 0;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  check_chains();
  check_copies();
  check_gathers();
  check_softmax();
  check_layernorm();
  check_reduce();
  check_pools();
  check_resizes();
  check_fill();
  CK(cudaDeviceSynchronize());
  std::printf("%d checks, %d failed\n", g_checks, g_failures);
  return g_failures ? 1 : 0;
}
