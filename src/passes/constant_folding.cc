#include "passes/constant_folding.h"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <string_view>

#include "passes/dce.h"
#include "ops/node_runner.h"

namespace tessera {
namespace {

// Ops whose result is not a function of their inputs, and ops on sequences or
// optionals, which Tensor constants cannot hold.
bool never_fold(const Node& n) {
  if (!n.domain.empty() && n.domain != "ai.onnx") return false;  // decided by the registry
  static constexpr std::string_view kOps[] = {
      "RandomNormal",       "RandomUniform",      "RandomNormalLike", "RandomUniformLike",
      "Bernoulli",          "Multinomial",        "SequenceConstruct", "SequenceEmpty",
      "SequenceInsert",     "SequenceErase",      "SequenceAt",       "SequenceLength",
      "SplitToSequence",    "ConcatFromSequence", "Optional",         "OptionalHasElement",
      "OptionalGetElement", "SequenceMap",
  };
  return std::find(std::begin(kOps), std::end(kOps), n.op_type) != std::end(kOps);
}

bool is_default_domain(const Node& n) { return n.domain.empty() || n.domain == "ai.onnx"; }

// The tensor a Constant node stands for; undefined for forms we do not hold
// (strings, sparse tensors).
Tensor constant_node_value(const Node& n) {
  if (const Tensor* t = n.attr_tensor("value")) return *t;
  if (const Attribute* a = n.attr("value_float")) return Tensor::Scalar<float>(a->f);
  if (const Attribute* a = n.attr("value_int")) return Tensor::Scalar<int64_t>(a->i);
  if (const Attribute* a = n.attr("value_floats")) {
    return Tensor::FromVector<float>(a->floats, {static_cast<int64_t>(a->floats.size())});
  }
  if (const Attribute* a = n.attr("value_ints")) {
    return Tensor::FromVector<int64_t>(a->ints, {static_cast<int64_t>(a->ints.size())});
  }
  return Tensor();
}

class Folder {
 public:
  Folder(const ConstantFoldingOptions& opts, ConstantFoldingStats* stats) : opts_(opts), stats_(stats) {}

  void fold_graph(Graph& g, const GraphScope* parent) {
    GraphScope scope(g, parent);
    std::unordered_map<std::string, const Node*> shape_of;
    shape_of_ = &shape_of;
    std::vector<bool> folded(g.nodes.size(), false);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      Node& n = g.nodes[i];
      std::vector<Graph*> subs = nested_graphs(n);
      if (!subs.empty()) {
        for (Graph* sg : subs) fold_graph(*sg, &scope);
        shape_of_ = &shape_of;
        continue;
      }
      folded[i] = try_fold(scope, n);
      if (!folded[i] && is_default_domain(n) && n.op_type == "Shape" && n.has_input(0) && n.has_output(0)) {
        shape_of[n.outputs[0]] = &n;
      }
    }
    std::vector<Node> kept;
    kept.reserve(g.nodes.size());
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (!folded[i]) kept.push_back(std::move(g.nodes[i]));
    }
    g.nodes = std::move(kept);
  }

 private:
  void set_constant(GraphScope& scope, const std::string& name, Tensor t) {
    Graph& g = scope.graph();
    g.values[name] = ValueInfo{t.dtype(), Shape::FromDims(t.dims())};
    g.constants[name] = std::move(t);
    scope.now_constant(name);
  }

  // The dims a Shape node reports (start/end applied), known or not; empty
  // optional when the rank is unknown.
  std::optional<std::vector<Dim>> shape_node_dims(const GraphScope& scope, const Node& shape_node) const {
    const ValueInfo* vi = scope.info(shape_node.inputs[0]);
    if (!vi || !vi->shape.rank_known) return std::nullopt;
    const int64_t rank = vi->shape.rank();
    auto clamp = [&](int64_t v) {
      if (v < 0) v += rank;
      return std::clamp<int64_t>(v, 0, rank);
    };
    int64_t start = clamp(shape_node.attr_int("start", 0));
    int64_t end = clamp(shape_node.attr_int("end", rank));
    std::vector<Dim> dims;
    for (int64_t d = start; d < end; ++d) dims.push_back(vi->shape[static_cast<int>(d)]);
    return dims;
  }

  // Gather / Slice picking only known entries out of Shape(x) when other
  // entries (a symbolic batch) are unknown: x.size(1) with a dynamic batch.
  bool try_fold_shape_pick(GraphScope& scope, const Node& n) {
    if (!n.has_input(0) || !n.has_output(0)) return false;
    auto it = shape_of_->find(n.inputs[0]);
    if (it == shape_of_->end()) return false;
    std::optional<std::vector<Dim>> dims = shape_node_dims(scope, *it->second);
    if (!dims) return false;
    const auto len = static_cast<int64_t>(dims->size());
    std::vector<int64_t> picked;
    Dims out_dims;
    auto pick = [&](int64_t k) {
      if (k < 0) k += len;
      if (k < 0 || k >= len || !(*dims)[static_cast<size_t>(k)].known()) return false;
      picked.push_back((*dims)[static_cast<size_t>(k)].value);
      return true;
    };
    if (n.op_type == "Gather") {
      if (n.attr_int("axis", 0) != 0 && n.attr_int("axis", 0) != -1) return false;
      const Tensor* idx = n.has_input(1) ? scope.constant(n.inputs[1]) : nullptr;
      if (!idx || !dtype_is_integer(idx->dtype()) || idx->rank() > 1) return false;
      for (int64_t k = 0; k < idx->numel(); ++k) {
        if (!pick(idx->as_int64(k))) return false;
      }
      out_dims = idx->dims();
    } else {  // Slice, opset 10+ (inputs)
      if (scope.graph().opset < 10 || !n.has_input(1) || !n.has_input(2)) return false;
      const Tensor* starts = scope.constant(n.inputs[1]);
      const Tensor* ends = scope.constant(n.inputs[2]);
      const Tensor* axes = n.has_input(3) ? scope.constant(n.inputs[3]) : nullptr;
      const Tensor* steps = n.has_input(4) ? scope.constant(n.inputs[4]) : nullptr;
      if (!starts || !ends || starts->numel() != 1 || ends->numel() != 1) return false;
      if (n.has_input(3) && (!axes || axes->numel() != 1 || (axes->as_int64(0) != 0 && axes->as_int64(0) != -1))) {
        return false;
      }
      if (n.has_input(4) && (!steps || steps->numel() != 1)) return false;
      const int64_t step = steps ? steps->as_int64(0) : 1;
      if (step == 0) return false;
      int64_t start = starts->as_int64(0), end = ends->as_int64(0);
      if (start < 0) start += len;
      if (end < 0) end += len;
      if (step > 0) {
        start = std::clamp<int64_t>(start, 0, len);
        end = std::clamp<int64_t>(end, 0, len);
        for (int64_t k = start; k < end; k += step) {
          if (!pick(k)) return false;
        }
      } else {
        start = std::clamp<int64_t>(start, 0, len - 1);
        end = std::clamp<int64_t>(end, -1, len - 1);
        for (int64_t k = start; k > end; k += step) {
          if (!pick(k)) return false;
        }
      }
      out_dims = {static_cast<int64_t>(picked.size())};
    }
    set_constant(scope, n.outputs[0], Tensor::FromVector<int64_t>(picked, out_dims));
    return true;
  }

  // Shape / Size of a value whose shape is statically known.
  bool try_fold_shape(GraphScope& scope, const Node& n) {
    if (!n.has_input(0) || !n.has_output(0)) return false;
    const ValueInfo* vi = scope.info(n.inputs[0]);
    if (!vi || !vi->shape.rank_known) return false;
    const Shape& s = vi->shape;
    if (n.op_type == "Size") {
      int64_t count = s.numel_or(-1);
      if (count < 0) return false;
      set_constant(scope, n.outputs[0], Tensor::Scalar<int64_t>(count));
      return true;
    }
    const int64_t rank = s.rank();
    auto clamp = [&](int64_t v) {
      if (v < 0) v += rank;
      return std::clamp<int64_t>(v, 0, rank);
    };
    int64_t start = clamp(n.attr_int("start", 0));
    int64_t end = clamp(n.attr_int("end", rank));
    std::vector<int64_t> dims;
    for (int64_t d = start; d < end; ++d) {
      const Dim& dim = s[static_cast<int>(d)];
      if (!dim.known()) return false;
      dims.push_back(dim.value);
    }
    set_constant(scope, n.outputs[0], Tensor::FromVector<int64_t>(dims, {static_cast<int64_t>(dims.size())}));
    return true;
  }

  bool try_fold(GraphScope& scope, const Node& n) {
    if (n.outputs.empty()) return false;
    if (is_default_domain(n) && n.op_type == "Constant") {
      Tensor t = constant_node_value(n);
      if (!t.defined() || !n.has_output(0)) return false;
      set_constant(scope, n.outputs[0], std::move(t));
      ++stats_->folded_nodes;
      return true;
    }
    if (never_fold(n)) return false;

    std::vector<Tensor> inputs(n.inputs.size());
    bool all_constant = true;
    bool any_input = false;
    size_t max_in_bytes = 0;
    size_t sum_in_bytes = 0;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) continue;
      any_input = true;
      const Tensor* t = scope.constant(n.inputs[i]);
      if (!t) {
        all_constant = false;
        break;
      }
      inputs[i] = *t;
      max_in_bytes = std::max(max_in_bytes, t->nbytes());
      sum_in_bytes += t->nbytes();
    }
    if (!all_constant) {
      if (is_default_domain(n) && (n.op_type == "Shape" || n.op_type == "Size") && try_fold_shape(scope, n)) {
        ++stats_->folded_shapes;
        return true;
      }
      if (is_default_domain(n) && (n.op_type == "Gather" || n.op_type == "Slice") && try_fold_shape_pick(scope, n)) {
        ++stats_->folded_shapes;
        return true;
      }
      return false;
    }
    if (!any_input) return false;  // sources other than Constant are generators
    // Dropout in training mode draws random numbers.
    if (is_default_domain(n) && n.op_type == "Dropout" && n.has_input(2)) {
      const Tensor& mode = inputs[2];
      if (mode.numel() != 1 || mode.as_int64(0) != 0) return false;
    }

    auto too_large = [&](size_t out_bytes) {
      auto limit = static_cast<size_t>(opts_.max_output_bytes);
      return out_bytes > limit && (max_in_bytes <= limit || out_bytes > 4 * sum_in_bytes);
    };

    // Check the size before running when inference can tell it.
    auto info = infer_node_concrete(n, scope.graph().opset, inputs);
    if (!info.ok()) return false;
    size_t out_bytes = 0;
    bool sizes_known = true;
    for (size_t i = 0; i < n.outputs.size() && i < info->size(); ++i) {
      if (n.outputs[i].empty()) continue;
      const ValueInfo& vi = (*info)[i];
      if (vi.dtype != DType::kUndefined && !dtype_is_supported(vi.dtype)) return false;
      if (vi.dtype == DType::kUndefined || !vi.shape.fully_known()) {
        sizes_known = false;
        continue;
      }
      out_bytes += static_cast<size_t>(vi.shape.numel_or(0)) * dtype_size(vi.dtype);
    }
    if (sizes_known && too_large(out_bytes)) {
      ++stats_->skipped_large;
      return false;
    }

    auto outputs = run_node_once(n, scope.graph().opset, inputs);
    if (!outputs.ok()) return false;
    out_bytes = 0;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i].empty()) continue;
      if (i >= outputs->size() || !(*outputs)[i].defined() || !dtype_is_supported((*outputs)[i].dtype())) {
        return false;
      }
      out_bytes += (*outputs)[i].nbytes();
    }
    if (too_large(out_bytes)) {
      ++stats_->skipped_large;
      return false;
    }
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (!n.outputs[i].empty()) set_constant(scope, n.outputs[i], std::move((*outputs)[i]));
    }
    ++stats_->folded_nodes;
    return true;
  }

  const ConstantFoldingOptions& opts_;
  ConstantFoldingStats* stats_;
  // Outputs of Shape nodes of the graph being folded that stayed nodes.
  std::unordered_map<std::string, const Node*>* shape_of_ = nullptr;
};

}  // namespace

Status constant_folding(Graph& g, ConstantFoldingStats* stats, const ConstantFoldingOptions& opts) {
  ConstantFoldingStats local;
  Folder folder(opts, stats ? stats : &local);
  folder.fold_graph(g, nullptr);
  return Status::Ok();
}

}  // namespace tessera
