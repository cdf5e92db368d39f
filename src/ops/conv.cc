// The convolution family: Conv (1-D/2-D/3-D, groups, dilations, strides,
// pads, auto_pad), ConvTranspose, and com.microsoft FusedConv
// (Conv + activation, optional summand Z) which graph fusion produces.
//
// float32 Conv lowers each (image, group) to one GEMM: the weights, packed
// once at kernel creation when constant, times the im2col matrix. 1-D and 2-D
// convolutions read it in place from a padded copy of the input, band by band
// (conv_by_rows); 3-D ones have Im2colSource write it straight into the GEMM's
// packed panels; a pointwise convolution uses the input planes as-is. Bias
// and activation run in the GEMM epilogue. Depthwise convolutions take a
// direct path.
// ConvTranspose is GEMM (W^T X) followed by col2im.
// float16/bfloat16/float64 convert through float32.
#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>

#include "ops/conv_im2col.h"
#include "ops/conv_util.h"
#include "ops/kernels/fused_activation.h"
#include "ops/kernels/gemm.h"
#include "ops/op_registry.h"
#include "ops/pool_plane.h"
#include "ops/tensor_util.h"
#include "util/cpu_isa.h"

namespace tessera {

namespace {

using kernels::Epilogue;
using kernels::GemmA;
using kernels::GemmB;
using kernels::PackedMatrix;

// Per-(image, group) GEMMs smaller than this run one per thread.
constexpr double kSmallGemmFlops = 4.0e6;

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

bool float_convertible(DType t) {
  return t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat64;
}

// Spatial rank of a convolution from X or W; -1 when both are unranked.
int conv_rank(const Shape& x, const Shape& w) {
  if (x.rank_known) return x.rank();
  if (w.rank_known) return w.rank();
  return -1;
}

std::vector<int64_t> weight_kernel(const Shape& w, int spatial) {
  std::vector<int64_t> k(static_cast<size_t>(spatial), -1);
  if (w.rank_known && w.rank() == spatial + 2) {
    for (int i = 0; i < spatial; ++i) k[static_cast<size_t>(i)] = w[i + 2].known() ? w[i + 2].value : -1;
  }
  return k;
}

// ---- Conv ---------------------------------------------------------------------

Status infer_conv(InferContext& ctx) { return infer_conv_output(ctx, 0, 1, ctx.in_dtype(0)); }

// ai.tessera FusedConvMaxPool's window (native_fusion.cc) as a 2-D pool's attributes: pool_kernel [kh, kw],
// pool_strides [sh, sw] (default: the kernel), pool_pads [top, left, bottom, right] (default 0), each pad below its
// kernel size; no dilation or ceil mode. Its sizes come from conv_axis, as MaxPool's do.
Status read_max_pool(const Node& node, SpatialAttrs* a) {
  const std::vector<int64_t> k = node.attr_ints("pool_kernel");
  const std::vector<int64_t> s = node.has_attr("pool_strides") ? node.attr_ints("pool_strides") : k;
  const std::vector<int64_t> p = node.has_attr("pool_pads") ? node.attr_ints("pool_pads") : std::vector<int64_t>(4, 0);
  bool ok = k.size() == 2 && s.size() == 2 && p.size() == 4;
  for (size_t i = 0; ok && i < 4; ++i) ok = (i >= 2 || (k[i] >= 1 && s[i] >= 1)) && p[i] >= 0 && p[i] < k[i % 2];
  if (!ok) {
    return InvalidModel(
        node.describe() +
        ": pool_kernel, pool_strides and pool_pads must be 2, 2 and 4 sizes, each pad below its kernel");
  }
  a->rank = 2;
  a->auto_pad = AutoPad::kNotSet;
  a->kernel = k;
  a->strides = s;
  a->dilations = {1, 1};
  a->pads = p;
  a->ceil_mode = false;
  return Status::Ok();
}

// The convolution's output, then its max pool's, as MaxPool infers it (conv_output_dims).
Status infer_conv_max_pool(InferContext& ctx) {
  TSR_RETURN_IF_ERROR(infer_conv_output(ctx, 0, 1, ctx.in_dtype(0)));
  SpatialAttrs a;
  TSR_RETURN_IF_ERROR(read_max_pool(ctx.node(), &a));
  Shape y = ctx.outputs()[0].shape;
  if (!y.rank_known) return Status::Ok();
  if (y.rank() != 4) return ctx.error("a max pool joins a 2-D convolution only, got output " + y.str());
  const std::vector<Dim> pooled = conv_output_dims(y, a);
  y.dims[2] = pooled[0];
  y.dims[3] = pooled[1];
  ctx.set_output(0, ctx.outputs()[0].dtype, std::move(y));
  return Status::Ok();
}

class ConvKernel final : public Kernel {
 public:
  static Expected<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    auto k = std::make_unique<ConvKernel>();
    const Node& node = init.node;
    if (node.op_type != "Conv") TSR_RETURN_IF_ERROR(kernels::activation_from_conv_attrs(node, &k->act_));
    if (node.op_type == "FusedConvMaxPool") {
      TSR_RETURN_IF_ERROR(read_max_pool(node, &k->pool_));
      k->pooled_ = true;
    }
    const Tensor* w = init.const_inputs.size() > 1 ? init.const_inputs[1] : nullptr;
    const int64_t group = node.attr_int("group", 1);
    if (w && w->dtype() == DType::kFloat32 && w->rank() >= 3 && group > 0 && w->dim(0) % group == 0 &&
        w->dim(1) > 1) {
      // Depthwise weights (one input channel per group) are used directly.
      const int64_t mg = w->dim(0) / group;
      const int64_t kk = w->numel() / w->dim(0);
      k->packed_dims_ = w->dims();
      // Narrow products where they pay against this convolution's fp32 path (bench/conv_bench.cc, PRODUCTS=fp16,
      // 2 threads, an Intel Xeon with AVX512-FP16): a kernel wider than 1 runs by rows in fp32, reading its input in
      // place, where the pair kernels pack and round it for every block: 0.3-0.9x the fp32 speed below 256 output
      // channels (a U-Net's 16 -> 16 at 256 x 256: 342 -> 109 GFLOP/s), 1.1-1.4x from 256 on. A 1x1 kernel is a
      // GEMM on the input either way (1.05-1.6x).
      const bool one_by_one = kk == w->dim(1);
      k->products_ = one_by_one || mg >= 256 ? init.products : kernels::Products::kFp32;
      // A float input of known dims that runs by rows on the wide kernel needs W packed wide only: now, not at its
      // first run (the layout the row kernel and im2col read stays unmade; native resnet50 max RSS 331 -> 317 MB).
      const ValueInfo* xi = init.in_info.empty() ? nullptr : &init.in_info[0];
      if (xi && xi->dtype == DType::kFloat32 && xi->shape.fully_known()) {
        Expected<ConvSetup> cs = conv_setup(node, xi->shape.concrete(), w->dims());
        if (cs.ok() && !is_pointwise(cs->g) && rows_conv_applies(cs->g, cs->cg) && k->use_wide(mg, kk)) {
          (void)k->wide_for(w->data<float>(), *cs, kk);
          return std::unique_ptr<Kernel>(std::move(k));
        }
      }
      for (int64_t g = 0; g < group; ++g) {
        k->packed_.push_back(
            PackedMatrix::PackConstantA(w->data<float>() + g * mg * kk, kk, false, mg, kk, k->products_));
      }
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }

  Status run(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& w = *ctx.input(1);
    const Tensor* b = ctx.input(2);
    const Tensor* z = ctx.node().op_type == "FusedConv" ? ctx.input(3) : nullptr;
    Tensor& y = *ctx.output(0);
    TSR_ASSIGN_OR_RETURN(ConvSetup s, conv_setup(ctx.node(), x.dims(), w.dims()));
    if (b && b->numel() != s.m) {
      return InvalidInput(ctx.node().describe() + ": bias has " + std::to_string(b->numel()) + " values for " +
                          std::to_string(s.m) + " output channels");
    }
    Dims yd = {s.n, s.m};
    yd.insert(yd.end(), s.g.out.begin(), s.g.out.end());
    if (pooled_) {
      if (s.g.out.size() != 2 || s.group != 1) return ctx.error("a max pool joins a 2-D convolution of one group only");
      TSR_ASSIGN_OR_RETURN(Geometry pg, conv_geometry(s.g.out, pool_, ctx.node().describe()));
      yd[2] = pg.out[0];
      yd[3] = pg.out[1];
    }
    if (y.dims() != yd) return ctx.error("output is " + dims_str(y.dims()) + ", expected " + dims_str(yd));
    if (z && z->dims() != yd) return ctx.error("summand Z " + dims_str(z->dims()) + " must match the output");
    if (y.numel() == 0) return Status::Ok();
    if (x.dtype() == DType::kFloat32) {
      run_float(ctx, s, x.data<float>(), w.data<float>(), b ? b->data<float>() : nullptr,
                z ? z->data<float>() : nullptr, w.dims() == packed_dims_, y.data<float>());
      return Status::Ok();
    }
    if (!float_convertible(x.dtype())) {
      return Unsupported(ctx.node().describe() + ": Conv on " + dtype_name(x.dtype()));
    }
    Tensor xf = to_float32(x), wf = to_float32(w), yf(DType::kFloat32, y.dims());
    Tensor bf, zf;
    if (b) bf = to_float32(*b);
    if (z) zf = to_float32(*z);
    run_float(ctx, s, xf.data<float>(), wf.data<float>(), b ? bf.data<float>() : nullptr,
              z ? zf.data<float>() : nullptr, false, yf.data<float>());
    assign_from_float32(yf, &y);
    return Status::Ok();
  }

 private:
  void run_float(KernelContext& ctx, const ConvSetup& s, const float* x, const float* w, const float* bias,
                 const float* z, bool use_packed, float* y) const {
    const Geometry& g = s.g;
    const int64_t isz = g.in_size();
    const int64_t osz = g.out_size();
    const int64_t ksz = g.kernel_size();
    const int64_t kdim = s.cg * ksz;
    const bool accumulate = z != nullptr;
    if (z && z != y) std::memcpy(y, z, sizeof(float) * static_cast<size_t>(s.n * s.m * osz));
    Parallel& pool = ctx.pool();
    const int64_t tasks = s.n * s.group;

    // Depthwise (one input channel per group, several groups): a direct loop
    // per (image, group). One group with one input channel (an STFT as a
    // Conv1d: hundreds of output channels, a long kernel) is a plain GEMM.
    if (s.cg == 1 && s.group > 1 && g.in.size() <= 2) {
      pool.parallel_for(tasks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const int64_t n = t / s.group, gi = t % s.group;
          depthwise_conv2d(x + (n * s.c + gi) * isz, w + gi * s.mg * ksz, bias ? bias + gi * s.mg : nullptr, s.mg,
                           g, accumulate, act_, y + (n * s.m + gi * s.mg) * osz);
        }
      });
      return;
    }

    const bool pointwise = is_pointwise(g);
    const bool by_rows = !pointwise && kdim > 0 && rows_conv_applies(g, s.cg);
    // Group gi's weights as the GEMM takes them, and its epilogue.
    auto weights = [&](int64_t gi) {
      GemmA ga{w + gi * s.mg * kdim, kdim, false, nullptr};
      // A 1x1 output is a matrix-vector product, cheaper on the raw weights. (W packed wide only: see Create.)
      if (use_packed && !(pointwise && osz == 1) && !packed_.empty()) {
        ga = GemmA{nullptr, 0, false, &packed_[static_cast<size_t>(gi)]};
      }
      if (by_rows && use_packed && use_wide(s.mg, kdim)) {
        ga = GemmA{nullptr, 0, false, &wide_for(w, s, kdim)[static_cast<size_t>(gi)]};
      }
      return ga;
    };
    auto epilogue = [&](int64_t gi) {
      Epilogue ep = act_;
      if (bias) {
        ep.bias_kind = Epilogue::Bias::kPerRow;
        ep.bias = bias + gi * s.mg;
      }
      return ep;
    };
    if (pooled_) {
      run_max_pooled(pool, s, x, weights(0), epilogue(0), pointwise || by_rows, y);
      return;
    }
    auto one = [&](int64_t t, Parallel* p) {
      const int64_t n = t / s.group, gi = t % s.group;
      const float* xg = x + (n * s.c + gi * s.cg) * isz;
      const GemmA ga = weights(gi);
      const Epilogue ep = epilogue(gi);
      float* yg = y + (n * s.m + gi * s.mg) * osz;
      const float beta = accumulate ? 1.f : 0.f;
      if (by_rows) {
        conv_by_rows(p, s.mg, ga, xg, s.cg, g, beta, yg, ep);
        return;
      }
      Im2colSource src(xg, s.cg, g);
      GemmB gb{nullptr, 0, false, nullptr, &src};
      if (pointwise) gb = GemmB{xg, isz, false, nullptr, nullptr};
      kernels::gemm(p, s.mg, osz, kdim, 1.f, ga, gb, beta, yg, osz, ep);
    };
    const double flops = 2.0 * static_cast<double>(s.mg * osz) * static_cast<double>(kdim);
    if (tasks > 1 && flops < kSmallGemmFlops) {
      pool.parallel_for(tasks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) one(t, nullptr);
      });
    } else {
      for (int64_t t = 0; t < tasks; ++t) one(t, &pool);
    }
  }

  // FusedConvMaxPool (one group, 2-D): the convolution's output rows are pooled while they are in the cache, band by
  // band of pooled rows, into y [n, m, pooled rows, pooled columns]; convolution rows no window reads are not
  // computed, and those two bands' windows share (overlapping windows) are computed for each. A band's input copy
  // fits in half the L2 cache and its convolution rows in all of it; with fewer bands than threads they are cut by
  // output channels too. The
  // convolution's values and the pool's are those of Conv and MaxPool apart (conv_band, MaxPoolBand): a CRNN's
  // 32 x 48 x 1450 convolution output, 8.9 MB, was written and read back.
  void run_max_pooled(Parallel& pool, const ConvSetup& s, const float* x, const GemmA& ga, const Epilogue& ep,
                      bool in_bands, float* y) const {
    const Geometry& g = s.g;
    const MaxPoolWindow w{pool_.kernel[0], pool_.kernel[1], pool_.strides[0], pool_.strides[1],
                          pool_.pads[0],   pool_.pads[1],   pool_.pads[2],    pool_.pads[3]};
    const int64_t oh = g.out[0], ow = g.out[1], m = s.m, kdim = s.cg * g.kernel_size();
    const int64_t poh = conv_axis(oh, pool_, 0).out, pow = conv_axis(ow, pool_, 1).out;  // run() checked they fit
    const int64_t isz = g.in_size(), osz = g.out_size(), psz = poh * pow;
    if (!in_bands) {
      // im2col (outputs too narrow to run by rows): each image's whole output, then the pool.
      const MaxPoolBand all(w, oh, ow, poh, pow, 0, poh);
      std::vector<float> conv(static_cast<size_t>(m * osz));
      for (int64_t n = 0; n < s.n; ++n) {
        Im2colSource src(x + n * s.c * isz, s.cg, g);
        kernels::gemm(&pool, m, osz, kdim, 1.f, ga, GemmB{nullptr, 0, false, nullptr, &src}, 0.f, conv.data(), osz, ep);
        pool.parallel_for(m, 1, [&](int64_t c0, int64_t c1) {
          for (int64_t c = c0; c < c1; ++c) all.run(conv.data() + c * osz, y + (n * m + c) * psz);
        });
      }
      return;
    }
    // Pooled rows per band: their convolution rows ((rows - 1) * sh + kh) within what fits. The rows computed fit in
    // the whole L2 cache (half of it: a ResNet stem, 64 x 320 x 320 pooled 3x3 / 2, recomputed a quarter of its rows
    // at band edges, 9.2 against 8.4 ms; the CRNN stream model 1-2 % slower).
    const int64_t fit_out = cpu::l2_cache_bytes() / static_cast<int64_t>(sizeof(float)) / (m * ow);
    const int64_t fit = std::min(is_pointwise(g) ? oh : conv_band_rows(g, s.cg), fit_out);
    const int64_t per_band = std::max<int64_t>((fit - w.kh) / w.sh + 1, 1);
    int64_t bands = std::clamp<int64_t>((poh + per_band - 1) / per_band, 1, poh);
    const int64_t threads = pool.in_parallel_region() ? 1 : std::max(pool.num_threads(), 1);
    int64_t slices = 1;
    const int64_t mr = kernels::panel_rows(ga), panels = (m + mr - 1) / mr;
    // Equal shares: bands that cut the pooled rows evenly and give every thread as many (of one image: several
    // images even out bands of unequal rows), where up to twice as many bands do that; else every band cut by
    // output channels, one slice per thread, and each thread takes its slice of every band. (A CRNN's 6 x 319
    // convolution pooled to 3 rows ran in 2 bands of 1 and 2 rows: 0.66 of its speed cut by channels.)
    auto even = [&](int64_t b) { return (s.n * b) % threads == 0 && (s.n > 1 || poh % b == 0); };
    if (!even(bands)) {
      int64_t more = bands + 1;
      const int64_t most = std::min(poh, 2 * bands);
      while (more <= most && !even(more)) ++more;
      if (more <= most) {
        bands = more;
      } else {
        slices = std::min<int64_t>(threads, panels);
      }
    }
    std::vector<std::unique_ptr<MaxPoolBand>> band_pools;
    for (int64_t b = 0; b < bands; ++b) {
      band_pools.push_back(std::make_unique<MaxPoolBand>(w, oh, ow, poh, pow, b * poh / bands, (b + 1) * poh / bands));
    }
    const int64_t items = s.n * bands * slices;
    pool.parallel_for(items, 1, [&](int64_t t0, int64_t t1) {
      thread_local std::vector<float> rows_out;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t slice = t / (s.n * bands), n = t / bands % s.n, band = t % bands;
        const MaxPoolBand& mp = *band_pools[static_cast<size_t>(band)];
        const int64_t pr0 = band * poh / bands, r0 = mp.in_begin(), rows = mp.in_end() - mp.in_begin();
        const int64_t c0 = slice * panels / slices * mr, c1 = std::min(m, (slice + 1) * panels / slices * mr);
        if (c1 <= c0 || rows == 0) continue;
        const int64_t ld = rows * ow;
        if (static_cast<int64_t>(rows_out.size()) < (c1 - c0) * ld) {
          rows_out.resize(static_cast<size_t>((c1 - c0) * ld));
        }
        Epilogue e = ep;
        if (e.bias_kind == Epilogue::Bias::kPerRow) e.bias += c0;
        conv_band(c1 - c0, kernels::rows_of(ga, c0), x + n * s.c * isz, s.cg, g, r0, rows, rows_out.data(), ld, e);
        for (int64_t c = c0; c < c1; ++c) mp.run(rows_out.data() + (c - c0) * ld, y + (n * m + c) * psz + pr0 * pow);
      }
    });
  }

  // Whether a convolution by rows takes W packed wide (gemm.h: PackConstantAWide): fp32 products on an instruction
  // set that has the wide kernel, enough K to amortise its transposed store (from a 3x3 over 3 channels: as fast
  // as the row kernel at 48x1320, faster at 48x200), and panels of output channels that waste at most 1/8 of their
  // rows.
  bool use_wide(int64_t mg, int64_t kdim) const {
    const int64_t rows = kernels::gemm_wide_rows();
    return rows > 0 && products_ == kernels::Products::kFp32 && kdim >= 27 &&
           (mg + rows - 1) / rows * rows * 8 <= mg * 9;
  }
  // W packed wide, per group: packed at the first run that asks (W is the constant packed_ was made from).
  const std::vector<PackedMatrix>& wide_for(const float* w, const ConvSetup& s, int64_t kdim) const {
    std::call_once(wide_once_, [&] {
      for (int64_t g = 0; g < s.group; ++g) {
        wide_.push_back(PackedMatrix::PackConstantAWide(w + g * s.mg * kdim, kdim, false, s.mg, kdim));
      }
    });
    return wide_;
  }

  Epilogue act_;
  bool pooled_ = false;  // FusedConvMaxPool: a max pool of pool_ after the convolution
  SpatialAttrs pool_;
  std::vector<PackedMatrix> packed_;  // per group, when W is a constant float32 tensor (unless packed wide only)
  Dims packed_dims_;                  // W's dims when packed, either way
  kernels::Products products_ = kernels::Products::kFp32;  // packed_ holds bf16 or fp16 pairs where the CPU has them
  mutable std::once_flag wide_once_;
  mutable std::vector<PackedMatrix> wide_;
};

// ---- ConvTranspose ------------------------------------------------------------

struct ConvTransposeAttrs {
  SpatialAttrs a;
  std::vector<int64_t> output_padding;
  std::vector<int64_t> output_shape;  // spatial only; empty when absent
};

Status read_convtranspose_attrs(const Node& node, int spatial, const std::vector<int64_t>& kernel_from_w,
                                ConvTransposeAttrs* out) {
  TSR_RETURN_IF_ERROR(read_spatial_attrs(node, spatial, kernel_from_w, false, &out->a));
  const auto r = static_cast<size_t>(spatial);
  out->output_padding = node.attr_ints("output_padding", std::vector<int64_t>(r, 0));
  if (out->output_padding.empty()) out->output_padding.assign(r, 0);
  if (out->output_padding.size() != r) return InvalidModel(node.describe() + ": output_padding has the wrong length");
  std::vector<int64_t> os = node.attr_ints("output_shape");
  if (os.size() == r + 2) os.erase(os.begin(), os.begin() + 2);
  if (!os.empty() && os.size() != r) return InvalidModel(node.describe() + ": output_shape has the wrong length");
  out->output_shape = os;
  return Status::Ok();
}

// Output size and begin pad of one axis; out = -1 when unknown.
void convtranspose_axis(const ConvTransposeAttrs& t, int axis, int64_t in, int64_t* out, int64_t* pad_begin) {
  const auto i = static_cast<size_t>(axis);
  const SpatialAttrs& a = t.a;
  *out = -1;
  *pad_begin = 0;
  if (in < 0 || a.kernel[i] < 0) {
    if (!t.output_shape.empty()) *out = t.output_shape[i];
    return;
  }
  const int64_t s = a.strides[i];
  const int64_t eff = (a.kernel[i] - 1) * a.dilations[i] + 1;
  const int64_t full = s * (in - 1) + t.output_padding[i] + eff;
  const bool same = a.auto_pad == AutoPad::kSameUpper || a.auto_pad == AutoPad::kSameLower;
  if (!t.output_shape.empty() || same) {
    *out = !t.output_shape.empty() ? t.output_shape[i] : in * s;
    const int64_t total = full - *out;
    const int64_t half = floor_div(total, 2);
    *pad_begin = a.auto_pad == AutoPad::kSameUpper ? half : total - half;
    return;
  }
  if (a.auto_pad == AutoPad::kValid) {
    *out = full;
    return;
  }
  *pad_begin = a.pads[i];
  *out = full - a.pads[i] - a.pads[i + static_cast<size_t>(a.rank)];
}

Status infer_convtranspose(InferContext& ctx) {
  const Shape& x = ctx.in_shape(0);
  const Shape& w = ctx.in_shape(1);
  const int rank = conv_rank(x, w);
  if (rank < 0) {
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unranked());
    return Status::Ok();
  }
  if (rank < 3) return ctx.error("input must have rank >= 3, got " + x.str());
  if (x.rank_known && w.rank_known && x.rank() != w.rank()) {
    return ctx.error("X " + x.str() + " and W " + w.str() + " differ in rank");
  }
  const int spatial = rank - 2;
  ConvTransposeAttrs t;
  TSR_RETURN_IF_ERROR(read_convtranspose_attrs(ctx.node(), spatial, weight_kernel(w, spatial), &t));
  const int64_t group = ctx.node().attr_int("group", 1);
  if (group <= 0) return ctx.error("group must be positive");
  if (x.rank_known && w.rank_known && x[1].known() && w[0].known() && x[1].value != w[0].value) {
    return ctx.error("X has " + std::to_string(x[1].value) + " channels but W has " + std::to_string(w[0].value));
  }
  std::vector<Dim> out;
  out.push_back(x.rank_known ? x[0] : Dim());
  out.push_back(w.rank_known && w[1].known() ? Dim(w[1].value * group) : Dim());
  for (int i = 0; i < spatial; ++i) {
    const int64_t in = x.rank_known && x[i + 2].known() ? x[i + 2].value : -1;
    int64_t o, pb;
    convtranspose_axis(t, i, in, &o, &pb);
    if (o < -1 || (o == -1 && in >= 0 && t.a.kernel[static_cast<size_t>(i)] >= 0)) {
      return ctx.error("negative output size");
    }
    out.push_back(o >= 0 ? Dim(o) : Dim());
  }
  ctx.set_output(0, ctx.in_dtype(0), Shape(out));
  return Status::Ok();
}

class ConvTransposeKernel final : public Kernel {
 public:
  static Expected<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    auto k = std::make_unique<ConvTransposeKernel>();
    const Tensor* w = init.const_inputs.size() > 1 ? init.const_inputs[1] : nullptr;
    const int64_t group = init.node.attr_int("group", 1);
    if (w && w->dtype() == DType::kFloat32 && w->rank() >= 3 && group > 0 && w->dim(0) % group == 0) {
      const int64_t cg = w->dim(0) / group;
      const int64_t rows = w->numel() / w->dim(0);  // Mg * kernel size
      for (int64_t g = 0; g < group; ++g) {
        k->packed_.push_back(
            PackedMatrix::PackConstantA(w->data<float>() + g * cg * rows, rows, true, rows, cg, init.products));
      }
      k->packed_dims_ = w->dims();
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }

  Status run(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& w = *ctx.input(1);
    const Tensor* b = ctx.input(2);
    Tensor& y = *ctx.output(0);
    const Node& node = ctx.node();
    if (x.rank() < 3 || w.rank() != x.rank()) return ctx.error("X and W must have the same rank >= 3");
    const int spatial = x.rank() - 2;
    ConvTransposeAttrs t;
    TSR_RETURN_IF_ERROR(read_convtranspose_attrs(node, spatial, Dims(w.dims().begin() + 2, w.dims().end()), &t));
    const int64_t group = node.attr_int("group", 1);
    const int64_t n = x.dim(0), c = x.dim(1);
    if (group <= 0 || w.dim(0) != c || c % group != 0) return ctx.error("channels of X and W do not match");
    const int64_t cg = c / group, mg = w.dim(1), m = mg * group;
    if (b && b->numel() != m) return ctx.error("bias must have one value per output channel");
    Geometry g;  // the forward convolution from Y to X
    for (int i = 0; i < spatial; ++i) {
      const auto si = static_cast<size_t>(i);
      int64_t o, pb;
      convtranspose_axis(t, i, x.dim(i + 2), &o, &pb);
      if (t.a.kernel[si] != w.dim(i + 2)) return ctx.error("kernel_shape does not match W");
      g.in.push_back(o);
      g.out.push_back(x.dim(i + 2));
      g.kernel.push_back(t.a.kernel[si]);
      g.strides.push_back(t.a.strides[si]);
      g.dilations.push_back(t.a.dilations[si]);
      g.pad_begin.push_back(pb);
      g.pad_end.push_back(0);
    }
    Dims yd = {n, m};
    yd.insert(yd.end(), g.in.begin(), g.in.end());
    if (y.dims() != yd) return ctx.error("output is " + dims_str(y.dims()) + ", expected " + dims_str(yd));
    if (y.numel() == 0) return Status::Ok();
    if (x.dtype() == DType::kFloat32) {
      run_float(ctx, g, n, c, m, group, cg, mg, x.data<float>(), w.data<float>(), b ? b->data<float>() : nullptr,
                w.dims() == packed_dims_, y.data<float>());
      return Status::Ok();
    }
    if (!float_convertible(x.dtype())) {
      return Unsupported(node.describe() + ": ConvTranspose on " + dtype_name(x.dtype()));
    }
    Tensor xf = to_float32(x), wf = to_float32(w), yf(DType::kFloat32, y.dims()), bf;
    if (b) bf = to_float32(*b);
    run_float(ctx, g, n, c, m, group, cg, mg, xf.data<float>(), wf.data<float>(), b ? bf.data<float>() : nullptr,
              false, yf.data<float>());
    assign_from_float32(yf, &y);
    return Status::Ok();
  }

 private:
  void run_float(KernelContext& ctx, const Geometry& g, int64_t n, int64_t c, int64_t m, int64_t group, int64_t cg,
                 int64_t mg, const float* x, const float* w, const float* bias, bool use_packed, float* y) const {
    const int64_t xsz = g.out_size();  // input plane
    const int64_t ysz = g.in_size();   // output plane
    const int64_t ksz = g.kernel_size();
    const int64_t rows = mg * ksz;
    Parallel& pool = ctx.pool();
    if (convtranspose_tiles(g) && g.in.size() == 2) {
      run_tiles(pool, g, n, c, m, group, cg, mg, x, w, bias, use_packed, y);
      return;
    }
    // Fully written by the GEMM: no need to zero it.
    std::unique_ptr<float[]> col(new float[static_cast<size_t>(rows * xsz)]);
    for (int64_t in = 0; in < n; ++in) {
      for (int64_t gi = 0; gi < group; ++gi) {
        GemmA ga{w + gi * cg * rows, rows, true, nullptr};
        if (use_packed) ga = GemmA{nullptr, 0, false, &packed_[static_cast<size_t>(gi)]};
        GemmB gb{x + (in * c + gi * cg) * xsz, xsz, false, nullptr, nullptr};
        kernels::gemm(&pool, rows, xsz, cg, 1.f, ga, gb, 0.f, col.get(), xsz);
        float* yg = y + (in * m + gi * mg) * ysz;
        pool.parallel_for(mg, 1, [&](int64_t begin, int64_t end) {
          col2im(col.get() + begin * ksz * xsz, end - begin, g, bias ? bias + gi * mg + begin : nullptr,
                 yg + begin * ysz);
        });
      }
    }
  }

  // Windows that tile the output: each thread multiplies a few input rows at a time into a column block that stays
  // in its cache and scatters it at once (the whole column matrix, written and read back, cost more than the product
  // on U-Net's upsamplings).
  void run_tiles(Parallel& pool, const Geometry& g, int64_t n, int64_t c, int64_t m, int64_t group, int64_t cg,
                 int64_t mg, const float* x, const float* w, const float* bias, bool use_packed, float* y) const {
    const int64_t ih = g.out[0], iw = g.out[1], xsz = ih * iw, ysz = g.in_size();
    const int64_t rows = mg * g.kernel_size();
    constexpr int64_t kBlockFloats = int64_t{64} << 10;  // 256 KiB of columns per block
    int64_t per = std::clamp<int64_t>(kBlockFloats / std::max<int64_t>(rows * iw, 1), 1, ih);
    const int64_t threads = std::max(pool.num_threads(), 1);
    if (n * group * ((ih + per - 1) / per) < threads) per = std::max<int64_t>(1, ih * n * group / threads);
    const int64_t chunks = (ih + per - 1) / per;
    pool.parallel_for(n * group * chunks, 1, [&](int64_t t0, int64_t t1) {
      thread_local std::vector<float> block;
      block.resize(static_cast<size_t>(rows * per * iw));
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t in = t / (group * chunks), gi = t / chunks % group, i0 = t % chunks * per;
        const int64_t i1 = std::min(ih, i0 + per);
        GemmA ga{w + gi * cg * rows, rows, true, nullptr};
        if (use_packed) ga = GemmA{nullptr, 0, false, &packed_[static_cast<size_t>(gi)]};
        GemmB gb{x + (in * c + gi * cg) * xsz + i0 * iw, xsz, false, nullptr, nullptr};
        kernels::gemm(nullptr, rows, (i1 - i0) * iw, cg, 1.f, ga, gb, 0.f, block.data(), (i1 - i0) * iw);
        col2im_tiles(block.data(), mg, g, i0, i1, bias ? bias + gi * mg : nullptr, y + (in * m + gi * mg) * ysz);
      }
    });
  }

  std::vector<PackedMatrix> packed_;  // per group: W_g^T, when W is a constant float32 tensor
  Dims packed_dims_;
};

}  // namespace

// ---- Col2Im (opset 18) -----------------------------------------------------------
// input [N, C * prod(block), L] holds, per channel and block position, the L blocks of image_shape (the layout
// im2col makes); the blocks are summed back into [N, C, image_shape...] with strides, dilations and pads as a
// convolution's.

namespace {

Status infer_col2im(InferContext& ctx) {
  if (ctx.in_dtype(0) != DType::kFloat32 && ctx.in_dtype(0) != DType::kUndefined) {
    return ctx.error(std::string("input has dtype ") + dtype_name(ctx.in_dtype(0)) + "; supported: float32");
  }
  const Shape& x = ctx.in_shape(0);
  std::vector<int64_t> image, block;
  if (x.rank_known && x.rank() != 3) return ctx.error("input must have rank 3, got " + x.str());
  if (!known_ints(ctx, 1, &image) || !known_ints(ctx, 2, &block) || !x.rank_known) {
    ctx.set_output(0, DType::kFloat32, Shape::Unranked());
    return Status::Ok();
  }
  if (image.size() != block.size() || image.empty()) return ctx.error("image_shape and block_shape differ in length");
  int64_t k = 1;
  for (int64_t b : block) {
    if (b <= 0) return ctx.error("block_shape must be positive");
    k *= b;
  }
  std::vector<Dim> out = {x[0], Dim()};
  if (x[1].known()) {
    if (x[1].value % k != 0) return ctx.error("input dim 1 is not a multiple of the block size");
    out[1] = Dim(x[1].value / k);
  }
  for (int64_t d : image) out.push_back(Dim(d));
  ctx.set_output(0, DType::kFloat32, Shape(std::move(out)));
  return Status::Ok();
}

Status run_col2im(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  Tensor* y = ctx.output(0);
  const std::vector<int64_t> image = input_ints(ctx, 1), block = input_ints(ctx, 2);
  SpatialAttrs a;
  TSR_RETURN_IF_ERROR(read_spatial_attrs(ctx.node(), static_cast<int>(image.size()), block, false, &a));
  Geometry g;
  TSR_ASSIGN_OR_RETURN(g, conv_geometry(Dims(image.begin(), image.end()), a, ctx.node().describe()));
  const int64_t n = x->dim(0), ck = x->dim(1), l = x->dim(2), k = g.kernel_size();
  if (l != g.out_size()) {
    return ctx.error("input has " + std::to_string(l) + " blocks, the geometry gives " + std::to_string(g.out_size()));
  }
  const int64_t c = ck / k, plane = g.in_size();
  for (int64_t i = 0; i < n; ++i)
    col2im(x->data<float>() + i * ck * l, c, g, nullptr, y->data<float>() + i * c * plane);
  return Status::Ok();
}

}  // namespace

TSR_REGISTER_OPS(conv) {
  reg.add(OpSchema{"Conv", "", infer_conv, ConvKernel::Create, nullptr, {}});
  reg.add(OpSchema{"FusedConv", "com.microsoft", infer_conv, ConvKernel::Create, nullptr, {}});
  reg.add(OpSchema{"FusedConvMaxPool", "ai.tessera", infer_conv_max_pool, ConvKernel::Create, nullptr, {}});
  reg.add(OpSchema{"ConvTranspose", "", infer_convtranspose, ConvTransposeKernel::Create, nullptr, {}});
  reg.add(OpSchema{"Col2Im", "", infer_col2im, nullptr, run_col2im, {1, 2}});
}

}  // namespace tessera
