// Convolution steps on cuDNN (see cuda_engine.h).
//
// Known step to take later: this file uses cuDNN's LEGACY convolution API
// (cudnnConvolutionForward, cudnnConvolutionBiasActivationForward,
// cudnnConvolutionBackwardData, still in cuDNN 9's cudnn_cnn.h) on purpose:
// the plugin was written without a GPU to try it on and with few device runs,
// and these calls are the well-trodden ones. cuDNN's graph API (operation
// graphs, engine heuristics, fused conv + bias + activation + residual in any
// combination) is the way forward once a GPU is at hand to test on.
//
// Precision: fp32 data, fp32 compute, CUDNN_FMA_MATH (DEFAULT_MATH permits
// TF32 tensor cores on Ampere and later). Algorithms come from the _v7
// heuristics, in their order, leaving out the FFT algorithms (their rounding
// error grows with the image, beyond what fp32 comparisons allow); each candidate is run once at load on scratch
// buffers (with the real weights) and the first that runs is kept, so that a
// refusal cuDNN only reports at execution (a fused call an algorithm does not
// support) happens at load, where the host can still place the region
// elsewhere.
#include <string>
#include <vector>

#include "cuda_engine.h"

namespace tessera_cuda {

using tessera_plugin::fail;

namespace {

int as_int(int64_t v, const std::string& where) {
  if (v < 0 || v > INT32_MAX)
    fail(TESSERA_ERROR_UNSUPPORTED, where + ": dimension " + std::to_string(v) + " too large");
  return static_cast<int>(v);
}

// Device memory freed at scope exit (cudaFree waits for the work using it).
struct DeviceBuffer {
  void* p = nullptr;
  DeviceBuffer(size_t bytes, const std::string& what) { p = device_malloc(bytes, what); }
  ~DeviceBuffer() { (void)cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

}  // namespace

ConvPlan::ConvPlan(const ConvParams& c, const float* w, const float* bias, ThreadContext& ctx, size_t max_workspace,
                   const std::string& where)
    : c_(c) {
  try {
    const std::string w_ = where;
    check_cudnn(cudnnCreateTensorDescriptor(&x_desc_), w_ + ": cudnnCreateTensorDescriptor");
    check_cudnn(cudnnCreateTensorDescriptor(&y_desc_), w_ + ": cudnnCreateTensorDescriptor");
    check_cudnn(cudnnCreateFilterDescriptor(&w_desc_), w_ + ": cudnnCreateFilterDescriptor");
    check_cudnn(cudnnCreateConvolutionDescriptor(&conv_desc_), w_ + ": cudnnCreateConvolutionDescriptor");
    // Forward: x [n, c, h, w] -> y [n, k, oh, ow], filter [k, c / group, kh, kw].
    // Transposed: x [n, c, h, w] is the forward's dy, y [n, k, oh, ow] its dx, filter [c, k / group, kh, kw].
    const int n = as_int(c.n, where), ci = as_int(c.c, where), h = as_int(c.h, where), wd = as_int(c.w, where);
    const int k = as_int(c.k, where), oh = as_int(c.oh, where), ow = as_int(c.ow, where);
    const int g = as_int(c.group, where);
    check_cudnn(cudnnSetTensor4dDescriptor(x_desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, ci, h, wd),
                where + ": cudnnSetTensor4dDescriptor(x)");
    check_cudnn(cudnnSetTensor4dDescriptor(y_desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, k, oh, ow),
                where + ": cudnnSetTensor4dDescriptor(y)");
    if (c.transpose) {
      check_cudnn(cudnnSetFilter4dDescriptor(w_desc_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, ci, k / g,
                                             as_int(c.kh, where), as_int(c.kw, where)),
                  where + ": cudnnSetFilter4dDescriptor");
    } else {
      check_cudnn(cudnnSetFilter4dDescriptor(w_desc_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, ci / g,
                                             as_int(c.kh, where), as_int(c.kw, where)),
                  where + ": cudnnSetFilter4dDescriptor");
    }
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
    // The shapes cuDNN derives must be ours.
    if (c.transpose) {
      int dn = 0, dc = 0, dh = 0, dw = 0;
      check_cudnn(cudnnGetConvolution2dForwardOutputDim(conv_desc_, y_desc_, w_desc_, &dn, &dc, &dh, &dw),
                  where + ": cudnnGetConvolution2dForwardOutputDim");
      if (dn != n || dc != ci || dh != h || dw != wd) {
        fail(TESSERA_ERROR_UNSUPPORTED, where + ": cuDNN's backward-data shapes differ from the model's");
      }
    } else {
      int dn = 0, dc = 0, dh = 0, dw = 0;
      check_cudnn(cudnnGetConvolution2dForwardOutputDim(conv_desc_, x_desc_, w_desc_, &dn, &dc, &dh, &dw),
                  where + ": cudnnGetConvolution2dForwardOutputDim");
      if (dn != n || dc != k || dh != oh || dw != ow) {
        fail(TESSERA_ERROR_UNSUPPORTED, where + ": cuDNN's output shape [" + std::to_string(dn) + "," +
                                            std::to_string(dc) + "," + std::to_string(dh) + "," + std::to_string(dw) +
                                            "] differs from the model's");
      }
    }

    // Candidates from the heuristics, as (algo, workspace, name).
    struct Candidate {
      int algo;
      size_t memory;
    };
    std::vector<Candidate> candidates;
    if (c.transpose) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT] = {};
      int found = 0;
      check_cudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(ctx.dnn(), w_desc_, x_desc_, conv_desc_, y_desc_,
                                                              CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, perf),
                  where + ": cudnnGetConvolutionBackwardDataAlgorithm_v7");
      for (int i = 0; i < found; ++i) {
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT &&
            perf[i].algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING) {
          candidates.push_back({static_cast<int>(perf[i].algo), perf[i].memory});
        }
      }
      candidates.push_back({static_cast<int>(CUDNN_CONVOLUTION_BWD_DATA_ALGO_1), 0});
    } else {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT] = {};
      int found = 0;
      check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(ctx.dnn(), x_desc_, w_desc_, conv_desc_, y_desc_,
                                                         CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf),
                  where + ": cudnnGetConvolutionForwardAlgorithm_v7");
      for (int i = 0; i < found; ++i) {
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].algo != CUDNN_CONVOLUTION_FWD_ALGO_FFT &&
            perf[i].algo != CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING) {
          candidates.push_back({static_cast<int>(perf[i].algo), perf[i].memory});
        }
      }
      // The always-supported algorithm last, in case the heuristics list nothing that runs.
      candidates.push_back({static_cast<int>(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM), 0});
    }

    // Try them once on scratch buffers.
    size_t x_bytes = static_cast<size_t>(c.n * c.c * c.h * c.w) * 4,
           y_bytes = static_cast<size_t>(c.n * c.k * c.oh * c.ow) * 4;
    DeviceBuffer xb(x_bytes, where + ": trial input"), yb(y_bytes, where + ": trial output");
    DeviceBuffer zb(c.z >= 0 ? y_bytes : 256, where + ": trial residual");
    check_cuda(cudaMemsetAsync(xb.p, 0, x_bytes, ctx.stream()), where + ": cudaMemsetAsync");
    check_cuda(cudaMemsetAsync(zb.p, 0, c.z >= 0 ? y_bytes : 256, ctx.stream()), where + ": cudaMemsetAsync");
    std::string tried;
    for (const Candidate& cand : candidates) {
      size_t ws = cand.memory;
      if (!c.transpose) {
        cudnnStatus_t s = cudnnGetConvolutionForwardWorkspaceSize(
            ctx.dnn(), x_desc_, w_desc_, conv_desc_, y_desc_, static_cast<cudnnConvolutionFwdAlgo_t>(cand.algo), &ws);
        if (s != CUDNN_STATUS_SUCCESS) continue;
      } else {
        cudnnStatus_t s =
            cudnnGetConvolutionBackwardDataWorkspaceSize(ctx.dnn(), w_desc_, x_desc_, conv_desc_, y_desc_,
                                                         static_cast<cudnnConvolutionBwdDataAlgo_t>(cand.algo), &ws);
        if (s != CUDNN_STATUS_SUCCESS) continue;
      }
      if (ws > max_workspace) continue;
      fwd_algo_ = cand.algo;
      workspace_ = ws;
      void* wsp = ws ? ctx.dnn_workspace(ws) : nullptr;
      cudnnStatus_t s = launch(ctx, static_cast<const float*>(xb.p), w, bias,
                               c.z >= 0 ? static_cast<const float*>(zb.p) : nullptr, static_cast<float*>(yb.p), wsp);
      if (s == CUDNN_STATUS_SUCCESS) {
        check_cuda(cudaStreamSynchronize(ctx.stream()),
                   where + ": trial of cuDNN algorithm " + std::to_string(cand.algo));
        algo_name_ = (c.transpose ? "bwd_data algo " : "fwd algo ") + std::to_string(cand.algo);
        return;
      }
      tried += (tried.empty() ? "" : ", ") + std::to_string(cand.algo) + ": " + cudnnGetErrorString(s);
    }
    fail(TESSERA_ERROR_UNSUPPORTED, where + ": no cuDNN algorithm runs" + (tried.empty() ? "" : " (" + tried + ")"));
  } catch (...) {
    destroy();
    throw;
  }
}

cudnnStatus_t ConvPlan::launch(ThreadContext& ctx, const float* x, const float* w, const float* bias, const float* z,
                               float* y, void* ws) const {
  const float one = 1.0f, zero = 0.0f;
  if (c_.transpose) {
    return cudnnConvolutionBackwardData(ctx.dnn(), &one, w_desc_, w, x_desc_, x, conv_desc_,
                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(fwd_algo_), ws, workspace_, &zero,
                                        y_desc_, y);
  }
  if (c_.relu) {
    // y = relu(conv(x) + alpha2 * z + bias); without a residual, z is y itself with alpha2 = 0.
    const float alpha2 = z ? 1.0f : 0.0f;
    return cudnnConvolutionBiasActivationForward(ctx.dnn(), &one, x_desc_, x, w_desc_, w, conv_desc_,
                                                 static_cast<cudnnConvolutionFwdAlgo_t>(fwd_algo_), ws, workspace_,
                                                 &alpha2, y_desc_, z ? z : y, bias_desc_, bias, act_desc_, y_desc_, y);
  }
  return cudnnConvolutionForward(ctx.dnn(), &one, x_desc_, x, w_desc_, w, conv_desc_,
                                 static_cast<cudnnConvolutionFwdAlgo_t>(fwd_algo_), ws, workspace_, &zero, y_desc_, y);
}

void ConvPlan::run(ThreadContext& ctx, const float* x, const float* w, const float* bias, const float* z, float* y,
                   void* ws, const std::string& where) const {
  check_cudnn(launch(ctx, x, w, bias, z, y, ws), where + (c_.transpose ? ": cudnnConvolutionBackwardData"
                                                          : c_.relu    ? ": cudnnConvolutionBiasActivationForward"
                                                                       : ": cudnnConvolutionForward"));
}

void ConvPlan::destroy() {
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
