// An ExecutionPlan is a graph specialised to concrete input shapes, ready to
// run: one prepared kernel per node, one slot per value, and an arena layout
// for every intermediate whose shape is static. Values whose shape is only
// known while running (data-dependent shapes, control flow) are allocated per
// run. Graph outputs never live in the arena, so they are handed to the
// caller without a copy.
//
// Device engines (a Region whose backend keeps its tensors on a device): the
// plan keeps a value that passes from one such region to another region of
// the same backend on the device, and moves the rest across through staging
// buffers, copied in before the region runs and back after it. Both live in a
// second arena, in device memory, laid out by the same memory planner. A
// region whose boundary shapes are only known while running goes through
// Engine::run, which stages through buffers of the engine's own.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/op_registry.h"
#include "runtime/body_plans.h"
#include "runtime/session.h"
#include "util/thread_pool.h"

namespace tessera {

class ExecutionPlan {
 public:
  // `g` must be shape-inferred with the concrete input shapes (prepare_for_plan).
  // `engines` (may be null) serves Region nodes; it must outlive the plan.
  // `opts` say how the plans of nested graphs are prepared (body_plans.h).
  static Expected<std::shared_ptr<ExecutionPlan>> Build(Graph g, ThreadPool* pool,
                                                       const EngineTable* engines = nullptr, PlanOptions opts = {});

  // Inputs in graph-input order, already checked by the session.
  Expected<std::vector<Tensor>> run(const std::vector<Tensor>& inputs, const RunOptions& ro = {}) const;
  const RunStats& stats() const { return stats_; }
  // The engine table the plan's regions run from (null: none).
  const EngineTable* engines() const { return engines_; }
  // Plans built so far for the nested graphs of this plan's nodes (not deeper).
  int num_body_plans() const { return bodies_ ? bodies_->num_plans() : 0; }

 private:
  struct Slot {
    enum class Kind { kConstant, kInput, kArena, kOutput, kDynamic, kDevice };  // kDevice: in the device arena
    Kind kind = Kind::kDynamic;
    std::string name;
    DType dtype = DType::kUndefined;
    Dims dims;
    size_t offset = 0;          // in the arena (kArena), or the device arena (kDevice)
    bool static_shape = false;  // dims known when the plan is built
    int input_index = -1;
    Tensor constant;
    size_t bytes() const { return static_cast<size_t>(numel(dims)) * dtype_size(dtype); }  // of known dims
  };
  struct Step {
    const Node* node = nullptr;
    const OpSchema* schema = nullptr;
    std::unique_ptr<Kernel> kernel;
    std::vector<int> in, out;  // slot indices, -1 = absent
    bool dynamic = false;      // output shapes inferred at run time
    bool shapes_first = false;  // a shape-generic plan's step: try inference from shapes and constants alone first
    bool has_subgraphs = false;
    std::vector<int> release;  // run-time tensors whose last use is this step: freed after it
    bool view = false;         // its output is its input's arena bytes under other dims: nothing to run
    // A device engine's step: its engine, and per input then output the offset of its staging buffer in the device
    // arena, or kNoStage for a value that already lives there.
    const Engine* device = nullptr;
    std::vector<size_t> stage;
  };
  static constexpr size_t kNoStage = ~size_t{0};
  class Frame;

  Expected<std::vector<Tensor>> run_guarded(const std::vector<Tensor>& inputs, const RunOptions& ro) const;
  std::shared_ptr<void> acquire_arena() const;
  void release_arena(std::shared_ptr<void> a) const;
  // Chooses the device steps and lays out the device arena (before the host arena: kDevice slots leave it).
  void plan_device(const std::vector<int>& first_def, const std::vector<int>& last_use,
                   const std::vector<char>& captured);
  Expected<std::shared_ptr<void>> acquire_device_arena() const;

  Graph graph_;
  ThreadPool* pool_ = nullptr;
  const EngineTable* engines_ = nullptr;
  std::vector<Slot> slots_;
  std::vector<Step> steps_;
  std::vector<int> output_slots_;
  std::unordered_map<std::string, int> slot_of_;
  RunStats stats_;
  size_t max_memory_ = 0;    // PlanOptions::max_memory
  size_t static_bytes_ = 0;  // arena + the outputs whose shapes the plan knows
  std::unique_ptr<BodyPlanCache> bodies_;  // when some node has a nested graph
  mutable std::mutex arena_mu_;
  mutable std::vector<std::shared_ptr<void>> free_arenas_;
  const Backend* device_backend_ = nullptr;  // whose memory the device arena is (one device backend per plan)
  mutable std::vector<std::shared_ptr<void>> free_device_arenas_;  // under arena_mu_
};

}  // namespace tessera
