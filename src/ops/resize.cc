// Resize (opsets 10, 11, 13) and Upsample (opsets 7-9).
//
// Input: X of any rank, with output sizes given directly (`sizes`) or as
// per-axis scales (output = floor(input * scale)); for tf_crop_and_resize a
// region of interest.
// Output: X resampled along every axis with nearest, (multi)linear or cubic
// interpolation, following the ONNX reference implementation (coordinates in
// double precision, edge-replicated neighbours, exclude_outside renormalising
// the cubic weights).
//
// Method: interpolation is separable, so each axis gets a table of taps
// (source index + weight per output index, 1/2/4 taps for
// nearest/linear/cubic) and the tensor is resampled one axis at a time as
// [pre, in, post] -> [pre, out, post]; axes whose table is the identity are
// skipped. With post > 1 the inner loop is a contiguous weighted sum of rows.
#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <vector>

#include "ops/op_registry.h"
#include "ops/resize_coords.h"
#include "ops/resize_sampling.h"
#include "ops/tensor_util.h"

namespace tessera {
namespace {

enum class Mode { kNearest, kLinear, kCubic };
using resize::Coord;
using resize::Nearest;

struct ResizeAttrs {
  Mode mode = Mode::kNearest;
  Coord coord = Coord::kHalfPixel;
  Nearest nearest = Nearest::kRoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  bool antialias = false;  // opset 18, linear and cubic
  double extrapolation = 0.0;
};

bool is_upsample(const Node& n) { return n.op_type == "Upsample"; }
// Resize-10 and Upsample take (X, scales); Resize-11+ takes (X, roi, scales, sizes).
bool legacy_form(const Node& n, int64_t opset) { return is_upsample(n) || opset < 11; }

Status parse_attrs(const Node& node, int64_t opset, ResizeAttrs* a) {
  std::string mode = node.attr_string("mode", "nearest");
  if (mode == "nearest") {
    a->mode = Mode::kNearest;
  } else if (mode == "linear" || mode == "bilinear" || mode == "trilinear") {
    a->mode = Mode::kLinear;
  } else if (mode == "cubic" && !legacy_form(node, opset)) {
    a->mode = Mode::kCubic;
  } else {
    return InvalidModel(node.describe() + ": unsupported mode '" + mode + "'");
  }
  if (legacy_form(node, opset)) {
    a->coord = Coord::kAsymmetric;
    a->nearest = Nearest::kSimple;
    return Status::Ok();
  }
  std::string coord = node.attr_string("coordinate_transformation_mode", "half_pixel");
  if (!resize::parse_coord(coord, &a->coord)) {
    return InvalidModel(node.describe() + ": unsupported coordinate_transformation_mode '" + coord + "'");
  }
  std::string nm = node.attr_string("nearest_mode", "round_prefer_floor");
  if (!resize::parse_nearest(nm, &a->nearest)) {
    return InvalidModel(node.describe() + ": unsupported nearest_mode '" + nm + "'");
  }
  a->antialias = node.attr_int("antialias", 0) != 0 && a->mode != Mode::kNearest;
  const std::string policy = node.attr_string("keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller") {
    return InvalidModel(node.describe() + ": unknown keep_aspect_ratio_policy '" + policy + "'");
  }
  a->cubic_a = node.attr_float("cubic_coeff_a", -0.75f);
  a->exclude_outside = node.attr_int("exclude_outside", 0) != 0;
  a->extrapolation = node.attr_float("extrapolation_value", 0.f);
  return Status::Ok();
}

// Which inputs hold scales / sizes / roi for this node form (-1: none).
int scales_input(const Node& n, int64_t opset) {
  // Upsample-7/8 carry scales as an attribute, Upsample-9 as input 1.
  if (is_upsample(n)) return n.has_input(1) ? 1 : -1;
  return opset < 11 ? 1 : 2;
}
int sizes_input(const Node& n, int64_t opset) { return legacy_form(n, opset) ? -1 : 3; }
int roi_input(const Node& n, int64_t opset) { return legacy_form(n, opset) ? -1 : 1; }

// The output dims and the per-axis scales used in coordinate transforms.
struct ResizePlan {
  Dims out;
  std::vector<double> scales;
  std::vector<double> roi;  // 2*rank (starts, ends); empty when unused
};

const Tensor* nonempty(const Tensor* t) { return t && t->numel() > 0 ? t : nullptr; }

// Builds the plan from concrete inputs. `scales`/`sizes`/`roi` may be null. With `axes` (opset 18) they cover
// those dims only, the others keep their size; keep_aspect_ratio_policy not_larger / not_smaller turns sizes into
// one scale for all covered dims (the smallest / largest of sizes / in), with out = round(scale * in).
Status make_plan(const Node& node, const Dims& in, const std::vector<double>* attr_scales, const Tensor* scales,
                 const Tensor* sizes, const Tensor* roi, ResizePlan* p) {
  const size_t rank = in.size();
  p->out.assign(in.begin(), in.end());
  p->scales.assign(rank, 1.0);
  // The dims scales / sizes / roi cover: the `axes` attribute (opset 18), else every dim.
  std::vector<int> axes;
  std::string err;
  if (!attr_axes(node, static_cast<int>(rank), &axes, &err)) return InvalidModel(node.describe() + ": " + err);
  const size_t k = axes.size();
  if (sizes && scales) return InvalidModel(node.describe() + ": only one of 'scales' and 'sizes' may be given");
  if (sizes) {
    if (static_cast<size_t>(sizes->numel()) != k) {
      return InvalidModel(node.describe() + ": 'sizes' has " + std::to_string(sizes->numel()) + " entries for " +
                          std::to_string(k) + " axes");
    }
    const std::string policy = node.attr_string("keep_aspect_ratio_policy", "stretch");
    double uniform = policy == "not_larger" ? std::numeric_limits<double>::infinity() : 0.0;
    for (size_t i = 0; i < k; ++i) {
      const int64_t target = sizes->as_int64(static_cast<int64_t>(i));
      if (target < 0) return InvalidModel(node.describe() + ": negative output size");
      const double r = in[axes[i]] > 0 ? static_cast<double>(target) / static_cast<double>(in[axes[i]]) : 1.0;
      uniform = policy == "not_larger" ? std::min(uniform, r) : std::max(uniform, r);
      p->out[axes[i]] = target;
      p->scales[axes[i]] = r;
    }
    if (policy != "stretch") {
      for (size_t ax : axes) {
        p->scales[ax] = uniform;
        p->out[ax] = static_cast<int64_t>(std::floor(uniform * static_cast<double>(in[ax]) + 0.5));
      }
    }
  } else {
    std::vector<double> s;
    if (scales) {
      for (int64_t i = 0; i < scales->numel(); ++i) s.push_back(static_cast<double>(static_cast<float>(scales->as_double(i))));
    } else if (attr_scales) {
      s = *attr_scales;
    } else {
      return InvalidModel(node.describe() + ": one of 'scales' and 'sizes' must be given");
    }
    if (s.size() != k) {
      return InvalidModel(node.describe() + ": 'scales' has " + std::to_string(s.size()) + " entries for " +
                          std::to_string(k) + " axes");
    }
    for (size_t i = 0; i < k; ++i) {
      if (!(s[i] > 0)) return InvalidModel(node.describe() + ": scales must be positive");
      p->scales[axes[i]] = s[i];
      p->out[axes[i]] = static_cast<int64_t>(std::floor(s[i] * static_cast<double>(in[axes[i]])));
    }
  }
  if (roi && static_cast<size_t>(roi->numel()) == 2 * k) {
    p->roi.assign(2 * rank, 0.0);
    for (size_t i = 0; i < rank; ++i) p->roi[rank + i] = 1.0;
    for (size_t i = 0; i < k; ++i) {
      p->roi[axes[i]] = roi->as_double(static_cast<int64_t>(i));
      p->roi[rank + axes[i]] = roi->as_double(static_cast<int64_t>(k + i));
    }
  }
  return Status::Ok();
}

std::vector<double> attr_scales_of(const Node& node) {
  std::vector<double> s;
  for (float f : node.attr_floats("scales")) s.push_back(f);
  return s;
}

// ---- inference --------------------------------------------------------------

Status infer_resize(InferContext& ctx) {
  const Node& node = ctx.node();
  const int64_t opset = ctx.opset();
  ResizeAttrs a;
  TSR_RETURN_IF_ERROR(parse_attrs(node, opset, &a));
  const Shape& xs = ctx.in_shape(0);
  DType dt = ctx.in_dtype(0);
  const int si = scales_input(node, opset), zi = sizes_input(node, opset);
  const Tensor* scales = si >= 0 && ctx.has_input(si) ? ctx.in_value(si) : nullptr;
  const Tensor* sizes = zi >= 0 && ctx.has_input(zi) ? ctx.in_value(zi) : nullptr;
  const bool scales_present = si >= 0 && ctx.has_input(si);
  const bool sizes_present = zi >= 0 && ctx.has_input(zi);
  // A present input whose value is unknown may still be the empty one.
  const bool scales_unknown = scales_present && !scales;
  const bool sizes_unknown = sizes_present && !sizes;
  scales = nonempty(scales);
  sizes = nonempty(sizes);
  std::vector<double> attr_scales = attr_scales_of(node);
  const bool use_attr = is_upsample(node) && !node.has_input(1);

  // Opset 18's axes and aspect policy: the plan on concrete dims, else unknown dims.
  const Attribute* axes_attr = node.attr("axes");
  if ((axes_attr && !axes_attr->ints.empty()) ||
      node.attr_string("keep_aspect_ratio_policy", "stretch") != "stretch") {
    if (!xs.rank_known) {
      ctx.set_output(0, dt, Shape::Unranked());
      return Status::Ok();
    }
    if (!xs.fully_known() || scales_unknown || sizes_unknown) {
      ctx.set_output(0, dt, Shape::Unknown(xs.rank()));
      return Status::Ok();
    }
    ResizePlan plan;
    TSR_RETURN_IF_ERROR(make_plan(node, xs.concrete(), nullptr, scales, sizes, nullptr, &plan));
    ctx.set_output(0, dt, Shape::FromDims(plan.out));
    return Status::Ok();
  }
  int rank = xs.rank_known ? xs.rank() : -1;
  if (rank < 0 && sizes) rank = static_cast<int>(sizes->numel());
  if (rank < 0 && scales) rank = static_cast<int>(scales->numel());
  if (rank < 0 && use_attr && !attr_scales.empty()) rank = static_cast<int>(attr_scales.size());
  if (rank < 0) {
    ctx.set_output(0, dt, Shape::Unranked());
    return Status::Ok();
  }
  std::vector<Dim> out(static_cast<size_t>(rank));
  if (sizes) {
    if (sizes->numel() != rank) return ctx.error("'sizes' length does not match the input rank");
    for (int i = 0; i < rank; ++i) out[static_cast<size_t>(i)] = Dim(sizes->as_int64(i));
  } else if (sizes_unknown && !scales) {
    // Unknown sizes: unknown dims.
  } else if (scales || use_attr) {
    std::vector<double> s;
    if (scales) {
      for (int64_t i = 0; i < scales->numel(); ++i) s.push_back(static_cast<float>(scales->as_double(i)));
    } else {
      s = attr_scales;
    }
    if (static_cast<int>(s.size()) != rank) return ctx.error("'scales' length does not match the input rank");
    for (int i = 0; i < rank; ++i) {
      const Dim& d = xs.rank_known ? xs[i] : Dim();
      if (s[static_cast<size_t>(i)] == 1.0) {
        out[static_cast<size_t>(i)] = d;
      } else if (d.known()) {
        out[static_cast<size_t>(i)] =
            Dim(static_cast<int64_t>(std::floor(s[static_cast<size_t>(i)] * static_cast<double>(d.value))));
      }
    }
  } else if (!scales_unknown && !sizes_unknown && !use_attr) {
    return ctx.error("one of 'scales' and 'sizes' must be given");
  }
  ctx.set_output(0, dt, Shape(std::move(out)));
  return Status::Ok();
}

// ---- axis tables ------------------------------------------------------------

struct AxisTable {
  int64_t in = 0, out = 0;
  int taps = 1;
  std::vector<int64_t> idx;     // out * taps, clamped to [0, in)
  std::vector<double> w;        // out * taps
  std::vector<uint8_t> extrap;  // out; 1 = use the extrapolation value
  bool identity = false;
};

void cubic_coeffs(double r, double A, double c[4]) {
  c[0] = ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A;
  c[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
  c[2] = ((A + 2) * (1 - r) - (A + 3)) * (1 - r) * (1 - r) + 1;
  c[3] = ((A * ((1 - r) + 1) - 5 * A) * ((1 - r) + 1) + 8 * A) * ((1 - r) + 1) - 4 * A;
}

// The antialiasing filters (opset 18): the triangle (support 2) and the cubic convolution kernel (support 4).
double aa_filter(const ResizeAttrs& a, double x) {
  x = std::fabs(x);
  if (a.mode == Mode::kLinear) return x < 1.0 ? 1.0 - x : 0.0;
  const double A = a.cubic_a;
  if (x < 1.0) return ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * A;
  return 0.0;
}

// Taps of one output with antialiasing, as ONNX Runtime computes them: when downsampling, the filter is stretched
// by the input pixels per output pixel (1 / scale) so that every input pixel under the output's footprint
// contributes; the weights are normalised. `x` is the output's source coordinate. Taps outside the input read its
// edge (or are dropped with exclude_outside).
// Half the filter's width in input pixels: stretched by 1 / scale when downsampling.
double antialias_support(const ResizeAttrs& a, double scale) {
  const double s = 1.0 / scale, half = a.mode == Mode::kLinear ? 1.0 : 2.0;
  return s >= 1.0 ? half * s : half;
}

void antialias_taps(const ResizeAttrs& a, int64_t in, double scale, double x, int window, int64_t* idx, double* w) {
  const double s = 1.0 / scale;
  const double support = antialias_support(a, scale);
  const double inv = s >= 1.0 ? 1.0 / s : 1.0;
  const double center = x + 0.5;
  const auto lo = static_cast<int64_t>(std::floor(center - support + 0.5));
  const auto hi = static_cast<int64_t>(std::floor(center + support + 0.5));
  double total = 0;
  int k = 0;
  for (int64_t j = lo; j < hi && k < window; ++j) {
    if (a.exclude_outside && (j < 0 || j >= in)) continue;
    const double wt = aa_filter(a, (static_cast<double>(j) - center + 0.5) * inv);
    idx[k] = std::min<int64_t>(std::max<int64_t>(j, 0), in - 1);
    w[k] = wt;
    total += wt;
    ++k;
  }
  for (int i = 0; i < k; ++i) w[i] = total != 0.0 ? w[i] / total : w[i];
  for (; k < window; ++k) {
    idx[k] = 0;
    w[k] = 0.0;
  }
}

AxisTable make_axis(const ResizeAttrs& a, int64_t in, int64_t out, double scale, double roi_start, double roi_end) {
  AxisTable t;
  t.in = in;
  t.out = out;
  t.taps = a.mode == Mode::kNearest ? 1 : a.mode == Mode::kLinear ? 2 : 4;
  if (a.antialias) t.taps = 2 * static_cast<int>(std::ceil(antialias_support(a, scale))) + 1;
  t.idx.resize(static_cast<size_t>(out * t.taps));
  t.w.resize(static_cast<size_t>(out * t.taps));
  t.extrap.assign(static_cast<size_t>(out), 0);
  const double in_len = static_cast<double>(in);
  auto clamp_idx = [&](int64_t i) { return std::min<int64_t>(std::max<int64_t>(i, 0), in - 1); };
  bool identity = in == out;
  for (int64_t o = 0; o < out; ++o) {
    const double x = resize::source_coordinate(a.coord, o, scale, in_len, roi_start, roi_end);
    if (a.coord == Coord::kTfCropAndResize && (x < 0 || x > in_len - 1)) t.extrap[static_cast<size_t>(o)] = 1;
    int64_t* idx = &t.idx[static_cast<size_t>(o * t.taps)];
    double* w = &t.w[static_cast<size_t>(o * t.taps)];
    if (a.antialias) {
      antialias_taps(a, in, scale, x, t.taps, idx, w);
      identity = false;
      continue;
    }
    const double fl = std::floor(x);
    const bool integral = x == fl;
    const int64_t xi = static_cast<int64_t>(fl);
    const double ratio = x - fl;
    if (a.mode == Mode::kNearest) {
      idx[0] = resize::nearest_index(a.nearest, x, scale, in);
      w[0] = 1.0;
      if (idx[0] != o) identity = false;
    } else if (a.mode == Mode::kLinear) {
      idx[0] = clamp_idx(xi);
      idx[1] = clamp_idx(xi + 1);
      w[0] = 1.0 - ratio;
      w[1] = ratio;
      if (!(idx[0] == o && w[1] == 0.0)) identity = false;
    } else {
      double c[4];
      cubic_coeffs(integral ? 0.0 : ratio, a.cubic_a, c);
      double sum = 0;
      for (int k = 0; k < 4; ++k) {
        const int64_t raw = xi - 1 + k;
        if (a.exclude_outside && (raw < 0 || raw >= in)) c[k] = 0;
        sum += c[k];
      }
      for (int k = 0; k < 4; ++k) {
        idx[k] = clamp_idx(xi - 1 + k);
        w[k] = a.exclude_outside && sum != 0 ? c[k] / sum : c[k];
      }
      if (!(integral && xi == o)) identity = false;
    }
    if (t.extrap[static_cast<size_t>(o)]) identity = false;
  }
  t.identity = identity;
  return t;
}

// ---- resampling ---------------------------------------------------------------

// dst[p, o, q] = sum_k w[o,k] * src[p, idx[o,k], q].
template <class T>
void resample_axis(Parallel& pool, const T* src, T* dst, int64_t pre, int64_t post, const AxisTable& t,
                   T extrap) {
  const int taps = t.taps;
  const int64_t in = t.in, out = t.out;
  std::vector<T> wt(t.w.size());
  for (size_t i = 0; i < t.w.size(); ++i) wt[i] = static_cast<T>(t.w[i]);
  const int64_t* idx = t.idx.data();
  const T* w = wt.data();
  const uint8_t* ex = t.extrap.data();
  const bool any_extrap = std::any_of(t.extrap.begin(), t.extrap.end(), [](uint8_t e) { return e != 0; });
  if (post == 1) {
    // Innermost axis: a gather per output element, one input row at a time.
    pool.parallel_for(pre, std::max<int64_t>(1, 16384 / std::max<int64_t>(out * taps, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {
        const T* s = src + p * in;
        T* d = dst + p * out;
        if (taps == 1) {
          for (int64_t o = 0; o < out; ++o) d[o] = s[idx[o]];
        } else if (taps == 2) {
          for (int64_t o = 0; o < out; ++o) d[o] = w[2 * o] * s[idx[2 * o]] + w[2 * o + 1] * s[idx[2 * o + 1]];
        } else if (taps != 4) {  // antialiasing windows
          for (int64_t o = 0; o < out; ++o) {
            T acc = 0;
            for (int k = 0; k < taps; ++k) acc += w[o * taps + k] * s[idx[o * taps + k]];
            d[o] = acc;
          }
        } else {
          for (int64_t o = 0; o < out; ++o) {
            const int64_t* ix = idx + 4 * o;
            const T* wo = w + 4 * o;
            d[o] = wo[0] * s[ix[0]] + wo[1] * s[ix[1]] + wo[2] * s[ix[2]] + wo[3] * s[ix[3]];
          }
        }
        if (any_extrap) {
          for (int64_t o = 0; o < out; ++o)
            if (ex[o]) d[o] = extrap;
        }
      }
    });
    return;
  }
  // Outer axes: whole rows of `post` contiguous values.
  const int64_t rows = pre * out;
  pool.parallel_for(rows, std::max<int64_t>(1, 16384 / (post * taps)), [&](int64_t lo, int64_t hi) {
    int64_t p = lo / out, o = lo % out;
    for (int64_t row = lo; row < hi; ++row) {
      T* d = dst + row * post;
      const T* base = src + p * in * post;
      if (ex[o]) {
        std::fill(d, d + post, extrap);
      } else if (taps == 1) {
        std::memcpy(d, base + idx[o] * post, sizeof(T) * static_cast<size_t>(post));
      } else {
        const int64_t* ix = idx + o * taps;
        const T* wo = w + o * taps;
        const T* __restrict s0 = base + ix[0] * post;
        const T* __restrict s1 = base + ix[1] * post;
        if (taps == 2) {
          const T w0 = wo[0], w1 = wo[1];
          for (int64_t q = 0; q < post; ++q) d[q] = w0 * s0[q] + w1 * s1[q];
        } else if (taps != 4) {  // antialiasing windows
          for (int64_t q = 0; q < post; ++q) d[q] = wo[0] * s0[q];
          for (int k = 1; k < taps; ++k) {
            const T wk = wo[k];
            const T* __restrict sk = base + ix[k] * post;
            for (int64_t q = 0; q < post; ++q) d[q] += wk * sk[q];
          }
        } else {
          const T* __restrict s2 = base + ix[2] * post;
          const T* __restrict s3 = base + ix[3] * post;
          const T w0 = wo[0], w1 = wo[1], w2 = wo[2], w3 = wo[3];
          for (int64_t q = 0; q < post; ++q) d[q] = w0 * s0[q] + w1 * s1[q] + w2 * s2[q] + w3 * s3[q];
        }
      }
      if (++o == out) {
        o = 0;
        ++p;
      }
    }
  });
}

// Nearest-only resampling for any element type (copies whole elements).
void resample_axis_bytes(Parallel& pool, const uint8_t* src, uint8_t* dst, int64_t pre, int64_t post,
                         size_t elem, const AxisTable& t) {
  const int64_t* idx = t.idx.data();
  const int64_t in = t.in, out = t.out;
  if (post == 1) {
    pool.parallel_for(pre, std::max<int64_t>(1, 16384 / std::max<int64_t>(out, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {
        const uint8_t* s = src + static_cast<size_t>(p * in) * elem;
        uint8_t* d = dst + static_cast<size_t>(p * out) * elem;
        switch (elem) {
          case 1: for (int64_t o = 0; o < out; ++o) d[o] = s[idx[o]]; break;
          case 2: {
            auto* d2 = reinterpret_cast<uint16_t*>(d);
            auto* s2 = reinterpret_cast<const uint16_t*>(s);
            for (int64_t o = 0; o < out; ++o) d2[o] = s2[idx[o]];
            break;
          }
          case 4: {
            auto* d4 = reinterpret_cast<uint32_t*>(d);
            auto* s4 = reinterpret_cast<const uint32_t*>(s);
            for (int64_t o = 0; o < out; ++o) d4[o] = s4[idx[o]];
            break;
          }
          default:
            for (int64_t o = 0; o < out; ++o) std::memcpy(d + static_cast<size_t>(o) * elem, s + static_cast<size_t>(idx[o]) * elem, elem);
        }
      }
    });
    return;
  }
  const int64_t rows = pre * out;
  const size_t row_bytes = static_cast<size_t>(post) * elem;
  pool.parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(post, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t p = row / out, o = row % out;
      std::memcpy(dst + static_cast<size_t>(row) * row_bytes,
                  src + static_cast<size_t>(p * in + idx[o]) * row_bytes, row_bytes);
    }
  });
}

template <class T>
void run_passes(Parallel& pool, const std::vector<AxisTable>& axes, const Dims& in_dims, const T* src, T* dst,
                T extrap) {
  std::vector<int> todo;
  for (size_t i = 0; i < axes.size(); ++i)
    if (!axes[i].identity) todo.push_back(static_cast<int>(i));
  Dims cur = in_dims;
  if (todo.empty()) {
    std::memcpy(dst, src, sizeof(T) * static_cast<size_t>(numel(cur)));
    return;
  }
  std::vector<T> bufs[2];
  const T* from = src;
  for (size_t n = 0; n < todo.size(); ++n) {
    const int ax = todo[n];
    int64_t pre = 1, post = 1;
    for (int i = 0; i < ax; ++i) pre *= cur[static_cast<size_t>(i)];
    for (size_t i = static_cast<size_t>(ax) + 1; i < cur.size(); ++i) post *= cur[i];
    cur[static_cast<size_t>(ax)] = axes[static_cast<size_t>(ax)].out;
    T* to = dst;
    if (n + 1 < todo.size()) {
      bufs[n % 2].resize(static_cast<size_t>(numel(cur)));
      to = bufs[n % 2].data();
    }
    resample_axis<T>(pool, from, to, pre, post, axes[static_cast<size_t>(ax)], extrap);
    from = to;
  }
}

void run_passes_bytes(Parallel& pool, const std::vector<AxisTable>& axes, const Dims& in_dims, const uint8_t* src,
                      uint8_t* dst, size_t elem) {
  std::vector<int> todo;
  for (size_t i = 0; i < axes.size(); ++i)
    if (!axes[i].identity) todo.push_back(static_cast<int>(i));
  Dims cur = in_dims;
  if (todo.empty()) {
    std::memcpy(dst, src, elem * static_cast<size_t>(numel(cur)));
    return;
  }
  std::vector<uint8_t> bufs[2];
  const uint8_t* from = src;
  for (size_t n = 0; n < todo.size(); ++n) {
    const int ax = todo[n];
    int64_t pre = 1, post = 1;
    for (int i = 0; i < ax; ++i) pre *= cur[static_cast<size_t>(i)];
    for (size_t i = static_cast<size_t>(ax) + 1; i < cur.size(); ++i) post *= cur[i];
    cur[static_cast<size_t>(ax)] = axes[static_cast<size_t>(ax)].out;
    uint8_t* to = dst;
    if (n + 1 < todo.size()) {
      bufs[n % 2].resize(static_cast<size_t>(numel(cur)) * elem);
      to = bufs[n % 2].data();
    }
    resample_axis_bytes(pool, from, to, pre, post, elem, axes[static_cast<size_t>(ax)]);
    from = to;
  }
}

// A float32 [N, C, H, W] resized bilinearly over H and W alone, as ONNX Runtime's kernel computes it (its
// UpsampleBilinear; 1.31.1 probed on half_pixel, align_corners and asymmetric, every element equal), so that a
// model that quantizes the result gets its steps (a quantized probe was a step off at 1.5 % of the elements with the
// separable passes): per output row and column a source coordinate in float (the scale a float, out / in when sizes
// are given), clamped to the input, its two neighbours and weights d1 = |x - x1|, d2 = |x - x2| (0.5 each where
// they coincide), and y = d2x d2y X11 + d1x d2y X21 + d2x d1y X12 + d1x d1y X22, each weight product and term
// rounded, summed in that order. False where another path applies.
bool bilinear_2d_like_onnx_runtime(Parallel& pool, const ResizeAttrs& a, const ResizePlan& plan, bool from_sizes,
                                   const Tensor& x, Tensor& y) {
  if (x.dtype() != DType::kFloat32 || x.rank() != 4 || a.mode != Mode::kLinear || a.antialias) return false;
  if (!resize::linear_coord_like_onnx_runtime(a.coord)) return false;
  const Dims& in = x.dims();
  if (plan.out[0] != in[0] || plan.out[1] != in[1] || plan.scales[0] != 1.0 || plan.scales[1] != 1.0) return false;
  if (in[2] > (int64_t{1} << 30) || in[3] > (int64_t{1} << 30)) return false;
  auto axis = [&](size_t k) {
    return resize::linear_axis_like_onnx_runtime(a.coord, in[k], plan.out[k], from_sizes, plan.scales[k]);
  };
  const resize::LinearAxis ty = axis(2), tx = axis(3);
  const int64_t ih = in[2], iw = in[3], oh = plan.out[2], ow = plan.out[3];
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  pool.parallel_for(in[0] * in[1] * oh, std::max<int64_t>(1, 4096 / std::max<int64_t>(ow, 1)),
                    [&](int64_t lo, int64_t hi) {
                      for (int64_t r = lo; r < hi; ++r) {
                        const int64_t plane = r / oh, oy = r % oh;
                        const float* src = xp + plane * ih * iw;
                        const float* row1 = src + ty.i1[static_cast<size_t>(oy)] * iw;
                        const float* row2 = src + ty.i2[static_cast<size_t>(oy)] * iw;
                        const float dy1 = ty.d1[static_cast<size_t>(oy)], dy2 = ty.d2[static_cast<size_t>(oy)];
                        float* dst = yp + r * ow;
                        const int32_t* __restrict i1 = tx.i1.data();
                        const int32_t* __restrict i2 = tx.i2.data();
                        const float* __restrict d1 = tx.d1.data();
                        const float* __restrict d2 = tx.d2.data();
                        // No contraction (this file is built with -ffp-contract=off): each product rounds, as ONNX
                        // Runtime's do.
                        int64_t ox = 0;
                        for (; ox < ow; ++ox) {
                          dst[ox] = d2[ox] * dy2 * row1[i1[ox]] + d1[ox] * dy2 * row1[i2[ox]] +
                                    d2[ox] * dy1 * row2[i1[ox]] + d1[ox] * dy1 * row2[i2[ox]];
                        }
                      }
                    });
  return true;
}

class ResizeKernel final : public Kernel {
 public:
  explicit ResizeKernel(int64_t opset) : opset_(opset) {}
  static Expected<std::unique_ptr<Kernel>> create(const KernelInit& init) {
    ResizeAttrs a;
    TSR_RETURN_IF_ERROR(parse_attrs(init.node, init.opset, &a));
    return std::unique_ptr<Kernel>(std::make_unique<ResizeKernel>(init.opset));
  }
  Status run(KernelContext& ctx) const override;

 private:
  int64_t opset_;
};

Status ResizeKernel::run(KernelContext& ctx) const {
  const Node& node = ctx.node();
  const int64_t opset = opset_;
  ResizeAttrs a;
  TSR_RETURN_IF_ERROR(parse_attrs(node, opset, &a));
  const Tensor* x = ctx.input(0);
  const int si = scales_input(node, opset), zi = sizes_input(node, opset), ri = roi_input(node, opset);
  const Tensor* scales = si >= 0 ? nonempty(ctx.input(si)) : nullptr;
  const Tensor* sizes = zi >= 0 ? nonempty(ctx.input(zi)) : nullptr;
  const Tensor* roi = ri >= 0 ? nonempty(ctx.input(ri)) : nullptr;
  std::vector<double> attr_scales = attr_scales_of(node);
  ResizePlan plan;
  TSR_RETURN_IF_ERROR(make_plan(node, x->dims(), si < 0 ? &attr_scales : nullptr, scales, sizes, roi, &plan));
  Tensor* y = ctx.output(0);
  if (y->dims() != plan.out) {
    return ctx.error("output buffer " + dims_str(y->dims()) + " does not match computed " + dims_str(plan.out));
  }
  if (y->numel() == 0) return Status::Ok();
  if (x->numel() == 0) return ctx.error("cannot resize an empty tensor to a non-empty one");
  const size_t rank = x->dims().size();
  if (a.coord == Coord::kTfCropAndResize && plan.roi.size() != 2 * rank) {
    return ctx.error("tf_crop_and_resize needs a roi of 2 * rank values");
  }
  std::vector<AxisTable> axes;
  for (size_t i = 0; i < rank; ++i) {
    double rs = 0, re = 1;
    if (a.coord == Coord::kTfCropAndResize) {
      rs = plan.roi[i];
      re = plan.roi[rank + i];
    }
    axes.push_back(make_axis(a, x->dims()[i], plan.out[i], plan.scales[i], rs, re));
  }
  const DType dt = x->dtype();
  // Sizes under the default policy give each axis the scale out / in (ONNX Runtime's, in float); the other policies
  // one scale for all.
  const bool stretched_sizes = sizes && node.attr_string("keep_aspect_ratio_policy", "stretch") == "stretch";
  if (bilinear_2d_like_onnx_runtime(ctx.pool(), a, plan, stretched_sizes, *x, *y)) return Status::Ok();
  if (dt == DType::kFloat32) {
    run_passes<float>(ctx.pool(), axes, x->dims(), x->data<float>(), y->data<float>(),
                      static_cast<float>(a.extrapolation));
  } else if (dt == DType::kFloat64) {
    run_passes<double>(ctx.pool(), axes, x->dims(), x->data<double>(), y->data<double>(), a.extrapolation);
  } else if (a.mode == Mode::kNearest && a.coord != Coord::kTfCropAndResize && dtype_size(dt) > 0) {
    run_passes_bytes(ctx.pool(), axes, x->dims(), static_cast<const uint8_t*>(x->raw()),
                     static_cast<uint8_t*>(y->raw()), dtype_size(dt));
  } else if (dt == DType::kFloat16 || dt == DType::kBFloat16 || dtype_is_integer(dt)) {
    // Compute in float and convert back (integers round to nearest, saturating).
    std::vector<float> xf(static_cast<size_t>(x->numel())), yf(static_cast<size_t>(y->numel()));
    for (int64_t i = 0; i < x->numel(); ++i) xf[static_cast<size_t>(i)] = static_cast<float>(x->as_double(i));
    run_passes<float>(ctx.pool(), axes, x->dims(), xf.data(), yf.data(), static_cast<float>(a.extrapolation));
    visit_dtype(dt, [&](auto tag) {
      using T = decltype(tag);
      T* out = y->data<T>();
      for (int64_t i = 0; i < y->numel(); ++i) {
        float v = yf[static_cast<size_t>(i)];
        if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
          out[i] = T(v);
        } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          double r = std::nearbyint(static_cast<double>(v));
          r = std::min<double>(std::max<double>(r, static_cast<double>(std::numeric_limits<T>::lowest())),
                               static_cast<double>(std::numeric_limits<T>::max()));
          out[i] = static_cast<T>(r);
        } else {
          out[i] = static_cast<T>(v);
        }
      }
    });
  } else {
    return Unsupported(node.describe() + ": dtype " + dtype_name(dt) + " is not supported");
  }
  return Status::Ok();
}

}  // namespace

TSR_REGISTER_OPS(resize) {
  // Resize-10's scales are input 1; Resize-11+'s scales/sizes are inputs 2/3.
  reg.add(OpSchema{"Resize", "", infer_resize, ResizeKernel::create, nullptr, {1, 2, 3}});
  reg.add(OpSchema{"Upsample", "", infer_resize, ResizeKernel::create, nullptr, {1}});
  register_sampling_ops(reg);
}

}  // namespace tessera
