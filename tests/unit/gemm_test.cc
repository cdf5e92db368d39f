#include "ops/kernels/gemm.h"
#include "util/cpu_isa.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include <cmath>
#include <random>
#include <vector>

#include "ops/elementwise_math.h"
#include "util/thread_pool.h"

namespace tessera::kernels {
namespace {

// op(A)[i,p] and op(B)[p,j] of row-major storage.
float at_a(const std::vector<float>& a, int64_t lda, bool t, int64_t i, int64_t p) {
  return t ? a[static_cast<size_t>(p * lda + i)] : a[static_cast<size_t>(i * lda + p)];
}
float at_b(const std::vector<float>& b, int64_t ldb, bool t, int64_t p, int64_t j) {
  return t ? b[static_cast<size_t>(j * ldb + p)] : b[static_cast<size_t>(p * ldb + j)];
}

float ref_act(const Epilogue& ep, float x) {
  switch (ep.act) {
    case Activation::kRelu: return std::max(x, 0.f);
    case Activation::kClip: return std::min(std::max(x, ep.lo), ep.hi);
    case Activation::kLeakyRelu: return x < 0 ? x * ep.alpha : x;
    case Activation::kHardSigmoid: return std::min(std::max(ep.alpha * x + ep.beta, 0.f), 1.f);
    case Activation::kHardSwish: return x * std::min(std::max(ep.alpha * x + ep.beta, 0.f), 1.f);
    case Activation::kSigmoid: return 1.f / (1.f + std::exp(-x));
    case Activation::kTanh: return std::tanh(x);
    case Activation::kSwish:
      return x / (1.f + std::exp(-x));
    default: return x;
  }
}

struct Case {
  int64_t m, n, k;
  bool ta, tb;
  float alpha, beta;
  int pad;  // extra leading-dimension elements
  Epilogue::Bias bias;
  Activation act;
  int mode;  // 0 raw, 1 packed A, 2 packed B, 3 both packed, 4 B from a source
  // Packed operands packed as constants for bf16 or fp16 products (modes 1, 2, 4: A in pairs with B raw or from a
  // source; B in pairs with A raw), or (mode 0) both raw with the products asked of gemm; the reference then rounds
  // A and B to bf16 or fp16.
  Products products = Products::kFp32;
};

// x rounded to bf16 (nearest even), as a float.
float round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// x rounded to fp16 (nearest even), as a float (F16C is in the build's x86-64-v3 baseline).
float round_fp16(float x) { return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT)); }

class RawSource : public BPackSource {
 public:
  RawSource(const float* b, int64_t ldb, bool trans) : b_(b), ldb_(ldb), trans_(trans) {}
  void pack(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const override {
    const int nr = gemm_nr();
    for (int64_t j0 = 0; j0 < nc; j0 += nr) {
      float* panel = dst + (j0 / nr) * nr * kc;
      for (int64_t p = 0; p < kc; ++p) {
        for (int j = 0; j < nr; ++j) {
          const int64_t row = k0 + p, col = n0 + j0 + j;
          panel[p * nr + j] = j0 + j >= nc ? 0.f : trans_ ? b_[col * ldb_ + row] : b_[row * ldb_ + col];
        }
      }
    }
  }

 private:
  const float* b_;
  int64_t ldb_;
  bool trans_;
};

void run_case(const Case& cs, ThreadPool* pool, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  const int64_t lda = (cs.ta ? cs.m : cs.k) + cs.pad;
  const int64_t ldb = (cs.tb ? cs.k : cs.n) + cs.pad;
  const int64_t ldc = cs.n + cs.pad;
  std::vector<float> a(static_cast<size_t>((cs.ta ? cs.k : cs.m) * lda + 1));
  std::vector<float> b(static_cast<size_t>((cs.tb ? cs.n : cs.k) * ldb + 1));
  std::vector<float> c(static_cast<size_t>(cs.m * ldc + 1));
  std::vector<float> bias(static_cast<size_t>(std::max(cs.m, cs.n)));
  for (auto& x : a) x = dist(rng);
  for (auto& x : b) x = dist(rng);
  for (auto& x : c) x = dist(rng);
  for (auto& x : bias) x = dist(rng);
  std::vector<float> expect = c;

  Epilogue ep;
  ep.bias_kind = cs.bias;
  ep.bias = cs.bias == Epilogue::Bias::kNone ? nullptr : bias.data();
  ep.act = cs.act;
  ep.lo = -0.5f;
  ep.hi = 0.75f;
  ep.alpha = 0.1f;
  ep.beta = 0.4f;
  const auto rounded = [&](float v) {
    return cs.products == Products::kBf16 ? round_bf16(v) : cs.products == Products::kFp16 ? round_fp16(v) : v;
  };
  for (int64_t i = 0; i < cs.m; ++i) {
    for (int64_t j = 0; j < cs.n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < cs.k; ++p) {
        acc += double(rounded(at_a(a, lda, cs.ta, i, p))) * rounded(at_b(b, ldb, cs.tb, p, j));
      }
      float& e = expect[static_cast<size_t>(i * ldc + j)];
      float v = cs.alpha * static_cast<float>(acc) + (cs.beta == 0.f ? 0.f : cs.beta * e);
      if (cs.bias == Epilogue::Bias::kPerRow) v += bias[static_cast<size_t>(i)];
      if (cs.bias == Epilogue::Bias::kPerCol) v += bias[static_cast<size_t>(j)];
      e = ref_act(ep, v);
    }
  }

  GemmA ga{a.data(), lda, cs.ta, nullptr};
  GemmB gb{b.data(), ldb, cs.tb, nullptr, nullptr};
  PackedMatrix pa, pb;
  const bool narrow = cs.products != Products::kFp32;
  if (narrow && cs.mode != 0) {
    if (cs.mode == 1 || cs.mode == 4) {
      pa = PackedMatrix::PackConstantA(a.data(), lda, cs.ta, cs.m, cs.k, cs.products);
      ga = GemmA{nullptr, 0, false, &pa};
    } else {
      pb = PackedMatrix::PackConstantB(b.data(), ldb, cs.tb, cs.k, cs.n, cs.products);
      gb = GemmB{nullptr, 0, false, &pb, nullptr};
    }
    EXPECT_EQ((pa.empty() ? pb : pa).products(), cs.products);
  } else if (cs.mode == 1 || cs.mode == 3) {
    pa = PackedMatrix::PackA(a.data(), lda, cs.ta, cs.m, cs.k);
    ga = GemmA{nullptr, 0, false, &pa};
  }
  if (!narrow && (cs.mode == 2 || cs.mode == 3)) {
    pb = PackedMatrix::PackB(b.data(), ldb, cs.tb, cs.k, cs.n);
    gb = GemmB{nullptr, 0, false, &pb, nullptr};
  }
  RawSource src(b.data(), ldb, cs.tb);
  if (cs.mode == 4) gb = GemmB{nullptr, 0, false, nullptr, &src};
  gemm(pool, cs.m, cs.n, cs.k, cs.alpha, ga, gb, cs.beta, c.data(), ldc, ep, cs.products);

  // fp16 products sum up to 32 of them per lane in fp16 (gemm.h): each add rounds to 11 bits of a partial sum.
  const float fp16_sums = cs.products == Products::kFp16
                              ? 4e-3f * std::sqrt(static_cast<float>(cs.k)) * std::max(1.f, std::fabs(cs.alpha))
                              : 0.f;
  const float tol = 1e-4f * static_cast<float>(std::max<int64_t>(cs.k, 1)) + fp16_sums;
  for (int64_t i = 0; i < cs.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t idx = static_cast<size_t>(i * ldc + j);
      ASSERT_NEAR(c[idx], expect[idx], tol) << "m=" << cs.m << " n=" << cs.n << " k=" << cs.k << " ta=" << cs.ta
                                            << " tb=" << cs.tb << " mode=" << cs.mode << " at " << i << "," << j;
    }
  }
}

// The instruction set is chosen at run time: AVX-512 where the CPU has it,
// AVX2 otherwise or when TESSERA_ISA=avx2 asks for it (CTest unit_avx2 runs
// the unit tests that way), and the tile sizes follow it; every kernel
// follows the same choice (util/cpu_isa.h).
TEST(Gemm, InstructionSetFollowsTheCpuOrTheSwitch) {
  const char* env = std::getenv("TESSERA_ISA");
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const std::string want = (env && std::string(env) == "avx2") || !avx512 ? "avx2" : "avx512";
  EXPECT_EQ(std::string(kernels::gemm_isa_name()), want);
  EXPECT_EQ(kernels::gemm_nr(), want == "avx512" ? 48 : 32);
  EXPECT_EQ(std::string(cpu::isa_name()), want);
  EXPECT_EQ(cpu::avx512(), want == "avx512");
}

// A random case: small shapes, every `long_k`-th with K over several blocks (odd lengths too), every 17th large;
// random transposes, alpha, beta, padding, bias and activation, and one of `modes`.
Case random_case(std::mt19937& rng, int it, int long_k, const std::vector<int>& modes) {
  std::uniform_int_distribution<int> small(1, 70);
  Case cs;
  cs.m = small(rng);
  cs.n = small(rng);
  cs.k = small(rng);
  if (it % long_k == 0) cs.k = 257 + small(rng) * 5;
  if (it % 17 == 0) {
    cs.m = 150 + small(rng);
    cs.n = 300 + small(rng) * 3;
  }
  cs.ta = rng() & 1;
  cs.tb = rng() & 1;
  const float alphas[] = {1.f, 0.5f, -2.f};
  const float betas[] = {0.f, 1.f, 0.25f};
  cs.alpha = alphas[rng() % 3];
  cs.beta = betas[rng() % 3];
  cs.pad = rng() % 2 ? 0 : static_cast<int>(rng() % 5);
  cs.bias = static_cast<Epilogue::Bias>(rng() % 3);
  cs.act = static_cast<Activation>(rng() % (static_cast<int>(Activation::kSwish) + 1));
  cs.mode = modes[rng() % modes.size()];
  return cs;
}

TEST(Gemm, MatchesReferenceOnRandomShapes) {
  std::mt19937 rng(42);
  ThreadPool pool1(1), pool2(2);
  for (int it = 0; it < 300; ++it) {
    run_case(random_case(rng, it, 10, {0, 1, 2, 3, 4}), it % 2 ? &pool2 : &pool1, rng);
    if (HasFatalFailure()) return;
  }
}

// 120 random cases of `products` (Case::products): K blocks of odd length, either side packed, B from a source, both
// operands raw; on 1 and 2 threads.
void run_narrow_cases(Products products, unsigned seed) {
  std::mt19937 rng(seed);
  ThreadPool pool1(1), pool2(2);
  for (int it = 0; it < 120; ++it) {
    Case cs = random_case(rng, it, 6, {0, 1, 2, 4});
    cs.products = products;
    run_case(cs, it % 2 ? &pool2 : &pool1, rng);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// bf16 products: the operands rounded to bf16 (nearest even), products summed in fp32, then alpha, beta and the
// epilogue as in fp32.
TEST(Gemm, Bf16PackedConstantsMultiplyRoundedOperandsWithFloatSums) {
  if (!cpu::avx512_bf16()) GTEST_SKIP() << "this CPU (or TESSERA_ISA) has no AVX-512 BF16; checked: packing stays fp32";
  run_narrow_cases(Products::kBf16, 7);
}

TEST(Gemm, Bf16PackingIsFp32WhereTheCpuLacksIt) {
  std::vector<float> w(64 * 40, 0.3f);
  const PackedMatrix p = PackedMatrix::PackConstantB(w.data(), 40, false, 64, 40, Products::kBf16);
  EXPECT_EQ(p.pairs(), cpu::avx512_bf16());
  const PackedMatrix q = PackedMatrix::PackConstantB(w.data(), 40, false, 64, 40);
  EXPECT_FALSE(q.pairs());
  if (!p.pairs()) {
    EXPECT_EQ(p.data(), q.data());  // the one fp32 copy, shared
    return;
  }
  EXPECT_NE(p.data(), q.data());  // fp32 and bf16 copies of one constant are kept apart
  EXPECT_EQ(p.bytes() * 2, q.bytes());
  // 1 + 2^-10 is no bf16 value: it rounds to 1, so eight products sum to 8 exactly (fp32: 8.0078125).
  std::vector<float> a(8, 1.f + 1.f / 1024.f), b(8 * 40, 1.f), c(40, -1.f);
  const PackedMatrix pa = PackedMatrix::PackConstantA(a.data(), 8, false, 1, 8, Products::kBf16);
  GemmA ga{nullptr, 0, false, &pa};
  GemmB gb{b.data(), 40, false, nullptr, nullptr};
  gemm(nullptr, 1, 40, 8, 1.f, ga, gb, 0.f, c.data(), 40);
  for (float v : c) EXPECT_EQ(v, 8.f);
}

// fp16 products: the operands rounded to fp16, products summed in short fp16 runs added in fp32; the same cases as
// bf16's, with the tolerance of those runs.
TEST(Gemm, Fp16PackedConstantsMultiplyRoundedOperandsInShortSums) {
  if (!cpu::avx512_fp16()) GTEST_SKIP() << "this CPU (or TESSERA_ISA) has no AVX512-FP16; checked: packing stays fp32";
  run_narrow_cases(Products::kFp16, 11);
}

TEST(Gemm, Fp16OperandsRoundAndSumsAreShortRuns) {
  std::vector<float> w(64 * 40, 0.3f);
  const PackedMatrix p = PackedMatrix::PackConstantB(w.data(), 40, false, 64, 40, Products::kFp16);
  EXPECT_EQ(p.products(), cpu::avx512_fp16() ? Products::kFp16 : Products::kFp32);
  if (!p.pairs()) GTEST_SKIP() << "this CPU (or TESSERA_ISA) has no AVX512-FP16; checked: packing stays fp32";
  const PackedMatrix q = PackedMatrix::PackConstantB(w.data(), 40, false, 64, 40, Products::kBf16);
  EXPECT_NE(p.data(), q.data());  // fp16 and bf16 copies of one constant are kept apart
  // 1 + 2^-12 is no fp16 value: it rounds to 1, so eight products sum to 8 exactly (fp32: 8.001953125), with A
  // packed as a constant and with both operands raw (products asked of gemm), down to a single column.
  {
    std::vector<float> a(8, 1.f + 1.f / 4096.f), b(8 * 40, 1.f), c(40, -1.f);
    const PackedMatrix pa = PackedMatrix::PackConstantA(a.data(), 8, false, 1, 8, Products::kFp16);
    GemmA ga{nullptr, 0, false, &pa};
    GemmB gb{b.data(), 40, false, nullptr, nullptr};
    gemm(nullptr, 1, 40, 8, 1.f, ga, gb, 0.f, c.data(), 40);
    for (float v : c) EXPECT_EQ(v, 8.f);
    for (int64_t n : {int64_t{40}, int64_t{1}}) {
      std::fill(c.begin(), c.end(), -1.f);
      gemm(nullptr, 1, n, 8, 1.f, GemmA{a.data(), 8, false, nullptr}, GemmB{b.data(), n, false, nullptr, nullptr}, 0.f,
           c.data(), n, {}, Products::kFp16);
      for (int64_t j = 0; j < n; ++j) EXPECT_EQ(c[static_cast<size_t>(j)], 8.f) << "n=" << n;
    }
  }
  // Products of 1024 (32 x 32), 128 pairs to a lane in one K block of 256: one fp16 sum per lane would pass 65504
  // and give inf; runs of 32 reach 32768 and give 262144 exactly in fp32.
  std::vector<float> a(3 * 256, 32.f), b(256 * 50, 32.f), c(150, 0.f);
  const PackedMatrix pa = PackedMatrix::PackConstantA(a.data(), 256, false, 3, 256, Products::kFp16);
  GemmA ga{nullptr, 0, false, &pa};
  GemmB gb{b.data(), 50, false, nullptr, nullptr};
  gemm(nullptr, 3, 50, 256, 1.f, ga, gb, 0.f, c.data(), 50);
  for (float v : c) ASSERT_EQ(v, 262144.f);
}

// The products a session computes at a precision: what the CPU has, kept only where it measured faster than fp32
// here; the same answer at every call (measured once), and fp32 wherever the instructions are missing.
TEST(Gemm, ProductsWorthComputingAreTheCpusAndMeasuredOnce) {
  for (Products p : {Products::kFp32, Products::kBf16, Products::kFp16}) {
    const Products got = products_worth(p);
    EXPECT_TRUE(got == products_here(p) || got == Products::kFp32) << static_cast<int>(p);
    EXPECT_EQ(products_worth(p), got);
  }
  EXPECT_EQ(products_worth(Products::kFp32), Products::kFp32);
  if (!cpu::avx512_bf16()) {
    EXPECT_EQ(products_worth(Products::kBf16), Products::kFp32);
  }
  if (!cpu::avx512_fp16()) {
    EXPECT_EQ(products_worth(Products::kFp16), Products::kFp32);
  }
  EXPECT_EQ(products_named("bf16"), Products::kBf16);
  EXPECT_EQ(products_named("fp16"), Products::kFp16);
  EXPECT_EQ(products_named(""), Products::kFp32);
}

TEST(Gemm, LargeShapesUseEveryThread) {
  std::mt19937 rng(7);
  ThreadPool pool2(2);
  for (int mode = 0; mode < 5; ++mode) {
    run_case(Case{257, 613, 530, false, false, 1.f, 0.f, 0, Epilogue::Bias::kPerRow, Activation::kRelu, mode},
             &pool2, rng);
    run_case(Case{96, 1100, 77, mode % 2 == 1, true, 1.f, 1.f, 3, Epilogue::Bias::kPerCol, Activation::kNone, mode},
             &pool2, rng);
  }
}

TEST(Gemm, SingleColumnUsesMatrixVectorPath) {
  std::mt19937 rng(17);
  ThreadPool pool2(2);
  for (int mode : {0, 1, 2, 4}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        run_case(Case{37, 1, 300, ta, tb, 0.5f, 0.25f, 2, Epilogue::Bias::kPerRow, Activation::kRelu, mode}, &pool2,
                 rng);
        run_case(Case{3000, 1, 700, ta, tb, 1.f, 0.f, 0, Epilogue::Bias::kPerCol, Activation::kNone, mode}, &pool2,
                 rng);
      }
    }
  }
}

TEST(Gemm, ZeroKScalesCAndAppliesEpilogue) {
  std::mt19937 rng(3);
  run_case(Case{5, 7, 0, false, false, 1.f, 0.5f, 0, Epilogue::Bias::kPerCol, Activation::kClip, 0}, nullptr, rng);
  run_case(Case{5, 7, 0, false, false, 1.f, 0.f, 0, Epilogue::Bias::kNone, Activation::kNone, 0}, nullptr, rng);
}

// The Sigmoid and Swish epilogues compute the Sigmoid operator's logistic to the bit (a model that quantizes the
// result turns a last-bit difference into a step), on every tile shape and on the rows past full vectors.
TEST(Gemm, SigmoidAndSwishEpiloguesEqualTheSigmoidOperatorToTheBit) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  const int64_t m = 19, n = 53, k = 37;
  std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
  for (float& v : a) v = u(rng);
  for (float& v : b) v = u(rng);
  ThreadPool pool(2);
  std::vector<float> plain(static_cast<size_t>(m * n));
  sgemm(&pool, false, false, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, plain.data(), n);
  for (Activation act : {Activation::kSigmoid, Activation::kSwish}) {
    Epilogue ep;
    ep.act = act;
    std::vector<float> c(static_cast<size_t>(m * n));
    gemm(&pool, m, n, k, 1.f, GemmA{a.data(), k, false, nullptr}, GemmB{b.data(), n, false, nullptr, nullptr}, 0.f,
         c.data(), n, ep);
    int bad = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      const float s = fastmath::logistic(plain[i]);
      const float want = act == Activation::kSwish ? plain[i] * s : s;
      if (std::memcmp(&c[i], &want, sizeof(float)) != 0 && bad++ < 3) {
        ADD_FAILURE() << "activation " << static_cast<int>(act) << " [" << i << "]: " << c[i] << " vs " << want;
      }
    }
  }
}

TEST(Gemm, BetaZeroIgnoresNaNInOutput) {
  std::vector<float> a = {1, 2, 3, 4}, b = {1, 0, 0, 1}, c(4, std::nanf(""));
  sgemm(nullptr, false, false, 2, 2, 2, 1.f, a.data(), 2, b.data(), 2, 0.f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace tessera::kernels

// Constants packed the same way share one packed copy (the plans of one session for its input shapes); other values,
// even at the same address, get their own.
TEST(Gemm, PackedConstantsAreSharedWhileHeldAndNeverStale) {
  std::vector<float> w(96 * 80);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 13) - 6.f;
  using tessera::kernels::PackedMatrix;
  PackedMatrix a = PackedMatrix::PackConstantB(w.data(), 80, false, 96, 80);
  PackedMatrix b = PackedMatrix::PackConstantB(w.data(), 80, false, 96, 80);
  EXPECT_EQ(a.data(), b.data());
  EXPECT_NE(PackedMatrix::PackConstantB(w.data(), 80, true, 80, 96).data(), a.data());  // another layout
  EXPECT_NE(PackedMatrix::PackConstantA(w.data(), 80, false, 96, 80).data(), a.data());  // another side
  const PackedMatrix plain = PackedMatrix::PackB(w.data(), 80, false, 96, 80);
  w[5] += 1.f;  // new values at the same address: packed anew, and right
  PackedMatrix c = PackedMatrix::PackConstantB(w.data(), 80, false, 96, 80);
  EXPECT_NE(c.data(), a.data());
  const PackedMatrix fresh = PackedMatrix::PackB(w.data(), 80, false, 96, 80);
  EXPECT_EQ(std::memcmp(c.data(), fresh.data(), c.bytes()), 0);
  EXPECT_NE(std::memcmp(c.data(), plain.data(), c.bytes()), 0);
}
