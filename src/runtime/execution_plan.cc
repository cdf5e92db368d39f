#include "runtime/execution_plan.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>
#include <stdexcept>
#include <unordered_set>

#include "ops/region_attrs.h"
#include "runtime/memory_planner.h"
#include "runtime/region_kernel.h"
#include "ops/node_runner.h"
#include "runtime/subgraph_runner.h"
#include "util/env.h"
#include "util/human_bytes.h"

namespace tessera {

class ExecutionPlan::Frame final : public ValueScope {
 public:
  Frame(const ExecutionPlan& plan) : plan_(plan), tensors_(plan.slots_.size()) {}
  const Tensor* lookup(const std::string& name) const override {
    auto it = plan_.slot_of_.find(name);
    if (it == plan_.slot_of_.end()) return nullptr;
    const Tensor& t = tensors_[static_cast<size_t>(it->second)];
    return t.defined() ? &t : nullptr;
  }
  const Tensor* lookup_constant(const std::string& name) const override {
    auto it = plan_.slot_of_.find(name);
    if (it == plan_.slot_of_.end()) return nullptr;
    const Slot& slot = plan_.slots_[static_cast<size_t>(it->second)];
    return slot.kind == Slot::Kind::kConstant ? &slot.constant : nullptr;
  }
  std::vector<Tensor>& tensors() { return tensors_; }

 private:
  const ExecutionPlan& plan_;
  std::vector<Tensor> tensors_;
};

namespace {

// TESSERA_POISON_OUTPUTS=1 (a debugging switch, read once): outputs that their producer must write whole start as
// 0xFF bytes (NaN, -1) rather than whatever their block held, so a kernel that leaves an element unwritten shows in
// any comparison (tests/CMakeLists.txt runs ONNX's node suite so).
bool poison_outputs() {
  static const bool on = env_flag("TESSERA_POISON_OUTPUTS");
  return on;
}

// A tensor the step writes whole: not zeroed first.
Tensor written_whole(DType dtype, Dims dims) {
  Tensor t = Tensor::Uninitialized(dtype, std::move(dims));
  if (poison_outputs() && t.nbytes() > 0) std::memset(t.raw(), 0xFF, t.nbytes());
  return t;
}

}  // namespace

Expected<std::shared_ptr<ExecutionPlan>> ExecutionPlan::Build(Graph g, ThreadPool* pool, const EngineTable* engines,
                                                             PlanOptions opts) {
  auto plan = std::shared_ptr<ExecutionPlan>(new ExecutionPlan());
  plan->engines_ = engines;
  plan->graph_ = std::move(g);
  plan->pool_ = pool;
  const Graph& graph = plan->graph_;

  auto add_slot = [&](const std::string& name) -> int {
    auto it = plan->slot_of_.find(name);
    if (it != plan->slot_of_.end()) return it->second;
    Slot s;
    s.name = name;
    if (const ValueInfo* vi = graph.info(name)) {
      s.dtype = vi->dtype;
      if (!opts.shapes_at_run_time && vi->shape.fully_known() && vi->dtype != DType::kUndefined) {
        s.dims = vi->shape.concrete();
        s.kind = Slot::Kind::kArena;
        s.static_shape = true;
      }
    }
    int idx = static_cast<int>(plan->slots_.size());
    plan->slots_.push_back(std::move(s));
    plan->slot_of_[name] = idx;
    return idx;
  };

  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    int s = add_slot(graph.inputs[i]);
    plan->slots_[static_cast<size_t>(s)].kind = Slot::Kind::kInput;
    plan->slots_[static_cast<size_t>(s)].input_index = static_cast<int>(i);
  }
  for (const auto& kv : graph.constants) {
    int s = add_slot(kv.first);
    Slot& slot = plan->slots_[static_cast<size_t>(s)];
    if (slot.kind == Slot::Kind::kInput) continue;
    slot.kind = Slot::Kind::kConstant;
    slot.constant = kv.second;
    slot.dtype = kv.second.dtype();
    slot.dims = kv.second.dims();
  }

  // Steps, with the last use of every slot for liveness.
  std::vector<int> first_def, last_use;
  std::vector<char> captured;  // read by a nested graph: must stay on the host
  auto touch = [&](int slot, int step, bool def) {
    if (static_cast<size_t>(slot) >= first_def.size()) {
      first_def.resize(static_cast<size_t>(slot) + 1, -1);
      last_use.resize(static_cast<size_t>(slot) + 1, -1);
    }
    if (def && first_def[static_cast<size_t>(slot)] < 0) first_def[static_cast<size_t>(slot)] = step;
    last_use[static_cast<size_t>(slot)] = std::max(last_use[static_cast<size_t>(slot)], step);
  };
  for (const Node& n : graph.nodes) {
    Step st;
    st.node = &n;
    st.schema = OpRegistry::instance().find(n.domain, n.op_type);
    if (!st.schema) return Unsupported(n.describe() + ": operator is not supported");
    int step_idx = static_cast<int>(plan->steps_.size());
    for (const auto& in : n.inputs) {
      if (in.empty()) {
        st.in.push_back(-1);
        continue;
      }
      auto it = plan->slot_of_.find(in);
      if (it == plan->slot_of_.end()) return InvalidModel(n.describe() + ": input '" + in + "' is never produced");
      st.in.push_back(it->second);
      touch(it->second, step_idx, false);
    }
    std::unordered_set<std::string> captures;
    for (const auto& kv : n.attrs) {
      if (kv.second.g) collect_graph_captures(*kv.second.g, &captures);
      for (const auto& sg : kv.second.graphs) collect_graph_captures(*sg, &captures);
      st.has_subgraphs = st.has_subgraphs || kv.second.g || !kv.second.graphs.empty();
    }
    for (const auto& c : captures) {
      auto it = plan->slot_of_.find(c);
      if (it == plan->slot_of_.end()) continue;
      touch(it->second, step_idx, false);
      if (captured.size() <= static_cast<size_t>(it->second)) captured.resize(static_cast<size_t>(it->second) + 1, 0);
      captured[static_cast<size_t>(it->second)] = 1;
    }
    for (const auto& out : n.outputs) {
      if (out.empty()) {
        st.out.push_back(-1);
        continue;
      }
      int s = add_slot(out);
      st.out.push_back(s);
      touch(s, step_idx, true);
      if (plan->slots_[static_cast<size_t>(s)].kind == Slot::Kind::kDynamic) st.dynamic = true;
    }
    st.shapes_first = st.dynamic && opts.shapes_at_run_time;
    // Kernels are created now, never on the first run.
    KernelInit init{n, graph.opset, {}, {}};
    init.products = kernels::products_worth(opts.products);
    for (int s : st.in) {
      if (s < 0) {
        init.in_info.emplace_back();
        init.const_inputs.push_back(nullptr);
        continue;
      }
      const Slot& slot = plan->slots_[static_cast<size_t>(s)];
      const ValueInfo* vi = graph.info(slot.name);
      init.in_info.push_back(vi ? *vi : ValueInfo{slot.dtype, Shape::FromDims(slot.dims)});
      if (opts.shapes_at_run_time && slot.kind != Slot::Kind::kConstant && init.in_info.back().shape.rank_known) {
        init.in_info.back().shape = Shape::Unknown(init.in_info.back().shape.rank());  // sizes known at run time
      }
      init.const_inputs.push_back(slot.kind == Slot::Kind::kConstant ? &slot.constant : nullptr);
    }
    auto kernel = make_kernel(*st.schema, init, engines);
    if (!kernel.ok()) return kernel.status();
    st.kernel = std::move(kernel).value();
    plan->steps_.push_back(std::move(st));
  }

  for (const auto& o : graph.outputs) {
    int s = add_slot(o);
    plan->output_slots_.push_back(s);
    Slot& slot = plan->slots_[static_cast<size_t>(s)];
    if (slot.kind == Slot::Kind::kArena) slot.kind = Slot::Kind::kOutput;
  }
  // Values allocated while running are freed after their last use (their blocks serve the steps after), not at the
  // end of the run; graph outputs are kept.
  std::vector<bool> is_output(plan->slots_.size(), false);
  for (int s : plan->output_slots_) is_output[static_cast<size_t>(s)] = true;
  for (size_t s = 0; s < plan->slots_.size() && s < last_use.size(); ++s) {
    if (plan->slots_[s].kind != Slot::Kind::kDynamic || is_output[s] || last_use[s] < 0) continue;
    plan->steps_[static_cast<size_t>(last_use[s])].release.push_back(static_cast<int>(s));
  }

  if (engines) plan->plan_device(first_def, last_use, captured);

  // Memory plan over arena slots. A Reshape (or Flatten, Squeeze, Unsqueeze, Identity) from one arena value to
  // another is a view: its output takes its input's bytes, which then live until the last read of either, and the
  // step runs nothing (each was a copy: whisper-tiny's 16 Reshapes between engine regions, 2.6 ms a run). So is a
  // Split along an axis with only 1s before it: each output is a contiguous piece of the input, at its byte offset
  // (a GLU's two halves; ten of them copied 0.4 ms of a speech denoiser's 18).
  int num_steps = static_cast<int>(plan->steps_.size());
  auto last_of = [&](size_t s) { return s < last_use.size() && last_use[s] >= 0 ? last_use[s] : num_steps; };
  std::vector<int> root(plan->slots_.size(), -1);  // a view's slot: the slot whose bytes it takes
  std::vector<size_t> delta(plan->slots_.size(), 0);  // and where in them its own start
  std::vector<int> last(plan->slots_.size(), 0);
  for (size_t s = 0; s < plan->slots_.size(); ++s) last[s] = last_of(s);
  const auto arena_value = [&](int s) {
    return s >= 0 && plan->slots_[static_cast<size_t>(s)].kind == Slot::Kind::kArena;
  };
  for (Step& st : plan->steps_) {
    static const char* kViews[] = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"};
    const Node& n = *st.node;
    if (!n.domain.empty() || st.in.empty() || !arena_value(st.in[0]) || st.out.empty() ||
        !std::all_of(st.out.begin(), st.out.end(), arena_value)) {
      continue;
    }
    const auto in = static_cast<size_t>(st.in[0]);
    const Slot& a = plan->slots_[in];
    std::vector<size_t> at;  // each output's byte offset in the input
    if (n.op_type == "Split") {
      const int64_t rank = static_cast<int64_t>(a.dims.size());
      int64_t axis = n.attr_int("axis", 0);
      axis = axis < 0 ? axis + rank : axis;
      if (axis < 0 || axis >= rank || numel(Dims(a.dims.begin(), a.dims.begin() + axis)) != 1) continue;
      size_t offset = 0;
      for (int o : st.out) {
        const Slot& b = plan->slots_[static_cast<size_t>(o)];
        if (b.dtype != a.dtype) break;
        at.push_back(offset);
        offset += b.bytes();
      }
      if (at.size() != st.out.size() || offset != a.bytes()) continue;
    } else if (st.out.size() == 1 &&
               std::any_of(std::begin(kViews), std::end(kViews), [&](const char* v) { return n.op_type == v; })) {
      const Slot& b = plan->slots_[static_cast<size_t>(st.out[0])];
      if (a.dtype != b.dtype || a.bytes() != b.bytes()) continue;
      at.push_back(0);
    } else {
      continue;
    }
    const int r = root[in] >= 0 ? root[in] : static_cast<int>(in);
    for (size_t i = 0; i < st.out.size(); ++i) {
      const auto out = static_cast<size_t>(st.out[i]);
      root[out] = r;
      delta[out] = delta[in] + at[i];
      last[static_cast<size_t>(r)] = std::max(last[static_cast<size_t>(r)], last[out]);
    }
    st.view = true;
  }
  std::vector<BufferRequest> reqs;
  std::vector<int> req_slot;
  for (size_t s = 0; s < plan->slots_.size(); ++s) {
    Slot& slot = plan->slots_[s];
    if (slot.kind != Slot::Kind::kArena || root[s] >= 0) continue;
    int first = s < first_def.size() && first_def[s] >= 0 ? first_def[s] : 0;
    reqs.push_back({slot.bytes(), first, last[s]});
    req_slot.push_back(static_cast<int>(s));
  }
  MemoryPlan mp = plan_memory(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) plan->slots_[static_cast<size_t>(req_slot[i])].offset = mp.offsets[i];
  for (size_t s = 0; s < plan->slots_.size(); ++s) {
    if (root[s] >= 0) plan->slots_[s].offset = plan->slots_[static_cast<size_t>(root[s])].offset + delta[s];
  }
  plan->stats_.arena_bytes = mp.arena_bytes;
  // The memory limit, checked on what the plan knows now; run() adds the tensors of dynamic steps.
  size_t outputs_bytes = 0;
  for (const Slot& slot : plan->slots_) {
    if (slot.kind == Slot::Kind::kOutput) outputs_bytes += slot.bytes();
  }
  plan->max_memory_ = opts.max_memory;
  plan->static_bytes_ = mp.arena_bytes + outputs_bytes;
  if (opts.max_memory > 0 && plan->static_bytes_ > opts.max_memory) {
    return InvalidInput("a run at these input shapes needs " + human_bytes(plan->static_bytes_) + " (arena " +
                        human_bytes(mp.arena_bytes) + ", outputs " + human_bytes(outputs_bytes) +
                        "), more than the memory limit of " + human_bytes(opts.max_memory));
  }
  plan->stats_.naive_bytes = mp.naive_bytes;
  plan->stats_.num_steps = num_steps;
  bool nested = false;
  for (const Step& st : plan->steps_) {
    plan->stats_.num_dynamic_steps += st.dynamic ? 1 : 0;
    nested = nested || st.has_subgraphs;
  }
  if (nested) plan->bodies_ = std::make_unique<BodyPlanCache>(pool, engines, opts);
  return plan;
}

void ExecutionPlan::plan_device(const std::vector<int>& first_def, const std::vector<int>& last_use,
                                const std::vector<char>& captured) {
  auto sized = [&](int s) {
    const Slot& slot = slots_[static_cast<size_t>(s)];
    return slot.kind == Slot::Kind::kArena || slot.kind == Slot::Kind::kOutput ||
           (slot.kind == Slot::Kind::kInput && slot.static_shape);
  };
  // 1. Device steps: regions of the first device backend met whose boundary sizes the plan knows.
  for (Step& st : steps_) {
    if (!is_region_node(*st.node)) continue;
    const int64_t idx = st.node->attr_int("engine", -1);
    if (idx < 0 || idx >= static_cast<int64_t>(engines_->size())) continue;
    const Engine* e = (*engines_)[static_cast<size_t>(idx)].get();
    if (!e || !e->backend().on_device()) continue;
    if (device_backend_ && device_backend_ != &e->backend()) continue;  // another device: staged by its engine
    auto known = [&](const std::vector<int>& slots) {
      return std::all_of(slots.begin(), slots.end(), [&](int s) { return s >= 0 && sized(s); });
    };
    if (!known(st.in) || !known(st.out)) continue;
    st.device = e;
    device_backend_ = &e->backend();
  }
  if (!device_backend_) return;
  // 2. Values that stay on the device: produced by a device step, read only by device steps (and by one at least),
  // neither a graph output nor read by a nested graph.
  const size_t n = slots_.size();
  std::vector<int> device_uses(n, 0), host_uses(n, 0);
  std::vector<char> device_made(n, 0);
  for (const Step& st : steps_) {
    for (int s : st.in) {
      if (s >= 0) (st.device ? device_uses : host_uses)[static_cast<size_t>(s)]++;
    }
    for (int s : st.out) {
      if (s >= 0 && st.device) device_made[static_cast<size_t>(s)] = 1;
    }
  }
  std::vector<BufferRequest> reqs;
  std::vector<size_t*> where;  // the offset each request's answer goes to
  for (size_t s = 0; s < n; ++s) {
    Slot& slot = slots_[s];
    const bool stays = slot.kind == Slot::Kind::kArena && device_made[s] && device_uses[s] > 0 && host_uses[s] == 0 &&
                       !(s < captured.size() && captured[s]);
    if (!stays) continue;
    slot.kind = Slot::Kind::kDevice;
    reqs.push_back({slot.bytes(), first_def[s], last_use[s]});
    where.push_back(&slot.offset);
  }
  // 3. Staging buffers for the values that cross, live for their step alone.
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step& st = steps_[i];
    if (!st.device) continue;
    ++stats_.num_device_steps;
    std::vector<int> io = st.in;
    io.insert(io.end(), st.out.begin(), st.out.end());
    st.stage.assign(io.size(), kNoStage);
    for (size_t k = 0; k < io.size(); ++k) {
      const Slot& slot = slots_[static_cast<size_t>(io[k])];
      if (slot.kind == Slot::Kind::kDevice) continue;
      stats_.device_crossing_bytes += slot.bytes();
      reqs.push_back({slot.bytes(), static_cast<int>(i), static_cast<int>(i)});
      where.push_back(&st.stage[k]);
    }
  }
  // The same planner as the host arena's, at the alignment device_alloc promises.
  MemoryPlan mp = plan_memory(reqs, 256);
  for (size_t r = 0; r < reqs.size(); ++r) *where[r] = mp.offsets[r];
  stats_.device_arena_bytes = mp.arena_bytes;
}

Expected<std::shared_ptr<void>> ExecutionPlan::acquire_device_arena() const {
  {
    std::lock_guard<std::mutex> lock(arena_mu_);
    if (!free_device_arenas_.empty()) {
      auto a = std::move(free_device_arenas_.back());
      free_device_arenas_.pop_back();
      return a;
    }
  }
  return device_backend_->device_alloc(std::max<size_t>(stats_.device_arena_bytes, 256));
}

std::shared_ptr<void> ExecutionPlan::acquire_arena() const {
  {
    std::lock_guard<std::mutex> lock(arena_mu_);
    if (!free_arenas_.empty()) {
      auto a = std::move(free_arenas_.back());
      free_arenas_.pop_back();
      return a;
    }
  }
  // Not zeroed: a reused arena holds the last run's values anyway, and every step writes what it reads later.
  // Zeroing a new plan's large arena touched every page of it before the first step (TESSERA_POISON_OUTPUTS fills
  // it with 0xFF instead, so a kernel that leaves part of its output unwritten shows on the first run too).
  std::shared_ptr<void> arena = aligned_alloc_shared(stats_.arena_bytes, 64, /*zero=*/false);
  if (poison_outputs() && stats_.arena_bytes > 0) std::memset(arena.get(), 0xFF, stats_.arena_bytes);
  return arena;
}

void ExecutionPlan::release_arena(std::shared_ptr<void> a) const {
  // Under a memory limit the arena goes back to the block cache, which keeps it for the next run only while the
  // tensors in use leave room for it: idle plans then hold no memory that a run at a larger shape needs.
  if (max_memory_ > 0) return;
  std::lock_guard<std::mutex> lock(arena_mu_);
  free_arenas_.push_back(std::move(a));
}

Expected<std::vector<Tensor>> ExecutionPlan::run(const std::vector<Tensor>& inputs, const RunOptions& ro) const {
  // An allocation the limit did not foresee (or no limit), or a container asked to hold more than it can: a clean
  // error, never an abort.
  auto too_large = [] {
    return InvalidInput("out of memory during the run (is a dimension of an input absurdly large? a memory limit "
                        "gives the size needed)");
  };
  try {
    return run_guarded(inputs, ro);
  } catch (const std::bad_alloc&) {
    return too_large();
  } catch (const std::length_error&) {
    return too_large();
  }
}

Expected<std::vector<Tensor>> ExecutionPlan::run_guarded(const std::vector<Tensor>& inputs,
                                                         const RunOptions& ro) const {
  RunProfile* profile = ro.profile;
  // Output slots bound to caller buffers: slot -> the bound tensor.
  std::vector<const Tensor*> bound;
  if (ro.bound_outputs) {
    for (size_t i = 0; i < ro.bound_outputs->size() && i < output_slots_.size(); ++i) {
      const Tensor& b = (*ro.bound_outputs)[i];
      if (!b.defined()) continue;
      if (bound.empty()) bound.assign(slots_.size(), nullptr);
      const auto s = static_cast<size_t>(output_slots_[i]);
      if (!bound[s]) bound[s] = &b;
    }
  }
  Frame frame(*this);
  std::vector<Tensor>& t = frame.tensors();
  std::shared_ptr<void> arena = acquire_arena();
  char* base = static_cast<char*>(arena.get());
  std::shared_ptr<void> device_arena;
  if (device_backend_) {
    auto a = acquire_device_arena();
    if (!a.ok()) {
      release_arena(std::move(arena));
      return a.status();
    }
    device_arena = std::move(a).value();
  }
  char* device_base = static_cast<char*>(device_arena.get());
  for (size_t s = 0; s < slots_.size(); ++s) {
    const Slot& slot = slots_[s];
    switch (slot.kind) {
      case Slot::Kind::kConstant: t[s] = slot.constant; break;
      case Slot::Kind::kInput: t[s] = inputs[static_cast<size_t>(slot.input_index)]; break;
      case Slot::Kind::kArena: t[s] = Tensor::View(slot.dtype, slot.dims, base + slot.offset); break;
      case Slot::Kind::kDevice:
        t[s] = Tensor::View(slot.dtype, slot.dims, device_base + slot.offset);
        break;
      case Slot::Kind::kOutput: break;  // allocated by its producing step
      case Slot::Kind::kDynamic: break;
    }
  }
  PlannedSubgraphRunner runner(&frame, bodies_.get(), graph_.opset);
  if (profile) profile->started = std::chrono::steady_clock::now();
  std::vector<const Tensor*> in_ptrs;
  std::vector<Tensor*> out_ptrs;
  Status status;
  MemoryBudget budget{max_memory_, static_bytes_};  // the plan's memory, then the dynamic steps' tensors
  std::vector<size_t> held(slots_.size(), 0);        // bytes reserved for each dynamic step's tensor
  for (const Step& st : steps_) {
    if (ro.cancel && ro.cancel->load(std::memory_order_relaxed)) {
      status = Cancelled("the run was cancelled");
      break;
    }
    if (st.view) continue;  // its output already views its input's bytes
    in_ptrs.clear();
    out_ptrs.clear();
    for (int s : st.in) {
      // A value no step produced (a kernel that left a dynamic output unset) must not reach a kernel as absent.
      if (s >= 0 && !t[static_cast<size_t>(s)].defined()) {
        status = InternalError(st.node->describe() + ": its input '" + slots_[static_cast<size_t>(s)].name +
                               "' was not produced");
        break;
      }
      in_ptrs.push_back(s >= 0 ? &t[static_cast<size_t>(s)] : nullptr);
    }
    if (!status.ok()) break;
    std::vector<ValueInfo> dyn_info;
    bool whole = false;  // every output's shape follows from input shapes and constants: its producer writes it whole
    if (st.dynamic) {
      std::vector<Tensor> in_vals(st.in.size());
      std::vector<bool> constant(st.in.size(), false);
      for (size_t i = 0; i < st.in.size(); ++i) {
        if (!in_ptrs[i]) continue;
        in_vals[i] = *in_ptrs[i];
        constant[i] = slots_[static_cast<size_t>(st.in[i])].kind == Slot::Kind::kConstant;
      }
      // A shape-generic step first infers from shapes and constants alone; when that leaves an output open, the values.
      auto info = infer_node_concrete(*st.node, graph_.opset, in_vals, st.shapes_first ? &constant : nullptr);
      whole = st.shapes_first && info.ok();
      for (size_t i = 0; whole && i < st.out.size(); ++i) {
        whole = st.out[i] < 0 || ((*info)[i].dtype != DType::kUndefined && (*info)[i].shape.fully_known());
      }
      if (st.shapes_first && !whole) info = infer_node_concrete(*st.node, graph_.opset, in_vals);
      if (!info.ok()) {
        status = info.status();
        break;
      }
      dyn_info = std::move(info).value();
    }
    for (size_t i = 0; i < st.out.size(); ++i) {
      int s = st.out[i];
      if (s < 0) {
        out_ptrs.push_back(nullptr);
        continue;
      }
      const Slot& slot = slots_[static_cast<size_t>(s)];
      Tensor& ot = t[static_cast<size_t>(s)];
      if (slot.kind == Slot::Kind::kOutput) {
        const Tensor* b = bound.empty() ? nullptr : bound[static_cast<size_t>(s)];
        if (b && b->dtype() == slot.dtype && b->dims() == slot.dims) {
          ot = Tensor::View(slot.dtype, slot.dims, const_cast<void*>(b->raw()));  // computed in place
        } else {
          ot = written_whole(slot.dtype, slot.dims);
        }
      } else if (slot.kind == Slot::Kind::kDynamic) {
        const ValueInfo& vi = dyn_info[i];
        if (vi.dtype != DType::kUndefined && vi.shape.fully_known()) {
          const Dims dims = vi.shape.concrete();
          const size_t bytes = static_cast<size_t>(numel(dims)) * dtype_size(vi.dtype);
          status = budget.reserve(*st.node, static_cast<int>(i), dims, bytes);
          if (!status.ok()) break;
          held[static_cast<size_t>(s)] = bytes;
          // A shape only the data gives (NonZero, a Loop's outputs) starts zeroed, as it always has.
          ot = whole ? written_whole(vi.dtype, dims) : Tensor(vi.dtype, dims);
        } else {
          ot = Tensor();
        }
      }
      out_ptrs.push_back(&ot);
    }
    if (!status.ok()) break;
    KernelContext ctx(*st.node, in_ptrs, out_ptrs, pool_, st.has_subgraphs ? &runner : nullptr, &budget);
    // A device step passes the engine its staging buffers: a value kept on the device is already in its slot.
    auto run_step = [&](std::vector<ProfileStep>* steps) {
      if (!st.device) {
        const auto* region = is_region_node(*st.node) ? static_cast<const RegionKernel*>(st.kernel.get()) : nullptr;
        return region && steps ? region->run_profiled(ctx, steps) : st.kernel->run(ctx);  // an engine gives its steps
      }
      std::vector<void*> stage(st.stage.size(), nullptr);
      for (size_t k = 0; k < stage.size(); ++k) {
        if (st.stage[k] != kNoStage) stage[k] = device_base + st.stage[k];
      }
      return st.device->run_through(in_ptrs, out_ptrs, stage, steps);
    };
    if (!profile) {
      status = run_step(nullptr);
    } else {
      RunProfile::Entry e;
      e.node = st.node->name;
      e.op_type = st.node->op_type;
      if (is_region_node(*st.node)) e.engine = static_cast<int>(st.node->attr_int("engine", -1));
      auto t0 = std::chrono::steady_clock::now();
      status = run_step(&e.steps);
      auto t1 = std::chrono::steady_clock::now();
      e.start_us = std::chrono::duration<double, std::micro>(t0 - profile->started).count();
      e.us = std::chrono::duration<double, std::micro>(t1 - t0).count();
      profile->entries.push_back(std::move(e));
    }
    if (!status.ok()) break;
    for (int s : st.release) {
      budget.release(held[static_cast<size_t>(s)]);
      t[static_cast<size_t>(s)] = Tensor();
    }
  }
  release_arena(std::move(arena));
  if (device_arena) {
    // Work a failed or cancelled run left enqueued must finish before another run takes the arena.
    Status done = device_backend_->synchronize();
    if (status.ok()) status = done;
    std::lock_guard<std::mutex> lock(arena_mu_);
    free_device_arenas_.push_back(std::move(device_arena));
  }
  if (!status.ok()) return status;
  std::vector<Tensor> outs;
  outs.reserve(output_slots_.size());
  for (size_t i = 0; i < output_slots_.size(); ++i) {
    const int s = output_slots_[i];
    const Slot& slot = slots_[static_cast<size_t>(s)];
    Tensor& v = t[static_cast<size_t>(s)];
    if (!v.defined()) return InternalError("graph output '" + slot.name + "' was not produced");
    const Tensor* b = ro.bound_outputs && i < ro.bound_outputs->size() && (*ro.bound_outputs)[i].defined()
                          ? &(*ro.bound_outputs)[i]
                          : nullptr;
    if (b) {
      if (b->dtype() != v.dtype() || b->dims() != v.dims()) {
        return InvalidInput("output '" + slot.name + "' is " + v.str() + " but its buffer is " + b->str());
      }
      if (b->raw() != v.raw() && v.nbytes() > 0) std::memcpy(const_cast<void*>(b->raw()), v.raw(), v.nbytes());
      outs.push_back(*b);
      continue;
    }
    // Inputs, constants and arena views must not escape: copy them.
    if (slot.kind == Slot::Kind::kOutput ||
        (slot.kind == Slot::Kind::kDynamic && v.raw() != nullptr)) {
      outs.push_back(v);
    } else {
      outs.push_back(v.clone());
    }
  }
  return outs;
}

}  // namespace tessera
