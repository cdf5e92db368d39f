// What the oneDNN plugin compiles a region into, and what its blob holds: a
// program of primitive descriptions over a table of float32 values with
// static shapes. No weights: load() receives them by name.
//
//   Value    a region input, a constant (bound by name at load) or a value
//            computed by exactly one op
//   Op       one oneDNN primitive: its kind, algorithm, operands, integer and
//            float parameters, and the post-ops fused into it
//
// The parameter layout of every kind is fixed (see OpKind below) and checked
// by check_op(), the one shape rule shared by lowering (a mismatch refuses the
// node), and load (a mismatch rejects the blob): an op that passes it gives
// oneDNN descriptors whose buffers match the values' sizes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plugin_util.h"

namespace tessera_dnnl {

using Dims = std::vector<int64_t>;

constexpr size_t kMaxRank = 8;
constexpr int64_t kMaxElements = int64_t{1} << 40;  // per value; bounds what a corrupt blob can ask for

// Operand layouts of each kind (in = value ids, -1 for an absent optional one;
// ints/floats = parameters; r = number of spatial axes):
//   kConv, kDeconv  in {X, W, B?}   ints {r, strides[r], dilations[r], pad_begin[r], pad_end[r], group}
//   kPool           in {X}          ints {r, kernel[r], strides[r], dilations[r], pad_begin[r], pad_end[r]}
//                                   alg: pooling_max / pooling_avg_include_padding / pooling_avg_exclude_padding
//                                   floats {scale, zero_point}: a dequantizing global average pool (X uint8/int8,
//                                   Y float32; the window the whole plane, no pads): Y[n, c] = scale * (sum of
//                                   X[n, c, :] - positions * zero_point) / positions, rounded once. The fusion of a
//                                   Dequantize into the global average pool that alone reads it; the plugin's own
//                                   loop, no oneDNN primitive (oneDNN 2.6 pools 8-bit only into 8-bit)
//   kMatMul         in {A, B, Bias?} ints {rank, trans_a, trans_b, a_dims[rank], b_dims[rank], bias_dims[rank]
//                   [, a_perm[rank], b_perm[rank]]}
//                   (a_dims/b_dims: the operands viewed at `rank` dims, stored row-major; an operand is read with
//                   its dims permuted by its perm (a Transpose folded in; identity when absent), then, when
//                   transposed, its last two logical dims swapped; the output is the broadcast [batch..., M, N]
//                   viewed as the output value)
//   kBatchNorm      in {X, scale, bias, mean, var}   floats {epsilon}
//   kLrn            in {X}          ints {size}    floats {alpha, beta, bias}
//   kSoftmax        in {X}          ints {rank, view[rank], axis}    alg: softmax_accurate / softmax_log
//   kLayerNorm      in {X, scale, bias?}   ints {rows, cols}   floats {epsilon}
//   kEltwise        in {X}          floats {alpha, beta}   alg: an eltwise algorithm
//   kBinary         in {A, B}       alg: a binary algorithm; numpy broadcasting
//   kSum            in {X0, X1...}  every operand has the output's dims
//   kConcat         in {X0, X1...}  ints {axis}
//   kView           in {X}          the same elements under the output's dims (Reshape, Flatten, ...)
//   kTranspose      in {X}          ints {perm[rank]}
//   kReduce         in {X}          ints {rank, kept[rank]} (X's dims, reduced ones 1)   floats {p, eps}
//                                   alg: a reduction algorithm
//   kPRelu          in {X, slope}   slope broadcasts to X
//   kQConv          in {X, W, B?}   ints as kConv   floats {x_zero_point, y_zero_point, scale[1 or M]}
//                   ONNX QLinearConv in oneDNN's int8 convolution: X and Y uint8/int8, W int8 (zero point 0),
//                   B int32; Y = saturate(round((conv(X - x_zp, W) + B) * scale[m]) + y_zp), scale[m] =
//                   x_scale * w_scale[m] / y_scale (one, or one per output channel)
//   kQMatMul        in {A, B}   ints {rows, K, N}   floats {a_zero_point, y_zero_point, scale[1 or N]}
//                   ONNX QLinearMatMul with a constant 2-D int8 B [K, N] (zero point 0) in oneDNN's int8 matmul: A
//                   8-bit read as [rows, K], Y 8-bit [rows, N] (its dims any that hold those elements), scales
//                   a_scale * b_scale[n] / y_scale, rounded as kQConv
//   kLookup         in {X, X2?, Table}   Y[i] = Table[u(X[i])] or Table[u(X[i]) * 256 + u(X2[i])], u(v) = v
//                   for uint8, v + 128 for int8; X, X2 uint8/int8 of one shape, Table a constant of 256 (65536)
//                   uint8/int8 elements, Y X's shape in Table's dtype (ai.tessera.QLinearLookup: a quantized
//                   elementwise chain as a table). No oneDNN primitive: the plugin's own loop, in any layout.
//                   Unary, floats {lo, hi} say the table clamps X to [lo, hi] (checked entry by entry at lowering):
//                   the fusion pass folds it into the kQConv / kQMatMul computing X as one clip post-op on round(v),
//                   to [lo - y_zp, hi - y_zp] (the only post-op such a product takes). Binary, floats {r_a, r_b,
//                   fixed} or {ratio, z_a, z_b, z_y}: the table holds ONNX Runtime's QLinearAdd or QLinearMul of
//                   that form (checked at every pair at lowering; ops/qlinear_add_math.h), which the loop computes
//                   instead of looking the pairs up
//   kQuantize       in {X, P?}  floats {scale, zero_point} (QuantizeLinear, per tensor), or none with P: the scale
//                   and zero point computed at run time by kQuantParams (DynamicQuantizeLinear's uint8 Y)
//   kDequantize     in {X}      floats {scale, zero_point}
//   kQuantParams    in {X}      P = {scale, zero_point} float32 [2]: DynamicQuantizeLinear's, from X's min and max
//                   (each extended to 0): scale = (max - min) / 255, zero_point = round(clip(-min / scale, 0, 255))
//   kDynConv        in {X, W, P}   ints as kConv   floats {w_scale[1 or M]} (int8 W), {w_scale[M], w_zp[M]}
//                   (uint8 W)
//                   ConvInteger -> Cast -> Mul by (x_scale * w_scale) of a dynamically quantized model: X uint8
//                   with P's zero point (run time), W constant, Y float32 =
//                   float(conv(X - P[1], W - w_zp)[m]) * (P[0] * w_scale[m]), each product rounded as the unfused
//                   Mul rounds it; then the post-ops. int8 W: zero point 0, oneDNN's int8 convolution with the scale
//                   as a post-op. uint8 W (group 1; post-ops: a bias, a relu): oneDNN has no weight zero points nor
//                   uint8 weights, so it convolves with W - 128 (int8) and one more output channel of ones, which sums
//                   the window, S = conv(X - P[1], 1); the plugin's own loop then adds (128 - w_zp[m]) * S in int32
//                   (exact) before the scale (dyn_u8_pd)
//   kDynMatMul      in {A, B, P}   ints {rows, K, N}   floats as kDynConv's, per column n of B
//                   MatMulInteger -> Cast -> Mul likewise: A uint8 read as [rows, K] with P's zero point, B a constant
//                   2-D [K, N], Y float32 [rows, N] (its dims any that hold those elements); uint8 B as W above, with a
//                   column of ones (the row sum)
enum class OpKind : uint8_t {
  kConv,
  kDeconv,
  kPool,
  kMatMul,
  kBatchNorm,
  kLrn,
  kSoftmax,
  kLayerNorm,
  kEltwise,
  kBinary,
  kSum,
  kConcat,
  kView,
  kTranspose,
  kReduce,
  kPRelu,
  kSlice,  // a box of the input (ints: its offset per dim; the output's dims its extent), copied out
  kQConv,
  kLookup,
  kQuantize,
  kDequantize,
  kDqBinary,
  kQMatMul,
  kQuantParams,
  kDynConv,
  kDynMatMul,
  // A Resize by the plugin's own loop; batch and channels unchanged. Nearest: ints = {rank, then for each axis the
  // input index of each output index along it (the output's dims long; batch and channel tables the identity)},
  // no floats. Bilinear (4-D float, over the last two axes): ints = {4, then for H and for W the neighbours i1 of
  // each output index, then their i2}, floats = {for H and for W the weights d1, then d2}
  // (ops/resize_coords.h's LinearAxis).
  kResize,
};
constexpr uint8_t kNumOpKinds = static_cast<uint8_t>(OpKind::kResize) + 1;

// Whether the plugin runs `k` with its own loop over the elements (no oneDNN primitive), in the layout its first
// operand is held in.
inline bool own_elementwise(OpKind k) {
  return k == OpKind::kLookup || k == OpKind::kQuantize || k == OpKind::kDequantize || k == OpKind::kDqBinary ||
         k == OpKind::kQuantParams;
}
const char* op_kind_name(OpKind k);

// The kinds an implementation can be named for (Op::impl; the impl=NAME compile option): the products with constant
// attributes. Not the dynamically quantized ones (kDynConv, kDynMatMul), whose run-time zero point and scale a timing
// run would have to supply.
inline bool impl_choice_kind(OpKind k) {
  return k == OpKind::kConv || k == OpKind::kDeconv || k == OpKind::kMatMul || k == OpKind::kQConv ||
         k == OpKind::kQMatMul;
}
// The kinds compile times implementations of (choose_impl): the int8 products, where oneDNN's first choice on AMX
// was 2-3x slower than another and every implementation sums in exact integers. The float products keep oneDNN's
// first choice: timing found no gain on them, and oneDNN 2.6's gemm:jit matmul, which timing took now and then for
// BERT's pooler (its results equal on the timing run's buffers), gave wrong values in the model.
inline bool impl_timed_kind(OpKind k) { return k == OpKind::kQConv || k == OpKind::kQMatMul; }

enum class PostKind : uint8_t { kEltwise, kSum, kBinary };

// A post-op applied to the op's result before it is stored: an eltwise
// function, a sum with the value `operand` (dst = result + operand, same dims),
// or a binary operation with `operand` broadcast to the result.
struct PostOp {
  PostKind kind = PostKind::kEltwise;
  int32_t alg = 0;  // dnnl_alg_kind_t
  float alpha = 0.f, beta = 0.f;
  int32_t operand = -1;
};

struct Op {
  OpKind kind = OpKind::kEltwise;
  int32_t alg = 0;  // dnnl_alg_kind_t where the kind has one
  std::vector<int32_t> in;
  int32_t out = -1;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<PostOp> post;
  // Computes in bfloat16 with float32 accumulation (precision=bf16): the
  // source and the weights are converted to bf16 (constants once, at load),
  // the destination stays float32. Only Conv, Deconv and MatMul.
  bool bf16 = false;
  // With bf16, the op also writes its destination in bf16: set when every
  // reader is a bf16 convolution or matmul reading it as its source as it is
  // (no reorder between them), never for a region output.
  bool bf16_dst = false;
  // oneDNN's implementation to build (its impl_info_str, e.g. "jit_int8_1x1:avx512_core_vnni"), chosen by timing at
  // compile (choose_impl, dnnl_primitives.h) or named by the impl option; empty, or one oneDNN does not offer for the
  // descriptors the choice was made on: oneDNN's first choice. Only the products (impl_choice_kind).
  std::string impl;
  // The ONNX nodes whose work it does, in order: the node it was lowered
  // from, every node fused into it as a post-op, every node of a pattern
  // (dnnl_patterns.h). For messages and run_profiled.
  std::vector<std::string> nodes;
};

// A Sigmoid, HardSwish or linear step (HardSigmoid's alpha * x + beta) no primitive absorbed as a post-op: the
// plugin runs it itself where its operand is held without padding, with the formulas ONNX Runtime and Tessera's
// native kernels evaluate on x86 (their bits, where oneDNN's differ in the last one; a dynamically quantized model
// turns that into whole quantization steps).
bool own_eltwise(const Op& op);

// The op's nodes for messages: "conv1+relu1".
std::string nodes_str(const Op& op);

enum class ValueKind : uint8_t { kInput, kConstant, kComputed };

// Every value an op touches has at least one element and is float32, except
// the 8-bit and int32 operands of the integer ops (check_op says which); a
// region input that no op reads may have any dtype and shape (run() only
// checks its descriptor).
struct Value {
  std::string name;
  ValueKind kind = ValueKind::kComputed;
  Dims dims;
  int32_t dtype = 1;  // TESSERA_DTYPE_*
};

struct Program {
  std::vector<Value> values;
  std::vector<Op> ops;                   // in execution order
  std::vector<int32_t> inputs, outputs;  // value ids, in the region model's order
};

using tessera_plugin::dims_str;
using tessera_plugin::numel;
// Numpy broadcasting; false when a and b do not broadcast.
bool broadcast(const Dims& a, const Dims& b, Dims* out);
// `d` with leading 1s up to `rank` dims.
Dims pad_to_rank(const Dims& d, size_t rank);

// How a binary post-op reads `operand` (which broadcasts to the op's output
// value `value`) when the primitive's destination has dims `dst`: padded to
// dst's rank where the destination is the value at its rank; where the
// destination holds the value's elements through other dims (a MatMul whose
// batch dims are folded into its rows), a whole operand is read as the
// destination and a row (all dims but the last of size 1) padded to it.
// False when it cannot be read so.
bool post_operand_view(const Dims& operand, const Dims& value, const Dims& dst, Dims* view);

// The post-ops the own loop after a product of uint8 weights applies (kDynConv above): a bias added per
// output channel (column), then a relu, each optional.
bool dyn_u8_post_ops(const Op& op, const std::vector<Value>& v);

// Whether the pool `op` averages each whole plane of its input: an average pool whose window is the input's spatial
// dims, strides and dilations 1, no pads.
bool global_average_pool(const Op& op, const std::vector<Value>& v);

// A MatMul's operands as oneDNN reads them: operand k (0: A, 1: B) is stored
// row-major with dims stored[k] and read as logical dims
// read[k][d] = stored[k][perm[k][d]] (transposes folded into perm).
struct MatMulOperands {
  Dims stored[2], perm[2], read[2], bias;
};
// False when the parameters are malformed (counts, perms).
bool matmul_operands(const Op& op, MatMulOperands* out);

// "" when `op` is consistent with the dims of its operands and output in `v`
// (operand counts, parameter counts, shapes); else what is wrong.
std::string check_op(const Op& op, const std::vector<Value>& v);
// The dtypes a value an op touches may have: float32, uint8, int8, int32.
bool plugin_dtype(int32_t dtype);

// Blob: "TSRDNNL\0", u32 format version, then the program. serialize never
// fails; deserialize trusts nothing and fails with
// TESSERA_ERROR_INCOMPATIBLE_BLOB on any inconsistency.
std::string serialize(const Program& p);
Program deserialize(const void* blob, size_t size);

}  // namespace tessera_dnnl
