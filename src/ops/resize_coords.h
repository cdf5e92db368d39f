// Resize's coordinate transforms and nearest rounding, as the ONNX reference implementation computes them (double
// precision), and bilinear weights as ONNX Runtime computes them (float), for native's Resize kernel and for the
// engines that resize themselves (the oneDNN plugin): one definition, so that both pick the same source elements and
// weights. Header-only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::resize {

enum class Coord { kHalfPixel, kPytorchHalfPixel, kAlignCorners, kAsymmetric, kTfHalfPixelForNn, kTfCropAndResize };
enum class Nearest { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil, kSimple };

// coordinate_transformation_mode and nearest_mode by their attribute names; false for an unknown name.
inline bool parse_coord(const std::string& s, Coord* c) {
  if (s == "half_pixel")
    *c = Coord::kHalfPixel;
  else if (s == "pytorch_half_pixel")
    *c = Coord::kPytorchHalfPixel;
  else if (s == "align_corners")
    *c = Coord::kAlignCorners;
  else if (s == "asymmetric")
    *c = Coord::kAsymmetric;
  else if (s == "tf_half_pixel_for_nn")
    *c = Coord::kTfHalfPixelForNn;
  else if (s == "tf_crop_and_resize")
    *c = Coord::kTfCropAndResize;
  else
    return false;
  return true;
}
inline bool parse_nearest(const std::string& s, Nearest* n) {
  if (s == "round_prefer_floor")
    *n = Nearest::kRoundPreferFloor;
  else if (s == "round_prefer_ceil")
    *n = Nearest::kRoundPreferCeil;
  else if (s == "floor")
    *n = Nearest::kFloor;
  else if (s == "ceil")
    *n = Nearest::kCeil;
  else
    return false;
  return true;
}

// The input coordinate of output index `o` along an axis of `in_len` elements resized by `scale`. The reference's
// output length is scale * in_len, which differs from the floored output size when scales are given. `roi_start`
// and `roi_end` matter for tf_crop_and_resize only.
inline double source_coordinate(Coord c, int64_t o, double scale, double in_len, double roi_start = 0,
                                double roi_end = 1) {
  const double xr = static_cast<double>(o), out_len = scale * in_len;
  switch (c) {
    case Coord::kHalfPixel:
      return (xr + 0.5) / scale - 0.5;
    case Coord::kPytorchHalfPixel:
      return out_len > 1 ? (xr + 0.5) / scale - 0.5 : 0.0;
    case Coord::kAlignCorners:
      return out_len == 1 ? 0.0 : xr * (in_len - 1) / (out_len - 1);
    case Coord::kAsymmetric:
      return xr / scale;
    case Coord::kTfHalfPixelForNn:
      return (xr + 0.5) / scale;
    case Coord::kTfCropAndResize: {
      const double x = out_len == 1 ? (roi_end - roi_start) * (in_len - 1) / 2
                                    : xr * (roi_end - roi_start) * (in_len - 1) / (out_len - 1);
      return x + roi_start * (in_len - 1);
    }
  }
  return 0;
}

// The element nearest mode `n` picks at input coordinate `x` (kSimple: Upsample's and Resize-10's rule), clamped
// to [0, in - 1].
inline int64_t nearest_index(Nearest n, double x, double scale, int64_t in) {
  const double fl = std::floor(x);
  const auto xi = static_cast<int64_t>(fl);
  int64_t i = xi;
  if (x != fl) {
    const double ratio = x - fl;
    switch (n) {
      case Nearest::kRoundPreferFloor:
        i = ratio <= 0.5 ? xi : xi + 1;
        break;
      case Nearest::kRoundPreferCeil:
        i = ratio < 0.5 ? xi : xi + 1;
        break;
      case Nearest::kFloor:
        i = xi;
        break;
      case Nearest::kCeil:
        i = xi + 1;
        break;
      case Nearest::kSimple:
        i = scale < 1 ? xi + 1 : xi;
        break;
    }
  }
  return std::min<int64_t>(std::max<int64_t>(i, 0), in - 1);
}

// One spatial axis of a bilinear Resize as ONNX Runtime's UpsampleBilinear computes it, for native's kernel and the
// oneDNN plugin's own loop (one definition, so that both give the same bits): per output index a source coordinate
// in float, clamped to the input, its two neighbours i1 <= i2 and weights d1 = |x - x1|, d2 = |x - x2| (0.5 each
// where they coincide). The scale is out / in in float when sizes are given (`from_sizes`), else the given scale;
// align_corners and pytorch_half_pixel read the resized length scale * in (the floored output size can be smaller).
// Half-pixel, PyTorch half-pixel, align-corners and asymmetric transforms only (`linear_coord_like_onnx_runtime`).
struct LinearAxis {
  std::vector<int32_t> i1, i2;  // inputs of at most 2^30 along the axis
  std::vector<float> d1, d2;
};
inline bool linear_coord_like_onnx_runtime(Coord c) {
  return c == Coord::kHalfPixel || c == Coord::kPytorchHalfPixel || c == Coord::kAlignCorners ||
         c == Coord::kAsymmetric;
}
inline LinearAxis linear_axis_like_onnx_runtime(Coord coord, int64_t n_in, int64_t n_out, bool from_sizes,
                                                double given_scale) {
  const float scale =
      from_sizes ? static_cast<float>(n_out) / static_cast<float>(n_in) : static_cast<float>(given_scale);
  const float len_in = static_cast<float>(n_in);
  const float len_out =
      from_sizes ? static_cast<float>(n_out) : static_cast<float>(given_scale * static_cast<double>(n_in));
  LinearAxis t;
  for (int64_t o = 0; o < n_out; ++o) {
    const float r = static_cast<float>(o);
    float c = r;
    if (scale != 1.f) {
      switch (coord) {
        case Coord::kHalfPixel:
          c = (r + 0.5f) / scale - 0.5f;
          break;
        case Coord::kPytorchHalfPixel:
          c = len_out > 1 ? (r + 0.5f) / scale - 0.5f : 0.f;
          break;
        case Coord::kAlignCorners:
          c = len_out == 1 ? 0.f : r * (len_in - 1) / (len_out - 1);
          break;
        default:
          c = r / scale;
          break;
      }
    }
    c = std::max(0.f, std::min(c, static_cast<float>(n_in - 1)));
    const int64_t i1 = std::min(static_cast<int64_t>(c), n_in - 1), i2 = std::min(i1 + 1, n_in - 1);
    t.i1.push_back(static_cast<int32_t>(i1));
    t.i2.push_back(static_cast<int32_t>(i2));
    t.d1.push_back(i1 == i2 ? 0.5f : std::fabs(c - static_cast<float>(i1)));
    t.d2.push_back(i1 == i2 ? 0.5f : std::fabs(c - static_cast<float>(i2)));
  }
  return t;
}

}  // namespace tessera::resize
