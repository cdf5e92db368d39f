// Convolution steps on cuDNN (see cuda_engine.h).
//
// Three ways to run a convolution step, all with fp32 data and fp32 compute:
//   graph fused  cuDNN 9's graph API: one operation graph of the convolution
//                (forward; backward-data for ConvTranspose) and the step's
//                epilogue (bias add, residual add, ReLU) as pointwise ops
//   graph        the convolution alone on the graph API; the epilogue, if
//                any, as one chain kernel of ours (cuda_kernels.h)
//   legacy       cudnnConvolutionForward, cudnnConvolutionBiasActivationForward
//                or cudnnConvolutionBackwardData, an algorithm from the _v7
//                heuristics
// Left out, because their numbers differ from fp32 FMA arithmetic beyond
// what fp32 comparisons allow: engines that use tensor cores (TF32 for fp32
// data), down-convert inputs, reduce in reduced precision, or use FFTs (error
// growing with the image); the legacy path sets CUDNN_FMA_MATH and skips the
// FFT algorithms. Engines compiled at run time (NVRTC) are left out too:
// their plans take seconds to build, at every load.
//
// Where the engine is built (compile), the first few candidates of each way,
// in the heuristics' order, are timed on scratch buffers with the real
// weights, and the fastest is kept. Its description (way, engine index and
// knob choices, or algorithm) goes into the blob, and load rebuilds exactly
// that one: no search, no timing. A candidate that cuDNN refuses, at
// finalization or at its first execution, is skipped; a step no candidate
// runs is refused at compile, where the host can place it elsewhere.
//
// TESSERA_CUDA_VERBOSE=1 prints every candidate's time and the choice to
// stderr. TESSERA_CUDA_CONV_WAYS=graph (or legacy) limits the search to the
// graph ways (or the legacy one), for tests of each.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda_engine.h"

namespace tessera_cuda {

using tessera_plugin::fail;
using tessera_plugin::Failure;

namespace {

int as_int(int64_t v, const std::string& where) {
  if (v < 0 || v > INT32_MAX)
    fail(TESSERA_ERROR_UNSUPPORTED, where + ": dimension " + std::to_string(v) + " too large");
  return static_cast<int>(v);
}

bool verbose() {
  static const bool v = [] {
    const char* e = std::getenv("TESSERA_CUDA_VERBOSE");
    return e && *e && std::string(e) != "0";
  }();
  return v;
}

// Device memory freed at scope exit (cudaFree waits for the work using it).
struct DeviceBuffer {
  void* p = nullptr;
  DeviceBuffer(size_t bytes, const std::string& what) { p = device_malloc(bytes, what); }
  ~DeviceBuffer() { (void)cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// One cuDNN backend descriptor, destroyed with its owner.
class Desc {
 public:
  Desc() = default;
  Desc(cudnnBackendDescriptorType_t type, const std::string& where) {
    check_cudnn(cudnnBackendCreateDescriptor(type, &d_), where + ": cudnnBackendCreateDescriptor");
  }
  ~Desc() { reset(); }
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc& operator=(Desc&& o) noexcept {
    if (this != &o) {
      reset();
      d_ = std::exchange(o.d_, nullptr);
    }
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  // Raw pointer to the handle, for attributes that take descriptors.
  const cudnnBackendDescriptor_t* ref() const { return &d_; }

  void set(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const void* v,
           const std::string& where) {
    check_cudnn(cudnnBackendSetAttribute(d_, a, t, n, v),
                where + ": cudnnBackendSetAttribute(" + std::to_string(static_cast<int>(a)) + ")");
  }
  void set_desc(cudnnBackendAttributeName_t a, const Desc& v, const std::string& where) {
    set(a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, v.ref(), where);
  }
  void finalize(const std::string& where) { check_cudnn(cudnnBackendFinalize(d_), where + ": cudnnBackendFinalize"); }
  int64_t get_i64(cudnnBackendAttributeName_t a, const std::string& where) const {
    int64_t v = 0, n = 0;
    check_cudnn(cudnnBackendGetAttribute(d_, a, CUDNN_TYPE_INT64, 1, &n, &v),
                where + ": cudnnBackendGetAttribute(" + std::to_string(static_cast<int>(a)) + ")");
    return v;
  }

 private:
  void reset() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
    d_ = nullptr;
  }
  cudnnBackendDescriptor_t d_ = nullptr;
};

// Unique ids of the graph's tensors (ConvTranspose: x is the backward-data op's dy, y its dx).
constexpr int64_t kUidX = 1, kUidW = 2, kUidY = 3, kUidBias = 4, kUidZ = 5, kUidVirtual = 100;

// Device pointers are 256-byte aligned everywhere the host hands them out (arenas, staging, the engine's scratch);
// the graph's tensors promise 16 and run() checks it.
constexpr int64_t kAlignment = 16;

Desc tensor(int64_t uid, const std::array<int64_t, 4>& dims, bool is_virtual, const std::string& where) {
  const std::array<int64_t, 4> strides{dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR, where);
  cudnnDataType_t dt = CUDNN_DATA_FLOAT;
  int64_t alignment = kAlignment;
  bool virt = is_virtual;
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, where);
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), where);
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(), where);
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, where);
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, where);
  t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, where);
  t.finalize(where + " (tensor " + std::to_string(uid) + ")");
  return t;
}

// A pointwise op y = mode(x[, b]); its mode descriptor goes into `keep`.
Desc pointwise(cudnnPointwiseMode_t mode, const Desc& x, const Desc* b, const Desc& y, std::vector<Desc>& keep,
               const std::string& where) {
  Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, where);
  cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, where);
  pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, where);
  pw.finalize(where + " (pointwise)");
  Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, where);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, where);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, where);
  if (b) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b, where);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, where);
  op.finalize(where + " (pointwise op)");
  keep.push_back(std::move(pw));
  return op;
}

// The operation graph of a convolution step; with `fused`, its epilogue too
// (bias, residual, ReLU: the step's c.relu form, y = relu(conv + bias + z)).
// Every descriptor it is made of is appended to `keep`: their owner keeps
// them as long as the graph and its plans.
Desc operation_graph(const ConvParams& c, bool fused, cudnnHandle_t handle, std::vector<Desc>& keep,
                     const std::string& where) {
  const std::array<int64_t, 4> xd{c.n, c.c, c.h, c.w}, yd{c.n, c.k, c.oh, c.ow};
  // Filter: forward [k, c / group, kh, kw]; transposed, the forward convolution's [c, k / group, kh, kw].
  const std::array<int64_t, 4> wd = c.transpose ? std::array<int64_t, 4>{c.c, c.k / c.group, c.kh, c.kw}
                                                : std::array<int64_t, 4>{c.k, c.c / c.group, c.kh, c.kw};
  Desc x = tensor(kUidX, xd, false, where), w = tensor(kUidW, wd, false, where), y = tensor(kUidY, yd, false, where);

  Desc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, where);
  int64_t spatial = 2;
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t pads[2] = {c.pad_h, c.pad_w}, strides[2] = {c.stride_h, c.stride_w}, dil[2] = {c.dil_h, c.dil_w};
  conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial, where);
  conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, where);
  conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, where);
  conv.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, strides, where);
  conv.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil, where);
  conv.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads, where);
  conv.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads, where);
  conv.finalize(where + " (convolution)");

  const bool epilogue = fused && c.relu;
  std::vector<Desc> ops, tensors;
  float alpha = 1.0f, beta = 0.0f;
  if (c.transpose) {
    Desc op(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, where);
    op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, conv, where);
    op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, w, where);
    op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, x, where);
    op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, y, where);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha, where);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &beta, where);
    op.finalize(where + " (backward-data op)");
    ops.push_back(std::move(op));
  } else {
    Desc acc = epilogue ? tensor(kUidVirtual, yd, true, where) : Desc();
    Desc op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, where);
    op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv, where);
    op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x, where);
    op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w, where);
    op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, epilogue ? acc : y, where);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha, where);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta, where);
    op.finalize(where + " (convolution op)");
    ops.push_back(std::move(op));
    if (epilogue) {
      // acc + bias -> [+ z] -> relu -> y
      Desc b = tensor(kUidBias, {1, c.k, 1, 1}, false, where);
      Desc biased = tensor(kUidVirtual + 1, yd, true, where);
      ops.push_back(pointwise(CUDNN_POINTWISE_ADD, acc, &b, biased, tensors, where));
      Desc pre = std::move(biased);
      if (c.z >= 0) {
        Desc z = tensor(kUidZ, yd, false, where);
        Desc summed = tensor(kUidVirtual + 2, yd, true, where);
        ops.push_back(pointwise(CUDNN_POINTWISE_ADD, pre, &z, summed, tensors, where));
        tensors.push_back(std::move(pre));
        tensors.push_back(std::move(z));
        pre = std::move(summed);
      }
      ops.push_back(pointwise(CUDNN_POINTWISE_RELU_FWD, pre, nullptr, y, tensors, where));
      for (Desc* d : {&acc, &b, &pre}) tensors.push_back(std::move(*d));
    }
  }
  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, where);
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const Desc& d : ops) raw.push_back(d.get());
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, where);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()), raw.data(),
            where);
  graph.finalize(where + " (operation graph)");
  for (Desc* d : {&x, &w, &y, &conv}) keep.push_back(std::move(*d));
  for (Desc& d : ops) keep.push_back(std::move(d));
  for (Desc& d : tensors) keep.push_back(std::move(d));
  return graph;
}

// An execution plan from a finalized engine config; throws when cuDNN refuses it.
Desc execution_plan(const Desc& cfg, cudnnHandle_t handle, const std::string& where) {
  Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, where);
  plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, where);
  plan.set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg, where);
  plan.finalize(where + " (execution plan)");
  return plan;
}

// The engine config of `choice` (engine index and knob choices) on `graph`; its parts go into `keep`.
Desc engine_config(const Desc& graph, const ConvChoice& choice, std::vector<Desc>& keep, const std::string& where) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR, where);
  engine.set_desc(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph, where);
  engine.set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &choice.engine, where);
  engine.finalize(where + " (engine " + std::to_string(choice.engine) + ")");
  std::vector<Desc> knobs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const auto& [type, value] : choice.knobs) {
    Desc k(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, where);
    cudnnBackendKnobType_t t = static_cast<cudnnBackendKnobType_t>(type);
    int64_t v = value;
    k.set(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &t, where);
    k.set(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &v, where);
    k.finalize(where + " (knob choice)");
    raw.push_back(k.get());
    knobs.push_back(std::move(k));
  }
  Desc cfg(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, where);
  cfg.set_desc(CUDNN_ATTR_ENGINECFG_ENGINE, engine, where);
  if (!raw.empty()) {
    cfg.set(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()),
            raw.data(), where);
  }
  cfg.finalize(where + " (engine config)");
  keep.push_back(std::move(engine));
  for (Desc& k : knobs) keep.push_back(std::move(k));
  return cfg;
}

// Why an engine config is not a candidate ("" when it is), and its description.
std::string describe_config(const Desc& cfg, ConvChoice& out, const std::string& where) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR, where);
  int64_t n = 0;
  cudnnBackendDescriptor_t raw_engine = engine.get();
  check_cudnn(cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                       &raw_engine),
              where + ": engine of a config");
  out.engine = engine.get_i64(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, where);
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  n = 0;
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) != CUDNN_STATUS_SUCCESS) {
    return "numerical notes unreadable";
  }
  for (int64_t i = 0; i < std::min<int64_t>(n, CUDNN_NUMERICAL_NOTE_TYPE_COUNT); ++i) {
    switch (notes[i]) {
      case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
        return "tensor cores (TF32)";
      case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
        return "down-converts inputs";
      case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
        return "reduced-precision reduction";
      case CUDNN_NUMERICAL_NOTE_FFT:
        return "FFT";
      default:
        break;
    }
  }
  cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  n = 0;
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, behavior) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < std::min<int64_t>(n, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT); ++i) {
      if (behavior[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) return "compiled at run time";
    }
  }
  std::vector<Desc> knobs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
    knobs.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, where);
    raw.push_back(knobs.back().get());
  }
  n = 0;
  check_cudnn(cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                       CUDNN_KNOB_TYPE_COUNTS, &n, raw.data()),
              where + ": knob choices of a config");
  out.knobs.clear();
  for (int64_t i = 0; i < std::min<int64_t>(n, CUDNN_KNOB_TYPE_COUNTS); ++i) {
    cudnnBackendKnobType_t type{};
    int64_t value = 0, got = 0;
    check_cudnn(cudnnBackendGetAttribute(raw[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                         CUDNN_TYPE_KNOB_TYPE, 1, &got, &type),
                where + ": knob type");
    check_cudnn(cudnnBackendGetAttribute(raw[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                         CUDNN_TYPE_INT64, 1, &got, &value),
                where + ": knob value");
    out.knobs.emplace_back(static_cast<int32_t>(type), value);
  }
  return "";
}

// The engine configs the heuristics list for `graph`, best first, in `mode`.
std::vector<Desc> heuristic_configs(const Desc& graph, cudnnBackendHeurMode_t mode, const std::string& where) {
  std::vector<Desc> out;
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, where);
  heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, where);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, where);
  if (cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS) return out;
  int64_t count = 0;
  if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                               nullptr) != CUDNN_STATUS_SUCCESS ||
      count <= 0) {
    return out;
  }
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    out.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, where);
    raw.push_back(out.back().get());
  }
  int64_t got = 0;
  if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                               raw.data()) != CUDNN_STATUS_SUCCESS) {
    out.clear();
    return out;
  }
  out.resize(static_cast<size_t>(std::clamp<int64_t>(got, 0, count)));
  return out;
}

// The algorithms of the _v7 heuristics' results that ran for them, in order, leaving out the two FFT ones.
template <typename Perf>
void keep_algos(const Perf* perf, int found, int fft, int fft_tiling, std::vector<int>& out) {
  for (int i = 0; i < found; ++i) {
    const int algo = static_cast<int>(perf[i].algo);
    if (perf[i].status == CUDNN_STATUS_SUCCESS && algo != fft && algo != fft_tiling) out.push_back(algo);
  }
}

const char* path_name(int32_t path) {
  switch (path) {
    case ConvChoice::kGraphFused:
      return "graph fused";
    case ConvChoice::kGraph:
      return "graph";
    case ConvChoice::kLegacy:
      return "legacy";
    default:
      return "none";
  }
}

}  // namespace

// An operation graph and every descriptor it is made of, shared by the plans made on it.
struct ConvGraph {
  std::vector<Desc> parts;
  Desc graph;
};

// A finalized execution plan with its variant packs (one per calling thread, remade when the pointers change).
struct ConvGraphPlan {
  std::shared_ptr<const ConvGraph> graph;
  std::vector<Desc> parts;  // the engine config's own (engine, knob choices)
  Desc cfg, plan;
  std::vector<int64_t> uids;
  size_t workspace = 0;
  struct Pack {
    std::vector<void*> ptrs;
    void* ws = nullptr;
    Desc desc;
  };
  std::mutex mu;
  std::map<std::thread::id, Pack> packs;
};

namespace {

std::shared_ptr<const ConvGraph> conv_graph(const ConvParams& c, bool fused, cudnnHandle_t handle,
                                            const std::string& where) {
  auto g = std::make_shared<ConvGraph>();
  g->graph = operation_graph(c, fused, handle, g->parts, where);
  return g;
}

// The plan of `choice` (a graph way) for step `c`: made from `cfg` (a heuristics result on `graph`, taken over),
// or, without one, on a graph made here with the config rebuilt from the choice.
std::unique_ptr<ConvGraphPlan> graph_plan(const ConvParams& c, const ConvChoice& choice,
                                          std::shared_ptr<const ConvGraph> graph, Desc* cfg, cudnnHandle_t handle,
                                          const std::string& where) {
  auto g = std::make_unique<ConvGraphPlan>();
  const bool fused = choice.path == ConvChoice::kGraphFused;
  if (cfg) {
    g->graph = std::move(graph);
    g->cfg = std::move(*cfg);
  } else {
    g->graph = conv_graph(c, fused, handle, where);
    g->cfg = engine_config(g->graph->graph, choice, g->parts, where);
  }
  g->plan = execution_plan(g->cfg, handle, where);
  int64_t ws = g->plan.get_i64(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, where);
  g->workspace = static_cast<size_t>(std::max<int64_t>(ws, 0));
  g->uids = {kUidX, kUidW, kUidY};
  if (fused && c.relu) {
    g->uids.push_back(kUidBias);
    if (c.z >= 0) g->uids.push_back(kUidZ);
  }
  return g;
}

}  // namespace

std::string ConvChoice::describe() const {
  std::string s = path_name(path);
  if (path == kLegacy) return s + " algo " + std::to_string(algo);
  if (path == kGraph || path == kGraphFused) {
    s += " engine " + std::to_string(engine);
    for (const auto& [t, v] : knobs) s += " " + std::to_string(t) + "=" + std::to_string(v);
  }
  return s;
}

ConvPlan::ConvPlan(const ConvParams& c, const float* w, const float* bias, ThreadContext& ctx, size_t max_workspace,
                   const ConvChoice* given, const std::string& where)
    : c_(c) {
  try {
    make_legacy_descriptors(where);
    if (c.relu) {
      // The epilogue of the unfused graph way: y = relu(y + bias [+ z]) in place.
      Chain& e = epilogue_;
      e.rank = 4;
      const int64_t od[4] = {c.n, c.k, c.oh, c.ow};
      for (int a = 0; a < 4; ++a) e.dims[a] = od[a];
      e.strides[0][0] = c.k * c.oh * c.ow;
      e.strides[0][1] = c.oh * c.ow;
      e.strides[0][2] = c.ow;
      e.strides[0][3] = 1;
      e.strides[1][1] = 1;  // bias along channels
      e.num_operands = 2;
      e.ops[e.num_ops].code = kAdd;
      e.ops[e.num_ops++].operand = 1;
      if (c.z >= 0) {
        for (int a = 0; a < 4; ++a) e.strides[2][a] = e.strides[0][a];
        e.num_operands = 3;
        e.ops[e.num_ops].code = kAdd;
        e.ops[e.num_ops++].operand = 2;
      }
      e.ops[e.num_ops++].code = kRelu;
    }
    if (given) {
      try {
        adopt(*given, ctx, max_workspace, where);
        return;
      } catch (const Failure& f) {
        // The blob's choice no longer builds (it was made with the same cuDNN: this should not happen); search again.
        if (verbose())
          std::fprintf(stderr, "%s: stored choice %s: %s\n", where.c_str(), given->describe().c_str(),
                       f.message.c_str());
      }
    }
    search(w, bias, ctx, max_workspace, where);
  } catch (...) {
    destroy();
    throw;
  }
}

void ConvPlan::make_legacy_descriptors(const std::string& where) {
  const ConvParams& c = c_;
  check_cudnn(cudnnCreateTensorDescriptor(&x_desc_), where + ": cudnnCreateTensorDescriptor");
  check_cudnn(cudnnCreateTensorDescriptor(&y_desc_), where + ": cudnnCreateTensorDescriptor");
  check_cudnn(cudnnCreateFilterDescriptor(&w_desc_), where + ": cudnnCreateFilterDescriptor");
  check_cudnn(cudnnCreateConvolutionDescriptor(&conv_desc_), where + ": cudnnCreateConvolutionDescriptor");
  // Forward: x [n, c, h, w] -> y [n, k, oh, ow], filter [k, c / group, kh, kw].
  // Transposed: x [n, c, h, w] is the forward's dy, y [n, k, oh, ow] its dx, filter [c, k / group, kh, kw].
  const int n = as_int(c.n, where), ci = as_int(c.c, where), h = as_int(c.h, where), wd = as_int(c.w, where);
  const int k = as_int(c.k, where), oh = as_int(c.oh, where), ow = as_int(c.ow, where);
  const int g = as_int(c.group, where);
  check_cudnn(cudnnSetTensor4dDescriptor(x_desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, ci, h, wd),
              where + ": cudnnSetTensor4dDescriptor(x)");
  check_cudnn(cudnnSetTensor4dDescriptor(y_desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, k, oh, ow),
              where + ": cudnnSetTensor4dDescriptor(y)");
  check_cudnn(cudnnSetFilter4dDescriptor(w_desc_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, c.transpose ? ci : k,
                                         c.transpose ? k / g : ci / g, as_int(c.kh, where), as_int(c.kw, where)),
              where + ": cudnnSetFilter4dDescriptor");
  check_cudnn(
      cudnnSetConvolution2dDescriptor(conv_desc_, as_int(c.pad_h, where), as_int(c.pad_w, where),
                                      as_int(c.stride_h, where), as_int(c.stride_w, where), as_int(c.dil_h, where),
                                      as_int(c.dil_w, where), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
      where + ": cudnnSetConvolution2dDescriptor");
  check_cudnn(cudnnSetConvolutionGroupCount(conv_desc_, g), where + ": cudnnSetConvolutionGroupCount");
  check_cudnn(cudnnSetConvolutionMathType(conv_desc_, CUDNN_FMA_MATH), where + ": cudnnSetConvolutionMathType");
  if (c.relu) {
    check_cudnn(cudnnCreateTensorDescriptor(&bias_desc_), where + ": cudnnCreateTensorDescriptor");
    check_cudnn(cudnnSetTensor4dDescriptor(bias_desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, k, 1, 1),
                where + ": cudnnSetTensor4dDescriptor(bias)");
    check_cudnn(cudnnCreateActivationDescriptor(&act_desc_), where + ": cudnnCreateActivationDescriptor");
    check_cudnn(cudnnSetActivationDescriptor(act_desc_, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0),
                where + ": cudnnSetActivationDescriptor");
  }
  // The shapes cuDNN derives must be ours (transposed: the forward convolution of y gives x).
  int dn = 0, dc = 0, dh = 0, dw = 0;
  check_cudnn(
      cudnnGetConvolution2dForwardOutputDim(conv_desc_, c.transpose ? y_desc_ : x_desc_, w_desc_, &dn, &dc, &dh, &dw),
      where + ": cudnnGetConvolution2dForwardOutputDim");
  const int want[4] = {n, c.transpose ? ci : k, c.transpose ? h : oh, c.transpose ? wd : ow};
  if (dn != want[0] || dc != want[1] || dh != want[2] || dw != want[3]) {
    fail(TESSERA_ERROR_UNSUPPORTED, where + ": cuDNN's " + (c.transpose ? "backward-data" : "output") + " shape [" +
                                        std::to_string(dn) + "," + std::to_string(dc) + "," + std::to_string(dh) + "," +
                                        std::to_string(dw) + "] differs from the model's");
  }
}

size_t ConvPlan::legacy_workspace(int algo) const {
  size_t ws = 0;
  cudnnStatus_t s =
      c_.transpose
          ? cudnnGetConvolutionBackwardDataWorkspaceSize(thread_context().dnn(), w_desc_, x_desc_, conv_desc_, y_desc_,
                                                         static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &ws)
          : cudnnGetConvolutionForwardWorkspaceSize(thread_context().dnn(), x_desc_, w_desc_, conv_desc_, y_desc_,
                                                    static_cast<cudnnConvolutionFwdAlgo_t>(algo), &ws);
  return s == CUDNN_STATUS_SUCCESS ? ws : std::numeric_limits<size_t>::max();
}

void ConvPlan::adopt(const ConvChoice& choice, ThreadContext& ctx, size_t max_workspace, const std::string& where) {
  if (choice.path == ConvChoice::kLegacy) {
    size_t ws = legacy_workspace(choice.algo);
    if (ws > max_workspace) {
      fail(TESSERA_ERROR_UNSUPPORTED, where + ": legacy algorithm " + std::to_string(choice.algo) + " needs " +
                                          std::to_string(ws) + " bytes of workspace");
    }
    workspace_ = ws;
  } else if (choice.path == ConvChoice::kGraph || choice.path == ConvChoice::kGraphFused) {
    std::unique_ptr<ConvGraphPlan> g = graph_plan(c_, choice, nullptr, nullptr, ctx.dnn(), where);
    if (g->workspace > max_workspace) {
      fail(TESSERA_ERROR_UNSUPPORTED, where + ": engine " + std::to_string(choice.engine) + " needs " +
                                          std::to_string(g->workspace) + " bytes of workspace");
    }
    workspace_ = g->workspace;
    graph_ = std::move(g);
  } else {
    fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, where + ": unknown convolution way " + std::to_string(choice.path));
  }
  choice_ = choice;
  algo_name_ = choice_.describe();
}

void ConvPlan::search(const float* w, const float* bias, ThreadContext& ctx, size_t max_workspace,
                      const std::string& where) {
  struct Candidate {
    ConvChoice choice;
    std::unique_ptr<ConvGraphPlan> graph;
    size_t workspace = 0;
  };
  std::vector<Candidate> candidates;
  std::string refused;
  auto note = [&](const std::string& what, const std::string& why) {
    if (verbose()) std::fprintf(stderr, "%s: %s: %s\n", where.c_str(), what.c_str(), why.c_str());
    if (refused.size() < 400) refused += (refused.empty() ? "" : "; ") + what + ": " + why;
  };
  // Up to this many of each way, in the heuristics' order.
  constexpr size_t kPerWay = 4;
  const char* only = std::getenv("TESSERA_CUDA_CONV_WAYS");
  const bool graph_ways = !only || !*only || std::string(only) == "graph";
  const bool legacy_way = !only || !*only || std::string(only) == "legacy";

  // Graph API: fused (when the step has an epilogue), then the convolution alone.
  std::vector<int32_t> ways;
  if (graph_ways && c_.relu) ways.push_back(ConvChoice::kGraphFused);
  if (graph_ways) ways.push_back(ConvChoice::kGraph);
  for (int32_t way : ways) {
    std::shared_ptr<const ConvGraph> graph;
    try {
      graph = conv_graph(c_, way == ConvChoice::kGraphFused, ctx.dnn(), where);
    } catch (const Failure& f) {
      note(path_name(way), f.message);
      continue;
    }
    size_t taken = 0;
    std::vector<std::pair<int64_t, std::vector<std::pair<int32_t, int64_t>>>> seen;
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      for (Desc& cfg : heuristic_configs(graph->graph, mode, where)) {
        if (taken >= kPerWay) break;
        ConvChoice ch;
        ch.path = way;
        try {
          std::string why = describe_config(cfg, ch, where);
          if (std::find(seen.begin(), seen.end(), std::make_pair(ch.engine, ch.knobs)) != seen.end()) continue;
          seen.emplace_back(ch.engine, ch.knobs);
          if (!why.empty()) {
            note(ch.describe(), why);
            continue;
          }
          std::unique_ptr<ConvGraphPlan> g = graph_plan(c_, ch, graph, &cfg, ctx.dnn(), where);
          if (g->workspace > max_workspace) {
            note(ch.describe(), "workspace of " + std::to_string(g->workspace) + " bytes");
            continue;
          }
          size_t ws = g->workspace;
          candidates.push_back(Candidate{ch, std::move(g), ws});
          ++taken;
        } catch (const Failure& f) {
          note(ch.describe(), f.message);
        }
      }
    }
  }

  // Legacy API: the _v7 heuristics' algorithms, then the one that is always there.
  std::vector<int> algos;
  if (!legacy_way) {
    // none
  } else if (c_.transpose) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT] = {};
    int found = 0;
    check_cudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(ctx.dnn(), w_desc_, x_desc_, conv_desc_, y_desc_,
                                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, perf),
                where + ": cudnnGetConvolutionBackwardDataAlgorithm_v7");
    keep_algos(perf, found, CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING, algos);
    algos.push_back(static_cast<int>(CUDNN_CONVOLUTION_BWD_DATA_ALGO_1));
  } else {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT] = {};
    int found = 0;
    check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(ctx.dnn(), x_desc_, w_desc_, conv_desc_, y_desc_,
                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf),
                where + ": cudnnGetConvolutionForwardAlgorithm_v7");
    // The fused call (bias + activation) runs IMPLICIT_PRECOMP_GEMM only with ReLU; others are tried and may fail.
    keep_algos(perf, found, CUDNN_CONVOLUTION_FWD_ALGO_FFT, CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING, algos);
    algos.push_back(static_cast<int>(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM));
  }
  size_t legacy_taken = 0;
  for (int algo : algos) {
    if (legacy_taken >= kPerWay) break;
    bool dup = false;
    for (const Candidate& k : candidates) dup = dup || (k.choice.path == ConvChoice::kLegacy && k.choice.algo == algo);
    if (dup) continue;
    size_t ws = legacy_workspace(algo);
    if (ws > max_workspace) continue;
    ConvChoice ch;
    ch.path = ConvChoice::kLegacy;
    ch.algo = algo;
    candidates.push_back(Candidate{ch, nullptr, ws});
    ++legacy_taken;
  }

  // Time each on scratch buffers: one run to warm up (and to find a refusal cuDNN reports only at execution),
  // then the mean of three.
  const size_t x_bytes = static_cast<size_t>(c_.n * c_.c * c_.h * c_.w) * 4,
               y_bytes = static_cast<size_t>(c_.n * c_.k * c_.oh * c_.ow) * 4;
  DeviceBuffer xb(x_bytes, where + ": trial input"), yb(y_bytes, where + ": trial output");
  DeviceBuffer zb(c_.z >= 0 ? y_bytes : 256, where + ": trial residual");
  check_cuda(cudaMemsetAsync(xb.p, 0, x_bytes, ctx.stream()), where + ": cudaMemsetAsync");
  check_cuda(cudaMemsetAsync(zb.p, 0, c_.z >= 0 ? y_bytes : 256, ctx.stream()), where + ": cudaMemsetAsync");
  const float* z = c_.z >= 0 ? static_cast<const float*>(zb.p) : nullptr;
  cudaEvent_t ev[2] = {nullptr, nullptr};
  check_cuda(cudaEventCreate(&ev[0]), where + ": cudaEventCreate");
  if (cudaEventCreate(&ev[1]) != cudaSuccess) {
    (void)cudaEventDestroy(ev[0]);
    check_cuda(cudaGetLastError(), where + ": cudaEventCreate");
  }
  struct Events {
    cudaEvent_t* e;
    ~Events() {
      (void)cudaEventDestroy(e[0]);
      (void)cudaEventDestroy(e[1]);
    }
  } events{ev};
  size_t best = candidates.size();
  float best_ms = std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < candidates.size(); ++i) {
    Candidate& cand = candidates[i];
    void* ws = cand.workspace ? ctx.dnn_workspace(cand.workspace) : nullptr;
    float ms = 0;
    try {
      enqueue(cand.choice, cand.graph.get(), cand.workspace, ctx, static_cast<const float*>(xb.p), w, bias, z,
              static_cast<float*>(yb.p), ws, where);
      check_cuda(cudaStreamSynchronize(ctx.stream()), where + ": trial run");
      check_cuda(cudaEventRecord(ev[0], ctx.stream()), where + ": cudaEventRecord");
      for (int r = 0; r < 3; ++r) {
        enqueue(cand.choice, cand.graph.get(), cand.workspace, ctx, static_cast<const float*>(xb.p), w, bias, z,
                static_cast<float*>(yb.p), ws, where);
      }
      check_cuda(cudaEventRecord(ev[1], ctx.stream()), where + ": cudaEventRecord");
      check_cuda(cudaEventSynchronize(ev[1]), where + ": trial runs");
      check_cuda(cudaEventElapsedTime(&ms, ev[0], ev[1]), where + ": cudaEventElapsedTime");
      ms /= 3;
    } catch (const Failure& f) {
      // A refusal at execution leaves the stream usable; anything sticky fails the next check anyway.
      (void)cudaStreamSynchronize(ctx.stream());
      (void)cudaGetLastError();
      note(cand.choice.describe(), f.message);
      continue;
    }
    if (verbose()) std::fprintf(stderr, "%s: %s: %.4f ms\n", where.c_str(), cand.choice.describe().c_str(), ms);
    if (ms < best_ms) {
      best_ms = ms;
      best = i;
    }
  }
  if (best == candidates.size()) {
    fail(TESSERA_ERROR_UNSUPPORTED,
         where + ": no cuDNN convolution runs" + (refused.empty() ? "" : " (" + refused + ")"));
  }
  Candidate& win = candidates[best];
  choice_ = win.choice;
  workspace_ = win.workspace;
  graph_ = std::move(win.graph);
  algo_name_ = choice_.describe();
  if (verbose()) std::fprintf(stderr, "%s: chose %s\n", where.c_str(), algo_name_.c_str());
}

void ConvPlan::enqueue(const ConvChoice& choice, ConvGraphPlan* g, size_t ws_size, ThreadContext& ctx, const float* x,
                       const float* w, const float* bias, const float* z, float* y, void* ws,
                       const std::string& where) const {
  const float one = 1.0f, zero = 0.0f;
  if (choice.path == ConvChoice::kLegacy) {
    cudnnStatus_t s;
    if (c_.transpose) {
      s = cudnnConvolutionBackwardData(ctx.dnn(), &one, w_desc_, w, x_desc_, x, conv_desc_,
                                       static_cast<cudnnConvolutionBwdDataAlgo_t>(choice.algo), ws, ws_size, &zero,
                                       y_desc_, y);
    } else if (c_.relu) {
      // y = relu(conv(x) + alpha2 * z + bias); without a residual, z is y itself with alpha2 = 0.
      const float alpha2 = z ? 1.0f : 0.0f;
      s = cudnnConvolutionBiasActivationForward(ctx.dnn(), &one, x_desc_, x, w_desc_, w, conv_desc_,
                                                static_cast<cudnnConvolutionFwdAlgo_t>(choice.algo), ws, ws_size,
                                                &alpha2, y_desc_, z ? z : y, bias_desc_, bias, act_desc_, y_desc_, y);
    } else {
      s = cudnnConvolutionForward(ctx.dnn(), &one, x_desc_, x, w_desc_, w, conv_desc_,
                                  static_cast<cudnnConvolutionFwdAlgo_t>(choice.algo), ws, ws_size, &zero, y_desc_, y);
    }
    check_cudnn(s, where + (c_.transpose ? ": cudnnConvolutionBackwardData"
                            : c_.relu    ? ": cudnnConvolutionBiasActivationForward"
                                         : ": cudnnConvolutionForward"));
    return;
  }
  void* by_uid[6] = {nullptr, const_cast<float*>(x),    const_cast<float*>(w),
                     y,       const_cast<float*>(bias), const_cast<float*>(z)};
  std::vector<void*> ptrs;
  for (int64_t uid : g->uids) {
    void* p = by_uid[uid];
    if (reinterpret_cast<uintptr_t>(p) % kAlignment != 0) {
      fail(TESSERA_ERROR_RUNTIME,
           where + ": tensor " + std::to_string(uid) + " is not " + std::to_string(kAlignment) + "-byte aligned");
    }
    ptrs.push_back(p);
  }
  cudnnBackendDescriptor_t pack = nullptr;
  {
    std::lock_guard<std::mutex> lock(g->mu);
    ConvGraphPlan::Pack& p = g->packs[std::this_thread::get_id()];
    if (!p.desc.get() || p.ptrs != ptrs || p.ws != ws) {
      Desc d(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, where);
      d.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(g->uids.size()), g->uids.data(),
            where);
      d.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()), ptrs.data(),
            where);
      d.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws, where);
      d.finalize(where + " (variant pack)");
      p.desc = std::move(d);
      p.ptrs = ptrs;
      p.ws = ws;
    }
    pack = p.desc.get();
  }
  check_cudnn(cudnnBackendExecute(ctx.dnn(), g->plan.get(), pack), where + ": cudnnBackendExecute");
  if (choice.path == ConvChoice::kGraph && c_.relu) {
    Chain e = epilogue_;
    e.operands[0] = y;
    e.operands[1] = bias;
    if (c_.z >= 0) e.operands[2] = z;
    check_cuda(launch_chain(e, y, ctx.stream()), where + ": launch_chain (epilogue)");
  }
}

void ConvPlan::run(ThreadContext& ctx, const float* x, const float* w, const float* bias, const float* z, float* y,
                   void* ws, const std::string& where) const {
  enqueue(choice_, graph_.get(), workspace_, ctx, x, w, bias, z, y, ws, where);
}

void ConvPlan::destroy() {
  graph_.reset();
  if (act_desc_) cudnnDestroyActivationDescriptor(act_desc_);
  if (conv_desc_) cudnnDestroyConvolutionDescriptor(conv_desc_);
  if (w_desc_) cudnnDestroyFilterDescriptor(w_desc_);
  if (bias_desc_) cudnnDestroyTensorDescriptor(bias_desc_);
  if (y_desc_) cudnnDestroyTensorDescriptor(y_desc_);
  if (x_desc_) cudnnDestroyTensorDescriptor(x_desc_);
  act_desc_ = nullptr;
  conv_desc_ = nullptr;
  w_desc_ = nullptr;
  bias_desc_ = y_desc_ = x_desc_ = nullptr;
}

ConvPlan::~ConvPlan() { destroy(); }

}  // namespace tessera_cuda
