// The plugin's own int8 depthwise convolution: ONNX QLinearConv with one input
// channel per group and as many output channels (M = C = group), 2-D, k x k
// windows (k = 3, 5 or 7), dilation 1, any stride and non-negative padding, on channels-last
// uint8/int8 tensors, with AVX-512 VNNI.
//
// Why: oneDNN 2.6's int8 depthwise kernels (brdgmm_dw, jit_int8) put one
// useful byte in each 4-byte group of vpdpbusd, so they run at about an fp32
// depthwise convolution's speed; in mobilenet_v2's QDQ twin they took a third of
// the model. Here each 4-byte group holds 4 taps of one channel along a window
// row (the 4th a zero weight for k = 3): for every input row the taps of each
// output column are interleaved once (4 rows of 16 channels per 128-bit lane,
// two unpack levels) into a ring of k rows, so every vpdpbusd does 3 or 4 taps
// of 16 channels and each interleaved row serves k output rows.
//
// Arithmetic: the result equals native's (ops/quantize_conv.cc) and oneDNN's
// bit for bit. The accumulator is sum_t w_t * u(x_t) + B'[m] with u the
// source's byte as uint8 (int8 sources flipped by 0x80), the padding read as
// u(x_zero_point), and B'[m] = B[m] - u(x_zero_point) * sum_t w_t: the same
// int32 as sum_t w_t * (x_t - x_zero_point) + B[m]. Then
// y = saturate(round_half_even(float(acc) * scale[m]) + y_zero_point), clipped to
// a fused clamp's bounds. make() refuses weights whose accumulator could leave
// the range where that float product converts exactly.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace tessera_dnnl {

struct DwInt8 {
  int64_t c = 0, h = 0, w = 0, oh = 0, ow = 0, k = 0, sh = 1, sw = 1, pt = 0, pl = 0;
  int64_t taps_groups = 1;  // 4-byte groups per window row: (k + 3) / 4
  // Channel blocks of 64 (zmm) and, for a remainder up to 32, one of 32 (ymm): the first channel, the width, the
  // channels used, and where the block's weights (bytes), bias and scales (entries) start.
  struct Block {
    int64_t first = 0, width = 64, count = 64, w_offset = 0, b_offset = 0;
  };
  std::vector<Block> blocks;
  // Per block, in the interleaved order (vector i, 128-bit lane l, dword j: channel 16 l + 4 i + j): the weights
  // [row][group][4][width bytes], the bias B' and the scales.
  std::vector<int8_t> weights;
  std::vector<int32_t> bias;
  std::vector<float> scale;
  uint8_t pad = 0;  // u(x_zero_point)
  bool x_signed = false, y_signed = false;
  int32_t y_zero_point = 0;
  int32_t lo = 0, hi = 255;  // the output bytes' bounds: the type's range, a fused clamp's
};

// Whether this CPU runs the kernel: the plugin's AVX-512 loops (own_avx512_loops: F, BW, DQ, VL; not under
// TESSERA_ISA=avx2) and VNNI. Defined beside them, in dnnl_run.cc.
bool dw_int8_cpu();

// Whether a convolution of this geometry is one the kernel computes.
bool dw_int8_geometry(int64_t k_h, int64_t k_w, const int64_t* dilations);

// The kernel for weights w [C, 1, k, k], bias b [C] (null: 0), scales [1 or C], source [N, C, H, W] padded by
// pad_begin/pad_end {top, left}/{bottom, right}, with the source's and result's types and zero points and a fused
// clamp [clip_lo, clip_hi] on the rounded value (before the zero point). Null when an accumulator could exceed
// what the float product converts exactly (|acc * scale| < 2^30).
std::unique_ptr<DwInt8> make_dw_int8(int64_t c, int64_t h, int64_t w, int64_t k, const int64_t* strides,
                                     const int64_t* pad_begin, const int64_t* pad_end, const int8_t* weights,
                                     const int32_t* bias, const float* scales, size_t num_scales, int32_t x_zero_point,
                                     bool x_signed, bool y_signed, int32_t y_zero_point, float clip_lo, float clip_hi);

// Y [n, OH, OW, C] from X [n, H, W, C], both channels-last 8-bit, on the calling OpenMP team's threads.
void run_dw_int8(const DwInt8& d, const void* x, void* y, int64_t n);
// Output rows [r0, r1) of images [n0, n1) of Y, on the calling thread alone (one slice of a step split by rows or
// images).
void run_dw_int8_part(const DwInt8& d, const void* x, void* y, int64_t n0, int64_t n1, int64_t r0, int64_t r1);

}  // namespace tessera_dnnl
