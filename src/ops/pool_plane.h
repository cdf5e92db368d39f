// Max pooling of a band of a float plane's rows, for kernels that pool what they compute themselves (a convolution and
// the max pool after it: FusedConvMaxPool, passes/native_fusion.cc).
#pragma once

#include <cstdint>
#include <memory>

namespace tessera {

// A 2-D max pool's window: kernel, strides and the padding before and after each axis (no dilation, floor mode).
struct MaxPoolWindow {
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
};

// Output rows [r0, r1) of a max pool over a float plane of ih x iw values (oh x ow outputs), from the input rows
// they read alone, [in_begin(), in_end()), by the kernel MaxPool chooses for the whole plane, so with its bits. Made
// once per band; several threads may call run() at once.
class MaxPoolBand {
 public:
  MaxPoolBand(const MaxPoolWindow& w, int64_t ih, int64_t iw, int64_t oh, int64_t ow, int64_t r0, int64_t r1);
  ~MaxPoolBand();
  MaxPoolBand(const MaxPoolBand&) = delete;
  MaxPoolBand& operator=(const MaxPoolBand&) = delete;

  int64_t in_begin() const { return in_begin_; }
  int64_t in_end() const { return in_end_; }
  // x: input row in_begin() of one plane (iw floats a row); y: its output row r0 (ow floats a row).
  void run(const float* x, float* y) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t in_begin_ = 0, in_end_ = 0, rows_ = 0, ow_ = 0;
};

}  // namespace tessera
