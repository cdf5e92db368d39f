#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"
#include "ops/node_runner.h"
#include "ops/op_registry.h"
#include "unit/op_test_util.h"
#include "util/thread_pool.h"

namespace tessera {
namespace {

using testutil::set_int;
using testutil::set_float;
using testutil::set_ints;
using testutil::expect_close;
using testutil::random_vec;

Node make_node(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs) {
  Node n;
  n.name = "n";
  n.op_type = op;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  return n;
}

// Normalises each of `rows` rows of `inner` values (population variance).
std::vector<double> normalize_rows(const std::vector<float>& x, int64_t rows, int64_t inner, double eps,
                                   std::vector<double>* means = nullptr, std::vector<double>* rstds = nullptr) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < inner; ++i) m += x[r * inner + i];
    m /= inner;
    for (int64_t i = 0; i < inner; ++i) v += (x[r * inner + i] - m) * (x[r * inner + i] - m);
    v /= inner;
    double rs = 1.0 / std::sqrt(v + eps);
    for (int64_t i = 0; i < inner; ++i) y[r * inner + i] = (x[r * inner + i] - m) * rs;
    if (means) means->push_back(m);
    if (rstds) rstds->push_back(rs);
  }
  return y;
}

TEST(BatchNormalization, InferenceUsesRunningStatistics) {
  // x: [2, 2, 1, 2]
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};
  Node n = make_node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y"});
  auto out = run_node_once(n, 15,
                           {Tensor::FromVector(x, {2, 2, 1, 2}), Tensor::FromVector<float>({1, 2}, {2}),
                            Tensor::FromVector<float>({0, 1}, {2}), Tensor::FromVector<float>({1, 2}, {2}),
                            Tensor::FromVector<float>({4, 1}, {2})});
  ASSERT_TRUE(out.ok()) << out.status().message();
  std::vector<double> ref;
  const double s[] = {1, 2}, b[] = {0, 1}, m[] = {1, 2}, v[] = {4, 1};
  for (int i = 0; i < 8; ++i) {
    int c = (i / 2) % 2;
    ref.push_back((x[i] - m[c]) / std::sqrt(v[c] + 1e-5) * s[c] + b[c]);
  }
  expect_close(out.value()[0], ref, 1e-5);
}

// Inference rounds each step to float in ONNX Runtime's order (a = scale * (1 / sqrt(var + eps)), b = bias - mean * a,
// y = x * a + b, no FMA), so its output is bit-identical: a quantized model turns a last-bit difference into a whole
// quantization step.
TEST(BatchNormalization, InferenceRoundsLikeOnnxRuntimeToTheLastBit) {
  const int64_t c = 3, inner = 37;  // 37: the vector loop's tail too
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-2.f, 2.f), pos(0.1f, 3.f);
  std::vector<float> x(static_cast<size_t>(2 * c * inner)), s(c), b(c), m(c), v(c);
  for (float& e : x) e = dist(rng);
  for (int64_t k = 0; k < c; ++k) s[k] = dist(rng), b[k] = dist(rng), m[k] = dist(rng), v[k] = pos(rng);
  Node n = make_node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y"});
  set_float(n, "epsilon", 1e-3f);
  auto out = run_node_once(n, 15,
                           {Tensor::FromVector(x, {2, c, inner}), Tensor::FromVector(s, {c}),
                            Tensor::FromVector(b, {c}), Tensor::FromVector(m, {c}), Tensor::FromVector(v, {c})});
  ASSERT_TRUE(out.ok()) << out.status().message();
  const float* y = out.value()[0].data<float>();
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t k = (i / inner) % c;
    volatile float a = (1.0f / std::sqrt(v[k] + 1e-3f)) * s[k];  // volatile: each product rounded on its own
    volatile float ma = m[k] * a;
    const float bk = b[k] - ma;
    volatile float xa = x[i] * a;
    ASSERT_EQ(y[i], xa + bk) << "element " << i;
  }
}

// With constant scale, B, mean and var (as exporters write them) the kernel works out a and b once; its output has
// ONNX Runtime's bits (as above) for [N, C, L], [N, C] and [N, C, 1], the last two one element per channel.
TEST(BatchNormalization, ConstantParametersRoundLikeOnnxRuntimeToTheLastBit) {
  const int64_t c = 5;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> dist(-2.f, 2.f), pos(0.1f, 3.f);
  std::vector<float> s(c), b(c), m(c), v(c);
  for (int64_t k = 0; k < c; ++k) s[k] = dist(rng), b[k] = dist(rng), m[k] = dist(rng), v[k] = pos(rng);
  const Tensor ts = Tensor::FromVector(s, {c}), tb = Tensor::FromVector(b, {c}), tm = Tensor::FromVector(m, {c}),
               tv = Tensor::FromVector(v, {c});
  ThreadPool pool(2);
  for (const Dims& d : {Dims{2, c, 37}, Dims{4, c}, Dims{1, c, 1}}) {
    Tensor x(DType::kFloat32, d);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = dist(rng);
    Node n = make_node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y"});
    KernelInit init{n, 15, {}, {nullptr, &ts, &tb, &tm, &tv}};
    for (const Tensor* t : std::vector<const Tensor*>{&x, &ts, &tb, &tm, &tv}) {
      init.in_info.push_back(ValueInfo{t->dtype(), Shape::FromDims(t->dims())});
    }
    auto kernel = create_kernel(*OpRegistry::instance().find("", "BatchNormalization"), init);
    ASSERT_TRUE(kernel.ok()) << kernel.status().message();
    Tensor y(DType::kFloat32, d);
    KernelContext ctx(n, {&x, &ts, &tb, &tm, &tv}, {&y}, &pool, nullptr);
    ASSERT_TRUE(kernel.value()->run(ctx).ok());
    const int64_t inner = x.numel() / (d[0] * c);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const size_t k = static_cast<size_t>((i / inner) % c);
      volatile float a = (1.0f / std::sqrt(v[k] + 1e-5f)) * s[k];  // volatile: each product rounded on its own
      volatile float ma = m[k] * a;
      const float bk = b[k] - ma;
      volatile float xa = x.data<float>()[i] * a;
      ASSERT_EQ(y.data<float>()[i], xa + bk) << dims_str(d) << " element " << i;
    }
  }
}

TEST(BatchNormalization, TrainingModeOutputsUpdatedRunningStatistics) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};
  Node n = make_node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y", "rm", "rv"});
  set_int(n, "training_mode", 1);
  auto out = run_node_once(n, 15,
                           {Tensor::FromVector(x, {2, 2, 1, 2}), Tensor::FromVector<float>({1, 1}, {2}),
                            Tensor::FromVector<float>({0, 0}, {2}), Tensor::FromVector<float>({0, 0}, {2}),
                            Tensor::FromVector<float>({1, 1}, {2})});
  ASSERT_TRUE(out.ok()) << out.status().message();
  // Channel 0 holds {1, 2, 5, 6}: mean 3.5, var 4.25. Channel 1 {3, 4, 7, 8}: mean 5.5, var 4.25.
  expect_close(out.value()[1], {0.1 * 3.5, 0.1 * 5.5}, 1e-6);
  expect_close(out.value()[2], {0.9 + 0.1 * 4.25, 0.9 + 0.1 * 4.25}, 1e-6);
  EXPECT_NEAR(out.value()[0].as_double(0), (1 - 3.5) / std::sqrt(4.25 + 1e-5), 1e-5);
}

TEST(InstanceNormalization, NormalizesEachChannelOfEachSample) {
  auto x = random_vec(2 * 3 * 37);
  Node n = make_node("InstanceNormalization", {"x", "s", "b"}, {"y"});
  set_float(n, "epsilon", 0.01f);
  auto out = run_node_once(n, 6,
                           {Tensor::FromVector(x, {2, 3, 37}), Tensor::FromVector<float>({1, 2, 3}, {3}),
                            Tensor::FromVector<float>({0, -1, 1}, {3})});
  ASSERT_TRUE(out.ok()) << out.status().message();
  auto ref = normalize_rows(x, 6, 37, 0.01);
  for (size_t i = 0; i < ref.size(); ++i) {
    int c = static_cast<int>((i / 37) % 3);
    ref[i] = ref[i] * (c + 1) + (c == 0 ? 0 : c == 1 ? -1 : 1);
  }
  expect_close(out.value()[0], ref, 1e-5);
}

TEST(LayerNormalization, LastAxisWithMeanAndInvStdDevOutputs) {
  ThreadPool pool(2);
  auto x = random_vec(6 * 100);
  auto s = random_vec(100, 2), b = random_vec(100, 3);
  Node n = make_node("LayerNormalization", {"x", "s", "b"}, {"y", "mean", "rstd"});
  auto out = run_node_once(n, 17, {Tensor::FromVector(x, {2, 3, 100}), Tensor::FromVector(s, {100}),
                                   Tensor::FromVector(b, {100})}, &pool);
  ASSERT_TRUE(out.ok()) << out.status().message();
  std::vector<double> means, rstds;
  auto ref = normalize_rows(x, 6, 100, 1e-5, &means, &rstds);
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = ref[i] * s[i % 100] + b[i % 100];
  expect_close(out.value()[0], ref, 1e-5);
  EXPECT_EQ(out.value()[1].dims(), (Dims{2, 3, 1}));
  expect_close(out.value()[1], means, 1e-6);
  expect_close(out.value()[2], rstds, 1e-5);
}

// float LayerNormalization rounds as ONNX Runtime 1.31 does (norm_util.h: layernorm_row), checked against that
// arithmetic written out here with every step rounded on its own: rows of 256 (vector lanes only), 37 (a tail after
// the lanes) and 5 (its scalar path), with and without bias. A dynamically quantized Conformer requantizes every
// LayerNorm output: with this arithmetic its 36 quantized tensors equal ONNX Runtime's (STATUS.md).
TEST(LayerNormalization, FloatRowsRoundLikeOnnxRuntimeToTheLastBit) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-3.f, 3.f);
  for (int64_t n : {256, 37, 5}) {
    for (bool with_bias : {true, false}) {
      const int64_t rows = 3;
      std::vector<float> x(static_cast<size_t>(rows * n)), g(static_cast<size_t>(n)), b(static_cast<size_t>(n));
      for (float& v : x) v = dist(rng) + 0.5f;
      for (float& v : g) v = dist(rng);
      for (float& v : b) v = dist(rng);
      Node node = make_node("LayerNormalization", {"x", "g", "b"}, {"y", "m", "s"});
      if (!with_bias) node.inputs.pop_back();
      std::vector<Tensor> in = {Tensor::FromVector(x, {rows, n}), Tensor::FromVector(g, {n})};
      if (with_bias) in.push_back(Tensor::FromVector(b, {n}));
      auto out = run_node_once(node, 17, in);
      ASSERT_TRUE(out.ok()) << out.status().message();
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x.data() + r * n;
        volatile float mean, inv;
        if (n >= 8) {
          double sum = 0;
          for (int64_t i = 0; i < n; ++i) sum += xr[i];
          mean = static_cast<float>(sum / static_cast<double>(n));
          float lane[8] = {};
          int64_t i = 0;
          for (; i + 8 <= n; i += 8) {
            for (int j = 0; j < 8; ++j) {
              const float d = xr[i + j] - mean;
              lane[j] = std::fma(d, d, lane[j]);
            }
          }
          volatile float l4[4];
          for (int j = 0; j < 4; ++j) l4[j] = lane[j] + lane[j + 4];
          volatile float l02 = l4[0] + l4[2], l13 = l4[1] + l4[3];
          float sq = l02 + l13;
          for (; i < n; ++i) {
            const float d = xr[i] - mean;
            sq = std::fma(d, d, sq);
          }
          volatile float var = sq / static_cast<float>(n);
          volatile float ve = var + 1e-5f;
          inv = 1.f / std::sqrt(static_cast<float>(ve));
        } else {
          volatile float sum = 0.f, sq = 0.f;
          for (int64_t i = 0; i < n; ++i) {
            sum = sum + xr[i];
            volatile float p = xr[i] * xr[i];
            sq = sq + p;
          }
          mean = sum / static_cast<float>(n);
          volatile float mm = mean * mean;
          volatile float a = sq / static_cast<float>(n) - mm;
          volatile float d = std::sqrt(static_cast<float>(a + 1e-5f));
          inv = 1.f / d;
          for (int64_t i = 0; i < n; ++i) {
            volatile float t = (xr[i] - mean) / d;
            volatile float v = t * g[i];
            const float want = with_bias ? v + b[i] : v;
            ASSERT_EQ(out.value()[0].data<float>()[r * n + i], want) << "n " << n << " row " << r << " [" << i << "]";
          }
        }
        EXPECT_EQ(out.value()[1].data<float>()[r], mean) << "n " << n << " row " << r;
        EXPECT_EQ(out.value()[2].data<float>()[r], inv) << "n " << n << " row " << r;
        if (n < 8) continue;
        for (int64_t i = 0; i < n; ++i) {
          volatile float t = (xr[i] - mean) * inv;
          const float want = with_bias ? std::fma(static_cast<float>(t), g[i], b[i]) : static_cast<float>(t) * g[i];
          ASSERT_EQ(out.value()[0].data<float>()[r * n + i], want) << "n " << n << " row " << r << " [" << i << "]";
        }
      }
    }
  }
}

TEST(LayerNormalization, Axis1WithoutBiasAndBroadcastScale) {
  auto x = random_vec(2 * 3 * 4);
  Node n = make_node("LayerNormalization", {"x", "s"}, {"y"});
  set_int(n, "axis", 1);
  // Scale [4] broadcasts over the normalised [3, 4] block.
  std::vector<float> s = {1, 2, 3, 4};
  auto out = run_node_once(n, 17, {Tensor::FromVector(x, {2, 3, 4}), Tensor::FromVector(s, {4})});
  ASSERT_TRUE(out.ok()) << out.status().message();
  auto ref = normalize_rows(x, 2, 12, 1e-5);
  for (size_t i = 0; i < ref.size(); ++i) ref[i] *= s[i % 4];
  expect_close(out.value()[0], ref, 1e-5);
}

TEST(LayerNormalization, DoubleInput) {
  auto xf = random_vec(3 * 5);
  std::vector<double> x(xf.begin(), xf.end());
  Node n = make_node("LayerNormalization", {"x", "s"}, {"y"});
  auto out = run_node_once(n, 17, {Tensor::FromVector(x, {3, 5}), Tensor::FromVector<double>({1, 1, 1, 1, 1}, {5})});
  ASSERT_TRUE(out.ok()) << out.status().message();
  expect_close(out.value()[0], normalize_rows(xf, 3, 5, 1e-5), 1e-9);
}

TEST(LRN, MatchesSpecFormula) {
  auto x = random_vec(1 * 5 * 3);
  Node n = make_node("LRN", {"x"}, {"y"});
  set_int(n, "size", 3);
  set_float(n, "alpha", 0.1f);
  set_float(n, "beta", 0.75f);
  set_float(n, "bias", 2.f);
  auto out = run_node_once(n, 13, {Tensor::FromVector(x, {1, 5, 3})});
  ASSERT_TRUE(out.ok()) << out.status().message();
  std::vector<double> ref(x.size());
  for (int c = 0; c < 5; ++c) {
    for (int i = 0; i < 3; ++i) {
      double sq = 0;
      for (int k = std::max(0, c - 1); k <= std::min(4, c + 1); ++k) sq += double(x[k * 3 + i]) * x[k * 3 + i];
      ref[c * 3 + i] = x[c * 3 + i] / std::pow(2.0 + 0.1 / 3 * sq, 0.75);
    }
  }
  expect_close(out.value()[0], ref, 1e-6);
}

TEST(LpNormalization, L1AndL2AlongAxis) {
  std::vector<float> x = {3, 4, -1, 1};
  Node n = make_node("LpNormalization", {"x"}, {"y"});
  auto l2 = run_node_once(n, 13, {Tensor::FromVector(x, {2, 2})});
  ASSERT_TRUE(l2.ok());
  expect_close(l2.value()[0], {0.6, 0.8, -1 / std::sqrt(2.0), 1 / std::sqrt(2.0)}, 1e-6);
  set_int(n, "p", 1);
  set_int(n, "axis", 0);
  auto l1 = run_node_once(n, 13, {Tensor::FromVector(x, {2, 2})});
  ASSERT_TRUE(l1.ok());
  expect_close(l1.value()[0], {0.75, 0.8, -0.25, 0.2}, 1e-6);
}

TEST(MeanVarianceNormalization, DefaultAxesNormalizePerChannel) {
  auto x = random_vec(2 * 3 * 2 * 2);
  Node n = make_node("MeanVarianceNormalization", {"x"}, {"y"});
  auto out = run_node_once(n, 13, {Tensor::FromVector(x, {2, 3, 2, 2})});
  ASSERT_TRUE(out.ok()) << out.status().message();
  std::vector<double> ref(x.size());
  for (int c = 0; c < 3; ++c) {
    double m = 0, v = 0;
    for (int b = 0; b < 2; ++b) for (int i = 0; i < 4; ++i) m += x[(b * 3 + c) * 4 + i];
    m /= 8;
    for (int b = 0; b < 2; ++b) for (int i = 0; i < 4; ++i) v += std::pow(x[(b * 3 + c) * 4 + i] - m, 2);
    double sd = std::sqrt(v / 8) + 1e-9;
    for (int b = 0; b < 2; ++b) for (int i = 0; i < 4; ++i) ref[(b * 3 + c) * 4 + i] = (x[(b * 3 + c) * 4 + i] - m) / sd;
  }
  expect_close(out.value()[0], ref, 1e-5);
  set_ints(n, "axes", {1});
  auto per_pos = run_node_once(n, 13, {Tensor::FromVector(x, {2, 3, 2, 2})});
  ASSERT_TRUE(per_pos.ok());
}

}  // namespace
}  // namespace tessera

#include "ops/op_registry.h"

namespace tessera {
namespace {

TEST(BatchNormalization, Opset7SpatialZeroUsesPerElementParameters) {
  // x: [1, 2, 2]; parameters [2, 2] (C x spatial).
  Node n = make_node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y"});
  set_int(n, "spatial", 0);
  set_float(n, "epsilon", 0.f);
  auto out = run_node_once(n, 7,
                           {Tensor::FromVector<float>({1, 2, 3, 4}, {1, 2, 2}), Tensor::FromVector<float>({1, 2, 3, 4}, {2, 2}),
                            Tensor::FromVector<float>({0, 0, 0, 1}, {2, 2}), Tensor::FromVector<float>({1, 1, 1, 1}, {2, 2}),
                            Tensor::FromVector<float>({1, 4, 1, 4}, {2, 2})});
  ASSERT_TRUE(out.ok()) << out.status().message();
  expect_close(out.value()[0], {0, 1, 6, 7}, 1e-6);
}

TEST(LayerNormalization, CompileTimeInferenceKeepsSymbolicBatch) {
  const OpSchema* schema = OpRegistry::instance().find("", "LayerNormalization");
  ASSERT_NE(schema, nullptr);
  Node n = make_node("LayerNormalization", {"x", "s"}, {"y", "mean", "rstd"});
  Shape x({Dim::Symbol("batch"), Dim(128), Dim(768)});
  InferContext ctx(n, 17, {ValueInfo{DType::kFloat16, x}, ValueInfo{DType::kFloat16, Shape::FromDims({768})}}, {});
  ASSERT_TRUE(schema->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[0].shape.str(), "[batch,128,768]");
  EXPECT_EQ(ctx.outputs()[1].shape.str(), "[batch,128,1]");
  EXPECT_EQ(ctx.outputs()[1].dtype, DType::kFloat32);  // stash_type defaults to float
}

TEST(Softmax, CompileTimeInferenceAcceptsUnrankedInput) {
  const OpSchema* schema = OpRegistry::instance().find("", "Softmax");
  ASSERT_NE(schema, nullptr);
  Node n = make_node("Softmax", {"x"}, {"y"});
  InferContext ctx(n, 13, {ValueInfo{DType::kFloat32, Shape::Unranked()}}, {});
  ASSERT_TRUE(schema->infer(ctx).ok());
  EXPECT_FALSE(ctx.outputs()[0].shape.rank_known);
}

}  // namespace
}  // namespace tessera
