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
    case Op::kReshape: {  // the output tensor's dims are the new shape
      const Dims& d = tensors[static_cast<size_t>(n.output)].dims;
      std::vector<size_t> shape(d.begin(), d.end());
      return check(xnn_define_static_reshape(sg, shape.size(), shape.data(), in(0), out, 0), name);
    }
    default:
      fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "blob: unknown op");
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
    if (program_.tensors[i].kind == TensorKind::kBuffer) data_[i] = PaddedBuffer(sz(numel(program_.tensors[i].dims)));
  }
  for (size_t o = 0; o < program_.exports.size(); ++o) {
    if (program_.exports[o].transfer == Transfer::kNhwc) yield_export_ = static_cast<int>(o);
  }
  if (yield_export_ < 0 && !program_.steps.empty()) yield_step_ = static_cast<int>(program_.steps.size()) - 1;
  for (size_t i = 0; i < program_.steps.size(); ++i) {
    if (program_.steps[i].kind == StepKind::kSegment)
      build_segment(program_.steps[i], static_cast<int>(i) == yield_step_);
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
      bool ok = given.dtype == TESSERA_DTYPE_FLOAT32 && given.rank == static_cast<int32_t>(want.size()) &&
                (given.rank == 0 || given.dims) && given.data && given.size_bytes == sz(numel(want)) * sizeof(float);
      for (int32_t d = 0; ok && d < given.rank; ++d) ok = given.dims[d] == want[static_cast<size_t>(d)];
      if (!ok) {
        fail(TESSERA_ERROR_INVALID_ARGUMENT,
             "constant '" + c.sources[k] + "' does not match the compiled float32" + dims_str(want));
      }
      sources.push_back(SourceTensor{static_cast<const float*>(given.data), c.source_dims[k]});
    }
    if (c.transform == Transform::kCopy && c.floats[0] == 1.f && packed_only[i] && !other_use[i]) {
      static_[i] = sources[0].data;
      continue;
    }
    data_[i] = PaddedBuffer(sz(numel(t.dims)));
    build_constant(c, t.dims, sources, data_[i].data());
    static_[i] = data_[i].data();
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
    std::vector<size_t> dims(def.dims.begin(), def.dims.end());
    bool external = def.kind == TensorKind::kBuffer || def.kind == TensorKind::kOutput;
    const void* data = def.kind == TensorKind::kConstant ? static_[static_cast<size_t>(t)] : nullptr;
    uint32_t want = external ? next_external++ : XNN_INVALID_VALUE_ID;
    check(xnn_define_tensor_value(sg, xnn_datatype_fp32, dims.size(), dims.data(), data, want, f,
                                  &id[static_cast<size_t>(t)]),
          "a tensor");
    if (!external) continue;
    if (def.kind == TensorKind::kOutput) {
      seg.host_outputs.emplace_back(seg.externals.size(), def.ref);
      seg.externals.push_back(xnn_external_value{want, nullptr});
    } else {
      seg.externals.push_back(xnn_external_value{want, data_[static_cast<size_t>(t)].data()});
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
    float* dst = data_[static_cast<size_t>(im.tensor)].data();
    if (im.transfer == Transfer::kNhwc) {
      nchw_to_nhwc(static_cast<const float*>(t.data), dst, program_.inputs[static_cast<size_t>(im.input)].dims, pool());
    } else {
      std::memcpy(dst, t.data, t.size_bytes);
    }
  }
  size_t next_segment = 0;
  for (size_t i = 0; i < program_.steps.size(); ++i) {
    const Step& s = program_.steps[i];
    if (s.kind != StepKind::kSegment) {
      const uint32_t flags = static_cast<int>(i) == yield_step_ ? PTHREADPOOL_FLAG_YIELD_WORKERS : 0;
      const float* src = data_[static_cast<size_t>(s.a)].data();
      float* dst = data_[static_cast<size_t>(s.b)].data();
      const Dims& a = program_.tensors[static_cast<size_t>(s.a)].dims;
      if (s.kind == StepKind::kToNhwc) {
        nchw_to_nhwc(src, dst, a, pool(), flags);
      } else {
        nhwc_to_nchw(src, dst, to_nchw(a), pool(), flags);
      }
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
    const float* src = data_[static_cast<size_t>(e.tensor)].data();
    if (e.transfer == Transfer::kNhwc) {
      nhwc_to_nchw(src, static_cast<float*>(outputs[o].data), program_.outputs[o].dims, pool(),
                   static_cast<int>(o) == yield_export_ ? PTHREADPOOL_FLAG_YIELD_WORKERS : 0);
    } else {
      std::memcpy(outputs[o].data, src, outputs[o].size_bytes);
    }
  }
}

}  // namespace tessera_xnn
