// Max pooling whose windows tile the plane, for kernels that pool what they compute themselves (a convolution and
// the max pool after it: FusedConvMaxPool, passes/native_fusion.cc).
#pragma once

#include <cstdint>
#include <memory>

namespace tessera {

// Max pooling of float planes of ih x iw values by kh x kw windows that tile them (strides equal to the window, no
// padding or dilation, floor mode) into (ih / kh) x (iw / kw) values, by the kernel MaxPool runs on such planes, so
// with its bits. Made once per geometry; several threads may call rows() at once.
class TiledMaxPool {
 public:
  TiledMaxPool(int64_t ih, int64_t iw, int64_t kh, int64_t kw);
  ~TiledMaxPool();
  TiledMaxPool(const TiledMaxPool&) = delete;
  TiledMaxPool& operator=(const TiledMaxPool&) = delete;

  int64_t out_w() const { return out_w_; }
  // Output rows [r0, r1) of the plane at x into y, which holds output row 0 (out_w() floats a row). x may be any
  // kh-row-aligned band of a plane (a band of a convolution's output rows) as long as the rows read lie inside it.
  void rows(const float* x, float* y, int64_t r0, int64_t r1) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t out_w_ = 0;
};

}  // namespace tessera
