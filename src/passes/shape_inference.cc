// Input: a graph whose inputs and constants are typed. Output: g.values holds
// dtype and shape for every node output, in nested graphs too. Method: one
// forward walk in topological order calling each op's InferFn; constant
// inputs are passed as values. Nested graphs are inferred before their owning
// node, with the enclosing scopes visible.
#include "passes/shape_inference.h"

#include "ops/op_registry.h"

namespace tessera {

namespace {

struct Scope {
  const Graph* g;
  const Scope* parent;

  const ValueInfo* info(const std::string& v) const {
    for (const Scope* s = this; s; s = s->parent) {
      if (const Tensor* t = s->g->constant(v)) {
        (void)t;
        return s->g->info(v);
      }
      if (const ValueInfo* vi = s->g->info(v)) return vi;
    }
    return nullptr;
  }
  const Tensor* value(const std::string& v) const {
    for (const Scope* s = this; s; s = s->parent) {
      if (const Tensor* t = s->g->constant(v)) return t;
      if (s->g->info(v)) return nullptr;  // shadowed by a non-constant value
    }
    return nullptr;
  }
};

// The shape of a node's output: what inference found, with the names a declaration (value_info, graph outputs) gives
// to dims inference left unknown and unnamed. A declared size is never taken for a dim inference could not
// determine: it is what an exporter saw for one input, and a buffer sized by it would be overrun by another (such dims
// are computed when the model runs). A declared rank is not taken either.
Shape merge_shapes(const Shape& inferred, const Shape& declared) {
  if (!inferred.rank_known || !declared.rank_known || declared.rank() != inferred.rank()) return inferred;
  Shape out = inferred;
  for (int i = 0; i < out.rank(); ++i) {
    if (!out[i].known() && out[i].symbol.empty() && !declared[i].symbol.empty()) out[i] = Dim::Symbol(declared[i].symbol);
  }
  return out;
}

Status infer_graph(Graph& g, const Scope* parent) {
  for (const auto& kv : g.constants) {
    g.values[kv.first] = ValueInfo{kv.second.dtype(), Shape::FromDims(kv.second.dims())};
  }
  Scope scope{&g, parent};
  for (Node& n : g.nodes) {
    for (auto& kv : n.attrs) {
      if (kv.second.g) TSR_RETURN_IF_ERROR(infer_graph(*kv.second.g, &scope));
      for (auto& sg : kv.second.graphs) TSR_RETURN_IF_ERROR(infer_graph(*sg, &scope));
    }
    const OpSchema* schema = OpRegistry::instance().find(n.domain, n.op_type);
    if (!schema) return Unsupported(n.describe() + ": operator is not supported");
    std::vector<ValueInfo> in_info(n.inputs.size());
    std::vector<const Tensor*> in_values(n.inputs.size(), nullptr);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) continue;
      if (const ValueInfo* vi = scope.info(n.inputs[i])) in_info[i] = *vi;
      in_values[i] = scope.value(n.inputs[i]);
    }
    InferContext ctx(n, g.opset, std::move(in_info), std::move(in_values));
    TSR_RETURN_IF_ERROR(run_infer(*schema, ctx));
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i].empty()) continue;
      const ValueInfo& inferred = ctx.outputs()[i];
      ValueInfo& slot = g.values[n.outputs[i]];
      if (inferred.dtype != DType::kUndefined) slot.dtype = inferred.dtype;
      slot.shape = merge_shapes(inferred.shape, slot.shape);
    }
  }
  return Status::Ok();
}

}  // namespace

Status infer_shapes(Graph& g) { return infer_graph(g, nullptr); }

}  // namespace tessera
