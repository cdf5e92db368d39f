// ONNX node -> program ops, or a refusal whose text a user reads.
//
// Each supported ONNX op has one handler (the table in dnnl_lowering.cc); a
// handler reads the node's attributes and operands through Lowering and
// emits one or more simple ops (a Gemm with alpha and C becomes MatMul,
// Eltwise, Binary). Fusing them into post-ops is a later, separate pass
// (dnnl_fusion.cc). Shapes come from the region model, which Tessera fills in
// for every value; every op emitted is checked with check_op.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "dnnl_patterns.h"
#include "dnnl_program.h"
#include "plugin_util.h"

namespace tessera_dnnl {

// A node this backend cannot run; `reason` is shown to the user.
struct Refusal {
  std::string reason;
};

class Lowering {
 public:
  explicit Lowering(const tessera_plugin::ModelView& model);

  // Lowers node `index` and appends its ops to the program; throws Refusal
  // (and leaves the program unchanged) when the node cannot be run.
  void lower(int index);
  // After every node: the region's boundary, then the finished program.
  // Fails with TESSERA_ERROR_UNSUPPORTED naming the first refused node.
  static Program lower_all(const tessera_plugin::ModelView& model);
  const Program& program() const { return program_; }
  // Multi-node patterns in the model (dnnl_patterns.h): their inner nodes
  // lower to nothing, their last node to the whole op.
  const std::vector<Pattern>& patterns() const { return patterns_; }

  // ---- for the handlers ----
  const tessera_plugin::ModelView& model() const { return model_; }
  int64_t opset() const { return model_.opset(); }
  // The id of value `name` (interned on first use) after the checks every
  // operand shares: float32 (or one of `dtypes`, a bit per TESSERA_DTYPE_*
  // value: an integer op's operands), static shape, rank <= 8, at least one
  // element.
  static constexpr uint32_t kFloat32 = 1u << 1;
  static constexpr uint32_t k8Bit = (1u << 2) | (1u << 3);
  int32_t value(const std::string& name, const char* role = "input", uint32_t dtypes = kFloat32);
  // The id of a fresh intermediate value for a node emitting several ops.
  int32_t temp(const onnx::NodeProto& n, const Dims& dims);
  Dims dims(int32_t id) const { return program_.values[static_cast<size_t>(id)].dims; }  // a copy: interning moves values
  bool is_constant(const std::string& name) const { return model_.is_initializer(name); }
  // Values of a constant input (any numeric dtype), or a Refusal naming it
  // "<what> is not constant".
  std::vector<float> constant_floats(const std::string& name, const std::string& what) const;
  std::vector<int64_t> constant_ints(const std::string& name, const std::string& what) const;
  // Appends `op` after check_op; a failed check refuses the node.
  void emit(Op op);
  // The node's output `i` as the op output (interned, fresh).
  int32_t output(const onnx::NodeProto& n, int i = 0, uint32_t dtypes = kFloat32);
  // DynamicQuantizeLinear: the kQuantParams value {scale, zero point} computed with its quantized output `y`
  // (-1 when `y` was not quantized in this region).
  void set_quant_params(const std::string& y, int32_t params) { quant_params_[y] = params; }
  int32_t quant_params(const std::string& y) const {
    auto it = quant_params_.find(y);
    return it == quant_params_.end() ? -1 : it->second;
  }
  // Whether node `i` belongs to a dynamically quantized convolution or matmul (dnnl_patterns.h).
  bool in_dyn_conv(int i) const {
    auto it = pattern_of_.find(i);
    return it != pattern_of_.end() && (patterns_[it->second].kind == Pattern::Kind::kDynConv ||
                                       patterns_[it->second].kind == Pattern::Kind::kDynMatMul);
  }

 private:
  const tessera_plugin::ModelView& model_;
  Program program_;
  int32_t boundary_input(const std::string& name);
  void lower_pattern(const Pattern& p, const onnx::NodeProto& last);

  std::map<std::string, int32_t> index_;
  std::map<std::string, bool> produced_;
  std::vector<Pattern> patterns_;
  std::map<int, size_t> pattern_of_;  // node index -> pattern
  std::map<std::string, int32_t> quant_params_;
  const onnx::NodeProto* current_ = nullptr;
  int temps_ = 0;
};

// Handlers, by family (dnnl_lower_nn.cc, dnnl_lower_math.cc).
using Handler = void (*)(Lowering&, const onnx::NodeProto&);
void lower_conv(Lowering& l, const onnx::NodeProto& n);
void lower_conv_transpose(Lowering& l, const onnx::NodeProto& n);
void lower_pool(Lowering& l, const onnx::NodeProto& n);
void lower_resize(Lowering& l, const onnx::NodeProto& n);
void lower_global_pool(Lowering& l, const onnx::NodeProto& n);
void lower_batch_norm(Lowering& l, const onnx::NodeProto& n);
void lower_lrn(Lowering& l, const onnx::NodeProto& n);
void lower_softmax(Lowering& l, const onnx::NodeProto& n);
void lower_layer_norm(Lowering& l, const onnx::NodeProto& n);
void lower_eltwise(Lowering& l, const onnx::NodeProto& n);
void lower_binary(Lowering& l, const onnx::NodeProto& n);
void lower_variadic(Lowering& l, const onnx::NodeProto& n);
void lower_gemm(Lowering& l, const onnx::NodeProto& n);
void lower_matmul(Lowering& l, const onnx::NodeProto& n);
void lower_concat(Lowering& l, const onnx::NodeProto& n);
void lower_view(Lowering& l, const onnx::NodeProto& n);
void lower_split(Lowering& l, const onnx::NodeProto& n);
void lower_slice(Lowering& l, const onnx::NodeProto& n);
void lower_gather(Lowering& l, const onnx::NodeProto& n);
void lower_transpose(Lowering& l, const onnx::NodeProto& n);
void lower_reduce(Lowering& l, const onnx::NodeProto& n);
void lower_prelu(Lowering& l, const onnx::NodeProto& n);
void lower_qlinear_conv(Lowering& l, const onnx::NodeProto& n);
void lower_lookup(Lowering& l, const onnx::NodeProto& n);
void lower_quantize(Lowering& l, const onnx::NodeProto& n);
void lower_qlinear_matmul(Lowering& l, const onnx::NodeProto& n);
void lower_dynamic_quantize(Lowering& l, const onnx::NodeProto& n);
// The op of a ConvInteger(dynamic) or MatMulInteger(dynamic) pattern, emitted at its last node.
void lower_dyn_conv(Lowering& l, const Pattern& p, const onnx::NodeProto& last);
void lower_dyn_matmul(Lowering& l, const Pattern& p, const onnx::NodeProto& last);

// Every ONNX op this backend knows (handler lookup by op_type).
Handler find_handler(const std::string& op_type);

}  // namespace tessera_dnnl
