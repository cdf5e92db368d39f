// Gather/scatter family: index semantics (negative, int32/int64, batch
// dims), reductions, selection ops and their value-dependent shapes.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"
#include "ops/op_registry.h"
#include "ops/node_runner.h"
#include "util/thread_pool.h"
#include "unit/op_test_util.h"

namespace tessera {
namespace {

using testutil::f32;
using testutil::i64;
using testutil::iota_f32;
using testutil::values;

struct NodeBuilder : testutil::AttrSetters<NodeBuilder> {
  Node n;
  NodeBuilder(const std::string& op, int num_inputs, int num_outputs = 1) {
    n.name = "n";
    n.op_type = op;
    for (int i = 0; i < num_inputs; ++i) n.inputs.push_back("in" + std::to_string(i));
    for (int i = 0; i < num_outputs; ++i) n.outputs.push_back("out" + std::to_string(i));
  }
};

Tensor i64(std::vector<int64_t> v, Dims d) { return Tensor::FromVector(v, std::move(d)); }

std::vector<Tensor> run(const Node& n, const std::vector<Tensor>& in, int64_t opset = 17) {
  ThreadPool pool(2);
  auto r = run_node_once(n, opset, in, &pool);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r.value() : std::vector<Tensor>{};
}

using V = std::vector<double>;

TEST(GatherScatterOps, GatherNegativeInt32IndicesOnInnerAxis) {
  auto out = run(NodeBuilder("Gather", 2).i("axis", 1).n,
                 {iota_f32({2, 3}), Tensor::FromVector<int32_t>({-1, 0, 2, 2}, {2, 2})});
  EXPECT_EQ(out[0].dims(), (Dims{2, 2, 2}));
  EXPECT_EQ(values(out[0]), (V{2, 0, 2, 2, 5, 3, 5, 5}));
}

TEST(GatherScatterOps, GatherScalarIndexDropsAxisAndKeepsSymbols) {
  auto out = run(NodeBuilder("Gather", 2).n, {iota_f32({3, 2}), Tensor::Scalar<int64_t>(1)});
  EXPECT_EQ(out[0].dims(), (Dims{2}));
  EXPECT_EQ(values(out[0]), (V{2, 3}));
  const OpSchema* s = OpRegistry::instance().find("", "Gather");
  Node n = NodeBuilder("Gather", 2).n;
  InferContext ctx(n, 17,
                   {ValueInfo{DType::kFloat32, Shape({Dim(30522), Dim(768)})},
                    ValueInfo{DType::kInt64, Shape({Dim::Symbol("batch"), Dim::Symbol("seq")})}},
                   {nullptr, nullptr});
  ASSERT_TRUE(s->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[0].shape.str(), "[batch,seq,768]");
}

TEST(GatherScatterOps, GatherRejectsOutOfRangeIndex) {
  auto r = run_node_once(NodeBuilder("Gather", 2).n, 17, {iota_f32({3}), i64({3})});
  EXPECT_FALSE(r.ok());
}

TEST(GatherScatterOps, GatherElementsAndGatherNDWithBatchDims) {
  auto ge = run(NodeBuilder("GatherElements", 2).i("axis", 1).n, {iota_f32({2, 2}), i64({0, 0, -1, 0}, {2, 2})});
  EXPECT_EQ(values(ge[0]), (V{0, 0, 3, 2}));
  auto nd = run(NodeBuilder("GatherND", 2).i("batch_dims", 1).n, {iota_f32({2, 2, 2}), i64({1, 0}, {2, 1})});
  EXPECT_EQ(nd[0].dims(), (Dims{2, 2}));
  EXPECT_EQ(values(nd[0]), (V{2, 3, 4, 5}));
}

TEST(GatherScatterOps, ScatterElementsReductions) {
  Tensor data = f32({1, 2, 3, 4}, {1, 4});
  Tensor idx = i64({1, 1}, {1, 2});
  Tensor upd = f32({10, 20}, {1, 2});
  auto add = run(NodeBuilder("ScatterElements", 3).i("axis", 1).s("reduction", "add").n, {data, idx, upd}, 16);
  EXPECT_EQ(values(add[0]), (V{1, 32, 3, 4}));
  auto mul = run(NodeBuilder("ScatterElements", 3).i("axis", 1).s("reduction", "mul").n, {data, idx, upd}, 16);
  EXPECT_EQ(values(mul[0]), (V{1, 400, 3, 4}));
  auto none = run(NodeBuilder("Scatter", 3).i("axis", 1).n, {data, i64({-1, 0}, {1, 2}), upd}, 9);
  EXPECT_EQ(values(none[0]), (V{20, 2, 3, 10}));
}

TEST(GatherScatterOps, ScatterNDReplacesAndAddsSlices) {
  Tensor data = iota_f32({2, 2});
  auto r = run(NodeBuilder("ScatterND", 3).n, {data, i64({1}, {1, 1}), f32({7, 8}, {1, 2})});
  EXPECT_EQ(values(r[0]), (V{0, 1, 7, 8}));
  auto a = run(NodeBuilder("ScatterND", 3).s("reduction", "add").n, {data, i64({0, 1, 0, 1}, {2, 2}), f32({5, 5}, {2})}, 16);
  EXPECT_EQ(values(a[0]), (V{0, 11, 2, 3}));
}

TEST(GatherScatterOps, OneHotWithNegativeIndicesAndAxis) {
  auto r = run(NodeBuilder("OneHot", 3).i("axis", 0).n,
               {i64({0, -1, 5}), Tensor::Scalar<float>(3.f), f32({0, 1}, {2})});
  EXPECT_EQ(r[0].dims(), (Dims{3, 3}));
  // Column j is the one-hot of index j; 5 is out of range.
  EXPECT_EQ(values(r[0]), (V{1, 0, 0, 0, 0, 0, 0, 1, 0}));
}

TEST(GatherScatterOps, TopKBreaksTiesByLowerIndex) {
  Tensor x = f32({1, 3, 3, 2, 3}, {1, 5});
  auto big = run(NodeBuilder("TopK", 2, 2).n, {x, i64({3})}, 11);
  EXPECT_EQ(values(big[0]), (V{3, 3, 3}));
  EXPECT_EQ(values(big[1]), (V{1, 2, 4}));
  auto small = run(NodeBuilder("TopK", 2, 2).i("largest", 0).i("axis", 1).n, {x, i64({2})}, 11);
  EXPECT_EQ(values(small[0]), (V{1, 2}));
  EXPECT_EQ(values(small[1]), (V{0, 3}));
  auto old = run(NodeBuilder("TopK", 1, 2).i("k", 1).n, {x}, 9);
  EXPECT_EQ(values(old[1]), (V{1}));
}

TEST(GatherScatterOps, NonZeroAndCompressHaveValueDependentShapes) {
  auto nz = run(NodeBuilder("NonZero", 1).n, {f32({0, 2, 3, 0}, {2, 2})});
  EXPECT_EQ(nz[0].dims(), (Dims{2, 2}));
  EXPECT_EQ(values(nz[0]), (V{0, 1, 1, 0}));
  Tensor cond = Tensor::FromVector<bool>({false, true}, {2});
  auto c = run(NodeBuilder("Compress", 2).i("axis", 1).n, {iota_f32({2, 3}), cond});
  EXPECT_EQ(c[0].dims(), (Dims{2, 1}));
  EXPECT_EQ(values(c[0]), (V{1, 4}));
  auto flat = run(NodeBuilder("Compress", 2).n, {iota_f32({2, 3}), cond});
  EXPECT_EQ(values(flat[0]), (V{1}));
}

TEST(GatherScatterOps, ReverseSequenceAndCumSum) {
  auto rs = run(NodeBuilder("ReverseSequence", 2).i("batch_axis", 0).i("time_axis", 1).n,
                {iota_f32({2, 3}), i64({3, 2})});
  EXPECT_EQ(values(rs[0]), (V{2, 1, 0, 4, 3, 5}));
  auto cs = run(NodeBuilder("CumSum", 2).i("exclusive", 1).i("reverse", 1).n,
                {f32({1, 2, 3, 4, 5, 6}, {2, 3}), Tensor::Scalar<int32_t>(-1)});
  EXPECT_EQ(values(cs[0]), (V{5, 3, 0, 11, 6, 0}));
  auto ci = run(NodeBuilder("CumSum", 2).n, {i64({1, 2, 3, 4}, {2, 2}), Tensor::Scalar<int64_t>(0)});
  EXPECT_EQ(values(ci[0]), (V{1, 2, 4, 6}));
}

TEST(GatherScatterOps, UniqueSortedAndInFirstOccurrenceOrder) {
  Tensor x = f32({2, 1, 1, 3, 4, 3}, {6});
  auto u = run(NodeBuilder("Unique", 1, 4).i("sorted", 0).n, {x}, 11);
  EXPECT_EQ(values(u[0]), (V{2, 1, 3, 4}));
  EXPECT_EQ(values(u[1]), (V{0, 1, 3, 4}));
  EXPECT_EQ(values(u[2]), (V{0, 1, 1, 2, 3, 2}));
  EXPECT_EQ(values(u[3]), (V{1, 2, 2, 1}));
  auto s = run(NodeBuilder("Unique", 1, 4).n, {x}, 11);
  EXPECT_EQ(values(s[0]), (V{1, 2, 3, 4}));
  EXPECT_EQ(values(s[2]), (V{1, 0, 0, 2, 3, 2}));
}

}  // namespace
}  // namespace tessera
