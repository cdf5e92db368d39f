// oneDNN primitive descriptors for program ops: which memory layout each
// operand asks for, and the descriptor itself given the layouts chosen.
//
// Layout policy, per operand (OperandSpec::layout):
//   kAsIs        takes the value in whatever layout its producer left it
//                (eltwise, BN, LRN, pooling: blocked layouts flow through)
//   kSameAsFirst takes it in the first operand's layout (a binary op's or a
//                sum's same-shaped operands)
//   kPlain       needs the plain row-major elements seen through `view`
//                (MatMul's operands with their transposes and broadcast
//                ranks, Softmax/LayerNorm's 2-D coercions, a broadcast
//                operand)
//   kAny         lets the primitive choose (convolution sources, every
//                constant weight: reordered once at load)
// Used twice: by the engine builder with the real layouts, and by probe()
// with plain ones, which capability and fusion use to ask oneDNN whether it
// implements an op at all.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <memory>
#include <string>
#include <vector>

#include "dnnl_dw_int8.h"
#include "dnnl_program.h"

namespace tessera_dnnl {

enum class Layout : uint8_t { kAbsent, kAsIs, kSameAsFirst, kPlain, kAny };

struct OperandSpec {
  Layout layout = Layout::kAbsent;
  int arg = 0;                 // DNNL_ARG_* the operand binds to at execution
  dnnl::memory::desc md;       // kPlain: what the primitive reads; kAny: dims with format any
  dnnl::memory::desc view;     // the operand's plain storage seen with this op's dims (kPlain, kAny)
};

// oneDNN's data type for a TESSERA_DTYPE_* (f32, u8, s8, s32).
dnnl::memory::data_type data_type_of(int32_t dtype);
// Dense row-major descriptor of `dims` (a scalar is one element), float32 unless `dt` says otherwise.
dnnl::memory::desc plain_md(const Dims& dims, dnnl::memory::data_type dt = dnnl::memory::data_type::f32);
// Row-major with explicit strides.
dnnl::memory::desc strided_md(const Dims& dims, const Dims& strides,
                              dnnl::memory::data_type dt = dnnl::memory::data_type::f32);
bool is_plain(const dnnl::memory::desc& md);
// Row-major strides of `dims`.
Dims row_major(const Dims& dims);
// Dense with the channels (dim 1) innermost: nwc / nhwc / ndhwc for rank 3 / 4 / 5.
dnnl::memory::desc channels_last_md(const Dims& dims, dnnl::memory::data_type dt = dnnl::memory::data_type::f32);
// Dense row-major, of any data type, at offset 0.
bool is_row_major(const dnnl::memory::desc& md);

// One spec per entry of op.in (kAbsent for an absent optional operand).
std::vector<OperandSpec> operand_specs(const Op& op, const std::vector<Value>& values);

// The descriptor of a binary post-op's operand: plain, padded to the
// destination's rank.
dnnl::memory::desc post_operand_md(const Op& op, const PostOp& po, const std::vector<Value>& values);
// kDynConv's and kDynMatMul's run-time output scale, post-op 0: [1, M or 1, 1...] / [1, N or 1].
dnnl::memory::desc dyn_scale_md(const Op& op, const std::vector<Value>& values);
// Whether the kQConv `op` reads its source without its zero point, which is subtracted in its bias instead: bias[j]
// - zero point * (the sum of output channel j's weights). Exact where no window reads the source's padding (no
// begin pad, no positive end pad) and the int32 sums stay within a float's 24 bits, as they must anyway for oneDNN,
// which adds its bias to the sum converted to float; the engine computes that bias at load (oneDNN 2.6 runs int8
// convolutions with a source zero point on slower kernels than those without).
bool src_zero_point_in_bias(const Op& op);
// The implementation name (Op::impl) of the plugin's own int8 depthwise convolution (dnnl_dw_int8.h), which
// choose_impl times against oneDNN's.
inline constexpr const char* kOwnDwInt8 = "own_dw_int8";
// Whether `op` is a kQConv the own depthwise kernel computes: 2-D, one input channel per group and as many output
// channels, a 3x3 / 5x5 / 7x7 window without dilation, constant weights and bias, at most a clip fused; on a CPU with
// AVX-512 VNNI.
bool own_dw_int8(const Op& op, const std::vector<Value>& values);
// The own depthwise kernel of such an op over its weights w [C, 1, k, k] and bias b (null: none), or null where
// make_dw_int8 refuses them.
std::unique_ptr<DwInt8> own_dw_int8_kernel(const Op& op, const std::vector<Value>& values, const int8_t* w,
                                           const int32_t* b);
// Which operand of the kBinary `op` is a plane, where op is a float32 Mul or Add of X [N, C > 1, spatial...] (rank 3
// to 5) and a plane P of X's spatial dims with one channel ([1 or N, 1, spatial...], X's rank), more than one spatial
// element, no post-ops; -1 where it is not. oneDNN 2.6 has no
// broadcast over the channels alone: its binary primitive ran such an op with its reference kernel (a [1, 32, 24,
// 672] mask multiply: 16.8 ms), and as a convolution's post-op it left its jit kernels for the gemm one. The plugin
// runs it with its own loop (plane binary), and fuses it into nothing but a MatMul (an attention mask, which the
// MatMul's kernels take).
int plane_operand(const Op& op, const std::vector<Value>& values);
// The index among the primitive's post-ops of op.post[0] (kDynConv's and kDynMatMul's scale comes first).
int first_post_arg(const Op& op);
// The destination's dims as the primitive sees them (MatMul: [batch.., M, N];
// Softmax/LayerNorm: their 2-D or view dims; else the output value's).
Dims dst_dims(const Op& op, const std::vector<Value>& values);

// The primitive descriptor for `op`, given a descriptor per operand (as
// operand_specs' order; ignored where kAbsent). Throws dnnl::error when
// oneDNN has no implementation. View ops have none: never call it for them.
// `dst`, when given, fixes the destination's layout where the primitive
// would otherwise choose it (see takes_dst_layout).
dnnl::primitive_desc_base create_pd(const Op& op, const std::vector<Value>& values,
                               const std::vector<dnnl::memory::desc>& in, const dnnl::engine& eng,
                               const dnnl::memory::desc* dst = nullptr);

// The source rows a 2-D convolution's output rows [r0, r1) read, [in0, in1), and the padding rows above and below
// them (those of the image's top and bottom only).
struct RowSlice {
  int64_t in0 = 0, in1 = 0, pad_top = 0, pad_bottom = 0;
};
RowSlice row_slice(const Op& op, const std::vector<Value>& values, int64_t r0, int64_t r1);

// The convolution `op` (kConv or kQConv, 2-D) over `images` images and restricted to its output rows [r0, r1):
// source and destination channels-last over those rows alone (row_slice), the weights and bias in the layouts the
// whole op's primitive reads, kernels generated for one thread (a slice runs on one) and not cached. Throws
// dnnl::error where oneDNN has no kernel for it.
dnnl::primitive_desc_base create_row_slice_pd(const Op& op, const std::vector<Value>& values, int64_t images,
                                              int64_t r0, int64_t r1, const dnnl::memory::desc& weights,
                                              const dnnl::memory::desc& bias, const dnnl::engine& eng);

// A matmul of `op` (kMatMul, float32, no bias; eltwise and binary post-ops) over the descriptors given, with op's
// post-ops (its binary ones' operands read through `binary_mds`, in order) and a user scratchpad: the query-row
// chunks of an attention the engine runs by chunks (dnnl_engine.cc).
dnnl::matmul::primitive_desc matmul_chunk_pd(const Op& op, const std::vector<Value>& values,
                                             const dnnl::memory::desc& a, const dnnl::memory::desc& b,
                                             const dnnl::memory::desc& dst,
                                             const std::vector<dnnl::memory::desc>& binary_mds,
                                             const dnnl::engine& eng);
// One implementation oneDNN offers for an op: its name (impl_info_str) and the source and destination layouts it
// reads and writes.
struct ImplOffer {
  std::string name;
  dnnl::memory::desc src, dst;
};

// Chooses op.impl (an impl_timed_kind op; dnnl_program.h) by timing: each implementation oneDNN offers for the
// op's operands as probe() describes them that is neither a reference nor a gemm-based one and reads and writes the
// layouts of oneDNN's
// first choice (so that the layouts, and the reorders around the op, stay those of the first choice) runs alone on
// `threads` threads, on the same values for each, and the fastest of those whose destination holds the first
// choice's bytes is kept where it beats the first choice by 5 %; else op.impl stays empty. An int8 depthwise
// convolution (own_dw_int8) whose first choice reads and writes channels-last also times the plugin's own kernel, on
// the same values, kept (kOwnDwInt8) only where it also beats every oneDNN implementation by 10 %. The choice changes
// the speed, never a bit of a result (float products that sum in another order are no choice). Each op is timed once
// per process (the choice is remembered under create_pd's key). Returns what it chose.
std::string choose_impl(Op& op, const std::vector<Value>& values, const dnnl::engine& eng, int threads);

// Whether create_pd lets the caller fix the destination's layout for `op`
// (convolution, deconvolution, pooling, binary).
bool takes_dst_layout(const Op& op);

// Whether oneDNN implements `op` with plain layouts (and `any` where the op
// allows it): "" or a reason for the user.
std::string probe(const Op& op, const std::vector<Value>& values, const dnnl::engine& eng, std::string* impl = nullptr);

// kDynConv / kDynMatMul of uint8 weights (dnnl_program.h): the int8
// convolution with one more output channel (an int32 destination with
// channels innermost) or matmul with one more column (row-major), the
// source's zero point at run time; `src` is the source's descriptor
// (dyn_u8_src_md: any for a convolution, plain [rows, K] for a matmul).
bool dyn_u8(const Op& op, const std::vector<Value>& values);
dnnl::memory::desc dyn_u8_src_md(const Op& op, const std::vector<Value>& values);
dnnl::primitive_desc_base dyn_u8_pd(const Op& op, const std::vector<Value>& values, const dnnl::memory::desc& src,
                                    const dnnl::engine& eng);

// The CPU engine probes use (created once, thread-safe to share).
const dnnl::engine& probe_engine();

}  // namespace tessera_dnnl
