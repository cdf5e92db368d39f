// Miscellaneous operators: the losses NegativeLogLikelihoodLoss and
// SoftmaxCrossEntropyLoss, Det, and (registered from misc_einsum.cc) Einsum.
//
// Losses view input as [N, C, D] (D = product of the trailing dims) and
// target as [N, D]. Each (n, d) position contributes -input[n, t, d] * w[t]
// with t = target[n, d] and w the optional class weights (1 without), and
// nothing when t == ignore_index. Reductions follow the ONNX reference:
// 'sum' adds the contributions, 'mean' divides that sum by the sum of the
// weights of the positions that were not ignored.
#include <cmath>
#include <limits>
#include <vector>

#include "ops/misc_ops.h"
#include "ops/norm_util.h"
#include "ops/op_registry.h"

namespace tessera {
namespace {

using normk::acc_t;

// ---- losses ----------------------------------------------------------------

enum class Reduction { kNone, kSum, kMean };

Expected<Reduction> parse_reduction(const Node& node) {
  std::string r = node.attr_string("reduction", "mean");
  if (r == "none") return Reduction::kNone;
  if (r == "sum") return Reduction::kSum;
  if (r == "mean") return Reduction::kMean;
  return InvalidModel(node.describe() + ": unknown reduction '" + r + "'");
}

Status loss_infer(InferContext& ctx) {
  Reduction red;
  TSR_ASSIGN_OR_RETURN(red, parse_reduction(ctx.node()));
  const Shape& x = ctx.in_shape(0);
  const Shape& t = ctx.in_shape(1);
  DType dt = ctx.in_dtype(0);
  if (dt != DType::kUndefined && !dtype_is_float(dt)) {
    return ctx.error(std::string("unsupported input type ") + dtype_name(dt));
  }
  DType tt = ctx.in_dtype(1);
  if (tt != DType::kUndefined && tt != DType::kInt32 && tt != DType::kInt64) {
    return ctx.error(std::string("target must be int32 or int64, got ") + dtype_name(tt));
  }
  if (x.rank_known && x.rank() < 2) return ctx.error("input must have rank >= 2, got " + x.str());
  if (x.rank_known && t.rank_known) {
    if (t.rank() != x.rank() - 1) return ctx.error("target " + t.str() + " does not match input " + x.str());
    for (int i = 0; i < t.rank(); ++i) {
      const Dim& xd = x[i == 0 ? 0 : i + 1];
      if (xd.known() && t[i].known() && xd.value != t[i].value) {
        return ctx.error("target " + t.str() + " does not match input " + x.str());
      }
    }
  }
  if (red == Reduction::kNone) {
    Shape out = t;
    if (!t.rank_known && x.rank_known) {
      out = Shape::Unknown(x.rank() - 1);
      out[0] = x[0];
      for (int i = 2; i < x.rank(); ++i) out[i - 1] = x[i];
    }
    ctx.set_output(0, dt, out);
  } else {
    ctx.set_output(0, dt, Shape(std::vector<Dim>{}));
  }
  // SoftmaxCrossEntropyLoss: optional log_prob output.
  ctx.set_output(1, dt, x);
  return Status::Ok();
}

std::vector<int64_t> read_targets(const Tensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::kInt32) {
    const int32_t* p = t.data<int32_t>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = p[i];
  } else {
    const int64_t* p = t.data<int64_t>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = p[i];
  }
  return v;
}

// Computes the loss from log-probabilities `logp` ([N, C, D], any float T).
template <class T>
Status nll_from_logp(KernelContext& ctx, const T* logp, int64_t n, int64_t c, int64_t d) {
  Reduction red;
  TSR_ASSIGN_OR_RETURN(red, parse_reduction(ctx.node()));
  const Node& node = ctx.node();
  const bool has_ignore = node.has_attr("ignore_index");
  const int64_t ignore = node.attr_int("ignore_index", 0);
  const std::vector<int64_t> target = read_targets(*ctx.input(1));
  if (static_cast<int64_t>(target.size()) != n * d) return ctx.error("target size does not match input");
  std::vector<double> weight;
  if (ctx.input(2)) {
    const Tensor& w = *ctx.input(2);
    if (w.numel() != c) return ctx.error("weight must have " + std::to_string(c) + " elements");
    weight.resize(static_cast<size_t>(c));
    for (int64_t i = 0; i < c; ++i) weight[static_cast<size_t>(i)] = w.as_double(i);
  }
  Tensor* out = ctx.output(0);
  T* op = out->data<T>();
  double total = 0, wsum = 0;
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t k = 0; k < d; ++k) {
      const int64_t t = target[static_cast<size_t>(b * d + k)];
      double loss = 0, w = 0;
      if (!(has_ignore && t == ignore)) {
        if (t < 0 || t >= c) {
          return ctx.error("target value " + std::to_string(t) + " out of range [0, " + std::to_string(c) + ")");
        }
        w = weight.empty() ? 1.0 : weight[static_cast<size_t>(t)];
        loss = -static_cast<double>(logp[(b * c + t) * d + k]) * w;
      }
      if (red == Reduction::kNone) op[b * d + k] = static_cast<T>(loss);
      total += loss;
      wsum += w;
    }
  }
  if (red == Reduction::kSum) op[0] = static_cast<T>(total);
  if (red == Reduction::kMean) op[0] = static_cast<T>(total / wsum);
  return Status::Ok();
}

Status check_loss_inputs(const KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  if (!x || !ctx.input(1)) return ctx.error("missing input or target");
  if (!dtype_is_float(x->dtype())) return ctx.error(std::string("unsupported input type ") + dtype_name(x->dtype()));
  if (x->rank() < 2) return ctx.error("input must have rank >= 2");
  return Status::Ok();
}

Status nll_run(KernelContext& ctx) {
  TSR_RETURN_IF_ERROR(check_loss_inputs(ctx));
  const Tensor& x = *ctx.input(0);
  const int64_t n = x.dim(0), c = x.dim(1), d = normk::prod(x.dims(), 2, x.dims().size());
  Status st;
  normk::visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    st = nll_from_logp<T>(ctx, x.data<T>(), n, c, d);
  });
  return st;
}

Status sce_run(KernelContext& ctx) {
  TSR_RETURN_IF_ERROR(check_loss_inputs(ctx));
  const Tensor& x = *ctx.input(0);
  const int64_t n = x.dim(0), c = x.dim(1), d = normk::prod(x.dims(), 2, x.dims().size());
  Status st;
  normk::visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    // log_softmax along C, into the log_prob output when requested.
    Tensor scratch;
    Tensor* lp = ctx.output(1);
    if (!lp) {
      scratch = Tensor(x.dtype(), x.dims());
      lp = &scratch;
    }
    const T* xp = x.data<T>();
    T* lpp = lp->data<T>();
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t k = 0; k < d; ++k) {
        const T* xr = xp + b * c * d + k;
        T* yr = lpp + b * c * d + k;
        A m = -std::numeric_limits<A>::infinity();
        for (int64_t j = 0; j < c; ++j) m = std::max<A>(m, static_cast<A>(xr[j * d]));
        A s = 0;
        for (int64_t j = 0; j < c; ++j) s += std::exp(static_cast<A>(xr[j * d]) - m);
        const A shift = m + std::log(s);
        for (int64_t j = 0; j < c; ++j) yr[j * d] = static_cast<T>(static_cast<A>(xr[j * d]) - shift);
      }
    }
    st = nll_from_logp<T>(ctx, lpp, n, c, d);
  });
  return st;
}

// ---- Det -------------------------------------------------------------------

Status det_infer(InferContext& ctx) {
  const Shape& x = ctx.in_shape(0);
  DType dt = ctx.in_dtype(0);
  if (dt != DType::kUndefined && !dtype_is_float(dt)) {
    return ctx.error(std::string("unsupported input type ") + dtype_name(dt));
  }
  if (!x.rank_known) {
    ctx.set_output(0, dt, Shape::Unranked());
    return Status::Ok();
  }
  if (x.rank() < 2) return ctx.error("input must have rank >= 2, got " + x.str());
  const Dim& a = x[x.rank() - 2];
  const Dim& b = x[x.rank() - 1];
  if (a.known() && b.known() && a.value != b.value) return ctx.error("matrices must be square, got " + x.str());
  ctx.set_output(0, dt, Shape(std::vector<Dim>(x.dims.begin(), x.dims.end() - 2)));
  return Status::Ok();
}

// Determinant by LU decomposition with partial pivoting, in double.
double determinant(std::vector<double>& a, int64_t m) {
  double det = 1.0;
  for (int64_t col = 0; col < m; ++col) {
    int64_t piv = col;
    for (int64_t r = col + 1; r < m; ++r) {
      if (std::abs(a[static_cast<size_t>(r * m + col)]) > std::abs(a[static_cast<size_t>(piv * m + col)])) piv = r;
    }
    const double pv = a[static_cast<size_t>(piv * m + col)];
    if (pv == 0.0) return 0.0;
    if (piv != col) {
      for (int64_t k = 0; k < m; ++k) std::swap(a[static_cast<size_t>(piv * m + k)], a[static_cast<size_t>(col * m + k)]);
      det = -det;
    }
    det *= pv;
    for (int64_t r = col + 1; r < m; ++r) {
      const double f = a[static_cast<size_t>(r * m + col)] / pv;
      if (f == 0.0) continue;
      for (int64_t k = col + 1; k < m; ++k) a[static_cast<size_t>(r * m + k)] -= f * a[static_cast<size_t>(col * m + k)];
    }
  }
  return det;
}

Status det_run(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  if (!x || !dtype_is_float(x->dtype()) || x->rank() < 2) return ctx.error("input must be a float tensor of rank >= 2");
  const int64_t m = x->dim(x->rank() - 1);
  if (x->dim(x->rank() - 2) != m) return ctx.error("matrices must be square");
  const int64_t batch = ctx.output(0)->numel();
  normk::visit_float(x->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x->data<T>();
    T* yp = ctx.output(0)->data<T>();
    std::vector<double> a(static_cast<size_t>(m * m));
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < m * m; ++i) a[static_cast<size_t>(i)] = static_cast<double>(xp[b * m * m + i]);
      yp[b] = static_cast<T>(determinant(a, m));
    }
  });
  return Status::Ok();
}

}  // namespace

TSR_REGISTER_OPS(misc) {
  reg.add(OpSchema{"NegativeLogLikelihoodLoss", "", loss_infer, nullptr, nll_run, {}});
  reg.add(OpSchema{"SoftmaxCrossEntropyLoss", "", loss_infer, nullptr, sce_run, {}});
  reg.add(OpSchema{"Det", "", det_infer, nullptr, det_run, {}});
  register_einsum(reg);
  register_tfidf(reg);
}

}  // namespace tessera
