// MaxRoiPool (opset 1): X [N,C,H,W] and rois [R,5] rows (batch_index, x1, y1,
// x2, y2) in input-image coordinates -> Y [R,C,pooled_h,pooled_w], the
// maximum of X over each bin of each region (Fast R-CNN ROI pooling).
//
// Region corners are scaled by spatial_scale and rounded (half away from
// zero); a region spans at least one pixel; bin (ph, pw) covers rows
// [floor(ph*bh), ceil((ph+1)*bh)) offset by the region start and clipped to
// the image, with bh = region_height / pooled_h (likewise for columns), as in
// Caffe and onnxruntime. Empty bins are 0. Unlike onnxruntime, whose running
// maximum starts at FLT_MIN (the smallest positive float) and so turns all
// negative maxima into 1.2e-38, the maximum here is the true one.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/detection_ops.h"

namespace tessera {
namespace {

struct RoiPoolAttrs {
  int64_t pooled_h = 0;
  int64_t pooled_w = 0;
  float spatial_scale = 1.0f;
};

Status parse_roi_pool(const Node& node, RoiPoolAttrs* a) {
  std::vector<int64_t> ps = node.attr_ints("pooled_shape");
  if (ps.size() != 2 || ps[0] <= 0 || ps[1] <= 0) {
    return InvalidModel(node.describe() + ": pooled_shape must be two positive sizes");
  }
  a->pooled_h = ps[0];
  a->pooled_w = ps[1];
  a->spatial_scale = node.attr_float("spatial_scale", 1.0f);
  if (!(a->spatial_scale > 0.0f)) {
    return InvalidModel(node.describe() + ": spatial_scale must be positive, got " +
                        std::to_string(a->spatial_scale));
  }
  return Status::Ok();
}

Status infer_max_roi_pool(InferContext& ctx) {
  RoiPoolAttrs a;
  TSR_RETURN_IF_ERROR(parse_roi_pool(ctx.node(), &a));
  const DType t = ctx.in_dtype(0);
  if (t != DType::kUndefined && !dtype_is_float(t)) return ctx.error("X must be a float tensor");
  const Shape& x = ctx.in_shape(0);
  const Shape& rois = ctx.in_shape(1);
  if (x.rank_known && x.rank() != 4) return ctx.error("X must be 4-D [N,C,H,W], got " + x.str());
  if (rois.rank_known && (rois.rank() != 2 || (rois[1].known() && rois[1].value != 5))) {
    return ctx.error("rois must be [num_rois, 5], got " + rois.str());
  }
  Dim r = rois.rank_known ? rois[0] : Dim();
  Dim c = x.rank_known ? x[1] : Dim();
  ctx.set_output(0, t, Shape({r, c, Dim(a.pooled_h), Dim(a.pooled_w)}));
  return Status::Ok();
}

// Half-open pixel range of one bin along one axis.
struct BinRange {
  int64_t begin, end;
};

// Bins of a region along one axis of `size` pixels (onnxruntime's float
// arithmetic, so bin edges agree exactly).
void region_bins(int64_t start, int64_t region, int64_t pooled, int64_t size, std::vector<BinRange>* bins) {
  const float bin = static_cast<float>(region) / static_cast<float>(pooled);
  bins->resize(static_cast<size_t>(pooled));
  for (int64_t i = 0; i < pooled; ++i) {
    int64_t b = static_cast<int64_t>(std::floor(static_cast<float>(i) * bin));
    int64_t e = static_cast<int64_t>(std::ceil(static_cast<float>(i + 1) * bin));
    b = std::min(std::max(b + start, int64_t{0}), size);
    e = std::min(std::max(e + start, int64_t{0}), size);
    (*bins)[static_cast<size_t>(i)] = {b, e};
  }
}

template <class T>
void pool_channel(const T* plane, int64_t width, const std::vector<BinRange>& hb, const std::vector<BinRange>& wb,
                  T* out) {
  for (const BinRange& h : hb) {
    for (const BinRange& w : wb) {
      if (h.end <= h.begin || w.end <= w.begin) {
        *out++ = T(0.0f);
        continue;
      }
      float m = -std::numeric_limits<float>::infinity();
      double md = -std::numeric_limits<double>::infinity();
      for (int64_t y = h.begin; y < h.end; ++y) {
        const T* row = plane + y * width;
        for (int64_t x = w.begin; x < w.end; ++x) {
          if constexpr (std::is_same_v<T, double>) {
            md = std::max(md, row[x]);
          } else {
            m = std::max(m, static_cast<float>(row[x]));
          }
        }
      }
      if constexpr (std::is_same_v<T, double>) {
        *out++ = md;
      } else {
        *out++ = T(m);
      }
    }
  }
}

Status run_max_roi_pool(KernelContext& ctx) {
  RoiPoolAttrs a;
  TSR_RETURN_IF_ERROR(parse_roi_pool(ctx.node(), &a));
  const Tensor* x = ctx.input(0);
  const Tensor* rois_t = ctx.input(1);
  Tensor* y = ctx.output(0);
  if (!x || !rois_t) return ctx.error("X and rois are required");
  if (!y) return Status::Ok();
  const int64_t n = x->dim(0), channels = x->dim(1), height = x->dim(2), width = x->dim(3);
  const int64_t num_rois = rois_t->dim(0);
  std::vector<float> roi_store;
  const float* rois = detection_float_data(*rois_t, &roi_store);

  // Bins of every region, checked before any work starts.
  std::vector<std::vector<BinRange>> hbins(static_cast<size_t>(num_rois)), wbins(static_cast<size_t>(num_rois));
  std::vector<int64_t> batch_of(static_cast<size_t>(num_rois));
  for (int64_t r = 0; r < num_rois; ++r) {
    const float* roi = rois + 5 * r;
    const int64_t b = static_cast<int64_t>(roi[0]);
    if (!(roi[0] >= 0.0f) || b >= n) {
      return ctx.error("roi " + std::to_string(r) + " has batch index " + std::to_string(roi[0]) +
                       " outside [0, " + std::to_string(n) + ")");
    }
    batch_of[static_cast<size_t>(r)] = b;
    for (int k = 1; k < 5; ++k) {
      if (!std::isfinite(roi[k])) return ctx.error("roi " + std::to_string(r) + " has a non-finite coordinate");
    }
    // Clamped so the conversion is defined; regions that far out are empty
    // either way.
    const auto corner = [&](float v) {
      return static_cast<int64_t>(std::clamp(std::round(v * a.spatial_scale), -1e12f, 1e12f));
    };
    const int64_t x1 = corner(roi[1]), y1 = corner(roi[2]), x2 = corner(roi[3]), y2 = corner(roi[4]);
    // Malformed regions become one pixel.
    region_bins(y1, std::max<int64_t>(y2 - y1 + 1, 1), a.pooled_h, height, &hbins[static_cast<size_t>(r)]);
    region_bins(x1, std::max<int64_t>(x2 - x1 + 1, 1), a.pooled_w, width, &wbins[static_cast<size_t>(r)]);
  }

  const int64_t plane = height * width;
  const int64_t out_plane = a.pooled_h * a.pooled_w;
  visit_dtype(x->dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Float16> ||
                  std::is_same_v<T, BFloat16>) {
      const T* xd = x->data<T>();
      T* yd = y->data<T>();
      ctx.pool().parallel_for(num_rois * channels, 4, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const int64_t r = i / channels, c = i % channels;
          pool_channel(xd + (batch_of[static_cast<size_t>(r)] * channels + c) * plane, width,
                       hbins[static_cast<size_t>(r)], wbins[static_cast<size_t>(r)], yd + i * out_plane);
        }
      });
    }
  });
  return Status::Ok();
}

}  // namespace

void register_max_roi_pool(OpRegistry& reg) {
  reg.add(OpSchema{"MaxRoiPool", "", infer_max_roi_pool, nullptr, run_max_roi_pool, {}});
}

}  // namespace tessera
