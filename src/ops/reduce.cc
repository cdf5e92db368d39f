// Reduce family: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/
// SumSquare (ArgMax/ArgMin in reduce_arg.cc).
//
// Method: the input dims are collapsed (size-1 dims dropped, neighbours with
// the same reduced/kept status merged). When the innermost collapsed dim is
// reduced ("row mode"), each output reduces contiguous rows with several
// independent accumulators, which GCC vectorizes without reassociating a
// single sum. When it is kept ("column mode"), each reduced row is combined
// elementwise into a block of accumulators, a plainly vectorizable loop.
// Accumulation is in float for float32/float16/bfloat16, double for float64,
// wrapping int64 for integer sums and products, the type itself for
// integer max/min. Reductions over no elements give the identity of the
// reduction (0, 1, -inf for max, +inf for min; mean 0/0 = NaN). Float32
// ReduceSum/ReduceMean over trailing axes sum each row in ONNX Runtime's
// order instead (eigen_sum.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "ops/eigen_sum.h"
#include "ops/elementwise_common.h"
#include "ops/elementwise_math.h"
#include "ops/kernels/lane_fold.h"
#include "ops/op_registry.h"
#include "ops/reduce_arg.h"

namespace tessera {
namespace {

using ew::compute_t;
using ew::kGrain;

enum class Kind { kSum, kMean, kSumSquare, kL1, kL2, kLogSum, kLogSumExp, kMax, kMin, kProd };

// ---- axes and inference ---------------------------------------------------

struct AxesSpec {
  bool known = true;          // false: axes come from an input whose value is unknown
  std::vector<int64_t> axes;  // as given (possibly negative)
};

AxesSpec read_axes(const Node& node, const Tensor* axes_value, bool has_axes_input) {
  AxesSpec s;
  if (has_axes_input) {
    if (!axes_value) {
      s.known = false;
    } else {
      s.axes = axes_value->to_int64_vector();
    }
  } else {
    s.axes = node.attr_ints("axes");
  }
  return s;
}

bool keepdims_of(const Node& n) { return n.attr_int("keepdims", 1) != 0; }
bool noop_of(const Node& n) { return n.attr_int("noop_with_empty_axes", 0) != 0; }

// Marks the reduced axes; empty axes mean all. Fails on out-of-range axes.
Status reduced_flags(const std::vector<int64_t>& axes, int rank, const Node& node, std::vector<bool>* out) {
  out->assign(static_cast<size_t>(rank), axes.empty());
  for (int64_t a : axes) {
    int n = normalize_axis(a, rank);
    if (n < 0) {
      return InvalidModel(node.describe() + ": axis " + std::to_string(a) + " is out of range for rank " +
                          std::to_string(rank));
    }
    (*out)[static_cast<size_t>(n)] = true;
  }
  return Status::Ok();
}

template <uint32_t Types>
Status infer_reduce(InferContext& ctx) {
  TSR_RETURN_IF_ERROR(ew::check_input_dtype(ctx, 0, Types));
  const Node& node = ctx.node();
  const Shape& in = ctx.in_shape(0);
  const bool keep = keepdims_of(node);
  AxesSpec spec = read_axes(node, ctx.in_value(1), ctx.has_input(1));
  DType t = ctx.in_dtype(0);
  if (!in.rank_known) {
    ctx.set_output(0, t, Shape::Unranked());
    return Status::Ok();
  }
  if (!spec.known) {
    ctx.set_output(0, t, keep ? Shape::Unknown(in.rank()) : Shape::Unranked());
    return Status::Ok();
  }
  if (spec.axes.empty() && noop_of(node)) {
    ctx.set_output(0, t, in);
    return Status::Ok();
  }
  std::vector<bool> red;
  TSR_RETURN_IF_ERROR(reduced_flags(spec.axes, in.rank(), node, &red));
  std::vector<Dim> dims;
  for (int i = 0; i < in.rank(); ++i) {
    if (!red[static_cast<size_t>(i)]) {
      dims.push_back(in[i]);
    } else if (keep) {
      dims.push_back(Dim(1));
    }
  }
  ctx.set_output(0, t, Shape(std::move(dims)));
  return Status::Ok();
}

// ---- layout ---------------------------------------------------------------

struct Layout {
  bool row_mode = true;  // innermost collapsed dim reduced
  int64_t inner = 1;     // its length
  Dims kept_dims, kept_strides;  // outer kept dims and their input strides
  Dims red_dims, red_strides;    // outer reduced dims and their input strides
  int64_t red_rows = 1;          // product of red_dims
  int64_t count = 1;             // input elements per output
};

Layout make_layout(const Dims& in, const std::vector<bool>& red) {
  Dims sizes;
  std::vector<bool> flags;
  Layout L;
  for (size_t d = 0; d < in.size(); ++d) {
    if (red[d]) L.count *= in[d];
    if (in[d] == 1) continue;
    if (!flags.empty() && flags.back() == red[d]) {
      sizes.back() *= in[d];
    } else {
      sizes.push_back(in[d]);
      flags.push_back(red[d]);
    }
  }
  if (sizes.empty()) {  // a single element
    sizes.push_back(1);
    flags.push_back(false);
  }
  Dims strides = contiguous_strides(sizes);
  const size_t last = sizes.size() - 1;
  L.row_mode = flags[last];
  L.inner = sizes[last];
  for (size_t d = 0; d < last; ++d) {
    if (flags[d]) {
      L.red_dims.push_back(sizes[d]);
      L.red_strides.push_back(strides[d]);
      L.red_rows *= sizes[d];
    } else {
      L.kept_dims.push_back(sizes[d]);
      L.kept_strides.push_back(strides[d]);
    }
  }
  return L;
}

// Input offset of the first element of outer output index `o`.
int64_t kept_offset(const Layout& L, int64_t o) {
  int64_t off = 0;
  for (size_t d = L.kept_dims.size(); d-- > 0;) {
    off += (o % L.kept_dims[d]) * L.kept_strides[d];
    o /= L.kept_dims[d];
  }
  return off;
}

// Calls f(offset) for every reduced outer row.
template <class F>
void for_each_red_row(const Layout& L, F&& f) {
  if (L.red_dims.empty()) {
    f(int64_t{0});
    return;
  }
  const size_t r = L.red_dims.size();
  Dims idx(r, 0);
  int64_t off = 0;
  for (int64_t row = 0; row < L.red_rows; ++row) {
    f(off);
    for (size_t d = r; d-- > 0;) {
      ++idx[d];
      off += L.red_strides[d];
      if (idx[d] < L.red_dims[d]) break;
      off -= L.red_strides[d] * L.red_dims[d];
      idx[d] = 0;
    }
  }
}

// ---- reducers ---------------------------------------------------------------

template <class A>
inline A wrap_add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <class A>
inline A wrap_mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

template <class A>
inline A exp_of(A x) {
  if constexpr (std::is_same_v<A, float>) {
    return fastmath::exp(x);
  } else {
    return std::exp(x);
  }
}

// How each kind maps an element (pre), combines (comb) and finishes (post).
// `shift` is LogSumExp's per-output maximum.
template <Kind K, class A>
struct Reducer {
  static A init() {
    if constexpr (K == Kind::kMax) {
      if constexpr (std::is_floating_point_v<A>) return -std::numeric_limits<A>::infinity();
      else return std::numeric_limits<A>::lowest();
    } else if constexpr (K == Kind::kMin) {
      if constexpr (std::is_floating_point_v<A>) return std::numeric_limits<A>::infinity();
      else return std::numeric_limits<A>::max();
    } else if constexpr (K == Kind::kProd) {
      return A(1);
    } else {
      return A(0);
    }
  }
  static A pre(A x, A shift) {
    (void)shift;
    if constexpr (K == Kind::kSumSquare || K == Kind::kL2) {
      return wrap_mul(x, x);
    } else if constexpr (K == Kind::kL1) {
      if constexpr (std::is_floating_point_v<A>) return std::fabs(x);
      else return x < 0 ? wrap_mul(x, A(-1)) : x;
    } else if constexpr (K == Kind::kLogSumExp) {
      return exp_of(x - shift);
    } else {
      return x;
    }
  }
  static A comb(A a, A b) {
    if constexpr (K == Kind::kMax) {
      if constexpr (std::is_floating_point_v<A>) return ((b > a) | (b != b)) ? b : a;  // NaN sticks; | keeps it branch-free
      else return b > a ? b : a;
    } else if constexpr (K == Kind::kMin) {
      if constexpr (std::is_floating_point_v<A>) return ((b < a) | (b != b)) ? b : a;
      else return b < a ? b : a;
    } else if constexpr (K == Kind::kProd) {
      return wrap_mul(a, b);
    } else {
      return wrap_add(a, b);
    }
  }
  template <class C>
  static C post(A acc, int64_t count, A shift) {
    (void)count;
    (void)shift;
    if constexpr (K == Kind::kMean) {
      if constexpr (std::is_integral_v<A>) {
        return count == 0 ? C(0) : static_cast<C>(acc / count);
      } else {
        return static_cast<C>(acc / static_cast<A>(count));
      }
    } else if constexpr (K == Kind::kL2) {
      return static_cast<C>(std::sqrt(static_cast<double>(acc)));
    } else if constexpr (K == Kind::kLogSum) {
      if constexpr (std::is_integral_v<A>) return static_cast<C>(std::log(static_cast<double>(acc)));
      else return static_cast<C>(std::log(acc));
    } else if constexpr (K == Kind::kLogSumExp) {
      return static_cast<C>(shift + std::log(acc));
    } else {
      return static_cast<C>(acc);
    }
  }
};

// The accumulator type of a storage type for a kind.
template <Kind K, class T>
using acc_t = std::conditional_t<
    std::is_floating_point_v<compute_t<T>>, compute_t<T>,
    std::conditional_t<K == Kind::kMax || K == Kind::kMin, T, int64_t>>;

// Reduces n contiguous elements with independent accumulator lanes.
template <class R, class A, class T>
inline A reduce_row(const T* x, int64_t n, A shift) {
  using C = compute_t<T>;
  return kernels::fold_lanes<static_cast<int>(128 / sizeof(A))>(
      n, R::init(), [&](int64_t i) { return R::pre(static_cast<A>(static_cast<C>(x[i])), shift); },
      [](A a, A b) { return R::comb(a, b); });
}

// Runs reducer R over the layout and hands write(o, acc) each result.
// shift(o) gives LogSumExp's per-output shift (0 otherwise).
template <class R, class A, class T, class Shift, class Write>
void reduce_core(Parallel& pool, const Layout& L, const T* in, int64_t out_numel, Shift shift, Write write) {
  using C = compute_t<T>;
  if (L.row_mode) {
    const int64_t work = std::max<int64_t>(1, L.red_rows * L.inner);
    pool.parallel_for(out_numel, std::max<int64_t>(1, kGrain / work), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* base = in + kept_offset(L, o);
        const A s = shift(o);
        A acc = R::init();
        for_each_red_row(L, [&](int64_t off) { acc = R::comb(acc, reduce_row<R, A>(base + off, L.inner, s)); });
        write(o, acc);
      }
    });
    return;
  }
  // Column mode: outputs come in rows of `inner`, processed in blocks.
  constexpr int64_t kBlock = 2048;
  const int64_t out_rows = out_numel / L.inner;
  const int64_t blocks = (L.inner + kBlock - 1) / kBlock;
  const int64_t work = std::max<int64_t>(1, L.red_rows * std::min(L.inner, kBlock));
  pool.parallel_for(out_rows * blocks, std::max<int64_t>(1, kGrain / work), [&](int64_t b, int64_t e) {
    std::array<A, kBlock> acc;
    std::array<A, kBlock> sh;
    for (int64_t item = b; item < e; ++item) {
      const int64_t orow = item / blocks;
      const int64_t j0 = (item % blocks) * kBlock;
      const int64_t n = std::min(kBlock, L.inner - j0);
      const int64_t obase = orow * L.inner + j0;
      const T* base = in + kept_offset(L, orow) + j0;
      for (int64_t j = 0; j < n; ++j) {
        acc[static_cast<size_t>(j)] = R::init();
        sh[static_cast<size_t>(j)] = shift(obase + j);
      }
      for_each_red_row(L, [&](int64_t off) {
        const T* x = base + off;
        for (int64_t j = 0; j < n; ++j) {
          const size_t uj = static_cast<size_t>(j);
          acc[uj] = R::comb(acc[uj], R::pre(static_cast<A>(static_cast<C>(x[j])), sh[uj]));
        }
      });
      for (int64_t j = 0; j < n; ++j) write(obase + j, acc[static_cast<size_t>(j)]);
    }
  });
}

template <Kind K, class T>
void reduce_typed(Parallel& pool, const Layout& L, const Tensor& x, Tensor& y) {
  using A = acc_t<K, T>;
  const T* in = x.data<T>();
  T* out = y.data<T>();
  const int64_t out_numel = y.numel();
  auto zero = [](int64_t) { return A(0); };
  if constexpr (K == Kind::kLogSumExp) {
    // Pass 1: the maximum per output; pass 2: shift + log(sum(exp(x - shift))).
    std::vector<A> mx(static_cast<size_t>(out_numel));
    reduce_core<Reducer<Kind::kMax, A>, A>(pool, L, in, out_numel, zero, [&](int64_t o, A m) {
      mx[static_cast<size_t>(o)] = std::isfinite(m) ? m : A(0);
    });
    using R = Reducer<Kind::kLogSumExp, A>;
    reduce_core<R, A>(
        pool, L, in, out_numel, [&](int64_t o) { return mx[static_cast<size_t>(o)]; },
        [&](int64_t o, A acc) {
          out[o] = ew::to_storage<T>(R::template post<compute_t<T>>(acc, L.count, mx[static_cast<size_t>(o)]));
        });
  } else {
    if constexpr ((K == Kind::kSum || K == Kind::kMean) && std::is_same_v<T, float>) {
      // float sums over trailing axes in ONNX Runtime's order (Eigen's); other layouts as below.
      if (L.row_mode && L.red_dims.empty()) {
        pool.parallel_for(out_numel, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, L.inner)),
                          [&](int64_t b, int64_t e) {
                            for (int64_t o = b; o < e; ++o) {
                              const float s = eigen_order::row_sum(in + o * L.inner, L.inner, o * L.inner);
                              out[o] = K == Kind::kMean ? s / static_cast<float>(L.count) : s;
                            }
                          });
        return;
      }
    }
    using R = Reducer<K, A>;
    reduce_core<R, A>(pool, L, in, out_numel, zero, [&](int64_t o, A acc) {
      out[o] = ew::to_storage<T>(R::template post<compute_t<T>>(acc, L.count, A(0)));
    });
  }
}

template <Kind K, uint32_t Types>
Status run_reduce(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  Tensor& y = *ctx.output(0);
  TSR_RETURN_IF_ERROR(ew::check_tensor_dtype(ctx, x, Types));
  const Node& node = ctx.node();
  AxesSpec spec = read_axes(node, ctx.input(1), ctx.input(1) != nullptr);
  std::vector<bool> red;
  if (spec.axes.empty() && noop_of(node)) {
    // Reduced over no axis, each element on its own: ReduceSumSquare gives x^2, ReduceL1 |x|, ReduceLogSum log(x)
    // (as ONNX's reference and ONNX Runtime do), the others x.
    red.assign(static_cast<size_t>(x.rank()), false);
  } else {
    TSR_RETURN_IF_ERROR(reduced_flags(spec.axes, x.rank(), node, &red));
  }
  if (y.numel() == 0) return Status::Ok();
  const Layout L = make_layout(x.dims(), red);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (ew::type_in<T>(Types)) reduce_typed<K, T>(ctx.pool(), L, x, y);
  });
  return Status::Ok();
}

}  // namespace

TSR_REGISTER_OPS(reduce) {
  constexpr uint32_t kNum = ew::kNumericTypes;
  constexpr uint32_t kFloat = ew::kFloatTypes;
  auto add = [&](const char* name, InferFn infer, KernelFn fn) {
    reg.add(OpSchema{name, "", infer, nullptr, fn, {1}});
  };
  add("ReduceSum", infer_reduce<kNum>, run_reduce<Kind::kSum, kNum>);
  add("ReduceMean", infer_reduce<kNum>, run_reduce<Kind::kMean, kNum>);
  add("ReduceSumSquare", infer_reduce<kNum>, run_reduce<Kind::kSumSquare, kNum>);
  add("ReduceL1", infer_reduce<kNum>, run_reduce<Kind::kL1, kNum>);
  add("ReduceL2", infer_reduce<kNum>, run_reduce<Kind::kL2, kNum>);
  add("ReduceLogSum", infer_reduce<kNum>, run_reduce<Kind::kLogSum, kNum>);
  add("ReduceLogSumExp", infer_reduce<kFloat>, run_reduce<Kind::kLogSumExp, kFloat>);
  // Opset 20 adds bool to ReduceMax/ReduceMin (any / all).
  constexpr uint32_t kNumBool = kNum | ew::dtype_bit(DType::kBool);
  add("ReduceMax", infer_reduce<kNumBool>, run_reduce<Kind::kMax, kNumBool>);
  add("ReduceMin", infer_reduce<kNumBool>, run_reduce<Kind::kMin, kNumBool>);
  add("ReduceProd", infer_reduce<kNum>, run_reduce<Kind::kProd, kNum>);
  register_arg_reduce_ops(reg);
}

}  // namespace tessera
