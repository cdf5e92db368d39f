// Graph passes: each test builds a small graph by hand, runs a pass, checks
// the structure, and where numbers matter evaluates the graph before and after
// with run_node_once.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "ops/node_runner.h"
#include "passes/canonicalize.h"
#include "passes/constant_folding.h"
#include "passes/dce.h"
#include "passes/pipeline.h"
#include "passes/shape_inference.h"

namespace tessera {
namespace {

Node make_node(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
               std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.name = outputs.empty() ? op : outputs[0] + "_node";
  n.op_type = op;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  n.attrs = std::move(attrs);
  return n;
}

Attribute int_attr(int64_t v) { return Attribute::Int(v); }
Attribute ints_attr(std::vector<int64_t> v) { return Attribute::Ints(std::move(v)); }
Attribute float_attr(float v) { return Attribute::Float(v); }

Attribute graph_attr(Graph g) {
  Attribute a;
  a.kind = Attribute::Kind::kGraph;
  a.g = std::make_shared<Graph>(std::move(g));
  return a;
}

// Deterministic pseudo-random floats in [lo, hi).
Tensor random_tensor(Dims dims, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  Tensor t(DType::kFloat32, std::move(dims));
  uint32_t s = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.data<float>()[i] = lo + (hi - lo) * static_cast<float>(s >> 8) / static_cast<float>(1u << 24);
  }
  return t;
}

void set_input(Graph& g, const std::string& name, DType dtype, const Dims& dims) {
  g.inputs.push_back(name);
  g.values[name] = ValueInfo{dtype, Shape::FromDims(dims)};
}

// Runs the graph's nodes in order with run_node_once (no nested graphs).
Expected<std::vector<Tensor>> evaluate(const Graph& g, const std::map<std::string, Tensor>& feeds) {
  std::unordered_map<std::string, Tensor> env(g.constants.begin(), g.constants.end());
  for (const auto& kv : feeds) env[kv.first] = kv.second;
  for (const Node& n : g.nodes) {
    std::vector<Tensor> ins(n.inputs.size());
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) continue;
      auto it = env.find(n.inputs[i]);
      if (it == env.end()) return InternalError("unbound value " + n.inputs[i]);
      ins[i] = it->second;
    }
    std::vector<Tensor> outs;
    TSR_ASSIGN_OR_RETURN(outs, run_node_once(n, g.opset, ins));
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (!n.outputs[i].empty()) env[n.outputs[i]] = outs[i];
    }
  }
  std::vector<Tensor> result;
  for (const auto& o : g.outputs) {
    auto it = env.find(o);
    if (it == env.end()) return InternalError("graph output " + o + " was not computed");
    result.push_back(it->second);
  }
  return result;
}

void expect_close(const Tensor& a, const Tensor& b, float tol) {
  ASSERT_EQ(a.dims(), b.dims());
  ASSERT_EQ(a.dtype(), DType::kFloat32);
  for (int64_t i = 0; i < a.numel(); ++i) {
    ASSERT_NEAR(a.data<float>()[i], b.data<float>()[i], tol) << "element " << i;
  }
}

// X -> Conv(W, B) -> BatchNormalization -> y, with random parameters.
Graph conv_bn_graph(bool transpose, int64_t group) {
  Graph g;
  g.opset = 17;
  const int64_t cin = 4;
  const int64_t cout = 6;
  set_input(g, "x", DType::kFloat32, {1, cin, 5, 5});
  if (transpose) {
    g.constants["w"] = random_tensor({cin, cout / group, 3, 3}, 1);
  } else {
    g.constants["w"] = random_tensor({cout, cin / group, 3, 3}, 1);
  }
  g.constants["b"] = random_tensor({cout}, 2);
  g.constants["scale"] = random_tensor({cout}, 3, 0.5f, 2.f);
  g.constants["shift"] = random_tensor({cout}, 4);
  g.constants["mean"] = random_tensor({cout}, 5);
  g.constants["var"] = random_tensor({cout}, 6, 0.1f, 3.f);
  g.nodes.push_back(make_node(transpose ? "ConvTranspose" : "Conv", {"x", "w", "b"}, {"c"},
                              {{"group", int_attr(group)}, {"pads", ints_attr({1, 1, 1, 1})}}));
  g.nodes.push_back(make_node("BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"y"},
                              {{"epsilon", float_attr(1e-3f)}}));
  g.outputs = {"y"};
  return g;
}

void check_bn_folds(bool transpose, int64_t group) {
  Graph g = conv_bn_graph(transpose, group);
  std::map<std::string, Tensor> feeds{{"x", random_tensor({1, 4, 5, 5}, 7)}};
  auto before = evaluate(g, feeds);
  ASSERT_TRUE(before.ok()) << before.status().message();

  CanonicalizeStats stats;
  ASSERT_TRUE(canonicalize(g, &stats).ok());
  EXPECT_EQ(stats.folded_batchnorms, 1);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, transpose ? "ConvTranspose" : "Conv");
  EXPECT_EQ(g.nodes[0].outputs[0], "y");
  ASSERT_TRUE(verify_graph(g).ok());

  auto after = evaluate(g, feeds);
  ASSERT_TRUE(after.ok()) << after.status().message();
  expect_close((*before)[0], (*after)[0], 1e-4f);

  // The original weights are no longer read and go away with DCE.
  ASSERT_TRUE(dce(g).ok());
  EXPECT_FALSE(g.is_constant("w"));
  EXPECT_FALSE(g.is_constant("var"));
}

TEST(Canonicalize, BatchNormFoldsIntoConvWithSameResults) { check_bn_folds(false, 1); }
TEST(Canonicalize, BatchNormFoldsIntoGroupedConvWithSameResults) { check_bn_folds(false, 2); }
TEST(Canonicalize, BatchNormFoldsIntoGroupedConvTransposeWithSameResults) { check_bn_folds(true, 2); }

TEST(Canonicalize, BatchNormStaysWhenConvOutputIsAlsoAGraphOutput) {
  Graph g = conv_bn_graph(false, 1);
  g.outputs.push_back("c");
  CanonicalizeStats stats;
  ASSERT_TRUE(canonicalize(g, &stats).ok());
  EXPECT_EQ(stats.folded_batchnorms, 0);
  EXPECT_EQ(g.nodes.size(), 2u);
}

TEST(Canonicalize, BatchNormStaysWhenStatisticsAreRuntimeInputs) {
  Graph g = conv_bn_graph(false, 1);
  g.constants.erase("var");
  set_input(g, "var", DType::kFloat32, {6});
  ASSERT_TRUE(canonicalize(g).ok());
  EXPECT_EQ(g.nodes.size(), 2u);
}

TEST(Canonicalize, PerChannelAddAndMulFoldIntoConv) {
  Graph g = conv_bn_graph(false, 1);
  g.nodes.pop_back();
  g.constants["k_add"] = random_tensor({1, 6, 1, 1}, 11);
  g.constants["k_mul"] = random_tensor({6, 1, 1}, 12);
  g.nodes.push_back(make_node("Add", {"k_add", "c"}, {"a"}));
  g.nodes.push_back(make_node("Mul", {"a", "k_mul"}, {"y"}));
  std::map<std::string, Tensor> feeds{{"x", random_tensor({1, 4, 5, 5}, 7)}};
  auto before = evaluate(g, feeds);
  ASSERT_TRUE(before.ok()) << before.status().message();

  CanonicalizeStats stats;
  ASSERT_TRUE(canonicalize(g, &stats).ok());
  EXPECT_EQ(stats.folded_conv_affines, 2);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].outputs[0], "y");
  auto after = evaluate(g, feeds);
  ASSERT_TRUE(after.ok()) << after.status().message();
  expect_close((*before)[0], (*after)[0], 1e-4f);
}

TEST(Canonicalize, AddAlongTheLastAxisDoesNotFoldIntoConvBias) {
  Graph g = conv_bn_graph(false, 1);
  g.nodes.pop_back();
  g.constants["k"] = random_tensor({5}, 11);  // broadcasts along width, not channels
  g.nodes.push_back(make_node("Add", {"c", "k"}, {"y"}));
  CanonicalizeStats stats;
  ASSERT_TRUE(canonicalize(g, &stats).ok());
  EXPECT_EQ(stats.folded_conv_affines, 0);
  EXPECT_EQ(g.nodes.size(), 2u);
}

TEST(Canonicalize, IdentityBeforeGraphOutputKeepsTheOutputName) {
  Graph g;
  set_input(g, "x", DType::kFloat32, {2, 3});
  g.nodes.push_back(make_node("Relu", {"x"}, {"r"}));
  g.nodes.push_back(make_node("Identity", {"r"}, {"y"}));
  g.nodes.push_back(make_node("Neg", {"r"}, {"z"}));
  g.outputs = {"y", "z"};
  CanonicalizeStats stats;
  ASSERT_TRUE(canonicalize(g, &stats).ok());
  EXPECT_EQ(stats.removed_identities, 1);
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].op_type, "Relu");
  EXPECT_EQ(g.nodes[0].outputs[0], "y");
  EXPECT_EQ(g.nodes[1].inputs[0], "y");
  EXPECT_EQ(g.outputs, (std::vector<std::string>{"y", "z"}));
  EXPECT_TRUE(verify_graph(g).ok());
}

TEST(Canonicalize, IdentityOfGraphInputToGraphOutputStays) {
  Graph g;
  set_input(g, "x", DType::kFloat32, {2});
  g.nodes.push_back(make_node("Identity", {"x"}, {"y"}));
  g.outputs = {"y"};
  ASSERT_TRUE(canonicalize(g).ok());
  EXPECT_EQ(g.nodes.size(), 1u);
}

TEST(Canonicalize, IdentityBetweenTwoGraphOutputsStays) {
  Graph g;
  set_input(g, "x", DType::kFloat32, {2});
  g.nodes.push_back(make_node("Relu", {"x"}, {"r"}));
  g.nodes.push_back(make_node("Identity", {"r"}, {"y"}));
  g.outputs = {"r", "y"};
  ASSERT_TRUE(canonicalize(g).ok());
  EXPECT_EQ(g.nodes.size(), 2u);
}

TEST(Canonicalize, IdentityReadByNestedGraphIsRenamedInside) {
  Graph g;
  set_input(g, "x", DType::kFloat32, {2});
  set_input(g, "cond", DType::kBool, {});
  g.nodes.push_back(make_node("Relu", {"x"}, {"r"}));
  g.nodes.push_back(make_node("Identity", {"r"}, {"i"}));
  Graph then_g;
  then_g.nodes.push_back(make_node("Neg", {"i"}, {"t"}));
  then_g.outputs = {"t"};
  Graph else_g;
  else_g.outputs = {"i"};
  g.nodes.push_back(
      make_node("If", {"cond"}, {"y"}, {{"then_branch", graph_attr(then_g)}, {"else_branch", graph_attr(else_g)}}));
  g.outputs = {"y"};
  ASSERT_TRUE(canonicalize(g).ok());
  ASSERT_EQ(g.nodes.size(), 2u);
  const Node& if_node = g.nodes[1];
  EXPECT_EQ(if_node.attr_graph("then_branch")->nodes[0].inputs[0], "r");
  EXPECT_EQ(if_node.attr_graph("else_branch")->outputs[0], "r");
  EXPECT_TRUE(verify_graph(g).ok());
}

TEST(Canonicalize, InferenceDropoutIsRemovedButTrainingDropoutStays) {
  Graph g;
  set_input(g, "x", DType::kFloat32, {4});
  set_input(g, "train", DType::kBool, {});
  g.nodes.push_back(make_node("Relu", {"x"}, {"r"}));
  g.nodes.push_back(make_node("Dropout", {"r"}, {"d", "mask"}));
  g.nodes.push_back(make_node("Dropout", {"d", "", "train"}, {"y"}));
  g.outputs = {"y"};
  ASSERT_TRUE(canonicalize(g).ok());
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[1].op_type, "Dropout");
  EXPECT_EQ(g.nodes[1].inputs[0], "r");
}

TEST(Canonicalize, CastToSameTypeAndIdentityTransposeAreRemoved) {
  Graph g;
  set_input(g, "x", DType::kFloat32, {2, 3});
  g.nodes.push_back(make_node("Cast", {"x"}, {"c"}, {{"to", int_attr(1)}}));
  g.nodes.push_back(make_node("Transpose", {"c"}, {"t"}, {{"perm", ints_attr({0, 1})}}));
  g.nodes.push_back(make_node("Transpose", {"t"}, {"y"}, {{"perm", ints_attr({1, 0})}}));
  g.outputs = {"y"};
  ASSERT_TRUE(canonicalize(g).ok());
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].inputs[0], "x");
  EXPECT_EQ(g.nodes[0].outputs[0], "y");
}

TEST(Canonicalize, TransposePairsMergeAndReshapeChainsShortcut) {
  Graph g;
  set_input(g, "x", DType::kFloat32, {2, 3, 4});
  g.constants["shape"] = Tensor::FromVector<int64_t>({4, -1}, {2});
  g.constants["axes"] = Tensor::FromVector<int64_t>({0}, {1});
  g.nodes.push_back(make_node("Transpose", {"x"}, {"t1"}, {{"perm", ints_attr({1, 2, 0})}}));
  g.nodes.push_back(make_node("Transpose", {"t1"}, {"t2"}, {{"perm", ints_attr({0, 2, 1})}}));
  g.nodes.push_back(make_node("Unsqueeze", {"t2", "axes"}, {"u"}));
  g.nodes.push_back(make_node("Reshape", {"u", "shape"}, {"y"}));
  g.outputs = {"y"};
  std::map<std::string, Tensor> feeds{{"x", random_tensor({2, 3, 4}, 5)}};
  auto before = evaluate(g, feeds);
  ASSERT_TRUE(before.ok()) << before.status().message();
  CanonicalizeStats stats;
  ASSERT_TRUE(canonicalize(g, &stats).ok());
  EXPECT_EQ(stats.merged_layout_ops, 2);
  ASSERT_EQ(g.nodes.size(), 2u) << print_graph(g);
  EXPECT_EQ(g.nodes[0].attr_ints("perm"), (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(g.nodes[1].inputs[0], g.nodes[0].outputs[0]);
  auto after = evaluate(g, feeds);
  ASSERT_TRUE(after.ok()) << after.status().message();
  expect_close((*before)[0], (*after)[0], 0.f);
}

TEST(Canonicalize, ReshapeCopyingInputDimsDoesNotSkipItsProducer) {
  Graph g;
  set_input(g, "x", DType::kFloat32, {2, 3, 4});
  g.constants["s1"] = Tensor::FromVector<int64_t>({6, 4}, {2});
  g.constants["s2"] = Tensor::FromVector<int64_t>({0, -1}, {2});  // 0 copies the (new) first dim
  g.nodes.push_back(make_node("Reshape", {"x", "s1"}, {"r"}));
  g.nodes.push_back(make_node("Reshape", {"r", "s2"}, {"y"}));
  g.outputs = {"y"};
  ASSERT_TRUE(canonicalize(g).ok());
  EXPECT_EQ(g.nodes.size(), 2u);
}

TEST(Canonicalize, IfWithConstantConditionIsReplacedByItsBranch) {
  Graph g;
  set_input(g, "x", DType::kFloat32, {2});
  g.constants["yes"] = Tensor::Scalar<bool>(true);
  g.constants["no"] = Tensor::Scalar<bool>(false);
  Graph then_g;
  then_g.constants["k"] = Tensor::FromVector<float>({10.f, 20.f}, {2});
  then_g.nodes.push_back(make_node("Add", {"x", "k"}, {"t"}));  // "t" also names an outer value below
  then_g.outputs = {"t", "k"};
  Graph else_g;
  else_g.outputs = {"x", "x"};
  g.nodes.push_back(make_node("Relu", {"x"}, {"t"}));
  g.nodes.push_back(make_node("If", {"yes"}, {"a", "b"},
                              {{"then_branch", graph_attr(then_g)}, {"else_branch", graph_attr(else_g)}}));
  g.nodes.push_back(make_node("If", {"no"}, {"c", "d"},
                              {{"then_branch", graph_attr(then_g)}, {"else_branch", graph_attr(else_g)}}));
  g.nodes.push_back(make_node("Add", {"a", "t"}, {"y"}));
  g.outputs = {"y", "b", "c", "d"};
  CanonicalizeStats stats;
  ASSERT_TRUE(canonicalize(g, &stats).ok());
  EXPECT_EQ(stats.inlined_ifs, 2);
  ASSERT_TRUE(verify_graph(g).ok()) << print_graph(g);
  for (const Node& n : g.nodes) EXPECT_NE(n.op_type, "If");
  ASSERT_TRUE(constant_folding(g).ok());
  ASSERT_TRUE(dce(g).ok());
  auto out = evaluate(g, {{"x", Tensor::FromVector<float>({-1.f, 2.f}, {2})}});
  ASSERT_TRUE(out.ok()) << out.status().message() << print_graph(g);
  // y = (x + k) + relu(x); b = k; c = d = x
  EXPECT_EQ((*out)[0].data<float>()[0], 9.f);
  EXPECT_EQ((*out)[0].data<float>()[1], 24.f);
  EXPECT_EQ((*out)[1].data<float>()[1], 20.f);
  EXPECT_EQ((*out)[2].data<float>()[0], -1.f);
  EXPECT_EQ((*out)[3].data<float>()[1], 2.f);
}

TEST(Canonicalize, MatMulPlusBiasBecomesGemmOnlyFor2D) {
  for (int rank : {2, 3}) {
    Graph g;
    Dims a_dims = rank == 2 ? Dims{3, 4} : Dims{2, 3, 4};
    set_input(g, "a", DType::kFloat32, a_dims);
    g.constants["w"] = random_tensor({4, 5}, 1);
    g.values["w"] = ValueInfo{DType::kFloat32, Shape::FromDims({4, 5})};
    g.constants["bias"] = random_tensor({5}, 2);
    g.nodes.push_back(make_node("MatMul", {"a", "w"}, {"m"}));
    g.nodes.push_back(make_node("Add", {"m", "bias"}, {"y"}));
    g.outputs = {"y"};
    std::map<std::string, Tensor> feeds{{"a", random_tensor(a_dims, 3)}};
    auto before = evaluate(g, feeds);
    ASSERT_TRUE(before.ok()) << before.status().message();
    CanonicalizeStats stats;
    ASSERT_TRUE(canonicalize(g, &stats).ok());
    if (rank == 3) {
      EXPECT_EQ(stats.fused_gemms, 0);
      EXPECT_EQ(g.nodes.size(), 2u);
      continue;
    }
    EXPECT_EQ(stats.fused_gemms, 1);
    ASSERT_EQ(g.nodes.size(), 1u);
    EXPECT_EQ(g.nodes[0].op_type, "Gemm");
    EXPECT_EQ(g.nodes[0].outputs[0], "y");
    auto after = evaluate(g, feeds);
    ASSERT_TRUE(after.ok()) << after.status().message();
    expect_close((*before)[0], (*after)[0], 1e-5f);
  }
}

// LayerNorm as exporters write it before opset 17, in the variants `v` names:
//   "plain"     ReduceMean(x, [-1]), Sub, Pow(2), ReduceMean, Add(eps), Sqrt, Div, Mul(scale), Add(bias)
//   "dup_sub"   x - mean written twice (older PyTorch), one for Pow and one for Div
//   "opset18"   the axes of both ReduceMeans as an input, axis 2 of rank 3
//   "swapped"   scale * n and bias + m, eps + var
//   "paddle"    the exponent and eps as [1] tensors (paddle2onnx)
// and chains ONNX Runtime does not fuse (which must stay):
//   "no_affine" no Mul/Add after the Div;  "reciprocal" Mul by Reciprocal(Sqrt) instead of Div;
//   "mul_square" Mul(d, d) instead of Pow;  "middle_axis" the mean over axis 1 ([16, 1] parameters);
//   "scale_2d" a [7, 16] scale;
//   "d_output"  x - mean is also a graph output;  "eps_rank4" eps as a [1, 1, 1, 1] tensor, which broadcasts the
//   rank-3 chain to rank 4.
Graph decomposed_layernorm(const std::string& v) {
  Graph g;
  g.opset = v == "opset18" ? 18 : 13;
  const bool middle = v == "middle_axis";
  const Dims x_dims = middle ? Dims{2, 16, 7} : Dims{2, 7, 16};
  set_input(g, "x", DType::kFloat32, x_dims);
  g.constants["two"] = v == "paddle" ? Tensor::FromVector<float>({2.f}, {1}) : Tensor::Scalar<float>(2.f);
  g.constants["eps"] = v == "paddle"      ? Tensor::FromVector<float>({1e-5f}, {1})
                       : v == "eps_rank4" ? Tensor::FromVector<float>({1e-5f}, {1, 1, 1, 1})
                                          : Tensor::Scalar<float>(1e-5f);
  const Dims param = v == "scale_2d" ? Dims{7, 16} : middle ? Dims{16, 1} : Dims{16};
  g.constants["scale"] = random_tensor(param, 11, 0.5f, 1.5f);
  g.constants["bias"] = random_tensor(middle ? Dims{16, 1} : Dims{16}, 12);
  auto mean = [&](const std::string& in, const std::string& out) {
    if (v == "opset18") {
      g.constants["axes_" + out] = Tensor::FromVector<int64_t>({2}, {1});
      g.nodes.push_back(make_node("ReduceMean", {in, "axes_" + out}, {out}));
    } else {
      g.nodes.push_back(make_node("ReduceMean", {in}, {out}, {{"axes", ints_attr({middle ? 1 : -1})}}));
    }
  };
  mean("x", "mean");
  g.nodes.push_back(make_node("Sub", {"x", "mean"}, {"d"}));
  std::string num = "d";
  if (v == "dup_sub") {
    g.nodes.push_back(make_node("Sub", {"x", "mean"}, {"d2"}));
    num = "d2";
  }
  if (v == "mul_square") {
    g.nodes.push_back(make_node("Mul", {"d", "d"}, {"sq"}));
  } else {
    g.nodes.push_back(make_node("Pow", {"d", "two"}, {"sq"}));
  }
  mean("sq", "var");
  g.nodes.push_back(make_node(
      "Add", v == "swapped" ? std::vector<std::string>{"eps", "var"} : std::vector<std::string>{"var", "eps"}, {"ve"}));
  g.nodes.push_back(make_node("Sqrt", {"ve"}, {"sd"}));
  if (v == "reciprocal") {
    g.nodes.push_back(make_node("Reciprocal", {"sd"}, {"r"}));
    g.nodes.push_back(make_node("Mul", {num, "r"}, {"n"}));
  } else {
    g.nodes.push_back(make_node("Div", {num, "sd"}, {"n"}));
  }
  if (v == "no_affine") {
    g.outputs = {"n"};
    return g;
  }
  if (v == "swapped") {
    g.nodes.push_back(make_node("Mul", {"scale", "n"}, {"m"}));
    g.nodes.push_back(make_node("Add", {"bias", "m"}, {"y"}));
  } else {
    g.nodes.push_back(make_node("Mul", {"n", "scale"}, {"m"}));
    g.nodes.push_back(make_node("Add", {"m", "bias"}, {"y"}));
  }
  g.outputs = {"y"};
  if (v == "d_output") g.outputs.push_back("d");
  return g;
}

int count_ops(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op_type == op;
  return n;
}

// Canonicalises g (after shape inference) and removes what is left dead; g must then be one node computing what it
// computed before on `feeds`, within `tol`.
void canonicalize_to_one_node(Graph& g, const std::map<std::string, Tensor>& feeds, CanonicalizeStats* stats,
                              float tol) {
  auto before = evaluate(g, feeds);
  ASSERT_TRUE(before.ok()) << before.status().message();
  ASSERT_TRUE(infer_shapes(g).ok());
  ASSERT_TRUE(canonicalize(g, stats).ok());
  ASSERT_TRUE(dce(g).ok());
  ASSERT_EQ(g.nodes.size(), 1u);
  ASSERT_TRUE(verify_graph(g).ok());
  auto after = evaluate(g, feeds);
  ASSERT_TRUE(after.ok()) << after.status().message();
  expect_close((*before)[0], (*after)[0], tol);
}

TEST(Canonicalize, DecomposedLayerNormBecomesLayerNormalization) {
  for (const char* v : {"plain", "dup_sub", "opset18", "swapped", "paddle"}) {
    SCOPED_TRACE(v);
    Graph g = decomposed_layernorm(v);
    std::map<std::string, Tensor> feeds{{"x", random_tensor({2, 7, 16}, 13, -3.f, 5.f)}};
    CanonicalizeStats stats;
    ASSERT_NO_FATAL_FAILURE(canonicalize_to_one_node(g, feeds, &stats, 2e-6f));
    EXPECT_EQ(stats.fused_layernorms, 1);
    const Node& ln = g.nodes[0];
    EXPECT_EQ(ln.op_type, "LayerNormalization");
    EXPECT_EQ(ln.inputs, (std::vector<std::string>{"x", "scale", "bias"}));
    EXPECT_EQ(ln.outputs, std::vector<std::string>{"y"});
    EXPECT_EQ(ln.attr_int("axis", 0), -1);
    EXPECT_EQ(ln.attr_float("epsilon", 0.f), 1e-5f);
  }
}

TEST(Canonicalize, LayerNormChainsOnnxRuntimeLeavesAloneStay) {
  for (const char* v : {"no_affine", "reciprocal", "mul_square", "middle_axis", "scale_2d", "d_output", "eps_rank4"}) {
    SCOPED_TRACE(v);
    Graph g = decomposed_layernorm(v);
    const size_t nodes = g.nodes.size();
    ASSERT_TRUE(infer_shapes(g).ok());
    CanonicalizeStats stats;
    ASSERT_TRUE(canonicalize(g, &stats).ok());
    EXPECT_EQ(stats.fused_layernorms, 0);
    EXPECT_EQ(g.nodes.size(), nodes);
    EXPECT_EQ(count_ops(g, "LayerNormalization"), 0);
  }
}

// Gelu as exporters write it before opset 20: x * 0.5 * (1 + erf(x / sqrt 2)), in the variants `v` names:
//   "half_last"  Mul(Mul(x, Add(Erf(Div(x, sqrt2)), 1)), 0.5);  "half_first" Mul(Mul(x, 0.5), Add(...));
//   "swapped"    every commutative operand pair the other way round;
// and chains that must stay: "times_rsqrt2" x * (1 / sqrt 2) (ONNX Runtime leaves it too), "not_sqrt2" x / 1.5,
// "erf_output" the Erf's result also a graph output, "x_from_mul" the 0.5 last with x = in * 0.25 (ONNX Runtime then
// tries only the 0.5-first form).
Graph decomposed_gelu(const std::string& v) {
  Graph g;
  g.opset = 13;
  if (v == "x_from_mul") {
    set_input(g, "in", DType::kFloat32, {3, 40});
    g.constants["quarter"] = Tensor::Scalar<float>(0.25f);
    g.nodes.push_back(make_node("Mul", {"in", "quarter"}, {"x"}));
  } else {
    set_input(g, "x", DType::kFloat32, {3, 40});
  }
  g.constants["c"] = Tensor::Scalar<float>(v == "times_rsqrt2" ? 0.70710677f : v == "not_sqrt2" ? 1.5f : 1.41421354f);
  g.constants["one"] = Tensor::Scalar<float>(1.f);
  g.constants["half"] = Tensor::Scalar<float>(0.5f);
  const bool swapped = v == "swapped";
  g.nodes.push_back(make_node(v == "times_rsqrt2" ? "Mul" : "Div", {"x", "c"}, {"s"}));
  g.nodes.push_back(make_node("Erf", {"s"}, {"e"}));
  g.nodes.push_back(
      make_node("Add", swapped ? std::vector<std::string>{"one", "e"} : std::vector<std::string>{"e", "one"}, {"e1"}));
  if (v == "half_first") {
    g.nodes.push_back(make_node("Mul", {"x", "half"}, {"xh"}));
    g.nodes.push_back(make_node("Mul", {"xh", "e1"}, {"y"}));
  } else {
    g.nodes.push_back(
        make_node("Mul", swapped ? std::vector<std::string>{"e1", "x"} : std::vector<std::string>{"x", "e1"}, {"m"}));
    g.nodes.push_back(make_node(
        "Mul", swapped ? std::vector<std::string>{"half", "m"} : std::vector<std::string>{"m", "half"}, {"y"}));
  }
  g.outputs = {"y"};
  if (v == "erf_output") g.outputs.push_back("e");
  return g;
}

TEST(Canonicalize, DecomposedGeluBecomesGelu) {
  for (const char* v : {"half_last", "half_first", "swapped"}) {
    SCOPED_TRACE(v);
    Graph g = decomposed_gelu(v);
    std::map<std::string, Tensor> feeds{{"x", random_tensor({3, 40}, 21, -6.f, 6.f)}};
    CanonicalizeStats stats;
    ASSERT_NO_FATAL_FAILURE(canonicalize_to_one_node(g, feeds, &stats, 1e-6f));
    EXPECT_EQ(stats.fused_gelus, 1);
    EXPECT_EQ(g.nodes[0].op_type, "Gelu");
    EXPECT_EQ(g.nodes[0].inputs, std::vector<std::string>{"x"});
    EXPECT_EQ(g.nodes[0].outputs, std::vector<std::string>{"y"});
  }
  for (const char* v : {"times_rsqrt2", "not_sqrt2", "erf_output", "x_from_mul"}) {
    SCOPED_TRACE(v);
    Graph g = decomposed_gelu(v);
    ASSERT_TRUE(infer_shapes(g).ok());
    CanonicalizeStats stats;
    ASSERT_TRUE(canonicalize(g, &stats).ok());
    EXPECT_EQ(stats.fused_gelus, 0);
    EXPECT_EQ(count_ops(g, "Gelu"), 0);
  }
}

TEST(Canonicalize, MatMulOperandFactorsMoveOntoTheProduct) {
  Graph g;
  g.opset = 14;
  set_input(g, "q", DType::kFloat32, {2, 5, 8});
  set_input(g, "k", DType::kFloat32, {2, 5, 8});
  g.constants["s"] = Tensor::Scalar<float>(0.3f);
  g.constants["c"] = Tensor::FromVector<float>({3.f}, {1});
  g.nodes.push_back(make_node("Mul", {"q", "s"}, {"qs"}));
  g.nodes.push_back(make_node("Div", {"k", "c"}, {"kd"}));
  g.nodes.push_back(make_node("Transpose", {"kd"}, {"kt"}, {{"perm", ints_attr({0, 2, 1})}}));
  g.nodes.push_back(make_node("MatMul", {"qs", "kt"}, {"y"}));
  g.nodes.push_back(make_node("ReduceSum", {"qs"}, {"r"}, {{"keepdims", int_attr(1)}}));  // qs has another reader
  g.outputs = {"y", "r"};
  std::map<std::string, Tensor> feeds{{"q", random_tensor({2, 5, 8}, 31)}, {"k", random_tensor({2, 5, 8}, 32)}};
  auto before = evaluate(g, feeds);
  ASSERT_TRUE(before.ok()) << before.status().message();
  ASSERT_TRUE(infer_shapes(g).ok());
  CanonicalizeStats stats;
  ASSERT_TRUE(canonicalize(g, &stats).ok());
  ASSERT_TRUE(dce(g).ok());
  EXPECT_EQ(stats.folded_matmul_scales, 1);
  const Node* mm = nullptr;
  const Node* scale = nullptr;
  for (const Node& n : g.nodes) {
    if (n.op_type == "MatMul") mm = &n;
    if (n.op_type == "Mul" && !n.outputs.empty() && n.outputs[0] == "y") scale = &n;
  }
  ASSERT_TRUE(mm && scale);
  EXPECT_EQ(mm->inputs[0], "q");      // unscaled
  EXPECT_EQ(count_ops(g, "Div"), 0);  // the Div was read by the Transpose alone
  EXPECT_EQ(count_ops(g, "Mul"), 2);  // q * s stays for ReduceSum
  const Tensor* alpha = g.constant(scale->inputs[1]);
  ASSERT_TRUE(alpha);
  EXPECT_EQ(alpha->data<float>()[0], 0.3f * (1.f / 3.f));  // the factors' float product
  ASSERT_TRUE(verify_graph(g).ok());
  auto after = evaluate(g, feeds);
  ASSERT_TRUE(after.ok()) << after.status().message();
  expect_close((*before)[0], (*after)[0], 1e-6f);
  expect_close((*before)[1], (*after)[1], 0.f);
}

TEST(Canonicalize, AFactorThatBroadcastsAMatMulOperandStays) {
  // [8] * [1, 1] is [1, 8]: MatMul then yields [1, 3], where the unscaled [8] would yield [3].
  Graph g;
  g.opset = 14;
  set_input(g, "a", DType::kFloat32, {8});
  g.constants["w"] = random_tensor({8, 3}, 41);
  g.values["w"] = ValueInfo{DType::kFloat32, Shape::FromDims({8, 3})};
  g.constants["s"] = Tensor::FromVector<float>({0.5f}, {1, 1});
  g.nodes.push_back(make_node("Mul", {"a", "s"}, {"as"}));
  g.nodes.push_back(make_node("MatMul", {"as", "w"}, {"y"}));
  g.outputs = {"y"};
  ASSERT_TRUE(infer_shapes(g).ok());
  CanonicalizeStats stats;
  ASSERT_TRUE(canonicalize(g, &stats).ok());
  EXPECT_EQ(stats.folded_matmul_scales, 0);
  EXPECT_EQ(g.nodes.size(), 2u);

  // A scaled operand and a product times a [1, 1] factor: the operand's factor moves, the product's stays its own
  // Mul (replacing it by the scalar alpha would drop the broadcast to [1, 3]).
  Graph h;
  h.opset = 14;
  set_input(h, "a", DType::kFloat32, {8});
  h.constants["w"] = g.constants.at("w");
  h.values["w"] = ValueInfo{DType::kFloat32, Shape::FromDims({8, 3})};
  h.constants["s"] = Tensor::Scalar<float>(0.5f);
  h.constants["t"] = Tensor::FromVector<float>({0.25f}, {1, 1});
  h.nodes.push_back(make_node("Mul", {"a", "s"}, {"as"}));
  h.nodes.push_back(make_node("MatMul", {"as", "w"}, {"m"}));
  h.nodes.push_back(make_node("Mul", {"m", "t"}, {"y"}));
  h.outputs = {"y"};
  std::map<std::string, Tensor> feeds{{"a", random_tensor({8}, 42)}};
  auto before = evaluate(h, feeds);
  ASSERT_TRUE(before.ok()) << before.status().message();
  ASSERT_TRUE(infer_shapes(h).ok());
  CanonicalizeStats hs;
  ASSERT_TRUE(canonicalize(h, &hs).ok());
  EXPECT_EQ(hs.folded_matmul_scales, 1);
  ASSERT_TRUE(verify_graph(h).ok());
  auto after = evaluate(h, feeds);
  ASSERT_TRUE(after.ok()) << after.status().message();
  EXPECT_EQ((*after)[0].dims(), (Dims{1, 3}));
  expect_close((*before)[0], (*after)[0], 1e-6f);
}

// x[2,3,4] -> Shape -> Gather(0) -> Unsqueeze -> Concat(-1) -> Reshape(x).
Graph shape_chain_graph(Shape x_shape) {
  Graph g;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DType::kFloat32, std::move(x_shape)};
  g.constants["zero"] = Tensor::Scalar<int64_t>(0);
  g.constants["axes"] = Tensor::FromVector<int64_t>({0}, {1});
  g.constants["minus_one"] = Tensor::FromVector<int64_t>({-1}, {1});
  g.nodes.push_back(make_node("Shape", {"x"}, {"s"}));
  g.nodes.push_back(make_node("Gather", {"s", "zero"}, {"s0"}, {{"axis", int_attr(0)}}));
  g.nodes.push_back(make_node("Unsqueeze", {"s0", "axes"}, {"s0u"}));
  g.nodes.push_back(make_node("Concat", {"s0u", "minus_one"}, {"shp"}, {{"axis", int_attr(0)}}));
  g.nodes.push_back(make_node("Reshape", {"x", "shp"}, {"y"}));
  g.outputs = {"y"};
  return g;
}

TEST(ConstantFolding, ShapeChainOfStaticInputBecomesConstant) {
  Graph g = shape_chain_graph(Shape::FromDims({2, 3, 4}));
  ConstantFoldingStats stats;
  ASSERT_TRUE(constant_folding(g, &stats).ok());
  EXPECT_EQ(stats.folded_shapes, 1);
  EXPECT_EQ(stats.folded_nodes, 3);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "Reshape");
  const Tensor* shp = g.constant("shp");
  ASSERT_NE(shp, nullptr);
  EXPECT_EQ(shp->to_int64_vector(), (std::vector<int64_t>{2, -1}));
  ASSERT_TRUE(dce(g).ok());
  EXPECT_FALSE(g.is_constant("s"));
  EXPECT_TRUE(g.is_constant("shp"));
  EXPECT_TRUE(verify_graph(g).ok());
}

TEST(ConstantFolding, ShapeOfSymbolicBatchIsNotFolded) {
  Graph g = shape_chain_graph(Shape({Dim::Symbol("batch"), Dim(3), Dim(4)}));
  ConstantFoldingStats stats;
  ASSERT_TRUE(constant_folding(g, &stats).ok());
  EXPECT_FALSE(stats.changed());
  EXPECT_EQ(g.nodes.size(), 5u);
}

TEST(ConstantFolding, KnownEntriesPickedFromASymbolicShapeFold) {
  Graph g;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DType::kFloat32, Shape({Dim::Symbol("batch"), Dim(3), Dim(4)})};
  g.constants["one"] = Tensor::FromVector<int64_t>({1, -1}, {2});
  g.constants["start"] = Tensor::FromVector<int64_t>({1}, {1});
  g.constants["end"] = Tensor::FromVector<int64_t>({INT64_MAX}, {1});
  g.constants["zero"] = Tensor::Scalar<int64_t>(0);
  g.nodes.push_back(make_node("Shape", {"x"}, {"s"}));
  g.nodes.push_back(make_node("Gather", {"s", "one"}, {"picked"}, {{"axis", int_attr(0)}}));
  g.nodes.push_back(make_node("Slice", {"s", "start", "end"}, {"tail"}));
  g.nodes.push_back(make_node("Gather", {"s", "zero"}, {"batch"}, {{"axis", int_attr(0)}}));
  g.outputs = {"picked", "tail", "batch"};
  ConstantFoldingStats stats;
  ASSERT_TRUE(constant_folding(g, &stats).ok());
  EXPECT_EQ(stats.folded_shapes, 2);
  ASSERT_EQ(g.nodes.size(), 2u);  // Shape and the Gather of the symbolic batch stay
  EXPECT_EQ(g.constant("picked")->to_int64_vector(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(g.constant("tail")->to_int64_vector(), (std::vector<int64_t>{3, 4}));
  EXPECT_FALSE(g.is_constant("batch"));
}

TEST(ConstantFolding, ShapeHonoursStartAndEnd) {
  Graph g;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DType::kFloat32, Shape({Dim::Symbol("n"), Dim(3), Dim(4)})};
  g.nodes.push_back(make_node("Shape", {"x"}, {"s"}, {{"start", int_attr(-2)}}));
  g.nodes.push_back(make_node("Size", {"x"}, {"n"}));
  g.outputs = {"s", "n"};
  ASSERT_TRUE(constant_folding(g).ok());
  ASSERT_EQ(g.nodes.size(), 1u);  // Size needs the symbolic dim
  EXPECT_EQ(g.constant("s")->to_int64_vector(), (std::vector<int64_t>{3, 4}));
}

TEST(ConstantFolding, ConstantNodesAndConstantArithmeticFold) {
  Graph g;
  set_input(g, "x", DType::kFloat32, {2});
  Attribute v;
  v.kind = Attribute::Kind::kTensor;
  v.t = Tensor::FromVector<float>({1.f, 2.f}, {2});
  g.nodes.push_back(make_node("Constant", {}, {"c"}, {{"value", v}}));
  g.nodes.push_back(make_node("Relu", {"c"}, {"r"}));
  g.nodes.push_back(make_node("Add", {"x", "r"}, {"y"}));
  g.outputs = {"y"};
  ConstantFoldingStats stats;
  ASSERT_TRUE(constant_folding(g, &stats).ok());
  EXPECT_EQ(stats.folded_nodes, 2);
  ASSERT_EQ(g.nodes.size(), 1u);
  ASSERT_NE(g.constant("r"), nullptr);
  EXPECT_EQ(g.constant("r")->data<float>()[1], 2.f);
}

TEST(ConstantFolding, HugeBlowUpFromSmallInputIsNotMaterialised) {
  Graph g;
  set_input(g, "x", DType::kFloat32, {4096, 4096});
  g.constants["shape"] = Tensor::FromVector<int64_t>({4096, 4096}, {2});
  g.nodes.push_back(make_node("ConstantOfShape", {"shape"}, {"big"}));  // 64 MiB of float zeros
  g.nodes.push_back(make_node("Add", {"x", "big"}, {"y"}));
  g.outputs = {"y"};
  ConstantFoldingStats stats;
  ASSERT_TRUE(constant_folding(g, &stats).ok());
  EXPECT_EQ(stats.skipped_large, 1);
  EXPECT_EQ(g.nodes.size(), 2u);
}

TEST(ConstantFolding, RandomGeneratorsAreNotFolded) {
  Graph g;
  g.constants["like"] = Tensor::FromVector<float>({1.f, 2.f}, {2});
  g.nodes.push_back(make_node("RandomUniformLike", {"like"}, {"y"}));
  g.outputs = {"y"};
  ASSERT_TRUE(constant_folding(g).ok());
  EXPECT_EQ(g.nodes.size(), 1u);
}

TEST(ConstantFolding, NestedGraphFoldsAgainstOuterConstants) {
  Graph g;
  set_input(g, "cond", DType::kBool, {});
  g.constants["k"] = Tensor::FromVector<float>({-1.f, 3.f}, {2});
  Graph then_g;
  then_g.nodes.push_back(make_node("Relu", {"k"}, {"t"}));
  then_g.outputs = {"t"};
  Graph else_g;
  else_g.outputs = {"k"};
  g.nodes.push_back(
      make_node("If", {"cond"}, {"y"}, {{"then_branch", graph_attr(then_g)}, {"else_branch", graph_attr(else_g)}}));
  g.outputs = {"y"};
  ASSERT_TRUE(constant_folding(g).ok());
  ASSERT_EQ(g.nodes.size(), 1u);  // the If itself is not executed
  const Graph& body = *g.nodes[0].attr_graph("then_branch");
  EXPECT_TRUE(body.nodes.empty());
  ASSERT_NE(body.constant("t"), nullptr);
  EXPECT_EQ(body.constant("t")->data<float>()[0], 0.f);
}

TEST(Dce, RemovesDeadNodesAndConstantsButKeepsWhatNestedGraphsRead) {
  Graph g;
  set_input(g, "x", DType::kFloat32, {2});
  set_input(g, "cond", DType::kBool, {});
  set_input(g, "unused_input", DType::kFloat32, {2});
  g.constants["k_inner"] = Tensor::FromVector<float>({1.f, 2.f}, {2});
  g.constants["k_dead"] = Tensor::FromVector<float>({1.f, 2.f}, {2});
  g.nodes.push_back(make_node("Relu", {"x"}, {"u"}));            // read only inside the branch
  g.nodes.push_back(make_node("Neg", {"x"}, {"dead"}));          // read by nobody
  g.nodes.push_back(make_node("Add", {"dead", "k_dead"}, {"dead2"}));
  Graph then_g;
  then_g.constants["local_dead"] = Tensor::Scalar<float>(1.f);
  then_g.nodes.push_back(make_node("Add", {"u", "k_inner"}, {"t"}));
  then_g.nodes.push_back(make_node("Neg", {"t"}, {"t_dead"}));
  then_g.outputs = {"t"};
  Graph else_g;
  else_g.outputs = {"x"};
  g.nodes.push_back(
      make_node("If", {"cond"}, {"y"}, {{"then_branch", graph_attr(then_g)}, {"else_branch", graph_attr(else_g)}}));
  g.outputs = {"y"};
  DceStats stats;
  ASSERT_TRUE(dce(g, &stats).ok());
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].outputs[0], "u");
  EXPECT_EQ(g.nodes[1].op_type, "If");
  EXPECT_TRUE(g.is_constant("k_inner"));
  EXPECT_FALSE(g.is_constant("k_dead"));
  EXPECT_EQ(g.inputs.size(), 3u);
  const Graph& body = *g.nodes[1].attr_graph("then_branch");
  EXPECT_EQ(body.nodes.size(), 1u);
  EXPECT_FALSE(body.is_constant("local_dead"));
  EXPECT_EQ(stats.removed_nodes, 3);
  EXPECT_EQ(stats.removed_constants, 2);
  EXPECT_TRUE(verify_graph(g).ok());
}

TEST(Dce, GraphWithoutNodesKeepsInputThatIsAlsoOutput) {
  Graph g;
  set_input(g, "x", DType::kFloat32, {2});
  g.outputs = {"x"};
  DceStats stats;
  ASSERT_TRUE(dce(g, &stats).ok());
  EXPECT_FALSE(stats.changed());
  EXPECT_EQ(g.inputs, g.outputs);
}

TEST(Pipeline, ShapeChainConvBnAndIdentitiesCollapse) {
  // x -> Conv -> BN -> Identity -> Reshape(Shape chain of the BN output) -> y
  Graph g = conv_bn_graph(false, 1);
  g.nodes.back().outputs[0] = "bn";
  g.nodes.push_back(make_node("Identity", {"bn"}, {"id"}));
  g.constants["zero"] = Tensor::Scalar<int64_t>(0);
  g.constants["axes"] = Tensor::FromVector<int64_t>({0}, {1});
  g.constants["minus_one"] = Tensor::FromVector<int64_t>({-1}, {1});
  g.nodes.push_back(make_node("Shape", {"id"}, {"s"}));
  g.nodes.push_back(make_node("Gather", {"s", "zero"}, {"s0"}, {{"axis", int_attr(0)}}));
  g.nodes.push_back(make_node("Unsqueeze", {"s0", "axes"}, {"s0u"}));
  g.nodes.push_back(make_node("Concat", {"s0u", "minus_one"}, {"shp"}, {{"axis", int_attr(0)}}));
  g.nodes.push_back(make_node("Reshape", {"id", "shp"}, {"y"}));
  g.outputs = {"y"};
  std::map<std::string, Tensor> feeds{{"x", random_tensor({1, 4, 5, 5}, 7)}};
  auto before = evaluate(g, feeds);
  ASSERT_TRUE(before.ok()) << before.status().message();

  OptimizeStats stats;
  Status st = optimize_graph(g, OptimizeOptions{}, &stats);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(g.nodes.size(), 2u) << print_graph(g);
  EXPECT_EQ(g.nodes[0].op_type, "Conv");
  EXPECT_EQ(g.nodes[1].op_type, "Reshape");
  EXPECT_EQ(g.outputs, std::vector<std::string>{"y"});
  const ValueInfo* yi = g.info("y");
  ASSERT_NE(yi, nullptr);
  EXPECT_EQ(yi->shape.str(), "[1,150]");
  auto after = evaluate(g, feeds);
  ASSERT_TRUE(after.ok()) << after.status().message();
  expect_close((*before)[0], (*after)[0], 1e-4f);
}

TEST(Pipeline, OptimisingACopyLeavesTheOriginalsNestedGraphsAlone) {
  // A session keeps a generic graph and optimises copies pinned to concrete
  // input shapes; the copies share nested graphs with the original.
  Graph g;
  g.inputs = {"x", "cond"};
  g.values["x"] = ValueInfo{DType::kFloat32, Shape({Dim::Symbol("n"), Dim(3)})};
  g.values["cond"] = ValueInfo{DType::kBool, Shape::FromDims({})};
  Graph then_g;
  then_g.nodes.push_back(make_node("Shape", {"x"}, {"s"}));
  then_g.outputs = {"s"};
  Graph else_g;
  else_g.nodes.push_back(make_node("Shape", {"x"}, {"s2"}));
  else_g.outputs = {"s2"};
  g.nodes.push_back(
      make_node("If", {"cond"}, {"y"}, {{"then_branch", graph_attr(then_g)}, {"else_branch", graph_attr(else_g)}}));
  g.outputs = {"y"};

  Graph pinned = g;
  pinned.values["x"].shape = Shape::FromDims({2, 3});
  Status st = optimize_graph(pinned, OptimizeOptions{});
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(pinned.nodes[0].attr_graph("then_branch")->nodes.empty());
  EXPECT_EQ(g.nodes[0].attr_graph("then_branch")->nodes.size(), 1u);
  EXPECT_FALSE(g.nodes[0].attr_graph("then_branch")->is_constant("s"));
}

}  // namespace
}  // namespace tessera
