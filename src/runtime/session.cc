#include "runtime/session.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <optional>
#include <thread>
#include <tuple>

#include "artifact/artifact.h"
#include "backends/backend.h"
#include "passes/native_fusion.h"
#include "runtime/execution_plan.h"

namespace tessera {

namespace {

std::string sig_str(DType dt, const Shape& s) { return std::string(dtype_name(dt)) + s.str(); }

// Whether an input of dtype `dt` and dims `dims` is one `want` takes: its dtype, its declared dims and the ranges it
// was compiled for.
Status check_input(const IOInfo& want, DType dt, const Dims& dims) {
  const auto rank = static_cast<int>(dims.size());
  bool ok = want.dtype == DType::kUndefined || want.dtype == dt;
  if (ok && want.shape.rank_known) {
    ok = want.shape.rank() == rank;
    for (int d = 0; ok && d < rank; ++d) {
      if (want.shape[d].known() && want.shape[d].value != dims[static_cast<size_t>(d)]) ok = false;
    }
  }
  if (!ok) {
    return InvalidInput("input '" + want.name + "': expected " + sig_str(want.dtype, want.shape) + ", got " +
                        dtype_name(dt) + dims_str(dims));
  }
  if (!want.ranges.empty() && want.ranges.size() != dims.size()) {
    return InvalidInput("input '" + want.name + "' has rank " + std::to_string(rank) + "; it was compiled for " +
                        std::to_string(want.ranges.size()) + " dims");
  }
  for (size_t d = 0; d < want.ranges.size(); ++d) {
    if (!want.ranges[d].contains(dims[d])) {
      return InvalidInput("input '" + want.name + "': dim " + std::to_string(d) + " is " + std::to_string(dims[d]) +
                          ", outside the compiled range " + want.ranges[d].str());
    }
  }
  return Status::Ok();
}

}  // namespace

InferenceSession::~InferenceSession() {
  {
    std::lock_guard<std::mutex> lock(bg_mu_);
    bg_stop_ = true;
  }
  bg_cv_.notify_all();
  if (bg_thread_.joinable()) bg_thread_.join();  // a plan being built is finished first
}

namespace {
int thread_count(const SessionOptions& opts) { return threads_asked_for(opts.num_threads); }

// The threads a program runs on when `asked` are asked for: fewer where its compile measured it faster on them at
// that count (ProgramMeta::threads_best).
int threads_for(const ProgramMeta& meta, int asked) {
  return meta.threads_best > 0 && asked == meta.threads_measured ? meta.threads_best : asked;
}

// Every engine of `program`, loaded from its blob with the constants it names.
Expected<std::shared_ptr<const EngineTable>> load_engines(const Program& program, const SessionOptions& opts) {
  auto engines = std::make_shared<EngineTable>();
  for (const EngineSpec& e : program.engines) {
    auto found = find_backend(e.backend);
    if (!found.ok()) return Status(found.status().code(), e.region + " needs " + found.status().message());
    std::shared_ptr<const Backend> backend = *found;
    if (backend->version() != e.backend_version) {
      return InvalidModel(e.region + " was compiled by backend '" + e.backend + "' version '" + e.backend_version +
                          "', but the loaded plugin (" + backend->path() + ") is version '" + backend->version() +
                          "'; recompile the model");
    }
    std::vector<std::pair<std::string, Tensor>> consts;
    for (const ConstantRef& c : e.constants) {
      auto it = program.constants.find(c.key);
      if (it == program.constants.end()) {
        return InvalidModel(e.region + ": constant '" + c.key + "' is missing from the program");
      }
      consts.emplace_back(c.name, it->second);
    }
    std::shared_ptr<const Engine> engine;
    TSR_ASSIGN_OR_RETURN(engine, backend->load(e.blob, consts, thread_count(opts), e.region, opts.max_memory));
    engines->push_back(std::move(engine));
  }
  return std::shared_ptr<const EngineTable>(std::move(engines));
}
}  // namespace

Expected<std::unique_ptr<InferenceSession>> InferenceSession::Create(Graph graph, const SessionOptions& opts) {
  std::unique_ptr<InferenceSession> s(new InferenceSession());
  s->opts_ = opts;
  s->threads_asked_ = thread_count(opts);
  s->optimize_ = opts.optimize;
  s->products_ = opts.products;
  return Finish(std::move(s), std::move(graph));
}

Expected<std::unique_ptr<InferenceSession>> InferenceSession::Create(Program program, const SessionOptions& opts) {
  std::unique_ptr<InferenceSession> s(new InferenceSession());
  s->opts_ = opts;
  s->threads_asked_ = thread_count(opts);
  s->opts_.num_threads = threads_for(program.meta, s->threads_asked_);
  s->optimize_ = false;
  s->products_ =
      opts.products != kernels::Products::kFp32 ? opts.products : kernels::products_named(program.meta.precision());
  {
    // The process's thread policy from the engines it will run, with the
    // threading their backends declared when the program was compiled.
    std::vector<std::pair<std::string, Threading>> engines;
    for (const EngineSpec& e : program.engines) {
      Threading t = Threading::kUnknown;
      for (const BackendRecord& r : program.meta.backends) {
        if (r.name == e.backend) t = threading_from_name(r.threading);
      }
      engines.emplace_back(e.backend, t);
    }
    expect_engines(engines, /*alone=*/false);
  }
  std::shared_ptr<const EngineTable> engines;
  TSR_ASSIGN_OR_RETURN(engines, load_engines(program, s->opts_));
  s->engines_ = std::move(engines);
  return Finish(std::move(s), std::move(program.graph), std::move(program.buckets));
}

Expected<std::unique_ptr<InferenceSession>> InferenceSession::Finish(std::unique_ptr<InferenceSession> s,
                                                                     Graph graph, std::vector<ProgramBucket> buckets) {
  s->pool_ = std::make_unique<ThreadPool>(thread_count(s->opts_));
  // Engines bring their own threads (OpenMP, pthreadpool): native's must not
  // spin beside them (a oneDNN MLP ran 100x slower with them spinning). Buckets
  // compiled in the background may bring engines too: update_spin_locked turns
  // spinning off while one that holds any is cached. Until then a session of a
  // model with symbolic dims runs natively and spins (off from the start, a
  // conformer at 1x77 ran 35 % slower there than its static native twin).
  s->pool_->set_spin(s->engines_->empty());
  // The freed tensor blocks kept for reuse (a shape-generic plan's, mostly) stay within what the rest of the process
  // leaves of the memory limit (the detector stream under 128M: 133 MiB resident at most with the cap at the limit,
  // 17 of them libraries, weights and the heap).
  if (s->opts_.max_memory > 0) lower_tensor_block_cache_cap_within_process(s->opts_.max_memory);
  TSR_RETURN_IF_ERROR(prepare_for_plan(graph, PlanOptions{s->optimize_, /*fuse=*/false}));
  s->graph_ = std::move(graph);
  for (const auto& name : s->graph_.inputs) {
    const ValueInfo* vi = s->graph_.info(name);
    s->inputs_.push_back(IOInfo{name, vi ? vi->dtype : DType::kUndefined, vi ? vi->shape : Shape(), {}, {}});
  }
  for (const auto& kv : s->opts_.input_ranges) {
    const std::string& name = kv.first;
    const std::vector<DimRange>& ranges = kv.second;
    auto in = std::find_if(s->inputs_.begin(), s->inputs_.end(), [&](const IOInfo& i) { return i.name == name; });
    if (in == s->inputs_.end()) return InvalidInput("input ranges name '" + name + "', which is not a model input");
    if (in->shape.rank_known && in->shape.rank() != static_cast<int>(ranges.size())) {
      return InvalidInput("input '" + name + "' has rank " + std::to_string(in->shape.rank()) + ", but its ranges give " +
                          std::to_string(ranges.size()) + " dims");
    }
    for (const DimRange& r : ranges) {
      if (r.lo < 0 || r.hi < r.lo) return InvalidInput("input '" + name + "': bad range " + r.str());
    }
    in->ranges = ranges;
  }
  for (const auto& kv : s->opts_.sample_dims) {
    const std::string& name = kv.first;  // not a structured binding: a lambda captures it (clang before 16)
    auto in = std::find_if(s->inputs_.begin(), s->inputs_.end(), [&](const IOInfo& i) { return i.name == name; });
    if (in == s->inputs_.end()) return InvalidInput("--shape names '" + name + "', which is not a model input");
    TSR_RETURN_IF_ERROR(check_input(*in, in->dtype, kv.second));
    in->sample = kv.second;
  }
  for (const auto& name : s->graph_.outputs) {
    const ValueInfo* vi = s->graph_.info(name);
    s->outputs_.push_back(IOInfo{name, vi ? vi->dtype : DType::kUndefined, vi ? vi->shape : Shape(), {}, {}});
  }
  // Buckets: planned now, with the engines compiled for their dims.
  for (ProgramBucket& b : buckets) {
    if (b.inputs.size() != s->inputs_.size()) return InvalidModel("bucket " + bucket_str(b.inputs) + ": wrong input count");
    if (!b.lower.empty()) {  // one plan for every dims it serves, shaped as each run goes
      Graph g = std::move(b.graph);
      TSR_RETURN_IF_ERROR(prepare_for_plan(g, PlanOptions{s->optimize_, /*fuse=*/false}));
      auto plan = s->generic_plan(std::move(g));
      if (!plan.ok()) {
        return Status(plan.status().code(), "bucket " + bucket_str(b.inputs, b.lower) + ": " + plan.status().message());
      }
      s->masked_.push_back(MaskedBucket{std::move(b.lower), std::move(b.inputs), std::move(*plan)});
      continue;
    }
    auto plan = s->plan_graph(std::move(b.graph), b.inputs);
    if (!plan.ok()) {
      return Status(plan.status().code(), "bucket " + bucket_str(b.inputs) + ": " + plan.status().message());
    }
    s->buckets_[b.inputs] = std::move(*plan);
  }
  // Static inputs: plan now so the first run does no planning.
  std::vector<Dims> dims;
  bool all_static = true;
  for (const auto& in : s->inputs_) {
    if (!in.shape.fully_known()) all_static = false;
    else dims.push_back(in.shape.concrete());
  }
  if (all_static) {
    auto plan = s->plan_for(dims);
    if (!plan.ok()) return plan.status();
  } else if (s->opts_.plan_in_background) {
    // One plan for every shape (generic_plan). New shapes run on it while their own plans are built. A model it
    // cannot serve plans each shape in the run's path.
    if (auto generic = s->generic_plan(s->graph_); generic.ok()) s->generic_ = std::move(*generic);
  }
  return s;
}

Status InferenceSession::check_inputs(const std::vector<Tensor>& inputs) const {
  if (inputs.size() != inputs_.size()) {
    return InvalidInput("model expects " + std::to_string(inputs_.size()) + " inputs, got " +
                        std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) return InvalidInput("input '" + inputs_[i].name + "' is missing");
    TSR_RETURN_IF_ERROR(check_input(inputs_[i], inputs[i].dtype(), inputs[i].dims()));
  }
  return Status::Ok();
}

Expected<std::shared_ptr<const ExecutionPlan>> InferenceSession::plan_for(const std::vector<Dims>& dims,
                                                                         bool for_run, bool* bucket) const {
  if (bucket) *bucket = false;
  if (auto b = buckets_.find(dims); b != buckets_.end()) {
    if (for_run) runs_bucket_.fetch_add(1, std::memory_order_relaxed);
    if (bucket) *bucket = true;
    return b->second;
  }
  if (const MaskedBucket* m = masked_for(dims)) {
    if (for_run) runs_bucket_.fetch_add(1, std::memory_order_relaxed);
    if (bucket) *bucket = true;
    return m->plan;
  }
  std::shared_ptr<PlanSlot> slot;
  bool build = false;
  {
    std::lock_guard<std::mutex> lock(plans_mu_);
    auto it = plans_.find(dims);
    if (it != plans_.end() && it->second->built) {
      it->second->last_used = ++plan_clock_;
      if (for_run && it->second->bucket) runs_bucket_.fetch_add(1, std::memory_order_relaxed);
      if (bucket) *bucket = it->second->bucket;
      return it->second->plan.get();
    }
    if (for_run && generic_) {
      // Run now on the generic plan. A shape seen for the second time gets its own plan from the background (unless
      // the queue is full): a stream of shapes that never repeat builds nothing, and leaves the cores to the runs.
      runs_generic_.fetch_add(1, std::memory_order_relaxed);
      if (it != plans_.end()) {
        it->second->last_used = ++plan_clock_;
      } else if (!seen_once(dims)) {
        // First sight: remembered, and looked for in the engine cache.
        if (opts_.compile_bucket) queue_background_plan(dims, BgTask::kProbe);
      } else if (queue_background_plan(dims)) {
        auto e = std::make_shared<PlanSlot>();
        e->plan = e->promise.get_future().share();
        e->last_used = ++plan_clock_;
        e->queued = true;
        plans_.emplace(dims, std::move(e));
      }
      return generic_;
    }
    std::shared_ptr<PlanSlot>& e = plans_[dims];
    if (!e) {
      e = std::make_shared<PlanSlot>();
      e->plan = e->promise.get_future().share();
      build = true;
    }
    e->last_used = ++plan_clock_;
    slot = e;
  }
  if (for_run) runs_waited_.fetch_add(1, std::memory_order_relaxed);
  if (build) finish_plan(slot, dims, /*rethrow=*/true);
  return slot->plan.get();
}

void InferenceSession::finish_plan(const std::shared_ptr<PlanSlot>& slot, const std::vector<Dims>& dims,
                                   bool rethrow) const {
  Expected<std::shared_ptr<const ExecutionPlan>> built = InternalError("planning stopped");
  try {
    built = plan_graph(graph_, dims);
  } catch (...) {  // out of memory while planning: the runs waiting for this plan get it too
    slot->promise.set_exception(std::current_exception());
    std::lock_guard<std::mutex> lock(plans_mu_);
    if (auto it = plans_.find(dims); it != plans_.end() && it->second == slot) plans_.erase(it);
    if (rethrow) throw;
    return;
  }
  slot->promise.set_value(built);
  std::lock_guard<std::mutex> lock(plans_mu_);
  auto it = plans_.find(dims);
  if (!built.ok()) {
    if (it != plans_.end() && it->second == slot) plans_.erase(it);  // the next run tries again
  } else {
    fulfil_locked(*slot, *built, /*bucket=*/false);
  }
}

void InferenceSession::fulfil_locked(PlanSlot& slot, const std::shared_ptr<const ExecutionPlan>& plan,
                                     bool bucket) const {
  plans_built_.fetch_add(1, std::memory_order_relaxed);
  slot.built = true;
  slot.bucket = bucket;
  // A bucket's engines are its own (loaded for it alone): what they hold counts with its arena.
  slot.arena_bytes = plan->stats().arena_bytes;
  slot.engine_bytes = bucket && plan->engines() ? engine_bytes(*plan->engines()) : 0;
  if (slot.engine_bytes > 0 && opts_.max_memory > 0)
    slot.engines_held = std::make_unique<TensorMemoryReservation>(slot.engine_bytes);
  evict_plans_locked();
  update_spin_locked();
  if (opts_.max_memory > 0) lower_tensor_block_cache_cap_within_process(opts_.max_memory);  // the plan's heap
}

bool InferenceSession::native_pool_spins() const { return pool_->spins(); }

void InferenceSession::update_spin_locked() const {
  bool engines = !engines_->empty();
  for (auto it = plans_.begin(); !engines && it != plans_.end(); ++it) {
    if (!it->second->built || !it->second->bucket) continue;
    Expected<std::shared_ptr<const ExecutionPlan>> plan = it->second->plan.get();  // ready: built
    engines = plan.ok() && (*plan)->engines() && !(*plan)->engines()->empty();
  }
  pool_->set_spin(!engines);
}

void InferenceSession::note_run_without_bucket(const std::vector<Dims>& dims, double ms) const {
  {
    std::lock_guard<std::mutex> lock(spent_mu_);
    if (bucket_asked_.count(dims)) return;
    auto it = spent_ms_.find(dims);
    if (it == spent_ms_.end()) {
      if (spent_ms_.size() >= kMaxSeen) {  // forget the shape that has cost least
        spent_ms_.erase(std::min_element(spent_ms_.begin(), spent_ms_.end(),
                                         [](const auto& a, const auto& b) { return a.second.ms < b.second.ms; }));
      }
      it = spent_ms_.emplace(dims, Spent{}).first;
    }
    it->second.ms += ms;
    ++it->second.runs;
    // Before this session has timed a compile: 1 s, or kRunsPerCompile runs of this shape where that is more. A
    // compile runs the model at the shape many times itself (its end-to-end check times up to four plans: BERT-base
    // at 5x253 spent 37.5 s of its 48 s compile there, some 60 runs), so a model whose runs take half a second cannot
    // repay one after two of them. (BERT-base's stream compiled one after two runs of 0.6 s, beside the runs on two
    // cores, and its throughput fell from 0.90 of static artifacts to 0.77; the bucket came out native-only.)
    constexpr double kRunsPerCompile = 20;
    const double payback = opts_.bucket_payback_ms >= 0 ? opts_.bucket_payback_ms
                           : bucket_compiles_timed_ > 0
                               ? bucket_compile_ms_ / bucket_compiles_timed_
                               : std::max(1000.0, kRunsPerCompile * it->second.ms / it->second.runs);
    // A compile serves only the shape's later runs: one run, however long, is no sign that it comes back. (BERT-base
    // over 200 random shapes compiled 4 buckets beside the runs, each after one run of more than a second, for 1
    // request on them.) A payback of 0 asks for a compile at once.
    if (it->second.ms < payback || (payback > 0 && it->second.runs < 2)) return;
    bucket_asked_.insert(dims);
    spent_ms_.erase(it);
  }
  if (!queue_background_plan(dims, BgTask::kBucket)) {
    std::lock_guard<std::mutex> lock(spent_mu_);
    bucket_asked_.erase(dims);  // the queue is full: asked again after a later run
  }
}

void InferenceSession::build_bucket(const std::vector<Dims>& dims) const {
  {
    std::lock_guard<std::mutex> lock(plans_mu_);
    if (auto it = plans_.find(dims); it != plans_.end() && it->second->built && it->second->bucket) return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Expected<std::shared_ptr<const ExecutionPlan>> plan = InternalError("not compiled");
  try {
    plan = compile_bucket(dims, /*cached_only=*/false);
  } catch (const std::bad_alloc&) {
    plan = RuntimeError("out of memory compiling a bucket");
  }
  {
    std::lock_guard<std::mutex> lock(spent_mu_);
    bucket_compile_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++bucket_compiles_timed_;
    bucket_asked_.erase(dims);  // evicted later, the shape may earn one again (the engine cache keeps this one)
  }
  if (!plan.ok()) {  // the shape keeps its native plan
    bucket_compile_failures_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  buckets_compiled_.fetch_add(1, std::memory_order_relaxed);
  // In place of the shape's plan: runs that start later take the bucket, runs in flight finish on what they have.
  auto slot = std::make_shared<PlanSlot>();
  slot->plan = slot->promise.get_future().share();
  slot->promise.set_value(*plan);
  std::lock_guard<std::mutex> lock(plans_mu_);
  std::shared_ptr<PlanSlot>& cur = plans_[dims];
  if (cur && !cur->built) return;  // a run is building the shape's plan (it was evicted): the next ask compiles
  slot->last_used = cur ? cur->last_used : ++plan_clock_;
  cur = slot;
  fulfil_locked(*slot, *plan, /*bucket=*/true);
}

void InferenceSession::probe_cached_bucket(const std::vector<Dims>& dims) const {
  {
    std::lock_guard<std::mutex> lock(plans_mu_);
    if (auto it = plans_.find(dims); it != plans_.end() && it->second->built) return;
  }
  Expected<std::shared_ptr<const ExecutionPlan>> plan = InternalError("not probed");
  try {
    plan = compile_bucket(dims, /*cached_only=*/true);
  } catch (const std::bad_alloc&) {
    return;  // the second sight compiles it, or plans it natively
  }
  if (!plan.ok()) return;  // not cached
  buckets_compiled_.fetch_add(1, std::memory_order_relaxed);
  buckets_from_cache_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(plans_mu_);
  std::shared_ptr<PlanSlot>& slot = plans_[dims];
  // A slot another thread is building is theirs to fulfil. One a second sight queued here serves this bucket, and
  // its compile (later on this thread) is skipped.
  if (slot && (slot->built || !slot->queued)) return;
  if (!slot) {
    slot = std::make_shared<PlanSlot>();
    slot->plan = slot->promise.get_future().share();
    slot->last_used = ++plan_clock_;
    slot->queued = true;
  }
  slot->promise.set_value(*plan);
  fulfil_locked(*slot, *plan, /*bucket=*/true);
}

namespace {

// f() on a thread of its own that ends with it (its exceptions rethrown here), `nice` added to its priority (Linux
// nice is per thread; the threads it starts inherit it). libgomp gives each thread that starts a parallel region a
// team of its own for as long as it lives: a long-lived planner thread that compiled or loaded a oneDNN bucket kept
// one, libgomp then counted more OpenMP threads than CPUs and cut every worker's spin to a few hundred rounds, and
// the session's runs woke a sleeping worker at every primitive (kws's bucket at batch 5: 15 context switches a run,
// 1.19-1.25 ms against 1.02-1.03 with the team gone).
template <class T>
T on_thread_of_its_own(int nice, const std::function<T()>& f) {
  std::optional<T> out;
  std::exception_ptr failure;
  std::thread([&] {
    if (nice > 0) (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), nice);
    try {
      out.emplace(f());
    } catch (...) {
      failure = std::current_exception();
    }
  }).join();
  if (failure) std::rethrow_exception(failure);
  return std::move(*out);
}

}  // namespace

Expected<std::shared_ptr<const ExecutionPlan>> InferenceSession::compile_bucket(const std::vector<Dims>& dims,
                                                                               bool cached_only) const {
  // The compile runs below the runs: what it builds serves later requests, and the cores belong to the runs now.
  Program program;
  TSR_ASSIGN_OR_RETURN(
      program, on_thread_of_its_own<Expected<Program>>(10, [&] { return opts_.compile_bucket(dims, cached_only); }));
  if (!program.buckets.empty()) return InternalError("a compiled bucket has buckets of its own");
  // The plan holds a raw pointer to its engine table: one allocation keeps both, the plan destroyed first.
  struct Held {
    std::shared_ptr<const EngineTable> engines;
    std::shared_ptr<const ExecutionPlan> plan;
  };
  auto held = std::make_shared<Held>();
  // Its engines bring their own threads: as many as asked for, unless the bucket's compile measured fewer faster. The
  // session's own count may be lower, measured on the native plan at the low end of the ranges (kws, a keyword
  // spotter, on one thread at batch 1 natively, while its bucket's XNNPACK engine ran faster on two).
  SessionOptions engine_opts = opts_;
  engine_opts.num_threads = threads_for(program.meta, threads_asked_);
  // Loaded at the runs' priority, as the engines' pools it may start (XNNPACK's) serve them.
  TSR_ASSIGN_OR_RETURN(held->engines, on_thread_of_its_own<Expected<std::shared_ptr<const EngineTable>>>(
                                          0, [&] { return load_engines(program, engine_opts); }));
  TSR_ASSIGN_OR_RETURN(held->plan, plan_graph(std::move(program.graph), dims, held->engines.get()));
  const ExecutionPlan* plan = held->plan.get();
  return std::shared_ptr<const ExecutionPlan>(std::move(held), plan);
}

bool InferenceSession::seen_once(const std::vector<Dims>& dims) const {
  if (seen_.erase(dims)) return true;
  seen_.insert(dims);
  seen_order_.push_back(dims);
  while (seen_order_.size() > kMaxSeen) {  // forget the oldest (those already erased are skipped as gone)
    seen_.erase(seen_order_.front());
    seen_order_.pop_front();
  }
  return false;
}

bool InferenceSession::queue_background_plan(const std::vector<Dims>& dims, BgTask task) const {
  std::lock_guard<std::mutex> lock(bg_mu_);
  if (bg_stop_ || bg_queue_.size() >= kMaxPlans) return false;  // a burst of new shapes: they run generic
  bg_queue_.emplace_back(dims, task);
  if (!bg_thread_.joinable()) bg_thread_ = std::thread([this] { background_planner(); });
  bg_cv_.notify_all();
  return true;
}

void InferenceSession::background_planner() const {
  // At the runs' priority: threads it starts inherit it (compile_bucket lowers its compiles' own).
  for (;;) {
    std::vector<Dims> dims;
    BgTask task = BgTask::kPlan;
    {
      std::unique_lock<std::mutex> lock(bg_mu_);
      bg_cv_.wait(lock, [&] { return bg_stop_ || !bg_queue_.empty(); });
      if (bg_stop_) return;
      std::tie(dims, task) = std::move(bg_queue_.front());
      bg_queue_.pop_front();
      ++bg_busy_;
    }
    if (task == BgTask::kProbe) {
      probe_cached_bucket(dims);
    } else if (task == BgTask::kBucket) {
      build_bucket(dims);
    } else {
      std::shared_ptr<PlanSlot> slot;
      {
        std::lock_guard<std::mutex> lock(plans_mu_);
        if (auto it = plans_.find(dims); it != plans_.end() && !it->second->built) slot = it->second;
      }
      if (slot) finish_plan(slot, dims, /*rethrow=*/false);
    }
    {
      std::lock_guard<std::mutex> lock(bg_mu_);
      --bg_busy_;
    }
    bg_cv_.notify_all();
  }
}

void InferenceSession::wait_for_background_plans() const {
  std::unique_lock<std::mutex> lock(bg_mu_);
  bg_cv_.wait(lock, [&] { return bg_queue_.empty() && bg_busy_ == 0; });
}

void InferenceSession::evict_plans_locked() const {
  for (;;) {
    size_t bytes = 0;
    auto oldest = plans_.end();
    for (auto it = plans_.begin(); it != plans_.end(); ++it) {
      if (!it->second->built) continue;
      bytes += it->second->arena_bytes + it->second->engine_bytes;
      if (oldest == plans_.end() || it->second->last_used < oldest->second->last_used) oldest = it;
    }
    const bool over = plans_.size() > kMaxPlans || (opts_.max_memory > 0 && bytes > opts_.max_memory);
    // The newest plan stays: a run is using it. Runs in flight keep an evicted plan alive until they finish.
    if (!over || oldest == plans_.end() || oldest->second->last_used == plan_clock_) return;
    plans_.erase(oldest);
  }
}

Expected<std::shared_ptr<const ExecutionPlan>> InferenceSession::generic_plan(Graph g) const {
  const PlanOptions po{optimize_, opts_.fuse, opts_.max_memory, /*shapes_at_run_time=*/true, products_};
  if (po.fuse && !native_fusion_disabled_by_env()) {
    Graph fused = g;
    if (fuse_for_native(fused).ok()) g = std::move(fused);
  }
  std::shared_ptr<ExecutionPlan> plan;
  TSR_ASSIGN_OR_RETURN(plan, ExecutionPlan::Build(std::move(g), pool_.get(), engines_.get(), po));
  return std::shared_ptr<const ExecutionPlan>(plan);
}

Expected<std::shared_ptr<const ExecutionPlan>> InferenceSession::plan_graph(Graph g, const std::vector<Dims>& dims,
                                                                           const EngineTable* engines) const {
  for (size_t i = 0; i < g.inputs.size() && i < dims.size(); ++i) {
    ValueInfo& vi = g.values[g.inputs[i]];
    // Keep dtype; pin the shape to the concrete one.
    vi.shape = Shape::FromDims(dims[i]);
  }
  // Fusion after partitioning and optimisation, on what native runs only.
  const PlanOptions po{optimize_, opts_.fuse, opts_.max_memory, /*shapes_at_run_time=*/false, products_};
  TSR_RETURN_IF_ERROR(prepare_for_plan(g, po));
  std::shared_ptr<ExecutionPlan> plan;
  TSR_ASSIGN_OR_RETURN(plan, ExecutionPlan::Build(std::move(g), pool_.get(), engines ? engines : engines_.get(), po));
  return std::shared_ptr<const ExecutionPlan>(plan);
}

std::vector<std::vector<Dims>> InferenceSession::cached_plan_shapes() const {
  std::vector<std::pair<uint64_t, std::vector<Dims>>> by_use;
  {
    std::lock_guard<std::mutex> lock(plans_mu_);
    for (const auto& [dims, slot] : plans_) by_use.emplace_back(slot->last_used, dims);
  }
  std::sort(by_use.begin(), by_use.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::vector<Dims>> out;
  for (auto& [use, dims] : by_use) out.push_back(std::move(dims));
  return out;
}

InferenceSession::PlanCacheBytes InferenceSession::plan_cache_bytes() const {
  PlanCacheBytes b;
  std::lock_guard<std::mutex> lock(plans_mu_);
  for (const auto& kv : plans_) {
    if (!kv.second->built) continue;
    b.arenas += kv.second->arena_bytes;
    b.engines += kv.second->engine_bytes;
  }
  return b;
}

std::vector<std::vector<Dims>> InferenceSession::bucket_shapes() const {
  std::vector<std::vector<Dims>> out;
  for (const auto& kv : buckets_) out.push_back(kv.first);
  for (const MaskedBucket& m : masked_) out.push_back(m.upper);
  return out;
}

const InferenceSession::MaskedBucket* InferenceSession::masked_for(const std::vector<Dims>& dims) const {
  for (const MaskedBucket& m : masked_) {
    bool in = m.upper.size() == dims.size();
    for (size_t i = 0; in && i < dims.size(); ++i) {
      in = dims[i].size() == m.upper[i].size();
      for (size_t k = 0; in && k < dims[i].size(); ++k) in = m.lower[i][k] <= dims[i][k] && dims[i][k] <= m.upper[i][k];
    }
    if (in) return &m;
  }
  return nullptr;
}

Expected<std::vector<Tensor>> InferenceSession::run(const std::vector<Tensor>& inputs, RunProfile* profile) const {
  RunOptions ro;
  ro.profile = profile;
  return run(inputs, ro);
}

Expected<std::vector<Tensor>> InferenceSession::run(const std::vector<Tensor>& inputs, const RunOptions& ro) const {
  TSR_RETURN_IF_ERROR(check_inputs(inputs));
  if (ro.bound_outputs && ro.bound_outputs->size() > outputs_.size()) {
    return InvalidInput(std::to_string(ro.bound_outputs->size()) + " output buffers for a model with " +
                        std::to_string(outputs_.size()) + " outputs");
  }
  std::vector<Dims> dims;
  dims.reserve(inputs.size());
  for (const auto& t : inputs) dims.push_back(t.dims());
  std::shared_ptr<const ExecutionPlan> plan;
  bool bucket = false;
  TSR_ASSIGN_OR_RETURN(plan, plan_for(dims, /*for_run=*/true, &bucket));
  if (!opts_.compile_bucket || bucket) return plan->run(inputs, ro);
  const auto t0 = std::chrono::steady_clock::now();
  auto out = plan->run(inputs, ro);
  if (out.ok()) note_run_without_bucket(dims, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return out;
}

Expected<std::vector<Tensor>> InferenceSession::run(const std::map<std::string, Tensor>& inputs) const {
  std::vector<Tensor> ordered;
  for (const auto& in : inputs_) {
    auto it = inputs.find(in.name);
    if (it == inputs.end()) return InvalidInput("input '" + in.name + "' is missing");
    ordered.push_back(it->second);
  }
  for (const auto& kv : inputs) {
    bool known = false;
    for (const auto& in : inputs_) known = known || in.name == kv.first;
    if (!known) return InvalidInput("the model has no input named '" + kv.first + "'");
  }
  return run(ordered);
}

Expected<RunStats> InferenceSession::stats(const std::vector<Dims>& input_dims) const {
  std::shared_ptr<const ExecutionPlan> plan;
  TSR_ASSIGN_OR_RETURN(plan, plan_for(input_dims));
  return plan->stats();
}

}  // namespace tessera
