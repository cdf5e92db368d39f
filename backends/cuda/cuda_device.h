// The CUDA device as the plugin sees it: found lazily (the first capability,
// compile, load or device-memory call), never assumed. Without a driver or a
// GPU every call that needs one fails with TESSERA_ERROR_UNSUPPORTED ("no
// CUDA device: ...") and capability refuses every node with that reason.
//
//   DeviceInfo       what was found: compute capability, library versions
//   ThreadContext    the calling thread's stream, cuBLASLt and cuDNN handles
//                    and workspaces (ABI "Device memory": one stream per host
//                    thread, so concurrent runs never wait for each other)
//   check_cuda/...   every status turned into a one-line Failure naming the
//                    node and the call
//   DeviceFigures    this GPU measured once per process, for estimates
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "plugin_util.h"

namespace tessera_cuda {

struct DeviceInfo {
  bool present = false;
  std::string error;  // why there is no device ("CUDA driver version is insufficient...")
  int sm_major = 0, sm_minor = 0;
  std::string name;  // "NVIDIA H200"
  size_t total_memory = 0;
  int runtime_version = 0;      // cudaRuntimeGetVersion: 13000
  size_t cublaslt_version = 0;  // cublasLtGetVersion: 130001
  size_t cudnn_version = 0;     // cudnnGetVersion: 91900
  std::string sm() const;       // "sm_90", or "no device"
};

// Detected once, thread-safe. A device counts as present only when cuBLASLt
// and cuDNN load too.
const DeviceInfo& device_info();

// cuBLASLt and cuDNN are opened with dlopen (libcublasLt.so.<major>,
// libcudnn.so.<major>, found through LD_LIBRARY_PATH or the plugin's RUNPATH)
// once a device is found, never before: cuda_lib_shims.cc forwards every call
// the plugin makes to them (gen_lib_shims.py says why). The symbol, or null
// when the library could not be opened.
enum class CudaLibrary { kCublasLt, kCudnn };
void* library_symbol(CudaLibrary lib, const char* name);
// Opens both libraries (once); "" on success, else why not.
const std::string& cuda_libraries_error();
// Fails with TESSERA_ERROR_UNSUPPORTED "no CUDA device: <why>" without one.
void require_device();

// "13.0", "13.0.1", "9.19.0".
std::string runtime_version_str(int v);
std::string cublaslt_version_str(size_t v);
std::string cudnn_version_str(size_t v);

// A Failure (TESSERA_ERROR_RUNTIME unless said otherwise) with `where` (the
// node and the call) and the library's error string. Out-of-memory errors map
// to TESSERA_ERROR_OUT_OF_MEMORY.
void check_cuda(cudaError_t e, const std::string& where);
void check_cublas(cublasStatus_t s, const std::string& where);
void check_cudnn(cudnnStatus_t s, const std::string& where);

// The calling thread's own stream and library handles. Created at the
// thread's first use, destroyed when the thread exits.
class ThreadContext {
 public:
  ThreadContext();
  ~ThreadContext();
  ThreadContext(const ThreadContext&) = delete;
  ThreadContext& operator=(const ThreadContext&) = delete;

  cudaStream_t stream() const { return stream_; }
  cublasLtHandle_t lt() const { return lt_; }
  cudnnHandle_t dnn() const { return dnn_; }
  void* lt_workspace() const { return lt_ws_; }
  // cuDNN's workspace, grown to at least `bytes` (what the engine's load
  // determined); the old one is freed (cudaFree waits for the work using it).
  void* dnn_workspace(size_t bytes);
  size_t dnn_workspace_size() const { return dnn_ws_size_; }

 private:
  void release();
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  cudnnHandle_t dnn_ = nullptr;
  void* lt_ws_ = nullptr;
  void* dnn_ws_ = nullptr;
  size_t dnn_ws_size_ = 0;
};

// cuBLASLt's workspace per thread (NVIDIA recommends 32 MiB on Hopper).
constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

// The calling thread's context (requires a device).
ThreadContext& thread_context();

// Device memory, with errors naming `what` and the size.
void* device_malloc(size_t bytes, const std::string& what);

// This GPU, measured once per process at the first estimate: a 1024^3
// cuBLASLt SGEMM, a 64 MiB device-to-device copy, a tiny kernel launch, and a
// 16 MiB copy each way between pageable host memory and the device.
struct DeviceFigures {
  double flops_per_us = 0;      // fp32 GEMM (FMA pipes, no TF32)
  double bytes_per_us = 0;      // device memory, read + write
  double launch_us = 0;         // one kernel launch, enqueue to completion
  double h2d_bytes_per_us = 0;  // host -> device
  double d2h_bytes_per_us = 0;  // device -> host
};
const DeviceFigures& device_figures();

}  // namespace tessera_cuda
