// Engine: load (upload constants, prepare GEMMs and convolutions) and run
// (enqueue every step on the calling thread's stream). See cuda_engine.h.
#include "cuda_engine.h"

#include <chrono>
#include <cmath>
#include <cstring>

namespace tessera_cuda {

using tessera_plugin::describe;
using tessera_plugin::fail;
using tessera_plugin::numel;
using tessera_plugin::ValueType;

namespace {

// The host data of an initializer: the constant given to load, else the model's own (small ones are kept in the
// blob; large ones must be given).
struct HostData {
  const std::map<std::string, const tessera_tensor_t*>& given;
  const tessera_plugin::ModelView& m;

  std::vector<float> floats(const std::string& name) const {
    auto it = given.find(name);
    if (it != given.end()) {
      const tessera_tensor_t& t = *it->second;
      if (t.dtype != TESSERA_DTYPE_FLOAT32)
        fail(TESSERA_ERROR_INVALID_ARGUMENT, "constant '" + name + "' is not float32");
      std::vector<float> v(t.size_bytes / 4);
      if (!v.empty()) std::memcpy(v.data(), t.data, v.size() * 4);
      return v;
    }
    return tessera_plugin::initializer_floats(model_tensor(name));
  }
  std::vector<int64_t> ints(const std::string& name) const {
    auto it = given.find(name);
    if (it != given.end()) {
      const tessera_tensor_t& t = *it->second;
      if (t.dtype != TESSERA_DTYPE_INT64) fail(TESSERA_ERROR_INVALID_ARGUMENT, "constant '" + name + "' is not int64");
      std::vector<int64_t> v(t.size_bytes / 8);
      if (!v.empty()) std::memcpy(v.data(), t.data, v.size() * 8);
      return v;
    }
    return tessera_plugin::initializer_ints(model_tensor(name));
  }
  const onnx::TensorProto& model_tensor(const std::string& name) const {
    const onnx::TensorProto* t = m.initializer(name);
    if (!t) fail(TESSERA_ERROR_INVALID_ARGUMENT, "constant '" + name + "' is missing");
    int64_t count = numel(std::vector<int64_t>(t->dims().begin(), t->dims().end()));
    if (count > 0 && t->raw_data().empty() && t->float_data_size() == 0 && t->int64_data_size() == 0 &&
        t->int32_data_size() == 0 && t->double_data_size() == 0) {
      fail(TESSERA_ERROR_INVALID_ARGUMENT, "constant '" + name + "' was not given to load");
    }
    return *t;
  }
};

}  // namespace

Engine::Engine(const tessera_plugin::ModelView& m, Program p, const tessera_named_tensor_t* constants, size_t count,
               uint64_t max_memory, const std::vector<ConvChoice>* choices)
    : p_(std::move(p)) {
  if (choices && choices->size() != p_.steps.size()) {
    fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "the blob holds " + std::to_string(choices->size()) +
                                              " step choices; the region lowers to " + std::to_string(p_.steps.size()) +
                                              " steps");
  }
  for (int v : p_.inputs) {
    const Value& x = p_.values[static_cast<size_t>(v)];
    in_types_.push_back(ValueType{x.dtype, true, x.dims, ""});
  }
  for (int v : p_.outputs) {
    const Value& x = p_.values[static_cast<size_t>(v)];
    out_types_.push_back(ValueType{x.dtype, true, x.dims, ""});
  }
  uint64_t const_bytes = 0;
  for (const Value& v : p_.values) {
    if (v.home == Home::kConst) const_bytes += static_cast<uint64_t>(v.bytes());
  }
  uint64_t need = const_bytes + static_cast<uint64_t>(p_.scratch_bytes);
  if (max_memory > 0 && need > max_memory) {
    fail(TESSERA_ERROR_OUT_OF_MEMORY, "the engine needs " + std::to_string(need) + " bytes of device memory (" +
                                          std::to_string(const_bytes) + " constants, " +
                                          std::to_string(p_.scratch_bytes) + " scratch); the limit is " +
                                          std::to_string(max_memory));
  }
  ThreadContext& ctx = thread_context();
  consts_.assign(p_.consts.size(), nullptr);
  try {
    upload(m, constants, count);
    gemm_.resize(p_.steps.size());
    conv_.resize(p_.steps.size());
    // cuDNN's workspace: what is left of the limit, else 1 GiB at most per convolution.
    size_t max_ws = size_t{1} << 30;
    if (max_memory > 0) max_ws = std::min<uint64_t>(max_ws, max_memory - need);
    std::vector<void*> ptrs(p_.values.size(), nullptr);
    for (size_t v = 0; v < p_.values.size(); ++v) {
      if (p_.values[v].home == Home::kConst) ptrs[v] = consts_[static_cast<size_t>(p_.values[v].index)];
    }
    for (size_t t = 0; t < p_.steps.size(); ++t) {
      const Step& s = p_.steps[t];
      if (s.kind == StepKind::kGemm) {
        gemm_[t] = std::make_unique<GemmPlan>(
            s.gemm, s.gemm.bias >= 0 ? ptrs[static_cast<size_t>(s.gemm.bias)] : nullptr, ctx, s.where);
      } else if (s.kind == StepKind::kConv) {
        // Weights and bias are constants in the common case; otherwise the trial runs on zeros.
        const ConvParams& c = s.conv;
        const float* w = static_cast<const float*>(ptrs[static_cast<size_t>(c.w_value)]);
        const float* bias = c.bias >= 0 ? static_cast<const float*>(ptrs[static_cast<size_t>(c.bias)]) : nullptr;
        std::unique_ptr<void, void (*)(void*)> w_zero(nullptr, [](void* q) { (void)cudaFree(q); });
        std::unique_ptr<void, void (*)(void*)> b_zero(nullptr, [](void* q) { (void)cudaFree(q); });
        if (!w) {
          size_t bytes = static_cast<size_t>(p_.values[static_cast<size_t>(c.w_value)].bytes());
          w_zero.reset(device_malloc(bytes, s.where + ": trial weights"));
          check_cuda(cudaMemset(w_zero.get(), 0, bytes), s.where + ": cudaMemset");
          w = static_cast<const float*>(w_zero.get());
        }
        if (c.bias >= 0 && !bias) {
          size_t bytes = static_cast<size_t>(c.k) * 4;
          b_zero.reset(device_malloc(bytes, s.where + ": trial bias"));
          check_cuda(cudaMemset(b_zero.get(), 0, bytes), s.where + ": cudaMemset");
          bias = static_cast<const float*>(b_zero.get());
        }
        const ConvChoice* given = choices && (*choices)[t].path != ConvChoice::kNone ? &(*choices)[t] : nullptr;
        conv_[t] = std::make_unique<ConvPlan>(c, w, bias, ctx, max_ws, given, s.where);
        dnn_workspace_ = std::max(dnn_workspace_, conv_[t]->workspace());
      }
    }
    if (max_memory > 0 && need + dnn_workspace_ > max_memory) {
      fail(TESSERA_ERROR_OUT_OF_MEMORY, "the engine needs " + std::to_string(need + dnn_workspace_) +
                                            " bytes of device memory with cuDNN's workspace; the limit is " +
                                            std::to_string(max_memory));
    }
    check_cuda(cudaStreamSynchronize(ctx.stream()), "load: cudaStreamSynchronize");
  } catch (...) {
    gemm_.clear();
    conv_.clear();
    for (void* q : consts_) (void)cudaFree(q);
    consts_.clear();
    throw;
  }
}

void Engine::upload(const tessera_plugin::ModelView& m, const tessera_named_tensor_t* constants, size_t count) {
  std::map<std::string, const tessera_tensor_t*> given;
  for (size_t i = 0; i < count; ++i) {
    if (constants[i].name) given[constants[i].name] = &constants[i].tensor;
  }
  HostData host{given, m};
  // Value dims by constant index (for the element counts).
  std::vector<int64_t> elems(p_.consts.size(), 0);
  for (const Value& v : p_.values) {
    if (v.home == Home::kConst) elems[static_cast<size_t>(v.index)] = numel(v.dims);
  }
  for (size_t i = 0; i < p_.consts.size(); ++i) {
    const DeviceConst& c = p_.consts[i];
    std::vector<float> f;
    std::vector<int64_t> ints;
    switch (c.kind) {
      case DeviceConst::kInitializer:
        if (c.dtype == TESSERA_DTYPE_INT64)
          ints = host.ints(c.name);
        else
          f = host.floats(c.name);
        break;
      case DeviceConst::kScaled:
        f = host.floats(c.name);
        for (float& x : f) x *= c.factor;
        break;
      case DeviceConst::kZeros:
        f.assign(static_cast<size_t>(c.count), 0.0f);
        break;
      case DeviceConst::kBnScale:
      case DeviceConst::kBnShift: {
        const onnx::NodeProto& n = m.node(c.node);
        std::vector<float> scale = host.floats(n.input(1)), bias = host.floats(n.input(2));
        std::vector<float> mean = host.floats(n.input(3)), var = host.floats(n.input(4));
        float eps = tessera_plugin::attr_float(n, "epsilon", 1e-5f);
        if (scale.size() != bias.size() || scale.size() != mean.size() || scale.size() != var.size()) {
          fail(TESSERA_ERROR_INVALID_ARGUMENT, describe(n) + ": parameters of different lengths");
        }
        f.resize(scale.size());
        for (size_t k = 0; k < f.size(); ++k) {
          float s = scale[k] / std::sqrt(var[k] + eps);
          f[k] = c.kind == DeviceConst::kBnScale ? s : bias[k] - mean[k] * s;
        }
        break;
      }
    }
    size_t n_elems = c.dtype == TESSERA_DTYPE_INT64 ? ints.size() : f.size();
    if (static_cast<int64_t>(n_elems) != elems[i]) {
      fail(TESSERA_ERROR_INVALID_ARGUMENT, "constant '" + c.name + "' has " + std::to_string(n_elems) +
                                               " elements, expected " + std::to_string(elems[i]));
    }
    size_t bytes = c.dtype == TESSERA_DTYPE_INT64 ? ints.size() * 8 : f.size() * 4;
    consts_[i] = device_malloc(bytes, "constant '" + c.name + "'");
    const void* src = c.dtype == TESSERA_DTYPE_INT64 ? static_cast<const void*>(ints.data()) : f.data();
    check_cuda(cudaMemcpy(consts_[i], src, bytes, cudaMemcpyHostToDevice), "upload of constant '" + c.name + "'");
  }
}

Engine::~Engine() {
  gemm_.clear();
  conv_.clear();
  // cudaFree waits for the work that uses the memory.
  for (auto& [id, ptr] : scratch_) (void)cudaFree(ptr);
  for (void* q : consts_) (void)cudaFree(q);
}

std::vector<ConvChoice> Engine::conv_choices() const {
  std::vector<ConvChoice> out(p_.steps.size());
  for (size_t t = 0; t < p_.steps.size(); ++t) {
    if (conv_[t]) out[t] = conv_[t]->choice();
  }
  return out;
}

void* Engine::scratch(ThreadContext& /*ctx*/) {
  if (p_.scratch_bytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  void*& s = scratch_[std::this_thread::get_id()];
  if (!s) s = device_malloc(static_cast<size_t>(p_.scratch_bytes), "scratch of the region");
  return s;
}

void Engine::run(const tessera_tensor_t* inputs, size_t num_inputs, tessera_tensor_t* outputs, size_t num_outputs,
                 const tessera_profile_sink_t* sink) {
  tessera_plugin::check_descriptors(inputs, num_inputs, in_types_, "input");
  tessera_plugin::check_descriptors(outputs, num_outputs, out_types_, "output");
  ThreadContext& ctx = thread_context();
  char* scratch_base = static_cast<char*>(scratch(ctx));
  void* dnn_ws = dnn_workspace_ ? ctx.dnn_workspace(dnn_workspace_) : nullptr;
  std::vector<void*> ptrs(p_.values.size(), nullptr);
  // Roots first; an alias takes its root's pointer (aliases point to earlier values).
  for (size_t v = 0; v < p_.values.size(); ++v) {
    const Value& x = p_.values[v];
    switch (x.home) {
      case Home::kInput:
        ptrs[v] = inputs[x.index].data;
        break;
      case Home::kOutput:
        ptrs[v] = outputs[x.index].data;
        break;
      case Home::kConst:
        ptrs[v] = consts_[static_cast<size_t>(x.index)];
        break;
      case Home::kTemp:
        ptrs[v] = scratch_base ? scratch_base + x.offset : nullptr;
        break;
      case Home::kAlias:
        break;
    }
  }
  for (size_t v = 0; v < p_.values.size(); ++v) {
    size_t r = v;
    for (int guard = 0; p_.values[r].home == Home::kAlias && guard < 1 << 20; ++guard) {
      r = static_cast<size_t>(p_.values[r].index);
    }
    ptrs[v] = ptrs[r];
  }
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  for (size_t t = 0; t < p_.steps.size(); ++t) {
    Clock::time_point start = Clock::now();
    execute(t, ctx, ptrs.data(), dnn_ws);
    if (sink && sink->step) {
      check_cuda(cudaStreamSynchronize(ctx.stream()), p_.steps[t].where + ": cudaStreamSynchronize");
      Clock::time_point end = Clock::now();
      const Step& s = p_.steps[t];
      std::vector<const char*> names;
      for (const std::string& n : s.nodes) names.push_back(n.c_str());
      std::string what = s.kind == StepKind::kConv && conv_[t] ? s.what + " (" + conv_[t]->algo_name() + ")" : s.what;
      sink->step(sink->ctx, names.data(), static_cast<int32_t>(names.size()), what.c_str(),
                 std::chrono::duration<double, std::micro>(start - t0).count(),
                 std::chrono::duration<double, std::micro>(end - start).count());
    }
  }
  check_cuda(cudaGetLastError(), "run: cudaGetLastError");
}

// The part of a GEMM's epilogue cuBLASLt did not run (GemmPlan::applied), in place on D viewed as [rows, N].
void Engine::finish_epilogue(const Step& s, Epilogue applied, void* const* ptrs, cudaStream_t st) {
  const GemmParams& g = s.gemm;
  Chain c;
  c.rank = 2;
  c.dims[0] = g.batch * g.m;
  c.dims[1] = g.n;
  c.num_operands = 1;
  c.operands[0] = static_cast<const float*>(ptrs[g.d]);
  c.strides[0][0] = g.n;
  c.strides[0][1] = 1;
  bool has_bias =
      g.epilogue == Epilogue::kBias || g.epilogue == Epilogue::kReluBias || g.epilogue == Epilogue::kGeluTanhBias;
  if (has_bias && applied == Epilogue::kNone) {
    c.operands[1] = static_cast<const float*>(ptrs[g.bias]);
    c.strides[1][0] = 0;
    c.strides[1][1] = 1;
    c.num_operands = 2;
    c.ops[c.num_ops].code = kAdd;
    c.ops[c.num_ops++].operand = 1;
  }
  if (g.epilogue == Epilogue::kRelu || g.epilogue == Epilogue::kReluBias) c.ops[c.num_ops++].code = kRelu;
  if (g.epilogue == Epilogue::kGeluTanhBias) c.ops[c.num_ops++].code = kGeluTanh;
  check_cuda(launch_chain(c, static_cast<float*>(ptrs[g.d]), st), s.where + ": launch_chain (epilogue)");
}

void Engine::execute(size_t t, ThreadContext& ctx, void* const* ptrs, void* dnn_ws) {
  const Step& s = p_.steps[t];
  cudaStream_t st = ctx.stream();
  auto f = [&](int v) { return v >= 0 ? static_cast<float*>(ptrs[v]) : nullptr; };
  switch (s.kind) {
    case StepKind::kGemm:
      if (s.gemm.c >= 0) {
        check_cuda(launch_strided_copy(s.gemm.c_copy, ptrs[s.gemm.c], ptrs[s.gemm.d], st),
                   s.where + ": launch_strided_copy (C)");
      }
      gemm_[t]->run(ctx, f(s.gemm.a), f(s.gemm.b), f(s.gemm.d), s.where);
      if (gemm_[t]->applied() != s.gemm.epilogue) finish_epilogue(s, gemm_[t]->applied(), ptrs, st);
      break;
    case StepKind::kConv:
      conv_[t]->run(ctx, f(s.conv.x), f(s.conv.w_value), f(s.conv.bias), f(s.conv.z), f(s.conv.y), dnn_ws, s.where);
      break;
    case StepKind::kChain: {
      Chain c = s.chain;
      for (int k = 0; k < c.num_operands; ++k) c.operands[k] = f(s.chain_operands[k]);
      check_cuda(launch_chain(c, f(s.out), st), s.where + ": launch_chain");
      break;
    }
    case StepKind::kMemcpy: {
      if (ptrs[s.in] != ptrs[s.out]) {
        size_t bytes = static_cast<size_t>(p_.values[static_cast<size_t>(s.out)].bytes());
        check_cuda(cudaMemcpyAsync(ptrs[s.out], ptrs[s.in], bytes, cudaMemcpyDeviceToDevice, st),
                   s.where + ": cudaMemcpyAsync");
      }
      break;
    }
    case StepKind::kStrided:
      if (s.fill) {
        check_cuda(launch_fill(f(s.out), numel(p_.values[static_cast<size_t>(s.out)].dims), s.fill_value, st),
                   s.where + ": launch_fill");
      }
      for (const CopyPiece& p : s.pieces) {
        check_cuda(launch_strided_copy(p.copy, ptrs[p.src], ptrs[p.dst], st), s.where + ": launch_strided_copy");
      }
      break;
    case StepKind::kGather:
      check_cuda(launch_gather(ptrs[s.in], static_cast<const int64_t*>(ptrs[s.aux]), ptrs[s.out], s.outer, s.len,
                               s.inner, s.count, 4, nullptr, st),
                 s.where + ": launch_gather");
      break;
    case StepKind::kSoftmax:
      check_cuda(launch_softmax(f(s.in), f(s.out), s.outer, s.len, s.inner, s.code == 1, st),
                 s.where + ": launch_softmax");
      break;
    case StepKind::kLayerNorm:
      check_cuda(launch_layernorm(f(s.in), f(s.aux), f(s.aux2), f(s.out), s.outer, s.len, s.eps, st),
                 s.where + ": launch_layernorm");
      break;
    case StepKind::kReduce:
      check_cuda(launch_reduce(f(s.in), f(s.out), s.outer, s.len, s.inner, s.code, st), s.where + ": launch_reduce");
      break;
    case StepKind::kPool:
      check_cuda(launch_pool2d(s.pool, f(s.in), f(s.out), st), s.where + ": launch_pool2d");
      break;
    case StepKind::kResize:
      check_cuda(launch_resize2d(s.resize, f(s.in), f(s.out), st), s.where + ": launch_resize2d");
      break;
  }
}

}  // namespace tessera_cuda
