// Planned execution of nested graphs (If branches, Loop and Scan bodies).
//
// Input: a body graph, the values bound to its formal inputs, and the scope of
// the plan that runs the control-flow node. Output: the body's outputs.
// Method: the first run of a body with a given signature (the dtypes and dims
// of its inputs and of the outer values it reads) builds an ExecutionPlan for
// it, exactly as a session plans a top-level graph: outer values it reads
// become inputs of a private copy of the body (or constants, when the outer
// plan holds them as constants, so weights are packed once and shape
// arithmetic folds), the copy is shape-inferred with those concrete shapes,
// optimised and fused like the session's graphs, and its intermediates get
// an arena. Later runs with the same signature reuse the plan: no per-run
// shape inference, kernel creation or allocation for static values. A body
// that keeps changing signature (a Loop whose carried value grows) runs
// eagerly after kMaxPlansPerBody plans, as does one that cannot be planned.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "backends/backend.h"
#include "ops/op_registry.h"
#include "runtime/subgraph_runner.h"
#include "util/thread_pool.h"

namespace tessera {

class ExecutionPlan;

// How plans are prepared (the session's options, handed down to bodies).
struct PlanOptions {
  bool optimize = true;  // fold constants and canonicalise (off for artifacts, already optimised)
  bool fuse = true;      // native fusion
  // Bytes one run of a plan may hold: its arena, the outputs it makes and the tensors of steps whose shapes are
  // known only at run time (scratch memory inside kernels and engines is not counted). 0: no limit.
  size_t max_memory = 0;
  // Every step's output shapes inferred as it runs, from its inputs then (no arena). For a plan that serves any
  // input shape: what shape inference says of a value from symbolic input dims need not hold for every size.
  bool shapes_at_run_time = false;
  // Conv, ConvTranspose, MatMul and Gemm multiply in bf16 or fp16 where the CPU has the instructions and they
  // measure faster (KernelInit::products, kernels::products_worth): a program compiled with --precision bf16 or fp16.
  kernels::Products products = kernels::Products::kFp32;
};

// Shape inference (and, with opts.optimize, the optimisation pipeline), then
// native fusion: what every graph goes through before ExecutionPlan::Build.
Status prepare_for_plan(Graph& g, const PlanOptions& opts);

// The plans of one plan's nested graphs, keyed by the body and its signature.
// Thread-safe; owned by the plan whose nodes own the bodies.
class BodyPlanCache {
 public:
  static constexpr int kMaxPlansPerBody = 8;

  BodyPlanCache(ThreadPool* pool, const EngineTable* engines, PlanOptions opts)
      : pool_(pool), engines_(engines), opts_(opts) {}
  ~BodyPlanCache();

  // Runs `g` with `inputs` bound to its formal inputs and outer values from
  // `outer`; falls back to eager execution when no plan serves.
  Expected<std::vector<Tensor>> run(const Graph& g, const std::vector<Tensor>& inputs, const ValueScope& outer,
                                    int64_t opset);

  // Plans built so far (for tests and statistics).
  int num_plans() const;

 private:
  struct Body {
    std::vector<std::string> captures;  // outer values the body reads, sorted
    std::map<std::vector<int64_t>, std::shared_ptr<const ExecutionPlan>> plans;  // signature -> plan (null: failed)
    bool eager = false;  // too many signatures: stop planning
  };
  // The plan for this signature, or null when the body runs eagerly.
  std::shared_ptr<const ExecutionPlan> plan_for(const Graph& g, const std::vector<Tensor>& inputs,
                                                const ValueScope& outer, std::vector<Tensor>* plan_inputs);

  ThreadPool* pool_;
  const EngineTable* engines_;
  PlanOptions opts_;
  mutable std::mutex mu_;
  std::map<const Graph*, Body> bodies_;
};

// The SubgraphRunner an ExecutionPlan hands its control-flow kernels.
class PlannedSubgraphRunner final : public SubgraphRunner {
 public:
  PlannedSubgraphRunner(const ValueScope* outer, BodyPlanCache* cache, int64_t opset)
      : outer_(outer), cache_(cache), opset_(opset) {}
  Expected<std::vector<Tensor>> run(const Graph& g, const std::vector<Tensor>& inputs) override {
    return cache_->run(g, inputs, *outer_, opset_);
  }

 private:
  const ValueScope* outer_;
  BodyPlanCache* cache_;
  int64_t opset_;
};

}  // namespace tessera
