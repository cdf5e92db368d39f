#include <gtest/gtest.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"
#include "ops/node_runner.h"
#include "unit/op_test_util.h"
#include "util/cpu_isa.h"
#include "util/thread_pool.h"

namespace tessera {
namespace {

using testutil::expect_close;

Node make_node(const std::string& op, int64_t axis, bool set_axis = true) {
  Node n;
  n.name = "n";
  n.op_type = op;
  n.inputs = {"x"};
  n.outputs = {"y"};
  if (set_axis) {
    Attribute a;
    a.kind = Attribute::Kind::kInt;
    a.i = axis;
    n.attrs["axis"] = a;
  }
  return n;
}

std::vector<float> random_vec(size_t n, float scale = 3.f, unsigned seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Reference on [outer, n, inner] in double.
std::vector<double> reference(const std::vector<float>& x, int64_t outer, int64_t n, int64_t inner, bool log) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < n; ++j) m = std::max<double>(m, x[(o * n + j) * inner + i]);
      for (int64_t j = 0; j < n; ++j) s += std::exp(x[(o * n + j) * inner + i] - m);
      for (int64_t j = 0; j < n; ++j) {
        double v = x[(o * n + j) * inner + i] - m;
        y[(o * n + j) * inner + i] = log ? v - std::log(s) : std::exp(v) / s;
      }
    }
  }
  return y;
}

TEST(Softmax, LastAxisMatchesReferenceOnLongRows) {
  ThreadPool pool(2);
  auto x = random_vec(8 * 133);
  auto out = run_node_once(make_node("Softmax", -1), 13, {Tensor::FromVector(x, {8, 133})}, &pool);
  ASSERT_TRUE(out.ok()) << out.status().message();
  expect_close(out.value()[0], reference(x, 8, 133, 1, false), 1e-7);
}

// A float Softmax over the last axis rounds as ONNX Runtime's AVX-512 softmax does (softmax_row.h: sum_exp16,
// row_exp_shift_sum), checked against that arithmetic written out one element at a time: exp(x - max) by its
// polynomial, the sum as 16 lanes added vector by vector and reduced in its order, then times 1 / sum. Rows of 64
// (full vectors), 133 (a tail) and 5. (Where the CPU lacks AVX-512 the kernels' exp is another one: skipped.)
TEST(Softmax, LastAxisRoundsLikeOnnxRuntimeToTheLastBit) {
  if (!cpu::avx512()) GTEST_SKIP() << "AVX-512 kernels only";
  auto fma = [](float a, float b, float c) { return std::fma(a, b, c); };
  auto sum_exp = [&](float x) {
    const float bias = 12582912.0f;
    x = std::max(-103.9720840454f, x);
    volatile float biased = fma(x, 1.44269504088896341f, bias);
    const float m = biased - bias;
    x = fma(m, -6.93145752e-1f, x);
    x = fma(m, -1.42860677e-6f, x);
    float p = 0x1.694000p-10f;
    p = fma(p, x, 0x1.125edcp-7f);
    p = fma(p, x, 0x1.555b5ap-5f);
    p = fma(p, x, 0x1.555450p-3f);
    p = fma(p, x, 0x1.fffff6p-2f);
    p = fma(p, x, 1.0f);
    p = fma(p, x, 1.0f);
    return std::ldexp(p, static_cast<int>(m));
  };
  ThreadPool pool(2);
  for (int64_t n : {64, 133, 5}) {
    auto x = random_vec(static_cast<size_t>(3 * n), 6.f, 7);
    auto out = run_node_once(make_node("Softmax", -1), 13, {Tensor::FromVector(x, {3, n})}, &pool);
    ASSERT_TRUE(out.ok()) << out.status().message();
    for (int64_t r = 0; r < 3; ++r) {
      const float* xr = x.data() + r * n;
      float mx = xr[0];
      for (int64_t i = 1; i < n; ++i) mx = std::max(mx, xr[i]);
      std::vector<float> e(static_cast<size_t>(n));
      float lane[16] = {};
      for (int64_t i = 0; i < n; ++i) {
        e[static_cast<size_t>(i)] = sum_exp(xr[i] + -mx);
        lane[i % 16] += e[static_cast<size_t>(i)];
      }
      volatile float a[8];
      for (int j = 0; j < 8; ++j) a[j] = lane[j + 8] + lane[j];
      volatile float a01 = a[0] + a[1], a23 = a[2] + a[3], a45 = a[4] + a[5], a67 = a[6] + a[7];
      volatile float lo = a01 + a23, hi = a45 + a67;
      const float inv = 1.0f / (lo + hi);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(out.value()[0].data<float>()[r * n + i], e[static_cast<size_t>(i)] * inv)
            << "n " << n << " row " << r << " [" << i << "]";
      }
    }
  }
}

TEST(Softmax, MiddleAxisOpset13ReducesOnlyThatDimension) {
  auto x = random_vec(3 * 4 * 300);
  auto out = run_node_once(make_node("Softmax", 1), 13, {Tensor::FromVector(x, {3, 4, 300})});
  ASSERT_TRUE(out.ok()) << out.status().message();
  expect_close(out.value()[0], reference(x, 3, 4, 300, false), 1e-7);
}

TEST(Softmax, Opset11CoercesTo2DAtAxis) {
  auto x = random_vec(3 * 4 * 5);
  // Default axis 1 before opset 13: rows of 4*5 elements.
  auto out = run_node_once(make_node("Softmax", 0, false), 11, {Tensor::FromVector(x, {3, 4, 5})});
  ASSERT_TRUE(out.ok()) << out.status().message();
  expect_close(out.value()[0], reference(x, 3, 20, 1, false), 1e-7);
}

TEST(Softmax, LargeNumbersStayFinite) {
  std::vector<float> x = {10000.f, 10001.f, 10002.f, 10003.f};
  auto out = run_node_once(make_node("Softmax", -1), 13, {Tensor::FromVector(x, {1, 4})});
  ASSERT_TRUE(out.ok());
  expect_close(out.value()[0], {0.0320586, 0.08714432, 0.23688284, 0.64391428}, 1e-6);
}

// A masked attention row (scores of -10000 beside ordinary ones), last axis and a middle axis: the masked
// probabilities are exactly 0, never denormals, and the others match the reference. The rows are computed with
// denormal results flushed (softmax_row.h: FlushDenormals; the exponentials of masked scores were denormals, each a
// microcode assist); the caller's floating-point modes must be left as they were, on every thread that ran rows.
TEST(Softmax, MaskedScoresGiveZeroNotDenormals) {
  ThreadPool pool(2);
  std::vector<float> x(4 * 40);
  for (size_t i = 0; i < x.size(); ++i) x[i] = i % 40 >= 30 ? -10000.f : 0.05f * static_cast<float>(i % 7);
  const unsigned csr = _mm_getcsr();
  for (const int64_t axis : {int64_t{-1}, int64_t{1}}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    const Dims dims = axis == -1 ? Dims{4, 40} : Dims{1, 40, 4};
    std::vector<float> xin = x;
    if (axis == 1) {  // the same rows laid out [1, 40, 4]: row r's element j at j * 4 + r
      for (int64_t r = 0; r < 4; ++r) {
        for (int64_t j = 0; j < 40; ++j) xin[static_cast<size_t>(j * 4 + r)] = x[static_cast<size_t>(r * 40 + j)];
      }
    }
    auto out = run_node_once(make_node("Softmax", axis), 13, {Tensor::FromVector(xin, dims)}, &pool);
    ASSERT_TRUE(out.ok()) << out.status().message();
    const Tensor& y = out.value()[0];
    for (int64_t i = 0; i < y.numel(); ++i) {
      const float v = y.data<float>()[i];
      EXPECT_NE(std::fpclassify(v), FP_SUBNORMAL) << "element " << i;
      const int64_t j = axis == -1 ? i % 40 : i / 4;
      if (j >= 30) {
        EXPECT_EQ(v, 0.f) << "element " << i;
      }
    }
    expect_close(y, axis == -1 ? reference(xin, 4, 40, 1, false) : reference(xin, 1, 40, 4, false), 1e-7);
  }
  EXPECT_EQ(_mm_getcsr() & ~0x3Fu, csr & ~0x3Fu);  // the modes (the exception flags are sticky: the reference's exp)
}

TEST(Softmax, DoubleAndHalfInputs) {
  auto x = random_vec(2 * 7);
  std::vector<double> xd(x.begin(), x.end());
  auto out = run_node_once(make_node("Softmax", 0), 13, {Tensor::FromVector(xd, {2, 7})});
  ASSERT_TRUE(out.ok());
  expect_close(out.value()[0], reference(x, 1, 2, 7, false), 1e-12);
  std::vector<Float16> xh;
  for (float v : x) xh.push_back(Float16(v));
  std::vector<float> xr;
  for (auto h : xh) xr.push_back(float(h));
  auto outh = run_node_once(make_node("Softmax", -1), 13, {Tensor::FromVector(xh, {2, 7})});
  ASSERT_TRUE(outh.ok());
  expect_close(outh.value()[0], reference(xr, 2, 7, 1, false), 2e-3);
}

TEST(LogSoftmax, LastAndMiddleAxes) {
  auto x = random_vec(5 * 6 * 7, 20.f);
  auto a = run_node_once(make_node("LogSoftmax", -1), 13, {Tensor::FromVector(x, {5, 6, 7})});
  ASSERT_TRUE(a.ok());
  expect_close(a.value()[0], reference(x, 30, 7, 1, true), 1e-5);
  auto b = run_node_once(make_node("LogSoftmax", 0), 13, {Tensor::FromVector(x, {5, 6, 7})});
  ASSERT_TRUE(b.ok());
  expect_close(b.value()[0], reference(x, 1, 5, 42, true), 1e-5);
}

TEST(Hardmax, MarksFirstMaximumOnly) {
  std::vector<float> x = {1, 3, 3, 2, 5, 0, 0, 5};
  auto out = run_node_once(make_node("Hardmax", -1), 13, {Tensor::FromVector(x, {2, 4})});
  ASSERT_TRUE(out.ok());
  expect_close(out.value()[0], {0, 1, 0, 0, 1, 0, 0, 0}, 0);
  auto axis0 = run_node_once(make_node("Hardmax", 0), 13, {Tensor::FromVector(x, {2, 4})});
  ASSERT_TRUE(axis0.ok());
  expect_close(axis0.value()[0], {0, 1, 1, 0, 1, 0, 0, 1}, 0);
}

TEST(Softmax, RejectsOutOfRangeAxis) {
  auto out = run_node_once(make_node("Softmax", 2), 13, {Tensor::FromVector(std::vector<float>{1, 2}, {1, 2})});
  EXPECT_FALSE(out.ok());
}

}  // namespace
}  // namespace tessera
