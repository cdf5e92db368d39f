#include "runtime/session.h"

#include <thread>

#include "onnx/onnx_import.h"
#include "passes/shape_inference.h"
#include "runtime/execution_plan.h"

#if __has_include("passes/pipeline.h")
#include "passes/pipeline.h"
#define TESSERA_HAVE_PIPELINE 1
#endif

namespace tessera {

namespace {

Status optimize(Graph& g, bool full) {
#ifdef TESSERA_HAVE_PIPELINE
  if (full) {
    OptimizeOptions o;
    return optimize_graph(g, o);
  }
#else
  (void)full;
#endif
  unshare_nested_graphs(g);  // inference writes types into nested graphs
  return infer_shapes(g);
}

std::string sig_str(DType dt, const Shape& s) { return std::string(dtype_name(dt)) + s.str(); }

}  // namespace

InferenceSession::~InferenceSession() = default;

Expected<std::unique_ptr<InferenceSession>> InferenceSession::Load(const std::string& onnx_path,
                                                                   const SessionOptions& opts) {
  Graph g;
  TSR_ASSIGN_OR_RETURN(g, import_onnx_file(onnx_path));
  return Create(std::move(g), opts);
}

Expected<std::unique_ptr<InferenceSession>> InferenceSession::Create(Graph graph, const SessionOptions& opts) {
  std::unique_ptr<InferenceSession> s(new InferenceSession());
  s->opts_ = opts;
  int threads = opts.num_threads > 0 ? opts.num_threads : static_cast<int>(std::thread::hardware_concurrency());
  s->pool_ = std::make_unique<ThreadPool>(std::max(1, threads));
  TSR_RETURN_IF_ERROR(optimize(graph, opts.optimize));
  s->graph_ = std::move(graph);
  for (const auto& name : s->graph_.inputs) {
    const ValueInfo* vi = s->graph_.info(name);
    s->inputs_.push_back(IOInfo{name, vi ? vi->dtype : DType::kUndefined, vi ? vi->shape : Shape()});
  }
  for (const auto& name : s->graph_.outputs) {
    const ValueInfo* vi = s->graph_.info(name);
    s->outputs_.push_back(IOInfo{name, vi ? vi->dtype : DType::kUndefined, vi ? vi->shape : Shape()});
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
  }
  return s;
}

Status InferenceSession::check_inputs(const std::vector<Tensor>& inputs) const {
  if (inputs.size() != inputs_.size()) {
    return InvalidInput("model expects " + std::to_string(inputs_.size()) + " inputs, got " +
                        std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const IOInfo& want = inputs_[i];
    const Tensor& got = inputs[i];
    if (!got.defined()) return InvalidInput("input '" + want.name + "' is missing");
    bool ok = want.dtype == DType::kUndefined || want.dtype == got.dtype();
    if (ok && want.shape.rank_known) {
      ok = want.shape.rank() == got.rank();
      for (int d = 0; ok && d < got.rank(); ++d) {
        if (want.shape[d].known() && want.shape[d].value != got.dim(d)) ok = false;
      }
    }
    if (!ok) {
      return InvalidInput("input '" + want.name + "': expected " + sig_str(want.dtype, want.shape) + ", got " +
                          got.str());
    }
  }
  return Status::Ok();
}

Expected<std::shared_ptr<const ExecutionPlan>> InferenceSession::plan_for(const std::vector<Dims>& dims) const {
  std::lock_guard<std::mutex> lock(plans_mu_);
  auto it = plans_.find(dims);
  if (it != plans_.end()) return it->second;
  Graph g = graph_;
  for (size_t i = 0; i < g.inputs.size() && i < dims.size(); ++i) {
    ValueInfo& vi = g.values[g.inputs[i]];
    // Keep dtype; pin the shape to the concrete one.
    vi.shape = Shape::FromDims(dims[i]);
  }
  TSR_RETURN_IF_ERROR(optimize(g, opts_.optimize));
  std::shared_ptr<ExecutionPlan> plan;
  TSR_ASSIGN_OR_RETURN(plan, ExecutionPlan::Build(std::move(g), pool_.get()));
  // A small cache: models are usually run with a handful of shapes.
  if (plans_.size() >= 16) plans_.erase(plans_.begin());
  plans_[dims] = plan;
  return std::shared_ptr<const ExecutionPlan>(plan);
}

Expected<std::vector<Tensor>> InferenceSession::run(const std::vector<Tensor>& inputs, RunProfile* profile) const {
  TSR_RETURN_IF_ERROR(check_inputs(inputs));
  std::vector<Dims> dims;
  dims.reserve(inputs.size());
  for (const auto& t : inputs) dims.push_back(t.dims());
  std::shared_ptr<const ExecutionPlan> plan;
  TSR_ASSIGN_OR_RETURN(plan, plan_for(dims));
  return plan->run(inputs, profile);
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
