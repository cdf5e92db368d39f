// Running a loaded engine.
//
// The plan (primitives, memory descriptors, arena offsets) is immutable after
// load and shared by every run. What a run mutates lives in a RunContext: a
// stream, the arena, the scratchpad every primitive shares (they are created
// with scratchpad_mode::user, so a primitive keeps no state of its own), and
// the dnnl::memory objects, whose data handles are pointed at the host's
// buffers before each run. An engine keeps idle contexts in a pool; a run
// takes one (or builds one) and gives it back, so concurrent runs on one
// engine never share mutable state: the table sets
// TESSERA_BACKEND_FLAG_CONCURRENT_RUN.
//
// Threads: oneDNN runs on OpenMP here. omp_set_num_threads() sets the
// calling thread's team size, so each run sets it to the session's count
// before executing (and load did before generating kernels).
#include <omp.h>

#include <unordered_map>

#include "dnnl_engine.h"

namespace tessera_dnnl {

using dnnl::memory;
using tessera_plugin::fail;

class RunContext {
 public:
  RunContext(const Plan& plan, const dnnl::engine& eng)
      : stream_(eng), arena_(plan.arena_bytes), scratch_(plan.scratch_bytes) {
    mems_.reserve(plan.mems.size());
    for (size_t i = 0; i < plan.mems.size(); ++i) {
      const Mem& m = plan.mems[i];
      void* ptr = nullptr;
      switch (m.storage) {
        case Storage::kArena:
          ptr = static_cast<char*>(arena_.p) + plan.buffers[static_cast<size_t>(m.index)].offset + m.offset;
          break;
        case Storage::kFixed:
          ptr = static_cast<char*>(plan.fixed[static_cast<size_t>(m.index)]) + m.offset;
          break;
        case Storage::kInput:
        case Storage::kOutput:  // bound per run
          io_.push_back(i);
          break;
      }
      mems_.emplace_back(m.md, eng, ptr);
    }
    args_.resize(plan.steps.size());
    for (size_t s = 0; s < plan.steps.size(); ++s) {
      const Step& step = plan.steps[s];
      for (const auto& [arg, m] : step.args) args_[s].emplace(arg, mems_[static_cast<size_t>(m)]);
      if (step.scratchpad.get_size() > 0) {
        args_[s].emplace(DNNL_ARG_SCRATCHPAD, memory(step.scratchpad, eng, scratch_.p));
      }
    }
  }

  void run(const Plan& plan, const tessera_tensor_t* inputs, tessera_tensor_t* outputs) {
    for (size_t i : io_) {
      const Mem& m = plan.mems[i];
      void* p = m.storage == Storage::kInput ? inputs[m.index].data : outputs[m.index].data;
      mems_[i].set_data_handle(static_cast<char*>(p) + m.offset);
    }
    for (size_t s = 0; s < plan.steps.size(); ++s) plan.steps[s].prim.execute(stream_, args_[s]);
    stream_.wait();
  }

 private:
  dnnl::stream stream_;
  AlignedBuffer arena_, scratch_;
  std::vector<memory> mems_;
  std::vector<size_t> io_;  // Mems over the host's buffers
  std::vector<std::unordered_map<int, memory>> args_;
};

namespace {

std::vector<tessera_plugin::ValueType> types_of(const Program& p, const std::vector<int32_t>& ids) {
  std::vector<tessera_plugin::ValueType> t;
  for (int32_t id : ids) {
    const Value& v = p.values[static_cast<size_t>(id)];
    tessera_plugin::ValueType vt;
    vt.dtype = v.dtype;
    vt.ranked = true;
    vt.dims = v.dims;
    t.push_back(std::move(vt));
  }
  return t;
}

}  // namespace

std::unique_ptr<tessera_engine> make_engine(Program p, const tessera_named_tensor_t* constants, size_t count,
                                            int num_threads) {
  auto e = std::make_unique<tessera_engine>();
  e->program = std::move(p);
  e->num_threads = std::max(1, num_threads);
  e->input_types = types_of(e->program, e->program.inputs);
  e->output_types = types_of(e->program, e->program.outputs);
  std::map<std::string, const tessera_tensor_t*> by_name;
  for (size_t i = 0; i < count; ++i) {
    if (constants && constants[i].name) by_name[constants[i].name] = &constants[i].tensor;
  }
  e->eng = dnnl::engine(dnnl::engine::kind::cpu, 0);
  e->plan = build_plan(e->program, e->eng, &by_name, e->num_threads);
  // One context now, so the first run allocates nothing.
  e->idle.push_back(std::make_unique<RunContext>(e->plan, e->eng));
  return e;
}

void run_engine(tessera_engine& e, const tessera_tensor_t* inputs, size_t num_inputs, tessera_tensor_t* outputs,
                size_t num_outputs) {
  if ((num_inputs && !inputs) || (num_outputs && !outputs)) fail(TESSERA_ERROR_INVALID_ARGUMENT, "NULL descriptors");
  tessera_plugin::check_descriptors(inputs, num_inputs, e.input_types, "input");
  tessera_plugin::check_descriptors(outputs, num_outputs, e.output_types, "output");
  std::unique_ptr<RunContext> ctx;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    if (!e.idle.empty()) {
      ctx = std::move(e.idle.back());
      e.idle.pop_back();
    }
  }
  if (!ctx) ctx = std::make_unique<RunContext>(e.plan, e.eng);
  omp_set_num_threads(e.num_threads);
  try {
    ctx->run(e.plan, inputs, outputs);
  } catch (const dnnl::error& err) {
    fail(TESSERA_ERROR_RUNTIME, std::string("oneDNN: ") + err.what());
  }
  std::lock_guard<std::mutex> lock(e.mu);
  e.idle.push_back(std::move(ctx));
}

}  // namespace tessera_dnnl

tessera_engine::~tessera_engine() = default;
