// If / Loop / Scan through a minimal test-only SubgraphRunner that runs a
// body node by node with run_node_once and resolves outer-scope names from a
// map.
#include <gtest/gtest.h>

#include <map>

#include "ir/graph.h"
#include "ops/op_registry.h"
#include "ops/node_runner.h"
#include "unit/op_test_util.h"

namespace tessera {
namespace {

using testutil::set_int;
using testutil::set_ints;
using testutil::graph_node;
using testutil::set_graph;

class TestRunner final : public SubgraphRunner {
 public:
  TestRunner(std::map<std::string, Tensor> outer, int64_t opset) : outer_(std::move(outer)), opset_(opset) {}

  Expected<std::vector<Tensor>> run(const Graph& g, const std::vector<Tensor>& inputs) override {
    ++runs;
    std::map<std::string, Tensor> env = outer_;
    for (const auto& kv : g.constants) env[kv.first] = kv.second;
    for (size_t i = 0; i < inputs.size() && i < g.inputs.size(); ++i) env[g.inputs[i]] = inputs[i];
    TestRunner nested(env, opset_);
    for (const Node& n : g.nodes) {
      std::vector<Tensor> in(n.inputs.size());
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (n.inputs[i].empty()) continue;
        auto it = env.find(n.inputs[i]);
        if (it == env.end()) return RuntimeError("no value for " + n.inputs[i]);
        in[i] = it->second;
      }
      std::vector<Tensor> out;
      TSR_ASSIGN_OR_RETURN(out, run_node_once(n, opset_, in, nullptr, &nested));
      for (size_t i = 0; i < n.outputs.size(); ++i)
        if (!n.outputs[i].empty()) env[n.outputs[i]] = out[i];
    }
    std::vector<Tensor> res;
    for (const auto& o : g.outputs) res.push_back(env.at(o));
    return res;
  }
  int runs = 0;

 private:
  std::map<std::string, Tensor> outer_;
  int64_t opset_;
};

std::vector<float> values(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

// ---- If ---------------------------------------------------------------------

// then: out = x + 1 (x from the outer scope, [2]); else: out = [7,8,9].
Node if_node() {
  Graph then_g;
  then_g.name = "then";
  then_g.constants["one"] = Tensor::FromVector<float>({1.f}, {1});
  then_g.nodes.push_back(graph_node("Add", {"x", "one"}, {"t_out"}));
  then_g.outputs = {"t_out"};
  then_g.values["t_out"] = ValueInfo{DType::kFloat32, Shape::FromDims({2})};
  Graph else_g;
  else_g.name = "else";
  else_g.constants["c"] = Tensor::FromVector<float>({7, 8, 9}, {3});
  else_g.nodes.push_back(graph_node("Identity", {"c"}, {"e_out"}));
  else_g.outputs = {"e_out"};
  else_g.values["e_out"] = ValueInfo{DType::kFloat32, Shape::FromDims({3})};
  Node n = graph_node("If", {"cond"}, {"y"});
  set_graph(n, "then_branch", std::move(then_g));
  set_graph(n, "else_branch", std::move(else_g));
  return n;
}

TEST(ControlFlowOps, IfRunsTheSelectedBranchWithOuterScopeValues) {
  Node n = if_node();
  Tensor x = Tensor::FromVector<float>({1, 2}, {2});
  TestRunner runner({{"x", x}}, 13);
  auto yes = run_node_once(n, 13, {Tensor::Scalar<bool>(true)}, nullptr, &runner);
  ASSERT_TRUE(yes.ok()) << yes.status().message();
  EXPECT_EQ(values((*yes)[0]), (std::vector<float>{2, 3}));
  auto no = run_node_once(n, 13, {Tensor::Scalar<bool>(false)}, nullptr, &runner);
  ASSERT_TRUE(no.ok()) << no.status().message();
  EXPECT_EQ(values((*no)[0]), (std::vector<float>{7, 8, 9}));
}

TEST(ControlFlowOps, IfInferenceMergesBranchShapes) {
  Node n = if_node();
  InferContext ctx(n, 13, {ValueInfo{DType::kBool, Shape::FromDims({})}}, {});
  ASSERT_TRUE(OpRegistry::instance().find("", "If")->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[0].dtype, DType::kFloat32);
  EXPECT_EQ(ctx.outputs()[0].shape.str(), "[?]");
  // A constant condition selects the branch's exact type.
  Tensor cond = Tensor::Scalar<bool>(false);
  InferContext cctx(n, 13, {ValueInfo{DType::kBool, Shape::FromDims({})}}, {&cond});
  ASSERT_TRUE(OpRegistry::instance().find("", "If")->infer(cctx).ok());
  EXPECT_EQ(cctx.outputs()[0].shape.str(), "[3]");
}

TEST(ControlFlowOps, IfWithoutRunnerFailsCleanly) {
  auto res = run_node_once(if_node(), 13, {Tensor::Scalar<bool>(true)});
  EXPECT_FALSE(res.ok());
}

// ---- Loop ---------------------------------------------------------------------

// body(i, cond, v): v' = v + i (as float); scan = v' * 2; cond' = v' < limit.
Graph loop_body() {
  Graph b;
  b.name = "body";
  b.inputs = {"i", "cond_in", "v"};
  b.values["i"] = ValueInfo{DType::kInt64, Shape::FromDims({})};
  b.values["cond_in"] = ValueInfo{DType::kBool, Shape::FromDims({})};
  b.values["v"] = ValueInfo{DType::kFloat32, Shape::FromDims({2})};
  b.constants["two"] = Tensor::FromVector<float>({2.f}, {1});
  b.constants["limit"] = Tensor::Scalar<float>(10.f);
  Node cast = graph_node("Cast", {"i"}, {"fi"});
  set_int(cast, "to", static_cast<int64_t>(DType::kFloat32));
  b.nodes.push_back(cast);
  b.nodes.push_back(graph_node("Add", {"v", "fi"}, {"v_out"}));
  b.nodes.push_back(graph_node("Mul", {"v_out", "two"}, {"scan"}));
  b.nodes.push_back(graph_node("ReduceMax", {"v_out"}, {"vmax"}));
  b.nodes.back().attrs["keepdims"] = Attribute{};
  b.nodes.back().attrs["keepdims"].kind = Attribute::Kind::kInt;
  b.nodes.back().attrs["keepdims"].i = 0;
  b.nodes.push_back(graph_node("Less", {"vmax", "limit"}, {"cond_out"}));
  b.outputs = {"cond_out", "v_out", "scan"};
  b.values["cond_out"] = ValueInfo{DType::kBool, Shape::FromDims({})};
  b.values["v_out"] = ValueInfo{DType::kFloat32, Shape::FromDims({2})};
  b.values["scan"] = ValueInfo{DType::kFloat32, Shape::FromDims({2})};
  return b;
}

TEST(ControlFlowOps, LoopWithTripCountIgnoresBodyCondition) {
  Node n = graph_node("Loop", {"M", "", "v0"}, {"v_final", "scans"});
  set_graph(n, "body", loop_body());
  TestRunner runner({}, 13);
  auto res = run_node_once(n, 13, {Tensor::Scalar<int64_t>(6), Tensor(), Tensor::FromVector<float>({0, 1}, {2})},
                           nullptr, &runner);
  ASSERT_TRUE(res.ok()) << res.status().message();
  // v after i = 0..5: v + 15.
  EXPECT_EQ(values((*res)[0]), (std::vector<float>{15, 16}));
  ASSERT_EQ((*res)[1].dims(), (Dims{6, 2}));
  EXPECT_EQ(values((*res)[1]), (std::vector<float>{0, 2, 2, 4, 6, 8, 12, 14, 20, 22, 30, 32}));
}

TEST(ControlFlowOps, LoopStopsWhenConditionTurnsFalse) {
  Node n = graph_node("Loop", {"M", "cond", "v0"}, {"v_final", "scans"});
  set_graph(n, "body", loop_body());
  TestRunner runner({}, 13);
  auto res = run_node_once(n, 13,
                           {Tensor::Scalar<int64_t>(100), Tensor::Scalar<bool>(true),
                            Tensor::FromVector<float>({0, 1}, {2})},
                           nullptr, &runner);
  ASSERT_TRUE(res.ok()) << res.status().message();
  // v: [0,1] -> [0,1] -> [1,2] -> [3,4] -> [6,7] -> [10,11] (max 11 >= 10 stops).
  EXPECT_EQ(values((*res)[0]), (std::vector<float>{10, 11}));
  EXPECT_EQ((*res)[1].dims(), (Dims{5, 2}));
  EXPECT_EQ(runner.runs, 5);
}

TEST(ControlFlowOps, LoopWithZeroTripsReturnsInitialValues) {
  Node n = graph_node("Loop", {"M", "", "v0"}, {"v_final", "scans"});
  set_graph(n, "body", loop_body());
  TestRunner runner({}, 13);
  auto res = run_node_once(n, 13, {Tensor::Scalar<int64_t>(0), Tensor(), Tensor::FromVector<float>({4, 5}, {2})},
                           nullptr, &runner);
  ASSERT_TRUE(res.ok()) << res.status().message();
  EXPECT_EQ(values((*res)[0]), (std::vector<float>{4, 5}));
  EXPECT_EQ((*res)[1].dims(), (Dims{0, 2}));
}

TEST(ControlFlowOps, LoopInferenceUsesConstantTripCount) {
  Node n = graph_node("Loop", {"M", "", "v0"}, {"v_final", "scans"});
  set_graph(n, "body", loop_body());
  Tensor m = Tensor::Scalar<int64_t>(4);
  InferContext ctx(n, 13,
                   {ValueInfo{DType::kInt64, Shape::FromDims({})}, ValueInfo{},
                    ValueInfo{DType::kFloat32, Shape::FromDims({2})}},
                   {&m, nullptr, nullptr});
  ASSERT_TRUE(OpRegistry::instance().find("", "Loop")->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[0].shape.str(), "[2]");
  EXPECT_EQ(ctx.outputs()[1].shape.str(), "[4,2]");
  // With a condition input the trip count is unknown.
  Node w = graph_node("Loop", {"M", "cond", "v0"}, {"v_final", "scans"});
  set_graph(w, "body", loop_body());
  InferContext wctx(w, 13,
                    {ValueInfo{DType::kInt64, Shape::FromDims({})}, ValueInfo{DType::kBool, Shape::FromDims({})},
                     ValueInfo{DType::kFloat32, Shape::FromDims({2})}},
                    {&m, nullptr, nullptr});
  ASSERT_TRUE(OpRegistry::instance().find("", "Loop")->infer(wctx).ok());
  EXPECT_EQ(wctx.outputs()[1].shape.str(), "[?,2]");
}

// ---- Scan ---------------------------------------------------------------------

// body(sum, x): sum' = sum + x; out = sum'.
Graph scan_body(Dims state) {
  Graph b;
  b.name = "scan_body";
  b.inputs = {"s", "x"};
  b.values["s"] = ValueInfo{DType::kFloat32, Shape::FromDims(state)};
  b.values["x"] = ValueInfo{DType::kFloat32, Shape::FromDims(state)};
  b.nodes.push_back(graph_node("Add", {"s", "x"}, {"s_out"}));
  b.nodes.push_back(graph_node("Identity", {"s_out"}, {"o"}));
  b.outputs = {"s_out", "o"};
  b.values["s_out"] = ValueInfo{DType::kFloat32, Shape::FromDims(state)};
  b.values["o"] = ValueInfo{DType::kFloat32, Shape::FromDims(state)};
  return b;
}

TEST(ControlFlowOps, Scan9HonoursInputAndOutputAxesAndDirections) {
  // x [2,3] scanned along axis 1 in reverse: slices [x0j, x1j] for j = 2,1,0.
  Node n = graph_node("Scan", {"init", "x"}, {"final", "outs"});
  set_graph(n, "body", scan_body({2}));
  set_int(n, "num_scan_inputs", 1);
  set_ints(n, "scan_input_axes", {1});
  set_ints(n, "scan_input_directions", {1});
  set_ints(n, "scan_output_axes", {-1});
  set_ints(n, "scan_output_directions", {1});
  TestRunner runner({}, 11);
  Tensor x = Tensor::FromVector<float>({1, 2, 3, 10, 20, 30}, {2, 3});
  auto res = run_node_once(n, 11, {Tensor::FromVector<float>({0, 0}, {2}), x}, nullptr, &runner);
  ASSERT_TRUE(res.ok()) << res.status().message();
  EXPECT_EQ(values((*res)[0]), (std::vector<float>{6, 60}));
  // Partial sums in processing order: [3,30], [5,50], [6,60]; written along
  // axis 1 in reverse: column 2 gets the first.
  ASSERT_EQ((*res)[1].dims(), (Dims{2, 3}));
  EXPECT_EQ(values((*res)[1]), (std::vector<float>{6, 5, 3, 60, 50, 30}));
}

TEST(ControlFlowOps, Scan8RunsPerBatchWithSequenceLengths) {
  Node n = graph_node("Scan", {"lens", "init", "x"}, {"final", "outs"});
  set_graph(n, "body", scan_body({1}));
  set_int(n, "num_scan_inputs", 1);
  TestRunner runner({}, 8);
  Tensor x = Tensor::FromVector<float>({1, 2, 3, 10, 20, 30}, {2, 3, 1});
  auto res = run_node_once(n, 8,
                           {Tensor::FromVector<int64_t>({3, 2}, {2}), Tensor::FromVector<float>({0, 100}, {2, 1}), x},
                           nullptr, &runner);
  ASSERT_TRUE(res.ok()) << res.status().message();
  EXPECT_EQ(values((*res)[0]), (std::vector<float>{6, 130}));
  ASSERT_EQ((*res)[1].dims(), (Dims{2, 3, 1}));
  EXPECT_EQ(values((*res)[1]), (std::vector<float>{1, 3, 6, 110, 130, 0}));
}

TEST(ControlFlowOps, ScanInferenceInsertsSequenceAxis) {
  Node n = graph_node("Scan", {"init", "x"}, {"final", "outs"});
  set_graph(n, "body", scan_body({2}));
  set_int(n, "num_scan_inputs", 1);
  set_ints(n, "scan_input_axes", {1});
  set_ints(n, "scan_output_axes", {1});
  InferContext ctx(n, 11,
                   {ValueInfo{DType::kFloat32, Shape::FromDims({2})},
                    ValueInfo{DType::kFloat32, Shape(std::vector<Dim>{Dim(2), Dim::Symbol("T")})}},
                   {});
  ASSERT_TRUE(OpRegistry::instance().find("", "Scan")->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[0].shape.str(), "[2]");
  EXPECT_EQ(ctx.outputs()[1].shape.str(), "[2,T]");
}

}  // namespace
}  // namespace tessera
