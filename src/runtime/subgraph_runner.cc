#include "runtime/subgraph_runner.h"

#include "ops/node_runner.h"
#include "runtime/region_kernel.h"

namespace tessera {

namespace {

class MapScope final : public ValueScope {
 public:
  MapScope(const Graph& g, const ValueScope* parent) : g_(g), parent_(parent) {}
  const Tensor* lookup(const std::string& name) const override {
    auto it = values_.find(name);
    if (it != values_.end()) return &it->second;
    if (const Tensor* c = g_.constant(name)) return c;
    return parent_ ? parent_->lookup(name) : nullptr;
  }
  const Tensor* lookup_constant(const std::string& name) const override {
    if (values_.count(name)) return nullptr;
    if (const Tensor* c = g_.constant(name)) return c;
    return parent_ ? parent_->lookup_constant(name) : nullptr;
  }
  void set(const std::string& name, Tensor t) { values_[name] = std::move(t); }

 private:
  const Graph& g_;
  const ValueScope* parent_;
  std::unordered_map<std::string, Tensor> values_;
};

}  // namespace

Expected<std::vector<Tensor>> EagerSubgraphRunner::run(const Graph& g, const std::vector<Tensor>& inputs) {
  if (inputs.size() > g.inputs.size()) {
    return RuntimeError("subgraph '" + g.name + "': given " + std::to_string(inputs.size()) +
                        " inputs, it declares " + std::to_string(g.inputs.size()));
  }
  MapScope scope(g, outer_);
  for (size_t i = 0; i < inputs.size(); ++i) scope.set(g.inputs[i], inputs[i]);
  EagerSubgraphRunner nested(&scope, opset_, pool_, engines_);
  const KernelMaker make = kernel_maker(engines_);  // Region nodes run their engines
  for (const Node& n : g.nodes) {
    std::vector<Tensor> in(n.inputs.size());
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) continue;
      const Tensor* t = scope.lookup(n.inputs[i]);
      if (!t) return RuntimeError(n.describe() + ": input '" + n.inputs[i] + "' has no value");
      in[i] = *t;
    }
    std::vector<Tensor> out;
    TSR_ASSIGN_OR_RETURN(out, run_node_once(n, opset_, in, pool_, &nested, &make));
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (!n.outputs[i].empty()) scope.set(n.outputs[i], std::move(out[i]));
    }
  }
  std::vector<Tensor> results;
  for (const auto& o : g.outputs) {
    const Tensor* t = scope.lookup(o);
    if (!t) return RuntimeError("subgraph '" + g.name + "': output '" + o + "' has no value");
    results.push_back(*t);
  }
  return results;
}

}  // namespace tessera
