// Normalisation operators: BatchNormalization (inference and the opset 14+
// training mode), InstanceNormalization, LayerNormalization, LRN,
// LpNormalization and MeanVarianceNormalization.
//
// Each kernel views its input as rows of contiguous elements that share one
// set of statistics ([N*C, spatial] for batch/instance norm, [outer, inner]
// for layer norm) and runs rows in parallel. float32 rows use the vectorised
// primitives of norm_util.h; other float types convert per element and
// accumulate in float (double for double). Statistics are population
// (biased) variances, as the ONNX reference computes them.
#include <cmath>
#include <vector>

#include "ops/eigen_sum.h"
#include "ops/norm_util.h"
#include "ops/op_registry.h"

namespace tessera {
namespace {

using normk::acc_t;

std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(p[i]);
  });
  return v;
}

template <class T>
void store_doubles(const std::vector<double>& v, Tensor* t) {
  T* p = t->data<T>();
  for (size_t i = 0; i < v.size() && static_cast<int64_t>(i) < t->numel(); ++i) p[i] = static_cast<T>(v[i]);
}

void store_doubles_any(const std::vector<double>& v, Tensor* t) {
  if (!t) return;
  visit_dtype(t->dtype(), [&](auto tag) { store_doubles<decltype(tag)>(v, t); });
}

Status require_float(const KernelContext& ctx, const Tensor* x) {
  if (!x) return ctx.error("missing input 0");
  if (!dtype_is_float(x->dtype())) return ctx.error(std::string("unsupported input type ") + dtype_name(x->dtype()));
  return Status::Ok();
}

Status infer_float_same_as_input0(InferContext& ctx) {
  if (ctx.in_dtype(0) != DType::kUndefined && !dtype_is_float(ctx.in_dtype(0))) {
    return ctx.error(std::string("unsupported input type ") + dtype_name(ctx.in_dtype(0)));
  }
  ctx.set_output(0, ctx.in_dtype(0), ctx.in_shape(0));
  return Status::Ok();
}

// y[r, :] = x[r, :] * a[r % channels] + b[r % channels] over rows of `inner`
// elements (or per element when the parameters cover a whole [C, inner]
// block: BatchNormalization with spatial = 0).
template <class T>
void apply_channel_affine(const T* x, T* y, int64_t rows, int64_t inner, int64_t channels,
                          const std::vector<float>& a, const std::vector<float>& b, bool per_element,
                          Parallel& pool) {
  if (inner == 1 && !per_element) {  // one element per channel ([N, C] or [N, C, 1]): one pass over them all
    for (int64_t r = 0; r < rows; ++r) {
      const size_t c = static_cast<size_t>(r % channels);
      y[r] = static_cast<T>(normk::mul_unfused(static_cast<float>(x[r]), a[c]) + b[c]);
    }
    return;
  }
  pool.parallel_for(rows, normk::row_grain(inner), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r % channels;
      const T* xr = x + r * inner;
      T* yr = y + r * inner;
      if (per_element) {
        const float* ar = a.data() + c * inner;
        const float* br = b.data() + c * inner;
        for (int64_t i = 0; i < inner; ++i) yr[i] = static_cast<T>(static_cast<float>(xr[i]) * ar[i] + br[i]);
      } else if constexpr (std::is_same_v<T, float>) {
        normk::row_mul_then_add(xr, a[static_cast<size_t>(c)], b[static_cast<size_t>(c)], yr, inner);
      } else {
        using A = acc_t<T>;
        const A ac = a[static_cast<size_t>(c)], bc = b[static_cast<size_t>(c)];
        for (int64_t i = 0; i < inner; ++i) yr[i] = static_cast<T>(static_cast<A>(xr[i]) * ac + bc);
      }
    }
  });
}

// ---- BatchNormalization --------------------------------------------------

bool bn_training(const Node& node, int64_t opset) {
  if (opset >= 14) return node.attr_int("training_mode", 0) != 0;
  for (size_t i = 1; i < node.outputs.size(); ++i) {
    if (!node.outputs[i].empty()) return true;
  }
  return false;
}

Status bn_infer(InferContext& ctx) {
  TSR_RETURN_IF_ERROR(infer_float_same_as_input0(ctx));
  const Shape& x = ctx.in_shape(0);
  if (x.rank_known && x.rank() < 2) return ctx.error("input must have rank >= 2, got " + x.str());
  // Running and saved statistics have the type and shape of input 'mean'.
  for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, ctx.in_dtype(3), ctx.in_shape(3));
  return Status::Ok();
}

// y = x * a + b with a = scale / sqrt(var + eps) and b = bias - mean * a, each step rounded to float in ONNX
// Runtime's order, so that float32 models match it to the last bit (see row_mul_then_add).
void bn_affine(const std::vector<double>& scale, const std::vector<double>& bias, const std::vector<double>& mean,
               const std::vector<double>& var, double eps, std::vector<float>* a, std::vector<float>* b) {
  const size_t params = scale.size();
  a->resize(params);
  b->resize(params);
  const auto epsf = static_cast<float>(eps);
  for (size_t k = 0; k < params; ++k) {
    const float inv_std = 1.0f / std::sqrt(static_cast<float>(var[k]) + epsf);
    (*a)[k] = inv_std * static_cast<float>(scale[k]);
    (*b)[k] = static_cast<float>(bias[k]) - normk::mul_unfused(static_cast<float>(mean[k]), (*a)[k]);
  }
}

// Output 0 = x * a + b per channel (per element of a [C, spatial] block when a covers one: spatial = 0).
void bn_apply(KernelContext& ctx, const std::vector<float>& a, const std::vector<float>& b) {
  const Tensor* x = ctx.input(0);
  const Dims& d = x->dims();
  const int64_t n = d[0], c = d[1], inner = normk::prod(d, 2, d.size());
  const bool per_element = static_cast<int64_t>(a.size()) == c * inner && inner != 1;
  normk::visit_float(x->dtype(), [&](auto tag) {
    using T = decltype(tag);
    apply_channel_affine(x->data<T>(), ctx.output(0)->data<T>(), n * c, inner, c, a, b, per_element, ctx.pool());
  });
}

Status bn_run(KernelContext& ctx, int64_t opset) {
  const Tensor* x = ctx.input(0);
  TSR_RETURN_IF_ERROR(require_float(ctx, x));
  for (int i = 1; i <= 4; ++i) {
    if (!ctx.input(i)) return ctx.error("missing input " + std::to_string(i));
  }
  const Node& node = ctx.node();
  const double eps = node.attr_float("epsilon", 1e-5f);
  const double momentum = node.attr_float("momentum", 0.9f);
  const Dims& d = x->dims();
  const int64_t n = d[0], c = d[1], inner = normk::prod(d, 2, d.size());
  std::vector<double> scale = to_doubles(*ctx.input(1)), bias = to_doubles(*ctx.input(2));
  std::vector<double> mean = to_doubles(*ctx.input(3)), var = to_doubles(*ctx.input(4));
  // spatial = 0 (opset < 9): parameters per element of a [C, spatial] block.
  const bool per_element = static_cast<int64_t>(scale.size()) == c * inner && inner != 1;
  const size_t params = per_element ? static_cast<size_t>(c * inner) : static_cast<size_t>(c);
  if (scale.size() != params || bias.size() != params || mean.size() != params || var.size() != params) {
    return ctx.error("scale, B, mean and var must have " + std::to_string(params) + " elements");
  }

  const bool training = bn_training(node, opset);
  if (training) {
    // Batch statistics per channel (or per element for spatial = 0).
    std::vector<double> bmean(params, 0.0), bvar(params, 0.0);
    const double count = per_element ? static_cast<double>(n) : static_cast<double>(n * inner);
    visit_dtype(x->dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* xp = x->data<T>();
      for (int64_t b = 0; b < n; ++b) {
        for (int64_t ch = 0; ch < c; ++ch) {
          const T* xr = xp + (b * c + ch) * inner;
          for (int64_t i = 0; i < inner; ++i) bmean[per_element ? static_cast<size_t>(ch * inner + i) : static_cast<size_t>(ch)] += static_cast<double>(xr[i]);
        }
      }
      for (auto& m : bmean) m /= count;
      for (int64_t b = 0; b < n; ++b) {
        for (int64_t ch = 0; ch < c; ++ch) {
          const T* xr = xp + (b * c + ch) * inner;
          for (int64_t i = 0; i < inner; ++i) {
            size_t k = per_element ? static_cast<size_t>(ch * inner + i) : static_cast<size_t>(ch);
            double dv = static_cast<double>(xr[i]) - bmean[k];
            bvar[k] += dv * dv;
          }
        }
      }
      for (auto& v : bvar) v /= count;
    });
    std::vector<double> run_mean(params), run_var(params);
    for (size_t k = 0; k < params; ++k) {
      run_mean[k] = mean[k] * momentum + bmean[k] * (1.0 - momentum);
      run_var[k] = var[k] * momentum + bvar[k] * (1.0 - momentum);
    }
    store_doubles_any(run_mean, ctx.output(1));
    store_doubles_any(run_var, ctx.output(2));
    store_doubles_any(bmean, ctx.output(3));
    store_doubles_any(bvar, ctx.output(4));
    mean = std::move(bmean);
    var = std::move(bvar);
  }

  std::vector<float> a, b;
  bn_affine(scale, bias, mean, var, eps, &a, &b);
  bn_apply(ctx, a, b);
  return Status::Ok();
}

// Inference with constant scale, B, mean and var (as exporters write it): a and b worked out once, not per run
// (a BatchNorm1d over [1, 3072, 1] spent its run converting and square-rooting its parameters).
class BatchNormKernel final : public Kernel {
 public:
  static Expected<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    auto k = std::make_unique<BatchNormKernel>(init.opset);
    const auto& ci = init.const_inputs;
    const bool constant = ci.size() >= 5 && ci[1] && ci[2] && ci[3] && ci[4];
    if (constant && !bn_training(init.node, init.opset)) {
      const std::vector<double> scale = to_doubles(*ci[1]), bias = to_doubles(*ci[2]), mean = to_doubles(*ci[3]),
                                var = to_doubles(*ci[4]);
      if (bias.size() == scale.size() && mean.size() == scale.size() && var.size() == scale.size()) {
        bn_affine(scale, bias, mean, var, init.node.attr_float("epsilon", 1e-5f), &k->a_, &k->b_);
        k->ready_ = true;
      }
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }
  explicit BatchNormKernel(int64_t opset) : opset_(opset) {}

  Status run(KernelContext& ctx) const override {
    const Tensor* x = ctx.input(0);
    if (!ready_ || !x || x->rank() < 2) return bn_run(ctx, opset_);
    TSR_RETURN_IF_ERROR(require_float(ctx, x));
    const int64_t c = x->dims()[1], inner = normk::prod(x->dims(), 2, x->dims().size());
    const bool per_element = static_cast<int64_t>(a_.size()) == c * inner && inner != 1;
    if (!per_element && static_cast<int64_t>(a_.size()) != c) return bn_run(ctx, opset_);  // bn_run says what is wrong
    bn_apply(ctx, a_, b_);
    return Status::Ok();
  }

 private:
  int64_t opset_;
  bool ready_ = false;
  std::vector<float> a_, b_;
};

// ---- InstanceNormalization -----------------------------------------------

Status instancenorm_infer(InferContext& ctx) {
  TSR_RETURN_IF_ERROR(infer_float_same_as_input0(ctx));
  const Shape& x = ctx.in_shape(0);
  if (x.rank_known && x.rank() < 2) return ctx.error("input must have rank >= 2, got " + x.str());
  return Status::Ok();
}

// Normalises rows of `inner` elements to zero mean / unit variance, then
// applies scale[r % channels], bias[r % channels]. Float rows compute ONNX
// Runtime's arithmetic: mean and squared deviations summed in its order
// (eigen_sum.h), inv_std = 1 / sqrt(sq / n + eps), a = inv_std * scale,
// b = bias - mean * a, y = x * a + b, every operation rounded to float.
template <class T>
void normalize_rows(const T* x, T* y, int64_t rows, int64_t inner, int64_t channels, const std::vector<double>& scale,
                    const std::vector<double>& bias, double eps, Parallel& pool) {
  pool.parallel_for(rows, normk::row_grain(inner * 2), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const size_t c = static_cast<size_t>(r % channels);
      const T* xr = x + r * inner;
      T* yr = y + r * inner;
      if constexpr (std::is_same_v<T, float>) {
        const float n = static_cast<float>(inner);
        const float mean = eigen_order::row_sum(xr, inner, r * inner) / n;
        const float sq = eigen_order::row_sum_sq_diff(xr, mean, inner);
        const float inv_std = 1.0f / std::sqrt(sq / n + static_cast<float>(eps));
        const float a = normk::mul_unfused(inv_std, static_cast<float>(scale[c]));
        normk::row_mul_then_add(xr, a, static_cast<float>(bias[c]) - normk::mul_unfused(mean, a), yr, inner);
      } else {
        double mean, var;
        normk::row_moments(xr, inner, &mean, &var);
        double a = scale[c] / std::sqrt(var + eps);
        double b = bias[c] - mean * a;
        for (int64_t i = 0; i < inner; ++i) yr[i] = static_cast<T>(static_cast<double>(xr[i]) * a + b);
      }
    }
  });
}

Status instancenorm_run(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  TSR_RETURN_IF_ERROR(require_float(ctx, x));
  if (!ctx.input(1) || !ctx.input(2)) return ctx.error("missing scale or B");
  const Dims& d = x->dims();
  const int64_t c = d[1], inner = normk::prod(d, 2, d.size());
  std::vector<double> scale = to_doubles(*ctx.input(1)), bias = to_doubles(*ctx.input(2));
  if (static_cast<int64_t>(scale.size()) != c || static_cast<int64_t>(bias.size()) != c) {
    return ctx.error("scale and B must have " + std::to_string(c) + " elements");
  }
  const double eps = ctx.node().attr_float("epsilon", 1e-5f);
  if (x->numel() == 0) return Status::Ok();
  normk::visit_float(x->dtype(), [&](auto tag) {
    using T = decltype(tag);
    normalize_rows(x->data<T>(), ctx.output(0)->data<T>(), d[0] * c, inner, c, scale, bias, eps, ctx.pool());
  });
  return Status::Ok();
}

// ---- GroupNormalization (opsets 18 and 21) ---------------------------------
// x [N, C, ...] in num_groups groups of C / G channels; each (n, g) is normalised over its channels and positions.
// Opset 18 gives scale and bias per group ([G]), opset 21 per channel ([C]).

Status groupnorm_infer(InferContext& ctx) {
  TSR_RETURN_IF_ERROR(infer_float_same_as_input0(ctx));
  const Shape& x = ctx.in_shape(0);
  if (x.rank_known && x.rank() < 2) return ctx.error("input must have rank >= 2, got " + x.str());
  const int64_t g = ctx.node().attr_int("num_groups", 0);
  if (g <= 0) return ctx.error("num_groups must be positive");
  if (x.rank_known && x[1].known() && x[1].value % g != 0) {
    return ctx.error("channels (" + std::to_string(x[1].value) + ") are not a multiple of num_groups (" +
                     std::to_string(g) + ")");
  }
  return Status::Ok();
}

Status groupnorm_run(KernelContext& ctx, int64_t opset) {
  const Tensor* x = ctx.input(0);
  TSR_RETURN_IF_ERROR(require_float(ctx, x));
  if (!ctx.input(1) || !ctx.input(2)) return ctx.error("missing scale or bias");
  const Dims& d = x->dims();
  const int64_t n = d[0], c = d[1], spatial = normk::prod(d, 2, d.size());
  const int64_t groups = ctx.node().attr_int("num_groups", 0);
  if (groups <= 0 || c % groups != 0) return ctx.error("channels are not a multiple of num_groups");
  const int64_t per_group = c / groups;
  const int64_t want = opset >= 21 ? c : groups;
  std::vector<double> scale = to_doubles(*ctx.input(1)), bias = to_doubles(*ctx.input(2));
  if (static_cast<int64_t>(scale.size()) != want || static_cast<int64_t>(bias.size()) != want) {
    return ctx.error("scale and bias must have " + std::to_string(want) + " elements (opset " +
                     std::to_string(opset) + ")");
  }
  const double eps = ctx.node().attr_float("epsilon", 1e-5f);
  if (x->numel() == 0) return Status::Ok();
  const int64_t inner = per_group * spatial;
  normk::visit_float(x->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x->data<T>();
    T* yp = ctx.output(0)->data<T>();
    ctx.pool().parallel_for(n * groups, normk::row_grain(inner * 2), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t g = r % groups;
        const T* xr = xp + r * inner;
        T* yr = yp + r * inner;
        double mean = 0, var = 0;
        normk::row_moments(xr, inner, &mean, &var);
        const double rstd = 1.0 / std::sqrt(var + eps);
        for (int64_t k = 0; k < per_group; ++k) {
          const size_t ch = static_cast<size_t>(opset >= 21 ? g * per_group + k : g);
          const double a = scale[ch] * rstd, b = bias[ch] - mean * a;
          const T* xs = xr + k * spatial;
          T* ys = yr + k * spatial;
          if constexpr (std::is_same_v<T, float>) {
            normk::row_axpb(xs, static_cast<float>(a), static_cast<float>(b), ys, spatial);
          } else {
            for (int64_t i = 0; i < spatial; ++i) ys[i] = static_cast<T>(static_cast<double>(xs[i]) * a + b);
          }
        }
      }
    });
  });
  return Status::Ok();
}

// ---- LayerNormalization --------------------------------------------------

DType layernorm_stash_dtype(const Node& node) {
  DType t = dtype_from_onnx(static_cast<int32_t>(node.attr_int("stash_type", 1)));
  return t == DType::kUndefined ? DType::kFloat32 : t;
}

Status layernorm_infer(InferContext& ctx) {
  TSR_RETURN_IF_ERROR(infer_float_same_as_input0(ctx));
  const Shape& x = ctx.in_shape(0);
  DType stash = layernorm_stash_dtype(ctx.node());
  if (!x.rank_known) {
    ctx.set_output(1, stash, Shape::Unranked());
    ctx.set_output(2, stash, Shape::Unranked());
    return Status::Ok();
  }
  int axis = normalize_axis(ctx.node().attr_int("axis", -1), x.rank());
  if (axis < 0) return ctx.error("axis out of range for input " + x.str());
  Shape stats = x;
  for (int i = axis; i < x.rank(); ++i) stats[i] = Dim(1);
  ctx.set_output(1, stash, stats);
  ctx.set_output(2, stash, stats);
  return Status::Ok();
}

// Scale or bias as a per-element table for one normalised row, or null when
// it varies along the outer (non-normalised) dimensions, in which case it is
// expanded to the whole input.
struct RowParam {
  std::vector<float> row;   // size inner, when per-row
  std::vector<float> full;  // size numel, when it varies across rows
};

RowParam layernorm_param(const Tensor& p, const Dims& xd, int axis) {
  RowParam out;
  const int64_t inner = normk::prod(xd, static_cast<size_t>(axis), xd.size());
  const std::vector<double> v = to_doubles(p);
  // Fits the normalised shape when, after dropping leading 1s, its dims are
  // a suffix of xd[axis:] (broadcasting along the leading normalised dims).
  Dims pd = p.dims();
  while (!pd.empty() && pd.front() == 1 && pd.size() > xd.size() - static_cast<size_t>(axis)) pd.erase(pd.begin());
  if (pd.size() <= xd.size() - static_cast<size_t>(axis)) {
    Dims row_dims(xd.begin() + axis, xd.end());
    Dims bstr = broadcast_strides(pd, row_dims);
    out.row.resize(static_cast<size_t>(inner));
    std::vector<int64_t> idx(row_dims.size(), 0);
    for (int64_t e = 0; e < inner; ++e) {
      int64_t off = 0;
      for (size_t k = 0; k < idx.size(); ++k) off += idx[k] * bstr[k];
      out.row[static_cast<size_t>(e)] = static_cast<float>(v[static_cast<size_t>(off)]);
      for (size_t k = idx.size(); k-- > 0;) {
        if (++idx[k] < row_dims[k]) break;
        idx[k] = 0;
      }
    }
    return out;
  }
  Dims bstr = broadcast_strides(p.dims(), xd);
  const int64_t total = numel(xd);
  out.full.resize(static_cast<size_t>(total));
  std::vector<int64_t> idx(xd.size(), 0);
  for (int64_t e = 0; e < total; ++e) {
    int64_t off = 0;
    for (size_t k = 0; k < idx.size(); ++k) off += idx[k] * bstr[k];
    out.full[static_cast<size_t>(e)] = static_cast<float>(v[static_cast<size_t>(off)]);
    for (size_t k = idx.size(); k-- > 0;) {
      if (++idx[k] < xd[k]) break;
      idx[k] = 0;
    }
  }
  return out;
}

Status layernorm_run(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  TSR_RETURN_IF_ERROR(require_float(ctx, x));
  if (!ctx.input(1)) return ctx.error("missing Scale");
  const Dims& d = x->dims();
  const int axis = normalize_axis(ctx.node().attr_int("axis", -1), x->rank());
  if (axis < 0) return ctx.error("axis out of range for input " + dims_str(d));
  const double eps = ctx.node().attr_float("epsilon", 1e-5f);
  const int64_t rows = normk::prod(d, 0, static_cast<size_t>(axis));
  const int64_t inner = normk::prod(d, static_cast<size_t>(axis), d.size());
  Dims nd;
  if (!broadcast_dims(ctx.input(1)->dims(), d, &nd) || nd != d) {
    return ctx.error("Scale " + dims_str(ctx.input(1)->dims()) + " does not broadcast to " + dims_str(d));
  }
  RowParam scale = layernorm_param(*ctx.input(1), d, axis);
  RowParam bias;
  const bool has_bias = ctx.input(2) != nullptr;
  if (has_bias) {
    if (!broadcast_dims(ctx.input(2)->dims(), d, &nd) || nd != d) {
      return ctx.error("B " + dims_str(ctx.input(2)->dims()) + " does not broadcast to " + dims_str(d));
    }
    bias = layernorm_param(*ctx.input(2), d, axis);
  }
  std::vector<double> means(static_cast<size_t>(rows)), rstds(static_cast<size_t>(rows));
  if (x->numel() > 0) {
    normk::visit_float(x->dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* xp = x->data<T>();
      T* yp = ctx.output(0)->data<T>();
      ctx.pool().parallel_for(rows, normk::row_grain(inner * 2), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const T* xr = xp + r * inner;
          T* yr = yp + r * inner;
          const float* sr = scale.full.empty() ? scale.row.data() : scale.full.data() + r * inner;
          const float* br = !has_bias ? nullptr : bias.full.empty() ? bias.row.data() : bias.full.data() + r * inner;
          if constexpr (std::is_same_v<T, float>) {
            float mean, rstd;
            normk::layernorm_row(xr, inner, static_cast<float>(eps), sr, br, yr, &mean, &rstd);
            means[static_cast<size_t>(r)] = mean;
            rstds[static_cast<size_t>(r)] = rstd;
          } else {
            using A = acc_t<T>;
            A mean, var;
            normk::row_moments(xr, inner, &mean, &var);
            A rstd = static_cast<A>(1.0 / std::sqrt(static_cast<double>(var) + eps));
            for (int64_t i = 0; i < inner; ++i) {
              A v = (static_cast<A>(xr[i]) - mean) * rstd * static_cast<A>(sr[i]);
              if (br) v += static_cast<A>(br[i]);
              yr[i] = static_cast<T>(v);
            }
            means[static_cast<size_t>(r)] = static_cast<double>(mean);
            rstds[static_cast<size_t>(r)] = static_cast<double>(rstd);
          }
        }
      });
    });
  }
  store_doubles_any(means, ctx.output(1));
  store_doubles_any(rstds, ctx.output(2));
  return Status::Ok();
}

// ---- LRN -------------------------------------------------------------------

Status lrn_infer(InferContext& ctx) {
  TSR_RETURN_IF_ERROR(infer_float_same_as_input0(ctx));
  const Shape& x = ctx.in_shape(0);
  if (x.rank_known && x.rank() < 2) return ctx.error("input must have rank >= 2, got " + x.str());
  if (ctx.node().attr_int("size", 0) <= 0) return ctx.error("attribute 'size' must be positive");
  return Status::Ok();
}

Status lrn_run(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  TSR_RETURN_IF_ERROR(require_float(ctx, x));
  const Node& node = ctx.node();
  const int64_t size = node.attr_int("size", 1);
  const float alpha = node.attr_float("alpha", 1e-4f), beta = node.attr_float("beta", 0.75f);
  const float bias = node.attr_float("bias", 1.0f);
  const Dims& d = x->dims();
  const int64_t n = d[0], c = d[1], inner = normk::prod(d, 2, d.size());
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  const float a = alpha / static_cast<float>(size);
  normk::visit_float(x->dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* xp = x->data<T>();
    T* yp = ctx.output(0)->data<T>();
    ctx.pool().parallel_for(n * c, normk::row_grain(inner * size), [&](int64_t r0, int64_t r1) {
      std::vector<A> sq(static_cast<size_t>(inner));
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = r / c, ch = r % c;
        std::fill(sq.begin(), sq.end(), A(0));
        for (int64_t k = std::max<int64_t>(0, ch - before); k <= std::min<int64_t>(c - 1, ch + after); ++k) {
          const T* xk = xp + (b * c + k) * inner;
          for (int64_t i = 0; i < inner; ++i) {
            A v = static_cast<A>(xk[i]);
            sq[static_cast<size_t>(i)] += v * v;
          }
        }
        const T* xr = xp + r * inner;
        T* yr = yp + r * inner;
        // base^-beta; the common betas (0.75 in AlexNet/GoogLeNet, 0.5)
        // avoid pow.
        const A ab = static_cast<A>(bias), aa = static_cast<A>(a);
        if (beta == 0.75f) {
          for (int64_t i = 0; i < inner; ++i) {
            A base = ab + aa * sq[static_cast<size_t>(i)], r = std::sqrt(base);
            yr[i] = static_cast<T>(static_cast<A>(xr[i]) / (r * std::sqrt(r)));
          }
        } else if (beta == 0.5f) {
          for (int64_t i = 0; i < inner; ++i) {
            yr[i] = static_cast<T>(static_cast<A>(xr[i]) / std::sqrt(ab + aa * sq[static_cast<size_t>(i)]));
          }
        } else {
          for (int64_t i = 0; i < inner; ++i) {
            A den = std::pow(ab + aa * sq[static_cast<size_t>(i)], static_cast<A>(beta));
            yr[i] = static_cast<T>(static_cast<A>(xr[i]) / den);
          }
        }
      }
    });
  });
  return Status::Ok();
}

// ---- LpNormalization -----------------------------------------------------

Status lpnorm_infer(InferContext& ctx) {
  TSR_RETURN_IF_ERROR(infer_float_same_as_input0(ctx));
  int64_t p = ctx.node().attr_int("p", 2);
  if (p != 1 && p != 2) return ctx.error("p must be 1 or 2, got " + std::to_string(p));
  const Shape& x = ctx.in_shape(0);
  if (x.rank_known && normalize_axis(ctx.node().attr_int("axis", -1), x.rank()) < 0) {
    return ctx.error("axis out of range for input " + x.str());
  }
  return Status::Ok();
}

Status lpnorm_run(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  TSR_RETURN_IF_ERROR(require_float(ctx, x));
  const int axis = normalize_axis(ctx.node().attr_int("axis", -1), x->rank());
  if (axis < 0) return ctx.error("axis out of range for input " + dims_str(x->dims()));
  const bool l1 = ctx.node().attr_int("p", 2) == 1;
  const Dims& d = x->dims();
  const int64_t outer = normk::prod(d, 0, static_cast<size_t>(axis)), n = d[static_cast<size_t>(axis)];
  const int64_t inner = normk::prod(d, static_cast<size_t>(axis) + 1, d.size());
  normk::visit_float(x->dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* xp = x->data<T>();
    T* yp = ctx.output(0)->data<T>();
    ctx.pool().parallel_for(outer * inner, normk::row_grain(n), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t o = t / inner, i = t % inner;
        const T* xr = xp + o * n * inner + i;
        T* yr = yp + o * n * inner + i;
        A s = 0;
        for (int64_t j = 0; j < n; ++j) {
          A v = static_cast<A>(xr[j * inner]);
          s += l1 ? std::abs(v) : v * v;
        }
        A norm = l1 ? s : std::sqrt(s);
        A inv = norm == A(0) ? A(0) : A(1) / norm;
        for (int64_t j = 0; j < n; ++j) yr[j * inner] = static_cast<T>(static_cast<A>(xr[j * inner]) * inv);
      }
    });
  });
  return Status::Ok();
}

// ---- MeanVarianceNormalization -------------------------------------------

// Axes reduced by the node for an input of `rank`; `normalize_variance`
// comes from the experimental opset-1 form (across_channels /
// normalize_variance attributes) still seen in opset 7-8 models.
std::vector<bool> mvn_axes(const Node& node, int64_t opset, int rank, bool* normalize_variance) {
  std::vector<bool> mask(static_cast<size_t>(rank), false);
  *normalize_variance = true;
  if (opset < 9 && !node.has_attr("axes")) {
    *normalize_variance = node.attr_int("normalize_variance", 1) != 0;
    int first = node.attr_int("across_channels", 0) != 0 ? 1 : 2;
    for (int i = first; i < rank; ++i) mask[static_cast<size_t>(i)] = true;
    return mask;
  }
  for (int64_t a : node.attr_ints("axes", {0, 2, 3})) {
    int k = normalize_axis(a, rank);
    if (k >= 0) mask[static_cast<size_t>(k)] = true;
  }
  return mask;
}

Status mvn_infer(InferContext& ctx) {
  TSR_RETURN_IF_ERROR(infer_float_same_as_input0(ctx));
  const Shape& x = ctx.in_shape(0);
  if (x.rank_known && ctx.node().has_attr("axes")) {
    for (int64_t a : ctx.node().attr_ints("axes")) {
      if (normalize_axis(a, x.rank()) < 0) return ctx.error("axis " + std::to_string(a) + " out of range for " + x.str());
    }
  }
  return Status::Ok();
}

Status mvn_run(KernelContext& ctx, int64_t opset) {
  const Tensor* x = ctx.input(0);
  TSR_RETURN_IF_ERROR(require_float(ctx, x));
  const Dims& d = x->dims();
  const int rank = x->rank();
  bool normalize_variance = true;
  std::vector<bool> reduced = mvn_axes(ctx.node(), opset, rank, &normalize_variance);
  if (!ctx.node().has_attr("axes") && opset >= 9 && rank != 4) {
    // The default axes [0, 2, 3] only make sense for 4-D input.
    for (int i = 0; i < rank; ++i) reduced[static_cast<size_t>(i)] = (i == 0 || i >= 2);
  }
  // Group (statistics slot) of every element: the linear index over the kept
  // dimensions.
  const int64_t total = x->numel();
  Dims kept_stride(static_cast<size_t>(rank), 0);
  int64_t groups = 1;
  for (int i = rank; i-- > 0;) {
    if (!reduced[static_cast<size_t>(i)]) {
      kept_stride[static_cast<size_t>(i)] = groups;
      groups *= d[static_cast<size_t>(i)];
    }
  }
  std::vector<int64_t> group(static_cast<size_t>(total));
  {
    std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
    int64_t g = 0;
    for (int64_t e = 0; e < total; ++e) {
      group[static_cast<size_t>(e)] = g;
      for (int k = rank; k-- > 0;) {
        size_t ks = static_cast<size_t>(k);
        g += kept_stride[ks];
        if (++idx[ks] < d[ks]) break;
        g -= kept_stride[ks] * d[ks];
        idx[ks] = 0;
      }
    }
  }
  std::vector<double> sum(static_cast<size_t>(groups), 0.0), sq(static_cast<size_t>(groups), 0.0);
  std::vector<int64_t> count(static_cast<size_t>(groups), 0);
  normk::visit_float(x->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x->data<T>();
    T* yp = ctx.output(0)->data<T>();
    for (int64_t e = 0; e < total; ++e) {
      size_t g = static_cast<size_t>(group[static_cast<size_t>(e)]);
      sum[g] += static_cast<double>(xp[e]);
      ++count[g];
    }
    for (size_t g = 0; g < sum.size(); ++g) sum[g] /= static_cast<double>(std::max<int64_t>(1, count[g]));
    for (int64_t e = 0; e < total; ++e) {
      size_t g = static_cast<size_t>(group[static_cast<size_t>(e)]);
      double dv = static_cast<double>(xp[e]) - sum[g];
      sq[g] += dv * dv;
    }
    // The ONNX function: (X - mean) / (sqrt(var) + 1e-9).
    for (size_t g = 0; g < sq.size(); ++g) {
      sq[g] = normalize_variance ? 1.0 / (std::sqrt(sq[g] / static_cast<double>(std::max<int64_t>(1, count[g]))) + 1e-9) : 1.0;
    }
    for (int64_t e = 0; e < total; ++e) {
      size_t g = static_cast<size_t>(group[static_cast<size_t>(e)]);
      yp[e] = static_cast<T>((static_cast<double>(xp[e]) - sum[g]) * sq[g]);
    }
  });
  return Status::Ok();
}

}  // namespace

TSR_REGISTER_OPS(norm) {
  reg.add(OpSchema{"BatchNormalization", "", bn_infer, BatchNormKernel::Create, nullptr, {}});
  reg.add(OpSchema{"InstanceNormalization", "", instancenorm_infer, nullptr, instancenorm_run, {}});
  reg.add(OpSchema{"GroupNormalization", "", groupnorm_infer, normk::make_opset_kernel<groupnorm_run>, nullptr, {}});
  reg.add(OpSchema{"LayerNormalization", "", layernorm_infer, nullptr, layernorm_run, {}});
  reg.add(OpSchema{"LRN", "", lrn_infer, nullptr, lrn_run, {}});
  reg.add(OpSchema{"LpNormalization", "", lpnorm_infer, nullptr, lpnorm_run, {}});
  reg.add(OpSchema{"MeanVarianceNormalization", "", mvn_infer, normk::make_opset_kernel<mvn_run>, nullptr, {}});
}

}  // namespace tessera
