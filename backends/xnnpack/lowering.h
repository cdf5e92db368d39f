// ONNX region -> Program. The Lowering walks the region's nodes in order and
// hands each to its op's lowering function (lower_*.cc, listed in
// onnx_ops.inc), which asks for its inputs in the layout it needs and emits
// XNNPACK nodes. The Lowering tracks, per ONNX value, the tensors holding it
// in each layout, and provides a missing layout on demand: a reshape when the
// two layouts share a memory order, else a conversion step between buffers
// (this XNNPACK snapshot has no transpose node) that splits the segment.
//
// Capability uses the same code on one node at a time (its inputs treated as
// region inputs), so a node it claims is one compile can lower.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "program.h"

namespace tessera_xnn {

enum Layout : int { kPlain = 0, kNhwc = 1 };

// A node this backend cannot run; `reason` is what the user reads.
struct Refusal {
  std::string reason;
};
[[noreturn]] void refuse(std::string reason);

class Lowering {
 public:
  explicit Lowering(const tessera_plugin::ModelView& model) : model_(model) {}

  // Compile: every node, the boundary, fusion of clamps into their producers.
  // A node it cannot lower fails with TESSERA_ERROR_UNSUPPORTED naming it.
  Program lower_region();
  // Capability: "" when node `index` lowers on its own, else the reason.
  std::string check_alone(int index);

  // ---- for the op lowerings ----------------------------------------------
  const tessera_plugin::ModelView& model() const { return model_; }
  int64_t opset() const { return model_.opset(); }
  // ONNX dims of a float32 value with a static shape; refuses anything else.
  const Dims& float_dims(const std::string& name);
  // The same for an int8 or uint8 value (q_dims), or one of either kind (dims).
  const Dims& q_dims(const std::string& name);
  const Dims& dims(const std::string& name);
  bool is_constant(const std::string& name) const { return model_.is_initializer(name); }
  // Values of a constant input (refuses a non-constant one, naming `what`).
  std::vector<float> constant_floats(const std::string& name, const char* what);
  std::vector<int64_t> constant_ints(const std::string& name, const char* what);

  // The tensor holding `name` in `layout` (NHWC only for a 4-D value),
  // converting when needed. A constant becomes static data.
  int32_t input(const std::string& name, Layout layout);
  // A tensor whose memory order is `name`'s ONNX (plain) order, whatever its
  // dims: what a reshape reads.
  int32_t input_plain_memory(const std::string& name);
  // The layout a layout-agnostic op should read `name` in: the one it already
  // has (NHWC first), else plain.
  Layout preferred(const std::string& name) const;
  bool has_layout(const std::string& name, Layout layout) const;

  // Static data built at load from region initializers (see Transform).
  int32_t constant(Transform transform, std::vector<std::string> sources, Dims dims, float scale = 1.f,
                   std::vector<int64_t> ints = {}, std::vector<float> extra = {});
  int32_t literal(const std::vector<float>& values, Dims dims);
  // The tensor for the node's output value `name`, in `layout`.
  int32_t output(const std::string& name, Layout layout);
  // An intermediate tensor of the node's own; `like`: of value `like`'s
  // element type and quantization (float32 when empty).
  int32_t temp(Dims dims, const std::string& like = "");

  // ---- 8-bit values (held as int8, program.h DType) ---------------------------
  // The scale and zero point (in the value's own type) with which the 8-bit
  // value `name` is read or written; a second, different one is refused.
  void set_quant(const std::string& name, float scale, int64_t zero_point);
  // `b` has `a`'s quantization, whichever of them gets it (a reshape).
  void same_quant(const std::string& a, const std::string& b);
  // An 8-bit constant: weights (kQC8, a scale per output channel; kQS8, one),
  // an int32 bias (kQC32) or a table (kQS8, kLookup).
  // `channel_dim`: the dim the scales run along (kQC8, kQC32).
  int32_t qconstant(Transform transform, const std::string& source, Dims dims, DType dtype, std::vector<float> scales,
                    int32_t channel_dim = 0);
  // What the plugin's own steps read and write: `name` in `layout` as a
  // buffer (closing the segment that wrote it), and a new buffer for `name`.
  int32_t step_input(const std::string& name, Layout layout);
  int32_t step_output(const std::string& name, Layout layout);
  void add_step(const Step& step) { program_.steps.push_back(step); }
  // Appends an XNNPACK node; refuses (with the shape rule's words) when the
  // output the model declares is not what XNNPACK computes.
  void emit(Op op, std::vector<int32_t> inputs, int32_t output, std::vector<int64_t> ints = {},
            std::vector<float> floats = {});

 private:
  struct ValueState {
    int32_t tensor[2] = {-1, -1};  // per Layout
    // 8-bit values: the quantization, or the value whose quantization this is.
    bool has_quant = false;
    float scale = 1.f;
    int32_t zero_point = 0;  // in the int8 domain
    std::string quant_of;
  };
  void reset(bool isolated);
  void lower_node(const onnx::NodeProto& n);
  int32_t new_tensor(Dims dims, TensorKind kind, const std::string& value = "");
  std::string quant_root(const std::string& name) const;
  // A new tensor of `kind` for value `name`, which nothing has written yet.
  int32_t written_value(const std::string& name, Layout layout, TensorKind kind);
  void fill_quantization();
  int32_t usable(int32_t t);  // promotes an internal tensor of an earlier segment to a buffer
  int32_t import(const std::string& name, Layout layout);
  void close_segment();
  void finish();
  void fuse_clamps(const std::set<int32_t>& keep);
  std::vector<int> readers() const;

  const tessera_plugin::ModelView& model_;
  bool isolated_ = false;
  Program program_;
  std::vector<int> segment_of_;    // per tensor: the segment that wrote it (-1: import/conversion/constant)
  std::vector<int> producer_;      // per tensor: the node that writes it, or -1
  std::vector<int> node_segment_;  // per node
  std::vector<std::string> tensor_value_;  // per tensor: the value it holds (its element type, quantization), or ""

  std::map<std::string, ValueState> values_;
  std::map<std::string, int32_t> input_index_;
  std::map<std::pair<std::string, int>, int32_t> constants_;  // (initializer, layout) -> tensor
  int segment_ = 0;
  int32_t segment_begin_ = 0;
};

// ---- the op lowerings (lower_*.cc) ------------------------------------------

using LowerFn = void (*)(Lowering&, const onnx::NodeProto&);
// The lowering of an ai.onnx op type, or null.
LowerFn find_lowering(const std::string& op_type);

#define TESSERA_XNN_ONNX_OP(name, fn) void fn(Lowering&, const onnx::NodeProto&);
#include "onnx_ops.inc"
#undef TESSERA_XNN_ONNX_OP

// Window geometry shared by convolutions and pools: pads [top, left, bottom,
// right] from `pads` / `auto_pad` for a 2-D window.
struct Window2d {
  int64_t kernel[2] = {1, 1}, stride[2] = {1, 1}, dilation[2] = {1, 1};
  int64_t pad_begin[2] = {0, 0}, pad_end[2] = {0, 0};
};
// Reads kernel_shape (or the 2 values of `kernel` when given), strides,
// dilations, pads and auto_pad of `n` for input `x` (NCHW, or NCW: a 1-D
// window gets a unit height).
Window2d window_2d(const onnx::NodeProto& n, const Dims& x, const int64_t* kernel);

// QLinearConv's and QLinearMatMul's quantization (inputs 1, 2, 4, 5, 6, 7):
// constant scalar scales and zero points of X and Y (recorded with
// set_quant), the weights' scale per tensor or (when `per_channel`) per
// output channel, their zero point 0 (int8) or 128 (uint8, int8 after the
// flip). Refuses a requantization scale XNNPACK refuses. Per output channel
// (`count`): the weights' scale, and x_scale times it (the bias's).
struct QuantScales {
  std::vector<float> weights, bias;
};
QuantScales product_scales(Lowering& L, const onnx::NodeProto& n, int64_t count, const char* w, bool per_channel);

// Numpy broadcast shape; refuses when the shapes do not broadcast.
Dims broadcast_dims(const Dims& a, const Dims& b);

constexpr float kInf = __builtin_inff();

}  // namespace tessera_xnn
