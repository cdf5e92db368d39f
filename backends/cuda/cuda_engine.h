// An engine: one region's program made ready on the device at load, and run.
//
//   GemmPlan   cuBLASLt descriptors, layouts and the heuristic's algorithm
//              for one GEMM step (cuda_blas.cc)
//   ConvPlan   one convolution step on cuDNN: graph API or legacy, chosen
//              by timing where the engine is built (cuda_dnn.cc)
//   Engine     constants uploaded once; per-(engine, thread) scratch for the
//              temporaries; run() enqueues every step on the calling thread's
//              stream and returns without waiting (cuda_engine.cc)
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cuda_device.h"
#include "cuda_program.h"
#include "plugin_util.h"

namespace tessera_cuda {

class GemmPlan {
 public:
  // `bias` is the device pointer of the epilogue's bias (null without one).
  GemmPlan(const GemmParams& g, const void* bias, ThreadContext& ctx, const std::string& where);
  ~GemmPlan();
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  // D = epilogue(alpha * op(A) op(B) + beta * D): D holds C already when beta != 0.
  void run(ThreadContext& ctx, const float* a, const float* b, float* d, const std::string& where) const;
  // The epilogue cuBLASLt runs: the one asked for, or, when the heuristics
  // found no algorithm with it, a simpler one (kBias or kNone); the engine
  // then finishes the rest with a chain kernel.
  Epilogue applied() const { return applied_; }

 private:
  void destroy();
  cublasLtMatmulDesc_t desc_ = nullptr;
  // Column-major view of the row-major problem: D^T = op(B)^T op(A)^T, so cuBLASLt's A is our B.
  cublasLtMatrixLayout_t lt_a_ = nullptr, lt_b_ = nullptr, lt_d_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  size_t workspace_ = 0;
  float alpha_ = 1, beta_ = 0;
  Epilogue applied_ = Epilogue::kNone;
};

// How one convolution step runs (cuda_dnn.cc says what each way is): chosen
// where the engine is built, stored in the blob, rebuilt as it is at load.
struct ConvChoice {
  enum Path : int32_t { kNone = -1, kGraphFused = 0, kGraph = 1, kLegacy = 2 };
  int32_t path = kNone;
  int64_t engine = -1;                             // graph ways: the engine's global index
  std::vector<std::pair<int32_t, int64_t>> knobs;  // graph ways: knob type, value
  int32_t algo = -1;                               // legacy: cudnnConvolution{Fwd,BwdData}Algo_t
  std::string describe() const;                    // "graph fused engine 12 3=1 ...", "legacy algo 1"
};

struct ConvGraphPlan;  // a finalized cuDNN execution plan (cuda_dnn.cc)

class ConvPlan {
 public:
  // With `given` (from a blob), builds that choice (searching again only if
  // it no longer builds). Without, times the first candidates of each way on
  // scratch buffers with the real weights (`w`, `bias`) and keeps the
  // fastest. `max_workspace` bounds cuDNN's workspace.
  ConvPlan(const ConvParams& c, const float* w, const float* bias, ThreadContext& ctx, size_t max_workspace,
           const ConvChoice* given, const std::string& where);
  ~ConvPlan();
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  size_t workspace() const { return workspace_; }
  const ConvChoice& choice() const { return choice_; }
  const std::string& algo_name() const { return algo_name_; }
  // Enqueues the convolution and its epilogue; `ws` holds at least workspace() bytes.
  void run(ThreadContext& ctx, const float* x, const float* w, const float* bias, const float* z, float* y, void* ws,
           const std::string& where) const;

 private:
  void make_legacy_descriptors(const std::string& where);
  size_t legacy_workspace(int algo) const;
  void adopt(const ConvChoice& choice, ThreadContext& ctx, size_t max_workspace, const std::string& where);
  void search(const float* w, const float* bias, ThreadContext& ctx, size_t max_workspace, const std::string& where);
  void enqueue(const ConvChoice& choice, ConvGraphPlan* g, size_t ws_size, ThreadContext& ctx, const float* x,
               const float* w, const float* bias, const float* z, float* y, void* ws, const std::string& where) const;
  void destroy();
  ConvParams c_;
  ConvChoice choice_;
  std::unique_ptr<ConvGraphPlan> graph_;  // graph ways
  Chain epilogue_;                        // graph way of a step with ReLU: y = relu(y + bias [+ z])
  cudnnTensorDescriptor_t x_desc_ = nullptr, y_desc_ = nullptr, bias_desc_ = nullptr;
  cudnnFilterDescriptor_t w_desc_ = nullptr;
  cudnnConvolutionDescriptor_t conv_desc_ = nullptr;
  cudnnActivationDescriptor_t act_desc_ = nullptr;
  size_t workspace_ = 0;
  std::string algo_name_;
};

class Engine {
 public:
  // Uploads the constants (by name from `constants`, else from the model's
  // own initializers), prepares every GEMM and convolution. Fails with
  // TESSERA_ERROR_OUT_OF_MEMORY when the engine would need more than
  // `max_memory` bytes (0: no limit).
  // `choices` (from a blob; null to choose) holds one ConvChoice per step,
  // kNone for steps that are not convolutions.
  Engine(const tessera_plugin::ModelView& m, Program p, const tessera_named_tensor_t* constants, size_t count,
         uint64_t max_memory, const std::vector<ConvChoice>* choices);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Enqueues the region on the calling thread's stream; with a sink, waits
  // for each step and reports it.
  void run(const tessera_tensor_t* inputs, size_t num_inputs, tessera_tensor_t* outputs, size_t num_outputs,
           const tessera_profile_sink_t* sink);
  // One per step, as the constructor takes them.
  std::vector<ConvChoice> conv_choices() const;

 private:
  void upload(const tessera_plugin::ModelView& m, const tessera_named_tensor_t* constants, size_t count);
  void* scratch(ThreadContext& ctx);
  void execute(size_t t, ThreadContext& ctx, void* const* ptrs, void* dnn_ws);
  void finish_epilogue(const Step& s, Epilogue applied, void* const* ptrs, cudaStream_t st);

  Program p_;
  std::vector<void*> consts_;                    // device pointers, by DeviceConst index
  std::vector<std::unique_ptr<GemmPlan>> gemm_;  // by step
  std::vector<std::unique_ptr<ConvPlan>> conv_;  // by step
  size_t dnn_workspace_ = 0;
  std::vector<tessera_plugin::ValueType> in_types_, out_types_;
  std::mutex mu_;
  std::map<std::thread::id, void*> scratch_;
};

}  // namespace tessera_cuda
