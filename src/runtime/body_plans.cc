#include "runtime/body_plans.h"

#include <algorithm>
#include <unordered_set>

#include "passes/native_fusion.h"
#include "passes/shape_inference.h"
#include "runtime/execution_plan.h"

#if __has_include("passes/pipeline.h")
#include "passes/pipeline.h"
#define TESSERA_HAVE_PIPELINE 1
#endif

namespace tessera {

Status prepare_for_plan(Graph& g, const PlanOptions& opts) {
#ifdef TESSERA_HAVE_PIPELINE
  if (opts.optimize) {
    TSR_RETURN_IF_ERROR(optimize_graph(g, OptimizeOptions{}));
  } else {
    unshare_nested_graphs(g);  // inference writes types into nested graphs
    TSR_RETURN_IF_ERROR(infer_shapes(g));
  }
#else
  unshare_nested_graphs(g);
  TSR_RETURN_IF_ERROR(infer_shapes(g));
#endif
  if (opts.fuse && !native_fusion_disabled_by_env()) TSR_RETURN_IF_ERROR(fuse_for_native(g));
  return Status::Ok();
}

BodyPlanCache::~BodyPlanCache() = default;

int BodyPlanCache::num_plans() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& kv : bodies_) {
    for (const auto& p : kv.second.plans) n += p.second ? 1 : 0;
  }
  return n;
}

std::shared_ptr<const ExecutionPlan> BodyPlanCache::plan_for(const Graph& g, const std::vector<Tensor>& inputs,
                                                            const ValueScope& outer,
                                                            std::vector<Tensor>* plan_inputs) {
  // An If branch gets no inputs; Loop and Scan bind all of them. Anything else
  // (fewer values than formal inputs) is the eager runner's to judge.
  if (inputs.size() != g.inputs.size()) return nullptr;
  for (const Tensor& t : inputs) {
    if (!t.defined()) return nullptr;
  }
  std::lock_guard<std::mutex> lock(mu_);
  Body& body = bodies_[&g];
  if (body.eager) return nullptr;
  if (body.plans.empty()) {
    std::unordered_set<std::string> caps;
    collect_graph_captures(g, &caps);
    body.captures.assign(caps.begin(), caps.end());
    std::sort(body.captures.begin(), body.captures.end());
  }

  // The signature: formal inputs, then each outer value read (constants by
  // identity: they are the same tensors for the life of the outer plan).
  // Each value as its dtype, rank and dims; a constant as -1.
  std::vector<int64_t> sig;
  auto add = [&sig](const Tensor& t) {
    sig.push_back(static_cast<int64_t>(t.dtype()));
    sig.push_back(static_cast<int64_t>(t.dims().size()));
    sig.insert(sig.end(), t.dims().begin(), t.dims().end());
  };
  std::vector<const Tensor*> captured(body.captures.size(), nullptr);
  std::vector<bool> is_const(body.captures.size(), false);
  for (const Tensor& t : inputs) add(t);
  for (size_t i = 0; i < body.captures.size(); ++i) {
    const std::string& name = body.captures[i];
    if (const Tensor* c = outer.lookup_constant(name)) {
      captured[i] = c;
      is_const[i] = true;
      sig.push_back(-1);
      continue;
    }
    captured[i] = outer.lookup(name);
    if (!captured[i]) return nullptr;  // not computed (yet): the eager runner reports it
    add(*captured[i]);
  }
  plan_inputs->assign(inputs.begin(), inputs.end());
  for (size_t i = 0; i < captured.size(); ++i) {
    if (!is_const[i]) plan_inputs->push_back(*captured[i]);
  }

  auto it = body.plans.find(sig);
  if (it != body.plans.end()) return it->second;
  if (static_cast<int>(body.plans.size()) >= kMaxPlansPerBody) {
    body.eager = true;
    body.plans.clear();
    return nullptr;
  }

  // A private copy of the body in which what it reads from outside is its own.
  Graph b = g;
  for (size_t i = 0; i < inputs.size(); ++i) {
    b.values[b.inputs[i]] = ValueInfo{inputs[i].dtype(), Shape::FromDims(inputs[i].dims())};
  }
  for (size_t i = 0; i < body.captures.size(); ++i) {
    const std::string& name = body.captures[i];
    b.values[name] = ValueInfo{captured[i]->dtype(), Shape::FromDims(captured[i]->dims())};
    if (is_const[i]) b.constants[name] = *captured[i];
    else b.inputs.push_back(name);
  }
  std::shared_ptr<const ExecutionPlan> plan;
  if (prepare_for_plan(b, opts_).ok()) {
    auto built = ExecutionPlan::Build(std::move(b), pool_, engines_, opts_);
    if (built.ok()) plan = std::move(built).value();
  }
  body.plans[sig] = plan;  // null: this signature runs eagerly
  return plan;
}

Expected<std::vector<Tensor>> BodyPlanCache::run(const Graph& g, const std::vector<Tensor>& inputs,
                                                 const ValueScope& outer, int64_t opset) {
  std::vector<Tensor> plan_inputs;
  if (auto plan = plan_for(g, inputs, outer, &plan_inputs)) return plan->run(plan_inputs);
  EagerSubgraphRunner eager(&outer, opset, pool_, engines_);
  return eager.run(g, inputs);
}

}  // namespace tessera
