// Running ai.tessera.Region nodes: each hands its inputs and preallocated
// outputs to the engine its `engine` attribute names in the program's engine
// table (through run_profiled when the run is profiled: the engine's own
// steps). The op registry knows the node's inference only (src/ops/region.cc);
// the engines, and so running them, belong to the runtime.
#pragma once

#include <memory>
#include <vector>

#include "backends/backend.h"
#include "ops/node_runner.h"
#include "ops/op_registry.h"

namespace tessera {

class RegionKernel final : public Kernel {
 public:
  static Expected<std::unique_ptr<RegionKernel>> Create(const Node& node, const EngineTable* engines);
  Status run(KernelContext& ctx) const override { return run_profiled(ctx, nullptr); }
  // `steps` (may be null) receives the engine's own steps.
  Status run_profiled(KernelContext& ctx, std::vector<ProfileStep>* steps) const;

 private:
  const Engine* engine_ = nullptr;
};

// The kernel of a node in a running program: a Region node's engine from
// `engines`, otherwise the op registry's kernel.
Expected<std::unique_ptr<Kernel>> make_kernel(const OpSchema& schema, const KernelInit& init,
                                              const EngineTable* engines);
// The same as a KernelMaker for run_node_once.
KernelMaker kernel_maker(const EngineTable* engines);

}  // namespace tessera
