// Operator semantics for the native backend: for every supported ONNX op, a
// shape/type inference function and a kernel factory. The op list lives in
// op_list.inc; each family file (elementwise.cc, conv.cc, ...) registers the
// ops of its family with TSR_REGISTER_OPS.
//
// Inference runs in two settings with the same code:
//  * at compile time, on symbolic shapes, with input *values* only for
//    constants (in_value() returns null otherwise);
//  * at plan/run time, on concrete shapes, where in_value() may be available
//    for every input the op declares as shape-relevant.
// An inference function must therefore handle unknown dims and absent values
// by producing unknown dims (never an error), and must report an error only
// for inputs that are definitely invalid.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"
#include "ops/kernels/gemm.h"
#include "util/parallel.h"
#include "util/status.h"

namespace tessera {

class InferContext;
struct OpSchema;
// The installed input-type check (below), then schema.infer(ctx), then the size check of every output set.
Status run_infer(const OpSchema& schema, InferContext& ctx);
// A check of a node's input dtypes against its op's definition, run before every inference: kernels read their
// inputs as the types the op allows, so a model that binds one type parameter to two dtypes must stop here. The ONNX
// frontend installs one built on ONNX's schemas when it first imports a model; until then there is none.
using InputTypeCheck = Status (*)(const InferContext& ctx);
void set_input_type_check(InputTypeCheck check);

class InferContext {
 public:
  InferContext(const Node& node, int64_t opset, std::vector<ValueInfo> in_info,
               std::vector<const Tensor*> in_values);

  const Node& node() const { return node_; }
  int64_t opset() const { return opset_; }
  int num_inputs() const { return static_cast<int>(in_info_.size()); }
  bool has_input(int i) const { return node_.has_input(i); }
  DType in_dtype(int i) const;
  const Shape& in_shape(int i) const;
  // Content of input i when known (constants at compile time, everything at
  // run time), else null.
  const Tensor* in_value(int i) const;
  int num_outputs() const { return static_cast<int>(node_.outputs.size()); }

  // A fully known shape beyond kMaxTensorBytes becomes the context's error (check_output_sizes).
  void set_output(int i, DType dtype, Shape shape);
  void set_output(int i, DType dtype, const Dims& dims) { set_output(i, dtype, Shape::FromDims(dims)); }
  const std::vector<ValueInfo>& outputs() const { return outputs_; }

  // Error helper: "node 'x' (Op): <msg>".
  Status error(const std::string& msg) const { return InvalidModel(node_.describe() + ": " + msg); }
  // The first output shape set too large to allocate, as an error naming the node and the output.
  const Status& size_error() const { return size_error_; }

 private:
  const Node& node_;
  int64_t opset_;
  std::vector<ValueInfo> in_info_;
  std::vector<const Tensor*> in_values_;
  std::vector<ValueInfo> outputs_;
  Status size_error_;
};

using InferFn = Status (*)(InferContext&);

// Runs a nested graph (If/Loop/Scan bodies). Provided by the executor.
class SubgraphRunner {
 public:
  virtual ~SubgraphRunner() = default;
  // `inputs` bind the subgraph's formal inputs in order; outer-scope values
  // are resolved by name from the calling frame.
  virtual Expected<std::vector<Tensor>> run(const Graph& g, const std::vector<Tensor>& inputs) = 0;
};

// The memory limit of one run (SessionOptions::max_memory) and what the run holds so far; kept by the executor.
struct MemoryBudget {
  size_t limit = 0;  // 0: none
  size_t held = 0;
  // Counts `bytes` more for output `output` of `node` (dims for the message); past the limit, an error naming them.
  Status reserve(const Node& node, int output, const Dims& dims, size_t bytes);
  // Gives back `bytes` reserved earlier (a tensor freed after its last use).
  void release(size_t bytes) { held -= std::min(held, bytes); }
};

class KernelContext {
 public:
  KernelContext(const Node& node, std::vector<const Tensor*> inputs, std::vector<Tensor*> outputs,
                Parallel* pool, SubgraphRunner* subgraphs, MemoryBudget* budget = nullptr)
      : node_(node),
        inputs_(std::move(inputs)),
        outputs_(std::move(outputs)),
        pool_(pool),
        subgraphs_(subgraphs),
        budget_(budget) {}

  const Node& node() const { return node_; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  // Null when the optional input is absent.
  const Tensor* input(int i) const {
    return i < static_cast<int>(inputs_.size()) ? inputs_[static_cast<size_t>(i)] : nullptr;
  }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  // Preallocated output with the dtype/shape inference gave; null for an
  // unused optional output. For ops whose output shape depends on running
  // (control flow, NonMaxSuppression: inference leaves a dim unknown even
  // with input values), the tensor is undefined and the kernel must call
  // allocate_output.
  Tensor* output(int i) const {
    return i < static_cast<int>(outputs_.size()) ? outputs_[static_cast<size_t>(i)] : nullptr;
  }
  // Allocates output i (null for an unused optional output). It counts against the run's memory budget, when there
  // is one: past the limit, or too large to exist at all, it is an error naming the node.
  Expected<Tensor*> allocate_output(int i, DType dtype, Dims dims);
  Parallel& pool() const { return *pool_; }
  SubgraphRunner* subgraphs() const { return subgraphs_; }
  Status error(const std::string& msg) const { return RuntimeError(node_.describe() + ": " + msg); }

 private:
  const Node& node_;
  std::vector<const Tensor*> inputs_;
  std::vector<Tensor*> outputs_;
  Parallel* pool_;
  SubgraphRunner* subgraphs_;
  MemoryBudget* budget_;
};

// A prepared kernel for one node. run() must be safe to call from several
// threads at once (prepared state is read-only after creation).
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual Status run(KernelContext& ctx) const = 0;
};

struct KernelInit {
  const Node& node;
  int64_t opset;
  std::vector<ValueInfo> in_info;           // compile-time types/shapes of inputs
  std::vector<const Tensor*> const_inputs;  // constant inputs (e.g. weights) or null
  // What products of constant weights, and MatMul/Gemm products of two run-time operands, may compute in: bf16 or
  // fp16 (--precision; the GEMM decides whether the CPU can: kernels/gemm.h).
  kernels::Products products = kernels::Products::kFp32;
};

using KernelFactory = Expected<std::unique_ptr<Kernel>> (*)(const KernelInit&);

// A stateless kernel from a plain function.
using KernelFn = Status (*)(KernelContext&);
class FnKernel final : public Kernel {
 public:
  explicit FnKernel(KernelFn fn) : fn_(fn) {}
  Status run(KernelContext& ctx) const override { return fn_(ctx); }

 private:
  KernelFn fn_;
};

struct OpSchema {
  std::string op_type;
  std::string domain;      // "" = default ONNX domain
  InferFn infer = nullptr;
  KernelFactory create = nullptr;
  KernelFn fn = nullptr;   // used when create is null: a stateless kernel
  // Inputs whose *content* shapes the outputs (Reshape's shape, Slice's
  // starts...). The planner asks for their values at plan time.
  std::vector<int> shape_inputs;
};

class OpRegistry {
 public:
  static OpRegistry& instance();
  void add(OpSchema schema);
  const OpSchema* find(const std::string& domain, const std::string& op_type) const;
  std::vector<std::string> op_types() const;

 private:
  std::vector<OpSchema> ops_;
};

// Creates the kernel for a node through its schema.
Expected<std::unique_ptr<Kernel>> create_kernel(const OpSchema& schema, const KernelInit& init);

// Registration: in a family file,
//   TSR_REGISTER_OPS(elementwise) {
//     reg.add({"Relu", "", infer_unary, nullptr, run_relu});
//   }
// The family name must appear in op_list.inc.
using RegisterFn = void (*)(OpRegistry& reg);
#define TSR_REGISTER_OPS(family) void register_ops_##family(::tessera::OpRegistry& reg)

// ---- helpers shared by inference functions -------------------------------

// Output 0 = input 0's dtype and shape.
Status infer_same_as_input0(InferContext& ctx);
// Output 0 = broadcast of all present inputs; dtype of input 0 (or `out_dtype`).
Status infer_broadcast(InferContext& ctx, DType out_dtype = DType::kUndefined);

// ---- helpers shared by kernels -------------------------------------------

// Iterates over the broadcast of `in` to `out` dims: strides of `in` aligned
// to out's rank with 0 for broadcast dims.
std::vector<int64_t> broadcast_strides(const Dims& in, const Dims& out);
std::vector<int64_t> contiguous_strides(const Dims& d);

}  // namespace tessera
