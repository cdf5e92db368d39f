// Region ops of the tensor family: Slice, Pad, Trilu.
//
// Slice is one strided_copy whose source strides are the input's times the
// steps (negative for reversed slices). Constant Pad fills the output and
// copies the kept region; edge/reflect Pad map every output coordinate to an
// input coordinate per dim and copy row by row.
#include <algorithm>
#include <climits>
#include <cstring>

#include "ops/tensor_util.h"

namespace tessera {

namespace {

// ---- Slice --------------------------------------------------------------------

struct SliceArgs {
  std::vector<int64_t> starts, ends, axes, steps;
};

// Returns 1 when every argument is known, -1 when some are unknown, and sets
// `args` (axes/steps defaulted when absent).
int slice_args(const InferContext& ctx, SliceArgs* a) {
  const Node& n = ctx.node();
  if (ctx.opset() < 10 || n.has_attr("starts")) {
    a->starts = n.attr_ints("starts");
    a->ends = n.attr_ints("ends");
    a->axes = n.attr_ints("axes");
  } else {
    if (!known_ints(ctx, 1, &a->starts) || !known_ints(ctx, 2, &a->ends)) return -1;
    if (ctx.has_input(3) && !known_ints(ctx, 3, &a->axes)) return -1;
    if (ctx.has_input(4) && !known_ints(ctx, 4, &a->steps)) return -1;
  }
  return 1;
}

SliceArgs slice_args(const KernelContext& ctx) {
  SliceArgs a;
  const Node& n = ctx.node();
  if (n.has_attr("starts")) {
    a.starts = n.attr_ints("starts");
    a.ends = n.attr_ints("ends");
    a.axes = n.attr_ints("axes");
  } else {
    a.starts = input_ints(ctx, 1);
    a.ends = input_ints(ctx, 2);
    a.axes = input_ints(ctx, 3);
    a.steps = input_ints(ctx, 4);
  }
  return a;
}

// Clamped start and output length of one sliced axis of size d, per the
// ONNX rules (negative indices count from the end; starts/ends clamp to
// [0,d] for positive steps and to [0,d-1]/[-1,d-1] for negative ones).
void slice_axis(int64_t d, int64_t start, int64_t end, int64_t step, int64_t* s_out, int64_t* len_out) {
  int64_t s = start < 0 ? start + d : start;
  int64_t e = end < 0 ? end + d : end;
  int64_t len;
  if (step > 0) {
    s = std::clamp<int64_t>(s, 0, d);
    e = std::clamp<int64_t>(e, 0, d);
    len = e > s ? (e - s + step - 1) / step : 0;
  } else {
    s = std::clamp<int64_t>(s, 0, std::max<int64_t>(d - 1, 0));
    e = std::clamp<int64_t>(e, -1, d - 1);
    len = (d > 0 && s > e) ? (s - e + (-step) - 1) / (-step) : 0;
  }
  *s_out = s;
  *len_out = len;
}

// Per-dim (start, step, length) for an input of `rank`, or an error message.
bool resolve_slice(const SliceArgs& a, int rank, std::vector<int>* axes, std::vector<int64_t>* steps,
                   std::string* err) {
  const size_t k = a.starts.size();
  if (a.ends.size() != k || (!a.axes.empty() && a.axes.size() != k) || (!a.steps.empty() && a.steps.size() != k)) {
    *err = "starts, ends, axes and steps differ in length";
    return false;
  }
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  axes->resize(k);
  steps->resize(k);
  for (size_t i = 0; i < k; ++i) {
    int ax = a.axes.empty() ? static_cast<int>(i) : normalize_axis(a.axes[i], rank);
    if (ax < 0 || ax >= rank || seen[static_cast<size_t>(ax)]) {
      *err = "invalid or repeated axis";
      return false;
    }
    seen[static_cast<size_t>(ax)] = true;
    (*axes)[i] = ax;
    (*steps)[i] = a.steps.empty() ? 1 : a.steps[i];
    if ((*steps)[i] == 0) {
      *err = "step is 0";
      return false;
    }
  }
  return true;
}

Status infer_slice(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  SliceArgs a;
  if (!in.rank_known) {
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unranked());
    return Status::Ok();
  }
  if (slice_args(ctx, &a) < 0) {
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unknown(in.rank()));
    return Status::Ok();
  }
  std::vector<int> axes;
  std::vector<int64_t> steps;
  std::string err;
  if (!resolve_slice(a, in.rank(), &axes, &steps, &err)) return ctx.error(err);
  Shape out = in;
  for (size_t i = 0; i < axes.size(); ++i) {
    const Dim& d = in[axes[i]];
    if (d.known()) {
      int64_t s, len;
      slice_axis(d.value, a.starts[i], a.ends[i], steps[i], &s, &len);
      out[axes[i]] = Dim(len);
    } else {
      // A full slice (either direction) keeps the symbol.
      const bool full_fwd = steps[i] == 1 && a.starts[i] == 0 && a.ends[i] >= INT32_MAX;
      const bool full_rev = steps[i] == -1 && (a.starts[i] == -1 || a.starts[i] >= INT32_MAX) && a.ends[i] <= INT32_MIN;
      if (!full_fwd && !full_rev) out[axes[i]] = Dim();
    }
  }
  ctx.set_output(0, ctx.in_dtype(0), std::move(out));
  return Status::Ok();
}

Status run_slice(KernelContext& ctx) {
  const Tensor* in = ctx.input(0);
  Tensor* out = ctx.output(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, in->dtype()));
  SliceArgs a = slice_args(ctx);
  std::vector<int> axes;
  std::vector<int64_t> steps;
  std::string err;
  if (!resolve_slice(a, in->rank(), &axes, &steps, &err)) return ctx.error(err);
  std::vector<int64_t> in_strides = contiguous_strides(in->dims());
  std::vector<int64_t> src_strides = in_strides;
  Dims dims = in->dims();
  int64_t base = 0;
  for (size_t i = 0; i < axes.size(); ++i) {
    const size_t ax = static_cast<size_t>(axes[i]);
    int64_t s, len;
    slice_axis(in->dims()[ax], a.starts[i], a.ends[i], steps[i], &s, &len);
    dims[ax] = len;
    base += s * in_strides[ax];
    src_strides[ax] = in_strides[ax] * steps[i];
  }
  if (dims != out->dims()) return ctx.error("slice result " + dims_str(dims) + " differs from " + out->str());
  if (out->numel() == 0) return Status::Ok();
  const size_t esize = dtype_size(in->dtype());
  strided_copy(out->raw(), static_cast<const char*>(in->raw()) + base * static_cast<int64_t>(esize), dims,
               contiguous_strides(dims), src_strides, esize, &ctx.pool());
  return Status::Ok();
}

// ---- Pad ------------------------------------------------------------------------

// Pads per dim as [begins..., ends...] of length 2*rank, from the attribute
// (opset < 11) or the pads/axes inputs. Returns false when unknown.
bool pad_amounts(const Node& node, int64_t opset, int rank, const std::vector<int64_t>* pads_in,
                 const std::vector<int64_t>* axes_in, std::vector<int64_t>* pads, std::string* err) {
  std::vector<int64_t> p;
  if (opset < 11 || node.has_attr("pads")) {
    p = node.attr_ints("pads", node.attr_ints("paddings"));
  } else if (pads_in) {
    p = *pads_in;
  } else {
    return false;
  }
  pads->assign(2 * static_cast<size_t>(rank), 0);
  if (axes_in && !axes_in->empty()) {
    const size_t k = axes_in->size();
    if (p.size() != 2 * k) {
      *err = "pads length does not match axes";
      return false;
    }
    for (size_t i = 0; i < k; ++i) {
      int ax = normalize_axis((*axes_in)[i], rank);
      if (ax < 0) {
        *err = "axis out of range";
        return false;
      }
      (*pads)[static_cast<size_t>(ax)] = p[i];
      (*pads)[static_cast<size_t>(ax + rank)] = p[i + k];
    }
    return true;
  }
  if (p.size() != 2 * static_cast<size_t>(rank)) {
    *err = "pads has " + std::to_string(p.size()) + " entries for rank " + std::to_string(rank);
    return false;
  }
  *pads = p;
  return true;
}

Status infer_pad(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  if (!in.rank_known) {
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unranked());
    return Status::Ok();
  }
  const int rank = in.rank();
  std::vector<int64_t> pads_v, axes_v, pads;
  const bool pads_known = known_ints(ctx, 1, &pads_v);
  const bool axes_known = known_ints(ctx, 3, &axes_v);
  if (ctx.has_input(3) && !axes_known) {
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unknown(rank));
    return Status::Ok();
  }
  std::string err;
  if (!pad_amounts(ctx.node(), ctx.opset(), rank, pads_known ? &pads_v : nullptr, axes_known ? &axes_v : nullptr,
                   &pads, &err)) {
    if (!err.empty()) return ctx.error(err);
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unknown(rank));
    return Status::Ok();
  }
  Shape out = in;
  for (int i = 0; i < rank; ++i) {
    const int64_t add = pads[static_cast<size_t>(i)] + pads[static_cast<size_t>(i + rank)];
    if (in[i].known()) {
      if (in[i].value + add < 0) return ctx.error("negative pads remove more than dim " + std::to_string(i));
      out[i] = Dim(in[i].value + add);
    } else if (add != 0) {
      out[i] = Dim();
    }
  }
  ctx.set_output(0, ctx.in_dtype(0), std::move(out));
  return Status::Ok();
}

// Fills `n` elements of the output's dtype with `value`.
void fill_value(Tensor* out, const Tensor* value_tensor, double value) {
  visit_dtype(out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    T v;
    const bool given = value_tensor && value_tensor->defined() && value_tensor->numel() > 0;
    if (given && value_tensor->dtype() != out->dtype()) value = value_tensor->as_double(0);
    if (given && value_tensor->dtype() == out->dtype()) {
      v = value_tensor->data<T>()[0];
    } else if constexpr (std::is_same_v<T, bool>) {
      v = value != 0.0;
    } else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
      v = T(static_cast<float>(value));
    } else {
      v = static_cast<T>(value);
    }
    std::fill(out->data<T>(), out->data<T>() + out->numel(), v);
  });
}

enum class PadMode { kEdge, kReflect, kWrap };

// Maps output coordinates of one dim to input coordinates (edge / reflect / wrap, opset 19).
std::vector<int64_t> pad_map(int64_t d, int64_t begin, int64_t out_len, PadMode mode) {
  std::vector<int64_t> m(static_cast<size_t>(out_len));
  for (int64_t o = 0; o < out_len; ++o) {
    int64_t x = o - begin;
    if (x < 0 || x >= d) {
      if (mode == PadMode::kWrap) {
        x = ((x % d) + d) % d;
      } else if (mode == PadMode::kEdge || d == 1) {
        x = std::clamp<int64_t>(x, 0, d - 1);
      } else {
        const int64_t period = 2 * (d - 1);
        x = ((x % period) + period) % period;
        if (x >= d) x = period - x;
      }
    }
    m[static_cast<size_t>(o)] = x;
  }
  return m;
}

template <class E>
void pad_gather(E* dst, const E* src, const Dims& out_dims, const std::vector<int64_t>& in_strides,
                const std::vector<std::vector<int64_t>>& maps, Parallel* pool) {
  const size_t r = out_dims.size();
  const int64_t last = out_dims[r - 1];
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < r; ++i) rows *= out_dims[i];
  const std::vector<int64_t>& lm = maps[r - 1];
  const int64_t ls = in_strides[r - 1];
  pool->parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, last)), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      int64_t t = row, soff = 0;
      for (size_t k = r - 1; k-- > 0;) {
        soff += maps[k][static_cast<size_t>(t % out_dims[k])] * in_strides[k];
        t /= out_dims[k];
      }
      E* d = dst + row * last;
      const E* s = src + soff;
      for (int64_t j = 0; j < last; ++j) d[j] = s[lm[static_cast<size_t>(j)] * ls];
    }
  });
}

Status run_pad(KernelContext& ctx) {
  const Tensor* in = ctx.input(0);
  Tensor* out = ctx.output(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, in->dtype()));
  const int rank = in->rank();
  std::vector<int64_t> pads_v = input_ints(ctx, 1), axes_v = input_ints(ctx, 3), pads;
  std::string err;
  // Opset < 11 carries pads as an attribute, which pad_amounts prefers.
  if (!pad_amounts(ctx.node(), 11, rank, ctx.input(1) ? &pads_v : nullptr, &axes_v, &pads, &err)) {
    return ctx.error(err.empty() ? "pads are missing" : err);
  }
  const std::string mode = ctx.node().attr_string("mode", "constant");
  const size_t esize = dtype_size(in->dtype());
  if (out->numel() == 0) return Status::Ok();
  if (rank == 0) {
    std::memcpy(out->raw(), in->raw(), esize);
    return Status::Ok();
  }
  if (mode == "constant") {
    fill_value(out, ctx.input(2), ctx.node().attr_float("value", 0.f));
    std::vector<int64_t> in_strides = contiguous_strides(in->dims());
    std::vector<int64_t> out_strides = contiguous_strides(out->dims());
    Dims dims(static_cast<size_t>(rank));
    int64_t soff = 0, doff = 0;
    for (int i = 0; i < rank; ++i) {
      const size_t u = static_cast<size_t>(i);
      const int64_t b = pads[u], e = pads[u + static_cast<size_t>(rank)];
      const int64_t skip_in = std::max<int64_t>(0, -b), skip_out = std::max<int64_t>(0, b);
      dims[u] = in->dim(i) - skip_in - std::max<int64_t>(0, -e);
      if (dims[u] <= 0) return Status::Ok();
      soff += skip_in * in_strides[u];
      doff += skip_out * out_strides[u];
    }
    strided_copy(static_cast<char*>(out->raw()) + doff * static_cast<int64_t>(esize),
                 static_cast<const char*>(in->raw()) + soff * static_cast<int64_t>(esize), dims, out_strides,
                 in_strides, esize, &ctx.pool());
    return Status::Ok();
  }
  PadMode pm;
  if (mode == "reflect") pm = PadMode::kReflect;
  else if (mode == "edge") pm = PadMode::kEdge;
  else if (mode == "wrap") pm = PadMode::kWrap;  // opset 19
  else return Unsupported(ctx.node().describe() + ": pad mode '" + mode + "'");
  std::vector<std::vector<int64_t>> maps;
  for (int i = 0; i < rank; ++i) {
    if (in->dim(i) == 0) return ctx.error(mode + " padding of an empty dim");
    maps.push_back(pad_map(in->dim(i), pads[static_cast<size_t>(i)], out->dim(i), pm));
  }
  std::vector<int64_t> in_strides = contiguous_strides(in->dims());
  switch (esize) {
    case 1: pad_gather(out->data<uint8_t>(), in->data<uint8_t>(), out->dims(), in_strides, maps, &ctx.pool()); break;
    case 2: pad_gather(out->data<uint16_t>(), in->data<uint16_t>(), out->dims(), in_strides, maps, &ctx.pool()); break;
    case 4: pad_gather(out->data<uint32_t>(), in->data<uint32_t>(), out->dims(), in_strides, maps, &ctx.pool()); break;
    default: pad_gather(out->data<uint64_t>(), in->data<uint64_t>(), out->dims(), in_strides, maps, &ctx.pool());
  }
  return Status::Ok();
}

// ---- CenterCropPad (opset 18) --------------------------------------------------------
// Each listed axis (all by default) is cropped or zero-padded to shape[i], centred: a crop keeps
// [(d - s) / 2, + s), a pad puts the input at (s - d) / 2.

// The axes CenterCropPad resizes, normalised; an error string when they are out of range or repeated.
bool center_crop_axes(const Node& n, int rank, size_t count, std::vector<int>* axes, std::string* err) {
  if (!attr_axes(n, rank, axes, err)) return false;
  if (axes->size() != count) {
    *err = "shape has " + std::to_string(count) + " entries for " + std::to_string(axes->size()) + " axes";
    return false;
  }
  return true;
}

Status infer_center_crop_pad(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  std::vector<int64_t> shape;
  if (!in.rank_known || !known_ints(ctx, 1, &shape)) {
    ctx.set_output(0, ctx.in_dtype(0), in.rank_known ? Shape::Unknown(in.rank()) : Shape::Unranked());
    return Status::Ok();
  }
  std::vector<int> axes;
  std::string err;
  if (!center_crop_axes(ctx.node(), in.rank(), shape.size(), &axes, &err)) return ctx.error(err);
  Shape out = in;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (shape[i] < 0) return ctx.error("negative target size");
    out[axes[i]] = Dim(shape[i]);
  }
  ctx.set_output(0, ctx.in_dtype(0), std::move(out));
  return Status::Ok();
}

Status run_center_crop_pad(KernelContext& ctx) {
  const Tensor* in = ctx.input(0);
  Tensor* out = ctx.output(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, in->dtype()));
  const int rank = in->rank();
  const std::vector<int64_t> shape = input_ints(ctx, 1);
  std::vector<int> axes;
  std::string err;
  if (!center_crop_axes(ctx.node(), rank, shape.size(), &axes, &err)) return ctx.error(err);
  std::memset(out->raw(), 0, out->nbytes());
  if (out->numel() == 0 || in->numel() == 0) return Status::Ok();
  const size_t esize = dtype_size(in->dtype());
  const std::vector<int64_t> in_strides = contiguous_strides(in->dims()), out_strides = contiguous_strides(out->dims());
  Dims dims = in->dims();
  int64_t soff = 0, doff = 0;
  for (size_t i = 0; i < axes.size(); ++i) {
    const size_t u = static_cast<size_t>(axes[i]);
    const int64_t d = in->dim(axes[i]), t = shape[i];
    if (t < d) {
      soff += (d - t) / 2 * in_strides[u];
      dims[u] = t;
    } else {
      doff += (t - d) / 2 * out_strides[u];
    }
  }
  strided_copy(static_cast<char*>(out->raw()) + doff * static_cast<int64_t>(esize),
               static_cast<const char*>(in->raw()) + soff * static_cast<int64_t>(esize), dims, out_strides, in_strides,
               esize, &ctx.pool());
  return Status::Ok();
}

// ---- Trilu ------------------------------------------------------------------------

Status infer_trilu(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  if (in.rank_known && in.rank() < 2) return ctx.error("input must have rank >= 2, got " + in.str());
  return infer_same_as_input0(ctx);
}

Status run_trilu(KernelContext& ctx) {
  const Tensor* in = ctx.input(0);
  Tensor* out = ctx.output(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, in->dtype()));
  const bool upper = ctx.node().attr_int("upper", 1) != 0;
  const int64_t k = ctx.input(1) ? ctx.input(1)->as_int64(0) : 0;
  const int64_t n = in->dim(in->rank() - 2), m = in->dim(in->rank() - 1);
  const int64_t rows = in->numel() / std::max<int64_t>(1, m);
  if (in->numel() == 0) return Status::Ok();
  const size_t es = dtype_size(in->dtype());
  const char* src = static_cast<const char*>(in->raw());
  char* dst = static_cast<char*>(out->raw());
  ctx.pool().parallel_for(rows, std::max<int64_t>(1, 16384 / m), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const int64_t i = row % n;
      // Columns [lo, hi) are kept.
      int64_t lo = 0, hi = m;
      if (upper) {
        lo = std::clamp<int64_t>(i + k, 0, m);
      } else {
        hi = std::clamp<int64_t>(i + k + 1, 0, m);
      }
      char* d = dst + row * m * static_cast<int64_t>(es);
      const char* s = src + row * m * static_cast<int64_t>(es);
      if (lo > 0) std::memset(d, 0, static_cast<size_t>(std::min(lo, m)) * es);
      if (hi > lo) std::memcpy(d + lo * static_cast<int64_t>(es), s + lo * static_cast<int64_t>(es), static_cast<size_t>(hi - lo) * es);
      if (hi < m) std::memset(d + std::max(hi, lo) * static_cast<int64_t>(es), 0, static_cast<size_t>(m - std::max(hi, lo)) * es);
    }
  });
  return Status::Ok();
}

}  // namespace

void register_tensor_slice_ops(OpRegistry& reg) {
  reg.add(OpSchema{"Slice", "", infer_slice, nullptr, run_slice, {1, 2, 3, 4}});
  reg.add(OpSchema{"Pad", "", infer_pad, nullptr, run_pad, {1, 3}});
  reg.add(OpSchema{"Trilu", "", infer_trilu, nullptr, run_trilu, {}});
  reg.add(OpSchema{"CenterCropPad", "", infer_center_crop_pad, nullptr, run_center_crop_pad, {1}});
}

}  // namespace tessera
