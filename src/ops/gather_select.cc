// Selection ops of the gather_scatter family: TopK, NonZero, Compress,
// ReverseSequence, CumSum, Unique. NonZero, Compress and Unique have
// value-dependent output shapes: their inference computes the count from the
// input values when it has them (at run time) and leaves it unknown
// otherwise.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "ops/tensor_util.h"

namespace tessera {

namespace {

// Numeric view of element types for comparisons: half types compare as float.
template <class T>
using Arith = std::conditional_t<std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>, float, T>;

template <class T>
inline bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(v);
  } else {
    (void)v;
    return false;
  }
}

// ---- TopK ----------------------------------------------------------------------

Status infer_topk(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  if (!in.rank_known) {
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unranked());
    ctx.set_output(1, DType::kInt64, Shape::Unranked());
    return Status::Ok();
  }
  const int axis = normalize_axis(ctx.node().attr_int("axis", -1), in.rank());
  if (axis < 0) return ctx.error("axis out of range for " + in.str());
  Dim k;
  std::vector<int64_t> kv;
  if (ctx.opset() < 10 || ctx.node().has_attr("k")) {
    k = Dim(ctx.node().attr_int("k", 0));
  } else if (known_ints(ctx, 1, &kv)) {
    if (kv.size() != 1) return ctx.error("K must hold one value");
    k = Dim(kv[0]);
  }
  if (k.known() && (k.value < 0 || (in[axis].known() && k.value > in[axis].value))) {
    return ctx.error("K=" + std::to_string(k.value) + " is out of range for " + in.str());
  }
  Shape out = in;
  out[axis] = k;
  ctx.set_output(0, ctx.in_dtype(0), out);
  ctx.set_output(1, DType::kInt64, out);
  return Status::Ok();
}

Status run_topk(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  Tensor* values = ctx.output(0);
  Tensor* indices = ctx.output(1);
  const int axis = normalize_axis(ctx.node().attr_int("axis", -1), x->rank());
  const bool largest = ctx.node().attr_int("largest", 1) != 0;
  const int64_t n = x->dim(axis);
  const int64_t k = values ? values->dim(axis) : indices->dim(axis);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x->dim(d);
  for (int d = axis + 1; d < x->rank(); ++d) inner *= x->dim(d);
  if (k == 0 || outer * inner == 0) return Status::Ok();
  Status st;
  visit_dtype(x->dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = Arith<T>;
    if constexpr (std::is_same_v<T, bool>) {
      st = Unsupported(ctx.node().describe() + ": TopK of bool");
    } else {
      const T* src = x->data<T>();
      // Strict weak order: NaN above everything; ties go to the lower index.
      auto before = [largest](const std::pair<A, int64_t>& a, const std::pair<A, int64_t>& b) {
        const bool an = is_nan(a.first), bn = is_nan(b.first);
        if (an || bn) {
          if (an != bn) return largest ? an : bn;
          return a.second < b.second;
        }
        if (a.first != b.first) return largest ? a.first > b.first : a.first < b.first;
        return a.second < b.second;
      };
      ctx.pool().parallel_for(outer * inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n)),
                              [&](int64_t b, int64_t e) {
        std::vector<std::pair<A, int64_t>> line(static_cast<size_t>(n));
        for (int64_t t = b; t < e; ++t) {
          const int64_t o = t / inner, i = t % inner;
          const T* p = src + o * n * inner + i;
          for (int64_t j = 0; j < n; ++j) line[static_cast<size_t>(j)] = {static_cast<A>(p[j * inner]), j};
          std::partial_sort(line.begin(), line.begin() + k, line.end(), before);
          for (int64_t j = 0; j < k; ++j) {
            const int64_t off = o * k * inner + j * inner + i;
            const int64_t src_j = line[static_cast<size_t>(j)].second;
            if (values) values->data<T>()[off] = p[src_j * inner];
            if (indices) indices->data<int64_t>()[off] = src_j;
          }
        }
      });
    }
  });
  return st;
}

// ---- NonZero -----------------------------------------------------------------------

template <class T>
inline bool nonzero(T v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return static_cast<float>(v) != 0.0f;
  } else {
    return v != T{};
  }
}

int64_t count_nonzero(const Tensor& t) {
  return visit_dtype(t.dtype(), [&](auto tag) -> int64_t {
    using T = decltype(tag);
    const T* p = t.data<T>();
    int64_t c = 0;
    for (int64_t i = 0; i < t.numel(); ++i) c += nonzero(p[i]) ? 1 : 0;
    return c;
  });
}

Status infer_nonzero(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  Dim rank = in.rank_known ? Dim(in.rank()) : Dim();
  const Tensor* v = ctx.in_value(0);
  ctx.set_output(0, DType::kInt64, Shape({rank, v ? Dim(count_nonzero(*v)) : Dim()}));
  return Status::Ok();
}

Status run_nonzero(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  Tensor* out = ctx.output(0);
  const int64_t nnz = out->dim(1);
  const int r = x->rank();
  int64_t* o = out->data<int64_t>();
  visit_dtype(x->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = x->data<T>();
    std::vector<int64_t> c(static_cast<size_t>(r), 0);
    int64_t j = 0;
    for (int64_t i = 0; i < x->numel() && j < nnz; ++i) {
      if (nonzero(p[i])) {
        for (int d = 0; d < r; ++d) o[d * nnz + j] = c[static_cast<size_t>(d)];
        ++j;
      }
      for (int d = r; d-- > 0;) {
        if (++c[static_cast<size_t>(d)] < x->dim(d)) break;
        c[static_cast<size_t>(d)] = 0;
      }
    }
  });
  return Status::Ok();
}

// ---- Compress -------------------------------------------------------------------------

// Indices of the kept slices: true entries of the condition within `limit`.
std::vector<int64_t> compress_selection(const Tensor& cond, int64_t limit) {
  std::vector<int64_t> sel;
  const int64_t n = std::min(cond.numel(), limit);
  for (int64_t i = 0; i < n; ++i) {
    if (cond.as_int64(i) != 0) sel.push_back(i);
  }
  return sel;
}

Status infer_compress(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  const Tensor* cond = ctx.in_value(1);
  const bool has_axis = ctx.node().has_attr("axis");
  if (!has_axis) {
    int64_t total = in.numel_or(-1);
    ctx.set_output(0, ctx.in_dtype(0),
                   Shape({cond && total >= 0 ? Dim(static_cast<int64_t>(compress_selection(*cond, total).size())) : Dim()}));
    return Status::Ok();
  }
  if (!in.rank_known) {
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unranked());
    return Status::Ok();
  }
  const int axis = normalize_axis(ctx.node().attr_int("axis", 0), in.rank());
  if (axis < 0) return ctx.error("axis out of range for " + in.str());
  Shape out = in;
  out[axis] = cond && in[axis].known()
                  ? Dim(static_cast<int64_t>(compress_selection(*cond, in[axis].value).size()))
                  : Dim();
  ctx.set_output(0, ctx.in_dtype(0), std::move(out));
  return Status::Ok();
}

Status run_compress(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* cond = ctx.input(1);
  Tensor* out = ctx.output(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, x->dtype()));
  const bool has_axis = ctx.node().has_attr("axis");
  const int axis = has_axis ? normalize_axis(ctx.node().attr_int("axis", 0), x->rank()) : 0;
  int64_t outer = 1, n = x->numel(), inner = 1;
  if (has_axis) {
    n = x->dim(axis);
    for (int d = 0; d < axis; ++d) outer *= x->dim(d);
    for (int d = axis + 1; d < x->rank(); ++d) inner *= x->dim(d);
  }
  std::vector<int64_t> sel = compress_selection(*cond, n);
  const size_t es = dtype_size(x->dtype());
  const size_t row = static_cast<size_t>(inner) * es;
  const char* src = static_cast<const char*>(x->raw());
  char* dst = static_cast<char*>(out->raw());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t s : sel) {
      std::memcpy(dst, src + static_cast<size_t>(o * n + s) * row, row);
      dst += row;
    }
  }
  return Status::Ok();
}

// ---- ReverseSequence ---------------------------------------------------------------------

Status infer_reverse_sequence(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  if (in.rank_known && in.rank() < 2) return ctx.error("input must have rank >= 2");
  return infer_same_as_input0(ctx);
}

Status run_reverse_sequence(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  Tensor* out = ctx.output(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, x->dtype()));
  const int batch_axis = normalize_axis(ctx.node().attr_int("batch_axis", 1), x->rank());
  const int time_axis = normalize_axis(ctx.node().attr_int("time_axis", 0), x->rank());
  if (batch_axis < 0 || time_axis < 0 || batch_axis == time_axis) return ctx.error("invalid batch/time axes");
  std::vector<int64_t> lens = input_ints(ctx, 1);
  if (static_cast<int64_t>(lens.size()) != x->dim(batch_axis)) return ctx.error("sequence_lens does not match batch");
  const std::vector<int64_t> strides = contiguous_strides(x->dims());
  const int64_t ts = strides[static_cast<size_t>(time_axis)];
  const size_t es = dtype_size(x->dtype());
  const char* src = static_cast<const char*>(x->raw());
  char* dst = static_cast<char*>(out->raw());
  const int64_t tdim = x->dim(time_axis);
  {
    const int r = x->rank();
    std::vector<int64_t> c(static_cast<size_t>(r), 0);
    for (int64_t i = 0; i < x->numel(); ++i) {
      const int64_t t = c[static_cast<size_t>(time_axis)];
      const int64_t len = std::clamp<int64_t>(lens[static_cast<size_t>(c[static_cast<size_t>(batch_axis)])], 0, tdim);
      const int64_t src_i = t < len ? i + (len - 1 - 2 * t) * ts : i;
      std::memcpy(dst + static_cast<size_t>(i) * es, src + static_cast<size_t>(src_i) * es, es);
      for (int d = r; d-- > 0;) {
        if (++c[static_cast<size_t>(d)] < x->dim(d)) break;
        c[static_cast<size_t>(d)] = 0;
      }
    }
  }
  return Status::Ok();
}

// ---- CumSum -----------------------------------------------------------------------------

Status run_cumsum(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  Tensor* out = ctx.output(0);
  const Tensor* axis_t = ctx.input(1);
  const int axis = normalize_axis(axis_t ? axis_t->as_int64(0) : 0, std::max(1, x->rank()));
  if (axis < 0) return ctx.error("axis out of range");
  const bool exclusive = ctx.node().attr_int("exclusive", 0) != 0;
  const bool reverse = ctx.node().attr_int("reverse", 0) != 0;
  const int64_t n = x->rank() == 0 ? 1 : x->dim(axis);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x->dim(d);
  for (int d = axis + 1; d < x->rank(); ++d) inner *= x->dim(d);
  Status st;
  visit_dtype(x->dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = Arith<T>;
    if constexpr (std::is_same_v<T, bool>) {
      st = Unsupported(ctx.node().describe() + ": CumSum of bool");
    } else {
      const T* src = x->data<T>();
      T* dst = out->data<T>();
      ctx.pool().parallel_for(outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n * inner)),
                              [&](int64_t b, int64_t e) {
        std::vector<A> acc(static_cast<size_t>(inner));
        for (int64_t o = b; o < e; ++o) {
          std::fill(acc.begin(), acc.end(), A{});
          for (int64_t s = 0; s < n; ++s) {
            const int64_t j = reverse ? n - 1 - s : s;
            const T* p = src + (o * n + j) * inner;
            T* q = dst + (o * n + j) * inner;
            for (int64_t i = 0; i < inner; ++i) {
              A& a = acc[static_cast<size_t>(i)];
              if (exclusive) {
                q[i] = static_cast<T>(a);
                a = static_cast<A>(a + static_cast<A>(p[i]));
              } else {
                a = static_cast<A>(a + static_cast<A>(p[i]));
                q[i] = static_cast<T>(a);
              }
            }
          }
        }
      });
    }
  });
  return st;
}

// ---- Unique -----------------------------------------------------------------------------

struct UniqueResult {
  int64_t outer = 1, n = 0, inner = 1;
  std::vector<int64_t> first;    // per unique slice (output order): first index in the input
  std::vector<int64_t> inverse;  // per input slice: its unique slice
  std::vector<int64_t> counts;   // per unique slice
};

// Unique slices of `x` along `axis` (flattened when axis < 0), sorted
// lexicographically or in order of first occurrence, as numpy.unique does.
UniqueResult compute_unique(const Tensor& x, int axis, bool sorted) {
  UniqueResult u;
  if (axis < 0) {
    u.n = x.numel();
  } else {
    u.n = x.dim(axis);
    for (int d = 0; d < axis; ++d) u.outer *= x.dim(d);
    for (int d = axis + 1; d < x.rank(); ++d) u.inner *= x.dim(d);
  }
  std::vector<int64_t> order(static_cast<size_t>(u.n));
  std::iota(order.begin(), order.end(), 0);
  std::vector<int64_t> group(static_cast<size_t>(u.n));
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = Arith<T>;
    const T* p = x.data<T>();
    auto elem = [&](int64_t s, int64_t o, int64_t i) { return static_cast<A>(p[(o * u.n + s) * u.inner + i]); };
    auto cmp = [&](int64_t a, int64_t b) -> int {
      for (int64_t o = 0; o < u.outer; ++o) {
        for (int64_t i = 0; i < u.inner; ++i) {
          A va = elem(a, o, i), vb = elem(b, o, i);
          if (va < vb) return -1;
          if (vb < va) return 1;
        }
      }
      return 0;
    };
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return cmp(a, b) < 0; });
    for (size_t i = 0; i < order.size(); ++i) {
      if (i == 0 || cmp(order[i - 1], order[i]) != 0) {
        u.first.push_back(order[i]);
        u.counts.push_back(0);
      }
      group[static_cast<size_t>(order[i])] = static_cast<int64_t>(u.first.size()) - 1;
      ++u.counts.back();
    }
  });
  std::vector<int64_t> rank(u.first.size());
  std::iota(rank.begin(), rank.end(), 0);
  if (!sorted) {
    // Renumber the groups by first occurrence.
    std::vector<int64_t> by_first(u.first.size());
    std::iota(by_first.begin(), by_first.end(), 0);
    std::sort(by_first.begin(), by_first.end(), [&](int64_t a, int64_t b) {
      return u.first[static_cast<size_t>(a)] < u.first[static_cast<size_t>(b)];
    });
    std::vector<int64_t> first(u.first.size()), counts(u.first.size());
    for (size_t i = 0; i < by_first.size(); ++i) {
      const size_t g = static_cast<size_t>(by_first[i]);
      rank[g] = static_cast<int64_t>(i);
      first[i] = u.first[g];
      counts[i] = u.counts[g];
    }
    u.first = std::move(first);
    u.counts = std::move(counts);
  }
  u.inverse.resize(static_cast<size_t>(u.n));
  for (int64_t s = 0; s < u.n; ++s) u.inverse[static_cast<size_t>(s)] = rank[static_cast<size_t>(group[static_cast<size_t>(s)])];
  return u;
}

Status infer_unique(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  const bool has_axis = ctx.node().has_attr("axis");
  int axis = -1;
  if (has_axis && in.rank_known) {
    axis = normalize_axis(ctx.node().attr_int("axis", 0), in.rank());
    if (axis < 0) return ctx.error("axis out of range for " + in.str());
  }
  Dim count;
  Dim n;
  if (has_axis && in.rank_known) {
    n = in[axis];
  } else if (!has_axis && in.numel_or(-1) >= 0) {
    n = Dim(in.numel_or(-1));
  }
  if (const Tensor* v = ctx.in_value(0)) {
    count = Dim(static_cast<int64_t>(compute_unique(*v, axis, ctx.node().attr_int("sorted", 1) != 0).first.size()));
  }
  Shape y;
  if (!has_axis) {
    y = Shape({count});
  } else if (in.rank_known) {
    y = in;
    y[axis] = count;
  }
  ctx.set_output(0, ctx.in_dtype(0), y);
  ctx.set_output(1, DType::kInt64, Shape({count}));
  ctx.set_output(2, DType::kInt64, Shape({n}));
  ctx.set_output(3, DType::kInt64, Shape({count}));
  return Status::Ok();
}

Status run_unique(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, x->dtype()));
  const bool has_axis = ctx.node().has_attr("axis");
  const int axis = has_axis ? normalize_axis(ctx.node().attr_int("axis", 0), x->rank()) : -1;
  UniqueResult u = compute_unique(*x, axis, ctx.node().attr_int("sorted", 1) != 0);
  const int64_t count = static_cast<int64_t>(u.first.size());
  if (Tensor* y = ctx.output(0)) {
    const size_t es = dtype_size(x->dtype());
    const size_t row = static_cast<size_t>(u.inner) * es;
    const char* src = static_cast<const char*>(x->raw());
    char* dst = static_cast<char*>(y->raw());
    for (int64_t o = 0; o < u.outer; ++o) {
      for (int64_t j = 0; j < count; ++j) {
        std::memcpy(dst + static_cast<size_t>(o * count + j) * row,
                    src + static_cast<size_t>(o * u.n + u.first[static_cast<size_t>(j)]) * row, row);
      }
    }
  }
  auto write = [&](int i, const std::vector<int64_t>& v) {
    if (Tensor* t = ctx.output(i)) std::copy(v.begin(), v.end(), t->data<int64_t>());
  };
  write(1, u.first);
  write(2, u.inverse);
  write(3, u.counts);
  return Status::Ok();
}

}  // namespace

void register_gather_select_ops(OpRegistry& reg) {
  reg.add(OpSchema{"TopK", "", infer_topk, nullptr, run_topk, {1}});
  reg.add(OpSchema{"NonZero", "", infer_nonzero, nullptr, run_nonzero, {0}});
  reg.add(OpSchema{"Compress", "", infer_compress, nullptr, run_compress, {1}});
  reg.add(OpSchema{"ReverseSequence", "", infer_reverse_sequence, nullptr, run_reverse_sequence, {}});
  reg.add(OpSchema{"CumSum", "", infer_same_as_input0, nullptr, run_cumsum, {}});
  reg.add(OpSchema{"Unique", "", infer_unique, nullptr, run_unique, {0}});
}

}  // namespace tessera
