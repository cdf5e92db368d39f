#include "ops/node_runner.h"

namespace tessera {

Expected<std::vector<ValueInfo>> infer_node_concrete(const Node& node, int64_t opset,
                                                    const std::vector<Tensor>& inputs,
                                                    const std::vector<bool>* use_values) {
  const OpSchema* schema = OpRegistry::instance().find(node.domain, node.op_type);
  if (!schema) return Unsupported(node.describe() + ": operator is not supported");
  std::vector<ValueInfo> info(inputs.size());
  std::vector<const Tensor*> values(inputs.size(), nullptr);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    info[i] = ValueInfo{inputs[i].dtype(), Shape::FromDims(inputs[i].dims())};
    if (!use_values || (i < use_values->size() && (*use_values)[i])) values[i] = &inputs[i];
  }
  InferContext ictx(node, opset, info, values);
  TSR_RETURN_IF_ERROR(run_infer(*schema, ictx));
  return ictx.outputs();
}

Expected<std::vector<Tensor>> run_node_once(const Node& node, int64_t opset,
                                            const std::vector<Tensor>& inputs, Parallel* pool,
                                            SubgraphRunner* subgraphs, const KernelMaker* make_kernel) {
  const OpSchema* schema = OpRegistry::instance().find(node.domain, node.op_type);
  if (!schema) return Unsupported(node.describe() + ": operator is not supported");
  std::vector<ValueInfo> out_info;
  TSR_ASSIGN_OR_RETURN(out_info, infer_node_concrete(node, opset, inputs));

  KernelInit init{node, opset, {}, {}};
  init.in_info.resize(inputs.size());
  init.const_inputs.resize(inputs.size(), nullptr);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    init.in_info[i] = ValueInfo{inputs[i].dtype(), Shape::FromDims(inputs[i].dims())};
    init.const_inputs[i] = &inputs[i];
  }
  std::unique_ptr<Kernel> kernel;
  TSR_ASSIGN_OR_RETURN(kernel, make_kernel ? (*make_kernel)(*schema, init) : create_kernel(*schema, init));

  std::vector<Tensor> outputs(node.outputs.size());
  std::vector<Tensor*> out_ptrs(node.outputs.size(), nullptr);
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (node.outputs[i].empty()) continue;
    const ValueInfo& vi = out_info[i];
    if (vi.dtype != DType::kUndefined && vi.shape.fully_known()) {
      outputs[i] = Tensor(vi.dtype, vi.shape.concrete());
    }
    out_ptrs[i] = &outputs[i];
  }
  std::vector<const Tensor*> in_ptrs(inputs.size(), nullptr);
  for (size_t i = 0; i < inputs.size(); ++i) in_ptrs[i] = inputs[i].defined() ? &inputs[i] : nullptr;

  SerialParallel local;
  KernelContext kctx(node, in_ptrs, out_ptrs, pool ? pool : &local, subgraphs);
  TSR_RETURN_IF_ERROR(kernel->run(kctx));
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (!node.outputs[i].empty() && !outputs[i].defined()) {
      return InternalError(node.describe() + ": output " + std::to_string(i) + " was not produced");
    }
  }
  return outputs;
}

}  // namespace tessera
