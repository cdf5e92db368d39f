// Load and run. Input (load): a validated Program, the region's constants,
// the session's thread count. Output: one XNNPACK runtime per segment, ready
// to invoke. Method: build every constant once (transposed filters, permuted
// operands, folded batch norm), allocate every buffer padded by
// XNN_EXTRA_BYTES, then per segment define a subgraph (buffers and in-place
// outputs as external values, constants as static data, the rest internal),
// create its runtime on the shared thread pool, and set it up right away when
// all its external pointers are the engine's own.
#include "engine.h"

#include <cstring>
#include <map>
#include <string>

#include "ops/dynamic_quantize_math.h"  // header-only: QuantizeLinear's arithmetic, native's and ONNX Runtime's

namespace tessera_xnn {

using tessera_plugin::fail;

namespace {

void check(xnn_status s, const char* what) {
  if (s != xnn_status_success) {
    fail(s == xnn_status_out_of_memory ? TESSERA_ERROR_OUT_OF_MEMORY : TESSERA_ERROR_COMPILE_FAILED,
         std::string("XNNPACK refused ") + what + " (status " + std::to_string(static_cast<int>(s)) + ")");
  }
}

uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }
size_t sz(int64_t v) { return static_cast<size_t>(v); }

// Adds node `n` to `sg`; `id` maps program tensors to subgraph values.
void define_node(xnn_subgraph_t sg, const NodeDef& n, const std::vector<uint32_t>& id,
                 const std::vector<TensorDef>& tensors) {
  auto in = [&](size_t k) { return k < n.inputs.size() ? id[static_cast<size_t>(n.inputs[k])] : XNN_INVALID_VALUE_ID; };
  const uint32_t out = id[static_cast<size_t>(n.output)];
  const auto& p = n.ints;
  const float lo = n.floats.size() == 2 ? n.floats[0] : 0.f, hi = n.floats.size() == 2 ? n.floats[1] : 0.f;
  const char* name = op_info(n.op).name;
  switch (n.op) {
    case Op::kConv2d:
      return check(xnn_define_convolution_2d(sg, u32(p[0]), u32(p[1]), u32(p[2]), u32(p[3]), u32(p[4]), u32(p[5]),
                                             u32(p[6]), u32(p[7]), u32(p[8]), u32(p[9]), u32(p[10]), sz(p[11]),
                                             sz(p[12]), lo, hi, in(0), in(1), in(2), out, 0),
                   name);
    case Op::kDepthwiseConv2d:
      return check(xnn_define_depthwise_convolution_2d(sg, u32(p[0]), u32(p[1]), u32(p[2]), u32(p[3]), u32(p[4]),
                                                       u32(p[5]), u32(p[6]), u32(p[7]), u32(p[8]), u32(p[9]),
                                                       u32(p[10]), sz(p[11]), lo, hi, in(0), in(1), in(2), out, 0),
                   name);
    case Op::kDeconv2d:
      return check(xnn_define_deconvolution_2d(sg, u32(p[0]), u32(p[1]), u32(p[2]), u32(p[3]), u32(p[4]), u32(p[5]),
                                               u32(p[6]), u32(p[7]), u32(p[8]), u32(p[9]), u32(p[10]), u32(p[11]),
                                               u32(p[12]), sz(p[13]), sz(p[14]), lo, hi, in(0), in(1), in(2), out, 0),
                   name);
    case Op::kFullyConnected:
      return check(
          xnn_define_fully_connected(sg, lo, hi, in(0), in(1), in(2), out, p[0] ? XNN_FLAG_TRANSPOSE_WEIGHTS : 0),
          name);
    case Op::kMaxPool2d:
      return check(xnn_define_max_pooling_2d(sg, u32(p[0]), u32(p[1]), u32(p[2]), u32(p[3]), u32(p[4]), u32(p[5]),
                                             u32(p[6]), u32(p[7]), u32(p[8]), u32(p[9]), lo, hi, in(0), out, 0),
                   name);
    case Op::kAvgPool2d:
      return check(xnn_define_average_pooling_2d(sg, u32(p[0]), u32(p[1]), u32(p[2]), u32(p[3]), u32(p[4]), u32(p[5]),
                                                 u32(p[6]), u32(p[7]), lo, hi, in(0), out, 0),
                   name);
    case Op::kGlobalAvgPool2d:
      return check(xnn_define_global_average_pooling_2d(sg, lo, hi, in(0), out, 0), name);
    case Op::kAdd:
      return check(xnn_define_add2(sg, lo, hi, in(0), in(1), out, 0), name);
    case Op::kSub:
      return check(xnn_define_subtract(sg, lo, hi, in(0), in(1), out, 0), name);
    case Op::kMul:
      return check(xnn_define_multiply2(sg, lo, hi, in(0), in(1), out, 0), name);
    case Op::kDiv:
      return check(xnn_define_divide(sg, lo, hi, in(0), in(1), out, 0), name);
    case Op::kMax:
      return check(xnn_define_maximum2(sg, in(0), in(1), out, 0), name);
    case Op::kMin:
      return check(xnn_define_minimum2(sg, in(0), in(1), out, 0), name);
    case Op::kSquaredDifference:
      return check(xnn_define_squared_difference(sg, in(0), in(1), out, 0), name);
    case Op::kClamp:
      return check(xnn_define_clamp(sg, lo, hi, in(0), out, 0), name);
    case Op::kAbs:
      return check(xnn_define_abs(sg, in(0), out, 0), name);
    case Op::kNeg:
      return check(xnn_define_negate(sg, in(0), out, 0), name);
    case Op::kFloor:
      return check(xnn_define_floor(sg, in(0), out, 0), name);
    case Op::kCeil:
      return check(xnn_define_ceiling(sg, in(0), out, 0), name);
    case Op::kRound:
      return check(xnn_define_bankers_rounding(sg, in(0), out, 0), name);
    case Op::kSqrt:
      return check(xnn_define_square_root(sg, in(0), out, 0), name);
    case Op::kSquare:
      return check(xnn_define_square(sg, in(0), out, 0), name);
    case Op::kSigmoid:
      return check(xnn_define_sigmoid(sg, in(0), out, 0), name);
    case Op::kHardSwish:
      return check(xnn_define_hardswish(sg, in(0), out, 0), name);
    case Op::kElu:
      return check(xnn_define_elu(sg, n.floats[0], in(0), out, 0), name);
    case Op::kLeakyRelu:
      return check(xnn_define_leaky_relu(sg, n.floats[0], in(0), out, 0), name);
    case Op::kPRelu:
      return check(xnn_define_prelu(sg, in(0), in(1), out, 0), name);
    case Op::kSoftmax:
      return check(xnn_define_softmax(sg, in(0), out, 0), name);
    case Op::kResizeBilinear:
      return check(xnn_define_static_resize_bilinear_2d(sg, sz(p[0]), sz(p[1]), in(0), out, u32(p[2])), name);
    case Op::kDepthToSpace:
      return check(xnn_define_depth_to_space(sg, in(0), out, u32(p[0]), 0), name);
    case Op::kConstantPad: {
      const size_t r = p.size() / 2;
      std::vector<size_t> pre(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(r)),
          post(p.begin() + static_cast<std::ptrdiff_t>(r), p.end());
      return check(xnn_define_static_constant_pad(sg, pre.data(), post.data(), n.floats[0], in(0), out, 0), name);
    }
    case Op::kConvert:
      return check(xnn_define_convert(sg, in(0), out, 0), name);
    case Op::kReshape: {  // the output tensor's dims are the new shape
      const Dims& d = tensors[static_cast<size_t>(n.output)].dims;
      std::vector<size_t> shape(d.begin(), d.end());
      return check(xnn_define_static_reshape(sg, shape.size(), shape.data(), in(0), out, 0), name);
    }
    default:
      fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "blob: unknown op");
  }
}

// Defines program tensor `def` in `sg` by its element type.
uint32_t define_tensor(xnn_subgraph_t sg, const TensorDef& def, const void* data, uint32_t want, uint32_t flags) {
  std::vector<size_t> dims(def.dims.begin(), def.dims.end());
  uint32_t id = XNN_INVALID_VALUE_ID;
  switch (def.dtype) {
    case DType::kF32:
      check(xnn_define_tensor_value(sg, xnn_datatype_fp32, dims.size(), dims.data(), data, want, flags, &id),
            "a tensor");
      break;
    case DType::kQS8:
      check(xnn_define_quantized_tensor_value(sg, xnn_datatype_qint8, def.zero_point, def.scales[0], dims.size(),
                                              dims.data(), data, want, flags, &id),
            "an int8 tensor");
      break;
    case DType::kQC8:
    case DType::kQC32:
      check(xnn_define_channelwise_quantized_tensor_value(
                sg, def.dtype == DType::kQC8 ? xnn_datatype_qcint8 : xnn_datatype_qcint32, def.scales.data(),
                dims.size(), static_cast<size_t>(def.channel_dim), dims.data(), data, want, flags, &id),
            "a per-channel quantized tensor");
      break;
    default:
      fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "blob: unknown element type");
  }
  return id;
}

// The plugin's own loops, over chunks of elements on the engine's pool.
constexpr size_t kChunk = 1 << 16;

struct OwnStep {
  const void* a;
  const void* x2;
  void* b;
  const uint8_t* table;
  float scale;
  int32_t zero_point;
  size_t n;
};

void quantize_chunk(void* ctx, size_t c) {
  const auto& s = *static_cast<const OwnStep*>(ctx);
  const size_t b = c * kChunk, e = std::min(s.n, b + kChunk);
  tessera::dynq::quantize_run<int8_t>(static_cast<const float*>(s.a) + b, static_cast<int64_t>(e - b), s.scale,
                                      s.zero_point, static_cast<int8_t*>(s.b) + b);
}

void lookup_chunk(void* ctx, size_t c) {
  const auto& s = *static_cast<const OwnStep*>(ctx);
  const size_t b = c * kChunk, e = std::min(s.n, b + kChunk);
  const auto* x = static_cast<const uint8_t*>(s.a);
  auto* y = static_cast<uint8_t*>(s.b);
  if (s.x2) {
    const auto* x2 = static_cast<const uint8_t*>(s.x2);
    for (size_t i = b; i < e; ++i) y[i] = s.table[(static_cast<size_t>(x[i]) << 8) | x2[i]];
  } else {
    for (size_t i = b; i < e; ++i) y[i] = s.table[x[i]];
  }
}

}  // namespace

Engine::Engine(Program program, const tessera_named_tensor_t* constants, size_t num_constants, int num_threads)
    : program_(std::move(program)) {
  ensure_xnnpack_initialized();
  pool_ = shared_pool(num_threads);
  data_.resize(program_.tensors.size());
  build_constants(constants, num_constants);
  for (size_t i = 0; i < program_.tensors.size(); ++i) {
    const TensorDef& t = program_.tensors[i];
    if (t.kind == TensorKind::kBuffer) data_[i] = PaddedBuffer(sz(numel(t.dims)) * dtype_bytes(t.dtype));
  }
  for (size_t o = 0; o < program_.exports.size(); ++o) {
    if (program_.exports[o].transfer == Transfer::kNhwc) yield_export_ = static_cast<int>(o);
  }
  if (yield_export_ < 0 && !program_.steps.empty()) yield_step_ = static_cast<int>(program_.steps.size()) - 1;
  for (size_t i = 0; i < program_.steps.size(); ++i) {
    if (program_.steps[i].kind == StepKind::kSegment)
      build_segment(program_.steps[i], static_cast<int>(i) == yield_step_);
  }
  for (size_t i = 0; i < program_.tensors.size(); ++i) {
    const TensorDef& t = program_.tensors[i];
    bytes_ += data_[i].bytes();
    if (t.kind == TensorKind::kConstant || t.kind == TensorKind::kInternal) {
      bytes_ += sz(numel(t.dims)) * dtype_bytes(t.dtype);  // XNNPACK's packed copy, or its workspace
    }
  }
}

Engine::~Engine() {
  for (Segment& s : segments_) {
    if (s.runtime) xnn_delete_runtime(s.runtime);
  }
}

void Engine::build_constants(const tessera_named_tensor_t* constants, size_t num_constants) {
  // A weight or bias that XNNPACK packs when it creates the runtime is read
  // exactly once and never past its end: an unchanged one is used in place
  // (the host keeps it valid until destroy) instead of copied.
  std::vector<char> packed_only(program_.tensors.size(), 0), other_use(program_.tensors.size(), 0);
  for (const NodeDef& n : program_.nodes) {
    bool packs =
        n.op == Op::kConv2d || n.op == Op::kDepthwiseConv2d || n.op == Op::kDeconv2d || n.op == Op::kFullyConnected;
    for (size_t k = 0; k < n.inputs.size(); ++k) (packs && k > 0 ? packed_only : other_use)[sz(n.inputs[k])] = 1;
  }
  static_.assign(program_.tensors.size(), nullptr);
  std::map<std::string, const tessera_tensor_t*> by_name;
  for (size_t i = 0; i < num_constants; ++i) {
    if (constants && constants[i].name) by_name[constants[i].name] = &constants[i].tensor;
  }
  for (size_t i = 0; i < program_.tensors.size(); ++i) {
    const TensorDef& t = program_.tensors[i];
    if (t.kind != TensorKind::kConstant) continue;
    const ConstantDef& c = program_.constants[static_cast<size_t>(t.ref)];
    std::vector<SourceTensor> sources;
    for (size_t k = 0; k < c.sources.size(); ++k) {
      auto it = by_name.find(c.sources[k]);
      if (it == by_name.end()) fail(TESSERA_ERROR_INVALID_ARGUMENT, "constant '" + c.sources[k] + "' was not given");
      const tessera_tensor_t& given = *it->second;
      const Dims& want = c.source_dims[k];
      const int32_t want_type = c.source_dtypes[k];
      bool ok = given.dtype == want_type && given.rank == static_cast<int32_t>(want.size()) &&
                (given.rank == 0 || given.dims) && given.data &&
                given.size_bytes == sz(numel(want)) * tessera_plugin::dtype_size(want_type);
      for (int32_t d = 0; ok && d < given.rank; ++d) ok = given.dims[d] == want[static_cast<size_t>(d)];
      if (!ok) {
        fail(TESSERA_ERROR_INVALID_ARGUMENT, "constant '" + c.sources[k] + "' does not match the compiled " +
                                                 tessera_plugin::dtype_name(want_type) + dims_str(want));
      }
      sources.push_back(SourceTensor{given.data, given.dtype, c.source_dims[k]});
    }
    const bool unchanged = c.transform == Transform::kCopy && c.floats[0] == 1.f &&
                           !(t.dtype != DType::kF32 && sources[0].dtype == TESSERA_DTYPE_UINT8);
    if (unchanged && packed_only[i] && !other_use[i]) {
      static_[i] = sources[0].data;
      continue;
    }
    data_[i] = PaddedBuffer(sz(numel(t.dims)) * dtype_bytes(t.dtype));
    build_constant(c, t.dims, t.dtype, sources, data_[i].get());
    static_[i] = data_[i].get();
  }
}

void Engine::build_segment(const Step& step, bool yield) {
  // Which tensors the segment touches, and how.
  std::map<int32_t, uint32_t> flags;  // tensor -> XNN_VALUE_FLAG_EXTERNAL_*
  for (int32_t k = step.a; k < step.b; ++k) {
    const NodeDef& n = program_.nodes[static_cast<size_t>(k)];
    for (int32_t i : n.inputs) flags[i] |= 0;
    flags[n.output] |= XNN_VALUE_FLAG_EXTERNAL_OUTPUT;
  }
  Segment seg;
  uint32_t externals = 0;
  for (auto& [t, f] : flags) {
    TensorKind kind = program_.tensors[static_cast<size_t>(t)].kind;
    if (kind == TensorKind::kBuffer || kind == TensorKind::kOutput) {
      if (!f) f = XNN_VALUE_FLAG_EXTERNAL_INPUT;
      ++externals;
    } else {
      f = 0;
    }
  }
  xnn_subgraph_t sg = nullptr;
  check(xnn_create_subgraph(externals, 0, &sg), "a subgraph");
  std::unique_ptr<xnn_subgraph, xnn_status (*)(xnn_subgraph_t)> owned(sg, xnn_delete_subgraph);
  std::vector<uint32_t> id(program_.tensors.size(), XNN_INVALID_VALUE_ID);
  uint32_t next_external = 0;
  for (const auto& [t, f] : flags) {
    const TensorDef& def = program_.tensors[static_cast<size_t>(t)];
    bool external = def.kind == TensorKind::kBuffer || def.kind == TensorKind::kOutput;
    const void* data = def.kind == TensorKind::kConstant ? static_[static_cast<size_t>(t)] : nullptr;
    uint32_t want = external ? next_external++ : XNN_INVALID_VALUE_ID;
    id[static_cast<size_t>(t)] = define_tensor(sg, def, data, want, f);
    if (!external) continue;
    if (def.kind == TensorKind::kOutput) {
      seg.host_outputs.emplace_back(seg.externals.size(), def.ref);
      seg.externals.push_back(xnn_external_value{want, nullptr});
    } else {
      seg.externals.push_back(xnn_external_value{want, data_[static_cast<size_t>(t)].get()});
    }
  }
  for (int32_t k = step.a; k < step.b; ++k) {
    define_node(sg, program_.nodes[static_cast<size_t>(k)], id, program_.tensors);
  }
  check(xnn_create_runtime_v2(sg, pool(), yield ? XNN_FLAG_YIELD_WORKERS : 0, &seg.runtime),
        "the subgraph (creating its runtime)");
  if (seg.host_outputs.empty()) {
    check(xnn_setup_runtime(seg.runtime, seg.externals.size(), seg.externals.data()), "the runtime setup");
    seg.set_up = true;
  }
  segments_.push_back(std::move(seg));
}

void Engine::run(const tessera_tensor_t* inputs, size_t num_inputs, tessera_tensor_t* outputs, size_t num_outputs) {
  if ((num_inputs && !inputs) || (num_outputs && !outputs)) fail(TESSERA_ERROR_INVALID_ARGUMENT, "null descriptors");
  tessera_plugin::check_descriptors(inputs, num_inputs, program_.inputs, "input");
  tessera_plugin::check_descriptors(outputs, num_outputs, program_.outputs, "output");
  for (const Import& im : program_.imports) {
    const tessera_tensor_t& t = inputs[im.input];
    const TensorDef& def = program_.tensors[static_cast<size_t>(im.tensor)];
    void* dst = data_[static_cast<size_t>(im.tensor)].get();
    if (im.transfer == Transfer::kNhwc) {
      nchw_to_nhwc(t.data, dst, program_.inputs[static_cast<size_t>(im.input)].dims, dtype_bytes(def.dtype), pool());
    } else {
      std::memcpy(dst, t.data, t.size_bytes);
    }
    if (t.dtype == TESSERA_DTYPE_UINT8) flip_bytes(dst, t.size_bytes);
  }
  size_t next_segment = 0;
  for (size_t i = 0; i < program_.steps.size(); ++i) {
    const Step& s = program_.steps[i];
    if (s.kind != StepKind::kSegment) {
      run_step(s, static_cast<int>(i) == yield_step_ ? PTHREADPOOL_FLAG_YIELD_WORKERS : 0);
      continue;
    }
    Segment& seg = segments_[next_segment++];
    bool changed = !seg.set_up;
    for (const auto& [slot, out] : seg.host_outputs) {
      void* p = outputs[out].data;
      changed = changed || seg.externals[slot].data != p;
      seg.externals[slot].data = p;
    }
    if (changed) {
      check(xnn_setup_runtime(seg.runtime, seg.externals.size(), seg.externals.data()), "the runtime setup");
      seg.set_up = true;
    }
    xnn_status st = xnn_invoke_runtime(seg.runtime);
    if (st != xnn_status_success)
      fail(TESSERA_ERROR_RUNTIME, "XNNPACK runtime failed (status " + std::to_string(st) + ")");
  }
  for (size_t o = 0; o < program_.exports.size(); ++o) {
    const Export& e = program_.exports[o];
    if (e.transfer == Transfer::kDirect) continue;
    const void* src = data_[static_cast<size_t>(e.tensor)].get();
    if (e.transfer == Transfer::kNhwc) {
      nhwc_to_nchw(src, outputs[o].data, program_.outputs[o].dims,
                   dtype_bytes(program_.tensors[static_cast<size_t>(e.tensor)].dtype), pool(),
                   static_cast<int>(o) == yield_export_ ? PTHREADPOOL_FLAG_YIELD_WORKERS : 0);
    } else {
      std::memcpy(outputs[o].data, src, outputs[o].size_bytes);
    }
    if (outputs[o].dtype == TESSERA_DTYPE_UINT8) flip_bytes(outputs[o].data, outputs[o].size_bytes);
  }
}

void Engine::run_step(const Step& s, uint32_t flags) {
  const TensorDef& a = program_.tensors[static_cast<size_t>(s.a)];
  const TensorDef& b = program_.tensors[static_cast<size_t>(s.b)];
  const void* src = data_[static_cast<size_t>(s.a)].get();
  void* dst = data_[static_cast<size_t>(s.b)].get();
  switch (s.kind) {
    case StepKind::kToNhwc:
      return nchw_to_nhwc(src, dst, a.dims, dtype_bytes(a.dtype), pool(), flags);
    case StepKind::kToPlain:
      return nhwc_to_nchw(src, dst, to_nchw(a.dims), dtype_bytes(a.dtype), pool(), flags);
    case StepKind::kQuantize:
    case StepKind::kLookup: {
      const size_t n = sz(numel(a.dims));
      OwnStep own{src,
                  s.x2 >= 0 ? data_[static_cast<size_t>(s.x2)].get() : nullptr,
                  dst,
                  s.table >= 0 ? static_cast<const uint8_t*>(static_[static_cast<size_t>(s.table)]) : nullptr,
                  b.scales.empty() ? 1.f : b.scales[0],
                  b.zero_point,
                  n};
      pthreadpool_parallelize_1d(pool(), s.kind == StepKind::kQuantize ? quantize_chunk : lookup_chunk, &own,
                                 (n + kChunk - 1) / kChunk, flags);
      return;
    }
    default:
      fail(TESSERA_ERROR_INTERNAL, "unknown step");
  }
}

}  // namespace tessera_xnn
