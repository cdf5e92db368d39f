#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"
#include "ops/node_runner.h"
#include "util/thread_pool.h"
#include "unit/op_test_util.h"

namespace tessera {
namespace {

using testutil::set_string;
using testutil::set_int;
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

Expected<std::vector<Tensor>> einsum(const std::string& eq, std::vector<Tensor> inputs) {
  std::vector<std::string> names;
  for (size_t i = 0; i < inputs.size(); ++i) names.push_back("x" + std::to_string(i));
  Node n = make_node("Einsum", names, {"y"});
  set_string(n, "equation", eq);
  return run_node_once(n, 12, inputs);
}

TEST(NegativeLogLikelihoodLoss, NoneSumMeanWithWeightsAndIgnoreIndex) {
  // input [2, 3, 2] (N, C, D), target [2, 2].
  auto x = random_vec(12);
  std::vector<int64_t> t = {0, 2, 1, 1};
  std::vector<float> w = {0.5f, 2.f, 1.f};
  auto xi = [&](int n, int c, int d) { return double(x[(n * 3 + c) * 2 + d]); };
  std::vector<double> none = {-xi(0, 0, 0) * w[0], -xi(0, 2, 1) * w[2], -xi(1, 1, 0) * w[1], -xi(1, 1, 1) * w[1]};
  Node n = make_node("NegativeLogLikelihoodLoss", {"x", "t", "w"}, {"loss"});
  set_string(n, "reduction", "none");
  std::vector<Tensor> in = {Tensor::FromVector(x, {2, 3, 2}), Tensor::FromVector(t, {2, 2}), Tensor::FromVector(w, {3})};
  auto a = run_node_once(n, 13, in);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a.value()[0].dims(), (Dims{2, 2}));
  expect_close(a.value()[0], none, 1e-6);

  set_string(n, "reduction", "mean");
  set_int(n, "ignore_index", 2);
  auto b = run_node_once(n, 13, in);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b.value()[0].rank(), 0);
  expect_close(b.value()[0], {(none[0] + none[2] + none[3]) / (w[0] + w[1] + w[1])}, 1e-6);

  set_string(n, "reduction", "sum");
  auto c = run_node_once(n, 13, in);
  ASSERT_TRUE(c.ok());
  expect_close(c.value()[0], {none[0] + none[2] + none[3]}, 1e-6);
}

TEST(NegativeLogLikelihoodLoss, RejectsOutOfRangeTarget) {
  Node n = make_node("NegativeLogLikelihoodLoss", {"x", "t"}, {"loss"});
  auto r = run_node_once(n, 13, {Tensor::FromVector(random_vec(6), {2, 3}), Tensor::FromVector<int64_t>({0, 3}, {2})});
  EXPECT_FALSE(r.ok());
}

TEST(SoftmaxCrossEntropyLoss, MeanLossAndLogProb) {
  auto x = random_vec(3 * 4);
  std::vector<int64_t> t = {1, 0, 3};
  Node n = make_node("SoftmaxCrossEntropyLoss", {"x", "t"}, {"loss", "logp"});
  auto r = run_node_once(n, 13, {Tensor::FromVector(x, {3, 4}), Tensor::FromVector(t, {3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::vector<double> logp(12);
  double loss = 0;
  for (int i = 0; i < 3; ++i) {
    double m = -INFINITY, s = 0;
    for (int c = 0; c < 4; ++c) m = std::max<double>(m, x[i * 4 + c]);
    for (int c = 0; c < 4; ++c) s += std::exp(x[i * 4 + c] - m);
    for (int c = 0; c < 4; ++c) logp[i * 4 + c] = x[i * 4 + c] - m - std::log(s);
    loss -= logp[i * 4 + t[i]];
  }
  expect_close(r.value()[0], {loss / 3}, 1e-6);
  expect_close(r.value()[1], logp, 1e-6);
}

TEST(Det, TwoByTwoAndBatchedThreeByThree) {
  auto a = run_node_once(make_node("Det", {"x"}, {"y"}), 11, {Tensor::FromVector<float>({1, 2, 3, 4}, {2, 2})});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a.value()[0].rank(), 0);
  expect_close(a.value()[0], {-2}, 1e-6);
  std::vector<float> m = {2, 0, 1, 1, 3, 2, 1, 1, 2, /**/ 0, 1, 0, 1, 0, 0, 0, 0, 1};
  auto b = run_node_once(make_node("Det", {"x"}, {"y"}), 11, {Tensor::FromVector(m, {2, 3, 3})});
  ASSERT_TRUE(b.ok());
  expect_close(b.value()[0], {6, -1}, 1e-5);
}

TEST(Einsum, BatchMatmulMatchesLoops) {
  auto a = random_vec(2 * 3 * 4, 1), b = random_vec(2 * 4 * 5, 2);
  auto r = einsum("bij, bjk -> bik", {Tensor::FromVector(a, {2, 3, 4}), Tensor::FromVector(b, {2, 4, 5})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::vector<double> ref(2 * 3 * 5, 0);
  for (int bb = 0; bb < 2; ++bb)
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 5; ++k)
        for (int j = 0; j < 4; ++j) ref[(bb * 3 + i) * 5 + k] += double(a[(bb * 3 + i) * 4 + j]) * b[(bb * 4 + j) * 5 + k];
  expect_close(r.value()[0], ref, 1e-5);
}

TEST(Einsum, TransposedOperandsAndOutput) {
  auto a = random_vec(3 * 4, 1), b = random_vec(5 * 4, 2);
  // C[k, i] = sum_j A[i, j] * B[k, j]
  auto r = einsum("ij,kj->ki", {Tensor::FromVector(a, {3, 4}), Tensor::FromVector(b, {5, 4})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::vector<double> ref(5 * 3, 0);
  for (int k = 0; k < 5; ++k)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) ref[k * 3 + i] += double(a[i * 4 + j]) * b[k * 4 + j];
  expect_close(r.value()[0], ref, 1e-5);
}

TEST(Einsum, ImplicitOutputInnerProductAndTrace) {
  auto r = einsum("i,i", {Tensor::FromVector<double>({1, 2, 3}, {3}), Tensor::FromVector<double>({4, 5, 6}, {3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value()[0].rank(), 0);
  expect_close(r.value()[0], {32}, 1e-12);
  auto tr = einsum("ii", {Tensor::FromVector<float>({1, 2, 3, 4}, {2, 2})});
  ASSERT_TRUE(tr.ok());
  expect_close(tr.value()[0], {5}, 1e-6);
  // Implicit output of "ji" is "ij": a transpose.
  auto t = einsum("ji", {Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3})});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t.value()[0].dims(), (Dims{3, 2}));
  expect_close(t.value()[0], {1, 4, 2, 5, 3, 6}, 0);
}

TEST(Einsum, EllipsisDiagonalAndBroadcast) {
  std::vector<float> x(2 * 3 * 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  auto d = einsum("...ii->...i", {Tensor::FromVector(x, {2, 3, 3})});
  ASSERT_TRUE(d.ok()) << d.status().message();
  expect_close(d.value()[0], {0, 4, 8, 9, 13, 17}, 0);
  // Broadcasting "..." dims: [2, 1, 2] with [3, 2] -> [2, 3].
  auto b = einsum("...j,...j->...", {Tensor::FromVector<float>({1, 2, 3, 4}, {2, 1, 2}),
                                      Tensor::FromVector<float>({1, 0, 0, 1, 1, 1}, {3, 2})});
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b.value()[0].dims(), (Dims{2, 3}));
  expect_close(b.value()[0], {1, 2, 3, 3, 4, 7}, 0);
}

TEST(Einsum, SumAndThreeOperands) {
  auto s = einsum("ij->i", {Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3})});
  ASSERT_TRUE(s.ok());
  expect_close(s.value()[0], {6, 15}, 0);
  auto t = einsum("i,j,k->ijk", {Tensor::FromVector<int64_t>({1, 2}, {2}), Tensor::FromVector<int64_t>({3}, {1}),
                                 Tensor::FromVector<int64_t>({1, 10}, {2})});
  ASSERT_TRUE(t.ok()) << t.status().message();
  expect_close(t.value()[0], {3, 30, 6, 60}, 0);
}

TEST(Einsum, RejectsMismatchedTermCount) {
  EXPECT_FALSE(einsum("ij,jk->ik", {Tensor::FromVector<float>({1, 2}, {1, 2})}).ok());
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(TfIdfVectorizer, CountsBigramsAcrossSkips) {
  Node n = make_node("TfIdfVectorizer", {"x"}, {"y"});
  set_string(n, "mode", "TF");
  set_int(n, "min_gram_length", 1);
  set_int(n, "max_gram_length", 2);
  set_int(n, "max_skip_count", 5);
  auto ints = [&](const std::string& name, std::vector<int64_t> v) {
    Attribute a;
    a.kind = Attribute::Kind::kInts;
    a.ints = std::move(v);
    n.attrs[name] = a;
  };
  ints("ngram_counts", {0, 4});
  ints("ngram_indexes", {0, 1, 2, 3, 4, 5, 6});
  ints("pool_int64s", {2, 3, 5, 4, 5, 6, 7, 8, 6, 7});
  std::vector<int32_t> x = {1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8};
  auto r = run_node_once(n, 9, {Tensor::FromVector(x, {12})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_close(r.value()[0], {0, 3, 1, 0, 1, 3, 1}, 0);
}

}  // namespace
}  // namespace tessera

#include "ops/op_registry.h"

namespace tessera {
namespace {

TEST(Einsum, CompileTimeInferenceKeepsSymbolsAndHandlesUnknownRank) {
  const OpSchema* schema = OpRegistry::instance().find("", "Einsum");
  ASSERT_NE(schema, nullptr);
  Node n = make_node("Einsum", {"a", "b"}, {"y"});
  set_string(n, "equation", "bij,bjk->bik");
  Shape a({Dim::Symbol("B"), Dim(3), Dim(4)}), b({Dim::Symbol("B"), Dim(4), Dim()});
  InferContext ctx(n, 12, {ValueInfo{DType::kFloat32, a}, ValueInfo{DType::kFloat32, b}}, {});
  ASSERT_TRUE(schema->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[0].shape.str(), "[B,3,?]");
  set_string(n, "equation", "...ij->...ji");
  Node n1 = make_node("Einsum", {"a"}, {"y"});
  n1.attrs = n.attrs;
  InferContext ctx1(n1, 12, {ValueInfo{DType::kFloat32, Shape::Unranked()}}, {});
  ASSERT_TRUE(schema->infer(ctx1).ok());
  EXPECT_FALSE(ctx1.outputs()[0].shape.rank_known);
}

TEST(NegativeLogLikelihoodLoss, CompileTimeInferenceOfNoneReduction) {
  const OpSchema* schema = OpRegistry::instance().find("", "NegativeLogLikelihoodLoss");
  Node n = make_node("NegativeLogLikelihoodLoss", {"x", "t"}, {"loss"});
  set_string(n, "reduction", "none");
  Shape x({Dim::Symbol("N"), Dim(5), Dim(7)});
  InferContext ctx(n, 13, {ValueInfo{DType::kFloat32, x}, ValueInfo{DType::kInt64, Shape::Unranked()}}, {});
  ASSERT_TRUE(schema->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[0].shape.str(), "[N,7]");
}

}  // namespace
}  // namespace tessera
