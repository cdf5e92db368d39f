// Layout ops of the tensor family: Transpose, DepthToSpace, SpaceToDepth,
// Concat, Split, Tile, Expand. Every kernel is one strided_copy (or one per
// input/output) described by dims and strides, so they work for any dtype and
// share the engine's memcpy/tiling/parallel paths.
#include <algorithm>
#include <numeric>

#include "ops/tensor_util.h"

namespace tessera {

namespace {

// ---- Transpose ----------------------------------------------------------------

std::vector<int64_t> transpose_perm(const Node& node, int rank) {
  std::vector<int64_t> perm = node.attr_ints("perm");
  if (perm.empty() && !node.has_attr("perm")) {
    perm.resize(static_cast<size_t>(rank));
    for (int i = 0; i < rank; ++i) perm[static_cast<size_t>(i)] = rank - 1 - i;
  }
  return perm;
}

Status infer_transpose(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  if (!in.rank_known) {
    int rank = static_cast<int>(ctx.node().attr_ints("perm").size());
    ctx.set_output(0, ctx.in_dtype(0), rank > 0 ? Shape::Unknown(rank) : Shape::Unranked());
    return Status::Ok();
  }
  std::vector<int64_t> perm = transpose_perm(ctx.node(), in.rank());
  if (static_cast<int>(perm.size()) != in.rank()) return ctx.error("perm does not match rank of " + in.str());
  std::vector<bool> seen(perm.size(), false);
  std::vector<Dim> out;
  for (int64_t p : perm) {
    int a = normalize_axis(p, in.rank());
    if (a < 0 || seen[static_cast<size_t>(a)]) return ctx.error("perm is not a permutation");
    seen[static_cast<size_t>(a)] = true;
    out.push_back(in[a]);
  }
  ctx.set_output(0, ctx.in_dtype(0), Shape(out));
  return Status::Ok();
}

Status run_transpose(KernelContext& ctx) {
  const Tensor* in = ctx.input(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, in->dtype()));
  std::vector<int64_t> perm = transpose_perm(ctx.node(), in->rank());
  for (auto& p : perm) p = normalize_axis(p, in->rank());
  transpose_copy(ctx.output(0)->raw(), in->raw(), in->dims(), perm, dtype_size(in->dtype()), &ctx.pool());
  return Status::Ok();
}

// ---- DepthToSpace / SpaceToDepth ----------------------------------------------

Dim mul_dim(const Dim& d, int64_t k) { return d.known() ? Dim(d.value * k) : (k == 1 ? d : Dim()); }

Status infer_depth_to_space(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  const int64_t bs = ctx.node().attr_int("blocksize", 0);
  if (bs <= 0) return ctx.error("blocksize must be positive");
  if (!in.rank_known) {
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unknown(4));
    return Status::Ok();
  }
  if (in.rank() != 4) return ctx.error("input must be 4-D, got " + in.str());
  Dim c;
  if (in[1].known()) {
    if (in[1].value % (bs * bs) != 0) return ctx.error("channels not divisible by blocksize^2");
    c = Dim(in[1].value / (bs * bs));
  }
  ctx.set_output(0, ctx.in_dtype(0), Shape({in[0], c, mul_dim(in[2], bs), mul_dim(in[3], bs)}));
  return Status::Ok();
}

Status run_depth_to_space(KernelContext& ctx) {
  const Tensor* in = ctx.input(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, in->dtype()));
  const int64_t bs = ctx.node().attr_int("blocksize", 0);
  const bool crd = ctx.node().attr_string("mode", "DCR") == "CRD";
  const int64_t n = in->dim(0), c = in->dim(1) / (bs * bs), h = in->dim(2), w = in->dim(3);
  Dims view;
  std::vector<int64_t> perm;
  if (crd) {
    view = {n, c, bs, bs, h, w};
    perm = {0, 1, 4, 2, 5, 3};
  } else {
    view = {n, bs, bs, c, h, w};
    perm = {0, 3, 4, 1, 5, 2};
  }
  transpose_copy(ctx.output(0)->raw(), in->raw(), view, perm, dtype_size(in->dtype()), &ctx.pool());
  return Status::Ok();
}

Status infer_space_to_depth(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  const int64_t bs = ctx.node().attr_int("blocksize", 0);
  if (bs <= 0) return ctx.error("blocksize must be positive");
  if (!in.rank_known) {
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unknown(4));
    return Status::Ok();
  }
  if (in.rank() != 4) return ctx.error("input must be 4-D, got " + in.str());
  auto div = [&](const Dim& d, Dim* out) -> bool {
    if (!d.known()) {
      *out = bs == 1 ? d : Dim();
      return true;
    }
    *out = Dim(d.value / bs);
    return d.value % bs == 0;
  };
  Dim h, w;
  if (!div(in[2], &h) || !div(in[3], &w)) return ctx.error("spatial dims not divisible by blocksize");
  ctx.set_output(0, ctx.in_dtype(0), Shape({in[0], mul_dim(in[1], bs * bs), h, w}));
  return Status::Ok();
}

Status run_space_to_depth(KernelContext& ctx) {
  const Tensor* in = ctx.input(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, in->dtype()));
  const int64_t bs = ctx.node().attr_int("blocksize", 0);
  const int64_t n = in->dim(0), c = in->dim(1), h = in->dim(2) / bs, w = in->dim(3) / bs;
  transpose_copy(ctx.output(0)->raw(), in->raw(), {n, c, h, bs, w, bs}, {0, 3, 5, 1, 2, 4},
                 dtype_size(in->dtype()), &ctx.pool());
  return Status::Ok();
}

// ---- Concat ---------------------------------------------------------------------

Status infer_concat(InferContext& ctx) {
  int rank = -1;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (ctx.has_input(i) && ctx.in_shape(i).rank_known) {
      rank = ctx.in_shape(i).rank();
      break;
    }
  }
  if (rank < 0) {
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unranked());
    return Status::Ok();
  }
  const int64_t axis_attr = ctx.node().attr_int("axis", 0);
  const int axis = normalize_axis(axis_attr, rank);
  if (axis < 0) return ctx.error("axis " + std::to_string(axis_attr) + " out of range for rank " + std::to_string(rank));
  std::vector<Dim> out(static_cast<size_t>(rank));
  bool first = true;
  int64_t sum = 0;
  bool sum_known = true;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    const Shape& s = ctx.in_shape(i);
    if (!s.rank_known) {
      sum_known = false;
      continue;
    }
    if (s.rank() != rank) return ctx.error("inputs have different ranks");
    for (int d = 0; d < rank; ++d) {
      if (d == axis) continue;
      if (first) {
        out[static_cast<size_t>(d)] = s[d];
      } else if (!merge_dim(out[static_cast<size_t>(d)], s[d], &out[static_cast<size_t>(d)])) {
        return ctx.error("inputs differ on dim " + std::to_string(d) + " (" + s.str() + ")");
      }
    }
    first = false;
    if (s[axis].known()) {
      sum += s[axis].value;
    } else {
      sum_known = false;
    }
  }
  out[static_cast<size_t>(axis)] = sum_known ? Dim(sum) : Dim();
  ctx.set_output(0, ctx.in_dtype(0), Shape(out));
  return Status::Ok();
}

Status run_concat(KernelContext& ctx) {
  Tensor* out = ctx.output(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, out->dtype()));
  const size_t esize = dtype_size(out->dtype());
  const int axis = normalize_axis(ctx.node().attr_int("axis", 0), out->rank());
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= out->dim(d);
  for (int d = axis + 1; d < out->rank(); ++d) inner *= out->dim(d);
  const int64_t out_row = out->dim(axis) * inner;
  int64_t offset = 0;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor* in = ctx.input(i);
    if (!in) continue;
    const int64_t row = in->dim(axis) * inner;
    strided_copy(static_cast<char*>(out->raw()) + offset * static_cast<int64_t>(esize), in->raw(), {outer, row},
                 {out_row, 1}, {row, 1}, esize, &ctx.pool());
    offset += row;
  }
  return Status::Ok();
}

// ---- Split ------------------------------------------------------------------------

// Sizes of the split along `axis` of length `dim`: explicit, or equal parts
// where the last part may be smaller (opset 18's rule, which also covers the
// evenly divisible case of earlier opsets).
bool split_sizes(int64_t dim, int n, const std::vector<int64_t>* explicit_sizes, std::vector<int64_t>* sizes) {
  if (explicit_sizes && !explicit_sizes->empty()) {
    *sizes = *explicit_sizes;
    return static_cast<int>(sizes->size()) == n &&
           std::accumulate(sizes->begin(), sizes->end(), int64_t{0}) == dim;
  }
  const int64_t chunk = (dim + n - 1) / n;
  sizes->assign(static_cast<size_t>(n), chunk);
  sizes->back() = dim - chunk * (n - 1);
  return sizes->back() >= 0;
}

int split_count(const Node& node) {
  int64_t n = node.attr_int("num_outputs", 0);
  return n > 0 ? static_cast<int>(n) : static_cast<int>(node.outputs.size());
}

Status infer_split(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  const int n = split_count(ctx.node());
  if (n != ctx.num_outputs()) {  // opset 18: num_outputs must match the outputs given
    return ctx.error("num_outputs is " + std::to_string(n) + " but the node has " + std::to_string(ctx.num_outputs()) +
                     " outputs");
  }
  std::vector<int64_t> given;
  int have = attr_or_input_ints(ctx, "split", 1, &given);
  if (have == 1 && given.empty()) have = 0;  // an empty split means equal parts
  if (!in.rank_known) {
    for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, ctx.in_dtype(0), Shape::Unranked());
    return Status::Ok();
  }
  const int axis = normalize_axis(ctx.node().attr_int("axis", 0), in.rank());
  if (axis < 0) return ctx.error("axis out of range for " + in.str());
  if (have == 1 && static_cast<int>(given.size()) != n) {
    return ctx.error("split has " + std::to_string(given.size()) + " entries for " + std::to_string(n) + " outputs");
  }
  std::vector<Dim> sizes(static_cast<size_t>(n));
  if (have == 1) {
    for (int i = 0; i < n; ++i) sizes[static_cast<size_t>(i)] = Dim(given[static_cast<size_t>(i)]);
    if (in[axis].known() && std::accumulate(given.begin(), given.end(), int64_t{0}) != in[axis].value) {
      return ctx.error("split sizes do not add up to dim " + std::to_string(in[axis].value));
    }
  } else if (have == 0 && in[axis].known()) {
    std::vector<int64_t> s;
    if (!split_sizes(in[axis].value, n, nullptr, &s)) return ctx.error("cannot split " + in.str());
    for (int i = 0; i < n; ++i) sizes[static_cast<size_t>(i)] = Dim(s[static_cast<size_t>(i)]);
  }
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    Shape s = in;
    s[axis] = i < n ? sizes[static_cast<size_t>(i)] : Dim();
    ctx.set_output(i, ctx.in_dtype(0), std::move(s));
  }
  return Status::Ok();
}

Status run_split(KernelContext& ctx) {
  const Tensor* in = ctx.input(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, in->dtype()));
  const size_t esize = dtype_size(in->dtype());
  const int axis = normalize_axis(ctx.node().attr_int("axis", 0), in->rank());
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= in->dim(d);
  for (int d = axis + 1; d < in->rank(); ++d) inner *= in->dim(d);
  std::vector<int64_t> given =
      ctx.node().has_attr("split") ? ctx.node().attr_ints("split") : input_ints(ctx, 1);
  std::vector<int64_t> sizes;
  if (!split_sizes(in->dim(axis), split_count(ctx.node()), &given, &sizes)) {
    return ctx.error("split sizes do not match the input " + in->str());
  }
  const int64_t in_row = in->dim(axis) * inner;
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t row = sizes[i] * inner;
    Tensor* out = ctx.output(static_cast<int>(i));
    if (out) {
      strided_copy(out->raw(), static_cast<const char*>(in->raw()) + offset * static_cast<int64_t>(esize),
                   {outer, row}, {row, 1}, {in_row, 1}, esize, &ctx.pool());
    }
    offset += row;
  }
  return Status::Ok();
}

// ---- Tile -------------------------------------------------------------------------

Status infer_tile(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  std::vector<int64_t> reps;
  if (!known_ints(ctx, 1, &reps)) {
    ctx.set_output(0, ctx.in_dtype(0), in.rank_known ? Shape::Unknown(in.rank()) : Shape::Unranked());
    return Status::Ok();
  }
  if (!in.rank_known) {
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unknown(static_cast<int>(reps.size())));
    return Status::Ok();
  }
  if (static_cast<int>(reps.size()) != in.rank()) return ctx.error("repeats do not match rank of " + in.str());
  std::vector<Dim> out;
  for (int i = 0; i < in.rank(); ++i) {
    int64_t r = reps[static_cast<size_t>(i)];
    if (r < 0) return ctx.error("negative repeat");
    out.push_back(r == 0 ? Dim(0) : mul_dim(in[i], r));
  }
  ctx.set_output(0, ctx.in_dtype(0), Shape(out));
  return Status::Ok();
}

Status run_tile(KernelContext& ctx) {
  const Tensor* in = ctx.input(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, in->dtype()));
  std::vector<int64_t> reps = input_ints(ctx, 1);
  // Output dim k is (repeat, original) interleaved: iterate [r0,d0,r1,d1,...]
  // with source stride 0 on the repeat dims.
  std::vector<int64_t> in_strides = contiguous_strides(in->dims());
  Dims dims;
  std::vector<int64_t> src;
  for (int i = 0; i < in->rank(); ++i) {
    dims.push_back(reps[static_cast<size_t>(i)]);
    src.push_back(0);
    dims.push_back(in->dim(i));
    src.push_back(in_strides[static_cast<size_t>(i)]);
  }
  strided_copy(ctx.output(0)->raw(), in->raw(), dims, contiguous_strides(dims), src, dtype_size(in->dtype()),
               &ctx.pool());
  return Status::Ok();
}

// ---- Expand -------------------------------------------------------------------------

Status infer_expand(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  std::vector<int64_t> shape;
  Shape target;
  if (known_ints(ctx, 1, &shape)) {
    target = Shape::FromDims(shape);
  } else {
    target = rank_from_shape_input(ctx.in_shape(1));
    if (!target.rank_known) {
      ctx.set_output(0, ctx.in_dtype(0), Shape::Unranked());
      return Status::Ok();
    }
  }
  Shape out;
  if (!broadcast_shapes(in, target, &out)) {
    return ctx.error("cannot expand " + in.str() + " to " + target.str());
  }
  ctx.set_output(0, ctx.in_dtype(0), std::move(out));
  return Status::Ok();
}

Status run_expand(KernelContext& ctx) {
  const Tensor* in = ctx.input(0);
  Tensor* out = ctx.output(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, in->dtype()));
  strided_copy(out->raw(), in->raw(), out->dims(), contiguous_strides(out->dims()),
               broadcast_strides(in->dims(), out->dims()), dtype_size(in->dtype()), &ctx.pool());
  return Status::Ok();
}

}  // namespace

void register_tensor_layout_ops(OpRegistry& reg) {
  reg.add(OpSchema{"Transpose", "", infer_transpose, nullptr, run_transpose, {}});
  reg.add(OpSchema{"DepthToSpace", "", infer_depth_to_space, nullptr, run_depth_to_space, {}});
  reg.add(OpSchema{"SpaceToDepth", "", infer_space_to_depth, nullptr, run_space_to_depth, {}});
  reg.add(OpSchema{"Concat", "", infer_concat, nullptr, run_concat, {}});
  reg.add(OpSchema{"Split", "", infer_split, nullptr, run_split, {1}});
  reg.add(OpSchema{"Tile", "", infer_tile, nullptr, run_tile, {1}});
  reg.add(OpSchema{"Expand", "", infer_expand, nullptr, run_expand, {1}});
}

}  // namespace tessera
