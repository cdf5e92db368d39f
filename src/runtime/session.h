// InferenceSession: the runtime object a user creates from a model.
//
// Creation optimizes the graph once. Execution plans are specialised per set
// of concrete input shapes: the graph is re-inferred with those shapes (so
// exporter-style shape arithmetic folds away), kernels are created (weights
// packed) and every statically shaped intermediate gets an offset in one
// arena from the liveness-based memory planner. A model whose inputs are all
// static is planned at creation, so the first run does no planning.
//
// run() is const and thread-safe: several threads may run one session at
// once; each run takes its own arena from a pool.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <thread>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "artifact/program.h"
#include "backends/backend.h"
#include "ir/graph.h"
#include "ops/op_registry.h"
#include "ir/tensor.h"
#include "util/thread_pool.h"
#include "util/status.h"

namespace tessera {

// The sizes an input dim may take at run time: lo..hi, both included (from `--shape NAME=..,MIN..MAX,..`).
struct DimRange {
  int64_t lo = 0, hi = 0;
  bool exact() const { return lo == hi; }
  bool contains(int64_t v) const { return v >= lo && v <= hi; }
  std::string str() const { return exact() ? std::to_string(lo) : std::to_string(lo) + ".." + std::to_string(hi); }
  bool operator==(const DimRange& o) const { return lo == o.lo && hi == o.hi; }
};

struct SessionOptions {
  int num_threads = 0;      // 0 = number of hardware threads
  bool optimize = true;     // run graph optimisations (folding, canonicalisation)
  // Fuse what native runs (Conv/Gemm epilogues, elementwise chains) in every
  // plan; TESSERA_NO_FUSION=1 in the environment turns it off as well.
  bool fuse = true;
  // The memory limit of every run (PlanOptions::max_memory): a run that would hold more fails with
  // ErrorCode::kInvalidInput naming the need and the limit. 0: no limit.
  size_t max_memory = 0;
  // A model with symbolic input dims: a run at an input shape that has no plan yet runs at once on the session's
  // shape-generic plan (each step's shapes inferred and tensors allocated as it runs; fused only where no size
  // needs to be known); a shape seen a second time gets its own plan from a background thread, which later runs at
  // that shape use. false: the run builds the plan for its shape and waits for it (runs of other shapes go on
  // meanwhile either way).
  bool plan_in_background = true;
  // Per input name, one range per dim: the sizes the model was compiled for. A run with a size outside its range
  // fails with ErrorCode::kInvalidInput naming the input, the dim and the range. Inputs not named here take any
  // size their shape allows.
  std::map<std::string, std::vector<DimRange>> input_ranges;
  // Engines for shapes the program has no bucket for: given one, the background planner compiles a bucket (the
  // model compiled for those exact dims, engines included) for a shape whose runs without one have taken
  // `bucket_payback_ms` in all, so that a compile is spent only on a shape that has shown it repeats enough to repay
  // it (its native plan serves it meanwhile). api::open_session gives one that also keeps what it compiles in the
  // engine cache on disk: a shape seen the first time is looked up there (`cached_only`: an error when it is not
  // cached, nothing compiled), so a process finds what an earlier one compiled. The runs meanwhile go on what is
  // ready; a compile that fails leaves that shape its native plan. Called on the planner's thread only.
  std::function<Expected<Program>(const std::vector<Dims>& dims, bool cached_only)> compile_bucket;
  // The time a shape's runs must take without a bucket before one is compiled for it, over two runs at least (a
  // compile serves only the runs after it). < 0: the mean wall time of this session's bucket compiles so far (before
  // the first, 1 s or 20 of the shape's runs, whichever is more: a compile runs the model at the shape tens of times
  // itself): a compile is worth its cost once the shape has cost as much. 0: at the first run.
  double bucket_payback_ms = -1;
  // Native Conv, ConvTranspose, MatMul and Gemm multiply in bf16 or fp16 where the CPU has the instructions and they
  // measure faster (PlanOptions::products): --precision bf16 or fp16. A Program compiled at a precision below fp32
  // sets it whatever this says.
  kernels::Products products = kernels::Products::kFp32;
  // Per input name, the dims its random inputs take (api::random_inputs): --shape on an artifact, whose shapes are
  // compiled in. Create checks them as it checks a run's inputs (declared dims, compiled ranges).
  std::map<std::string, Dims> sample_dims;
};

struct IOInfo {
  std::string name;
  DType dtype = DType::kUndefined;
  Shape shape;
  std::vector<DimRange> ranges;  // one per dim when SessionOptions::input_ranges names the input; else empty
  Dims sample;                   // SessionOptions::sample_dims of the input; else empty
};

struct RunStats {
  size_t arena_bytes = 0;      // peak arena of the plan used
  size_t naive_bytes = 0;      // bytes without buffer reuse
  int num_steps = 0;
  int num_dynamic_steps = 0;   // nodes whose shapes were only known at run time
  size_t device_arena_bytes = 0;     // device memory of one run: values kept there and staging buffers
  size_t device_crossing_bytes = 0;  // bytes copied between host and device per run
  int num_device_steps = 0;          // regions of a device engine that run with the plan's device arena
};

// Per-node wall times of one run, in execution order (filled when a
// profile is passed to run()). A Region node is one entry; when its backend
// gives a profile (Backend::gives_profile), the entry also holds the steps
// the engine reported: which of the region's nodes each computed (by their
// names in the source graph), the engine's name for it, and its time. A
// profiled run is slower than a plain one: engines wait for each step.
struct RunProfile {
  struct Entry {
    std::string node, op_type;  // the glue graph's node ("region_3", "Region" for a region)
    double us = 0;
    double start_us = 0;        // from `started`
    int engine = -1;            // a Region node: index into the session's engines; -1 for a native node
    std::vector<ProfileStep> steps;  // a Region node whose backend gives a profile: its steps, times
                                     // from the start of the engine's run (about start_us)
  };
  std::chrono::steady_clock::time_point started;  // when the run began executing nodes
  std::vector<Entry> entries;
};

// How one run goes (all optional).
struct RunOptions {
  RunProfile* profile = nullptr;  // filled with per-node times
  // Read before every step of the top-level graph: once it is set the run
  // stops at the next step and returns a kCancelled status. A step already
  // running (an engine region, a whole Loop) finishes first.
  const std::atomic<bool>* cancel = nullptr;
  // Per graph output, in graph order: a tensor over caller memory to write
  // that output into, or an undefined Tensor to have the run allocate it. An
  // output the plan computes into its own buffer is computed straight into
  // the bound one; others are copied there. A bound tensor whose dtype or
  // dims differ from the output's is an error. Fewer entries than outputs:
  // the rest are allocated.
  const std::vector<Tensor>* bound_outputs = nullptr;
};

class ExecutionPlan;

class InferenceSession {
 public:
  ~InferenceSession();

  static Expected<std::unique_ptr<InferenceSession>> Create(Graph graph, const SessionOptions& opts = {});
  // A compiled program (from the partitioner, or read from an artifact):
  // loads every engine from its blob now, then plans like Create. The glue
  // graph is not optimised again.
  static Expected<std::unique_ptr<InferenceSession>> Create(Program program, const SessionOptions& opts = {});

  const std::vector<IOInfo>& inputs() const { return inputs_; }
  const std::vector<IOInfo>& outputs() const { return outputs_; }
  const Graph& graph() const { return graph_; }
  // Engines of external regions (empty for a plain ONNX model).
  const EngineTable& engines() const { return *engines_; }
  int num_threads() const { return pool_->num_threads(); }
  // The threads it was asked for (SessionOptions::num_threads, or every hardware thread): more than num_threads()
  // where the compile measured the program faster on fewer (ProgramMeta::threads_best).
  int threads_asked() const { return threads_asked_; }
  // SessionOptions::max_memory (0: none).
  size_t max_memory() const { return opts_.max_memory; }

  // Inputs in graph-input order. Returns outputs in graph-output order.
  Expected<std::vector<Tensor>> run(const std::vector<Tensor>& inputs, RunProfile* profile = nullptr) const;
  Expected<std::vector<Tensor>> run(const std::vector<Tensor>& inputs, const RunOptions& ro) const;
  // Inputs by name (every graph input must be given).
  Expected<std::vector<Tensor>> run(const std::map<std::string, Tensor>& inputs) const;

  // Plan statistics for the given concrete input dims (plans if needed).
  Expected<RunStats> stats(const std::vector<Dims>& input_dims) const;
  // Plans built so far: one per input shape run, again for one whose plan was evicted.
  uint64_t plans_built() const { return plans_built_.load(std::memory_order_relaxed); }
  // Runs that built the plan for their shape or waited for one being built; runs that went on the generic plan
  // meanwhile (SessionOptions::plan_in_background).
  uint64_t runs_waited() const { return runs_waited_.load(std::memory_order_relaxed); }
  uint64_t runs_generic() const { return runs_generic_.load(std::memory_order_relaxed); }
  // Whether the native pool's idle threads spin now: unless an engine (the session's, or a cached bucket's) may run.
  bool native_pool_spins() const;
  // Runs at the exact dims of one of the program's buckets, on its engines (Program::buckets).
  uint64_t runs_bucket() const { return runs_bucket_.load(std::memory_order_relaxed); }
  // The input dims of the program's buckets (a masked bucket's largest).
  std::vector<std::vector<Dims>> bucket_shapes() const;
  // Buckets the background built with SessionOptions::compile_bucket, and compiles that failed (those shapes got
  // native plans).
  uint64_t buckets_compiled() const { return buckets_compiled_.load(std::memory_order_relaxed); }
  uint64_t bucket_compile_failures() const { return bucket_compile_failures_.load(std::memory_order_relaxed); }
  // Of buckets_compiled(), those read back from the engine cache.
  uint64_t buckets_from_cache() const { return buckets_from_cache_.load(std::memory_order_relaxed); }
  // Blocks until the plans queued for the background are built.
  void wait_for_background_plans() const;
  // The input dims that have a plan now, most recently used first (bounded: the least recently used are evicted).
  std::vector<std::vector<Dims>> cached_plan_shapes() const;
  // What the plans built so far hold, as counted against SessionOptions::max_memory: their arenas, and the memory
  // the engines of buckets compiled at run time hold of their own (Engine::bytes).
  struct PlanCacheBytes {
    size_t arenas = 0, engines = 0;
  };
  PlanCacheBytes plan_cache_bytes() const;

 private:
  InferenceSession() = default;
  Status check_inputs(const std::vector<Tensor>& inputs) const;
  // The plan for `dims`. For a run (`for_run`), the generic plan while that one is built in the background, and the
  // run counted in runs_waited() when it builds or waits. *bucket (when given): whether the plan is a bucket's.
  Expected<std::shared_ptr<const ExecutionPlan>> plan_for(const std::vector<Dims>& dims, bool for_run = false,
                                                          bool* bucket = nullptr) const;
  // A shape-generic plan of `g` (prepared for planning): each step's shapes inferred and its tensors allocated as it
  // runs, fused where no size needs to be known (Conv/MatMul with their activations and biases; elementwise chains
  // need sizes), unfused where fusion fails. The main graph's for new shapes, and each masked bucket's.
  Expected<std::shared_ptr<const ExecutionPlan>> generic_plan(Graph g) const;
  // A plan of `g` (the glue graph, or a bucket's) with its inputs pinned to `dims`, its Region nodes run by `engines`
  // (null: the session's).
  Expected<std::shared_ptr<const ExecutionPlan>> plan_graph(Graph g, const std::vector<Dims>& dims,
                                                            const EngineTable* engines = nullptr) const;
  // A bucket compiled now by SessionOptions::compile_bucket (or only read from its cache): its engines loaded, its
  // plan built (the plan keeps the engines alive).
  Expected<std::shared_ptr<const ExecutionPlan>> compile_bucket(const std::vector<Dims>& dims, bool cached_only) const;
  // A shape seen the first time: its bucket from the engine cache, when there is one (on the planner's thread).
  void probe_cached_bucket(const std::vector<Dims>& dims) const;
  struct PlanSlot;
  // Builds `slot`'s plan and fulfils it (rethrowing an exception from building when `rethrow`).
  void finish_plan(const std::shared_ptr<PlanSlot>& slot, const std::vector<Dims>& dims, bool rethrow) const;
  void evict_plans_locked() const;
  // Under plans_mu_: the native pool spins unless the session's engines, or a cached bucket's, may run beside it.
  void update_spin_locked() const;
  // false when the queue is full. kProbe: only look for a cached bucket (probe_cached_bucket); kBucket: compile one.
  enum class BgTask : uint8_t { kProbe, kPlan, kBucket };
  bool queue_background_plan(const std::vector<Dims>& dims, BgTask task = BgTask::kPlan) const;
  // Under plans_mu_: `slot` holds `plan` now.
  void fulfil_locked(PlanSlot& slot, const std::shared_ptr<const ExecutionPlan>& plan, bool bucket) const;
  // Under plans_mu_: true when `dims` was seen once before (and forgets it), else remembers it.
  bool seen_once(const std::vector<Dims>& dims) const;
  // After a run at `dims` that took `ms` without a bucket: queues a bucket compile once the shape has paid for one.
  void note_run_without_bucket(const std::vector<Dims>& dims, double ms) const;
  // Compiles a bucket for `dims` (the planner's thread) and puts it in the plan cache in place of its plan.
  void build_bucket(const std::vector<Dims>& dims) const;
  void background_planner() const;

  static Expected<std::unique_ptr<InferenceSession>> Finish(std::unique_ptr<InferenceSession> s, Graph graph,
                                                            std::vector<ProgramBucket> buckets = {});

  Graph graph_;
  SessionOptions opts_;
  bool optimize_ = true;
  kernels::Products products_ = kernels::Products::kFp32;  // SessionOptions::products, or the program's precision
  std::shared_ptr<const EngineTable> engines_ = std::make_shared<EngineTable>();
  std::vector<IOInfo> inputs_, outputs_;
  std::unique_ptr<ThreadPool> pool_;
  int threads_asked_ = 1;
  // Plans per set of input dims, least recently used evicted first (kMaxPlans of them, and within
  // SessionOptions::max_memory of arenas and of buckets' engines when it is set). A plan is built outside plans_mu_ by
  // the first run that needs it: runs of other shapes go on meanwhile, and runs of the same shape wait for that one
  // build.
  struct PlanSlot {
    std::promise<Expected<std::shared_ptr<const ExecutionPlan>>> promise;
    std::shared_future<Expected<std::shared_ptr<const ExecutionPlan>>> plan;
    uint64_t last_used = 0;
    bool built = false;    // the plan is ready (and its bytes set)
    bool bucket = false;   // compiled with engines (SessionOptions::compile_bucket)
    bool queued = false;   // built by the background planner (else by the run or caller that made the slot)
    // Its arena. Without a limit the plan holds it between runs; under SessionOptions::max_memory it goes back to
    // the block cache between runs (ExecutionPlan::release_arena) and is still counted here, so the LRU errs towards
    // evicting.
    size_t arena_bytes = 0;
    size_t engine_bytes = 0;  // a bucket's engines' own memory (Engine::bytes); counted with the arena
    std::unique_ptr<TensorMemoryReservation> engines_held;  // engine_bytes, against the block cache's cap
  };
  // Each plan holds its kernels' packed weights: the bound keeps a stream of many shapes from multiplying them.
  static constexpr size_t kMaxPlans = 16;
  mutable std::mutex plans_mu_;
  mutable std::map<std::vector<Dims>, std::shared_ptr<PlanSlot>> plans_;
  mutable uint64_t plan_clock_ = 0;
  mutable std::atomic<uint64_t> plans_built_{0}, runs_waited_{0}, runs_generic_{0}, runs_bucket_{0};
  mutable std::atomic<uint64_t> buckets_compiled_{0}, bucket_compile_failures_{0}, buckets_from_cache_{0};
  // The program's buckets: a plan each, built at creation and never evicted (fixed after Finish: read unlocked).
  std::map<std::vector<Dims>, std::shared_ptr<const ExecutionPlan>> buckets_;
  // The program's masked buckets (ProgramBucket::lower), each serving every dims from `lower` to `upper` on a
  // shape-generic plan of its glue graph (which pads the input, masks and slices); in order of `upper`, the first
  // that holds a request serves it. Fixed after Finish.
  struct MaskedBucket {
    std::vector<Dims> lower, upper;
    std::shared_ptr<const ExecutionPlan> plan;
  };
  std::vector<MaskedBucket> masked_;
  // The masked bucket serving `dims`, or null.
  const MaskedBucket* masked_for(const std::vector<Dims>& dims) const;
  std::shared_ptr<const ExecutionPlan> generic_;  // null unless plan_in_background and some input dim is symbolic
  // Shapes run once on the generic plan without a plan of their own (the last kMaxSeen).
  static constexpr size_t kMaxSeen = 256;
  mutable std::set<std::vector<Dims>> seen_;
  mutable std::deque<std::vector<Dims>> seen_order_;
  // The background planner: one thread, started by the first plan queued, joined by the destructor.
  mutable std::mutex bg_mu_;
  mutable std::condition_variable bg_cv_;
  // Time each shape has run without a bucket (at most kMaxSeen shapes, the least spent dropped first), the shapes
  // queued for a bucket or given one, and the bucket compiles' wall time (SessionOptions::bucket_payback_ms).
  mutable std::mutex spent_mu_;
  struct Spent {
    double ms = 0;
    int runs = 0;
  };
  mutable std::map<std::vector<Dims>, Spent> spent_ms_;
  mutable std::set<std::vector<Dims>> bucket_asked_;
  mutable double bucket_compile_ms_ = 0;
  mutable int bucket_compiles_timed_ = 0;
  mutable std::deque<std::pair<std::vector<Dims>, BgTask>> bg_queue_;
  mutable int bg_busy_ = 0;
  mutable bool bg_stop_ = false;
  mutable std::thread bg_thread_;
};

}  // namespace tessera
