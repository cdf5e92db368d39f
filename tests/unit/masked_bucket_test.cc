// Masked shape buckets (passes/masked_bucket.h): the rewritten graph at the bucket's largest dims gives, at every
// size up to them, what the model gives at that size; refusals name why.
#include "passes/masked_bucket.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "api/session_setup.h"
#include "artifact/artifact.h"
#include "backends/backend.h"
#include "onnx/onnx_export.h"
#include "ops/masked_bucket.h"
#include "plugin_test_util.h"
#include "runtime/session.h"

namespace tessera {
namespace {

using plugintest::Builder;
using plugintest::native_outputs;
using plugintest::random_tensor;
using plugintest::scalar_tensor;

void set_ints(Node& n, const std::string& a, std::vector<int64_t> v) { n.attrs[a] = Attribute::Ints(std::move(v)); }

Shape symbolic(Dims d, const std::vector<std::pair<int, std::string>>& syms) {
  std::vector<Dim> dims(d.begin(), d.end());
  for (const auto& [k, s] : syms) dims[static_cast<size_t>(k)] = Dim::Symbol(s);
  return Shape(dims);
}

// Differences beyond 1e-5 relative (the kernels may block the work differently at another width); equal
// infinities are equal.
int64_t differ(const Tensor& a, const Tensor& b) {
  if (a.dims() != b.dims()) return -1;
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.as_double(i), y = b.as_double(i);
    n += !(x == y || (std::isfinite(y) && std::fabs(x - y) <= 1e-5 * std::max(1.0, std::fabs(y))));
  }
  return n;
}

// The bucket's outputs on a random input of `dims` (from `seed`) against the model's: as many, each equal.
void expect_models_results(const Graph& g, const Graph& bucket, const Dims& dims, unsigned seed) {
  const std::vector<Tensor> in{random_tensor(dims, seed)};
  const std::vector<Tensor> want = native_outputs(g, in), got = native_outputs(bucket, in);
  ASSERT_EQ(got.size(), g.outputs.size());
  ASSERT_EQ(want.size(), g.outputs.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(differ(got[k], want[k]), 0) << "output " << k;
}

// A text-line recogniser's shape: convolutions with end padding (masks needed after each pool), pools without,
// BatchNormalization and a residual Add, a 3x1 convolution that folds the height away, then a per-column classifier
// (Transpose, MatMul, Softmax: sliced back before them). x [1, 3, 8, W].
Graph recogniser() {
  Builder b;
  unsigned seed = 40;
  b.input("x", symbolic({1, 3, 8, 0}, {{3, "W"}}));
  b.constant("w1", random_tensor({8, 3, 3, 3}, ++seed, -0.5f, 0.5f));
  b.constant("b1", random_tensor({8}, ++seed));
  b.constant("w2", random_tensor({8, 8, 3, 3}, ++seed, -0.3f, 0.3f));
  b.constant("w3", random_tensor({8, 8, 3, 3}, ++seed, -0.3f, 0.3f));
  b.constant("w4", random_tensor({6, 8, 4, 1}, ++seed, -0.3f, 0.3f));
  for (const char* p : {"s", "bb", "mean"}) b.constant(p, random_tensor({8}, ++seed, 0.5f, 1.5f));
  b.constant("var", random_tensor({8}, ++seed, 0.5f, 1.5f));
  b.constant("fc", random_tensor({6, 5}, ++seed));
  set_ints(b.node("c1", "Conv", {"x", "w1", "b1"}, "t1"), "pads", {1, 1, 1, 1});
  b.node("r1", "Relu", {"t1"}, "t2");
  Node& p1 = b.node("p1", "MaxPool", {"t2"}, "t3");
  set_ints(p1, "kernel_shape", {2, 2}), set_ints(p1, "strides", {2, 2});
  set_ints(b.node("c2", "Conv", {"t3", "w2"}, "t4"), "pads", {1, 1, 1, 1});
  b.node("bn", "BatchNormalization", {"t4", "s", "bb", "mean", "var"}, "t5");
  b.node("r2", "Relu", {"t5"}, "t6");
  Node& c3 = b.node("c3", "Conv", {"t6", "w3"}, "t7");
  set_ints(c3, "pads", {2, 2, 2, 2}), set_ints(c3, "dilations", {2, 2});
  b.node("add", "Add", {"t7", "t3"}, "t8");
  set_ints(b.node("c4", "Conv", {"t8", "w4"}, "t9"), "pads", {0, 0, 0, 0});  // [1, 6, 1, W/2]
  b.node("sq", "Reshape", {"t9", "shape"}, "t10");
  Tensor shape(DType::kInt64, Dims{3});
  shape.data<int64_t>()[0] = 1, shape.data<int64_t>()[1] = 6, shape.data<int64_t>()[2] = -1;
  b.constant("shape", shape);
  set_ints(b.node("tr", "Transpose", {"t10"}, "t11"), "perm", {0, 2, 1});
  b.node("mm", "MatMul", {"t11", "fc"}, "t12");
  b.node("sm", "Softmax", {"t12"}, "y");
  return b.done({"y", "t9"});
}

// Strided convolutions over two varying dims (a detector's backbone): x [1, 3, H, W], output [1, 4, H/4, W/4].
Graph detector() {
  Builder b;
  unsigned seed = 70;
  b.input("x", symbolic({1, 3, 0, 0}, {{2, "H"}, {3, "W"}}));
  b.constant("w1", random_tensor({8, 3, 3, 3}, ++seed, -0.5f, 0.5f));
  b.constant("w2", random_tensor({8, 8, 3, 3}, ++seed, -0.3f, 0.3f));
  b.constant("w3", random_tensor({4, 8, 1, 1}, ++seed, -0.3f, 0.3f));
  Node& c1 = b.node("c1", "Conv", {"x", "w1"}, "t1");
  set_ints(c1, "pads", {1, 1, 1, 1}), set_ints(c1, "strides", {2, 2});
  b.node("r1", "Relu", {"t1"}, "t2");
  Node& c2 = b.node("c2", "Conv", {"t2", "w2"}, "t3");
  set_ints(c2, "pads", {1, 1, 1, 1}), set_ints(c2, "strides", {2, 2});
  b.node("r2", "Relu", {"t3"}, "t4");
  b.node("c3", "Conv", {"t4", "w3"}, "t5");
  b.node("sg", "Sigmoid", {"t5"}, "y");
  return b.done({"y"});
}

TEST(MaskedBucket, EverySizeUpToTheBucketGivesTheModelsResults) {
  const Graph g = recogniser();
  auto bucket = masked_bucket_graph(g, {{1, 3, 8, 40}});
  ASSERT_TRUE(bucket.ok()) << bucket.status().message();
  int masks = 0, multiplies = 0, slices = 0;
  for (const Node& n : bucket->nodes) {
    masks += n.op_type == "ValidMask", slices += n.op_type == "SliceValid";
    multiplies += n.op_type == "Mul" && n.inputs[1].find("_mask") != std::string::npos;
  }
  // Masked before c2 (after the pool) and c3 (after BatchNormalization's Relu): one mask, as both are W/2 wide (c2
  // keeps the size); the Add and c4 (no end padding) need none. Slices before the Reshape and at the output t9.
  EXPECT_EQ(masks, 1) << print_graph(*bucket);
  EXPECT_EQ(multiplies, 2) << print_graph(*bucket);
  EXPECT_EQ(slices, 2) << print_graph(*bucket);
  EXPECT_EQ(bucket->inputs, g.inputs);
  EXPECT_EQ(bucket->outputs, g.outputs);
  for (int64_t w = 4; w <= 40; ++w) {
    SCOPED_TRACE("W = " + std::to_string(w));
    expect_models_results(g, *bucket, {1, 3, 8, w}, static_cast<unsigned>(100 + w));
  }
}

// A per-column classifier after the convolutions (Squeeze, Transpose, MatMul by a constant, bias, Softmax over the
// classes) keeps the column axis local: it runs padded too, and only the output is sliced.
TEST(MaskedBucket, APerColumnClassifierRunsPaddedAndOnlyTheOutputIsSliced) {
  Builder b;
  unsigned seed = 90;
  b.input("x", symbolic({1, 3, 4, 0}, {{3, "W"}}));
  b.constant("w", random_tensor({6, 3, 4, 3}, ++seed, -0.5f, 0.5f));
  b.constant("fc", random_tensor({6, 5}, ++seed));
  b.constant("fb", random_tensor({5}, ++seed));
  Tensor axes(DType::kInt64, Dims{1});
  axes.data<int64_t>()[0] = 2;
  b.constant("axes", axes);
  set_ints(b.node("c", "Conv", {"x", "w"}, "t1"), "pads", {0, 1, 0, 1});  // [1, 6, 1, W]
  b.node("sq", "Squeeze", {"t1", "axes"}, "t2");                          // [1, 6, W]
  set_ints(b.node("tr", "Transpose", {"t2"}, "t3"), "perm", {0, 2, 1});   // [1, W, 6]
  b.node("mm", "MatMul", {"t3", "fc"}, "t4");
  b.node("add", "Add", {"t4", "fb"}, "t5");
  b.node("sm", "Softmax", {"t5"}, "y");  // over the classes
  const Graph g = b.done({"y"});
  auto bucket = masked_bucket_graph(g, {{1, 3, 4, 24}});
  ASSERT_TRUE(bucket.ok()) << bucket.status().message();
  int slices = 0;
  for (const Node& n : bucket->nodes) slices += n.op_type == "SliceValid";
  EXPECT_EQ(slices, 1) << print_graph(*bucket);
  for (int64_t w = 1; w <= 24; ++w) {
    SCOPED_TRACE("W = " + std::to_string(w));
    expect_models_results(g, *bucket, {1, 3, 4, w}, static_cast<unsigned>(500 + w));
  }
}

// Max pools with end padding after a Relu (a ResNet stem's 3x3 / 2 pool with pads 1, a text recogniser's 2x2 pool
// of strides (2, 1) with end pads 1 along the width) and an average pool that counts its pads run padded: zeros past
// the valid sizes stand for their padding, as no element is negative or the pads are counted. Without the Relu, the
// max pool's input is sliced back first (its -inf padding has no stand-in), and the results are still the model's.
TEST(MaskedBucket, PoolsWithEndPaddingRunPaddedWhereZerosStandForIt) {
  for (bool relu : {true, false}) {
    SCOPED_TRACE(relu ? "after a Relu" : "without one");
    Builder b;
    unsigned seed = 140;
    b.input("x", symbolic({1, 3, 12, 0}, {{3, "W"}}));
    b.constant("w1", random_tensor({6, 3, 3, 3}, ++seed, -0.5f, 0.5f));
    b.constant("w2", random_tensor({6, 6, 3, 3}, ++seed, -0.3f, 0.3f));
    b.constant("w3", random_tensor({4, 6, 1, 1}, ++seed, -0.3f, 0.3f));
    b.constant("lo", scalar_tensor(DType::kFloat32, 0.0));
    b.constant("hi", scalar_tensor(DType::kFloat32, 6.0));
    set_ints(b.node("c1", "Conv", {"x", "w1"}, "t1"), "pads", {1, 1, 1, 1});
    if (relu) b.node("r1", "Relu", {"t1"}, "t2");
    Node& p1 = b.node("p1", "MaxPool", {relu ? "t2" : "t1"}, "t3");
    set_ints(p1, "kernel_shape", {3, 3}), set_ints(p1, "strides", {2, 2}), set_ints(p1, "pads", {1, 1, 1, 1});
    set_ints(b.node("c2", "Conv", {"t3", "w2"}, "t4"), "pads", {1, 1, 1, 1});
    b.node("r2", "Clip", {"t4", "lo", "hi"}, "t5");  // a Relu6
    Node& p2 = b.node("p2", "MaxPool", {"t5"}, "t6");
    set_ints(p2, "kernel_shape", {2, 2}), set_ints(p2, "strides", {2, 1}), set_ints(p2, "pads", {0, 1, 0, 1});
    Node& p3 = b.node("p3", "AveragePool", {"t6"}, "t7");
    set_ints(p3, "kernel_shape", {1, 3}), set_ints(p3, "pads", {0, 1, 0, 1});
    p3.attrs["count_include_pad"] = Attribute::Int(1);
    b.node("c3", "Conv", {"t7", "w3"}, "y");
    const Graph g = b.done({"y"});
    auto bucket = masked_bucket_graph(g, {{1, 3, 12, 40}});
    ASSERT_TRUE(bucket.ok()) << bucket.status().message();
    int slices = 0;
    std::string sliced_into;
    for (const Node& n : bucket->nodes) {
      if (n.op_type == "SliceValid") ++slices;
      for (const std::string& v : n.inputs) {
        if (v.find("_valid") != std::string::npos) sliced_into += n.name + " ";
      }
    }
    // After the Relu only the output is sliced; without it, the first pool's input instead (and the rest runs at the
    // request's size).
    EXPECT_EQ(slices, 1) << print_graph(*bucket);
    EXPECT_EQ(sliced_into, relu ? "" : "p1 ") << print_graph(*bucket);
    for (int64_t w = 4; w <= 40; ++w) {
      SCOPED_TRACE("W = " + std::to_string(w));
      expect_models_results(g, *bucket, {1, 3, 12, w}, static_cast<unsigned>(900 + w));
    }
  }
}

// A Clip whose upper bound lies below 0 gives negative elements whatever its lower bound: a max pool with end padding
// after it is not run padded (zeros would win its windows), and the results stay the model's.
TEST(MaskedBucket, AClipWithANegativeUpperBoundIsNotTakenAsNonNegative) {
  Builder b;
  b.input("x", symbolic({1, 2, 4, 0}, {{3, "W"}}));
  b.constant("w", random_tensor({3, 2, 3, 3}, 11, -0.5f, 0.5f));
  b.constant("lo", scalar_tensor(DType::kFloat32, 0.0));
  b.constant("hi", scalar_tensor(DType::kFloat32, -1.0));
  set_ints(b.node("c", "Conv", {"x", "w"}, "t1"), "pads", {1, 1, 1, 1});
  b.node("clip", "Clip", {"t1", "lo", "hi"}, "t2");  // every element -1
  Node& p = b.node("p", "MaxPool", {"t2"}, "t3");
  set_ints(p, "kernel_shape", {2, 2}), set_ints(p, "pads", {0, 0, 1, 1});
  b.constant("w2", random_tensor({3, 3, 3, 3}, 12, -0.5f, 0.5f));
  set_ints(b.node("c2", "Conv", {"t3", "w2"}, "y"), "pads", {1, 1, 1, 1});
  const Graph g = b.done({"y"});
  auto bucket = masked_bucket_graph(g, {{1, 2, 4, 16}});
  ASSERT_TRUE(bucket.ok()) << bucket.status().message();
  for (int64_t w : {3, 9, 16}) {
    SCOPED_TRACE("W = " + std::to_string(w));
    expect_models_results(g, *bucket, {1, 2, 4, w}, static_cast<unsigned>(w));
  }
}

// A dilated max pool whose end pad reaches past its window's first tap has windows of padding alone (ONNX: -inf),
// which zeros would not give: after a Relu it still does not run padded, and its results stay the model's.
TEST(MaskedBucket, AMaxPoolWithWindowsOfPaddingAloneIsNotRunPadded) {
  Builder b;
  b.input("x", symbolic({1, 2, 3, 0}, {{3, "W"}}));
  b.constant("w", random_tensor({3, 2, 3, 3}, 21, -0.5f, 0.5f));
  set_ints(b.node("c", "Conv", {"x", "w"}, "t1"), "pads", {1, 1, 1, 1});
  b.node("r", "Relu", {"t1"}, "t2");
  Node& p = b.node("p", "MaxPool", {"t2"}, "y");
  set_ints(p, "kernel_shape", {1, 2}), set_ints(p, "dilations", {1, 4}), set_ints(p, "pads", {0, 3, 0, 3});
  const Graph g = b.done({"y"});
  auto bucket = masked_bucket_graph(g, {{1, 2, 3, 12}});
  ASSERT_TRUE(bucket.ok()) << bucket.status().message();
  for (int64_t w = 1; w <= 12; ++w) {
    SCOPED_TRACE("W = " + std::to_string(w));
    expect_models_results(g, *bucket, {1, 2, 3, w}, static_cast<unsigned>(30 + w));
  }
}

TEST(MaskedBucket, WithoutItsMasksThePaddingReachesTheResult) {
  // The same bucket with every ValidMask's output all ones: the columns near each request's end differ.
  const Graph g = recogniser();
  auto bucket = masked_bucket_graph(g, {{1, 3, 8, 40}});
  ASSERT_TRUE(bucket.ok()) << bucket.status().message();
  Graph broken = *bucket;
  for (Node& n : broken.nodes) {
    if (n.op_type == "ValidMask") set_ints(n, "steps", std::vector<int64_t>{0});  // valid size = R's dim: all ones
  }
  const std::vector<Tensor> in{random_tensor({1, 3, 8, 29}, 7)};
  const std::vector<Tensor> want = native_outputs(g, in), got = native_outputs(broken, in);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_GT(differ(got[1], want[1]), 0);
}

TEST(MaskedBucket, TwoVaryingDimsWithStrides) {
  const Graph g = detector();
  auto bucket = masked_bucket_graph(g, {{1, 3, 24, 32}});
  ASSERT_TRUE(bucket.ok()) << bucket.status().message();
  for (int64_t h : {5, 13, 24}) {
    for (int64_t w : {7, 16, 31, 32}) {
      SCOPED_TRACE(std::to_string(h) + "x" + std::to_string(w));
      expect_models_results(g, *bucket, {1, 3, h, w}, static_cast<unsigned>(h * 100 + w));
    }
  }
}

// The whole path: a ranged compile makes masked buckets with oneDNN engines (the masks as the plugin's own plane
// multiply), they go through an artifact and back, and a session runs every width in the range on them with the
// model's results; --bucket-step 0 makes none.
TEST(MaskedBucket, ARangedCompileRunsEveryWidthOnEnginesThroughAnArtifact) {
  if (!find_backend("dnnl").ok()) GTEST_SKIP() << "the dnnl plugin is not built";
  const Graph g = recogniser();
  auto bytes = export_onnx_bytes(g);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  const api::ModelSource model{"", *bytes};
  api::CompileOptions o;
  o.backends = "dnnl,native";
  o.policy = PlacementPolicy::kPriority;
  o.measure = MeasureMode::kOff;
  o.tune_cache = "";
  o.threads = 1;
  o.shapes = {"x=1,3,8,4..40"};
  o.bucket_step = 16;
  auto lg = api::load_graph(model, o.shapes, "compile");
  ASSERT_TRUE(lg.ok()) << lg.status().message();
  auto program = api::compile_model(model, std::move(*lg), o, nullptr);
  ASSERT_TRUE(program.ok()) << program.status().message();
  ASSERT_EQ(program->buckets.size(), 3u);  // 4..16, 17..32, 33..40
  EXPECT_EQ(program->buckets[1].lower, (std::vector<Dims>{{1, 3, 8, 17}}));
  EXPECT_EQ(program->buckets[1].inputs, (std::vector<Dims>{{1, 3, 8, 32}}));
  for (const ProgramBucket& b : program->buckets) {
    const auto used = engines_used(b.graph);
    ASSERT_EQ(used.size(), 1u);
    EXPECT_EQ(program->engines[static_cast<size_t>(used[0])].backend, "dnnl");
  }
  const std::string path = ::testing::TempDir() + "masked_" + std::to_string(::getpid()) + ".tsr";
  ASSERT_TRUE(write_artifact(*program, path).ok());
  auto back = read_artifact(path);
  std::remove(path.c_str());
  ASSERT_TRUE(back.ok()) << back.status().message();
  SessionOptions so;
  so.num_threads = 1;
  auto s = InferenceSession::Create(std::move(*back), so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  int runs = 0;
  for (int64_t w = 4; w <= 40; ++w) {
    SCOPED_TRACE("W = " + std::to_string(w));
    const std::vector<Tensor> in{random_tensor({1, 3, 8, w}, static_cast<unsigned>(300 + w))};
    auto got = (*s)->run(in);
    ASSERT_TRUE(got.ok()) << got.status().message();
    ++runs;
    const std::vector<Tensor> want = native_outputs(g, in);
    ASSERT_EQ(got->size(), 2u);
    ASSERT_EQ(want.size(), 2u);
    EXPECT_EQ(differ((*got)[0], want[0]), 0);
    EXPECT_EQ(differ((*got)[1], want[1]), 0);
  }
  EXPECT_EQ((*s)->runs_bucket(), static_cast<uint64_t>(runs));
  EXPECT_EQ((*s)->runs_generic(), 0u);
  EXPECT_EQ((*s)->runs_waited(), 0u);
  // --bucket-step 0: none.
  o.bucket_step = 0;
  auto lg0 = api::load_graph(model, o.shapes, "compile");
  ASSERT_TRUE(lg0.ok());
  auto none = api::compile_model(model, std::move(*lg0), o, nullptr);
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_TRUE(none->buckets.empty());
}

TEST(MaskedBucket, RefusalsNameTheReason) {
  {  // a convolution whose padding follows the size, first: nothing reads the padded input on the masked path
    Builder b;
    b.input("x", symbolic({1, 3, 8, 0}, {{3, "W"}}));
    b.constant("w", random_tensor({4, 3, 3, 3}, 1));
    b.node("c", "Conv", {"x", "w"}, "y").attrs["auto_pad"] = Attribute::String("SAME_UPPER");
    auto r = masked_bucket_graph(b.done({"y"}), {{1, 3, 8, 16}});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("no convolution reads input 'x'"), std::string::npos) << r.status().message();
  }
  {  // the batch varies
    Builder b;
    b.input("x", symbolic({0, 3, 8, 8}, {{0, "N"}}));
    b.constant("w", random_tensor({4, 3, 3, 3}, 1));
    b.node("c", "Conv", {"x", "w"}, "y");
    auto r = masked_bucket_graph(b.done({"y"}), {{4, 3, 8, 8}});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("varies outside the spatial dims"), std::string::npos) << r.status().message();
  }
  {  // a max pool with end padding (its padding is -inf, which no mask stands for) ends the masked part at once
    Builder b;
    b.input("x", symbolic({1, 3, 8, 0}, {{3, "W"}}));
    Node& p = b.node("p", "MaxPool", {"x"}, "y");
    set_ints(p, "kernel_shape", {2, 2}), set_ints(p, "pads", {0, 0, 1, 1});
    auto r = masked_bucket_graph(b.done({"y"}), {{1, 3, 8, 16}});
    EXPECT_FALSE(r.ok());
  }
}

TEST(MaskedBucket, OpsCheckTheirAttributesAndInputs) {
  Node n;
  n.name = "m";
  n.op_type = "ValidMask";
  n.domain = masked::kDomain;
  masked::Extent e{3, {{-2, 2}}};
  masked::set_extent_attrs(n, {{3, e}});
  auto back = masked::extent_attrs(n, 4);
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0].second, e);
  EXPECT_EQ(masked::valid_size(e, {1, 3, 8, 11}), 5);  // floor((11 - 2) / 2) + 1
  EXPECT_LE(masked::valid_size(e, {1, 3, 8, 1}), 0);   // too small for the window
  EXPECT_FALSE(masked::extent_attrs(n, 3).ok());       // axis 3 of a rank-3 tensor
  n.attrs["steps"] = Attribute::Ints({2, 0, 1});       // two pairs announced, one half given
  EXPECT_FALSE(masked::extent_attrs(n, 4).ok());
}

}  // namespace
}  // namespace tessera
