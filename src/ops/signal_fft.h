// Discrete Fourier transforms for the signal family (DFT, STFT).
//
// Input: n complex values (double). Output: X[k] = sum_j x[j] e^{-2 pi i jk/n}
// in place. Method: an iterative Stockham autosort FFT (no bit reversal, one
// pass over the data per stage, contiguous inner loops that vectorize) with
// radix 4, 2, 3, 5 butterflies and a generic one for 7, 11, 13, for every
// length with no larger prime factor (powers of two, the 400-point frames of
// 16 kHz audio...); a direct O(n^2) sum over a twiddle table for other small
// lengths; Bluestein's chirp-z algorithm (a circular convolution done with a
// 2^a 3^b 5^c-point FFT of at least 2n-1 points) for other large lengths, so
// every length is O(n log n).
//
// transform_lines() runs one plan over many independent lines (the rows of a
// DFT axis, the frames of an STFT) on the thread pool. Real lines are taken two
// at a time as the real and imaginary parts of one complex transform and split
// afterwards through the conjugate symmetry of real spectra, which halves the
// work of spectrograms.
#pragma once

#include <algorithm>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "util/parallel.h"

namespace tessera {

using cdouble = std::complex<double>;

class FftPlan {
 public:
  // n >= 1.
  explicit FftPlan(int64_t n);
  ~FftPlan();
  FftPlan(const FftPlan&) = delete;
  FftPlan& operator=(const FftPlan&) = delete;

  int64_t size() const { return n_; }
  // Complex values of scratch space forward() needs.
  size_t scratch_size() const;
  // Forward transform of data[0..n) in place. Thread-safe: the plan is
  // read-only, all temporary state lives in `scratch`.
  void forward(cdouble* data, cdouble* scratch) const;

 private:
  enum class Kind { kStockham, kDirect, kBluestein };
  // A Stockham stage: `stride` interleaved transforms of radix*rest points
  // each split into `radix` of `rest` points.
  struct Stage {
    int64_t radix, stride, rest;
    size_t twiddle_offset;  // into twiddles_: W^(j*k), k < rest, j = 1..radix-1
  };
  void stockham(cdouble* data, cdouble* scratch) const;
  void direct(cdouble* data, cdouble* scratch) const;
  void bluestein(cdouble* data, cdouble* scratch) const;

  int64_t n_ = 0;
  Kind kind_ = Kind::kDirect;
  // Stockham: the stages, first to last, and their twiddles.
  std::vector<Stage> stages_;
  std::vector<cdouble> twiddles_;
  // direct: e^{-2 pi i k/n} for k < n.
  std::vector<cdouble> roots_;
  // Bluestein: chirp e^{-pi i k^2/n} (k < n), the transform of the
  // conjugated circular chirp divided by m, and the Stockham plan of size
  // m >= 2n-1.
  int64_t bluestein_len_ = 0;
  std::vector<cdouble> chirp_;
  std::vector<cdouble> chirp_fft_;
  std::unique_ptr<FftPlan> inner_;
};

// How to run transform_lines().
struct LineTransform {
  int64_t num_lines = 0;
  int64_t n_out = 0;         // bins written per line (<= plan size)
  bool real_input = false;   // lines are real: load() fills only one part
  bool inverse = false;      // inverse DFT: conj(F(conj x)) / n
};

// For every line l in [0, num_lines): load the line, transform it with
// `plan`, store bins [0, n_out).
//  * load(l, double* re, double* im, ptrdiff_t stride) writes the plan's n
//    values of line l at re[j*stride] (and im[j*stride] unless im is null,
//    which happens only for real input), zero-padding past the line's data.
//  * store(l, const cdouble* bins) receives n_out transformed values.
// Both are called from pool threads, never twice for the same line.
template <class Load, class Store>
void transform_lines(const FftPlan& plan, const LineTransform& lt, Parallel& pool, const Load& load,
                     const Store& store) {
  const int64_t n = plan.size();
  const double scale = lt.inverse ? 1.0 / static_cast<double>(n) : 1.0;
  const bool inverse = lt.inverse;
  // Real lines are processed in pairs; a unit of work is one complex FFT.
  const int64_t units = lt.real_input ? (lt.num_lines + 1) / 2 : lt.num_lines;
  int64_t log_n = 1;
  while ((int64_t{1} << log_n) < n) ++log_n;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, n * log_n));
  pool.parallel_for(units, grain, [&](int64_t begin, int64_t end) {
    std::vector<cdouble> buf(static_cast<size_t>(n));
    std::vector<cdouble> scratch(plan.scratch_size());
    std::vector<cdouble> out(static_cast<size_t>(lt.n_out));
    double* d = reinterpret_cast<double*>(buf.data());
    for (int64_t u = begin; u < end; ++u) {
      if (!lt.real_input) {
        const int64_t l = u;
        load(l, d, d + 1, 2);
        // Inverse through the forward plan: F^-1(x) = conj(F(conj(x))) / n.
        if (inverse) {
          for (auto& v : buf) v = std::conj(v);
        }
        plan.forward(buf.data(), scratch.data());
        for (int64_t k = 0; k < lt.n_out; ++k) {
          const cdouble v = buf[static_cast<size_t>(k)];
          out[static_cast<size_t>(k)] = inverse ? std::conj(v) * scale : v;
        }
        store(l, out.data());
        continue;
      }
      const int64_t l0 = 2 * u, l1 = 2 * u + 1;
      const bool pair = l1 < lt.num_lines;
      load(l0, d, nullptr, 2);
      if (pair) {
        load(l1, d + 1, nullptr, 2);
      } else {
        for (int64_t j = 0; j < n; ++j) d[2 * j + 1] = 0.0;
      }
      plan.forward(buf.data(), scratch.data());
      // Z = F(a + ib): F(a)[k] = (Z[k] + conj Z[-k]) / 2,
      // F(b)[k] = (Z[k] - conj Z[-k]) / 2i. For real x, F^-1(x) = conj(F(x)) / n.
      for (int pass = 0; pass < (pair ? 2 : 1); ++pass) {
        for (int64_t k = 0; k < lt.n_out; ++k) {
          const cdouble z = buf[static_cast<size_t>(k)];
          const cdouble zc = std::conj(buf[static_cast<size_t>(k == 0 ? 0 : n - k)]);
          const cdouble w = pass == 0 ? z + zc : z - zc;
          cdouble v = pass == 0 ? w * 0.5 : cdouble(0.5 * w.imag(), -0.5 * w.real());
          if (inverse) v = std::conj(v) * scale;
          out[static_cast<size_t>(k)] = v;
        }
        store(pass == 0 ? l0 : l1, out.data());
      }
    }
  });
}

}  // namespace tessera
