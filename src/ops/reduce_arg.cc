// ArgMax / ArgMin: the int64 index of the first (or, with
// select_last_index, the last) extreme element along one axis. The input is
// viewed as [outer, n, inner]; with inner == 1 each output scans a
// contiguous row, otherwise rows of `inner` running best values are updated
// elementwise. NaN counts as the extreme, and the first NaN wins (numpy).
#include <algorithm>
#include <string>
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
  if constexpr (std::is_floating_point_v<C>) {
    if (best != best) return false;  // a NaN already won
    if (x != x) return true;
  }
  if constexpr (kMax) {
    return kLast ? x >= best : x > best;
  } else {
    return kLast ? x <= best : x < best;
  }
}

template <bool kMax, bool kLast, class T>
void arg_typed(ThreadPool& pool, const T* in, int64_t* out, int64_t outer, int64_t n, int64_t inner) {
  using C = compute_t<T>;
  if (inner == 1) {
    pool.parallel_for(outer, std::max<int64_t>(1, ew::kGrain / n), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* row = in + o * n;
        C best = static_cast<C>(row[0]);
        int64_t bi = 0;
        for (int64_t k = 1; k < n; ++k) {
          C v = static_cast<C>(row[k]);
          if (better<kMax, kLast>(v, best)) {
            best = v;
            bi = k;
          }
        }
        out[o] = bi;
      }
    });
    return;
  }
  pool.parallel_for(outer, std::max<int64_t>(1, ew::kGrain / (n * inner)), [&](int64_t b, int64_t e) {
    std::vector<C> best(static_cast<size_t>(inner));
    for (int64_t o = b; o < e; ++o) {
      const T* base = in + o * n * inner;
      int64_t* idx = out + o * inner;
      for (int64_t j = 0; j < inner; ++j) {
        best[static_cast<size_t>(j)] = static_cast<C>(base[j]);
        idx[j] = 0;
      }
      for (int64_t k = 1; k < n; ++k) {
        const T* row = base + k * inner;
        for (int64_t j = 0; j < inner; ++j) {
          C v = static_cast<C>(row[j]);
          if (better<kMax, kLast>(v, best[static_cast<size_t>(j)])) {
            best[static_cast<size_t>(j)] = v;
            idx[j] = k;
          }
        }
      }
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
