// The tensor family: ops that reinterpret or rearrange data without
// arithmetic. This file holds the view-like ops (Reshape, Flatten, Squeeze,
// Unsqueeze, Identity, Dropout in inference) and the shape queries (Shape,
// Size); it registers the rest of the family from tensor_layout.cc,
// tensor_slice.cc and tensor_create.cc.
//
// View-like ops copy bytes: the executor gives every value its own buffer.
// Their inference keeps symbolic dims wherever the rearrangement allows,
// because transformer graphs carry "batch"/"seq" through long Reshape chains.
#include <algorithm>
#include <random>

#include "ops/tensor_util.h"

namespace tessera {

namespace {

// ---- Reshape ----------------------------------------------------------------

// Infers the -1 entry from the input's and the other entries' dims, keeping a
// symbol when exactly one symbolic dim is left over (e.g. [batch,12,64] ->
// [-1,768] gives batch).
Dim infer_minus_one(const Shape& in, const std::vector<Dim>& out, size_t skip) {
  if (!in.rank_known) return Dim();
  int64_t p_in = 1, p_out = 1;
  std::vector<std::string> syms;
  for (const Dim& d : in.dims) {
    if (d.known()) {
      p_in *= d.value;
    } else if (!d.symbol.empty()) {
      syms.push_back(d.symbol);
    } else {
      return Dim();
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (i == skip) continue;
    const Dim& d = out[i];
    if (d.known()) {
      p_out *= d.value;
    } else if (!d.symbol.empty()) {
      auto it = std::find(syms.begin(), syms.end(), d.symbol);
      if (it == syms.end()) return Dim();
      syms.erase(it);
    } else {
      return Dim();
    }
  }
  if (p_out == 0) return Dim();
  if (syms.empty()) return p_in % p_out == 0 ? Dim(p_in / p_out) : Dim();
  if (syms.size() == 1 && p_in == p_out) return Dim::Symbol(syms[0]);
  return Dim();
}

Status infer_reshape(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  std::vector<int64_t> target;
  if (ctx.opset() < 5) {  // Reshape-1 takes the new shape as an attribute
    if (!ctx.node().has_attr("shape")) return ctx.error("Reshape before opset 5 needs its 'shape' attribute");
    target = ctx.node().attr_ints("shape");
  } else if (!known_ints(ctx, 1, &target)) {
    ctx.set_output(0, ctx.in_dtype(0), rank_from_shape_input(ctx.in_shape(1)));
    return Status::Ok();
  }
  const bool allowzero = ctx.opset() >= 14 && ctx.node().attr_int("allowzero", 0) != 0;
  std::vector<Dim> out(target.size());
  int minus_one = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t v = target[i];
    if (v == 0 && !allowzero) {
      if (!in.rank_known) {
        out[i] = Dim();
      } else if (static_cast<int>(i) < in.rank()) {
        out[i] = in.dims[i];
      } else {
        return ctx.error("shape entry " + std::to_string(i) + " is 0 but the input has rank " +
                         std::to_string(in.rank()));
      }
    } else if (v == -1) {
      if (minus_one >= 0) return ctx.error("shape has more than one -1");
      minus_one = static_cast<int>(i);
    } else if (v < -1) {
      return ctx.error("invalid shape entry " + std::to_string(v));
    } else {
      out[i] = Dim(v);
    }
  }
  if (minus_one >= 0) out[static_cast<size_t>(minus_one)] = infer_minus_one(in, out, static_cast<size_t>(minus_one));
  Shape result(out);
  if (in.fully_known() && result.fully_known() && numel(in.concrete()) != numel(result.concrete())) {
    return ctx.error("cannot reshape " + in.str() + " to " + result.str());
  }
  if (minus_one >= 0 && in.fully_known() && !result.fully_known()) {
    return ctx.error("cannot infer -1 when reshaping " + in.str());
  }
  ctx.set_output(0, ctx.in_dtype(0), std::move(result));
  return Status::Ok();
}

// ---- Flatten ----------------------------------------------------------------

Status infer_flatten(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  if (!in.rank_known) {
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unknown(2));
    return Status::Ok();
  }
  int64_t axis = ctx.node().attr_int("axis", 1);
  if (axis < 0) axis += in.rank();
  if (axis < 0 || axis > in.rank()) return ctx.error("axis out of range for " + in.str());
  std::vector<Dim> lo(in.dims.begin(), in.dims.begin() + axis);
  std::vector<Dim> hi(in.dims.begin() + axis, in.dims.end());
  ctx.set_output(0, ctx.in_dtype(0), Shape({product_dim(lo), product_dim(hi)}));
  return Status::Ok();
}

// ---- Squeeze / Unsqueeze ----------------------------------------------------

int axes_count_from_input_shape(const InferContext& ctx, int input) {
  const Shape& s = ctx.in_shape(input);
  if (s.rank_known && s.rank() == 1 && s[0].known()) return static_cast<int>(s[0].value);
  if (s.rank_known && s.rank() == 0) return 1;
  return -1;
}

Status infer_squeeze(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  std::vector<int64_t> axes;
  int have = attr_or_input_ints(ctx, "axes", 1, &axes);
  if (!in.rank_known) {
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unranked());
    return Status::Ok();
  }
  if (have < 0) {
    int k = axes_count_from_input_shape(ctx, 1);
    ctx.set_output(0, ctx.in_dtype(0), k >= 0 && k <= in.rank() ? Shape::Unknown(in.rank() - k) : Shape::Unranked());
    return Status::Ok();
  }
  std::vector<bool> drop(static_cast<size_t>(in.rank()), false);
  if (have == 0) {
    for (int i = 0; i < in.rank(); ++i) {
      if (!in[i].known()) {
        // A symbolic dim may or may not be 1.
        ctx.set_output(0, ctx.in_dtype(0), Shape::Unranked());
        return Status::Ok();
      }
      drop[static_cast<size_t>(i)] = in[i].value == 1;
    }
  } else {
    for (int64_t a : axes) {
      int ax = normalize_axis(a, in.rank());
      if (ax < 0) return ctx.error("axis " + std::to_string(a) + " out of range for " + in.str());
      if (in[ax].known() && in[ax].value != 1) {
        return ctx.error("cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(in[ax].value));
      }
      drop[static_cast<size_t>(ax)] = true;
    }
  }
  std::vector<Dim> out;
  for (int i = 0; i < in.rank(); ++i) {
    if (!drop[static_cast<size_t>(i)]) out.push_back(in[i]);
  }
  ctx.set_output(0, ctx.in_dtype(0), Shape(out));
  return Status::Ok();
}

Status infer_unsqueeze(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  std::vector<int64_t> axes;
  int have = attr_or_input_ints(ctx, "axes", 1, &axes);
  if (have == 0) return ctx.error("axes are required");
  if (!in.rank_known) {
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unranked());
    return Status::Ok();
  }
  if (have < 0) {
    int k = axes_count_from_input_shape(ctx, 1);
    ctx.set_output(0, ctx.in_dtype(0), k >= 0 ? Shape::Unknown(in.rank() + k) : Shape::Unranked());
    return Status::Ok();
  }
  const int out_rank = in.rank() + static_cast<int>(axes.size());
  std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
  for (int64_t a : axes) {
    int ax = normalize_axis(a, out_rank);
    if (ax < 0) return ctx.error("axis " + std::to_string(a) + " out of range");
    if (inserted[static_cast<size_t>(ax)]) return ctx.error("repeated axis " + std::to_string(a));
    inserted[static_cast<size_t>(ax)] = true;
  }
  std::vector<Dim> out;
  int j = 0;
  for (int i = 0; i < out_rank; ++i) out.push_back(inserted[static_cast<size_t>(i)] ? Dim(1) : in[j++]);
  ctx.set_output(0, ctx.in_dtype(0), Shape(out));
  return Status::Ok();
}

// ---- Shape / Size -------------------------------------------------------------

void shape_range(int64_t rank, const Node& node, int64_t opset, int64_t* start, int64_t* end) {
  int64_t s = opset >= 15 ? node.attr_int("start", 0) : 0;
  int64_t e = opset >= 15 ? node.attr_int("end", rank) : rank;
  if (s < 0) s += rank;
  if (e < 0) e += rank;
  *start = std::clamp<int64_t>(s, 0, rank);
  *end = std::clamp<int64_t>(e, 0, rank);
}

Status infer_shape(InferContext& ctx) {
  const Shape& in = ctx.in_shape(0);
  if (!in.rank_known) {
    ctx.set_output(0, DType::kInt64, Shape::Unknown(1));
    return Status::Ok();
  }
  int64_t s, e;
  shape_range(in.rank(), ctx.node(), ctx.opset(), &s, &e);
  ctx.set_output(0, DType::kInt64, Dims{std::max<int64_t>(0, e - s)});
  return Status::Ok();
}

Status run_shape(KernelContext& ctx) {
  const Tensor* in = ctx.input(0);
  int64_t s, e;
  // start/end exist only from opset 15 on, so reading them whatever the
  // opset gives the same range as inference.
  shape_range(in->rank(), ctx.node(), 15, &s, &e);
  Tensor* out = ctx.output(0);
  for (int64_t i = 0; i < out->numel(); ++i) out->data<int64_t>()[i] = in->dim(static_cast<int>(s + i));
  return Status::Ok();
}

Status infer_size(InferContext& ctx) {
  ctx.set_output(0, DType::kInt64, Dims{});
  return Status::Ok();
}

Status run_size(KernelContext& ctx) {
  *ctx.output(0)->data<int64_t>() = ctx.input(0)->numel();
  return Status::Ok();
}

// ---- Identity / Dropout -------------------------------------------------------

Status infer_dropout(InferContext& ctx) {
  ctx.set_output(0, ctx.in_dtype(0), ctx.in_shape(0));
  if (ctx.num_outputs() > 1) {
    ctx.set_output(1, ctx.opset() >= 10 ? DType::kBool : ctx.in_dtype(0), ctx.in_shape(0));
  }
  return Status::Ok();
}

// Training-mode dropout draws its mask exactly as the ONNX reference does
// (numpy's legacy MT19937 seeded with `seed`, uniform doubles in row-major
// order, keep when u >= ratio), so seeded models reproduce bit for bit.
class DropoutKernel final : public Kernel {
 public:
  explicit DropoutKernel(const KernelInit& init)
      : has_seed_(init.node.has_attr("seed")), seed_(init.node.attr_int("seed", 0)) {}

  Status run(KernelContext& ctx) const override {
    const Tensor* x = ctx.input(0);
    Tensor* y = ctx.output(0);
    Tensor* mask = ctx.output(1);
    TSR_RETURN_IF_ERROR(check_movable(ctx, x->dtype()));
    double ratio = ctx.node().attr_float("ratio", 0.5f);
    if (ctx.input(1)) ratio = ctx.input(1)->as_double(0);
    const bool training = ctx.input(2) && ctx.input(2)->as_int64(0) != 0;
    if (!training || ratio == 0.0) {
      parallel_memcpy(y->raw(), x->raw(), x->nbytes(), &ctx.pool());
      if (mask) fill_mask_ones(mask);
      return Status::Ok();
    }
    if (!dtype_is_float(x->dtype())) return ctx.error("training-mode dropout needs a float input");
    std::mt19937 gen(has_seed_ ? static_cast<uint32_t>(seed_) : std::random_device{}());
    const int64_t n = x->numel();
    std::vector<uint8_t> keep(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      uint32_t a = gen() >> 5, b = gen() >> 6;
      double u = (a * 67108864.0 + b) / 9007199254740992.0;
      keep[static_cast<size_t>(i)] = u >= ratio;
    }
    const float scale = 1.0f / (1.0f - static_cast<float>(ratio));
    visit_dtype(x->dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Float16> ||
                    std::is_same_v<T, BFloat16>) {
        const T* xs = x->data<T>();
        T* ys = y->data<T>();
        for (int64_t i = 0; i < n; ++i) {
          float v = keep[static_cast<size_t>(i)] ? static_cast<float>(xs[i]) * scale : 0.0f;
          if constexpr (std::is_same_v<T, double>) {
            ys[i] = keep[static_cast<size_t>(i)] ? xs[i] * static_cast<double>(scale) : 0.0;
          } else {
            ys[i] = T(v);
          }
        }
      }
    });
    if (mask) {
      if (mask->dtype() == DType::kBool) {
        for (int64_t i = 0; i < n; ++i) mask->data<bool>()[i] = keep[static_cast<size_t>(i)] != 0;
      } else {
        visit_dtype(mask->dtype(), [&](auto tag) {
          using T = decltype(tag);
          for (int64_t i = 0; i < n; ++i) mask->data<T>()[i] = T(keep[static_cast<size_t>(i)] ? 1.0f : 0.0f);
        });
      }
    }
    return Status::Ok();
  }

 private:
  static void fill_mask_ones(Tensor* mask) {
    visit_dtype(mask->dtype(), [&](auto tag) {
      using T = decltype(tag);
      T one;
      if constexpr (std::is_same_v<T, bool>) {
        one = true;
      } else {
        one = T(1.0f);
      }
      std::fill(mask->data<T>(), mask->data<T>() + mask->numel(), one);
    });
  }

  bool has_seed_;
  int64_t seed_;
};

Expected<std::unique_ptr<Kernel>> create_dropout(const KernelInit& init) {
  return std::unique_ptr<Kernel>(std::make_unique<DropoutKernel>(init));
}

}  // namespace

TSR_REGISTER_OPS(tensor) {
  reg.add(OpSchema{"Reshape", "", infer_reshape, nullptr, run_copy_input0, {1}});
  reg.add(OpSchema{"Flatten", "", infer_flatten, nullptr, run_copy_input0, {}});
  reg.add(OpSchema{"Squeeze", "", infer_squeeze, nullptr, run_copy_input0, {1}});
  reg.add(OpSchema{"Unsqueeze", "", infer_unsqueeze, nullptr, run_copy_input0, {1}});
  reg.add(OpSchema{"Identity", "", infer_same_as_input0, nullptr, run_copy_input0, {}});
  reg.add(OpSchema{"Dropout", "", infer_dropout, create_dropout, nullptr, {}});
  reg.add(OpSchema{"Shape", "", infer_shape, nullptr, run_shape, {}});
  reg.add(OpSchema{"Size", "", infer_size, nullptr, run_size, {}});
  register_tensor_layout_ops(reg);
  register_tensor_slice_ops(reg);
  register_tensor_create_ops(reg);
}

}  // namespace tessera
