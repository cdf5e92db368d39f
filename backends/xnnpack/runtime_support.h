// What engines share around XNNPACK: its one-time initialization, thread
// pools, padded buffers, layout transposes and building constants at load.
#pragma once

#include <pthreadpool.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "program.h"

namespace tessera_xnn {

// xnn_initialize, once per process (thread-safe); fails with
// TESSERA_ERROR_INTERNAL when the CPU is unsupported.
void ensure_xnnpack_initialized();

// A pthreadpool of `threads` threads, shared by every engine of the process
// that asked for the same count (pthreadpool serializes concurrent calls);
// null for one thread, where XNNPACK runs on the caller's thread.
std::shared_ptr<pthreadpool> shared_pool(int threads);

// 64-byte aligned memory with XNN_EXTRA_BYTES of readable slack after it,
// zero-filled: what XNNPACK may read past a tensor's end.
class PaddedBuffer {
 public:
  PaddedBuffer() = default;
  explicit PaddedBuffer(size_t bytes);
  void* get() const { return data_.get(); }
  float* data() const { return static_cast<float*>(get()); }
  size_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
  size_t bytes_ = 0;
};

// dst (N, H, W, C) <- src (N, C, H, W) (or NWC <- NCW), and back, `nchw`
// being the channels-first dims, for elements of `elem` bytes (1 or 4);
// parallel over `pool`. `flags` are pthreadpool's
// (PTHREADPOOL_FLAG_YIELD_WORKERS after the last parallel work of a run).
void nchw_to_nhwc(const void* src, void* dst, const Dims& nchw, size_t elem, pthreadpool_t pool, uint32_t flags = 0);
void nhwc_to_nchw(const void* src, void* dst, const Dims& nchw, size_t elem, pthreadpool_t pool, uint32_t flags = 0);

// Flips the top bit of `n` bytes: uint8 <-> the int8 domain (program.h, DType).
void flip_bytes(void* data, size_t n);

// A region initializer as load() received it.
struct SourceTensor {
  const void* data = nullptr;
  int32_t dtype = 0;  // TESSERA_DTYPE_*
  Dims dims;
};

// Fills `out` (numel(dims) elements of `dtype`) with constant `c` built from
// its sources.
void build_constant(const ConstantDef& c, const Dims& dims, DType dtype, const std::vector<SourceTensor>& sources,
                    void* out);

}  // namespace tessera_xnn
