// ConvInteger and QLinearConv: N-D convolution (groups, strides, dilations,
// pads, auto_pad) over 8-bit X and W on the integer GEMM of quantize_gemm.h.
//
// Each (image, group) is one GEMM, Y[oc, p] = sum_k (W[oc, k] - wz[oc]) *
// (col[k, p] - xz), where k runs over (input channel, kernel offset) and p
// over output positions. The weights are packed once at kernel creation when
// they and their zero points are constant; QIm2col writes the column matrix
// straight into the GEMM's packed B panels, with padding contributing zero
// (the padded value is the zero point). A pointwise convolution reads the
// input planes as a plain matrix; a 1-D/2-D depthwise convolution (one input
// channel per group) is computed directly, plane by plane.
// QLinearConv adds the int32 bias and requantizes each output channel with
//   y = saturate(round_half_even((acc + B[oc]) * (x_scale * w_scale[oc] / y_scale)) + y_zp).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "ops/conv_util.h"
#include "ops/quantize_gemm.h"
#include "ops/quantize_ops.h"
#include "util/cpu_isa.h"
#include "util/parallel.h"

namespace tessera::quant {

namespace {

using qgemm::Int8Ref;
using qgemm::kQNR;
using qgemm::QPackedA;
using qgemm::ZeroPoints;

// (image, group) GEMMs smaller than this run one per thread.
constexpr double kSmallGemmOps = 4.0e6;

// ---- Inference ----------------------------------------------------------------

Status infer_qconv(InferContext& ctx, int x_index, int w_index, DType out_dtype) {
  return infer_conv_output(ctx, x_index, w_index, out_dtype);
}

Status infer_conv_integer(InferContext& ctx) { return infer_qconv(ctx, 0, 1, DType::kInt32); }

Status infer_qlinear_conv(InferContext& ctx) {
  const DType out = ctx.in_dtype(7) == DType::kUndefined ? DType::kUInt8 : ctx.in_dtype(7);
  return infer_qconv(ctx, 0, 3, out);
}

// ---- Geometry -------------------------------------------------------------------

bool is_pointwise_geometry(const Geometry& g) {
  for (size_t i = 0; i < g.in.size(); ++i) {
    if (g.kernel[i] != 1 || g.strides[i] != 1 || g.pad_begin[i] != 0 || g.pad_end[i] != 0) return false;
  }
  return true;
}

// ---- Padded rows in stride phases ------------------------------------------------

// Writes one input row s[0, iw), padded by pw columns on the left, as sw
// phases of phase_width entries: phase p holds padded columns p, p + sw,
// p + 2 sw, ... (input column i * sw + p - pw), enc(value) for input and
// `pad` elsewhere. A window with column stride sw then reads each tap from
// one contiguous run of a phase. kStride: as with_stride gives it.
template <int kStride, class E, class T, class Enc>
void write_phases(const T* s, int64_t iw, int64_t pw, int64_t stride, int64_t phase_width, E pad, Enc enc, E* dst) {
  const int64_t sw = kStride > 0 ? kStride : stride;
  for (int64_t p = 0; p < sw; ++p) {
    E* d = dst + p * phase_width;
    // Entries i with 0 <= i * sw + p - pw < iw hold the input; the rest are padding.
    const int64_t lo = std::min(phase_width, std::max<int64_t>(0, (pw - p + sw - 1) / sw));
    const int64_t hi = std::max(lo, std::min(phase_width, (iw + pw - p + sw - 1) / sw));
    std::fill(d, d + lo, pad);
    const T* src = s + lo * sw + p - pw;
    for (int64_t i = lo; i < hi; ++i) d[i] = enc(src[(i - lo) * sw]);
    std::fill(d + hi, d + phase_width, pad);
  }
}

// fn(std::integral_constant<int, K>) with K = sw where it is 1 or 2, else 0: the kStride of the loops above and
// below, fixed at compile time for the common strides.
template <class Fn>
void with_stride(int64_t sw, Fn&& fn) {
  if (sw == 1) {
    fn(std::integral_constant<int, 1>{});
  } else if (sw == 2) {
    fn(std::integral_constant<int, 2>{});
  } else {
    fn(std::integral_constant<int, 0>{});
  }
}

// ---- im2col into packed panels --------------------------------------------------

// The column matrix of one (image, group), written into the GEMM's packed
// panels. For 1-D/2-D convolutions the group's input planes are first copied,
// encoded for the panel layout (E = int16_t: x - zp; E = uint8_t: x - cb,
// quantize_gemm.h), into planes padded on every side far enough for every
// window with the encoded zero point (so padding contributes zero), so each
// row of the column matrix is a run of plain copies; N-D convolutions read
// the input with bounds checks.
template <class E>
class QIm2col final : public qgemm::QBSource {
 public:
  // `x` points at the first of `channels` input planes of one image/group.
  // The padded copy lives in thread-local storage of the constructing thread
  // until the next QIm2col is made there.
  QIm2col(Int8Ref x, int64_t channels, const Geometry& g, int32_t zp)
      : x_(x), channels_(channels), g_(g), ksize_(g.kernel_size()), isz_(g.in_size()) {
    if constexpr (std::is_same_v<E, uint8_t>) {
      offset_ = x.is_signed ? -128 : 0;
      ob_ = offset_ - zp;
    } else {
      offset_ = zp;
    }
    pad_ = static_cast<E>(zp - offset_);
    const size_t r = g.in.size();
    if (r > 2) return;
    ih_ = r == 2 ? g.in[0] : 1;
    iw_ = g.in[r - 1];
    oh_ = r == 2 ? g.out[0] : 1;
    ow_ = g.out[r - 1];
    kh_ = r == 2 ? g.kernel[0] : 1;
    kw_ = g.kernel[r - 1];
    sh_ = r == 2 ? g.strides[0] : 1;
    sw_ = g.strides[r - 1];
    dh_ = r == 2 ? g.dilations[0] : 1;
    dw_ = g.dilations[r - 1];
    const int64_t ph = r == 2 ? g.pad_begin[0] : 0, pw = g.pad_begin[r - 1];
    ph_rows_ = std::max(ph + ih_, (oh_ - 1) * sh_ + (kh_ - 1) * dh_ + 1);
    const int64_t pw_cols = std::max(pw + iw_, (ow_ - 1) * sw_ + (kw_ - 1) * dw_ + 1);
    phase_width_ = (pw_cols + sw_ - 1) / sw_;
    row_len_ = sw_ * phase_width_;
    const int64_t plane = ph_rows_ * row_len_;
    thread_local std::vector<E> storage;
    if (storage.size() < static_cast<size_t>(channels * plane)) storage.resize(static_cast<size_t>(channels * plane));
    padded_ = storage.data();
    const auto enc = [this](auto v) { return static_cast<E>(static_cast<int32_t>(v) - offset_); };
    for (int64_t c = 0; c < channels; ++c) {
      E* dst = padded_ + c * plane;
      std::fill(dst, dst + ph * row_len_, pad_);
      for (int64_t y = 0; y < ih_; ++y) {
        E* d = dst + (ph + y) * row_len_;
        const int64_t src = c * isz_ + y * iw_;
        with_stride(sw_, [&](auto stride) {
          constexpr int kStride = decltype(stride)::value;
          if (x.is_signed) {
            write_phases<kStride>(static_cast<const int8_t*>(x.data) + src, iw_, pw, sw_, phase_width_, pad_, enc, d);
          } else {
            write_phases<kStride>(static_cast<const uint8_t*>(x.data) + src, iw_, pw, sw_, phase_width_, pad_, enc, d);
          }
        });
      }
      std::fill(dst + (ph + ih_) * row_len_, dst + plane, pad_);
    }
  }

  void pack(int64_t n0, int64_t nc, uint8_t* dst) const override {
    qgemm::pack_b_rows<E>(channels_ * ksize_, nc, ZeroPoints{&ob_, 0}, dst,
                          [&](int64_t kk, E* row) { fill_row(kk, n0, nc, row); });
  }

 private:
  // Row kk of the column matrix, columns [n0, n0 + nc): the encoded input,
  // the encoded zero point where the window reads padding.
  void fill_row(int64_t kk, int64_t n0, int64_t nc, E* row) const {
    if (!padded_) {
      if (x_.is_signed) {
        fill_row_nd(static_cast<const int8_t*>(x_.data), kk, n0, nc, row);
      } else {
        fill_row_nd(static_cast<const uint8_t*>(x_.data), kk, n0, nc, row);
      }
      return;
    }
    const int64_t c = kk / ksize_, rem = kk % ksize_, ky = rem / kw_, kx = rem % kw_;
    const int64_t off = kx * dw_;  // the tap's padded column at output column 0: phase off % sw, entry off / sw
    const E* plane = padded_ + c * ph_rows_ * row_len_ + ky * dh_ * row_len_ + (off % sw_) * phase_width_ + off / sw_;
    int64_t j = 0, oy = n0 / ow_, ox = n0 % ow_;
    while (j < nc) {
      const int64_t run = std::min(nc - j, ow_ - ox);
      std::memcpy(row + j, plane + oy * sh_ * row_len_ + ox, sizeof(E) * static_cast<size_t>(run));
      j += run;
      ox = 0;
      ++oy;
    }
  }

  template <class T>
  void fill_row_nd(const T* x, int64_t kk, int64_t n0, int64_t nc, E* row) const {
    const size_t r = g_.in.size();
    const T* plane = x + kk / ksize_ * isz_;
    int64_t rem = kk % ksize_;
    std::vector<int64_t> ko(r), oidx(r);
    for (size_t i = r; i-- > 0;) {
      ko[i] = rem % g_.kernel[i] * g_.dilations[i] - g_.pad_begin[i];
      rem /= g_.kernel[i];
    }
    for (int64_t j = 0; j < nc; ++j) {
      int64_t p = n0 + j, off = 0;
      bool inside = true;
      for (size_t i = r; i-- > 0;) {
        oidx[i] = p % g_.out[i];
        p /= g_.out[i];
      }
      for (size_t i = 0; i < r && inside; ++i) {
        const int64_t pos = oidx[i] * g_.strides[i] + ko[i];
        inside = pos >= 0 && pos < g_.in[i];
        off = off * g_.in[i] + pos;
      }
      row[j] = inside ? static_cast<E>(static_cast<int32_t>(plane[off]) - offset_) : pad_;
    }
  }

  Int8Ref x_;
  int64_t channels_;
  const Geometry& g_;
  int64_t ksize_, isz_;
  int32_t offset_ = 0;  // what encoding subtracts: zp (int16_t) or cb (uint8_t)
  int32_t ob_ = 0;      // uint8_t: cb - zp, the column offset of the kQuads layout
  E pad_{};             // the encoded zero point
  // 1-D/2-D: the padded planes, rows in stride phases (write_phases), and their geometry (1-D has a height of 1).
  E* padded_ = nullptr;
  int64_t ih_ = 1, iw_ = 1, oh_ = 1, ow_ = 1, kh_ = 1, kw_ = 1, sh_ = 1, sw_ = 1, dh_ = 1, dw_ = 1;
  int64_t ph_rows_ = 0, phase_width_ = 0, row_len_ = 0;
};

// ---- Depthwise ----------------------------------------------------------------------

// One output plane of a 1-D/2-D convolution with a single input channel:
// y[o] = sum over the window of (w - wz) * (x - xz), skipping padding.
//
// The input plane is first copied, minus its zero point, into an int16 plane
// whose columns are padded with zeros on both sides, so that every tap of a
// block of kDwBlock outputs reads in bounds and padding contributes nothing.
// Each padded row is stored in stride phases (write_phases), so that the
// outputs of a block read each tap from one contiguous run whatever the
// stride, and the block's accumulators stay in registers across all taps.
constexpr int kDwBlock = 16;

// Tap weights as int16 pairs for vpmaddwd: (w, 0) picks the even int16 of
// each 32-bit lane, (0, w) the odd one, so each multiply-add yields exact
// int32 products (|x|, |w| <= 255) of every other output.
struct TapPair {
  __m256i even, odd;
};

template <int kStride>
void depthwise_rows(const int16_t* xp, int64_t phase_width, const TapPair* taps, const Geometry& g, int32_t* y) {
  const size_t r = g.in.size();
  const int64_t ih = r == 2 ? g.in[0] : 1;
  const int64_t oh = r == 2 ? g.out[0] : 1, ow = g.out[r - 1];
  const int64_t kh = r == 2 ? g.kernel[0] : 1, kw = g.kernel[r - 1];
  const int64_t sh = r == 2 ? g.strides[0] : 1, sw = kStride > 0 ? kStride : g.strides[r - 1];
  const int64_t dh = r == 2 ? g.dilations[0] : 1, dw = g.dilations[r - 1];
  const int64_t ph = r == 2 ? g.pad_begin[0] : 0;
  const int64_t row_len = sw * phase_width;
  for (int64_t oy = 0; oy < oh; ++oy) {
    for (int64_t o0 = 0; o0 < ow; o0 += kDwBlock) {
      static_assert(kDwBlock == 16, "one block is 16 int16 outputs in a 256-bit register");
      __m256i even = _mm256_setzero_si256(), odd = _mm256_setzero_si256();
      for (int64_t ky = 0; ky < kh; ++ky) {
        const int64_t iy = oy * sh + ky * dh - ph;
        if (iy < 0 || iy >= ih) continue;
        const int16_t* row = xp + iy * row_len + o0;
        for (int64_t kx = 0; kx < kw; ++kx) {
          const TapPair& t = taps[ky * kw + kx];
          const int64_t off = kx * dw;
          const __m256i v =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + (off % sw) * phase_width + off / sw));
          even = _mm256_add_epi32(even, _mm256_madd_epi16(v, t.even));
          odd = _mm256_add_epi32(odd, _mm256_madd_epi16(v, t.odd));
        }
      }
      // even[i] is output 2i and odd[i] output 2i + 1; interleave them back (unpack works per 128-bit half).
      const __m256i lo = _mm256_unpacklo_epi32(even, odd), hi = _mm256_unpackhi_epi32(even, odd);
      alignas(32) int32_t acc[kDwBlock];
      _mm256_store_si256(reinterpret_cast<__m256i*>(acc), _mm256_permute2x128_si256(lo, hi, 0x20));
      _mm256_store_si256(reinterpret_cast<__m256i*>(acc + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
      const int64_t n = std::min<int64_t>(kDwBlock, ow - o0);
      std::copy(acc, acc + n, y + oy * ow + o0);
    }
  }
}

void depthwise_plane(Int8Ref x, Int8Ref w, int32_t xz, int32_t wz, const Geometry& g, int32_t* y) {
  const size_t r = g.in.size();
  const int64_t ih = r == 2 ? g.in[0] : 1, iw = g.in[r - 1];
  const int64_t ow = g.out[r - 1];
  const int64_t kh = r == 2 ? g.kernel[0] : 1, kw = g.kernel[r - 1];
  const int64_t sw = g.strides[r - 1], dw = g.dilations[r - 1], pw = g.pad_begin[r - 1];
  const int64_t blocks = (ow + kDwBlock - 1) / kDwBlock;
  const int64_t width = std::max(pw + iw, (blocks * kDwBlock - 1) * sw + (kw - 1) * dw + 1);
  const int64_t phase_width = (width + sw - 1) / sw;
  thread_local std::vector<int16_t> padded;
  const auto need = static_cast<size_t>(ih * sw * phase_width);
  if (padded.size() < need) padded.resize(need);

  TapPair taps_small[16];
  std::vector<TapPair> taps_big;
  TapPair* taps = taps_small;
  if (kh * kw > 16) {
    taps_big.resize(static_cast<size_t>(kh * kw));
    taps = taps_big.data();
  }
  for (int64_t i = 0; i < kh * kw; ++i) {
    const auto wk = static_cast<uint32_t>(static_cast<uint16_t>(static_cast<int16_t>(w.at(i) - wz)));
    taps[i] = {_mm256_set1_epi32(static_cast<int32_t>(wk)), _mm256_set1_epi32(static_cast<int32_t>(wk << 16))};
  }
  with_stride(sw, [&](auto stride) {
    constexpr int kStride = decltype(stride)::value;
    const auto enc = [xz](auto v) { return static_cast<int16_t>(static_cast<int32_t>(v) - xz); };
    for (int64_t r = 0; r < ih; ++r) {
      int16_t* d = padded.data() + r * sw * phase_width;
      if (x.is_signed) {
        write_phases<kStride>(static_cast<const int8_t*>(x.data) + r * iw, iw, pw, sw, phase_width, int16_t{0}, enc, d);
      } else {
        write_phases<kStride>(static_cast<const uint8_t*>(x.data) + r * iw, iw, pw, sw, phase_width, int16_t{0}, enc,
                              d);
      }
    }
    depthwise_rows<kStride>(padded.data(), phase_width, taps, g, y);
  });
}

// ---- Kernel -----------------------------------------------------------------------

// One input channel per group, 1-D or 2-D: computed directly, since a GEMM
// with a single row per group would waste most of its register tile.
bool is_depthwise(const ConvSetup& s) { return s.cg == 1 && s.g.in.size() <= 2; }

struct ConvOperands {
  const Tensor& x;
  int32_t x_zp;
  const Tensor& w;
  const std::vector<int32_t>& w_zp;        // one per output channel
  const std::vector<QPackedA>* packed;     // per group; null on the depthwise path
};

// QLinearConv's requantization of output plane `plane` (image * M + channel).
struct Requant {
  std::vector<float> scales;      // x_scale * w_scale[oc] / y_scale
  const int32_t* bias = nullptr;  // M values, or null
  int64_t m = 0, osz = 0;
  int32_t y_zp = 0;
  Tensor* y = nullptr;

  // Positions [j0, j0 + n) of output plane `plane` from int32 `acc`.
  void row(int64_t plane, int64_t j0, int64_t n, const int32_t* acc) const {
    const int64_t oc = plane % m;
    const int32_t b = bias ? bias[oc] : 0;
    const float* sc = &scales[static_cast<size_t>(oc)];
    const int64_t out = plane * osz + j0;
    if (y->dtype() == DType::kUInt8) {
      qgemm::requantize<uint8_t>(acc, n, b, sc, 0, y_zp, y->data<uint8_t>() + out);
    } else {
      qgemm::requantize<int8_t>(acc, n, b, sc, 0, y_zp, y->data<int8_t>() + out);
    }
  }
};

// Requantizes finished GEMM blocks of one (image, group): GEMM row i is
// output plane first_plane + i.
class RequantSink final : public qgemm::QTileSink {
 public:
  RequantSink(const Requant& q, int64_t first_plane) : q_(q), first_plane_(first_plane) {}
  void consume(int64_t i0, int64_t mi, int64_t j0, int64_t nj, const int32_t* c, int64_t ldc) const override {
    for (int64_t i = 0; i < mi; ++i) q_.row(first_plane_ + i0 + i, j0, nj, c + i * ldc);
  }

 private:
  const Requant& q_;
  int64_t first_plane_;
};

// Inputs of the two ops by role.
struct Roles {
  int x, xz, w, wz;
};
constexpr Roles kConvIntegerRoles{0, 2, 1, 3};
constexpr Roles kQLinearConvRoles{0, 2, 3, 5};

// Per-output-channel weight zero points (M values) from a scalar or 1-D tensor.
Expected<std::vector<int32_t>> weight_zero_points(const Node& node, const Tensor* wz, int64_t m) {
  std::vector<int32_t> v = int_values(wz);
  if (v.empty()) return std::vector<int32_t>(static_cast<size_t>(m), 0);
  if (v.size() == 1) return std::vector<int32_t>(static_cast<size_t>(m), v[0]);
  if (static_cast<int64_t>(v.size()) != m) {
    return InvalidInput(node.describe() + ": w_zero_point has " + std::to_string(v.size()) + " values for " +
                        std::to_string(m) + " output channels");
  }
  return v;
}

// Packs W (M x cg x kernel) per group, with its zero points subtracted.
std::vector<QPackedA> pack_weights(const Tensor& w, const std::vector<int32_t>& wz, int64_t group) {
  std::vector<QPackedA> out;
  const int64_t m = w.dim(0), mg = m / group, k = w.numel() / std::max<int64_t>(m, 1);
  const Int8Ref wr = qgemm::int8_ref(w);
  for (int64_t g = 0; g < group; ++g) {
    const Int8Ref r{static_cast<const int8_t*>(wr.data) + g * mg * k, wr.is_signed};
    out.push_back(QPackedA::Pack(r, k, mg, k, ZeroPoints{wz.data() + g * mg, 1}));
  }
  return out;
}

class QConvKernel final : public Kernel {
 public:
  static Expected<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    auto k = std::make_unique<QConvKernel>();
    k->qlinear_ = init.node.op_type == "QLinearConv";
    k->roles_ = k->qlinear_ ? kQLinearConvRoles : kConvIntegerRoles;
    const auto in = [&](int i) -> const Tensor* {
      return i < static_cast<int>(init.const_inputs.size()) ? init.const_inputs[static_cast<size_t>(i)] : nullptr;
    };
    const Tensor* w = in(k->roles_.w);
    const bool wz_present = init.node.has_input(k->roles_.wz);
    const Tensor* wz = in(k->roles_.wz);
    const int64_t group = init.node.attr_int("group", 1);
    const bool depthwise = w && w->rank() <= 4 && w->dim(1) == 1;
    if (w && !depthwise && is_8bit(w->dtype()) && w->rank() >= 3 && group > 0 && w->dim(0) % group == 0 &&
        (!wz_present || (wz && wz->dtype() == w->dtype()))) {
      auto zps = weight_zero_points(init.node, wz_present ? wz : nullptr, w->dim(0));
      if (zps.ok()) {
        k->packed_ = pack_weights(*w, zps.value(), group);
        k->packed_dims_ = w->dims();
      }
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }

  Status run(KernelContext& ctx) const override {
    TSR_RETURN_IF_ERROR(check_8bit_input(ctx, roles_.x, "X"));
    TSR_RETURN_IF_ERROR(check_8bit_input(ctx, roles_.w, "W"));
    const Tensor& x = *ctx.input(roles_.x);
    const Tensor& w = *ctx.input(roles_.w);
    const Tensor* xz = ctx.input(roles_.xz);
    const Tensor* wz = ctx.input(roles_.wz);
    if (xz && xz->defined() && xz->dtype() != x.dtype()) return ctx.error("X and its zero point differ in type");
    if (wz && wz->defined() && wz->dtype() != w.dtype()) return ctx.error("W and its zero point differ in type");
    TSR_ASSIGN_OR_RETURN(ConvSetup s, conv_setup(ctx.node(), x.dims(), w.dims()));
    const std::vector<int32_t> xzv = int_values(xz);
    if (xzv.size() > 1) return ctx.error("x_zero_point must be a scalar");
    const int32_t x_zp = xzv.empty() ? 0 : xzv[0];
    TSR_ASSIGN_OR_RETURN(std::vector<int32_t> wzv, weight_zero_points(ctx.node(), wz, s.m));
    Tensor& y = *ctx.output(0);
    if (y.numel() == 0) return Status::Ok();

    ConvOperands ops{x, x_zp, w, wzv, nullptr};
    std::vector<QPackedA> local;
    if (!is_depthwise(s)) {
      ops.packed = &packed_;
      if (packed_dims_.empty() || w.dims() != packed_dims_) {
        local = pack_weights(w, wzv, s.group);
        ops.packed = &local;
      }
    }
    if (!qlinear_) {
      conv_int32(ctx, s, ops, y.data<int32_t>(), nullptr);
      return Status::Ok();
    }
    return run_qlinear(ctx, s, ops, y);
  }

 private:
  // Computes every (image, group) into int32 `y` (N x M x out positions) or,
  // with `q`, requantizes each block into q->y as it is finished.
  void conv_int32(KernelContext& ctx, const ConvSetup& s, const ConvOperands& ops, int32_t* y,
                  const Requant* q) const {
    const int64_t isz = s.g.in_size(), osz = s.g.out_size();
    const Int8Ref xr = qgemm::int8_ref(ops.x);
    const int32_t zp_value = ops.x_zp;
    if (is_depthwise(s)) {
      const Int8Ref wr = qgemm::int8_ref(ops.w);
      const int64_t ksize = s.g.kernel_size();
      ctx.pool().parallel_for(s.n * s.m, 1, [&](int64_t begin, int64_t end) {
        thread_local std::vector<int32_t> plane;
        if (q && plane.size() < static_cast<size_t>(osz)) plane.resize(static_cast<size_t>(osz));
        for (int64_t t = begin; t < end; ++t) {
          const int64_t n = t / s.m, oc = t % s.m, c = oc / s.mg;
          const Int8Ref xc{static_cast<const int8_t*>(xr.data) + (n * s.c + c) * isz, xr.is_signed};
          const Int8Ref wc{static_cast<const int8_t*>(wr.data) + oc * ksize, wr.is_signed};
          int32_t* out = q ? plane.data() : y + t * osz;
          depthwise_plane(xc, wc, zp_value, ops.w_zp[static_cast<size_t>(oc)], s.g, out);
          if (q) q->row(t, 0, osz, out);
        }
      });
      return;
    }
    const bool pointwise = is_pointwise_geometry(s.g);
    auto one = [&](int64_t t, Parallel* pool) {
      const int64_t n = t / s.group, g = t % s.group;
      const Int8Ref xg{static_cast<const int8_t*>(xr.data) + (n * s.c + g * s.cg) * isz, xr.is_signed};
      const QPackedA& a = (*ops.packed)[static_cast<size_t>(g)];
      const int64_t first_row = n * s.m + g * s.mg;  // output plane of the group's first channel
      auto gemm = [&](const qgemm::QBSource& src) {
        if (q) {
          qgemm::qgemm(pool, a, src, osz, RequantSink(*q, first_row));
        } else {
          qgemm::qgemm(pool, a, src, osz, y + first_row * osz, osz);
        }
      };
      if (pointwise) {
        gemm(qgemm::QMatrixB(xg, isz, s.cg, osz, ZeroPoints{&zp_value, 0}));
      } else {
        if (qgemm::layout() == qgemm::Layout::kQuads) {
          gemm(QIm2col<uint8_t>(xg, s.cg, s.g, zp_value));
        } else {
          gemm(QIm2col<int16_t>(xg, s.cg, s.g, zp_value));
        }
      }
    };
    const int64_t items = s.n * s.group;
    const double flops = 2.0 * static_cast<double>(s.mg * osz) * static_cast<double>(s.cg * s.g.kernel_size());
    if (items > 1 && flops < kSmallGemmOps) {
      ctx.pool().parallel_for(items, 1, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) one(t, nullptr);
      });
      return;
    }
    for (int64_t t = 0; t < items; ++t) one(t, &ctx.pool());
  }

  Status run_qlinear(KernelContext& ctx, const ConvSetup& s, const ConvOperands& ops, Tensor& y) const {
    for (int i : {1, 4, 6}) {
      const Tensor* t = ctx.input(i);
      if (!t || !dtype_is_float(t->dtype())) return ctx.error("scales must be float tensors");
    }
    TSR_RETURN_IF_ERROR(check_8bit_input(ctx, 7, "y_zero_point"));
    if (ctx.input(7)->dtype() != y.dtype()) return ctx.error("y and its zero point differ in type");
    const std::vector<float> xs = float_values(*ctx.input(1));
    const std::vector<float> ws = float_values(*ctx.input(4));
    const std::vector<float> ys = float_values(*ctx.input(6));
    const std::vector<int32_t> yz = int_values(ctx.input(7));
    if (xs.size() != 1 || ys.size() != 1 || yz.size() != 1) {
      return ctx.error("x_scale, y_scale and y_zero_point must hold one value");
    }
    if (ws.size() != 1 && static_cast<int64_t>(ws.size()) != s.m) {
      return ctx.error("w_scale has " + std::to_string(ws.size()) + " values for " + std::to_string(s.m) +
                       " output channels");
    }
    const Tensor* bias = ctx.input(8);
    if (bias && !bias->defined()) bias = nullptr;
    if (bias && (bias->dtype() != DType::kInt32 || bias->numel() != s.m)) {
      return ctx.error("B must be int32 with one value per output channel");
    }
    Requant q;
    q.scales.resize(static_cast<size_t>(s.m));
    for (int64_t oc = 0; oc < s.m; ++oc) {
      q.scales[static_cast<size_t>(oc)] = xs[0] * ws[ws.size() == 1 ? 0 : static_cast<size_t>(oc)] / ys[0];
    }
    q.bias = bias ? bias->data<int32_t>() : nullptr;
    q.m = s.m;
    q.osz = s.g.out_size();
    q.y_zp = yz[0];
    q.y = &y;
    conv_int32(ctx, s, ops, nullptr, &q);
    return Status::Ok();
  }

  bool qlinear_ = false;
  Roles roles_ = kConvIntegerRoles;
  std::vector<QPackedA> packed_;
  Dims packed_dims_;  // dims of the constant W, empty when not packed
};

}  // namespace

OpSchema qlinear_conv_schema() {
  return OpSchema{"QLinearConv", "", infer_qlinear_conv, QConvKernel::Create, nullptr, {}};
}

OpSchema conv_integer_schema() {
  return OpSchema{"ConvInteger", "", infer_conv_integer, QConvKernel::Create, nullptr, {}};
}

}  // namespace tessera::quant
