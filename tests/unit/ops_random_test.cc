// Random generators: output types and shapes, distribution statistics within
// loose bounds, determinism with a seed, fresh values without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"
#include "ops/op_registry.h"
#include "ops/node_runner.h"
#include "util/thread_pool.h"
#include "unit/op_test_util.h"

namespace tessera {
namespace {

using testutil::set_float;
using testutil::set_int;
using testutil::set_ints;

Node make_node(const std::string& op, std::vector<std::string> inputs) {
  Node n;
  n.name = "rng";
  n.op_type = op;
  n.inputs = std::move(inputs);
  n.outputs = {"y"};
  return n;
}

Tensor run1(const Node& n, const std::vector<Tensor>& in = {}, ThreadPool* pool = nullptr) {
  auto out = run_node_once(n, 17, in, pool);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? (*out)[0] : Tensor();
}

std::vector<double> values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = t.as_double(i);
  return v;
}

struct Moments {
  double mean = 0, var = 0, min = 0, max = 0;
};

Moments moments(const std::vector<double>& v) {
  Moments m;
  m.min = m.max = v.empty() ? 0.0 : v[0];
  for (double x : v) {
    m.mean += x;
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
  }
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= static_cast<double>(v.size());
  return m;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.dims() == b.dims() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

Node uniform_node(float low, float high, std::vector<int64_t> shape) {
  Node n = make_node("RandomUniform", {});
  set_float(n, "low", low);
  set_float(n, "high", high);
  set_ints(n, "shape", std::move(shape));
  return n;
}

TEST(RandomOps, UniformFillsTheRangeWithUniformStatistics) {
  for (int dtype : {1, 11, 10}) {
    Node n = uniform_node(-2.f, 3.f, {200, 500});
    set_int(n, "dtype", dtype);
    Tensor y = run1(n);
    ASSERT_EQ(y.dtype(), dtype_from_onnx(dtype));
    ASSERT_EQ(y.dims(), (Dims{200, 500}));
    Moments m = moments(values(y));
    EXPECT_GE(m.min, -2.0);
    EXPECT_LT(m.max, 3.0 + (dtype == 10 ? 1e-3 : 0.0));  // float16 may round up to high
    EXPECT_NEAR(m.mean, 0.5, 0.03) << dtype;
    EXPECT_NEAR(m.var, 25.0 / 12.0, 0.05) << dtype;
    EXPECT_LT(m.min, -1.99);
    EXPECT_GT(m.max, 2.99);
  }
}

TEST(RandomOps, NormalHasTheRequestedMeanAndScale) {
  for (int dtype : {1, 11}) {
    Node n = make_node("RandomNormal", {});
    set_float(n, "mean", 4.f);
    set_float(n, "scale", 0.5f);
    set_ints(n, "shape", {100001});
    set_int(n, "dtype", dtype);
    Tensor y = run1(n);
    ASSERT_EQ(y.dtype(), dtype_from_onnx(dtype));
    std::vector<double> v = values(y);
    Moments m = moments(v);
    EXPECT_NEAR(m.mean, 4.0, 0.01);
    EXPECT_NEAR(std::sqrt(m.var), 0.5, 0.01);
    // About 68.3% within one standard deviation.
    int64_t inside = 0;
    for (double x : v) inside += std::abs(x - 4.0) < 0.5;
    EXPECT_NEAR(static_cast<double>(inside) / static_cast<double>(v.size()), 0.6827, 0.01);
  }
}

TEST(RandomOps, SeededNodesRepeatAndUnseededNodesDiffer) {
  Node seeded = uniform_node(0.f, 1.f, {4096});
  set_float(seeded, "seed", 7.f);
  ThreadPool pool(2);
  Tensor a = run1(seeded);
  Tensor b = run1(seeded, {}, &pool);
  EXPECT_TRUE(same_bits(a, b)) << "a seed gives the same values regardless of threading";

  Node other = seeded;
  set_float(other, "seed", 8.f);
  EXPECT_FALSE(same_bits(a, run1(other)));

  Node unseeded = uniform_node(0.f, 1.f, {4096});
  EXPECT_FALSE(same_bits(run1(unseeded), run1(unseeded)));

  Node normal = make_node("RandomNormal", {});
  set_ints(normal, "shape", {3, 5});
  set_float(normal, "seed", 1.f);
  EXPECT_TRUE(same_bits(run1(normal), run1(normal)));
}

TEST(RandomOps, UnseededRunsFromSeveralThreadsGetDistinctValues) {
  Node n = uniform_node(0.f, 1.f, {64});
  std::vector<Tensor> results(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      auto out = run_node_once(n, 17, {});
      if (out.ok()) results[t] = (*out)[0];
    });
  }
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].defined());
    for (size_t j = i + 1; j < results.size(); ++j) EXPECT_FALSE(same_bits(results[i], results[j]));
  }
}

TEST(RandomOps, LikeVariantsTakeShapeAndDtypeFromTheInput) {
  Tensor x(DType::kFloat64, {2, 3, 4});
  Node u = make_node("RandomUniformLike", {"x"});
  Tensor y = run1(u, {x});
  EXPECT_EQ(y.dtype(), DType::kFloat64);
  EXPECT_EQ(y.dims(), (Dims{2, 3, 4}));

  Node nrm = make_node("RandomNormalLike", {"x"});
  set_int(nrm, "dtype", 10);
  y = run1(nrm, {Tensor(DType::kInt32, {5, 7})});
  EXPECT_EQ(y.dtype(), DType::kFloat16);
  EXPECT_EQ(y.dims(), (Dims{5, 7}));

  Node no_dtype = make_node("RandomNormalLike", {"x"});
  EXPECT_FALSE(run_node_once(no_dtype, 17, {Tensor(DType::kInt32, {5})}).ok())
      << "an integer input needs a float dtype attribute";
}

TEST(RandomOps, InferenceKeepsSymbolicShapesOfLikeInputs) {
  Node n = make_node("RandomUniformLike", {"x"});
  Shape s({Dim::Symbol("batch"), Dim(8)});
  InferContext ctx(n, 17, {{DType::kFloat32, s}}, {});
  const OpSchema* schema = OpRegistry::instance().find("", "RandomUniformLike");
  ASSERT_NE(schema, nullptr);
  ASSERT_TRUE(schema->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[0].shape.str(), s.str());
  EXPECT_EQ(ctx.outputs()[0].dtype, DType::kFloat32);
}

TEST(RandomOps, BernoulliDrawsOnesWithTheGivenProbability) {
  const int64_t count = 60000;
  std::vector<float> p(count);
  for (int64_t i = 0; i < count; ++i) p[static_cast<size_t>(i)] = i % 3 == 0 ? 0.f : (i % 3 == 1 ? 1.f : 0.3f);
  Tensor probs = Tensor::FromVector<float>(p, {count});
  for (int dtype : {0, 9, 6, 11}) {
    Node n = make_node("Bernoulli", {"p"});
    if (dtype != 0) set_int(n, "dtype", dtype);
    ThreadPool pool(2);
    Tensor y = run1(n, {probs}, &pool);
    ASSERT_EQ(y.dtype(), dtype == 0 ? DType::kFloat32 : dtype_from_onnx(dtype));
    ASSERT_EQ(y.numel(), count);
    int64_t ones_at_third = 0;
    for (int64_t i = 0; i < count; ++i) {
      const double v = y.as_double(i);
      ASSERT_TRUE(v == 0.0 || v == 1.0);
      if (i % 3 == 0) {
        ASSERT_EQ(v, 0.0);
      } else if (i % 3 == 1) {
        ASSERT_EQ(v, 1.0);
      } else {
        ones_at_third += v == 1.0;
      }
    }
    EXPECT_NEAR(static_cast<double>(ones_at_third) / (count / 3.0), 0.3, 0.015) << dtype;
  }
}

TEST(RandomOps, BernoulliWithASeedRepeats) {
  Tensor p = Tensor::FromVector<double>(std::vector<double>(1000, 0.5), {1000});
  Node n = make_node("Bernoulli", {"p"});
  set_float(n, "seed", 0.f);
  EXPECT_TRUE(same_bits(run1(n, {p}), run1(n, {p})));
}

TEST(RandomOps, MultinomialSamplesClassesBySoftmaxOfTheLogits) {
  const int64_t samples = 30000;
  const float kNegInf = -std::numeric_limits<float>::infinity();
  Tensor logits = Tensor::FromVector<float>(
      {std::log(0.1f), std::log(0.2f), std::log(0.7f), kNegInf, 5.f, kNegInf, 5.f, 5.f}, {2, 4});
  Node n = make_node("Multinomial", {"x"});
  set_int(n, "sample_size", samples);
  set_int(n, "dtype", 7);
  ThreadPool pool(2);
  Tensor y = run1(n, {logits}, &pool);
  ASSERT_EQ(y.dtype(), DType::kInt64);
  ASSERT_EQ(y.dims(), (Dims{2, samples}));
  std::vector<std::vector<int64_t>> counts(2, std::vector<int64_t>(4, 0));
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t s = 0; s < samples; ++s) {
      const int64_t c = y.data<int64_t>()[b * samples + s];
      ASSERT_GE(c, 0);
      ASSERT_LT(c, 4);
      ++counts[static_cast<size_t>(b)][static_cast<size_t>(c)];
    }
  }
  const double total = static_cast<double>(samples);
  EXPECT_NEAR(counts[0][0] / total, 0.1, 0.01);
  EXPECT_NEAR(counts[0][1] / total, 0.2, 0.01);
  EXPECT_NEAR(counts[0][2] / total, 0.7, 0.01);
  EXPECT_EQ(counts[0][3], 0) << "a -inf logit is never drawn";
  EXPECT_EQ(counts[1][1], 0);
  for (size_t c : {0u, 2u, 3u}) EXPECT_NEAR(counts[1][c] / total, 1.0 / 3.0, 0.015) << c;
}

TEST(RandomOps, MultinomialDefaultsToOneInt32Sample) {
  Node n = make_node("Multinomial", {"x"});
  Tensor y = run1(n, {Tensor::FromVector<double>({0.0, 0.0, 0.0}, {1, 3})});
  EXPECT_EQ(y.dtype(), DType::kInt32);
  EXPECT_EQ(y.dims(), (Dims{1, 1}));

  Node bad = make_node("Multinomial", {"x"});
  set_int(bad, "dtype", 1);
  EXPECT_FALSE(run_node_once(bad, 17, {Tensor::FromVector<float>({0.f, 0.f}, {1, 2})}).ok());
  EXPECT_FALSE(run_node_once(n, 17, {Tensor::FromVector<float>({0.f, 0.f}, {2})}).ok()) << "input must be 2-D";
}

TEST(RandomOps, RejectsNonFloatDtypesAndMissingShapes) {
  Node n = uniform_node(0.f, 1.f, {2});
  set_int(n, "dtype", 6);
  EXPECT_FALSE(run_node_once(n, 17, {}).ok());
  Node no_shape = make_node("RandomNormal", {});
  EXPECT_FALSE(run_node_once(no_shape, 17, {}).ok());
}

}  // namespace
}  // namespace tessera
