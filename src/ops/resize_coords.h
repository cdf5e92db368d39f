// Resize's coordinate transforms and nearest rounding, as the ONNX reference implementation computes them (double
// precision), for native's Resize kernel and for the engines that copy a nearest Resize themselves (the oneDNN
// plugin): one definition, so that both pick the same source element. Header-only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

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

}  // namespace tessera::resize
