// ArgMax / ArgMin: the int64 index of the first (or, with
// select_last_index, the last) extreme element along one axis. The input is
// viewed as [outer, n, inner]; with inner == 1 each output scans a
// contiguous row, otherwise rows of `inner` running best values are updated
// elementwise. NaN counts as the extreme, and the first NaN wins (numpy).
#include <algorithm>
#include <array>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/elementwise_common.h"
#include "ops/op_registry.h"
#include "ops/reduce_arg.h"

namespace tessera {
namespace {

using ew::compute_t;

Status infer_arg(InferContext& ctx) {
  TSR_RETURN_IF_ERROR(ew::check_input_dtype(ctx, 0, ew::kNumericTypes));
  const Shape& in = ctx.in_shape(0);
  const bool keep = ctx.node().attr_int("keepdims", 1) != 0;
  if (!in.rank_known) {
    ctx.set_output(0, DType::kInt64, Shape::Unranked());
    return Status::Ok();
  }
  const int64_t axis = ctx.node().attr_int("axis", 0);
  const int a = normalize_axis(axis, in.rank());
  if (a < 0) return ctx.error("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(in.rank()));
  if (in[a].known() && in[a].value == 0) return ctx.error("cannot take the index of an extreme over an empty axis");
  std::vector<Dim> dims;
  for (int i = 0; i < in.rank(); ++i) {
    if (i != a) {
      dims.push_back(in[i]);
    } else if (keep) {
      dims.push_back(Dim(1));
    }
  }
  ctx.set_output(0, DType::kInt64, Shape(std::move(dims)));
  return Status::Ok();
}

// True when x should replace best.
template <bool kMax, bool kLast, class C>
inline bool better(C x, C best) {
  const bool b = kMax ? (kLast ? x >= best : x > best) : (kLast ? x <= best : x < best);
  if constexpr (std::is_floating_point_v<C>) {
    return (best == best) & (b | (x != x));  // a NaN wins and then stays
  } else {
    return b;
  }
}

// Extreme of a contiguous row with independent lanes (vectorizable); NaN
// sticks for floats.
template <bool kMax, class C, class T>
C row_extreme(const T* row, int64_t n) {
  constexpr int kLanes = static_cast<int>(128 / sizeof(C));
  std::array<C, kLanes> acc;
  acc.fill(static_cast<C>(row[0]));
  auto comb = [](C a, C x) {
    if constexpr (std::is_floating_point_v<C>) {
      return ((kMax ? x > a : x < a) | (x != x)) ? x : a;
    } else {
      return (kMax ? x > a : x < a) ? x : a;
    }
  };
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    // Unrolled fully, the lanes become scalars that GCC cannot vectorize.
#pragma GCC unroll 1
    for (int j = 0; j < kLanes; ++j) {
      acc[static_cast<size_t>(j)] = comb(acc[static_cast<size_t>(j)], static_cast<C>(row[i + j]));
    }
  }
  C r = acc[0];
  for (int j = 1; j < kLanes; ++j) r = comb(r, acc[static_cast<size_t>(j)]);
  for (; i < n; ++i) r = comb(r, static_cast<C>(row[i]));
  return r;
}

template <bool kMax, bool kLast, class T>
void arg_typed(Parallel& pool, const T* in, int64_t* out, int64_t outer, int64_t n, int64_t inner) {
  using C = compute_t<T>;
  if (inner == 1) {
    // Two passes per row: the extreme value, then its first (last) position.
    pool.parallel_for(outer, std::max<int64_t>(1, ew::kGrain / n), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* row = in + o * n;
        const C m = row_extreme<kMax, C>(row, n);
        int64_t bi = 0;
        if (m != m) {  // first NaN, whatever select_last_index says (numpy)
          while (static_cast<C>(row[bi]) == static_cast<C>(row[bi])) ++bi;
        } else if (kLast) {
          bi = n - 1;
          while (static_cast<C>(row[bi]) != m) --bi;
        } else {
          while (static_cast<C>(row[bi]) != m) ++bi;
        }
        out[o] = bi;
      }
    });
    return;
  }
  // Rows of `inner` running extremes, in blocks so that the work splits
  // across threads even when outer is 1 (ArgMax over channels of [1,C,H,W]).
  // Indices are kept as wide as the values so the update loop vectorizes.
  using I = std::conditional_t<sizeof(C) == 8, int64_t, int32_t>;
  constexpr int64_t kBlock = 2048;
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  const int64_t work = std::max<int64_t>(1, n * std::min(inner, kBlock));
  pool.parallel_for(outer * blocks, std::max<int64_t>(1, ew::kGrain / work), [&](int64_t b, int64_t e) {
    std::array<C, kBlock> best;
    std::array<I, kBlock> bidx;
    for (int64_t item = b; item < e; ++item) {
      const int64_t o = item / blocks;
      const int64_t j0 = (item % blocks) * kBlock;
      const int64_t m = std::min(kBlock, inner - j0);
      const T* base = in + o * n * inner + j0;
      for (int64_t j = 0; j < m; ++j) {
        best[static_cast<size_t>(j)] = static_cast<C>(base[j]);
        bidx[static_cast<size_t>(j)] = 0;
      }
      for (int64_t k = 1; k < n; ++k) {
        const T* row = base + k * inner;
        const I ki = static_cast<I>(k);
        for (int64_t j = 0; j < m; ++j) {
          const size_t uj = static_cast<size_t>(j);
          const C v = static_cast<C>(row[j]);
          const C cur = best[uj];
          const bool take = better<kMax, kLast>(v, cur);
          best[uj] = take ? v : cur;
          bidx[uj] = take ? ki : bidx[uj];
        }
      }
      int64_t* dst = out + o * inner + j0;
      for (int64_t j = 0; j < m; ++j) dst[j] = bidx[static_cast<size_t>(j)];
    }
  });
}

template <bool kMax>
Status run_arg(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  Tensor& y = *ctx.output(0);
  TSR_RETURN_IF_ERROR(ew::check_tensor_dtype(ctx, x, ew::kNumericTypes));
  const int a = normalize_axis(ctx.node().attr_int("axis", 0), x.rank());
  if (a < 0) return ctx.error("axis is out of range");
  const bool last = ctx.node().attr_int("select_last_index", 0) != 0;
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < a; ++i) outer *= x.dim(i);
  for (int i = a + 1; i < x.rank(); ++i) inner *= x.dim(i);
  const int64_t n = x.dim(a);
  if (y.numel() == 0) return Status::Ok();
  if (n == 0) return ctx.error("cannot take the index of an extreme over an empty axis");
  if (n > std::numeric_limits<int32_t>::max()) return ctx.error("axis of length " + std::to_string(n) + " is too long");
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (ew::type_in<T>(ew::kNumericTypes)) {
      if (last) {
        arg_typed<kMax, true>(ctx.pool(), x.data<T>(), y.data<int64_t>(), outer, n, inner);
      } else {
        arg_typed<kMax, false>(ctx.pool(), x.data<T>(), y.data<int64_t>(), outer, n, inner);
      }
    }
  });
  return Status::Ok();
}

}  // namespace

void register_arg_reduce_ops(OpRegistry& reg) {
  reg.add(OpSchema{"ArgMax", "", infer_arg, nullptr, run_arg<true>, {}});
  reg.add(OpSchema{"ArgMin", "", infer_arg, nullptr, run_arg<false>, {}});
}

}  // namespace tessera
