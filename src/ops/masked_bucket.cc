// ai.tessera PadTo, ValidMask and SliceValid (contract in masked_bucket.h).
#include "ops/masked_bucket.h"

#include <algorithm>
#include <cstring>

#include "ops/op_registry.h"

namespace tessera {
namespace masked {

int64_t valid_size(const Extent& e, const std::vector<int64_t>& r) {
  if (e.source < 0 || e.source >= static_cast<int64_t>(r.size())) return 0;
  int64_t v = r[static_cast<size_t>(e.source)];
  for (const auto& [a, s] : e.steps) {
    if (v + a < 0 || s <= 0) return 0;
    v = (v + a) / s + 1;
  }
  return v;
}

void set_extent_attrs(Node& n, const std::vector<std::pair<int64_t, Extent>>& axes) {
  std::vector<int64_t> ax, sources, steps;
  for (const auto& [axis, e] : axes) {
    ax.push_back(axis);
    sources.push_back(e.source);
    steps.push_back(static_cast<int64_t>(e.steps.size()));
    for (const auto& [a, s] : e.steps) steps.insert(steps.end(), {a, s});
  }
  n.attrs["axes"] = Attribute::Ints(std::move(ax));
  n.attrs["sources"] = Attribute::Ints(std::move(sources));
  n.attrs["steps"] = Attribute::Ints(std::move(steps));
}

Expected<std::vector<std::pair<int64_t, Extent>>> extent_attrs(const Node& n, int64_t rank) {
  const std::vector<int64_t> axes = n.attr_ints("axes"), sources = n.attr_ints("sources"), steps = n.attr_ints("steps");
  auto bad = [&](const std::string& why) { return InvalidModel(n.describe() + ": " + why); };
  if (axes.empty() || axes.size() != sources.size()) return bad("'axes' and 'sources' must name the same axes");
  std::vector<std::pair<int64_t, Extent>> out;
  size_t at = 0;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= rank || sources[i] < 0)
      return bad("masked axis " + std::to_string(axes[i]) + " out of range");
    if (at >= steps.size() || steps[at] < 0 || at + 1 + 2 * static_cast<size_t>(steps[at]) > steps.size()) {
      return bad("'steps' is not a count and its pairs per axis");
    }
    Extent e;
    e.source = sources[i];
    for (int64_t k = 0; k < steps[at]; ++k) {
      const int64_t a = steps[at + 1 + 2 * static_cast<size_t>(k)], s = steps[at + 2 + 2 * static_cast<size_t>(k)];
      if (s <= 0) return bad("a step's stride must be positive");
      e.steps.emplace_back(a, s);
    }
    at += 1 + 2 * static_cast<size_t>(steps[at]);
    out.emplace_back(axes[i], std::move(e));
  }
  if (at != steps.size()) return bad("'steps' has more entries than its axes");
  return out;
}

}  // namespace masked

namespace {

using masked::extent_attrs;
using masked::valid_size;

// Copies the box `box` (origin 0) of x (dims xd) into y (dims yd), both row-major, elements of `esize` bytes.
void copy_box(const uint8_t* x, const Dims& xd, uint8_t* y, const Dims& yd, const Dims& box, size_t esize) {
  const size_t r = box.size();
  if (r == 0) {
    std::memcpy(y, x, esize);
    return;
  }
  if (std::any_of(box.begin(), box.end(), [](int64_t d) { return d == 0; })) return;
  Dims xs(r, 1), ys(r, 1);
  for (size_t d = r - 1; d > 0; --d) xs[d - 1] = xs[d] * xd[d], ys[d - 1] = ys[d] * yd[d];
  const size_t run = static_cast<size_t>(box[r - 1]) * esize;
  Dims idx(r, 0);
  for (;;) {
    int64_t xo = 0, yo = 0;
    for (size_t d = 0; d + 1 < r; ++d) xo += idx[d] * xs[d], yo += idx[d] * ys[d];
    std::memcpy(y + static_cast<size_t>(yo) * esize, x + static_cast<size_t>(xo) * esize, run);
    size_t d = r - 1;
    while (d > 0) {
      if (++idx[d - 1] < box[d - 1]) break;
      idx[d - 1] = 0;
      --d;
    }
    if (d == 0) return;
  }
}

Dims dims_attr(const Node& n) { return n.attr_ints("dims"); }

Status check_dims_attr(const Node& n, const Dims& d) {
  if (d.empty() || std::any_of(d.begin(), d.end(), [](int64_t v) { return v < 0; })) {
    return InvalidModel(n.describe() + ": 'dims' must be a list of sizes");
  }
  return Status::Ok();
}

Status infer_pad_to(InferContext& ctx) {
  const Dims d = dims_attr(ctx.node());
  TSR_RETURN_IF_ERROR(check_dims_attr(ctx.node(), d));
  const Shape& xs = ctx.in_shape(0);
  if (xs.rank_known && xs.rank() != static_cast<int>(d.size())) {
    return ctx.error("X " + xs.str() + " must have the rank of 'dims' " + dims_str(d));
  }
  for (int k = 0; xs.rank_known && k < xs.rank(); ++k) {
    if (xs[k].known() && xs[k].value > d[static_cast<size_t>(k)]) {
      return ctx.error("X " + xs.str() + " is larger than 'dims' " + dims_str(d) + " along dim " + std::to_string(k));
    }
  }
  ctx.set_output(0, ctx.in_dtype(0), d);
  return Status::Ok();
}

Status run_pad_to(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  Tensor* y = ctx.output(0);
  const Dims d = dims_attr(ctx.node());
  if (!x || !y || y->dims() != d || y->dtype() != x->dtype() || x->rank() != static_cast<int>(d.size())) {
    return ctx.error("X and Y must have the rank of 'dims' " + dims_str(d));
  }
  for (size_t k = 0; k < d.size(); ++k) {
    if (x->dims()[k] > d[k]) return ctx.error("X " + dims_str(x->dims()) + " is larger than " + dims_str(d));
  }
  // Row by row along the last dim: X's row and zeros after it, or zeros where the row is past X's box (each byte of Y
  // written once).
  const size_t es = dtype_size(x->dtype()), r = d.size();
  const size_t row = static_cast<size_t>(d.back()) * es, xrow = static_cast<size_t>(x->dims().back()) * es;
  const int64_t rows = d.back() == 0 ? 0 : y->numel() / d.back();
  const auto* xp = static_cast<const uint8_t*>(x->raw());
  auto* yp = static_cast<uint8_t*>(y->raw());
  Dims idx(r, 0);
  for (int64_t i = 0; i < rows; ++i) {
    bool inside = true;
    int64_t xo = 0;
    for (size_t k = 0; k + 1 < r; ++k) {
      inside = inside && idx[k] < x->dims()[k];
      xo = xo * x->dims()[k] + idx[k];
    }
    uint8_t* yr = yp + static_cast<size_t>(i) * row;
    if (inside) {
      std::memcpy(yr, xp + static_cast<size_t>(xo) * xrow, xrow);
      std::memset(yr + xrow, 0, row - xrow);
    } else {
      std::memset(yr, 0, row);
    }
    for (size_t k = r - 1; k-- > 0;) {
      if (++idx[k] < d[k]) break;
      idx[k] = 0;
    }
  }
  return Status::Ok();
}

Status infer_valid_mask(InferContext& ctx) {
  const Dims d = dims_attr(ctx.node());
  TSR_RETURN_IF_ERROR(check_dims_attr(ctx.node(), d));
  std::vector<std::pair<int64_t, masked::Extent>> axes;
  TSR_ASSIGN_OR_RETURN(axes, extent_attrs(ctx.node(), static_cast<int64_t>(d.size())));
  ctx.set_output(0, DType::kFloat32, d);
  return Status::Ok();
}

Status run_valid_mask(KernelContext& ctx) {
  const Tensor* r = ctx.input(0);
  Tensor* m = ctx.output(0);
  const Dims d = dims_attr(ctx.node());
  if (!r || !m || m->dims() != d || m->dtype() != DType::kFloat32) return ctx.error("M must be float32 " + dims_str(d));
  std::vector<std::pair<int64_t, masked::Extent>> axes;
  TSR_ASSIGN_OR_RETURN(axes, extent_attrs(ctx.node(), static_cast<int64_t>(d.size())));
  Dims valid(d);  // per axis of M, the indices that hold 1 (its whole size where not masked)
  for (const auto& [axis, e] : axes) {
    valid[static_cast<size_t>(axis)] = std::clamp<int64_t>(valid_size(e, r->dims()), 0, d[static_cast<size_t>(axis)]);
  }
  float* p = m->data<float>();
  Dims idx(d.size(), 0);
  for (int64_t i = 0; i < m->numel(); ++i) {
    bool in = true;
    for (size_t k = 0; k < d.size() && in; ++k) in = idx[k] < valid[k];
    p[i] = in ? 1.f : 0.f;
    for (size_t k = d.size(); k-- > 0;) {
      if (++idx[k] < d[k]) break;
      idx[k] = 0;
    }
  }
  return Status::Ok();
}

// SliceValid's result dims: X's with each masked axis at its valid size (unknown until R's dims are).
Status infer_slice_valid(InferContext& ctx) {
  const Shape& xs = ctx.in_shape(0);
  const Shape& rs = ctx.in_shape(1);
  if (!xs.rank_known) {
    ctx.set_output(0, ctx.in_dtype(0), Shape());
    return Status::Ok();
  }
  std::vector<std::pair<int64_t, masked::Extent>> axes;
  TSR_ASSIGN_OR_RETURN(axes, extent_attrs(ctx.node(), xs.rank()));
  Shape out = xs;
  const bool r_known = rs.fully_known();
  for (const auto& [axis, e] : axes) {
    Dim& dim = out.dims[static_cast<size_t>(axis)];
    if (!r_known) {
      dim = Dim();
      continue;
    }
    const int64_t v = valid_size(e, rs.concrete());
    if (v <= 0) return ctx.error("input " + rs.str() + " is too small for the ops before this slice");
    if (xs[static_cast<int>(axis)].known() && v > xs[static_cast<int>(axis)].value) {
      return ctx.error("valid size " + std::to_string(v) + " along axis " + std::to_string(axis) + " exceeds X " +
                       xs.str());
    }
    dim = Dim(v);
  }
  ctx.set_output(0, ctx.in_dtype(0), out);
  return Status::Ok();
}

Status run_slice_valid(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* r = ctx.input(1);
  if (!x || !r) return ctx.error("X and R are required");
  std::vector<std::pair<int64_t, masked::Extent>> axes;
  TSR_ASSIGN_OR_RETURN(axes, extent_attrs(ctx.node(), x->rank()));
  Dims box = x->dims();
  for (const auto& [axis, e] : axes) {
    const int64_t v = valid_size(e, r->dims());
    if (v <= 0 || v > box[static_cast<size_t>(axis)]) {
      return ctx.error("valid size " + std::to_string(v) + " along axis " + std::to_string(axis) + " does not fit X " +
                       dims_str(x->dims()));
    }
    box[static_cast<size_t>(axis)] = v;
  }
  Tensor* y = ctx.output(0);
  if (!y || !y->defined()) {
    TSR_ASSIGN_OR_RETURN(y, ctx.allocate_output(0, x->dtype(), box));
  }
  if (y->dims() != box || y->dtype() != x->dtype()) return ctx.error("Y must be " + dims_str(box));
  copy_box(static_cast<const uint8_t*>(x->raw()), x->dims(), static_cast<uint8_t*>(y->raw()), box, box,
           dtype_size(x->dtype()));
  return Status::Ok();
}

}  // namespace

TSR_REGISTER_OPS(masked_bucket) {
  reg.add(OpSchema{"PadTo", masked::kDomain, infer_pad_to, nullptr, run_pad_to, {}});
  reg.add(OpSchema{"ValidMask", masked::kDomain, infer_valid_mask, nullptr, run_valid_mask, {}});
  reg.add(OpSchema{"SliceValid", masked::kDomain, infer_slice_valid, nullptr, run_slice_valid, {}});
}

}  // namespace tessera
