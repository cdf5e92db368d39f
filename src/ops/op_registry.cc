#include "ops/op_registry.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "util/human_bytes.h"

namespace tessera {

#define TSR_FAMILY(f) TSR_REGISTER_OPS(f);
#include "ops/op_list.inc"
#undef TSR_FAMILY

InferContext::InferContext(const Node& node, int64_t opset, std::vector<ValueInfo> in_info,
                           std::vector<const Tensor*> in_values)
    : node_(node), opset_(opset), in_info_(std::move(in_info)), in_values_(std::move(in_values)) {
  outputs_.resize(node.outputs.size());
  in_values_.resize(in_info_.size(), nullptr);
}

DType InferContext::in_dtype(int i) const {
  return i < num_inputs() ? in_info_[static_cast<size_t>(i)].dtype : DType::kUndefined;
}

const Shape& InferContext::in_shape(int i) const {
  static const Shape kUnranked;
  return i < num_inputs() ? in_info_[static_cast<size_t>(i)].shape : kUnranked;
}

const Tensor* InferContext::in_value(int i) const {
  return i < num_inputs() ? in_values_[static_cast<size_t>(i)] : nullptr;
}

void InferContext::set_output(int i, DType dtype, Shape shape) {
  if (i < 0 || i >= num_outputs()) return;
  if (size_error_.ok() && shape.fully_known()) {
    const std::string problem = tensor_size_problem(shape.concrete(), dtype_size(dtype));
    if (!problem.empty()) {
      size_error_ = error("output " + std::to_string(i) + ": shape " + shape.str() + " " + problem);
    }
  }
  outputs_[static_cast<size_t>(i)] = ValueInfo{dtype, std::move(shape)};
}

namespace {
std::atomic<InputTypeCheck> g_input_type_check{nullptr};
}  // namespace

void set_input_type_check(InputTypeCheck check) { g_input_type_check.store(check); }

Status run_infer(const OpSchema& schema, InferContext& ctx) {
  if (InputTypeCheck check = g_input_type_check.load(std::memory_order_relaxed)) TSR_RETURN_IF_ERROR(check(ctx));
  TSR_RETURN_IF_ERROR(schema.infer(ctx));
  return ctx.size_error();
}

Status MemoryBudget::reserve(const Node& node, int output, const Dims& dims, size_t bytes) {
  if (limit > 0 && bytes > limit - std::min(held, limit)) {
    return InvalidInput(node.describe() + ": output " + std::to_string(output) + " " + dims_str(dims) +
                        " would bring the run to " + human_bytes(held + bytes) + ", more than the memory limit of " +
                        human_bytes(limit));
  }
  held += bytes;
  return Status::Ok();
}

Expected<Tensor*> KernelContext::allocate_output(int i, DType dtype, Dims dims) {
  Tensor* t = output(i);
  if (!t) return t;
  const std::string problem = tensor_size_problem(dims, dtype_size(dtype));
  if (!problem.empty()) return error("output " + std::to_string(i) + ": " + problem);
  if (budget_) TSR_RETURN_IF_ERROR(budget_->reserve(node_, i, dims, static_cast<size_t>(numel(dims)) * dtype_size(dtype)));
  *t = Tensor(dtype, std::move(dims));
  return t;
}

OpRegistry& OpRegistry::instance() {
  static OpRegistry* reg = [] {
    auto* r = new OpRegistry();
#define TSR_FAMILY(f) register_ops_##f(*r);
#include "ops/op_list.inc"
#undef TSR_FAMILY
    return r;
  }();
  return *reg;
}

void OpRegistry::add(OpSchema schema) {
  if (find(schema.domain, schema.op_type)) {
    std::fprintf(stderr, "tessera: op %s registered twice\n", schema.op_type.c_str());
    std::abort();
  }
  ops_.push_back(std::move(schema));
}

const OpSchema* OpRegistry::find(const std::string& domain, const std::string& op_type) const {
  std::string d = domain == "ai.onnx" ? "" : domain;
  for (const auto& s : ops_) {
    if (s.op_type == op_type && s.domain == d) return &s;
  }
  return nullptr;
}

std::vector<std::string> OpRegistry::op_types() const {
  std::vector<std::string> v;
  for (const auto& s : ops_) v.push_back(s.domain.empty() ? s.op_type : s.domain + "." + s.op_type);
  std::sort(v.begin(), v.end());
  return v;
}

Expected<std::unique_ptr<Kernel>> create_kernel(const OpSchema& schema, const KernelInit& init) {
  if (schema.create) return schema.create(init);
  if (schema.fn) return std::unique_ptr<Kernel>(std::make_unique<FnKernel>(schema.fn));
  return Unsupported(init.node.describe() + ": no native kernel");
}

Status infer_same_as_input0(InferContext& ctx) {
  for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, ctx.in_dtype(0), ctx.in_shape(0));
  return Status::Ok();
}

Status infer_broadcast(InferContext& ctx, DType out_dtype) {
  Shape out;
  bool first = true;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    if (first) {
      out = ctx.in_shape(i);
      first = false;
      continue;
    }
    Shape next;
    if (!broadcast_shapes(out, ctx.in_shape(i), &next)) {
      return ctx.error("shapes " + out.str() + " and " + ctx.in_shape(i).str() + " cannot be broadcast");
    }
    out = std::move(next);
  }
  ctx.set_output(0, out_dtype == DType::kUndefined ? ctx.in_dtype(0) : out_dtype, out);
  return Status::Ok();
}

std::vector<int64_t> contiguous_strides(const Dims& d) {
  std::vector<int64_t> s(d.size());
  int64_t acc = 1;
  for (size_t i = d.size(); i-- > 0;) {
    s[i] = acc;
    acc *= d[i];
  }
  return s;
}

std::vector<int64_t> broadcast_strides(const Dims& in, const Dims& out) {
  std::vector<int64_t> s(out.size(), 0);
  std::vector<int64_t> cs = contiguous_strides(in);
  size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) s[off + i] = in[i] == 1 ? 0 : cs[i];
  return s;
}

}  // namespace tessera
