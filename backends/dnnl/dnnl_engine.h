// A loaded oneDNN engine: the program turned into primitives, memory
// descriptors and an execution plan (dnnl_engine.cc builds it), and the run
// contexts that execute it (dnnl_run.cc).
//
// Every tensor the plan touches is a Mem: a memory descriptor (its layout)
// over a storage — a region input or output (the host's buffer, bound per
// run), a fixed buffer (a constant given to load, zero-copy, or weights
// reordered at load into the engine), or a buffer of the arena. A value may
// have several Mems: its layout as produced, a reorder of it into another
// layout, plain views of it with other dims (which share its storage). A
// value concatenated in place is a slice: a Mem at an offset into the
// storage of the concatenation.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dnnl_dw_int8.h"
#include "dnnl_memory_plan.h"
#include "dnnl_program.h"
#include "ops/qlinear_add_math.h"  // header-only, shared with native: the QLinearAdd/Mul forms
#include "plugin_util.h"

namespace tessera_dnnl {

enum class Storage : uint8_t { kInput, kOutput, kFixed, kArena };

struct Mem {
  dnnl::memory::desc md;
  Storage storage = Storage::kArena;
  int index = 0;  // region input/output index, fixed buffer index, or arena buffer index
  size_t offset = 0;  // bytes into the storage: a slice of a concatenation written in place
};

// An attention the engine runs by chunks of query rows (Builder::build_attention): Y = softmax(op1(Q, K)) x V, where
// the scores of one chunk (rows of every head) stay in an arena buffer small enough to stay in cache, instead of the
// whole score matrix going out to memory and back twice.
struct AttentionChunks {
  int64_t rows = 0, chunk = 0;   // query rows, and rows per chunk
  int64_t q_row = 0, y_row = 0;  // elements from one query row to the next in Q's view and in Y
  int64_t row_len = 0;           // keys: one softmax row
  int64_t heads = 1;             // softmax rows per query row (the product of the batch dims)
  struct Part {
    int64_t rows = 0;
    dnnl::primitive scores, values;  // Q x K^T (with its post-ops), then P x V
    dnnl::memory::desc q, s, y, scratch_scores, scratch_values;
    std::vector<dnnl::memory::desc> masks;  // the chunk's rows of each binary post-op's operand
  };
  // Q x K's binary post-ops (an additive mask): each one's index among the post-ops, and the elements from one query
  // row to the next in its operand (0: broadcast over the query rows).
  std::vector<int> mask_post;
  std::vector<int64_t> mask_row;
  std::vector<Part> parts;  // [0] a whole chunk, [1] the last, shorter one where the rows do not divide
  dnnl::memory::desc k, v;  // K's and V's views, whole
};

// One thread's share of a step split by rows or images (Step::slices): output rows [r0, r1) of images [n0, n1) held
// channels-last (one image's rows, or whole images), and a primitive over them (none for the own depthwise kernel,
// which takes the images and rows). Its args: each Mem it reads or writes, the bytes into it where the slice starts
// and the slice's descriptor (a whole operand for weights, bias and per-channel operands).
struct Slice {
  dnnl::primitive prim;
  struct Arg {
    int arg = 0;  // DNNL_ARG_*
    int mem = -1;
    size_t offset = 0;
    dnnl::memory::desc md;
  };
  std::vector<Arg> args;
  dnnl::memory::desc scratchpad;
  std::string impl;  // what oneDNN runs for it
  int64_t n0 = 0, n1 = 1, r0 = 0, r1 = 0;
};

struct Step {
  dnnl::primitive prim;                 // empty in a dry build
  std::vector<std::pair<int, int>> args;  // DNNL_ARG_* -> Mem index
  dnnl::memory::desc scratchpad;         // zero-size when the primitive needs none
  std::string what;                      // for messages: "Conv 'conv1'"
  // For run_profiled: the region's nodes whose work the primitive does (none
  // for a reorder: a layout conversion is its own step, named after the value
  // it converts), and what oneDNN runs ("convolution jit:avx512_core",
  // "reorder of 'x' jit:uni").
  std::vector<std::string> nodes;
  std::string impl;
  // An op the plugin runs itself (own_elementwise): no primitive; its args
  // DNNL_ARG_SRC_0 (and _1), DNNL_ARG_DST, dense elements in one layout.
  // Lookup: the kFixed index of its table, and 0x80 for an int8 operand
  // (flip0: X, flip1: X2). Quantize, Dequantize: scale and zero point; int8
  // says the 8-bit side is signed.
  bool own = false;
  // Quantize of X plain [N, C, spatial...] into Y channels-last (an image that int8 convolutions alone read).
  bool to_channels_last = false;
  OpKind kind = OpKind::kView;
  int table = -1;
  uint8_t flip0 = 0, flip1 = 0;
  float scale = 1.f, zero_point = 0.f;
  bool int8 = false;
  // DqBinary: the second operand's scale and zero point (a scale of 0: that
  // operand is float32), its signedness, the binary algorithm, a relu after.
  float scale2 = 0.f, zero_point2 = 0.f;
  bool int8_2 = false, relu = false;
  int32_t alg = 0;
  // A binary lookup whose table is ONNX Runtime's QLinearAdd or QLinearMul: computed from its form, the operands'
  // signedness in int8.
  bool qadd = false;
  tessera::qadd::Form qform;
  // A dynamically quantized convolution, or the Quantize of a
  // DynamicQuantizeLinear: the Mem of its kQuantParams value {scale, zero
  // point} (-1: none). The convolution's output scale is scale * w_scales[m],
  // bound as post-op 0's operand (scale_md) with the zero point by the run.
  int params = -1;
  std::vector<float> w_scales;
  dnnl::memory::desc scale_md;  // zero-size: no scale post-op (the convolution of uint8 weights)
  // The own loop after a convolution of uint8 weights: 128 - w_zero_point[m]
  // per output channel (its w_scales are per channel too).
  std::vector<int32_t> w_offsets;
  // A Concat: of plain operands along this axis (else -1: into a channels-last result).
  int concat_axis = -1;
  // A BatchNormalization: elements between two channels (1: channels-last; else plain) and epsilon (scale). A
  // Softmax: the row length (alg: dnnl_softmax_accurate or dnnl_softmax_log). A Resize: the elements copied as one
  // run (a position's channels or channel block; 1 plain).
  int64_t inner = 0;
  // A Resize: its op's index tables, and a bilinear one's weights (kResize in dnnl_program.h).
  std::vector<int64_t> resize_index;
  std::vector<float> resize_weights;
  bool plain_dst = false;  // a bilinear Resize: its result plain, whatever the layout of its input
  // An int8 depthwise convolution (kQConv) the plugin runs itself: its kernel (null in a dry build).
  std::shared_ptr<const DwInt8> dw;
  // An attention run by chunks of query rows: its args DNNL_ARG_SRC_0 (Q), _1 (K), _2 (V), DNNL_ARG_WORKSPACE (one
  // chunk's scores), DNNL_ARG_DST (Y), DNNL_ARG_MULTIPLE_SRC + j (Q x K's j-th binary post-op's operand, whole).
  std::shared_ptr<const AttentionChunks> attention;
  // A convolution held channels-last in and out is also built as one slice per thread: of its output rows (one
  // image) or of its images (a batch of as many as the threads, or a multiple). Consecutive such steps form a chain,
  // run in one parallel region where each thread keeps to its rows (Builder::plan_chains): no fork and join per step,
  // and each thread reads mostly what it wrote itself. `chain`: the number of steps of the chain that starts here (0:
  // none starts here); `chained`: the step is in a chain, where its slices run instead of `prim`; `barrier`: the
  // threads wait for each other before it (a slice of it touches bytes another thread's slice touched since the chain's
  // start or its last barrier, one of them writing).
  std::vector<Slice> slices;
  size_t chain = 0;
  bool chained = false, barrier = false;
};

// Work no primitive does: a view (Reshape, Flatten...) or a Concatenation
// written in place by its operands' producers. run_profiled reports it as a
// step of no duration, so that every node of the region appears in a profile.
struct FreeStep {
  size_t before = 0;  // position among the Steps: reported just before Step `before` (or at the end)
  std::vector<std::string> nodes;
  std::string impl;   // "view (no work)"
};

struct Plan {
  std::vector<Mem> mems;
  std::vector<Step> steps;
  std::vector<FreeStep> free_steps;       // in order of `before`
  std::vector<void*> fixed;               // pointers of the kFixed storages
  std::vector<AlignedBuffer> owned;       // constants the engine computed (a zero point's bias)
  // Reordered weights, shared with every engine of the process that reorders the same bytes into the same layout
  // (shared_reorder in dnnl_engine.cc).
  std::vector<std::shared_ptr<const AlignedBuffer>> shared;
  std::vector<ArenaBuffer> buffers;
  size_t arena_bytes = 0, scratch_bytes = 0;
  size_t slice_scratch = 0;               // per thread, in a chain: thread t's scratchpad is at t * slice_scratch
  size_t reorders = 0;                    // layout conversions per run (region boundaries, mostly)
};

// Builds the plan for `p`. With `constants` (load) it binds them by name,
// reorders weights and creates primitives; without (compile's dry build) it
// only creates the primitive descriptors, which proves load will succeed.
// `num_threads` is the OpenMP thread count kernels are generated for.
Plan build_plan(const Program& p, const dnnl::engine& eng,
                const std::map<std::string, const tessera_tensor_t*>* constants, int num_threads);

class RunContext;

}  // namespace tessera_dnnl

// The engine behind the ABI's opaque handle.
struct tessera_engine {
  tessera_dnnl::Program program;
  std::vector<tessera_plugin::ValueType> input_types, output_types;
  int num_threads = 1;
  dnnl::engine eng;
  tessera_dnnl::Plan plan;
  // Run contexts (stream, arena, memory objects) not in use. A run takes one
  // or makes one, so concurrent runs never share mutable state.
  mutable std::mutex mu;
  std::vector<std::unique_ptr<tessera_dnnl::RunContext>> idle;
  ~tessera_engine();
};

namespace tessera_dnnl {

// Whether the CPU runs the plugin's own AVX-512 loops, the softmax rows and QLinearAdd's arithmetic (AVX-512 F, BW,
// DQ and VL; not under TESSERA_ISA=avx2).
bool own_avx512_loops();

// Creates the engine from a program and the region's constants.
// `max_memory` (0: none) bounds the buffers one run holds: past it, TESSERA_ERROR_OUT_OF_MEMORY.
std::unique_ptr<tessera_engine> make_engine(Program p, const tessera_named_tensor_t* constants, size_t count,
                                            int num_threads, uint64_t max_memory = 0);
// Host memory the engine holds, the ABI's engine_bytes: its reordered weights (those it shares with other engines
// counted whole), and the arena and scratchpad one run of it takes (from the process's pool of run buffers, shared by
// every engine).
uint64_t engine_bytes(const tessera_engine& e);
// One inference; fails with TESSERA_ERROR_INVALID_ARGUMENT on descriptors
// that differ from the region, TESSERA_ERROR_RUNTIME when oneDNN fails.
void run_engine(tessera_engine& e, const tessera_tensor_t* inputs, size_t num_inputs, tessera_tensor_t* outputs,
                size_t num_outputs);
// The same, reporting each step to `sink` (the ABI's run_profiled): every
// primitive is waited for before the next starts, so that its time is its own.
void run_engine_profiled(tessera_engine& e, const tessera_tensor_t* inputs, size_t num_inputs,
                         tessera_tensor_t* outputs, size_t num_outputs, const tessera_profile_sink_t& sink);

}  // namespace tessera_dnnl
