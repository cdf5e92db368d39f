// The GEMM's public entry points (gemm.h), dispatched at run time to the
// implementation for the CPU's instruction set (gemm_isa.h).
#include "ops/kernels/gemm.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "ops/kernels/gemm_isa.h"
#include "util/cpu_isa.h"

namespace tessera::kernels {

const GemmIsa& gemm_isa() {
  static const GemmIsa& isa = cpu::avx512() ? avx512::table() : avx2::table();
  return isa;
}

const char* gemm_isa_name() { return gemm_isa().name; }
int gemm_mr() { return gemm_isa().mr; }
int gemm_nr() { return gemm_isa().nr; }
int64_t gemm_kc() { return gemm_isa().kc; }
int gemm_wide_rows() { return gemm_isa().wide_rows; }

PackedMatrix PackedMatrix::Make(Side side, int64_t rows, int64_t cols, int64_t padded, std::shared_ptr<float> data,
                                Products products, bool wide) {
  PackedMatrix pm;
  pm.products_ = products;
  pm.wide_ = wide;
  pm.side_ = side;
  pm.rows_ = rows;
  pm.cols_ = cols;
  pm.padded_ = padded;
  pm.data_ = std::move(data);
  return pm;
}

size_t PackedMatrix::bytes() const {
  const int64_t k = side_ == Side::kA ? cols_ : rows_;
  return static_cast<size_t>(padded_) * static_cast<size_t>(pairs() ? (k + 1) / 2 : k) * sizeof(float);
}

namespace {

// Packed constants by what they were packed from: the source's address and layout, and a hash of the values (so a
// new constant at a freed one's address is never mistaken for it). An entry only refers to the packed data.
struct PackKey {
  PackedMatrix::Side side;
  const float* src;
  int64_t ld, rows, cols;  // the source's layout: op(src) is rows x cols
  bool trans;
  Products products;
  bool wide;
  uint64_t hash;
  auto tie() const { return std::tie(side, src, ld, rows, cols, trans, products, wide, hash); }
  bool operator<(const PackKey& o) const { return tie() < o.tie(); }
};

struct PackCache {
  std::mutex mu;
  std::map<PackKey, std::pair<int64_t, std::weak_ptr<float>>> entries;  // padded size, data
  size_t sweep_at = 64;
};

PackCache& pack_cache() {
  static PackCache* c = new PackCache();  // never destroyed: kernels may release packed data at exit
  return *c;
}

// The values op(src) reads: `lines` lines of `len` floats, `ld` apart; up to 256 of them, evenly spaced, for large
// constants (holders keep a constant alive while they use its packed copy, so the address already tells constants
// apart: the hash guards against reuse of a freed one's address, and a sample of whole lines does that at a
// fraction of a full pass over BERT-base's 340 MB).
uint64_t hash_span(const float* src, int64_t ld, int64_t lines, int64_t len) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(lines * len);
  const int64_t step = std::max<int64_t>(1, lines / 256);
  for (int64_t l = 0; l < lines; l += step) {
    const unsigned char* p = reinterpret_cast<const unsigned char*>(src + l * ld);
    const size_t bytes = static_cast<size_t>(len) * sizeof(float);
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      h = (h ^ w) * 0x100000001b3ull;
      h ^= h >> 29;
    }
    for (; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  }
  return h;
}

template <class Pack>
PackedMatrix pack_shared(PackKey key, int64_t lines, int64_t len, Pack pack) {
  key.hash = hash_span(key.src, key.ld, lines, len);
  PackCache& c = pack_cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.entries.find(key);
    if (it != c.entries.end()) {
      if (std::shared_ptr<float> data = it->second.second.lock()) {
        return PackedMatrix::Make(key.side, key.rows, key.cols, it->second.first, std::move(data), key.products,
                                  key.wide);
      }
    }
  }
  PackedMatrix pm = pack();
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.entries.size() >= c.sweep_at) {  // drop the entries whose data every kernel has released
    for (auto it = c.entries.begin(); it != c.entries.end();) {
      it = it->second.second.expired() ? c.entries.erase(it) : std::next(it);
    }
    c.sweep_at = std::max<size_t>(64, 2 * c.entries.size());
  }
  c.entries[key] = {pm.padded(), pm.shared_data()};
  return pm;
}

}  // namespace

// Pairs where asked for and the CPU has the instructions (gemm_isa().pack_*_pairs set: AVX-512).
Products products_here(Products asked) {
  const bool can = gemm_isa().pack_a_pairs != nullptr &&
                   (asked == Products::kBf16 ? cpu::avx512_bf16() : asked == Products::kFp16 && cpu::avx512_fp16());
  return can ? asked : Products::kFp32;
}

namespace {

// Seconds of one product C = A B on the calling thread, B packed as `b`.
double seconds(const PackedMatrix& b, const std::vector<float>& a, std::vector<float>& c, int64_t m) {
  const auto t0 = std::chrono::steady_clock::now();
  gemm(nullptr, m, b.cols(), b.rows(), 1.f, GemmA{a.data(), b.rows(), false, nullptr},
       GemmB{nullptr, 0, false, &b, nullptr}, 0.f, c.data(), b.cols());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool narrow_pays(Products p) {
  constexpr int64_t m = 64, n = 384, k = 768;
  std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n)), c(static_cast<size_t>(m * n));
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) * 0.125f - 0.375f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 5) * 0.25f - 0.5f;
  const PackedMatrix fp32 = PackedMatrix::PackB(b.data(), n, false, k, n);
  const PackedMatrix narrow = gemm_isa().pack_b_pairs(p, b.data(), n, false, k, n);
  double t32 = 1e30, t16 = 1e30;
  for (int round = 0; round < 7; ++round) {  // alternately, so that a busy moment of a shared host hits both
    t32 = std::min(t32, seconds(fp32, a, c, m));
    t16 = std::min(t16, seconds(narrow, a, c, m));
  }
  return t16 < 0.95 * t32;
}

}  // namespace

Products products_worth(Products asked) {
  const Products p = products_here(asked);
  if (p == Products::kBf16) {
    static const bool pays = narrow_pays(Products::kBf16);
    return pays ? p : Products::kFp32;
  }
  if (p == Products::kFp16) {
    static const bool pays = narrow_pays(Products::kFp16);
    return pays ? p : Products::kFp32;
  }
  return p;
}

Products products_named(std::string_view precision) {
  return precision == "bf16" ? Products::kBf16 : precision == "fp16" ? Products::kFp16 : Products::kFp32;
}

PackedMatrix PackedMatrix::PackConstantA(const float* a, int64_t lda, bool trans, int64_t m, int64_t k,
                                         Products products) {
  // op(A) = A is m lines of k; A^T comes from k lines of m.
  products = products_here(products);
  return pack_shared(PackKey{Side::kA, a, lda, m, k, trans, products, false, 0}, trans ? k : m, trans ? m : k, [&] {
    return products != Products::kFp32 ? gemm_isa().pack_a_pairs(products, a, lda, trans, m, k)
                                       : PackA(a, lda, trans, m, k);
  });
}

PackedMatrix PackedMatrix::PackConstantB(const float* b, int64_t ldb, bool trans, int64_t k, int64_t n,
                                         Products products) {
  // op(B) = B is k lines of n; B^T comes from n lines of k.
  products = products_here(products);
  return pack_shared(PackKey{Side::kB, b, ldb, k, n, trans, products, false, 0}, trans ? n : k, trans ? k : n, [&] {
    return products != Products::kFp32 ? gemm_isa().pack_b_pairs(products, b, ldb, trans, k, n)
                                       : PackB(b, ldb, trans, k, n);
  });
}

PackedMatrix PackedMatrix::PackConstantAWide(const float* a, int64_t lda, bool trans, int64_t m, int64_t k) {
  if (gemm_isa().pack_a_wide == nullptr) return {};
  return pack_shared(PackKey{Side::kA, a, lda, m, k, trans, Products::kFp32, true, 0}, trans ? k : m, trans ? m : k,
                     [&] { return gemm_isa().pack_a_wide(a, lda, trans, m, k); });
}

PackedMatrix PackedMatrix::PackA(const float* a, int64_t lda, bool trans, int64_t m, int64_t k) {
  return gemm_isa().pack_a(a, lda, trans, m, k);
}

PackedMatrix PackedMatrix::PackB(const float* b, int64_t ldb, bool trans, int64_t k, int64_t n) {
  return gemm_isa().pack_b(b, ldb, trans, k, n);
}

void gemm(Parallel* pool, int64_t m, int64_t n, int64_t k, float alpha, const GemmA& a, const GemmB& b, float beta,
          float* c, int64_t ldc, const Epilogue& ep, Products products) {
  gemm_isa().gemm(pool, m, n, k, alpha, a, b, beta, c, ldc, ep, products_here(products));
}

GemmA rows_of(const GemmA& a, int64_t r0) {
  GemmA r = a;
  if (a.packed) {
    r.row0 += r0;
  } else {
    r.data += a.trans ? r0 : r0 * a.ld;
  }
  return r;
}

int64_t panel_rows(const GemmA& a) { return a.packed && a.packed->wide() ? gemm_wide_rows() : gemm_mr(); }

void sgemm(Parallel* pool, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           const Epilogue& ep) {
  GemmA ga{a, lda, trans_a, nullptr};
  GemmB gb{b, ldb, trans_b, nullptr, nullptr};
  gemm(pool, m, n, k, alpha, ga, gb, beta, c, ldc, ep);
}

void apply_activation(const Epilogue& ep, float* x, int64_t n) { gemm_isa().apply_activation(ep, x, n); }

void apply_epilogue(const Epilogue& ep, int64_t m, int64_t n, float* c, int64_t ldc) {
  gemm_isa().apply_epilogue(ep, m, n, c, ldc);
}

}  // namespace tessera::kernels
