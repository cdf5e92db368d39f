// Elementwise family, part 1: unary math and activations (Abs ... Erf, Relu
// ... Gelu, Clip), the registration entry point of the family, and IsNaN /
// IsInf / Not. Binary, variadic and Where ops live in elementwise_binary.cc,
// Cast in elementwise_cast.cc.
//
// Each op is a small functor over the compute type (float for float32 and
// the half types, double, or the integer type itself) applied in a flat
// parallel loop. float has its own overloads built on elementwise_math.h so
// that GCC vectorizes the loop; double keeps the libm functions.
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include <immintrin.h>

#include "ops/elementwise_common.h"
#include "ops/elementwise_math.h"
#include "ops/op_registry.h"
#include "util/cpu_isa.h"

namespace tessera {
namespace ew {
namespace {

namespace fm = fastmath;

// ---- runners --------------------------------------------------------------

template <uint32_t Types>
Status infer_unary(InferContext& ctx) {
  TSR_RETURN_IF_ERROR(check_input_dtype(ctx, 0, Types));
  ctx.set_output(0, ctx.in_dtype(0), ctx.in_shape(0));
  return Status::Ok();
}

template <uint32_t Types>
Status infer_unary_to_bool(InferContext& ctx) {
  TSR_RETURN_IF_ERROR(check_input_dtype(ctx, 0, Types));
  ctx.set_output(0, DType::kBool, ctx.in_shape(0));
  return Status::Ok();
}

struct SqrtOp;

// sqrt sets errno for negative inputs, so GCC does not vectorize std::sqrt
// without -fno-math-errno; the instruction itself is IEEE-exact.
void sqrt_f32(const float* x, float* y, int64_t b, int64_t e) {
  for (; b + 8 <= e; b += 8) _mm256_storeu_ps(y + b, _mm256_sqrt_ps(_mm256_loadu_ps(x + b)));
  for (; b < e; ++b) y[b] = std::sqrt(x[b]);
}

}  // namespace
}  // namespace ew

// The float loop again, compiled for AVX-512: the functors are plain C++ (elementwise_math.h's branch-free math),
// so the compiler vectorises it 16 lanes wide where the build's baseline gives 8.
TSR_AVX512_BEGIN
namespace ew::avx512 {
template <class Op>
void unary_f32(const Op& op, const float* __restrict x, float* __restrict y, int64_t b, int64_t e) {
  if constexpr (requires { Op::kCosine; }) {
    fastmath::sin_cos_elements(x + b, y + b, e - b, Op::kCosine);
  } else {
    for (int64_t i = b; i < e; ++i) y[i] = op(x[i]);
  }
}
}  // namespace ew::avx512
TSR_AVX512_END

namespace ew {
namespace {

// Sin and Cos of a half type, element by element: the vector form within its range, libm beyond. A function of its
// own, so that Op::libm is named only where the op has it (clang checks a generic lambda's value-dependent branches
// against the enclosing template's arguments).
template <class Op, class T>
void unary_with_libm(const Op& op, const T* px, T* py, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) {
    const float v = static_cast<float>(px[i]);
    py[i] = to_storage<T>(std::fabs(v) <= fm::kSinCosRange ? op(v) : Op::libm(v));
  }
}

// y = op(x) for every element; Op(node) reads the attributes.
template <class Op>
Status run_unary(KernelContext& ctx) {
  constexpr bool kLibm = requires { Op::libm(0.0f); };
  const Tensor& x = *ctx.input(0);
  Tensor& y = *ctx.output(0);
  TSR_RETURN_IF_ERROR(check_tensor_dtype(ctx, x, Op::kTypes));
  const Op op(ctx.node());
  const bool wide = cpu::avx512();
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (type_in<T>(Op::kTypes)) {
      using C = compute_t<T>;
      const T* px = x.data<T>();
      T* py = y.data<T>();
      ctx.pool().parallel_for(x.numel(), kGrain, [&](int64_t b, int64_t e) {
        if constexpr (std::is_same_v<Op, SqrtOp> && std::is_same_v<T, float>) {
          sqrt_f32(px, py, b, e);
        } else if constexpr (std::is_same_v<T, float>) {
          if (wide) {
            avx512::unary_f32(op, px, py, b, e);
          } else if constexpr (kLibm) {
            fm::sin_cos_elements(px + b, py + b, e - b, Op::kCosine);
          } else {
            for (int64_t i = b; i < e; ++i) py[i] = op(px[i]);
          }
        } else if constexpr (kLibm && std::is_same_v<C, float>) {  // the half types
          unary_with_libm(op, px, py, b, e);
        } else {
          for (int64_t i = b; i < e; ++i) py[i] = to_storage<T>(op(static_cast<C>(px[i])));
        }
      });
    }
  });
  return Status::Ok();
}

// y = pred(x) with a bool output.
template <class Op>
Status run_unary_to_bool(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  Tensor& y = *ctx.output(0);
  TSR_RETURN_IF_ERROR(check_tensor_dtype(ctx, x, Op::kTypes));
  const Op op(ctx.node());
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (type_in<T>(Op::kTypes)) {
      using C = compute_t<T>;
      const T* px = x.data<T>();
      bool* py = y.data<bool>();
      ctx.pool().parallel_for(x.numel(), kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) py[i] = op(static_cast<C>(px[i]));
      });
    }
  });
  return Status::Ok();
}

// ---- math -----------------------------------------------------------------

#define TSR_FLOAT_UNARY(Name, expr)                          \
  struct Name##Op {                                          \
    static constexpr uint32_t kTypes = kFloatTypes;          \
    explicit Name##Op(const Node&) {}                        \
    template <class C>                                       \
    C operator()(C x) const {                                \
      return expr;                                           \
    }                                                        \
  };

TSR_FLOAT_UNARY(Acos, std::acos(x))
TSR_FLOAT_UNARY(Acosh, std::acosh(x))
TSR_FLOAT_UNARY(Asin, std::asin(x))
TSR_FLOAT_UNARY(Asinh, std::asinh(x))
TSR_FLOAT_UNARY(Atan, std::atan(x))
TSR_FLOAT_UNARY(Atanh, std::atanh(x))
TSR_FLOAT_UNARY(Cosh, std::cosh(x))
TSR_FLOAT_UNARY(Sinh, std::sinh(x))
TSR_FLOAT_UNARY(Tan, std::tan(x))
TSR_FLOAT_UNARY(Sqrt, std::sqrt(x))
TSR_FLOAT_UNARY(Reciprocal, C(1) / x)
// rint rounds half to even in the default rounding mode and, unlike
// floor/ceil, vectorizes without -fno-trapping-math.
TSR_FLOAT_UNARY(Round, std::rint(x))
TSR_FLOAT_UNARY(Floor, std::rint(x) - (std::rint(x) > x ? C(1) : C(0)))
TSR_FLOAT_UNARY(Ceil, -(std::rint(-x) - (std::rint(-x) > -x ? C(1) : C(0))))  // -floor(-x) keeps -0
#undef TSR_FLOAT_UNARY

// Sin and Cos: fastmath's vectorizing forms, libm beyond their range (fastmath::sin_cos_elements; libm for the half
// types' path).
struct SinOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  static constexpr bool kCosine = false;
  static float libm(float x) { return std::sin(x); }
  explicit SinOp(const Node&) {}
  float operator()(float x) const { return fm::sin(x); }
  double operator()(double x) const { return std::sin(x); }
};

struct CosOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  static constexpr bool kCosine = true;
  static float libm(float x) { return std::cos(x); }
  explicit CosOp(const Node&) {}
  float operator()(float x) const { return fm::cos(x); }
  double operator()(double x) const { return std::cos(x); }
};

struct ExpOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  explicit ExpOp(const Node&) {}
  float operator()(float x) const { return fm::exp(x); }
  double operator()(double x) const { return std::exp(x); }
};

struct LogOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  explicit LogOp(const Node&) {}
  float operator()(float x) const { return fm::log(x); }
  double operator()(double x) const { return std::log(x); }
};

struct TanhOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  explicit TanhOp(const Node&) {}
  float operator()(float x) const { return fm::tanh(x); }
  double operator()(double x) const { return std::tanh(x); }
};

struct ErfOp {
  static constexpr uint32_t kTypes = kNumericTypes;  // integers since opset 9 (result truncated)
  explicit ErfOp(const Node&) {}
  float operator()(float x) const { return fm::erf(x); }
  double operator()(double x) const { return std::erf(x); }
  template <class C>
  C operator()(C x) const {
    return static_cast<C>(std::erf(static_cast<double>(x)));
  }
};

struct AbsOp {
  static constexpr uint32_t kTypes = kNumericTypes;
  explicit AbsOp(const Node&) {}
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>) {
      return std::fabs(x);
    } else if constexpr (std::is_unsigned_v<C>) {
      return x;
    } else {  // wraps for the most negative value, as numpy does
      using U = std::make_unsigned_t<C>;
      return static_cast<C>(x < 0 ? static_cast<U>(U(0) - static_cast<U>(x)) : static_cast<U>(x));
    }
  }
};

struct NegOp {
  static constexpr uint32_t kTypes = kSignedTypes;
  explicit NegOp(const Node&) {}
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>) {
      return -x;
    } else {  // wraps for the most negative value, as numpy does
      return static_cast<C>(static_cast<std::make_unsigned_t<C>>(0) - static_cast<std::make_unsigned_t<C>>(x));
    }
  }
};

struct SignOp {
  static constexpr uint32_t kTypes = kNumericTypes;
  explicit SignOp(const Node&) {}
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>) {
      return static_cast<C>(x > 0 ? 1 : 0);
    } else {  // keeps NaN
      return x > C(0) ? C(1) : (x < C(0) ? C(-1) : x);
    }
  }
};

struct NotOp {
  static constexpr uint32_t kTypes = kBoolType;
  explicit NotOp(const Node&) {}
  bool operator()(bool x) const { return !x; }
};

// Opset 18: BitwiseNot on integers.
struct BitwiseNotOp {
  static constexpr uint32_t kTypes = kIntTypes;
  explicit BitwiseNotOp(const Node&) {}
  template <class C>
  C operator()(C x) const {
    return static_cast<C>(~x);
  }
};

struct IsNaNOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  explicit IsNaNOp(const Node&) {}
  template <class C>
  bool operator()(C x) const {
    return x != x;
  }
};

struct IsInfOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  bool neg, pos;
  explicit IsInfOp(const Node& n)
      : neg(n.attr_int("detect_negative", 1) != 0), pos(n.attr_int("detect_positive", 1) != 0) {}
  template <class C>
  bool operator()(C x) const {
    constexpr C kInf = std::numeric_limits<C>::infinity();
    return (pos & (x == kInf)) | (neg & (x == -kInf));
  }
};

// ---- activations ----------------------------------------------------------

struct ReluOp {
  static constexpr uint32_t kTypes = kSignedTypes;
  explicit ReluOp(const Node&) {}
  template <class C>
  C operator()(C x) const {
    return x < C(0) ? C(0) : x;  // keeps NaN
  }
};

struct LeakyReluOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  float alpha;
  explicit LeakyReluOp(const Node& n) : alpha(n.attr_float("alpha", 0.01f)) {}
  template <class C>
  C operator()(C x) const {
    return x * fm::sel(x < C(0), C(alpha), C(1));  // a branch here was 25x slower on mixed signs
  }
};

struct EluOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  float alpha;
  explicit EluOp(const Node& n) : alpha(n.attr_float("alpha", 1.0f)) {}
  float operator()(float x) const { return fm::select(x < 0.0f, alpha * fm::expm1(x), x); }
  double operator()(double x) const { return x < 0 ? alpha * std::expm1(x) : x; }
};

struct SeluOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  float alpha, gamma;
  explicit SeluOp(const Node& n)
      : alpha(n.attr_float("alpha", 1.67326319217681884765625f)),
        gamma(n.attr_float("gamma", 1.05070102214813232421875f)) {}
  float operator()(float x) const { return gamma * fm::select(x <= 0.0f, alpha * fm::expm1(x), x); }
  double operator()(double x) const { return gamma * (x <= 0 ? alpha * std::expm1(x) : x); }
};

struct CeluOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  float alpha;
  explicit CeluOp(const Node& n) : alpha(n.attr_float("alpha", 1.0f)) {}
  float operator()(float x) const { return fm::select(x < 0.0f, alpha * fm::expm1(x / alpha), x); }
  double operator()(double x) const { return x < 0 ? alpha * std::expm1(x / alpha) : x; }
};

struct SigmoidOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  explicit SigmoidOp(const Node&) {}
  float operator()(float x) const { return fm::logistic(x); }
  double operator()(double x) const { return 1.0 / (1.0 + std::exp(-x)); }
};

struct HardSigmoidOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  float alpha, beta;
  explicit HardSigmoidOp(const Node& n) : alpha(n.attr_float("alpha", 0.2f)), beta(n.attr_float("beta", 0.5f)) {}
  template <class C>
  C operator()(C x) const {
    return fm::hard_sigmoid(x, C(alpha), C(beta));
  }
};

struct HardSwishOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  explicit HardSwishOp(const Node&) {}
  template <class C>
  C operator()(C x) const {
    return fm::hard_swish(x);
  }
};

struct SoftplusOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  explicit SoftplusOp(const Node&) {}
  // max(x, 0) + log1p(exp(-|x|)): no overflow for large x.
  float operator()(float x) const { return fm::select(x > 0.0f, x, 0.0f) + fm::log1p(fm::exp(-std::fabs(x))); }
  double operator()(double x) const { return (x > 0.0 ? x : 0.0) + std::log1p(std::exp(-std::fabs(x))); }
};

struct SoftsignOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  explicit SoftsignOp(const Node&) {}
  template <class C>
  C operator()(C x) const {
    return x / (C(1) + std::fabs(x));
  }
};

struct MishOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  explicit MishOp(const Node&) {}
  // tanh(log(1 + e^x)) = n / (n + 2) with n = e^x (e^x + 2); one exp.
  float operator()(float x) const {
    float e = fm::exp(x);
    float n = e * (e + 2.0f);
    return fm::select(x > 20.0f, x, x * (n / (n + 2.0f)));
  }
  double operator()(double x) const { return x * std::tanh(std::log1p(std::exp(x))); }
};

// Gelu's two forms are two functors, so that each loop is one form and vectorizes.
struct GeluErfOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  explicit GeluErfOp(const Node&) {}
  float operator()(float x) const { return fm::gelu_erf(x); }
  double operator()(double x) const { return 0.5 * x * std::erfc(-x * 0.70710678118654752440); }
};

struct GeluTanhOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  explicit GeluTanhOp(const Node&) {}
  float operator()(float x) const { return fm::gelu_tanh(x); }
  double operator()(double x) const {
    return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  }
};

Status run_gelu(KernelContext& ctx) {
  return ctx.node().attr_string("approximate", "none") == "tanh" ? run_unary<GeluTanhOp>(ctx)
                                                                  : run_unary<GeluErfOp>(ctx);
}

struct ThresholdedReluOp {
  static constexpr uint32_t kTypes = kFloatTypes;
  float alpha;
  explicit ThresholdedReluOp(const Node& n) : alpha(n.attr_float("alpha", 1.0f)) {}
  template <class C>
  C operator()(C x) const {
    return x > C(alpha) ? x : C(0);
  }
};

struct ShrinkOp {
  static constexpr uint32_t kTypes = kNumericTypes;
  float bias, lambd;
  explicit ShrinkOp(const Node& n) : bias(n.attr_float("bias", 0.0f)), lambd(n.attr_float("lambd", 0.5f)) {}
  template <class C>
  C operator()(C x) const {
    // Integers follow numpy: the float result is cast back.
    using W = std::conditional_t<std::is_integral_v<C>, double, C>;
    W w = static_cast<W>(x);
    W lo = fm::sel(w > W(lambd), w - W(bias), W(0));
    return static_cast<C>(fm::sel(w < W(-lambd), w + W(bias), lo));
  }
};

// ---- Gelu's approximate attribute is checked when the op is inferred -------

Status infer_gelu(InferContext& ctx) {
  std::string a = ctx.node().attr_string("approximate", "none");
  if (a != "none" && a != "tanh") return ctx.error("approximate must be \"none\" or \"tanh\", got \"" + a + "\"");
  return infer_unary<kFloatTypes>(ctx);
}

Status infer_bitwise_not(InferContext& ctx) { return infer_unary<kBoolType>(ctx); }

// ---- Clip -----------------------------------------------------------------

// min/max come from the optional inputs 1 and 2 (opset >= 11) or from the
// float attributes of the same name (opset < 11).
Status infer_clip(InferContext& ctx) {
  TSR_RETURN_IF_ERROR(check_input_dtype(ctx, 0, kNumericTypes));
  for (int i = 1; i <= 2; ++i) {
    if (!ctx.has_input(i)) continue;
    const Shape& s = ctx.in_shape(i);
    if (s.rank_known && s.numel_or(1) != 1) {
      return ctx.error(std::string(i == 1 ? "min" : "max") + " must be a scalar, got shape " + s.str());
    }
    if (ctx.in_dtype(i) != DType::kUndefined && ctx.in_dtype(0) != DType::kUndefined &&
        ctx.in_dtype(i) != ctx.in_dtype(0)) {
      return ctx.error(std::string(i == 1 ? "min" : "max") + " has dtype " + dtype_name(ctx.in_dtype(i)) +
                       ", input has " + dtype_name(ctx.in_dtype(0)));
    }
  }
  ctx.set_output(0, ctx.in_dtype(0), ctx.in_shape(0));
  return Status::Ok();
}

Status run_clip(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  Tensor& y = *ctx.output(0);
  TSR_RETURN_IF_ERROR(check_tensor_dtype(ctx, x, kNumericTypes));
  for (int i = 1; i <= 2; ++i) {
    const Tensor* b = ctx.input(i);
    if (b && (b->numel() != 1 || b->dtype() != x.dtype())) {
      return ctx.error(std::string(i == 1 ? "min" : "max") + " must be a scalar of the input's dtype, got " +
                       b->str());
    }
  }
  const Node& node = ctx.node();
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (type_in<T>(kNumericTypes)) {
      using C = compute_t<T>;
      C lo = std::numeric_limits<C>::lowest();
      C hi = std::numeric_limits<C>::max();
      if (const Tensor* t = ctx.input(1)) {
        lo = static_cast<C>(t->data<T>()[0]);
      } else if (node.has_attr("min")) {
        lo = static_cast<C>(node.attr_float("min", 0.f));
      }
      if (const Tensor* t = ctx.input(2)) {
        hi = static_cast<C>(t->data<T>()[0]);
      } else if (node.has_attr("max")) {
        hi = static_cast<C>(node.attr_float("max", 0.f));
      }
      const T* px = x.data<T>();
      T* py = y.data<T>();
      ctx.pool().parallel_for(x.numel(), kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          C v = static_cast<C>(px[i]);
          v = v < lo ? lo : v;
          py[i] = to_storage<T>(v > hi ? hi : v);
        }
      });
    }
  });
  return Status::Ok();
}

}  // namespace

void register_unary_ops(OpRegistry& reg) {
  auto add = [&](const char* name, InferFn infer, KernelFn fn) { reg.add(OpSchema{name, "", infer, nullptr, fn, {}}); };
  constexpr uint32_t F = kFloatTypes;
#define TSR_ADD_UNARY(Name, Types) add(#Name, infer_unary<Types>, run_unary<Name##Op>)
  TSR_ADD_UNARY(Abs, kNumericTypes);
  TSR_ADD_UNARY(Acos, F);
  TSR_ADD_UNARY(Acosh, F);
  TSR_ADD_UNARY(Asin, F);
  TSR_ADD_UNARY(Asinh, F);
  TSR_ADD_UNARY(Atan, F);
  TSR_ADD_UNARY(Atanh, F);
  TSR_ADD_UNARY(Cos, F);
  TSR_ADD_UNARY(Cosh, F);
  TSR_ADD_UNARY(Sin, F);
  TSR_ADD_UNARY(Sinh, F);
  TSR_ADD_UNARY(Tan, F);
  TSR_ADD_UNARY(Tanh, F);
  TSR_ADD_UNARY(Ceil, F);
  TSR_ADD_UNARY(Floor, F);
  TSR_ADD_UNARY(Round, F);
  TSR_ADD_UNARY(Sign, kNumericTypes);
  TSR_ADD_UNARY(Neg, kSignedTypes);
  TSR_ADD_UNARY(Reciprocal, F);
  TSR_ADD_UNARY(Sqrt, F);
  TSR_ADD_UNARY(Exp, F);
  TSR_ADD_UNARY(Log, F);
  TSR_ADD_UNARY(Erf, kNumericTypes);
  TSR_ADD_UNARY(Relu, kSignedTypes);
  TSR_ADD_UNARY(LeakyRelu, F);
  TSR_ADD_UNARY(Elu, F);
  TSR_ADD_UNARY(Selu, F);
  TSR_ADD_UNARY(Celu, F);
  TSR_ADD_UNARY(Sigmoid, F);
  TSR_ADD_UNARY(HardSigmoid, F);
  TSR_ADD_UNARY(HardSwish, F);
  TSR_ADD_UNARY(Softplus, F);
  TSR_ADD_UNARY(Softsign, F);
  TSR_ADD_UNARY(Mish, F);
  TSR_ADD_UNARY(ThresholdedRelu, F);
  TSR_ADD_UNARY(Shrink, kNumericTypes);
#undef TSR_ADD_UNARY
  add("Gelu", infer_gelu, run_gelu);
  reg.add(OpSchema{"Gelu", "com.microsoft", infer_gelu, nullptr, run_gelu, {}});
  add("Not", infer_bitwise_not, run_unary<NotOp>);
  add("BitwiseNot", infer_unary<kIntTypes>, run_unary<BitwiseNotOp>);
  add("IsNaN", infer_unary_to_bool<F>, run_unary_to_bool<IsNaNOp>);
  add("IsInf", infer_unary_to_bool<F>, run_unary_to_bool<IsInfOp>);
  add("Clip", infer_clip, run_clip);
}

}  // namespace ew

TSR_REGISTER_OPS(elementwise) {
  ew::register_unary_ops(reg);
  ew::register_binary_ops(reg);
  ew::register_cast_ops(reg);
}

}  // namespace tessera
