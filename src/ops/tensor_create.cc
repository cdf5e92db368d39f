// Creation ops of the tensor family: Constant, ConstantOfShape, Range,
// EyeLike. Their outputs come from attributes or from shape-like inputs.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/tensor_util.h"

namespace tessera {

namespace {

// ---- Constant -------------------------------------------------------------------

// The constant a Constant node holds, built from whichever value attribute it
// carries. Undefined when none is usable.
Tensor constant_value(const Node& node) {
  if (const Tensor* t = node.attr_tensor("value")) return *t;
  if (node.has_attr("value_float")) return Tensor::Scalar<float>(node.attr_float("value_float", 0.f));
  if (node.has_attr("value_int")) return Tensor::Scalar<int64_t>(node.attr_int("value_int", 0));
  if (node.has_attr("value_floats")) {
    std::vector<float> v = node.attr_floats("value_floats");
    return Tensor::FromVector(v, {static_cast<int64_t>(v.size())});
  }
  if (node.has_attr("value_ints")) {
    std::vector<int64_t> v = node.attr_ints("value_ints");
    return Tensor::FromVector(v, {static_cast<int64_t>(v.size())});
  }
  return Tensor();
}

Status infer_constant(InferContext& ctx) {
  Tensor t = constant_value(ctx.node());
  if (!t.defined()) {
    return Unsupported(ctx.node().describe() + ": needs one of value, value_float(s), value_int(s)");
  }
  ctx.set_output(0, t.dtype(), t.dims());
  return Status::Ok();
}

Status run_constant(KernelContext& ctx) {
  Tensor t = constant_value(ctx.node());
  Tensor* out = ctx.output(0);
  if (!t.defined() || t.nbytes() != out->nbytes()) return ctx.error("constant does not match its output");
  TSR_RETURN_IF_ERROR(check_movable(ctx, t.dtype()));
  std::memcpy(out->raw(), t.raw(), t.nbytes());
  return Status::Ok();
}

// ---- ConstantOfShape --------------------------------------------------------------

DType constant_of_shape_dtype(const Node& node) {
  const Tensor* v = node.attr_tensor("value");
  return v ? v->dtype() : DType::kFloat32;
}

Status infer_constant_of_shape(InferContext& ctx) {
  const DType dt = constant_of_shape_dtype(ctx.node());
  std::vector<int64_t> dims;
  if (known_ints(ctx, 0, &dims)) {
    for (int64_t d : dims) {
      if (d < 0) return ctx.error("negative dim " + std::to_string(d));
    }
    ctx.set_output(0, dt, dims);
    return Status::Ok();
  }
  const Shape& s = ctx.in_shape(0);
  ctx.set_output(0, dt, rank_from_shape_input(s));
  return Status::Ok();
}

// Repeats one element of `esize` bytes over the output.
void fill_bytes(void* dst, const void* elem, int64_t n, size_t esize) {
  char* d = static_cast<char*>(dst);
  bool zero = true;
  for (size_t i = 0; i < esize; ++i) zero = zero && static_cast<const char*>(elem)[i] == 0;
  if (zero) {
    std::memset(d, 0, static_cast<size_t>(n) * esize);
    return;
  }
  for (int64_t i = 0; i < n; ++i) std::memcpy(d + static_cast<size_t>(i) * esize, elem, esize);
}

Status run_constant_of_shape(KernelContext& ctx) {
  Tensor* out = ctx.output(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, out->dtype()));
  const Tensor* v = ctx.node().attr_tensor("value");
  const size_t es = dtype_size(out->dtype());
  if (v && v->numel() > 0) {
    fill_bytes(out->raw(), v->raw(), out->numel(), es);
  } else {
    std::memset(out->raw(), 0, out->nbytes());
  }
  return Status::Ok();
}

// ---- Range ---------------------------------------------------------------------------

Expected<int64_t> range_count(const Tensor& start, const Tensor& limit, const Tensor& delta) {
  for (const Tensor* t : {&start, &limit, &delta}) {
    if (t->numel() != 1) return InvalidModel("Range takes scalars; got " + t->str());
  }
  // The element count is capped where an int64 cannot hold it; the tensor size check refuses it later.
  constexpr double kCap = 9.0e18;
  if (dtype_is_float(start.dtype())) {
    const double s = start.as_double(0), l = limit.as_double(0), d = delta.as_double(0);
    if (d == 0) return InvalidModel("Range delta is 0");
    const double n = std::ceil((l - s) / d);
    if (std::isnan(n)) return InvalidModel("Range of start, limit and delta holding infinities or NaN");
    return static_cast<int64_t>(std::clamp(n, 0.0, kCap));
  }
  const int64_t s = start.as_int64(0), l = limit.as_int64(0), d = delta.as_int64(0);
  if (d == 0) return InvalidModel("Range delta is 0");
  int64_t diff = 0;
  if (__builtin_sub_overflow(l, s, &diff)) return static_cast<int64_t>(kCap);
  // ceil division for either sign.
  int64_t q = diff / d;
  if ((diff % d != 0) && ((diff > 0) == (d > 0))) ++q;
  return std::max<int64_t>(q, 0);
}

Status infer_range(InferContext& ctx) {
  for (int i = 0; i < 3; ++i) {
    const Shape& sh = ctx.in_shape(i);
    if (sh.rank_known && (sh.rank() > 1 || (sh.fully_known() && numel(sh.concrete()) != 1))) {
      return ctx.error("input " + std::to_string(i) + " must be a scalar, got " + sh.str());
    }
  }
  const Tensor* s = ctx.in_value(0);
  const Tensor* l = ctx.in_value(1);
  const Tensor* d = ctx.in_value(2);
  if (s && l && d) {
    auto n = range_count(*s, *l, *d);
    if (!n.ok()) return ctx.error(n.status().message());
    ctx.set_output(0, ctx.in_dtype(0), Dims{n.value()});
  } else {
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unknown(1));
  }
  return Status::Ok();
}

Status run_range(KernelContext& ctx) {
  const Tensor* s = ctx.input(0);
  const Tensor* d = ctx.input(2);
  Tensor* out = ctx.output(0);
  const int64_t n = out->numel();
  Status st;
  visit_dtype(out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
      st = Unsupported(ctx.node().describe() + ": Range of " + dtype_name(out->dtype()));
    } else {
      const T start = s->data<T>()[0], delta = d->data<T>()[0];
      T* o = out->data<T>();
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(start + static_cast<T>(i) * delta);
    }
  });
  return st;
}

// ---- EyeLike ---------------------------------------------------------------------------

DType eyelike_dtype(const Node& node, DType in) {
  if (!node.has_attr("dtype")) return in;
  return dtype_from_onnx(static_cast<int32_t>(node.attr_int("dtype", 0)));
}

Status infer_eyelike(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  if (in.rank_known && in.rank() != 2) return ctx.error("input must be 2-D, got " + in.str());
  DType dt = eyelike_dtype(ctx.node(), ctx.in_dtype(0));
  if (dt == DType::kUndefined) return ctx.error("unsupported dtype attribute");
  ctx.set_output(0, dt, in.rank_known ? in : Shape::Unknown(2));
  return Status::Ok();
}

Status run_eyelike(KernelContext& ctx) {
  Tensor* out = ctx.output(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, out->dtype()));
  const int64_t k = ctx.node().attr_int("k", 0);
  std::memset(out->raw(), 0, out->nbytes());
  const int64_t rows = out->dim(0), cols = out->dim(1);
  visit_dtype(out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    T one;
    if constexpr (std::is_same_v<T, bool>) {
      one = true;
    } else {
      one = T(1.0f);
    }
    T* o = out->data<T>();
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t j = i + k;
      if (j >= 0 && j < cols) o[i * cols + j] = one;
    }
  });
  return Status::Ok();
}

}  // namespace

void register_tensor_create_ops(OpRegistry& reg) {
  reg.add(OpSchema{"Constant", "", infer_constant, nullptr, run_constant, {}});
  reg.add(OpSchema{"ConstantOfShape", "", infer_constant_of_shape, nullptr, run_constant_of_shape, {0}});
  reg.add(OpSchema{"Range", "", infer_range, nullptr, run_range, {0, 1, 2}});
  reg.add(OpSchema{"EyeLike", "", infer_eyelike, nullptr, run_eyelike, {}});
}

}  // namespace tessera
