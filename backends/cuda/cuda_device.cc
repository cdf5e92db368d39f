// Device detection, error helpers and the per-thread stream and handles (see
// cuda_device.h).
#include "cuda_device.h"

#include <dlfcn.h>

#include <memory>

namespace tessera_cuda {

using tessera_plugin::fail;

std::string DeviceInfo::sm() const {
  return present ? "sm_" + std::to_string(sm_major) + std::to_string(sm_minor) : std::string("no device");
}

std::string runtime_version_str(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

// cuBLASLt reports major * 10000 + minor * 100 + patch (130001 = 13.0.1).
std::string cublaslt_version_str(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
}

// cuDNN 9 reports major * 10000 + minor * 100 + patch (91900 = 9.19.0).
std::string cudnn_version_str(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
}

namespace {

struct Libraries {
  void* handles[2] = {nullptr, nullptr};
  std::string error;
};

const Libraries& libraries() {
  static const Libraries libs = [] {
    Libraries l;
    const std::string names[2] = {"libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR),
                                  "libcudnn.so." + std::to_string(CUDNN_MAJOR)};
    for (int i = 0; i < 2; ++i) {
      l.handles[i] = dlopen(names[i].c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!l.handles[i] && l.error.empty()) {
        const char* e = dlerror();
        l.error = names[i] + " cannot be loaded: " + (e ? e : "unknown error");
      }
    }
    return l;
  }();
  return libs;
}

}  // namespace

void* library_symbol(CudaLibrary lib, const char* name) {
  void* h = libraries().handles[lib == CudaLibrary::kCublasLt ? 0 : 1];
  return h ? dlsym(h, name) : nullptr;
}

const std::string& cuda_libraries_error() { return libraries().error; }

const DeviceInfo& device_info() {
  static const DeviceInfo info = [] {
    DeviceInfo d;
    // The versions built against, until the libraries of a device are opened.
    d.cublaslt_version = CUBLAS_VERSION;
    d.cudnn_version = CUDNN_VERSION;
    if (cudaRuntimeGetVersion(&d.runtime_version) != cudaSuccess) d.runtime_version = CUDART_VERSION;
    // The first call into the driver: cudart_static opens libcuda.so.1 here, and reports its absence as an error.
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      d.error = cudaGetErrorString(e);
      (void)cudaGetLastError();
      return d;
    }
    if (count < 1) {
      d.error = "cudaGetDeviceCount found no device";
      return d;
    }
    cudaDeviceProp p{};
    e = cudaGetDeviceProperties(&p, 0);
    if (e != cudaSuccess) {
      d.error = std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(e);
      (void)cudaGetLastError();
      return d;
    }
    if (!cuda_libraries_error().empty()) {
      d.error = cuda_libraries_error();
      return d;
    }
    d.cublaslt_version = cublasLtGetVersion();
    d.cudnn_version = cudnnGetVersion();
    d.present = true;
    d.sm_major = p.major;
    d.sm_minor = p.minor;
    d.name = p.name;
    d.total_memory = p.totalGlobalMem;
    return d;
  }();
  return info;
}

void require_device() {
  const DeviceInfo& d = device_info();
  if (!d.present) fail(TESSERA_ERROR_UNSUPPORTED, "no CUDA device: " + d.error);
}

void check_cuda(cudaError_t e, const std::string& where) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clears a non-sticky error so that the thread's next call starts clean
  tessera_status_t s = e == cudaErrorMemoryAllocation ? TESSERA_ERROR_OUT_OF_MEMORY : TESSERA_ERROR_RUNTIME;
  fail(s, where + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

void check_cublas(cublasStatus_t st, const std::string& where) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  tessera_status_t s = st == CUBLAS_STATUS_ALLOC_FAILED ? TESSERA_ERROR_OUT_OF_MEMORY : TESSERA_ERROR_RUNTIME;
  fail(s, where + ": " + cublasLtGetStatusName(st) + " (" + cublasLtGetStatusString(st) + ")");
}

void check_cudnn(cudnnStatus_t st, const std::string& where) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  tessera_status_t s = st == CUDNN_STATUS_ALLOC_FAILED ? TESSERA_ERROR_OUT_OF_MEMORY : TESSERA_ERROR_RUNTIME;
  fail(s, where + ": " + cudnnGetErrorString(st));
}

void* device_malloc(size_t bytes, const std::string& what) {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes == 0 ? 256 : bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    tessera_status_t s = e == cudaErrorMemoryAllocation ? TESSERA_ERROR_OUT_OF_MEMORY : TESSERA_ERROR_RUNTIME;
    fail(s, what + ": cudaMalloc of " + std::to_string(bytes) + " bytes failed: " + cudaGetErrorString(e));
  }
  return p;
}

ThreadContext::ThreadContext() {
  try {
    check_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check_cublas(cublasLtCreate(&lt_), "cublasLtCreate");
    check_cudnn(cudnnCreate(&dnn_), "cudnnCreate");
    check_cudnn(cudnnSetStream(dnn_, stream_), "cudnnSetStream");
    lt_ws_ = device_malloc(kLtWorkspaceBytes, "cuBLASLt workspace");
  } catch (...) {
    release();
    throw;
  }
}

ThreadContext::~ThreadContext() { release(); }

void ThreadContext::release() {
  // Errors are ignored: this runs when the thread exits, where nothing can report them.
  if (dnn_ws_) (void)cudaFree(dnn_ws_);
  if (lt_ws_) (void)cudaFree(lt_ws_);
  if (dnn_) (void)cudnnDestroy(dnn_);
  if (lt_) (void)cublasLtDestroy(lt_);
  if (stream_) (void)cudaStreamDestroy(stream_);
  dnn_ws_ = lt_ws_ = nullptr;
  dnn_ = nullptr;
  lt_ = nullptr;
  stream_ = nullptr;
}

void* ThreadContext::dnn_workspace(size_t bytes) {
  if (bytes <= dnn_ws_size_) return dnn_ws_;
  if (dnn_ws_) {
    check_cuda(cudaFree(dnn_ws_), "cudaFree (cuDNN workspace)");
    dnn_ws_ = nullptr;
    dnn_ws_size_ = 0;
  }
  dnn_ws_ = device_malloc(bytes, "cuDNN workspace");
  dnn_ws_size_ = bytes;
  return dnn_ws_;
}

ThreadContext& thread_context() {
  require_device();
  // Constructed on the thread's first call; a failed construction is retried at the next.
  thread_local std::unique_ptr<ThreadContext> ctx;
  if (!ctx) ctx = std::make_unique<ThreadContext>();
  return *ctx;
}

}  // namespace tessera_cuda
