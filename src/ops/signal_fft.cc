#include "ops/signal_fft.h"

#include <cmath>
#include <numbers>

namespace tessera {

namespace {

// Lengths up to this that are not powers of two use the direct sum: below it
// n^2 multiply-adds cost less than Bluestein's three padded FFTs.
constexpr int64_t kMaxDirect = 64;

bool is_pow2(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

// Written out so the compiler does not call the NaN-aware complex multiply.
inline cdouble cmul(cdouble a, cdouble b) {
  return {a.real() * b.real() - a.imag() * b.imag(), a.real() * b.imag() + a.imag() * b.real()};
}

inline cdouble unit(double angle) { return {std::cos(angle), std::sin(angle)}; }

}  // namespace

FftPlan::FftPlan(int64_t n) : n_(n) {
  constexpr double kPi = std::numbers::pi;
  if (is_pow2(n)) {
    kind_ = Kind::kRadix2;
    int bits = 0;
    while ((int64_t{1} << bits) < n) ++bits;
    bitrev_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      uint32_t r = 0;
      for (int b = 0; b < bits; ++b) r |= static_cast<uint32_t>((i >> b) & 1) << (bits - 1 - b);
      bitrev_[static_cast<size_t>(i)] = r;
    }
    twiddles_.reserve(static_cast<size_t>(n > 1 ? n - 1 : 0));
    for (int64_t h = 1; h < n; h <<= 1) {
      for (int64_t j = 0; j < h; ++j) {
        twiddles_.push_back(unit(-kPi * static_cast<double>(j) / static_cast<double>(h)));
      }
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
  int64_t m = 1;
  while (m < 2 * n - 1) m <<= 1;
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
  inner_->radix2(chirp_fft_.data());
  // Folds the 1/m of the inverse transform in the convolution.
  const double inv_m = 1.0 / static_cast<double>(m);
  for (auto& v : chirp_fft_) v *= inv_m;
}

FftPlan::~FftPlan() = default;

size_t FftPlan::scratch_size() const {
  switch (kind_) {
    case Kind::kRadix2: return 0;
    case Kind::kDirect: return static_cast<size_t>(n_);
    case Kind::kBluestein: return static_cast<size_t>(inner_->size());
  }
  return 0;
}

void FftPlan::forward(cdouble* data, cdouble* scratch) const {
  switch (kind_) {
    case Kind::kRadix2: radix2(data); return;
    case Kind::kDirect: direct(data, scratch); return;
    case Kind::kBluestein: bluestein(data, scratch); return;
  }
}

void FftPlan::radix2(cdouble* data) const {
  const int64_t n = n_;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = bitrev_[static_cast<size_t>(i)];
    if (i < j) std::swap(data[i], data[j]);
  }
  // Split real and imaginary arithmetic so the butterflies vectorize.
  double* d = reinterpret_cast<double*>(data);
  const double* tw = reinterpret_cast<const double*>(twiddles_.data());
  for (int64_t h = 1; h < n; h <<= 1) {
    for (int64_t s = 0; s < n; s += 2 * h) {
      double* a = d + 2 * s;
      double* b = d + 2 * (s + h);
      for (int64_t j = 0; j < h; ++j) {
        const double wr = tw[2 * j], wi = tw[2 * j + 1];
        const double br = b[2 * j], bi = b[2 * j + 1];
        const double tr = wr * br - wi * bi, ti = wr * bi + wi * br;
        const double ar = a[2 * j], ai = a[2 * j + 1];
        b[2 * j] = ar - tr;
        b[2 * j + 1] = ai - ti;
        a[2 * j] = ar + tr;
        a[2 * j + 1] = ai + ti;
      }
    }
    tw += 2 * h;
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
  inner_->radix2(scratch);
  // Inverse transform as conj(F(conj(.))); 1/m is already in chirp_fft_.
  for (int64_t k = 0; k < m; ++k) scratch[k] = std::conj(cmul(scratch[k], chirp_fft_[static_cast<size_t>(k)]));
  inner_->radix2(scratch);
  for (int64_t k = 0; k < n; ++k) data[k] = cmul(std::conj(scratch[k]), chirp_[static_cast<size_t>(k)]);
}

}  // namespace tessera
