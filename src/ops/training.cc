// Optimizer steps of the ai.onnx.preview.training domain (version 1):
// Adagrad, Adam and Momentum (standard and Nesterov).
//
// Inputs: R (learning rate, scalar float/double), T (update count, scalar
// int64), then the optimized tensors in blocks of n: X_1..X_n, G_1..G_n and
// the per-tensor state (Adagrad: H; Momentum: V; Adam: V, then H). Outputs:
// X_new_1..X_new_n followed by the new states in the same block order. Each
// group is updated elementwise; scalar coefficients (the decayed or
// bias-corrected learning rate) are computed once in double, elements in the
// tensor's own precision (float for float32/float16/bfloat16).
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/op_registry.h"

namespace tessera {

namespace {

constexpr const char* kTrainingDomain = "ai.onnx.preview.training";

// Layout of one optimizer: number of input blocks after R and T (X, G and
// the states); output block j is input block 0 for j = 0, else j + 1.
struct OptimizerLayout {
  int blocks;
};

constexpr OptimizerLayout kAdagradLayout{3};   // X, G, H -> X_new, H_new
constexpr OptimizerLayout kMomentumLayout{3};  // X, G, V -> X_new, V_new
constexpr OptimizerLayout kAdamLayout{4};      // X, G, V, H -> X_new, V_new, H_new

int input_block_of_output_block(int j) { return j == 0 ? 0 : j + 1; }

bool is_optimizer_float(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 || t == DType::kBFloat16;
}

// Number of optimized tensors, or an error for a malformed input list.
Expected<int> group_count(const Node& node, int num_inputs, const OptimizerLayout& layout) {
  const int rest = num_inputs - 2;
  if (rest < layout.blocks || rest % layout.blocks != 0) {
    return InvalidModel(node.describe() + ": expected R, T and " + std::to_string(layout.blocks) +
                        " inputs per optimized tensor, got " + std::to_string(num_inputs) + " inputs");
  }
  return rest / layout.blocks;
}

// Checks the scalar inputs R and T and the per-tensor blocks, then gives each
// output the type of its input (X_new <- X, state_new <- state).
Status infer_optimizer(InferContext& ctx, const OptimizerLayout& layout) {
  const Node& node = ctx.node();
  const int num_inputs = static_cast<int>(node.inputs.size());
  TSR_ASSIGN_OR_RETURN(const int n, group_count(node, num_inputs, layout));
  for (int i = 0; i < num_inputs; ++i) {
    if (!ctx.has_input(i)) return ctx.error("input " + std::to_string(i) + " is required");
  }
  const int out_blocks = layout.blocks - 1;
  if (ctx.num_outputs() > out_blocks * n) {
    return ctx.error("has " + std::to_string(ctx.num_outputs()) + " outputs, at most " +
                     std::to_string(out_blocks * n) + " expected");
  }

  const DType r_type = ctx.in_dtype(0);
  if (r_type != DType::kUndefined && !is_optimizer_float(r_type)) {
    return ctx.error(std::string("learning rate R must be float or double, got ") + dtype_name(r_type));
  }
  const DType t_type = ctx.in_dtype(1);
  if (t_type != DType::kUndefined && !dtype_is_integer(t_type)) {
    return ctx.error(std::string("update count T must be int64, got ") + dtype_name(t_type));
  }
  for (int s = 0; s < 2; ++s) {
    const Shape& sh = ctx.in_shape(s);
    const int64_t count = sh.rank_known ? sh.numel_or(1) : 1;
    if (count != 1) return ctx.error(std::string(s == 0 ? "R" : "T") + " must be a scalar, got " + sh.str());
  }

  for (int g = 0; g < n; ++g) {
    const int x = 2 + g;
    const DType x_type = ctx.in_dtype(x);
    if (x_type != DType::kUndefined && !is_optimizer_float(x_type)) {
      return ctx.error("optimized tensor '" + node.inputs[static_cast<size_t>(x)] + "' must be float, got " +
                       dtype_name(x_type));
    }
    const Shape& xs = ctx.in_shape(x);
    for (int b = 1; b < layout.blocks; ++b) {
      const int k = 2 + b * n + g;
      const std::string& name = node.inputs[static_cast<size_t>(k)];
      const DType k_type = ctx.in_dtype(k);
      if (x_type != DType::kUndefined && k_type != DType::kUndefined && k_type != x_type) {
        return ctx.error("'" + name + "' has dtype " + dtype_name(k_type) + ", expected " + dtype_name(x_type) +
                         " like '" + node.inputs[static_cast<size_t>(x)] + "'");
      }
      const Shape& ks = ctx.in_shape(k);
      bool mismatch = xs.rank_known && ks.rank_known && xs.rank() != ks.rank();
      for (int d = 0; !mismatch && xs.rank_known && ks.rank_known && d < xs.rank(); ++d) {
        mismatch = xs[d].known() && ks[d].known() && xs[d].value != ks[d].value;
      }
      if (mismatch) {
        return ctx.error("'" + name + "' has shape " + ks.str() + ", expected the shape " + xs.str() + " of '" +
                         node.inputs[static_cast<size_t>(x)] + "'");
      }
    }
  }

  for (int o = 0; o < ctx.num_outputs(); ++o) {
    const int block = input_block_of_output_block(o / n);
    const int k = 2 + block * n + o % n;
    ctx.set_output(o, ctx.in_dtype(k), ctx.in_shape(k));
  }
  return Status::Ok();
}

Status infer_adagrad(InferContext& ctx) { return infer_optimizer(ctx, kAdagradLayout); }
Status infer_adam(InferContext& ctx) { return infer_optimizer(ctx, kAdamLayout); }

Status infer_momentum(InferContext& ctx) {
  const Node& node = ctx.node();
  for (const char* a : {"alpha", "beta", "norm_coefficient", "mode"}) {
    if (!node.has_attr(a)) return ctx.error(std::string("missing required attribute '") + a + "'");
  }
  const std::string mode = node.attr_string("mode", "");
  if (mode != "standard" && mode != "nesterov") {
    return ctx.error("mode must be 'standard' or 'nesterov', got '" + mode + "'");
  }
  return infer_optimizer(ctx, kMomentumLayout);
}

// ---- kernels --------------------------------------------------------------------

// Element arithmetic happens in float, except for double tensors.
template <class T>
using ComputeT = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
T store_as(ComputeT<T> v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return T(v);
  } else {
    return static_cast<T>(v);
  }
}

constexpr int64_t kGrain = 16384;

// One optimized tensor of a node: the input blocks and the output blocks
// (a scratch buffer stands in for an unused output).
struct Group {
  const Tensor* in[4] = {};
  Tensor* out[3] = {};
};

// Pointers to the tensors of group g; fails on a size mismatch, which
// inference rejects already, so this only guards the kernel.
Status collect_group(KernelContext& ctx, const OptimizerLayout& layout, int n, int g, Group* group) {
  for (int b = 0; b < layout.blocks; ++b) {
    group->in[b] = ctx.input(2 + b * n + g);
    if (!group->in[b]) return ctx.error("input " + std::to_string(2 + b * n + g) + " is missing");
    if (group->in[b]->numel() != group->in[0]->numel() || group->in[b]->dtype() != group->in[0]->dtype()) {
      return ctx.error("tensors of optimized input " + std::to_string(g) + " differ in size or dtype");
    }
  }
  for (int j = 0; j + 1 < layout.blocks; ++j) group->out[j] = ctx.output(j * n + g);
  return Status::Ok();
}

// Runs `step(i, in_ptrs, out_ptrs)` for every element of every group,
// dispatching once per group on the element dtype. Absent outputs are
// written to scratch storage so the step needs no branches.
template <class Step>
Status run_groups(KernelContext& ctx, const OptimizerLayout& layout, Step&& step) {
  const Node& node = ctx.node();
  TSR_ASSIGN_OR_RETURN(const int n, group_count(node, ctx.num_inputs(), layout));
  for (int g = 0; g < n; ++g) {
    Group group;
    TSR_RETURN_IF_ERROR(collect_group(ctx, layout, n, g, &group));
    const DType dt = group.in[0]->dtype();
    if (!is_optimizer_float(dt)) return ctx.error(std::string("unsupported dtype ") + dtype_name(dt));
    const int64_t count = group.in[0]->numel();
    std::vector<Tensor> scratch;
    scratch.reserve(3);
    for (int j = 0; j + 1 < layout.blocks; ++j) {
      if (!group.out[j] || group.out[j]->numel() != count) {
        scratch.emplace_back(dt, group.in[0]->dims());
        group.out[j] = &scratch.back();
      }
    }
    visit_dtype(dt, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Float16> ||
                    std::is_same_v<T, BFloat16>) {
        const T* in[4] = {};
        T* out[3] = {};
        for (int b = 0; b < layout.blocks; ++b) in[b] = group.in[b]->template data<T>();
        for (int j = 0; j + 1 < layout.blocks; ++j) out[j] = group.out[j]->template data<T>();
        ctx.pool().parallel_for(count, kGrain, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) step(i, in, out);
        });
      }
    });
  }
  return Status::Ok();
}

template <class T>
ComputeT<T> load(const T* p, int64_t i) {
  return static_cast<ComputeT<T>>(p[i]);
}

// Adagrad: r = R / (1 + T decay_factor); g = norm_coefficient X + G;
// H_new = H + g^2; X_new = X - r g / (sqrt(H_new) + epsilon).
Status run_adagrad(KernelContext& ctx) {
  const Node& node = ctx.node();
  const double decay = node.attr_float("decay_factor", 0.f);
  const double epsilon = node.attr_float("epsilon", 1e-6f);
  const double norm = node.attr_float("norm_coefficient", 0.f);
  const double r = ctx.input(0)->as_double(0) / (1.0 + static_cast<double>(ctx.input(1)->as_int64(0)) * decay);
  return run_groups(ctx, kAdagradLayout, [&](int64_t i, auto in, auto out) {
    using T = std::remove_cv_t<std::remove_pointer_t<std::remove_pointer_t<decltype(in)>>>;
    using C = ComputeT<T>;
    const C x = load(in[0], i);
    const C g = static_cast<C>(norm) * x + load(in[1], i);
    const C h = load(in[2], i) + g * g;
    out[0][i] = store_as<T>(x - static_cast<C>(r) * g / (std::sqrt(h) + static_cast<C>(epsilon)));
    out[1][i] = store_as<T>(h);
  });
}

// Momentum: g = norm_coefficient X + G; V_new = alpha V + beta' g with
// beta' = beta after the first update (T > 0), else 1; standard:
// X_new = X - R V_new; Nesterov: X_new = X - R (g + alpha V_new).
Status run_momentum(KernelContext& ctx) {
  const Node& node = ctx.node();
  const double alpha = node.attr_float("alpha", 0.f);
  const double beta = ctx.input(1)->as_int64(0) > 0 ? static_cast<double>(node.attr_float("beta", 0.f)) : 1.0;
  const double norm = node.attr_float("norm_coefficient", 0.f);
  const bool nesterov = node.attr_string("mode", "standard") == "nesterov";
  const double r = ctx.input(0)->as_double(0);
  return run_groups(ctx, kMomentumLayout, [&](int64_t i, auto in, auto out) {
    using T = std::remove_cv_t<std::remove_pointer_t<std::remove_pointer_t<decltype(in)>>>;
    using C = ComputeT<T>;
    const C x = load(in[0], i);
    const C g = static_cast<C>(norm) * x + load(in[1], i);
    const C v = static_cast<C>(alpha) * load(in[2], i) + static_cast<C>(beta) * g;
    const C dir = nesterov ? g + static_cast<C>(alpha) * v : v;
    out[0][i] = store_as<T>(x - static_cast<C>(r) * dir);
    out[1][i] = store_as<T>(v);
  });
}

// Adam: g = norm_coefficient X + G; V_new = alpha V + (1 - alpha) g;
// H_new = beta H + (1 - beta) g^2; r = R sqrt(1 - beta^T) / (1 - alpha^T)
// for T > 0, else R; X_new = (1 - norm_coefficient_post)
// (X - r V_new / (sqrt(H_new) + epsilon)).
Status run_adam(KernelContext& ctx) {
  const Node& node = ctx.node();
  const double alpha = node.attr_float("alpha", 0.9f);
  const double beta = node.attr_float("beta", 0.999f);
  const double epsilon = node.attr_float("epsilon", 1e-6f);
  const double norm = node.attr_float("norm_coefficient", 0.f);
  const double post = node.attr_float("norm_coefficient_post", 0.f);
  const int64_t t = ctx.input(1)->as_int64(0);
  double r = ctx.input(0)->as_double(0);
  if (t > 0) {
    const double td = static_cast<double>(t);
    r = r * std::sqrt(1.0 - std::pow(beta, td)) / (1.0 - std::pow(alpha, td));
  }
  return run_groups(ctx, kAdamLayout, [&](int64_t i, auto in, auto out) {
    using T = std::remove_cv_t<std::remove_pointer_t<std::remove_pointer_t<decltype(in)>>>;
    using C = ComputeT<T>;
    const C x = load(in[0], i);
    const C g = static_cast<C>(norm) * x + load(in[1], i);
    const C v = static_cast<C>(alpha) * load(in[2], i) + static_cast<C>(1.0 - alpha) * g;
    const C h = static_cast<C>(beta) * load(in[3], i) + static_cast<C>(1.0 - beta) * (g * g);
    const C x_new = x - static_cast<C>(r) * (v / (std::sqrt(h) + static_cast<C>(epsilon)));
    out[0][i] = store_as<T>(static_cast<C>(1.0 - post) * x_new);
    out[1][i] = store_as<T>(v);
    out[2][i] = store_as<T>(h);
  });
}

}  // namespace

TSR_REGISTER_OPS(training) {
  reg.add(OpSchema{"Adagrad", kTrainingDomain, infer_adagrad, nullptr, run_adagrad, {}});
  reg.add(OpSchema{"Adam", kTrainingDomain, infer_adam, nullptr, run_adam, {}});
  reg.add(OpSchema{"Momentum", kTrainingDomain, infer_momentum, nullptr, run_momentum, {}});
}

}  // namespace tessera
