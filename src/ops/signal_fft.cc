#include "ops/signal_fft.h"

#include <cmath>
#include <numbers>

namespace tessera {

namespace {

// Lengths up to this with a prime factor above kMaxRadix use the direct sum:
// below it n^2 multiply-adds cost less than Bluestein's three padded FFTs.
constexpr int64_t kMaxDirect = 64;

// Largest prime handled by a mixed-radix butterfly; lengths with a larger
// prime factor go through Bluestein (or the direct sum when small).
constexpr int64_t kMaxRadix = 13;

// Written out so the compiler does not call the NaN-aware complex multiply.
inline cdouble cmul(cdouble a, cdouble b) {
  return {a.real() * b.real() - a.imag() * b.imag(), a.real() * b.imag() + a.imag() * b.real()};
}

inline cdouble unit(double angle) { return {std::cos(angle), std::sin(angle)}; }

// Radices of n, 4s first, then 2, 3, 5, ... up to kMaxRadix; empty when n has
// a larger prime factor.
std::vector<int64_t> smooth_factors(int64_t n) {
  std::vector<int64_t> f;
  while (n % 4 == 0) {
    f.push_back(4);
    n /= 4;
  }
  for (int64_t p = 2; p <= kMaxRadix && n > 1; ++p) {
    while (n % p == 0) {
      f.push_back(p);
      n /= p;
    }
  }
  if (n != 1) f.clear();
  return f;
}

}  // namespace

FftPlan::FftPlan(int64_t n) : n_(n) {
  constexpr double kPi = std::numbers::pi;
  if (std::vector<int64_t> f = smooth_factors(n); !f.empty()) {
    kind_ = Kind::kStockham;
    int64_t stride = 1;
    for (int64_t p : f) {
      const int64_t len = n / stride, m = len / p;
      stages_.push_back({p, stride, m, twiddles_.size()});
      for (int64_t k = 0; k < m; ++k) {
        for (int64_t j = 1; j < p; ++j) {
          twiddles_.push_back(unit(-2.0 * kPi * static_cast<double>(j * k) / static_cast<double>(len)));
        }
      }
      stride *= p;
    }
    return;
  }
  if (n <= kMaxDirect) {
    kind_ = Kind::kDirect;
    roots_.resize(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) {
      roots_[static_cast<size_t>(k)] = unit(-2.0 * kPi * static_cast<double>(k) / static_cast<double>(n));
    }
    return;
  }
  kind_ = Kind::kBluestein;
  // The smallest 2^a 3^b 5^c >= 2n-1: those lengths have the fastest stages.
  auto is_235 = [](int64_t v) {
    for (int64_t p : {2, 3, 5}) {
      while (v % p == 0) v /= p;
    }
    return v == 1;
  };
  int64_t m = 2 * n - 1;
  while (!is_235(m)) ++m;
  bluestein_len_ = m;
  inner_ = std::make_unique<FftPlan>(m);
  chirp_.resize(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    // k^2 mod 2n keeps the angle small (and exact) for long signals.
    // (k < 2^32 for any tensor that fits in memory, so k^2 fits in 64 bits.)
    const uint64_t uk = static_cast<uint64_t>(k);
    const int64_t k2 = static_cast<int64_t>((uk * uk) % static_cast<uint64_t>(2 * n));
    chirp_[static_cast<size_t>(k)] = unit(-kPi * static_cast<double>(k2) / static_cast<double>(n));
  }
  chirp_fft_.assign(static_cast<size_t>(m), cdouble(0.0, 0.0));
  chirp_fft_[0] = std::conj(chirp_[0]);
  for (int64_t k = 1; k < n; ++k) {
    const cdouble c = std::conj(chirp_[static_cast<size_t>(k)]);
    chirp_fft_[static_cast<size_t>(k)] = c;
    chirp_fft_[static_cast<size_t>(m - k)] = c;
  }
  {
    std::vector<cdouble> tmp(static_cast<size_t>(m));
    inner_->stockham(chirp_fft_.data(), tmp.data());
  }
  // Folds the 1/m of the inverse transform in the convolution.
  const double inv_m = 1.0 / static_cast<double>(m);
  for (auto& v : chirp_fft_) v *= inv_m;
}

FftPlan::~FftPlan() = default;

size_t FftPlan::scratch_size() const {
  switch (kind_) {
    case Kind::kStockham:
    case Kind::kDirect: return static_cast<size_t>(n_);
    case Kind::kBluestein: return static_cast<size_t>(2 * bluestein_len_);  // buffer + inner scratch
  }
  return 0;
}

void FftPlan::forward(cdouble* data, cdouble* scratch) const {
  switch (kind_) {
    case Kind::kStockham: stockham(data, scratch); return;
    case Kind::kDirect: direct(data, scratch); return;
    case Kind::kBluestein: bluestein(data, scratch); return;
  }
}

namespace {

// Radix-P butterfly (a P-point DFT) on split real/imaginary values.
template <int P>
inline void butterfly(const double* ar, const double* ai, double* br, double* bi) {
  if constexpr (P == 2) {
    br[0] = ar[0] + ar[1], bi[0] = ai[0] + ai[1];
    br[1] = ar[0] - ar[1], bi[1] = ai[0] - ai[1];
  } else if constexpr (P == 3) {
    // W_3 = -1/2 - i sqrt(3)/2.
    constexpr double kS = 0.86602540378443864676;
    const double sr = ar[1] + ar[2], si = ai[1] + ai[2], dr = ar[1] - ar[2], di = ai[1] - ai[2];
    const double mr = ar[0] - 0.5 * sr, mi = ai[0] - 0.5 * si;
    br[0] = ar[0] + sr, bi[0] = ai[0] + si;
    br[1] = mr + kS * di, bi[1] = mi - kS * dr;
    br[2] = mr - kS * di, bi[2] = mi + kS * dr;
  } else if constexpr (P == 4) {
    const double s02r = ar[0] + ar[2], s02i = ai[0] + ai[2], d02r = ar[0] - ar[2], d02i = ai[0] - ai[2];
    const double s13r = ar[1] + ar[3], s13i = ai[1] + ai[3], d13r = ar[1] - ar[3], d13i = ai[1] - ai[3];
    br[0] = s02r + s13r, bi[0] = s02i + s13i;
    br[1] = d02r + d13i, bi[1] = d02i - d13r;  // + -i (t1 - t3)
    br[2] = s02r - s13r, bi[2] = s02i - s13i;
    br[3] = d02r - d13i, bi[3] = d02i + d13r;
  } else {
    static_assert(P == 5);
    // Inputs q and 5-q share cosines and have opposite sines.
    constexpr double kC1 = 0.30901699437494742410, kS1 = 0.95105651629515357212;   // 72 degrees
    constexpr double kC2 = -0.80901699437494742410, kS2 = 0.58778525229247312917;  // 144 degrees
    const double a1r = ar[1] + ar[4], a1i = ai[1] + ai[4], b1r = ar[1] - ar[4], b1i = ai[1] - ai[4];
    const double a2r = ar[2] + ar[3], a2i = ai[2] + ai[3], b2r = ar[2] - ar[3], b2i = ai[2] - ai[3];
    const double r1r = ar[0] + kC1 * a1r + kC2 * a2r, r1i = ai[0] + kC1 * a1i + kC2 * a2i;
    const double r2r = ar[0] + kC2 * a1r + kC1 * a2r, r2i = ai[0] + kC2 * a1i + kC1 * a2i;
    const double i1r = kS1 * b1r + kS2 * b2r, i1i = kS1 * b1i + kS2 * b2i;  // X1 = r1 - i*i1
    const double i2r = kS2 * b1r - kS1 * b2r, i2i = kS2 * b1i - kS1 * b2i;  // X2 = r2 - i*i2
    br[0] = ar[0] + a1r + a2r, bi[0] = ai[0] + a1i + a2i;
    br[1] = r1r + i1i, bi[1] = r1i - i1r;
    br[4] = r1r - i1i, bi[4] = r1i + i1r;
    br[2] = r2r + i2i, bi[2] = r2i - i2r;
    br[3] = r2r - i2i, bi[3] = r2i + i2r;
  }
}

// One Stockham decimation-in-frequency stage of radix P: with len = m*P the
// length of the sub-transforms at this stage and s their number (interleaved),
// y[r + s*(P*k + j)] = W_len^(j*k) * sum_q x[r + s*(k + q*m)] W_P^(j*q).
// The r loop runs over contiguous elements, so later stages vectorize; the
// first stage (s = 1) walks k instead.
template <int P>
void stockham_stage(const double* x, double* y, int64_t s, int64_t m, const double* tw) {
  for (int64_t k = 0; k < m; ++k) {
    const double* w = tw + 2 * (P - 1) * k;  // W_len^(j*k), j = 1..P-1
    for (int64_t r = 0; r < s; ++r) {
      double ar[P], ai[P], br[P], bi[P];
      for (int q = 0; q < P; ++q) {
        const int64_t at = 2 * (r + s * (k + q * m));
        ar[q] = x[at];
        ai[q] = x[at + 1];
      }
      butterfly<P>(ar, ai, br, bi);
      const int64_t base = 2 * (r + s * P * k);
      y[base] = br[0];
      y[base + 1] = bi[0];
      for (int j = 1; j < P; ++j) {
        const double wr = w[2 * (j - 1)], wi = w[2 * (j - 1) + 1];
        y[base + 2 * s * j] = br[j] * wr - bi[j] * wi;
        y[base + 2 * s * j + 1] = br[j] * wi + bi[j] * wr;
      }
    }
  }
}

// Generic radix p (7, 11, 13) through the roots W_p^e = e^{-2 pi i e/p}.
void stockham_stage_generic(const double* x, double* y, int64_t p, int64_t s, int64_t m, const double* tw,
                            const cdouble* roots_p) {
  cdouble a[kMaxRadix];
  for (int64_t k = 0; k < m; ++k) {
    const cdouble* w = reinterpret_cast<const cdouble*>(tw) + (p - 1) * k;
    for (int64_t r = 0; r < s; ++r) {
      for (int64_t q = 0; q < p; ++q) {
        const int64_t at = 2 * (r + s * (k + q * m));
        a[q] = cdouble(x[at], x[at + 1]);
      }
      for (int64_t j = 0; j < p; ++j) {
        cdouble acc = a[0];
        int64_t e = 0;  // j*q mod p
        for (int64_t q = 1; q < p; ++q) {
          e += j;
          if (e >= p) e -= p;
          acc += cmul(a[q], roots_p[e]);
        }
        if (j > 0) acc = cmul(acc, w[j - 1]);
        const int64_t at = 2 * (r + s * (p * k + j));
        y[at] = acc.real();
        y[at + 1] = acc.imag();
      }
    }
  }
}

}  // namespace

void FftPlan::stockham(cdouble* data, cdouble* scratch) const {
  double* x = reinterpret_cast<double*>(data);
  double* y = reinterpret_cast<double*>(scratch);
  const double* tw = reinterpret_cast<const double*>(twiddles_.data());
  for (const Stage& st : stages_) {
    const double* w = tw + 2 * st.twiddle_offset;
    switch (st.radix) {
      case 2: stockham_stage<2>(x, y, st.stride, st.rest, w); break;
      case 3: stockham_stage<3>(x, y, st.stride, st.rest, w); break;
      case 4: stockham_stage<4>(x, y, st.stride, st.rest, w); break;
      case 5: stockham_stage<5>(x, y, st.stride, st.rest, w); break;
      default: {
        cdouble roots_p[kMaxRadix];
        for (int64_t e = 0; e < st.radix; ++e) {
          roots_p[e] = unit(-2.0 * std::numbers::pi * static_cast<double>(e) / static_cast<double>(st.radix));
        }
        stockham_stage_generic(x, y, st.radix, st.stride, st.rest, w, roots_p);
        break;
      }
    }
    std::swap(x, y);
  }
  if (x != reinterpret_cast<double*>(data)) {
    for (int64_t j = 0; j < 2 * n_; ++j) reinterpret_cast<double*>(data)[j] = x[j];
  }
}

void FftPlan::direct(cdouble* data, cdouble* scratch) const {
  const int64_t n = n_;
  for (int64_t j = 0; j < n; ++j) scratch[j] = data[j];
  for (int64_t k = 0; k < n; ++k) {
    double re = 0.0, im = 0.0;
    int64_t idx = 0;  // j*k mod n
    for (int64_t j = 0; j < n; ++j) {
      const cdouble w = roots_[static_cast<size_t>(idx)];
      const cdouble x = scratch[j];
      re += x.real() * w.real() - x.imag() * w.imag();
      im += x.real() * w.imag() + x.imag() * w.real();
      idx += k;
      if (idx >= n) idx -= n;
    }
    data[k] = {re, im};
  }
}

void FftPlan::bluestein(cdouble* data, cdouble* scratch) const {
  // X[k] = c[k] * sum_j (x[j] c[j]) conj(c[k-j]) with c[k] = e^{-pi i k^2/n}:
  // a circular convolution of length m >= 2n-1, done by FFT.
  const int64_t n = n_, m = inner_->size();
  for (int64_t k = 0; k < n; ++k) scratch[k] = cmul(data[k], chirp_[static_cast<size_t>(k)]);
  for (int64_t k = n; k < m; ++k) scratch[k] = cdouble(0.0, 0.0);
  cdouble* inner_scratch = scratch + m;
  inner_->stockham(scratch, inner_scratch);
  // Inverse transform as conj(F(conj(.))); 1/m is already in chirp_fft_.
  for (int64_t k = 0; k < m; ++k) scratch[k] = std::conj(cmul(scratch[k], chirp_fft_[static_cast<size_t>(k)]));
  inner_->stockham(scratch, inner_scratch);
  for (int64_t k = 0; k < n; ++k) data[k] = cmul(std::conj(scratch[k]), chirp_[static_cast<size_t>(k)]);
}

}  // namespace tessera
