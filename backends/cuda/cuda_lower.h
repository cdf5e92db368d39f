// Lowering: a region model (ModelView) to a Program (cuda_program.h).
//
// Input: the region model compile receives (static shapes everywhere), or a
// whole model at capability (symbolic dims refused per node). Output: the
// program's values and steps, in the order of the nodes, with the temporaries
// placed in one scratch block (liveness, first fit).
//
// Method: a planning pass groups nodes that run as one step: MatMul/Gemm with
// a bias Add and a Relu / tanh-Gelu (cuBLASLt epilogues), Conv with a Relu or
// a residual Add + Relu (cudnnConvolutionBiasActivationForward), and runs of
// elementwise nodes on one value (one launch_chain kernel: each intermediate
// has one consumer, the next node of the run). A group's step is emitted at
// the position of its LAST node, where every operand has been computed. Every
// other node is a step of its own (or no step: Reshape and its kind alias
// their input's bytes).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cuda_program.h"
#include "plugin_util.h"

namespace tessera_cuda {

// The plugin_util names every lowering file uses.
using tessera_plugin::attr_float;
using tessera_plugin::attr_int;
using tessera_plugin::attr_ints;
using tessera_plugin::attr_string;
using tessera_plugin::dims_str;
using tessera_plugin::has_attr;
using tessera_plugin::numel;
using tessera_plugin::ValueType;

class Lowering {
 public:
  explicit Lowering(const tessera_plugin::ModelView& m) : m_(m) {}

  // "" when node `i` can run on its own, else the reason ("dtype int64").
  std::string check(int i);
  // The patterns the plugin runs best together, among nodes `ok` claims.
  std::vector<std::pair<std::string, std::vector<int>>> composites(const std::vector<bool>& ok) const;
  // The whole region; fails with TESSERA_ERROR_UNSUPPORTED naming the node.
  Program lower();

 private:
  // Planning (structure only, no data).
  struct GemmFusion {
    int add = -1, act = -1;  // node indices, -1 if absent
    Epilogue epilogue = Epilogue::kNone;
    std::string bias;  // the Add's initializer
  };
  struct ConvFusion {
    int add = -1, relu = -1;
    std::string z;  // the residual
  };
  bool fusable_intermediate(const std::string& value) const;
  GemmFusion gemm_fusion(int i) const;
  ConvFusion conv_fusion(int i) const;
  // The next node of an elementwise run that ends at `last` (its only consumer), or -1.
  int chain_next(int last, int ops, int operands) const;

  // Values.
  void reset();
  int value(const std::string& name, bool allow_int64 = false);
  int io_value(const std::string& name);  // a graph input or output of any dtype
  // A value of that name and type, at home in run()'s inputs or outputs when it is a graph input or output (else
  // kTemp).
  Value named_value(const std::string& name, const ValueType& t) const;
  int temp(const std::vector<int64_t>& dims, const std::string& hint);
  int add_const(DeviceConst c, const std::vector<int64_t>& dims, const std::string& key);
  const std::vector<int64_t>& dims(const std::string& name);
  std::vector<int64_t> const_ints(const std::string& name, const char* what) const;
  std::vector<float> const_floats(const std::string& name, const char* what) const;
  Step& new_step(StepKind kind, const std::vector<int>& nodes, const char* what);
  // The same, as its index in p_.steps (for a lowering that fills the step in after more values).
  size_t new_step_index(StepKind kind, const std::vector<int>& nodes, const char* what);
  void check_float_io(int i);

  // Node lowerings (cuda_lower.cc).
  void lower_node(int i);
  void lower_gemm(int i, const GemmFusion& f);
  void lower_matmul(int i, const GemmFusion& f);
  void lower_conv(int i, const ConvFusion& f);
  void lower_conv_transpose(int i);
  void lower_chain(const std::vector<int>& nodes);
  void chain_node(int i, int running_input, Step& s, std::vector<int>& operands);
  void add_bias_chain(int y, int bias, const std::vector<int>& nodes);
  // (cuda_lower_tensor.cc)
  void lower_alias(int i);
  void lower_softmax(int i);
  void lower_layernorm(int i);
  void lower_reduce(int i);
  void lower_global_pool(int i);
  void lower_pool(int i);
  void lower_resize(int i);
  void lower_concat(int i);
  void lower_transpose(int i);
  void lower_slice(int i);
  void lower_split(int i);
  void lower_gather(int i);
  void lower_expand(int i);
  void lower_tile(int i);
  void lower_pad(int i);

  void plan_memory();

  const tessera_plugin::ModelView& m_;
  Program p_;
  std::map<std::string, int> ids_;
  std::map<std::string, int> const_ids_;
  std::vector<std::string> in_names_, out_names_;
};

// The values a step reads and writes (memory planning).
void step_io(const Step& s, std::vector<int>& reads, std::vector<int>& writes);

// The ops this plugin claims (elementwise ones run as chains).
bool is_elementwise_op(const std::string& op);
bool is_known_op(const std::string& op);

// Refusal inside a lowering: TESSERA_ERROR_UNSUPPORTED with `why`.
[[noreturn]] void refuse(const std::string& why);

// A strided copy of `dims` elements from value `src` to value `dst` with those element strides (offsets 0);
// refuses a rank > kMaxRank.
CopyPiece copy_piece(int src, int dst, const std::vector<int64_t>& dims, const std::vector<int64_t>& src_strides,
                     const std::vector<int64_t>& dst_strides);

// n, c, h, w of a 2-D window step (ConvParams, Pool2d, Resize2d) from its NCHW input dims `d`, oh, ow from its
// output dims `od`.
template <class Window>
void set_nchw(Window& p, const std::vector<int64_t>& d, const std::vector<int64_t>& od) {
  p.n = d[0];
  p.c = d[1];
  p.h = d[2];
  p.w = d[3];
  p.oh = od[2];
  p.ow = od[3];
}

// Contiguous element strides of `dims`.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims);
// Element strides (kMaxRank entries used: od.size()) of a value of dims `vd`
// read in the index space of `od`, numpy broadcasting (0 along a broadcast
// dim); refuses dims that do not broadcast.
void broadcast_strides(const std::vector<int64_t>& vd, const std::vector<int64_t>& od, int64_t* out);
// The chain codes of an elementwise op, or -1.
int32_t binary_op_code(const std::string& op);
int32_t unary_op_code(const std::string& op);

}  // namespace tessera_cuda
