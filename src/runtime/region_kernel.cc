#include "runtime/region_kernel.h"

#include "ops/region_attrs.h"

namespace tessera {

Expected<std::unique_ptr<RegionKernel>> RegionKernel::Create(const Node& node, const EngineTable* engines) {
  const int64_t idx = node.attr_int("engine", -1);
  if (!engines) return InvalidModel(node.describe() + ": a Region node runs only inside a compiled program");
  if (idx < 0 || idx >= static_cast<int64_t>(engines->size()) || !(*engines)[static_cast<size_t>(idx)]) {
    return InvalidModel(node.describe() + ": engine " + std::to_string(idx) + " does not exist");
  }
  auto k = std::make_unique<RegionKernel>();
  k->engine_ = (*engines)[static_cast<size_t>(idx)].get();
  return k;
}

Status RegionKernel::run_profiled(KernelContext& ctx, std::vector<ProfileStep>* steps) const {
  std::vector<const Tensor*> in(static_cast<size_t>(ctx.num_inputs()));
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    in[static_cast<size_t>(i)] = ctx.input(i);
    if (!in[static_cast<size_t>(i)]) return ctx.error("input " + std::to_string(i) + " is absent");
  }
  std::vector<Tensor*> out(static_cast<size_t>(ctx.num_outputs()));
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    out[static_cast<size_t>(i)] = ctx.output(i);
    if (!out[static_cast<size_t>(i)] || !out[static_cast<size_t>(i)]->defined()) {
      return ctx.error("output " + std::to_string(i) + " has no buffer");
    }
  }
  if (steps) return engine_->run_profiled(in, out, steps);
  return engine_->run(in, out);
}

Expected<std::unique_ptr<Kernel>> make_kernel(const OpSchema& schema, const KernelInit& init,
                                              const EngineTable* engines) {
  if (is_region_node(init.node)) {
    auto k = RegionKernel::Create(init.node, engines);
    if (!k.ok()) return k.status();
    return std::unique_ptr<Kernel>(std::move(*k));
  }
  return create_kernel(schema, init);
}

KernelMaker kernel_maker(const EngineTable* engines) {
  return [engines](const OpSchema& schema, const KernelInit& init) { return make_kernel(schema, init, engines); };
}

}  // namespace tessera
