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

// 64-byte aligned floats with XNN_EXTRA_BYTES of readable slack after them,
// zero-filled: what XNNPACK may read past a tensor's end.
class PaddedBuffer {
 public:
  PaddedBuffer() = default;
  explicit PaddedBuffer(size_t floats);
  float* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  std::unique_ptr<float, Free> data_;
  size_t size_ = 0;
};

// dst (N, H, W, C) <- src (N, C, H, W) (or NWC <- NCW), and back, `nchw`
// being the channels-first dims; parallel over `pool`.
// `flags` are pthreadpool's (PTHREADPOOL_FLAG_YIELD_WORKERS after the last
// parallel work of a run).
void nchw_to_nhwc(const float* src, float* dst, const Dims& nchw, pthreadpool_t pool, uint32_t flags = 0);
void nhwc_to_nchw(const float* src, float* dst, const Dims& nchw, pthreadpool_t pool, uint32_t flags = 0);

// A region initializer as load() received it.
struct SourceTensor {
  const float* data = nullptr;
  Dims dims;
};

// Fills `out` (numel(dims) floats) with constant `c` built from its sources.
void build_constant(const ConstantDef& c, const Dims& dims, const std::vector<SourceTensor>& sources, float* out);

}  // namespace tessera_xnn
