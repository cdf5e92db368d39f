// The gather_scatter family: index-driven data movement. This file holds
// Gather, GatherElements, GatherND, ScatterElements (and its deprecated alias
// Scatter), ScatterND and OneHot; gather_select.cc adds the selection ops
// (TopK, NonZero, Compress, ReverseSequence, CumSum, Unique).
//
// Gathers move elements by size (one path for every dtype); scatters with a
// reduction dispatch on the dtype once per node. Indices may be int32 or
// int64 and negative (counted from the end); out-of-range indices are a
// run-time error naming the node.
#include <algorithm>
#include <cstring>

#include "ops/tensor_util.h"

namespace tessera {

namespace {

// Reads indices as int64, normalising negatives against `bound`. Returns
// false (and the bad index) when one is out of range.
bool read_indices(const Tensor& t, int64_t bound, std::vector<int64_t>* out, int64_t* bad) {
  out->resize(static_cast<size_t>(t.numel()));
  auto read = [&](const auto* p) {
    for (int64_t i = 0; i < t.numel(); ++i) {
      int64_t v = static_cast<int64_t>(p[i]);
      if (v < 0) v += bound;
      if (v < 0 || v >= bound) {
        *bad = static_cast<int64_t>(p[i]);
        return false;
      }
      (*out)[static_cast<size_t>(i)] = v;
    }
    return true;
  };
  if (t.dtype() == DType::kInt32) return read(t.data<int32_t>());
  if (t.dtype() == DType::kInt64) return read(t.data<int64_t>());
  std::vector<int64_t> v = t.to_int64_vector();
  return read(v.data());
}

Status index_error(const KernelContext& ctx, int64_t bad, int64_t bound) {
  return ctx.error("index " + std::to_string(bad) + " is out of range for a dim of size " + std::to_string(bound));
}

// Copies `n` elements of `es` bytes; typed for the common one-element case.
inline void copy_elems(char* dst, const char* src, int64_t n, size_t es) {
  if (n == 1) {
    switch (es) {
      case 1: *dst = *src; return;
      case 2: std::memcpy(dst, src, 2); return;
      case 4: std::memcpy(dst, src, 4); return;
      case 8: std::memcpy(dst, src, 8); return;
      default: break;
    }
  }
  std::memcpy(dst, src, static_cast<size_t>(n) * es);
}

// ---- Gather -----------------------------------------------------------------

Status infer_gather(InferContext& ctx) {
  const Shape& data = ctx.in_shape(0);
  const Shape& idx = ctx.in_shape(1);
  if (!data.rank_known || !idx.rank_known) {
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unranked());
    return Status::Ok();
  }
  const int axis = normalize_axis(ctx.node().attr_int("axis", 0), data.rank());
  if (axis < 0) return ctx.error("axis out of range for " + data.str());
  std::vector<Dim> out(data.dims.begin(), data.dims.begin() + axis);
  out.insert(out.end(), idx.dims.begin(), idx.dims.end());
  out.insert(out.end(), data.dims.begin() + axis + 1, data.dims.end());
  ctx.set_output(0, ctx.in_dtype(0), Shape(out));
  return Status::Ok();
}

Status run_gather(KernelContext& ctx) {
  const Tensor* data = ctx.input(0);
  const Tensor* indices = ctx.input(1);
  Tensor* out = ctx.output(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, data->dtype()));
  const int axis = normalize_axis(ctx.node().attr_int("axis", 0), data->rank());
  const int64_t n = data->dim(axis);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= data->dim(d);
  for (int d = axis + 1; d < data->rank(); ++d) inner *= data->dim(d);
  std::vector<int64_t> idx;
  int64_t bad = 0;
  if (!read_indices(*indices, n, &idx, &bad)) return index_error(ctx, bad, n);
  const int64_t k = static_cast<int64_t>(idx.size());
  const size_t es = dtype_size(data->dtype());
  const int64_t row_bytes = inner * static_cast<int64_t>(es);
  const char* src = static_cast<const char*>(data->raw());
  char* dst = static_cast<char*>(out->raw());
  const int64_t total = outer * k;
  ctx.pool().parallel_for(total, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, row_bytes)),
                          [&](int64_t b, int64_t e) {
                            for (int64_t t = b; t < e; ++t) {
                              const int64_t o = t / k, j = t % k;
                              copy_elems(dst + t * row_bytes, src + (o * n + idx[static_cast<size_t>(j)]) * row_bytes,
                                         inner, es);
                            }
                          });
  return Status::Ok();
}

// ---- GatherElements ---------------------------------------------------------------

Status infer_gather_elements(InferContext& ctx) {
  const Shape& data = ctx.in_shape(0);
  const Shape& idx = ctx.in_shape(1);
  if (data.rank_known && idx.rank_known && data.rank() != idx.rank()) {
    return ctx.error("data " + data.str() + " and indices " + idx.str() + " differ in rank");
  }
  if (data.rank_known) {
    const int axis = normalize_axis(ctx.node().attr_int("axis", 0), data.rank());
    if (axis < 0) return ctx.error("axis out of range for " + data.str());
    for (int d = 0; idx.rank_known && d < data.rank(); ++d) {
      if (d != axis && data[d].known() && idx[d].known() && idx[d].value > data[d].value) {
        return ctx.error("indices " + idx.str() + " exceed data " + data.str() + " on axis " + std::to_string(d));
      }
    }
  }
  ctx.set_output(0, ctx.in_dtype(0), idx);
  return Status::Ok();
}

// Walks every element of `dims` (row-major) and calls fn(linear, offset)
// where offset = sum of coordinates times `strides`, skipping axis `skip`.
template <class Fn>
void walk_with_offsets(const Dims& dims, const std::vector<int64_t>& strides, int skip, Fn&& fn) {
  const size_t r = dims.size();
  const int64_t total = numel(dims);
  std::vector<int64_t> c(r, 0);
  int64_t off = 0;
  for (int64_t t = 0; t < total; ++t) {
    fn(t, off, c);
    for (size_t k = r; k-- > 0;) {
      if (++c[k] < dims[k]) {
        if (static_cast<int>(k) != skip) off += strides[k];
        break;
      }
      if (static_cast<int>(k) != skip) off -= (dims[k] - 1) * strides[k];
      c[k] = 0;
    }
  }
}

// GatherElements and ScatterElements walk the data along every non-axis dim of the indices: the indices must have
// the data's rank, and fit inside the data on those dims.
Status check_element_indices(const KernelContext& ctx, const Tensor& data, const Tensor& indices, int axis) {
  if (axis < 0) return ctx.error("axis out of range");
  if (indices.rank() != data.rank()) return ctx.error("data and indices differ in rank");
  for (int d = 0; d < data.rank(); ++d) {
    if (d != axis && indices.dim(d) > data.dim(d)) {
      return ctx.error("indices dim " + std::to_string(d) + " (" + std::to_string(indices.dim(d)) +
                       ") exceeds the data's (" + std::to_string(data.dim(d)) + ")");
    }
  }
  return Status::Ok();
}

Status run_gather_elements(KernelContext& ctx) {
  const Tensor* data = ctx.input(0);
  const Tensor* indices = ctx.input(1);
  Tensor* out = ctx.output(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, data->dtype()));
  const int axis = normalize_axis(ctx.node().attr_int("axis", 0), data->rank());
  TSR_RETURN_IF_ERROR(check_element_indices(ctx, *data, *indices, axis));
  const int64_t n = data->dim(axis);
  std::vector<int64_t> idx;
  int64_t bad = 0;
  if (!read_indices(*indices, n, &idx, &bad)) return index_error(ctx, bad, n);
  const std::vector<int64_t> strides = contiguous_strides(data->dims());
  const size_t es = dtype_size(data->dtype());
  const char* src = static_cast<const char*>(data->raw());
  char* dst = static_cast<char*>(out->raw());
  const int64_t as = strides[static_cast<size_t>(axis)];
  walk_with_offsets(indices->dims(), strides, axis, [&](int64_t t, int64_t off, const std::vector<int64_t>&) {
    copy_elems(dst + t * static_cast<int64_t>(es), src + (off + idx[static_cast<size_t>(t)] * as) * static_cast<int64_t>(es), 1, es);
  });
  return Status::Ok();
}

// ---- GatherND -------------------------------------------------------------------------

Status infer_gather_nd(InferContext& ctx) {
  const Shape& data = ctx.in_shape(0);
  const Shape& idx = ctx.in_shape(1);
  const int64_t b = ctx.node().attr_int("batch_dims", 0);
  if (!data.rank_known || !idx.rank_known || idx.rank() < 1 || !idx[idx.rank() - 1].known()) {
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unranked());
    return Status::Ok();
  }
  const int64_t m = idx[idx.rank() - 1].value;
  if (b < 0 || b + m > data.rank() || b >= idx.rank()) {
    return ctx.error("indices " + idx.str() + " do not fit data " + data.str());
  }
  std::vector<Dim> out(idx.dims.begin(), idx.dims.end() - 1);
  out.insert(out.end(), data.dims.begin() + b + m, data.dims.end());
  ctx.set_output(0, ctx.in_dtype(0), Shape(out));
  return Status::Ok();
}

Status run_gather_nd(KernelContext& ctx) {
  const Tensor* data = ctx.input(0);
  const Tensor* indices = ctx.input(1);
  Tensor* out = ctx.output(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, data->dtype()));
  const int64_t b64 = ctx.node().attr_int("batch_dims", 0);
  if (indices->rank() < 1 || b64 < 0 || b64 >= indices->rank()) return ctx.error("batch_dims out of range");
  const int b = static_cast<int>(b64);
  const int64_t m = indices->dim(indices->rank() - 1);
  if (m > data->rank() - b) return ctx.error("indices' last dim exceeds the data rank");
  for (int d = 0; d < b; ++d) {
    if (indices->dim(d) != data->dim(d)) return ctx.error("indices and data differ in batch dim " + std::to_string(d));
  }
  int64_t batches = 1, slice = 1;
  for (int d = 0; d < b; ++d) batches *= data->dim(d);
  for (int d = b + static_cast<int>(m); d < data->rank(); ++d) slice *= data->dim(d);
  const int64_t tuples = indices->numel() / std::max<int64_t>(1, m) / std::max<int64_t>(1, batches);
  const int64_t batch_stride = numel(data->dims()) / std::max<int64_t>(1, batches);
  const std::vector<int64_t> strides = contiguous_strides(data->dims());
  std::vector<int64_t> raw = indices->to_int64_vector();
  const size_t es = dtype_size(data->dtype());
  const char* src = static_cast<const char*>(data->raw());
  char* dst = static_cast<char*>(out->raw());
  for (int64_t bt = 0; bt < batches; ++bt) {
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t off = bt * batch_stride;
      const int64_t* tup = raw.data() + (bt * tuples + t) * m;
      for (int64_t j = 0; j < m; ++j) {
        const int64_t dim = data->dim(b + static_cast<int>(j));
        int64_t v = tup[j] < 0 ? tup[j] + dim : tup[j];
        if (v < 0 || v >= dim) return index_error(ctx, tup[j], dim);
        off += v * strides[static_cast<size_t>(b + j)];
      }
      copy_elems(dst + (bt * tuples + t) * slice * static_cast<int64_t>(es), src + off * static_cast<int64_t>(es),
                 slice, es);
    }
  }
  return Status::Ok();
}

// ---- Scatter reductions -------------------------------------------------------------------

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

bool parse_reduction(const Node& node, Reduction* r) {
  const std::string s = node.attr_string("reduction", "none");
  if (s == "none") *r = Reduction::kNone;
  else if (s == "add") *r = Reduction::kAdd;
  else if (s == "mul") *r = Reduction::kMul;
  else if (s == "max") *r = Reduction::kMax;
  else if (s == "min") *r = Reduction::kMin;
  else return false;
  return true;
}

template <class T>
inline T reduce_one(T a, T b, Reduction r) {
  if constexpr (std::is_same_v<T, bool>) {
    return (r == Reduction::kAdd || r == Reduction::kMax) ? (a || b) : (a && b);
  } else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return T(reduce_one(static_cast<float>(a), static_cast<float>(b), r));
  } else {
    switch (r) {
      case Reduction::kAdd: return static_cast<T>(a + b);
      case Reduction::kMul: return static_cast<T>(a * b);
      case Reduction::kMax: return std::max(a, b);
      case Reduction::kMin: return std::min(a, b);
      default: return b;
    }
  }
}

// Applies `n` updates at element offset `dst_off` of `out` from `upd`.
template <class T>
inline void scatter_run(T* out, const T* upd, int64_t n, Reduction r) {
  if (r == Reduction::kNone) {
    std::memcpy(out, upd, static_cast<size_t>(n) * sizeof(T));
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = reduce_one(out[i], upd[i], r);
}

// ---- ScatterElements / Scatter ----------------------------------------------------------

Status infer_scatter(InferContext& ctx) {
  const Shape& data = ctx.in_shape(0);
  const Shape& idx = ctx.in_shape(1);
  if (data.rank_known && idx.rank_known && data.rank() != idx.rank()) {
    return ctx.error("data " + data.str() + " and indices " + idx.str() + " differ in rank");
  }
  Reduction r;
  if (!parse_reduction(ctx.node(), &r)) return ctx.error("unknown reduction");
  return infer_same_as_input0(ctx);
}

Status run_scatter_elements(KernelContext& ctx) {
  const Tensor* data = ctx.input(0);
  const Tensor* indices = ctx.input(1);
  const Tensor* updates = ctx.input(2);
  Tensor* out = ctx.output(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, data->dtype()));
  Reduction red;
  if (!parse_reduction(ctx.node(), &red)) return ctx.error("unknown reduction");
  if (updates->dims() != indices->dims()) return ctx.error("updates and indices differ in shape");
  parallel_memcpy(out->raw(), data->raw(), data->nbytes(), &ctx.pool());
  const int axis = normalize_axis(ctx.node().attr_int("axis", 0), data->rank());
  TSR_RETURN_IF_ERROR(check_element_indices(ctx, *data, *indices, axis));
  const int64_t n = data->dim(axis);
  std::vector<int64_t> idx;
  int64_t bad = 0;
  if (!read_indices(*indices, n, &idx, &bad)) return index_error(ctx, bad, n);
  const std::vector<int64_t> strides = contiguous_strides(data->dims());
  const int64_t as = strides[static_cast<size_t>(axis)];
  visit_dtype(data->dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = out->data<T>();
    const T* u = updates->data<T>();
    walk_with_offsets(indices->dims(), strides, axis, [&](int64_t t, int64_t off, const std::vector<int64_t>&) {
      T& dst = o[off + idx[static_cast<size_t>(t)] * as];
      dst = red == Reduction::kNone ? u[t] : reduce_one(dst, u[t], red);
    });
  });
  return Status::Ok();
}

// ---- ScatterND -----------------------------------------------------------------------------

Status run_scatter_nd(KernelContext& ctx) {
  const Tensor* data = ctx.input(0);
  const Tensor* indices = ctx.input(1);
  const Tensor* updates = ctx.input(2);
  Tensor* out = ctx.output(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, data->dtype()));
  Reduction red;
  if (!parse_reduction(ctx.node(), &red)) return ctx.error("unknown reduction");
  parallel_memcpy(out->raw(), data->raw(), data->nbytes(), &ctx.pool());
  const int64_t k = indices->rank() > 0 ? indices->dim(indices->rank() - 1) : 0;
  if (k > data->rank()) return ctx.error("indices' last dim exceeds the data rank");
  int64_t slice = 1;
  for (int d = static_cast<int>(k); d < data->rank(); ++d) slice *= data->dim(d);
  const int64_t tuples = k > 0 ? indices->numel() / k : 0;
  if (updates->numel() != tuples * slice) return ctx.error("updates do not match indices and data");
  const std::vector<int64_t> strides = contiguous_strides(data->dims());
  std::vector<int64_t> raw = indices->to_int64_vector();
  Status st;
  visit_dtype(data->dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = out->data<T>();
    const T* u = updates->data<T>();
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t off = 0;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t dim = data->dim(static_cast<int>(j));
        int64_t v = raw[static_cast<size_t>(t * k + j)];
        if (v < 0) v += dim;
        if (v < 0 || v >= dim) {
          st = index_error(ctx, raw[static_cast<size_t>(t * k + j)], dim);
          return;
        }
        off += v * strides[static_cast<size_t>(j)];
      }
      scatter_run(o + off, u + t * slice, slice, red);
    }
  });
  return st;
}

// ---- OneHot ---------------------------------------------------------------------------------

Status infer_onehot(InferContext& ctx) {
  const Shape& idx = ctx.in_shape(0);
  const DType dt = ctx.in_dtype(2);
  if (!idx.rank_known) {
    ctx.set_output(0, dt, Shape::Unranked());
    return Status::Ok();
  }
  const int out_rank = idx.rank() + 1;
  const int axis = normalize_axis(ctx.node().attr_int("axis", -1), out_rank);
  if (axis < 0) return ctx.error("axis out of range");
  Dim depth;
  if (const Tensor* d = ctx.in_value(1)) {
    if (d->numel() != 1) return ctx.error("depth must hold one value");
    depth = Dim(static_cast<int64_t>(d->as_double(0)));
    if (depth.value <= 0) return ctx.error("depth must be positive");
  }
  std::vector<Dim> out(idx.dims);
  out.insert(out.begin() + axis, depth);
  ctx.set_output(0, dt, Shape(out));
  return Status::Ok();
}

Status run_onehot(KernelContext& ctx) {
  const Tensor* indices = ctx.input(0);
  const Tensor* values = ctx.input(2);
  Tensor* out = ctx.output(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, out->dtype()));
  const int axis = normalize_axis(ctx.node().attr_int("axis", -1), out->rank());
  const int64_t depth = out->dim(axis);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= out->dim(d);
  for (int d = axis + 1; d < out->rank(); ++d) inner *= out->dim(d);
  if (values->numel() != 2) return ctx.error("values must hold [off, on]");
  const size_t es = dtype_size(out->dtype());
  const char* off_v = static_cast<const char*>(values->raw());
  const char* on_v = off_v + es;
  char* dst = static_cast<char*>(out->raw());
  for (int64_t i = 0; i < out->numel(); ++i) std::memcpy(dst + static_cast<size_t>(i) * es, off_v, es);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      int64_t v = indices->as_int64(o * inner + i);
      if (v < 0) v += depth;
      if (v < 0 || v >= depth) continue;
      std::memcpy(dst + static_cast<size_t>((o * depth + v) * inner + i) * es, on_v, es);
    }
  }
  return Status::Ok();
}

}  // namespace

TSR_REGISTER_OPS(gather_scatter) {
  reg.add(OpSchema{"Gather", "", infer_gather, nullptr, run_gather, {}});
  reg.add(OpSchema{"GatherElements", "", infer_gather_elements, nullptr, run_gather_elements, {}});
  reg.add(OpSchema{"GatherND", "", infer_gather_nd, nullptr, run_gather_nd, {}});
  reg.add(OpSchema{"ScatterElements", "", infer_scatter, nullptr, run_scatter_elements, {}});
  reg.add(OpSchema{"Scatter", "", infer_scatter, nullptr, run_scatter_elements, {}});
  reg.add(OpSchema{"ScatterND", "", infer_same_as_input0, nullptr, run_scatter_nd, {}});
  reg.add(OpSchema{"OneHot", "", infer_onehot, nullptr, run_onehot, {1}});
  register_gather_select_ops(reg);
}

}  // namespace tessera
