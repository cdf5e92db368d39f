// GridSample (opsets 16 and 20), AffineGrid (opset 20) and RoiAlign (opsets 10 and 16).
//
// AffineGrid: theta [N,2,3] ([N,3,4]) and size [N,C,H,W] ([N,C,D,H,W]) -> the sampling grid [N,H,W,2]
// ([N,D,H,W,3]) that GridSample reads: theta applied to the normalised coordinates of every output position
// (pixel centres, or corners with align_corners).
//
// GridSample: X [N,C,H,W] (or [N,C,D,H,W]) sampled at the normalised
// positions of grid [N,Ho,Wo,2] ([N,Do,Ho,Wo,3]) -> Y [N,C,Ho,Wo]. Follows
// PyTorch's grid_sampler, which the ONNX operator was defined from: for
// nearest and bilinear the padding mode (border clamp / reflection) is applied
// to the source coordinate and taps outside the image read zero; bicubic
// (2-D only) applies the padding mode to each of its 16 taps.
//
// RoiAlign: average (or max) of bilinearly interpolated samples on a regular
// grid inside each bin of each region, as in Mask R-CNN / onnxruntime; the
// opset-16 `coordinate_transformation_mode` half_pixel shifts boxes by -0.5.
#include "ops/resize_sampling.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/tensor_util.h"

namespace tessera {
namespace {

// ---- GridSample -----------------------------------------------------------------

enum class GsMode { kBilinear, kNearest, kBicubic };
enum class GsPad { kZeros, kBorder, kReflection };

struct GsAttrs {
  GsMode mode = GsMode::kBilinear;
  GsPad pad = GsPad::kZeros;
  bool align_corners = false;
};

Status parse_gs(const Node& node, GsAttrs* a) {
  std::string mode = node.attr_string("mode", "bilinear");
  if (mode == "bilinear" || mode == "linear") a->mode = GsMode::kBilinear;
  else if (mode == "nearest") a->mode = GsMode::kNearest;
  else if (mode == "bicubic" || mode == "cubic") a->mode = GsMode::kBicubic;
  else return InvalidModel(node.describe() + ": unsupported mode '" + mode + "'");
  std::string pad = node.attr_string("padding_mode", "zeros");
  if (pad == "zeros") a->pad = GsPad::kZeros;
  else if (pad == "border") a->pad = GsPad::kBorder;
  else if (pad == "reflection") a->pad = GsPad::kReflection;
  else return InvalidModel(node.describe() + ": unsupported padding_mode '" + pad + "'");
  a->align_corners = node.attr_int("align_corners", 0) != 0;
  return Status::Ok();
}

Status infer_grid_sample(InferContext& ctx) {
  GsAttrs a;
  TSR_RETURN_IF_ERROR(parse_gs(ctx.node(), &a));
  const Shape& xs = ctx.in_shape(0);
  const Shape& gs = ctx.in_shape(1);
  int rank = xs.rank_known ? xs.rank() : gs.rank_known ? gs.rank() : -1;
  if (rank < 0) {
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unranked());
    return Status::Ok();
  }
  if (rank != 4 && rank != 5) return ctx.error("X must be 4-D or 5-D");
  if (xs.rank_known && gs.rank_known && gs.rank() != xs.rank()) return ctx.error("grid rank must match X's");
  if (gs.rank_known && gs[rank - 1].known() && gs[rank - 1].value != rank - 2) {
    return ctx.error("grid's last dim must be " + std::to_string(rank - 2));
  }
  if (rank == 5 && a.mode == GsMode::kBicubic) return ctx.error("bicubic mode supports 4-D input only");
  std::vector<Dim> out(static_cast<size_t>(rank));
  out[0] = xs.rank_known ? xs[0] : gs[0];
  if (xs.rank_known) out[1] = xs[1];
  for (int i = 2; i < rank; ++i)
    if (gs.rank_known) out[static_cast<size_t>(i)] = gs[i - 1];
  ctx.set_output(0, ctx.in_dtype(0), Shape(std::move(out)));
  return Status::Ok();
}

template <class T>
T gs_denormalize(T n, int64_t len, bool align) {
  return align ? (n + 1) / 2 * static_cast<T>(len - 1) : ((n + 1) * static_cast<T>(len) - 1) / 2;
}

// Reflects x into [lo, hi] (repeatedly, by the nearer border).
template <class T>
T gs_reflect(T x, T lo, T hi) {
  const T range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    const T dx = lo - x;
    const int64_t n = static_cast<int64_t>(dx / range);
    const T r = dx - static_cast<T>(n) * range;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const T dx = x - hi;
    const int64_t n = static_cast<int64_t>(dx / range);
    const T r = dx - static_cast<T>(n) * range;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

template <class T>
struct GsAxis {
  int64_t len;
  T lo, hi;  // reflection borders
};

template <class T>
GsAxis<T> gs_axis(int64_t len, bool align) {
  if (align) return {len, T(0), static_cast<T>(len - 1)};
  return {len, T(-0.5), static_cast<T>(len) - T(0.5)};
}

// Padding applied to a continuous source coordinate (nearest/bilinear).
template <class T>
T gs_pad_coord(T x, const GsAxis<T>& ax, GsPad pad) {
  if (pad == GsPad::kBorder) return std::min(std::max(x, T(0)), static_cast<T>(ax.len - 1));
  if (pad == GsPad::kReflection) {
    x = gs_reflect(x, ax.lo, ax.hi);
    return std::min(std::max(x, T(0)), static_cast<T>(ax.len - 1));
  }
  return x;
}

// Padding applied to an integer tap (bicubic); -1 = reads zero.
template <class T>
int64_t gs_pad_tap(int64_t i, const GsAxis<T>& ax, GsPad pad) {
  if (pad == GsPad::kBorder) return std::min<int64_t>(std::max<int64_t>(i, 0), ax.len - 1);
  if (pad == GsPad::kReflection) {
    T r = gs_reflect(static_cast<T>(i), ax.lo, ax.hi);
    int64_t k = static_cast<int64_t>(std::min(std::max(r, T(0)), static_cast<T>(ax.len - 1)));
    return k;
  }
  return i >= 0 && i < ax.len ? i : -1;
}

template <class T>
void gs_cubic(T t, T c[4]) {
  const T A = T(-0.75);
  t = std::abs(t);
  c[0] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
  c[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
  c[2] = ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1;
  c[3] = ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A;
}

template <class T>
void grid_sample_2d(Parallel& pool, const GsAttrs& a, const Tensor& x, const Tensor& grid, Tensor& y) {
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t Ho = grid.dim(1), Wo = grid.dim(2);
  const GsAxis<T> ax = gs_axis<T>(W, a.align_corners), ay = gs_axis<T>(H, a.align_corners);
  const T* xd = x.data<T>();
  const T* gd = grid.data<T>();
  T* yd = y.data<T>();
  pool.parallel_for(N * Ho, std::max<int64_t>(1, 4096 / std::max<int64_t>(Wo * C, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t n = row / Ho, oy = row % Ho;
      for (int64_t ox = 0; ox < Wo; ++ox) {
        const T* g = gd + ((n * Ho + oy) * Wo + ox) * 2;
        T sx = gs_denormalize<T>(g[0], W, a.align_corners);
        T sy = gs_denormalize<T>(g[1], H, a.align_corners);
        const int64_t out_off = oy * Wo + ox;
        if (a.mode == GsMode::kBicubic) {
          const T fx = std::floor(sx), fy = std::floor(sy);
          const int64_t x0 = static_cast<int64_t>(fx) - 1, y0 = static_cast<int64_t>(fy) - 1;
          T cx[4], cy[4];
          gs_cubic<T>(sx - fx, cx);
          gs_cubic<T>(sy - fy, cy);
          int64_t tx[4], ty[4];
          for (int k = 0; k < 4; ++k) {
            tx[k] = gs_pad_tap<T>(x0 + k, ax, a.pad);
            ty[k] = gs_pad_tap<T>(y0 + k, ay, a.pad);
          }
          for (int64_t c = 0; c < C; ++c) {
            const T* img = xd + (n * C + c) * H * W;
            T acc = 0;
            for (int i = 0; i < 4; ++i) {
              T v = 0;
              if (ty[i] >= 0) {
                for (int k = 0; k < 4; ++k)
                  if (tx[k] >= 0) v += cx[k] * img[ty[i] * W + tx[k]];
              }
              acc += cy[i] * v;
            }
            yd[(n * C + c) * Ho * Wo + out_off] = acc;
          }
          continue;
        }
        sx = gs_pad_coord(sx, ax, a.pad);
        sy = gs_pad_coord(sy, ay, a.pad);
        if (a.mode == GsMode::kNearest) {
          const int64_t ix = static_cast<int64_t>(std::nearbyint(sx));
          const int64_t iy = static_cast<int64_t>(std::nearbyint(sy));
          const bool in = ix >= 0 && ix < W && iy >= 0 && iy < H;
          for (int64_t c = 0; c < C; ++c) {
            yd[(n * C + c) * Ho * Wo + out_off] = in ? xd[(n * C + c) * H * W + iy * W + ix] : T(0);
          }
          continue;
        }
        const T fx = std::floor(sx), fy = std::floor(sy);
        const int64_t x1 = static_cast<int64_t>(fx), y1 = static_cast<int64_t>(fy);
        const int64_t x2 = x1 + 1, y2 = y1 + 1;
        const T dx1 = sx - fx, dx2 = 1 - dx1, dy1 = sy - fy, dy2 = 1 - dy1;
        const bool vx1 = x1 >= 0 && x1 < W, vx2 = x2 >= 0 && x2 < W;
        const bool vy1 = y1 >= 0 && y1 < H, vy2 = y2 >= 0 && y2 < H;
        for (int64_t c = 0; c < C; ++c) {
          const T* img = xd + (n * C + c) * H * W;
          const T p11 = vy1 && vx1 ? img[y1 * W + x1] : T(0);
          const T p12 = vy1 && vx2 ? img[y1 * W + x2] : T(0);
          const T p21 = vy2 && vx1 ? img[y2 * W + x1] : T(0);
          const T p22 = vy2 && vx2 ? img[y2 * W + x2] : T(0);
          yd[(n * C + c) * Ho * Wo + out_off] = dy2 * (dx2 * p11 + dx1 * p12) + dy1 * (dx2 * p21 + dx1 * p22);
        }
      }
    }
  });
}

template <class T>
void grid_sample_3d(Parallel& pool, const GsAttrs& a, const Tensor& x, const Tensor& grid, Tensor& y) {
  const int64_t N = x.dim(0), C = x.dim(1), D = x.dim(2), H = x.dim(3), W = x.dim(4);
  const int64_t Do = grid.dim(1), Ho = grid.dim(2), Wo = grid.dim(3);
  const GsAxis<T> ax = gs_axis<T>(W, a.align_corners), ay = gs_axis<T>(H, a.align_corners),
                  az = gs_axis<T>(D, a.align_corners);
  const T* xd = x.data<T>();
  const T* gd = grid.data<T>();
  T* yd = y.data<T>();
  const int64_t in_plane = D * H * W, out_plane = Do * Ho * Wo;
  pool.parallel_for(N * Do * Ho, std::max<int64_t>(1, 4096 / std::max<int64_t>(Wo * C, 1)),
                    [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t n = row / (Do * Ho);
      for (int64_t ox = 0; ox < Wo; ++ox) {
        const int64_t out_off = (row % (Do * Ho)) * Wo + ox;
        const T* g = gd + (row * Wo + ox) * 3;
        T sx = gs_pad_coord(gs_denormalize<T>(g[0], W, a.align_corners), ax, a.pad);
        T sy = gs_pad_coord(gs_denormalize<T>(g[1], H, a.align_corners), ay, a.pad);
        T sz = gs_pad_coord(gs_denormalize<T>(g[2], D, a.align_corners), az, a.pad);
        if (a.mode == GsMode::kNearest) {
          const int64_t ix = static_cast<int64_t>(std::nearbyint(sx));
          const int64_t iy = static_cast<int64_t>(std::nearbyint(sy));
          const int64_t iz = static_cast<int64_t>(std::nearbyint(sz));
          const bool in = ix >= 0 && ix < W && iy >= 0 && iy < H && iz >= 0 && iz < D;
          for (int64_t c = 0; c < C; ++c) {
            yd[(n * C + c) * out_plane + out_off] = in ? xd[(n * C + c) * in_plane + (iz * H + iy) * W + ix] : T(0);
          }
          continue;
        }
        const T fx = std::floor(sx), fy = std::floor(sy), fz = std::floor(sz);
        const int64_t x1 = static_cast<int64_t>(fx), y1 = static_cast<int64_t>(fy), z1 = static_cast<int64_t>(fz);
        const T wx[2] = {1 - (sx - fx), sx - fx}, wy[2] = {1 - (sy - fy), sy - fy}, wz[2] = {1 - (sz - fz), sz - fz};
        for (int64_t c = 0; c < C; ++c) {
          const T* img = xd + (n * C + c) * in_plane;
          T acc = 0;
          for (int dz = 0; dz < 2; ++dz) {
            const int64_t zz = z1 + dz;
            if (zz < 0 || zz >= D) continue;
            for (int dy = 0; dy < 2; ++dy) {
              const int64_t yy = y1 + dy;
              if (yy < 0 || yy >= H) continue;
              for (int dx = 0; dx < 2; ++dx) {
                const int64_t xx = x1 + dx;
                if (xx < 0 || xx >= W) continue;
                acc += wz[dz] * wy[dy] * wx[dx] * img[(zz * H + yy) * W + xx];
              }
            }
          }
          yd[(n * C + c) * out_plane + out_off] = acc;
        }
      }
    }
  });
}

Status run_grid_sample(KernelContext& ctx) {
  GsAttrs a;
  TSR_RETURN_IF_ERROR(parse_gs(ctx.node(), &a));
  const Tensor* x = ctx.input(0);
  const Tensor* grid = ctx.input(1);
  Tensor* y = ctx.output(0);
  const int rank = x->rank();
  if ((rank != 4 && rank != 5) || grid->rank() != rank || grid->dim(rank - 1) != rank - 2 ||
      grid->dim(0) != x->dim(0)) {
    return ctx.error("X " + dims_str(x->dims()) + " and grid " + dims_str(grid->dims()) + " do not match");
  }
  if (grid->dtype() != x->dtype()) return ctx.error("grid must have X's dtype");
  if (y->numel() == 0) return Status::Ok();
  for (int i = 2; i < rank; ++i) {
    if (x->dim(i) == 0) return ctx.error("cannot sample an empty image");
  }
  if (rank == 5 && a.mode == GsMode::kBicubic) return ctx.error("bicubic mode supports 4-D input only");
  switch (x->dtype()) {
    case DType::kFloat32:
      if (rank == 4) grid_sample_2d<float>(ctx.pool(), a, *x, *grid, *y);
      else grid_sample_3d<float>(ctx.pool(), a, *x, *grid, *y);
      return Status::Ok();
    case DType::kFloat64:
      if (rank == 4) grid_sample_2d<double>(ctx.pool(), a, *x, *grid, *y);
      else grid_sample_3d<double>(ctx.pool(), a, *x, *grid, *y);
      return Status::Ok();
    default:
      return Unsupported(ctx.node().describe() + ": dtype " + dtype_name(x->dtype()) + " is not supported");
  }
}

// ---- RoiAlign ---------------------------------------------------------------------

struct RoiAttrs {
  bool max_mode = false;
  int64_t out_h = 1, out_w = 1;
  int64_t sampling_ratio = 0;
  float spatial_scale = 1.f;
  bool half_pixel = false;
};

Status parse_roi(const Node& node, int64_t opset, RoiAttrs* a) {
  std::string mode = node.attr_string("mode", "avg");
  if (mode == "avg") a->max_mode = false;
  else if (mode == "max") a->max_mode = true;
  else return InvalidModel(node.describe() + ": unsupported mode '" + mode + "'");
  a->out_h = node.attr_int("output_height", 1);
  a->out_w = node.attr_int("output_width", 1);
  a->sampling_ratio = node.attr_int("sampling_ratio", 0);
  a->spatial_scale = node.attr_float("spatial_scale", 1.f);
  if (a->out_h <= 0 || a->out_w <= 0) return InvalidModel(node.describe() + ": output size must be positive");
  if (a->sampling_ratio < 0) return InvalidModel(node.describe() + ": sampling_ratio must be >= 0");
  // Opset 16 introduced the attribute with default half_pixel; opset 10
  // behaves as output_half_pixel.
  std::string ctm = node.attr_string("coordinate_transformation_mode", opset >= 16 ? "half_pixel" : "output_half_pixel");
  if (ctm == "half_pixel") a->half_pixel = true;
  else if (ctm == "output_half_pixel") a->half_pixel = false;
  else return InvalidModel(node.describe() + ": unsupported coordinate_transformation_mode '" + ctm + "'");
  return Status::Ok();
}

Status infer_roi_align(InferContext& ctx) {
  RoiAttrs a;
  TSR_RETURN_IF_ERROR(parse_roi(ctx.node(), ctx.opset(), &a));
  const Shape& xs = ctx.in_shape(0);
  const Shape& rs = ctx.in_shape(1);
  if (xs.rank_known && xs.rank() != 4) return ctx.error("X must be 4-D");
  if (rs.rank_known && (rs.rank() != 2 || (rs[1].known() && rs[1].value != 4))) {
    return ctx.error("rois must be [num_rois, 4]");
  }
  Dim num = rs.rank_known ? rs[0] : Dim();
  if (!num.known() && ctx.in_shape(2).rank_known && ctx.in_shape(2).rank() == 1) num = ctx.in_shape(2)[0];
  ctx.set_output(0, ctx.in_dtype(0), Shape({num, xs.rank_known ? xs[1] : Dim(), Dim(a.out_h), Dim(a.out_w)}));
  return Status::Ok();
}

class RoiAlignKernel final : public Kernel {
 public:
  explicit RoiAlignKernel(RoiAttrs a) : a_(a) {}
  static Expected<std::unique_ptr<Kernel>> create(const KernelInit& init) {
    RoiAttrs a;
    TSR_RETURN_IF_ERROR(parse_roi(init.node, init.opset, &a));
    return std::unique_ptr<Kernel>(std::make_unique<RoiAlignKernel>(a));
  }
  Status run(KernelContext& ctx) const override {
    const Tensor* x = ctx.input(0);
    switch (x->dtype()) {
      case DType::kFloat32: return run_typed<float>(ctx);
      case DType::kFloat64: return run_typed<double>(ctx);
      default: return Unsupported(ctx.node().describe() + ": dtype " + dtype_name(x->dtype()) + " is not supported");
    }
  }

 private:
  template <class T>
  Status run_typed(KernelContext& ctx) const;
  RoiAttrs a_;
};

template <class T>
Status RoiAlignKernel::run_typed(KernelContext& ctx) const {
  const Tensor* x = ctx.input(0);
  const Tensor* rois = ctx.input(1);
  const Tensor* bidx = ctx.input(2);
  Tensor* y = ctx.output(0);
  if (x->rank() != 4 || rois->rank() != 2 || rois->dim(1) != 4 || !bidx || bidx->numel() != rois->dim(0)) {
    return ctx.error("expects X [N,C,H,W], rois [R,4] and batch_indices [R]");
  }
  if (rois->dtype() != x->dtype()) return ctx.error("rois must have X's dtype");
  const int64_t N = x->dim(0), C = x->dim(1), H = x->dim(2), W = x->dim(3), R = rois->dim(0);
  const int64_t PH = a_.out_h, PW = a_.out_w;
  std::vector<int64_t> batch(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) {
    batch[static_cast<size_t>(r)] = bidx->as_int64(r);
    if (batch[static_cast<size_t>(r)] < 0 || batch[static_cast<size_t>(r)] >= N) {
      return ctx.error("batch index out of range");
    }
  }
  const T* xd = x->data<T>();
  const T* rd = rois->data<T>();
  T* yd = y->data<T>();
  const T scale = static_cast<T>(a_.spatial_scale);
  const T offset = a_.half_pixel ? T(0.5) : T(0);
  struct Sample {
    int64_t p[4];
    T w[4];
  };
  ctx.pool().parallel_for(R, 1, [&](int64_t lo, int64_t hi) {
    std::vector<Sample> samples;
    for (int64_t r = lo; r < hi; ++r) {
      const T* box = rd + r * 4;
      const T x0 = box[0] * scale - offset, y0 = box[1] * scale - offset;
      const T x1 = box[2] * scale - offset, y1 = box[3] * scale - offset;
      T rw = x1 - x0, rh = y1 - y0;
      if (!a_.half_pixel) {
        rw = std::max(rw, T(1));
        rh = std::max(rh, T(1));
      }
      const T bh = rh / static_cast<T>(PH), bw = rw / static_cast<T>(PW);
      const int64_t gh = a_.sampling_ratio > 0 ? a_.sampling_ratio : static_cast<int64_t>(std::ceil(rh / static_cast<T>(PH)));
      const int64_t gw = a_.sampling_ratio > 0 ? a_.sampling_ratio : static_cast<int64_t>(std::ceil(rw / static_cast<T>(PW)));
      const T count = static_cast<T>(std::max<int64_t>(gh * gw, 1));
      // Sample positions and weights are shared by all channels.
      samples.clear();
      for (int64_t ph = 0; ph < PH; ++ph)
        for (int64_t pw = 0; pw < PW; ++pw)
          for (int64_t iy = 0; iy < gh; ++iy) {
            const T yy = y0 + static_cast<T>(ph) * bh + (static_cast<T>(iy) + T(0.5)) * bh / static_cast<T>(gh);
            for (int64_t ix = 0; ix < gw; ++ix) {
              const T xx = x0 + static_cast<T>(pw) * bw + (static_cast<T>(ix) + T(0.5)) * bw / static_cast<T>(gw);
              Sample s{{0, 0, 0, 0}, {0, 0, 0, 0}};
              if (yy < -1 || yy > static_cast<T>(H) || xx < -1 || xx > static_cast<T>(W)) {
                samples.push_back(s);
                continue;
              }
              T sy = std::max(yy, T(0)), sx = std::max(xx, T(0));
              int64_t ylo = static_cast<int64_t>(sy), xlo = static_cast<int64_t>(sx), yhi, xhi;
              if (ylo >= H - 1) {
                ylo = yhi = H - 1;
                sy = static_cast<T>(ylo);
              } else {
                yhi = ylo + 1;
              }
              if (xlo >= W - 1) {
                xlo = xhi = W - 1;
                sx = static_cast<T>(xlo);
              } else {
                xhi = xlo + 1;
              }
              const T ly = sy - static_cast<T>(ylo), lx = sx - static_cast<T>(xlo);
              const T hy = 1 - ly, hx = 1 - lx;
              s.p[0] = ylo * W + xlo;
              s.p[1] = ylo * W + xhi;
              s.p[2] = yhi * W + xlo;
              s.p[3] = yhi * W + xhi;
              s.w[0] = hy * hx;
              s.w[1] = hy * lx;
              s.w[2] = ly * hx;
              s.w[3] = ly * lx;
              samples.push_back(s);
            }
          }
      const int64_t per_bin = gh * gw;
      for (int64_t c = 0; c < C; ++c) {
        const T* img = xd + (batch[static_cast<size_t>(r)] * C + c) * H * W;
        T* out = yd + (r * C + c) * PH * PW;
        for (int64_t b = 0; b < PH * PW; ++b) {
          const Sample* s = samples.data() + b * per_bin;
          if (a_.max_mode) {
            T m = 0;
            for (int64_t k = 0; k < per_bin; ++k) {
              T v = std::max(std::max(s[k].w[0] * img[s[k].p[0]], s[k].w[1] * img[s[k].p[1]]),
                             std::max(s[k].w[2] * img[s[k].p[2]], s[k].w[3] * img[s[k].p[3]]));
              m = k == 0 ? v : std::max(m, v);
            }
            out[b] = m;
          } else {
            T acc = 0;
            for (int64_t k = 0; k < per_bin; ++k) {
              acc += s[k].w[0] * img[s[k].p[0]] + s[k].w[1] * img[s[k].p[1]] + s[k].w[2] * img[s[k].p[2]] +
                     s[k].w[3] * img[s[k].p[3]];
            }
            out[b] = acc / count;
          }
        }
      }
    }
  });
  return Status::Ok();
}

// ---- AffineGrid ----------------------------------------------------------------------

Status infer_affine_grid(InferContext& ctx) {
  const DType dt = ctx.in_dtype(0);
  if (dt != DType::kFloat32 && dt != DType::kFloat64 && dt != DType::kUndefined) {
    return ctx.error(std::string("theta has dtype ") + dtype_name(dt) + "; supported: float32, float64");
  }
  std::vector<int64_t> size;
  if (!known_ints(ctx, 1, &size)) {
    ctx.set_output(0, dt, Shape::Unranked());
    return Status::Ok();
  }
  if (size.size() != 4 && size.size() != 5) return ctx.error("size must have 4 or 5 entries");
  std::vector<Dim> out = {Dim(size[0])};
  for (size_t i = 2; i < size.size(); ++i) out.push_back(Dim(size[i]));
  out.push_back(Dim(static_cast<int64_t>(size.size()) - 2));
  ctx.set_output(0, dt, Shape(std::move(out)));
  return Status::Ok();
}

template <class T>
void affine_grid(const T* theta, const std::vector<int64_t>& size, bool align_corners, T* out) {
  const size_t r = size.size() - 2;  // spatial rank, 2 or 3
  const int64_t n = size[0];
  // Normalised coordinate of index i along an axis of length len.
  auto coord = [&](int64_t i, int64_t len) -> double {
    if (align_corners) return len > 1 ? -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(len - 1) : 0.0;
    return (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(len) - 1.0;
  };
  const int64_t d = r == 3 ? size[2] : 1, h = size[r == 3 ? 3 : 2], w = size[r == 3 ? 4 : 3];
  const size_t cols = r + 1;
  for (int64_t b = 0; b < n; ++b) {
    const T* th = theta + b * static_cast<int64_t>(r * cols);
    for (int64_t z = 0; z < d; ++z) {
      for (int64_t y = 0; y < h; ++y) {
        for (int64_t x = 0; x < w; ++x) {
          // Base coordinates in (x, y[, z], 1) order, as the grid's last axis is (x, y[, z]).
          const double base[4] = {coord(x, w), coord(y, h), r == 3 ? coord(z, d) : 1.0, 1.0};
          for (size_t k = 0; k < r; ++k) {
            double v = 0;
            for (size_t j = 0; j < cols; ++j) v += static_cast<double>(th[k * cols + j]) * base[j];
            *out++ = static_cast<T>(v);
          }
        }
      }
    }
  }
}

Status run_affine_grid(KernelContext& ctx) {
  const Tensor* theta = ctx.input(0);
  const std::vector<int64_t> size = input_ints(ctx, 1);
  const size_t r = size.size() - 2;
  if (theta->rank() != 3 || theta->dim(0) != size[0] || theta->dim(1) != static_cast<int64_t>(r) ||
      theta->dim(2) != static_cast<int64_t>(r + 1)) {
    return ctx.error("theta " + dims_str(theta->dims()) + " does not match size " +
                     dims_str(Dims(size.begin(), size.end())));
  }
  const bool align = ctx.node().attr_int("align_corners", 0) != 0;
  if (theta->dtype() == DType::kFloat64) {
    affine_grid(theta->data<double>(), size, align, ctx.output(0)->data<double>());
  } else {
    affine_grid(theta->data<float>(), size, align, ctx.output(0)->data<float>());
  }
  return Status::Ok();
}

}  // namespace

void register_sampling_ops(OpRegistry& reg) {
  reg.add(OpSchema{"GridSample", "", infer_grid_sample, nullptr, run_grid_sample, {}});
  reg.add(OpSchema{"AffineGrid", "", infer_affine_grid, nullptr, run_affine_grid, {1}});
  reg.add(OpSchema{"RoiAlign", "", infer_roi_align, RoiAlignKernel::create, nullptr, {}});
}

}  // namespace tessera
