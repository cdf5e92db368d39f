#include "ops/conv_im2col.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace tessera {

namespace {

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Output positions o in [0, out) whose input index o*s + off falls in
// [0, in): returns [lo, hi).
void valid_range(int64_t off, int64_t s, int64_t in, int64_t out, int64_t* lo, int64_t* hi) {
  // o*s + off >= 0  <=>  o >= ceil(-off / s)
  int64_t l = off >= 0 ? 0 : (-off + s - 1) / s;
  // o*s + off <= in - 1  <=>  o <= floor((in - 1 - off) / s)
  int64_t h = in - 1 - off < 0 ? 0 : floor_div(in - 1 - off, s) + 1;
  *lo = std::min(std::max<int64_t>(l, 0), out);
  *hi = std::max(std::min(h, out), *lo);
}

}  // namespace

bool is_pointwise(const Geometry& g) {
  for (size_t i = 0; i < g.kernel.size(); ++i) {
    if (g.kernel[i] != 1 || g.strides[i] != 1 || g.pad_begin[i] != 0 || g.pad_end[i] != 0) return false;
  }
  return true;
}

Im2colSource::Im2colSource(const float* x, int64_t channels, const Geometry& g)
    : x_(x), channels_(channels), g_(g), is_2d_(g.in.size() <= 2) {
  if (is_2d_) {
    const bool one = g.in.size() == 1;
    auto at = [&](const std::vector<int64_t>& v, int axis, int64_t def) {
      return one ? (axis == 0 ? def : v[0]) : v[static_cast<size_t>(axis)];
    };
    ih_ = at(g.in, 0, 1);
    iw_ = at(g.in, 1, 1);
    oh_ = at(g.out, 0, 1);
    ow_ = at(g.out, 1, 1);
    kh_ = at(g.kernel, 0, 1);
    kw_ = at(g.kernel, 1, 1);
    sh_ = at(g.strides, 0, 1);
    sw_ = at(g.strides, 1, 1);
    dh_ = at(g.dilations, 0, 1);
    dw_ = at(g.dilations, 1, 1);
    ph_ = at(g.pad_begin, 0, 0);
    pw_ = at(g.pad_begin, 1, 0);
  } else {
    ih_ = iw_ = oh_ = ow_ = kh_ = kw_ = sh_ = sw_ = dh_ = dw_ = ph_ = pw_ = 0;
  }
}

void Im2colSource::pack(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const {
  if (is_2d_) {
    pack_2d(k0, kc, n0, nc, dst);
  } else {
    pack_nd(k0, kc, n0, nc, dst);
  }
}

void Im2colSource::pack_2d(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const {
  const int64_t nr = kernels::gemm_nr();
  const int64_t ksize = kh_ * kw_;
  const int64_t panel_stride = nr * kc;
  for (int64_t kk = 0; kk < kc; ++kk) {
    const int64_t k = k0 + kk;
    const int64_t c = k / ksize;
    const int64_t kh = (k % ksize) / kw_;
    const int64_t kw = k % kw_;
    const float* xc = x_ + c * ih_ * iw_;
    float* drow = dst + kk * nr;  // row kk of panel 0
    int64_t oh = n0 / ow_;
    int64_t ow = n0 % ow_;
    int64_t j = 0;
    while (j < nc) {
      const int64_t len = std::min(ow_ - ow, nc - j);
      const int64_t ih = oh * sh_ - ph_ + kh * dh_;
      const bool row_ok = ih >= 0 && ih < ih_;
      const float* xr = row_ok ? xc + ih * iw_ : xc;
      const int64_t off = ow * sw_ - pw_ + kw * dw_;  // input column of the run's first element
      // Valid elements t of the run: 0 <= off + t*sw < iw.
      int64_t lo = 0, hi = 0;
      if (row_ok) {
        valid_range(off, sw_, iw_, len, &lo, &hi);
      }
      // Write the run [j, j+len) split at panel boundaries.
      int64_t t = 0;
      while (t < len) {
        const int64_t col = j + t;
        const int64_t lane = col % nr;
        const int64_t chunk = std::min(len - t, nr - lane);
        float* d = drow + (col / nr) * panel_stride + lane;
        // Elements t .. t+chunk of the run.
        const int64_t a = std::clamp(lo - t, int64_t{0}, chunk);
        const int64_t b = std::clamp(hi - t, a, chunk);
        if (a > 0) std::memset(d, 0, sizeof(float) * static_cast<size_t>(a));
        if (b > a) {
          const float* s = xr + off + (t + a) * sw_;
          if (sw_ == 1) {
            std::memcpy(d + a, s, sizeof(float) * static_cast<size_t>(b - a));
          } else {
            for (int64_t e = 0; e < b - a; ++e) d[a + e] = s[e * sw_];
          }
        }
        if (chunk > b) std::memset(d + b, 0, sizeof(float) * static_cast<size_t>(chunk - b));
        t += chunk;
      }
      j += len;
      ow = 0;
      ++oh;
    }
    // Zero the lanes past nc in the last panel.
    if (nc % nr != 0) {
      float* d = drow + (nc / nr) * panel_stride + nc % nr;
      std::memset(d, 0, sizeof(float) * static_cast<size_t>(nr - nc % nr));
    }
  }
}

void Im2colSource::pack_nd(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const {
  const int64_t nr = kernels::gemm_nr();
  const size_t r = g_.in.size();
  const int64_t ksize = g_.kernel_size();
  const int64_t isize = g_.in_size();
  std::vector<int64_t> kidx(r), oidx(r);
  for (int64_t kk = 0; kk < kc; ++kk) {
    const int64_t k = k0 + kk;
    const int64_t c = k / ksize;
    int64_t rem = k % ksize;
    for (size_t i = r; i-- > 0;) {
      kidx[i] = rem % g_.kernel[i];
      rem /= g_.kernel[i];
    }
    const float* xc = x_ + c * isize;
    int64_t o = n0;
    for (size_t i = r; i-- > 0;) {
      oidx[i] = o % g_.out[i];
      o /= g_.out[i];
    }
    for (int64_t j = 0; j < nc; ++j) {
      int64_t off = 0;
      bool ok = true;
      for (size_t i = 0; i < r; ++i) {
        const int64_t p = oidx[i] * g_.strides[i] - g_.pad_begin[i] + kidx[i] * g_.dilations[i];
        if (p < 0 || p >= g_.in[i]) {
          ok = false;
          break;
        }
        off = off * g_.in[i] + p;
      }
      dst[(j / nr) * nr * kc + kk * nr + j % nr] = ok ? xc[off] : 0.f;
      for (size_t i = r; i-- > 0;) {
        if (++oidx[i] < g_.out[i]) break;
        oidx[i] = 0;
      }
    }
    for (int64_t j = nc; j % nr != 0; ++j) dst[(j / nr) * nr * kc + kk * nr + j % nr] = 0.f;
  }
}

// ---- depthwise ----------------------------------------------------------------

namespace {

// One output row of a depthwise convolution: yr[ow] += sum_kw w[kw] *
// xr[ow*sw - pw + kw*dw] for the valid taps. KW > 0 fixes the kernel width
// at compile time so the interior loop vectorises.
template <int KW>
void dw_row(const float* __restrict xr, const float* __restrict w, int64_t kw_rt, int64_t iw, int64_t ow,
            int64_t sw, int64_t pw, int64_t dw, float* __restrict yr) {
  const int64_t kwn = KW > 0 ? KW : kw_rt;
  // Interior: every tap valid.
  int64_t lo = 0, hi = ow;
  for (int64_t kw = 0; kw < kwn; ++kw) {
    int64_t l, h;
    valid_range(kw * dw - pw, sw, iw, ow, &l, &h);
    lo = std::max(lo, l);
    hi = std::min(hi, h);
  }
  if (hi < lo) hi = lo;
  auto edge = [&](int64_t o) {
    float s = yr[o];
    for (int64_t kw = 0; kw < kwn; ++kw) {
      const int64_t p = o * sw - pw + kw * dw;
      if (p >= 0 && p < iw) s += w[kw] * xr[p];
    }
    yr[o] = s;
  };
  for (int64_t o = 0; o < lo; ++o) edge(o);
  if constexpr (KW > 0) {
    float wk[KW];
    for (int k = 0; k < KW; ++k) wk[k] = w[k];
    const float* base = xr - pw;
    if (sw == 1) {
      for (int64_t o = lo; o < hi; ++o) {
        float s = yr[o];
        for (int k = 0; k < KW; ++k) s += wk[k] * base[o + k * dw];
        yr[o] = s;
      }
    } else if (sw == 2) {
      for (int64_t o = lo; o < hi; ++o) {
        float s = yr[o];
        for (int k = 0; k < KW; ++k) s += wk[k] * base[2 * o + k * dw];
        yr[o] = s;
      }
    } else {
      for (int64_t o = lo; o < hi; ++o) {
        float s = yr[o];
        for (int k = 0; k < KW; ++k) s += wk[k] * base[o * sw + k * dw];
        yr[o] = s;
      }
    }
  } else {
    for (int64_t o = lo; o < hi; ++o) edge(o);
  }
  for (int64_t o = std::max(hi, lo); o < ow; ++o) edge(o);
}

}  // namespace

void depthwise_conv2d(const float* x, const float* w, const float* bias, int64_t mult, const Geometry& g,
                      bool accumulate, const kernels::Epilogue& ep, float* y) {
  const bool one = g.in.size() == 1;
  const int64_t ih = one ? 1 : g.in[0], iw = g.in.back();
  const int64_t oh = one ? 1 : g.out[0], ow = g.out.back();
  const int64_t kh = one ? 1 : g.kernel[0], kw = g.kernel.back();
  const int64_t sh = one ? 1 : g.strides[0], sw = g.strides.back();
  const int64_t dh = one ? 1 : g.dilations[0], dw = g.dilations.back();
  const int64_t ph = one ? 0 : g.pad_begin[0], pw = g.pad_begin.back();
  auto row_fn = kw == 3 ? &dw_row<3> : kw == 5 ? &dw_row<5> : kw == 7 ? &dw_row<7> : &dw_row<0>;
  kernels::Epilogue act = ep;
  act.bias_kind = kernels::Epilogue::Bias::kNone;
  for (int64_t m = 0; m < mult; ++m) {
    const float* wm = w + m * kh * kw;
    float* ym = y + m * oh * ow;
    const float b = bias ? bias[m] : 0.f;
    for (int64_t o = 0; o < oh; ++o) {
      float* yr = ym + o * ow;
      if (!accumulate) std::fill(yr, yr + ow, 0.f);
      for (int64_t k = 0; k < kh; ++k) {
        const int64_t i = o * sh - ph + k * dh;
        if (i < 0 || i >= ih) continue;
        row_fn(x + i * iw, wm + k * kw, kw, iw, ow, sw, pw, dw, yr);
      }
      if (b != 0.f) {
        for (int64_t j = 0; j < ow; ++j) yr[j] += b;
      }
      kernels::apply_activation(act, yr, ow);
    }
  }
}

// ---- col2im -------------------------------------------------------------------

void col2im(const float* col, int64_t mult, const Geometry& g, float* y) {
  const size_t r = g.in.size();
  const int64_t ysize = g.in_size();   // ConvTranspose output plane
  const int64_t xsize = g.out_size();  // ConvTranspose input plane
  const int64_t ksize = g.kernel_size();
  if (r <= 2) {
    const bool one = r == 1;
    const int64_t oh = one ? 1 : g.in[0], ow = g.in.back();
    const int64_t ih = one ? 1 : g.out[0], iw = g.out.back();
    const int64_t kh = one ? 1 : g.kernel[0], kw = g.kernel.back();
    const int64_t sh = one ? 1 : g.strides[0], sw = g.strides.back();
    const int64_t dh = one ? 1 : g.dilations[0], dw = g.dilations.back();
    const int64_t ph = one ? 0 : g.pad_begin[0], pw = g.pad_begin.back();
    for (int64_t m = 0; m < mult; ++m) {
      float* ym = y + m * ysize;
      std::fill(ym, ym + ysize, 0.f);
      for (int64_t a = 0; a < kh; ++a) {
        for (int64_t b = 0; b < kw; ++b) {
          const float* cr = col + ((m * kh + a) * kw + b) * xsize;
          int64_t wlo, whi;
          valid_range(b * dw - pw, sw, ow, iw, &wlo, &whi);
          for (int64_t i = 0; i < ih; ++i) {
            const int64_t o = i * sh - ph + a * dh;
            if (o < 0 || o >= oh) continue;
            float* yr = ym + o * ow;
            const int64_t shift = b * dw - pw;
            const float* cri = cr + i * iw;
            for (int64_t j = wlo; j < whi; ++j) yr[j * sw + shift] += cri[j];
          }
        }
      }
    }
    return;
  }
  std::vector<int64_t> kidx(r), xidx(r);
  for (int64_t m = 0; m < mult; ++m) {
    float* ym = y + m * ysize;
    std::fill(ym, ym + ysize, 0.f);
    for (int64_t k = 0; k < ksize; ++k) {
      int64_t rem = k;
      for (size_t i = r; i-- > 0;) {
        kidx[i] = rem % g.kernel[i];
        rem /= g.kernel[i];
      }
      const float* cr = col + (m * ksize + k) * xsize;
      std::fill(xidx.begin(), xidx.end(), 0);
      for (int64_t p = 0; p < xsize; ++p) {
        int64_t off = 0;
        bool ok = true;
        for (size_t i = 0; i < r; ++i) {
          const int64_t o = xidx[i] * g.strides[i] - g.pad_begin[i] + kidx[i] * g.dilations[i];
          if (o < 0 || o >= g.in[i]) {
            ok = false;
            break;
          }
          off = off * g.in[i] + o;
        }
        if (ok) ym[off] += cr[p];
        for (size_t i = r; i-- > 0;) {
          if (++xidx[i] < g.out[i]) break;
          xidx[i] = 0;
        }
      }
    }
  }
}

}  // namespace tessera
