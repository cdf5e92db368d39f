// What compile produces and load consumes: a region lowered to XNNPACK
// subgraph nodes, with the layout decisions already taken. It holds no
// weights; constants are named (region initializers) with the transform that
// turns them into what XNNPACK reads (OIHW -> OHWI filters, NCHW -> NHWC
// broadcast operands, folded BatchNormalization, ...).
//
// Execution is a list of steps: segments (a range of nodes, one XNNPACK
// runtime each), layout conversions between engine buffers, and the plugin's
// own loops for what XNNPACK would not compute to ONNX's bits (QuantizeLinear,
// whose XNNPACK form multiplies by 1 / scale, and Tessera's QLinearLookup
// tables). A value that
// crosses a step lives in a buffer; values inside one segment are XNNPACK's.
// Region inputs are imported into buffers (copied, or transposed NCHW -> NHWC)
// before the first step; outputs are exported after the last (copied, or
// transposed back), or written straight into the host's buffer when nothing
// inside reads them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plugin_util.h"

namespace tessera_xnn {

using Dims = std::vector<int64_t>;
using tessera_plugin::ValueType;

constexpr size_t kMaxRank = 6;                      // XNN_MAX_TENSOR_DIMS
constexpr int64_t kMaxElements = int64_t{1} << 36;  // per tensor; bounds what a corrupt blob can ask for

enum class Op : uint8_t {
#define XNN_OP(name, min_in, max_in, n_ints, n_floats) k##name,
#include "ops.inc"
#undef XNN_OP
  kCount
};

struct OpInfo {
  const char* name;
  int min_inputs, max_inputs, num_ints, num_floats;
};
const OpInfo& op_info(Op op);

enum class TensorKind : uint8_t {
  kInternal,  // lives inside one segment (XNNPACK's workspace)
  kBuffer,    // an engine buffer, external to every segment that touches it
  kConstant,  // static data, built at load from region initializers
  kOutput,    // written straight into region output `ref` by its segment
  kCount
};

// Element types. Every 8-bit value is held as int8 inside the engine: a uint8
// value v as v - 128 (its top bit flipped), with its zero point less 128, so
// that XNNPACK's signed kernels compute ONNX's uint8 ops exactly; the flip
// happens at the region boundary and in the constants built at load.
enum class DType : uint8_t {
  kF32,   // float32
  kQS8,   // int8, one scale and zero point (scales[0], zero_point)
  kQC8,   // int8 weights, a scale per output channel (dim channel_dim), zero point 0
  kQC32,  // int32 bias, a scale per output channel (input scale x weight scale)
  kCount
};
size_t dtype_bytes(DType t);

struct TensorDef {
  Dims dims;  // as XNNPACK sees them: NHWC for a channels-last value
  TensorKind kind = TensorKind::kInternal;
  int32_t ref = -1;  // kConstant: index into constants; kOutput: region output index
  DType dtype = DType::kF32;
  int32_t zero_point = 0;     // kQS8, in the int8 domain
  std::vector<float> scales;  // kQS8: one; kQC8/kQC32: one per index of dim channel_dim; kF32: none
  int32_t channel_dim = 0;    // kQC8/kQC32: 0 (3 for a depthwise filter [1, kh, kw, M])
};

// How a constant is built from the region's initializers at load. Every
// transform may also scale the result (Gemm's alpha and beta).
enum class Transform : uint8_t {
  kCopy,    // same elements, same order (dims may differ: [] -> [1], [1,N] -> [N])
  kToNhwc,  // source padded with leading 1s to rank 3 or 4, channels moved last: NCHW -> NHWC
  // Filters; a 1-D one ([.., .., kw]) reads as having kh = 1:
  kDepthwise,     // [M,1,kh,kw] -> [1,kh,kw,M]
  kDeconv,        // [C, M/g, kh, kw] -> [M, kh, kw, C/g] per group (ints[0] = groups)
  kBroadcastRow,  // source of 1 or N elements -> [N] (Gemm's C as a bias)
  kBnScale,       // sources scale, var -> scale / sqrt(var + eps)            (floats[1] = eps)
  kBnShift,       // sources bias, mean, scale, var -> bias - mean * scale / sqrt(var + eps)
  kLiteral,       // no source: the values are floats[1..]
  kFilter,        // [O,I,kh,kw] -> [O,kh,kw,I]
  // 8-bit data (the tensor's dtype kQS8/kQC8, its source int8 or uint8; a
  // uint8 source is flipped to int8): kCopy, kFilter and kDepthwise move
  // bytes as they move floats; an int32 source (kQC32) is copied. A table:
  kLookup,  // QLinearLookup's 256 / 65536 entries, indexed and valued in the int8 domain
            // (ints[0] = 1 when the table's entries are uint8)
  kCount
};

struct ConstantDef {
  Transform transform = Transform::kCopy;
  std::vector<std::string> sources;  // region initializer names
  std::vector<Dims> source_dims;     // their dims, as compile saw them (checked at load)
  std::vector<int32_t> source_dtypes;  // their TESSERA_DTYPE_*s, as compile saw them (checked at load)
  std::vector<int64_t> ints;
  std::vector<float> floats;  // floats[0] is always the scale
};

struct NodeDef {
  Op op = Op::kCount;
  std::vector<int32_t> inputs;  // tensor indices
  int32_t output = -1;
  std::vector<int64_t> ints;
  std::vector<float> floats;
};

enum class StepKind : uint8_t {
  kSegment,   // nodes [a, b)
  kToNhwc,    // buffer a (3-D or 4-D, plain) -> buffer b (channels last)
  kToPlain,   // buffer a (channels last) -> buffer b (plain)
  kQuantize,  // float buffer a -> kQS8 buffer b of the same dims: ONNX's QuantizeLinear with b's scale and zero point
  kLookup,    // kQS8 buffer a (and buffer x2 of the same dims, when >= 0) -> kQS8 buffer b through table `table`
  kCount
};

struct Step {
  StepKind kind = StepKind::kSegment;
  int32_t a = 0, b = 0;
  int32_t table = -1, x2 = -1;  // kLookup only
};

enum class Transfer : uint8_t {
  kCopy,    // plain layout: bytes as they are
  kNhwc,    // input: NCHW -> NHWC buffer; output: NHWC buffer -> NCHW
  kDirect,  // output only: the tensor is kOutput, written in place
  kCount
};

// A boundary value of 8 bits is a kQS8 buffer (a uint8 one flipped on the way
// in and out, see DType); a float32 one a kF32 tensor.
struct Import {
  int32_t input = 0;   // region input index
  int32_t tensor = 0;  // a kBuffer
  Transfer transfer = Transfer::kCopy;
};

struct Export {
  int32_t tensor = 0;  // kBuffer, or kOutput for kDirect
  Transfer transfer = Transfer::kCopy;
};

struct Program {
  std::vector<ValueType> inputs, outputs;  // the region boundary, ONNX order and dims
  std::vector<std::string> input_names, output_names;
  std::vector<TensorDef> tensors;
  std::vector<ConstantDef> constants;
  std::vector<NodeDef> nodes;
  std::vector<Step> steps;
  std::vector<Import> imports;
  std::vector<Export> exports;  // one per region output, in order
};

// ---- shapes ---------------------------------------------------------------

using tessera_plugin::dims_str;
using tessera_plugin::numel;
// Values of rank 3 (NCW, 1-D windows) and 4 (NCHW) have a channels-last
// layout, called NHWC throughout (NWC for rank 3).
inline bool has_channels_last(size_t rank) { return rank == 3 || rank == 4; }
// The XNNPACK dims of a value: ONNX dims, rank 0 as [1], a channels-last
// value NCHW -> NHWC.
Dims xnn_dims(const Dims& onnx, bool nhwc);
// Channels first -> last (NCHW -> NHWC, NCW -> NWC) and back.
Dims to_nhwc(const Dims& d);
Dims to_nchw(const Dims& d);
// A 1-D filter's dims as 2-D: [A,B,kw] -> [A,B,1,kw]; others unchanged.
Dims filter_dims_2d(const Dims& d);
// True when a tensor has the same memory order in both layouts (C == 1, or
// every spatial dim 1): a layout change is then only a reshape.
bool layout_change_is_view(const Dims& nchw);

// The one shape rule per op: "" when `node` is consistent with the tensors'
// dims (its output dims are what XNNPACK will compute), else what is wrong.
// Compile asserts it after lowering; load rejects a blob that breaks it, so an
// accepted program never makes XNNPACK write past a buffer.
std::string check_node(const NodeDef& node, const std::vector<TensorDef>& tensors);

// Whole-program consistency: indices in range, every tensor written once
// before it is read, steps covering the nodes in order, boundary shapes.
// Fails with TESSERA_ERROR_INCOMPATIBLE_BLOB.
void validate(const Program& p);

// ---- blob -----------------------------------------------------------------

// "TSRXNNPK", u32 format version, then the program. Corrupt or foreign bytes
// fail with TESSERA_ERROR_INCOMPATIBLE_BLOB; deserialize also validates.
constexpr char kBlobMagic[8] = {'T', 'S', 'R', 'X', 'N', 'N', 'P', 'K'};
constexpr uint32_t kBlobVersion = 2;  // 2: element types, quantization, own steps
std::string serialize(const Program& p);
Program deserialize(const void* data, size_t size);

}  // namespace tessera_xnn
