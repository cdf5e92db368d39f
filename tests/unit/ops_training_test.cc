// Optimizer ops of ai.onnx.preview.training against values computed with
// numpy from the ONNX reference formulas (including T > 0, where Adagrad's
// decay, Adam's bias correction and Momentum's beta apply).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
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
using testutil::set_string;

constexpr const char* kDomain = "ai.onnx.preview.training";

Node make_node(const std::string& op, int num_inputs, int num_outputs) {
  Node n;
  n.name = "opt";
  n.op_type = op;
  n.domain = kDomain;
  for (int i = 0; i < num_inputs; ++i) n.inputs.push_back("i" + std::to_string(i));
  for (int i = 0; i < num_outputs; ++i) n.outputs.push_back("o" + std::to_string(i));
  return n;
}

Tensor vec(const std::vector<float>& v) { return Tensor::FromVector<float>(v, {static_cast<int64_t>(v.size())}); }
Tensor dvec(const std::vector<double>& v) {
  return Tensor::FromVector<double>(v, {static_cast<int64_t>(v.size())});
}

template <class T>
void expect_values(const Tensor& t, const std::vector<double>& want, double tol) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size())) << t.str();
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(static_cast<double>(t.data<T>()[i]), want[i], tol * std::max(1.0, std::abs(want[i]))) << "at " << i;
  }
}

Node momentum_node(const std::string& mode) {
  Node n = make_node("Momentum", 5, 2);
  set_float(n, "alpha", 0.9f);
  set_float(n, "beta", 0.5f);
  set_float(n, "norm_coefficient", 0.01f);
  set_string(n, "mode", mode);
  return n;
}

std::vector<Tensor> momentum_inputs() {
  return {Tensor::Scalar<float>(0.1f), Tensor::Scalar<int64_t>(2), vec({1.2f, 2.8f, -0.5f}),
          vec({-0.94f, -2.5f, 0.7f}), vec({1.7f, 3.6f, -0.2f})};
}

TEST(TrainingOps, AreRegisteredInThePreviewTrainingDomain) {
  for (const char* op : {"Adagrad", "Adam", "Momentum"}) {
    EXPECT_NE(OpRegistry::instance().find(kDomain, op), nullptr) << op;
    EXPECT_EQ(OpRegistry::instance().find("", op), nullptr) << op;
  }
}

TEST(TrainingOps, AdagradDecaysTheLearningRateWithTheUpdateCount) {
  Node n = make_node("Adagrad", 5, 2);
  set_float(n, "decay_factor", 0.2f);
  set_float(n, "epsilon", 1e-5f);
  set_float(n, "norm_coefficient", 0.01f);
  auto out = run_node_once(n, 17,
                           {Tensor::Scalar<float>(0.5f), Tensor::Scalar<int64_t>(3), vec({1.5f, -2.0f, 0.25f, 3.0f}),
                            vec({0.3f, -1.2f, 2.0f, 0.0f}), vec({0.1f, 0.5f, 0.0f, 1.0f})});
  ASSERT_TRUE(out.ok()) << out.status().message();
  expect_values<float>((*out)[0], {1.2794642, -1.7296323, -0.06249845, 2.9906292}, 1e-6);
  expect_values<float>((*out)[1], {0.19922501, 1.9884001, 4.0100064, 1.0009}, 1e-6);
}

TEST(TrainingOps, AdagradUpdatesSeveralTensorsFromBlockedInputs) {
  // The ONNX test_adagrad_multiple case: inputs R, T, X1, X2, G1, G2, H1, H2.
  Node n = make_node("Adagrad", 8, 4);
  set_float(n, "decay_factor", 0.1f);
  set_float(n, "epsilon", 1e-5f);
  set_float(n, "norm_coefficient", 0.001f);
  auto out = run_node_once(n, 17,
                           {Tensor::Scalar<float>(0.1f), Tensor::Scalar<int64_t>(0), vec({1.f}), vec({1.f, 2.f}),
                            vec({-1.f}), vec({-1.f, -3.f}), vec({2.f}), vec({4.f, 1.f})});
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(out->size(), 4u);
  expect_values<float>((*out)[0], {1.0576962}, 1e-6);
  expect_values<float>((*out)[1], {1.0446854, 2.0948617}, 1e-6);
  expect_values<float>((*out)[2], {2.998001}, 1e-6);
  expect_values<float>((*out)[3], {4.998001, 9.988004}, 1e-6);
}

TEST(TrainingOps, AdamAppliesBiasCorrectionAndPostNormInDouble) {
  Node n = make_node("Adam", 6, 3);
  set_float(n, "alpha", 0.9f);
  set_float(n, "beta", 0.99f);
  set_float(n, "epsilon", 1e-8f);
  set_float(n, "norm_coefficient", 0.02f);
  set_float(n, "norm_coefficient_post", 0.1f);
  auto out = run_node_once(n, 17,
                           {Tensor::Scalar<double>(0.01), Tensor::Scalar<int64_t>(5), dvec({1.5, -2.0, 0.25}),
                            dvec({0.3, -1.2, 2.0}), dvec({0.2, -0.1, 0.0}), dvec({0.05, 0.3, 0.01})});
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ((*out)[0].dtype(), DType::kFloat64);
  expect_values<double>((*out)[0], {1.3453924337, -1.7981370743, 0.2206417257}, 1e-9);
  expect_values<double>((*out)[1], {0.213000003, -0.2140000271, 0.2005000478}, 1e-9);
  expect_values<double>((*out)[2], {0.0505889994, 0.3123759882, 0.0501002118}, 1e-9);
}

TEST(TrainingOps, AdamUsesSpecDefaultsWithoutBiasCorrectionAtFirstStep) {
  // The inputs of ONNX test_adam_multiple; epsilon (1e-6) and
  // norm_coefficient_post (0) take their defaults. (That case's expected data
  // was computed with epsilon 1e-2, which its model does not carry.)
  Node n = make_node("Adam", 10, 6);
  set_float(n, "alpha", 0.95f);
  set_float(n, "beta", 0.85f);
  set_float(n, "norm_coefficient", 0.001f);
  auto out = run_node_once(n, 17,
                           {Tensor::Scalar<float>(0.1f), Tensor::Scalar<int64_t>(0), vec({1.f}), vec({1.f, 2.f}),
                            vec({-1.f}), vec({-1.f, -3.f}), vec({2.f}), vec({4.f, 1.f}), vec({0.5f}),
                            vec({1.f, 10.f})});
  ASSERT_TRUE(out.ok()) << out.status().message();
  expect_values<float>((*out)[0], {0.75595933}, 1e-6);
  expect_values<float>((*out)[1], {0.62493914, 1.9745044}, 1e-6);
  expect_values<float>((*out)[2], {1.85005}, 1e-6);
  expect_values<float>((*out)[4], {0.5747002}, 1e-6);
  expect_values<float>((*out)[3], {3.75005, 0.80009997}, 1e-6);
  expect_values<float>((*out)[5], {0.9997002, 9.848201}, 1e-6);
}

TEST(TrainingOps, MomentumStandardScalesTheGradientByBetaAfterTheFirstStep) {
  auto out = run_node_once(momentum_node("standard"), 17, momentum_inputs());
  ASSERT_TRUE(out.ok()) << out.status().message();
  expect_values<float>((*out)[0], {1.0934, 2.5996, -0.51675}, 1e-6);
  expect_values<float>((*out)[1], {1.066, 2.0039997, 0.1675}, 1e-6);
}

TEST(TrainingOps, MomentumNesterovLooksAheadAlongTheNewMomentum) {
  auto out = run_node_once(momentum_node("nesterov"), 17, momentum_inputs());
  ASSERT_TRUE(out.ok()) << out.status().message();
  expect_values<float>((*out)[0], {1.1968601, 2.86684, -0.584575}, 1e-6);
  expect_values<float>((*out)[1], {1.066, 2.0039997, 0.1675}, 1e-6);
}

TEST(TrainingOps, MomentumFirstStepUsesUnitGradientCoefficient) {
  // ONNX test_momentum: T = 0 ignores beta = 0.1.
  Node n = momentum_node("standard");
  set_float(n, "alpha", 0.95f);
  set_float(n, "beta", 0.1f);
  set_float(n, "norm_coefficient", 0.001f);
  auto out = run_node_once(n, 17,
                           {Tensor::Scalar<float>(0.1f), Tensor::Scalar<int64_t>(0), vec({1.2f, 2.8f}),
                            vec({-0.94f, -2.5f}), vec({1.7f, 3.6f})});
  ASSERT_TRUE(out.ok()) << out.status().message();
  expect_values<float>((*out)[0], {1.13238, 2.70772}, 1e-6);
  expect_values<float>((*out)[1], {0.67620003, 0.9227998}, 1e-6);
}

TEST(TrainingOps, LargeTensorsUpdateIdenticallyOnAThreadPool) {
  const int64_t count = 100003;
  std::vector<float> x(count), g(count), v(count);
  for (int64_t i = 0; i < count; ++i) {
    x[static_cast<size_t>(i)] = static_cast<float>(i % 97) * 0.01f;
    g[static_cast<size_t>(i)] = static_cast<float>(i % 31) * -0.02f;
    v[static_cast<size_t>(i)] = static_cast<float>(i % 13) * 0.1f;
  }
  std::vector<Tensor> in = {Tensor::Scalar<float>(0.1f), Tensor::Scalar<int64_t>(4), vec(x), vec(g), vec(v)};
  ThreadPool pool(2);
  auto a = run_node_once(momentum_node("nesterov"), 17, in, &pool);
  auto b = run_node_once(momentum_node("nesterov"), 17, in);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int k = 0; k < 2; ++k) {
    ASSERT_EQ((*a)[static_cast<size_t>(k)].numel(), count);
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_EQ((*a)[static_cast<size_t>(k)].data<float>()[i], (*b)[static_cast<size_t>(k)].data<float>()[i]);
    }
  }
  // Spot-check one element against the formula.
  const size_t i = 12345;
  const float gr = 0.01f * x[i] + g[i];
  const float vn = 0.9f * v[i] + 0.5f * gr;
  EXPECT_NEAR((*a)[0].data<float>()[i], x[i] - 0.1f * (gr + 0.9f * vn), 1e-6);
}

TEST(TrainingOps, InferenceRejectsMalformedInputLists) {
  Node n = make_node("Adam", 7, 3);  // 5 tensors after R, T: not a multiple of 4
  std::vector<Tensor> in = {Tensor::Scalar<float>(0.1f), Tensor::Scalar<int64_t>(0), vec({1.f}), vec({1.f}),
                            vec({1.f}), vec({1.f}), vec({1.f})};
  EXPECT_FALSE(run_node_once(n, 17, in).ok());

  Node m = momentum_node("heavy-ball");
  EXPECT_FALSE(run_node_once(m, 17, momentum_inputs()).ok());

  Node s = momentum_node("standard");
  std::vector<Tensor> bad = momentum_inputs();
  bad[3] = vec({1.f, 2.f});  // G differs from X in shape
  EXPECT_FALSE(run_node_once(s, 17, bad).ok());
}

TEST(TrainingOps, InferencePropagatesSymbolicShapesPerOutputBlock) {
  Node n = make_node("Adagrad", 8, 4);
  Shape batch({Dim::Symbol("n"), Dim(3)});
  std::vector<ValueInfo> info = {{DType::kFloat32, Shape::FromDims({})},   {DType::kInt64, Shape::FromDims({})},
                                 {DType::kFloat32, Shape::FromDims({})},   {DType::kFloat32, batch},
                                 {DType::kFloat32, Shape::FromDims({})},   {DType::kFloat32, Shape::Unranked()},
                                 {DType::kFloat32, Shape::FromDims({})},   {DType::kFloat32, Shape::Unknown(2)}};
  InferContext ctx(n, 17, info, {});
  const OpSchema* schema = OpRegistry::instance().find(kDomain, "Adagrad");
  ASSERT_NE(schema, nullptr);
  ASSERT_TRUE(schema->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[1].shape.str(), batch.str());
  EXPECT_EQ(ctx.outputs()[3].shape.rank(), 2);
  EXPECT_EQ(ctx.outputs()[2].dtype, DType::kFloat32);
}

}  // namespace
}  // namespace tessera
