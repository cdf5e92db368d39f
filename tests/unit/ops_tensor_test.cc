// Tensor family: shape inference (including symbolic dims at compile time)
// and kernels checked against hand-computed or naively computed results.
#include <gtest/gtest.h>

#include <climits>
#include <numeric>
#include <random>
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

// Small builder for single-node tests.
struct NodeBuilder : testutil::AttrSetters<NodeBuilder> {
  Node n;
  NodeBuilder(const std::string& op, int num_inputs, int num_outputs = 1) {
    n.name = "n";
    n.op_type = op;
    for (int i = 0; i < num_inputs; ++i) n.inputs.push_back("in" + std::to_string(i));
    for (int i = 0; i < num_outputs; ++i) n.outputs.push_back("out" + std::to_string(i));
  }
  NodeBuilder& absent(int input) {
    n.inputs[static_cast<size_t>(input)] = "";
    return *this;
  }
};

std::vector<Tensor> run(const Node& n, const std::vector<Tensor>& in, int64_t opset = 17, ThreadPool* pool = nullptr) {
  auto r = run_node_once(n, opset, in, pool);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r.value() : std::vector<Tensor>{};
}

// Compile-time inference: shapes may be symbolic, values only where given.
std::vector<ValueInfo> infer(const Node& n, std::vector<ValueInfo> in, std::vector<const Tensor*> vals = {},
                             int64_t opset = 17) {
  const OpSchema* s = OpRegistry::instance().find("", n.op_type);
  EXPECT_NE(s, nullptr);
  vals.resize(in.size(), nullptr);
  InferContext ctx(n, opset, std::move(in), std::move(vals));
  Status st = s->infer(ctx);
  EXPECT_TRUE(st.ok()) << st.message();
  return ctx.outputs();
}

ValueInfo vi(DType t, Shape s) { return ValueInfo{t, std::move(s)}; }
Shape sym(std::vector<Dim> d) { return Shape(std::move(d)); }
Dim S(const char* name) { return Dim::Symbol(name); }

// ---- Reshape / Flatten / Squeeze / Unsqueeze ---------------------------------

TEST(TensorOps, ReshapeCopiesZeroDimsAndInfersMinusOne) {
  auto out = run(NodeBuilder("Reshape", 2).n, {iota_f32({2, 3, 4}), i64({0, -1})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dims(), (Dims{2, 12}));
  EXPECT_EQ(out[0].as_double(13), 13.0);
}

// Reshape-1 (before opset 5) takes the new shape as an attribute; without it the node is refused, never left with an
// unproduced output (found by fuzz_onnx: an empty input made the copy succeed with nothing to copy).
TEST(TensorOps, ReshapeBeforeOpset5TakesItsShapeAttribute) {
  auto out = run(NodeBuilder("Reshape", 1).ints("shape", {4, 0, -1}).n, {iota_f32({2, 3, 4})}, 4);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dims(), (Dims{4, 3, 2}));
  EXPECT_EQ(out[0].data<float>()[23], 23.f);
  auto none = run_node_once(NodeBuilder("Reshape", 1).n, 4, {Tensor(DType::kFloat32, {2, 0})});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("'shape' attribute"), std::string::npos) << none.status().message();
}

TEST(TensorOps, ReshapeAllowZeroKeepsZeroDims) {
  auto out = run(NodeBuilder("Reshape", 2).i("allowzero", 1).n, {Tensor(DType::kFloat32, {0, 3}), i64({3, 0})}, 14);
  EXPECT_EQ(out[0].dims(), (Dims{3, 0}));
}

TEST(TensorOps, ReshapeInferenceKeepsSymbolicBatch) {
  Node n = NodeBuilder("Reshape", 2).n;
  Tensor shape = i64({0, -1});
  auto o = infer(n, {vi(DType::kFloat32, sym({S("batch"), 12, 64})), vi(DType::kInt64, Shape::FromDims({2}))},
                 {nullptr, &shape});
  EXPECT_EQ(o[0].shape.str(), "[batch,768]");
  Tensor heads = i64({0, 0, 12, 64});
  o = infer(n, {vi(DType::kFloat32, sym({S("batch"), S("seq"), 768})), vi(DType::kInt64, Shape::FromDims({4}))},
            {nullptr, &heads});
  EXPECT_EQ(o[0].shape.str(), "[batch,seq,12,64]");
  Tensor merge = i64({-1, 64});
  o = infer(n, {vi(DType::kFloat32, sym({S("batch"), 12, 64})), vi(DType::kInt64, Shape::FromDims({2}))},
            {nullptr, &merge});
  EXPECT_EQ(o[0].shape.str(), "[?,64]");
}

TEST(TensorOps, ReshapeWithUnknownShapeValuesGivesRankOnly) {
  auto o = infer(NodeBuilder("Reshape", 2).n,
                 {vi(DType::kFloat32, sym({S("b"), 4})), vi(DType::kInt64, Shape::FromDims({3}))});
  EXPECT_EQ(o[0].shape.str(), "[?,?,?]");
  o = infer(NodeBuilder("Reshape", 2).n, {vi(DType::kFloat32, Shape::Unranked()), vi(DType::kInt64, Shape::Unranked())});
  EXPECT_FALSE(o[0].shape.rank_known);
}

TEST(TensorOps, ReshapeRejectsMismatchedSize) {
  auto r = run_node_once(NodeBuilder("Reshape", 2).n, 17, {iota_f32({2, 3}), i64({4, 2})});
  EXPECT_FALSE(r.ok());
}

TEST(TensorOps, FlattenKeepsSingleSymbol) {
  auto o = infer(NodeBuilder("Flatten", 1).i("axis", 1).n, {vi(DType::kFloat32, sym({S("batch"), 3, 4}))});
  EXPECT_EQ(o[0].shape.str(), "[batch,12]");
  o = infer(NodeBuilder("Flatten", 1).i("axis", -1).n, {vi(DType::kFloat32, sym({S("batch"), 3, 4}))});
  EXPECT_EQ(o[0].shape.str(), "[?,4]");
  auto out = run(NodeBuilder("Flatten", 1).i("axis", 0).n, {iota_f32({2, 3})});
  EXPECT_EQ(out[0].dims(), (Dims{1, 6}));
}

TEST(TensorOps, SqueezeAxesFromAttributeBeforeOpset13AndInputAfter) {
  auto a = run(NodeBuilder("Squeeze", 1).ints("axes", {0, -1}).n, {iota_f32({1, 3, 1})}, 11);
  EXPECT_EQ(a[0].dims(), (Dims{3}));
  auto b = run(NodeBuilder("Squeeze", 2).n, {iota_f32({1, 3, 1}), i64({2})}, 13);
  EXPECT_EQ(b[0].dims(), (Dims{1, 3}));
  auto c = run(NodeBuilder("Squeeze", 1).n, {iota_f32({1, 3, 1})}, 13);
  EXPECT_EQ(c[0].dims(), (Dims{3}));
}

TEST(TensorOps, SqueezeRejectsNonUnitAxis) {
  EXPECT_FALSE(run_node_once(NodeBuilder("Squeeze", 1).ints("axes", {1}).n, 11, {iota_f32({1, 3})}).ok());
}

TEST(TensorOps, UnsqueezeInsertsAtNormalizedOutputAxes) {
  auto a = run(NodeBuilder("Unsqueeze", 2).n, {iota_f32({3, 4}), i64({-1, 0})}, 13);
  EXPECT_EQ(a[0].dims(), (Dims{1, 3, 4, 1}));
  Tensor axes = i64({1});
  auto o = infer(NodeBuilder("Unsqueeze", 2).n,
                 {vi(DType::kFloat32, sym({S("batch"), S("seq")})), vi(DType::kInt64, Shape::FromDims({1}))},
                 {nullptr, &axes});
  EXPECT_EQ(o[0].shape.str(), "[batch,1,seq]");
  o = infer(NodeBuilder("Unsqueeze", 1).ints("axes", {0}).n, {vi(DType::kFloat32, sym({S("b")}))}, {}, 11);
  EXPECT_EQ(o[0].shape.str(), "[1,b]");
}

// ---- Transpose -------------------------------------------------------------------

// Naive transpose of a contiguous tensor of any element size.
std::vector<uint8_t> naive_transpose(const std::vector<uint8_t>& in, const Dims& dims, const std::vector<int64_t>& perm,
                                     size_t es) {
  const size_t r = dims.size();
  Dims od(r);
  for (size_t i = 0; i < r; ++i) od[i] = dims[static_cast<size_t>(perm[i])];
  std::vector<int64_t> is = contiguous_strides(dims);
  std::vector<uint8_t> out(in.size());
  const int64_t n = numel(od);
  std::vector<int64_t> c(r, 0);
  for (int64_t t = 0; t < n; ++t) {
    int64_t src = 0;
    for (size_t k = 0; k < r; ++k) src += c[k] * is[static_cast<size_t>(perm[k])];
    std::memcpy(&out[static_cast<size_t>(t) * es], &in[static_cast<size_t>(src) * es], es);
    for (size_t k = r; k-- > 0;) {
      if (++c[k] < od[k]) break;
      c[k] = 0;
    }
  }
  return out;
}

TEST(TensorOps, TransposeMatchesNaiveForEveryElementSizeAndPath) {
  ThreadPool pool(2);
  std::mt19937 rng(7);
  struct Case {
    Dims dims;
    std::vector<int64_t> perm;
  };
  const std::vector<Case> cases = {
      {{67, 131}, {1, 0}},                  // 2-D, tiled path
      {{5, 67, 33}, {0, 2, 1}},             // batched last-two swap
      {{2, 64, 12, 64}, {0, 2, 1, 3}},      // [B,S,H,D] -> [B,H,S,D], memcpy runs
      {{3, 4, 5, 6}, {3, 1, 0, 2}},         // general
      {{300, 301}, {1, 0}},                 // big enough to run in parallel
      {{1, 7, 1, 9}, {2, 3, 0, 1}},         // unit dims
      {{2, 3, 5, 37}, {0, 2, 3, 1}},        // NCHW -> NHWC, narrow tiles
      {{2, 5, 37, 3}, {0, 3, 1, 2}},        // NHWC -> NCHW
      {{4, 2, 9, 10}, {0, 2, 3, 1}},        // BSHD -> BHDS
  };
  for (DType dt : {DType::kUInt8, DType::kFloat16, DType::kFloat32, DType::kInt64}) {
    for (const Case& c : cases) {
      Tensor x(dt, c.dims);
      auto* p = static_cast<uint8_t*>(x.raw());
      for (size_t b = 0; b < x.nbytes(); ++b) p[b] = static_cast<uint8_t>(rng());
      auto out = run(NodeBuilder("Transpose", 1).ints("perm", c.perm).n, {x}, 17, &pool);
      ASSERT_EQ(out.size(), 1u);
      std::vector<uint8_t> in(p, p + x.nbytes());
      std::vector<uint8_t> ref = naive_transpose(in, c.dims, c.perm, dtype_size(dt));
      const auto* o = static_cast<const uint8_t*>(out[0].raw());
      EXPECT_TRUE(std::equal(ref.begin(), ref.end(), o)) << dtype_name(dt) << " " << dims_str(c.dims);
    }
  }
}

TEST(TensorOps, TransposeDefaultReversesAndKeepsSymbols) {
  auto out = run(NodeBuilder("Transpose", 1).n, {iota_f32({2, 3})});
  EXPECT_EQ(out[0].dims(), (Dims{3, 2}));
  EXPECT_EQ(values(out[0]), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  auto o = infer(NodeBuilder("Transpose", 1).ints("perm", {0, 2, 1, 3}).n,
                 {vi(DType::kFloat32, sym({S("batch"), S("seq"), 12, 64}))});
  EXPECT_EQ(o[0].shape.str(), "[batch,12,seq,64]");
}

// ---- Slice ---------------------------------------------------------------------

TEST(TensorOps, SliceHandlesNegativeStepsAndClampedEnds) {
  Tensor x = iota_f32({3, 5});
  // x[::-1, 1:INT_MAX:2]
  auto out = run(NodeBuilder("Slice", 5).n, {x, i64({-1, 1}), i64({INT64_MIN, INT64_MAX}), i64({0, 1}), i64({-1, 2})});
  EXPECT_EQ(out[0].dims(), (Dims{3, 2}));
  EXPECT_EQ(values(out[0]), (std::vector<double>{11, 13, 6, 8, 1, 3}));
  // Out-of-bounds start gives an empty result.
  auto e = run(NodeBuilder("Slice", 3).n, {x, i64({10}), i64({20})});
  EXPECT_EQ(e[0].dims(), (Dims{0, 5}));
  // Opset 9 attributes.
  auto a = run(NodeBuilder("Slice", 1).ints("starts", {1}).ints("ends", {-1}).ints("axes", {1}).n, {x}, 9);
  EXPECT_EQ(values(a[0]), (std::vector<double>{1, 2, 3, 6, 7, 8, 11, 12, 13}));
}

TEST(TensorOps, SliceInferenceKeepsSymbolOnFullSlices) {
  Tensor starts = i64({0, 1}), ends = i64({INT32_MAX, 3}), axes = i64({0, 2});
  auto o = infer(NodeBuilder("Slice", 4).n,
                 {vi(DType::kFloat32, sym({S("b"), S("s"), 8})), vi(DType::kInt64, Shape::FromDims({2})),
                  vi(DType::kInt64, Shape::FromDims({2})), vi(DType::kInt64, Shape::FromDims({2}))},
                 {nullptr, &starts, &ends, &axes});
  EXPECT_EQ(o[0].shape.str(), "[b,s,2]");
  Tensor rs = i64({-1}), re = i64({INT64_MIN}), ra = i64({1}), rst = i64({-1});
  o = infer(NodeBuilder("Slice", 5).n,
            {vi(DType::kFloat32, sym({S("b"), S("s")})), vi(DType::kInt64, Shape::FromDims({1})),
             vi(DType::kInt64, Shape::FromDims({1})), vi(DType::kInt64, Shape::FromDims({1})),
             vi(DType::kInt64, Shape::FromDims({1}))},
            {nullptr, &rs, &re, &ra, &rst});
  EXPECT_EQ(o[0].shape.str(), "[b,s]");
  o = infer(NodeBuilder("Slice", 3).n, {vi(DType::kFloat32, sym({S("b"), 8})), vi(DType::kInt64, Shape::FromDims({1})),
                                        vi(DType::kInt64, Shape::FromDims({1}))});
  EXPECT_EQ(o[0].shape.str(), "[?,?]");
}

// ---- Concat / Split ------------------------------------------------------------------

TEST(TensorOps, ConcatAlongMiddleAxis) {
  auto out = run(NodeBuilder("Concat", 2).i("axis", -2).n, {iota_f32({2, 1, 2}), iota_f32({2, 2, 2})});
  EXPECT_EQ(out[0].dims(), (Dims{2, 3, 2}));
  EXPECT_EQ(values(out[0]), (std::vector<double>{0, 1, 0, 1, 2, 3, 2, 3, 4, 5, 6, 7}));
  auto o = infer(NodeBuilder("Concat", 2).i("axis", 1).n,
                 {vi(DType::kFloat32, sym({S("b"), 3})), vi(DType::kFloat32, sym({Dim(), 4}))});
  EXPECT_EQ(o[0].shape.str(), "[b,7]");
}

TEST(TensorOps, SplitEqualPartsWithSmallerLastChunk) {
  auto out = run(NodeBuilder("Split", 1, 3).n, {iota_f32({7})}, 13);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(values(out[0]), (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(values(out[2]), (std::vector<double>{6}));
}

TEST(TensorOps, SplitInferenceKeepsOtherDimsAndTreatsEmptySplitAsEqual) {
  Tensor empty(DType::kInt64, {0});
  auto o = infer(NodeBuilder("Split", 2, 2).i("axis", -1).n,
                 {vi(DType::kFloat32, sym({S("b"), 8})), vi(DType::kInt64, Shape::FromDims({0}))}, {nullptr, &empty});
  ASSERT_EQ(o.size(), 2u);
  EXPECT_EQ(o[0].shape.str(), "[b,4]");
  EXPECT_EQ(o[1].shape.str(), "[b,4]");
}

TEST(TensorOps, SplitSizesFromAttributeOrInput) {
  auto a = run(NodeBuilder("Split", 1, 2).i("axis", 1).ints("split", {1, 2}).n, {iota_f32({2, 3})}, 11);
  EXPECT_EQ(values(a[1]), (std::vector<double>{1, 2, 4, 5}));
  auto b = run(NodeBuilder("Split", 2, 2).i("axis", 1).n, {iota_f32({2, 3}), i64({2, 1})}, 13);
  EXPECT_EQ(values(b[0]), (std::vector<double>{0, 1, 3, 4}));
  EXPECT_EQ(values(b[1]), (std::vector<double>{2, 5}));
}

// ---- Pad -------------------------------------------------------------------------------

TEST(TensorOps, PadModes) {
  Tensor x = iota_f32({1, 3});
  auto c = run(NodeBuilder("Pad", 3).n, {x, i64({0, 2, 0, 1}), f32({9}, {})});
  EXPECT_EQ(values(c[0]), (std::vector<double>{9, 9, 0, 1, 2, 9}));
  auto r = run(NodeBuilder("Pad", 2).s("mode", "reflect").n, {x, i64({0, 2, 0, 2})});
  EXPECT_EQ(values(r[0]), (std::vector<double>{2, 1, 0, 1, 2, 1, 0}));
  auto e = run(NodeBuilder("Pad", 2).s("mode", "edge").n, {x, i64({0, 1, 0, 2})});
  EXPECT_EQ(values(e[0]), (std::vector<double>{0, 0, 1, 2, 2, 2}));
  // Negative pads crop.
  auto n = run(NodeBuilder("Pad", 2).n, {x, i64({0, -1, 0, 1})});
  EXPECT_EQ(values(n[0]), (std::vector<double>{1, 2, 0}));
  // Opset 2 attributes.
  auto o = run(NodeBuilder("Pad", 1).ints("pads", {0, 1, 0, 0}).f("value", 5.f).n, {x}, 7);
  EXPECT_EQ(values(o[0]), (std::vector<double>{5, 0, 1, 2}));
}

// ---- Tile / Expand ---------------------------------------------------------------------

TEST(TensorOps, TileAndExpand) {
  auto t = run(NodeBuilder("Tile", 2).n, {iota_f32({2, 2}), i64({1, 2})});
  EXPECT_EQ(values(t[0]), (std::vector<double>{0, 1, 0, 1, 2, 3, 2, 3}));
  auto e = run(NodeBuilder("Expand", 2).n, {iota_f32({3, 1}), i64({2, 1, 2})});
  EXPECT_EQ(e[0].dims(), (Dims{2, 3, 2}));
  EXPECT_EQ(values(e[0]), (std::vector<double>{0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2}));
  Tensor shape = i64({1, 1, 4});
  auto o = infer(NodeBuilder("Expand", 2).n, {vi(DType::kFloat32, sym({S("b"), 1, 1})),
                                              vi(DType::kInt64, Shape::FromDims({3}))},
                 {nullptr, &shape});
  EXPECT_EQ(o[0].shape.str(), "[b,1,4]");
}

// An Expand (or any op) whose output count overflows 64 bits was a silent wrong answer; it is an error naming the node.
TEST(TensorOps, OutputsBeyondSixtyFourBitsAreErrors) {
  const int64_t big = int64_t{1} << 31;
  auto r = run_node_once(NodeBuilder("Expand", 2).n, 17, {iota_f32({1, 1, 1}), i64({big, big, big})}, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel);
  EXPECT_NE(r.status().message().find("64-bit"), std::string::npos) << r.status().message();
  // 2^62 elements fit a count but not memory.
  r = run_node_once(NodeBuilder("Expand", 2).n, 17, {iota_f32({1, 1}), i64({int64_t{1} << 31, int64_t{1} << 31})},
                    nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("2^62 bytes"), std::string::npos) << r.status().message();
}

// ---- Shape, Size, constants ----------------------------------------------------------------

TEST(TensorOps, ShapeWithStartEndAndSize) {
  auto s = run(NodeBuilder("Shape", 1).i("start", 1).i("end", -1).n, {iota_f32({2, 3, 4, 5})}, 15);
  EXPECT_EQ(values(s[0]), (std::vector<double>{3, 4}));
  auto z = run(NodeBuilder("Size", 1).n, {iota_f32({2, 3})});
  EXPECT_EQ(z[0].as_int64(0), 6);
}

TEST(TensorOps, ConstantsAndRange) {
  auto c = run(NodeBuilder("Constant", 0).ints("value_ints", {4, 5}).n, {});
  EXPECT_EQ(c[0].dtype(), DType::kInt64);
  EXPECT_EQ(values(c[0]), (std::vector<double>{4, 5}));
  auto k = run(NodeBuilder("ConstantOfShape", 1).t("value", Tensor::FromVector<int32_t>({7}, {1})).n, {i64({2, 2})});
  EXPECT_EQ(k[0].dtype(), DType::kInt32);
  EXPECT_EQ(values(k[0]), (std::vector<double>{7, 7, 7, 7}));
  auto r = run(NodeBuilder("Range", 3).n, {Tensor::Scalar<int32_t>(10), Tensor::Scalar<int32_t>(1),
                                           Tensor::Scalar<int32_t>(-3)});
  EXPECT_EQ(values(r[0]), (std::vector<double>{10, 7, 4}));
  auto f = run(NodeBuilder("Range", 3).n, {Tensor::Scalar<float>(1), Tensor::Scalar<float>(2),
                                           Tensor::Scalar<float>(0.25f)});
  EXPECT_EQ(f[0].numel(), 4);
}

TEST(TensorOps, EyeLikeTriluAndDropout) {
  auto e = run(NodeBuilder("EyeLike", 1).i("k", 1).i("dtype", 7).n, {iota_f32({2, 3})});
  EXPECT_EQ(e[0].dtype(), DType::kInt64);
  EXPECT_EQ(values(e[0]), (std::vector<double>{0, 1, 0, 0, 0, 1}));
  auto u = run(NodeBuilder("Trilu", 2).n, {iota_f32({3, 3}), Tensor::Scalar<int64_t>(1)});
  EXPECT_EQ(values(u[0]), (std::vector<double>{0, 1, 2, 0, 0, 5, 0, 0, 0}));
  auto l = run(NodeBuilder("Trilu", 1).i("upper", 0).n, {iota_f32({2, 3})});
  EXPECT_EQ(values(l[0]), (std::vector<double>{0, 0, 0, 3, 4, 0}));
  auto d = run(NodeBuilder("Dropout", 1, 2).n, {iota_f32({2, 2})}, 13);
  EXPECT_EQ(values(d[0]), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(d[1].dtype(), DType::kBool);
  EXPECT_EQ(values(d[1]), (std::vector<double>{1, 1, 1, 1}));
}

TEST(TensorOps, DepthToSpaceInvertsSpaceToDepth) {
  Tensor x = iota_f32({1, 8, 2, 3});
  for (const char* mode : {"DCR", "CRD"}) {
    auto d = run(NodeBuilder("DepthToSpace", 1).i("blocksize", 2).s("mode", mode).n, {x});
    EXPECT_EQ(d[0].dims(), (Dims{1, 2, 4, 6}));
    if (std::string(mode) == "DCR") {
      auto s = run(NodeBuilder("SpaceToDepth", 1).i("blocksize", 2).n, {d[0]});
      EXPECT_EQ(values(s[0]), values(x));
    }
  }
  auto crd = run(NodeBuilder("DepthToSpace", 1).i("blocksize", 2).s("mode", "CRD").n, {iota_f32({1, 4, 1, 1})});
  EXPECT_EQ(values(crd[0]), (std::vector<double>{0, 1, 2, 3}));
}

TEST(TensorOps, InferenceNeverFailsOnUnknownInputs) {
  const ValueInfo unknown{DType::kFloat32, Shape::Unranked()};
  const ValueInfo ints{DType::kInt64, Shape::Unranked()};
  for (const char* op : {"Reshape", "Expand", "Tile", "Squeeze", "Unsqueeze", "Slice", "Pad", "Split"}) {
    Node n = NodeBuilder(op, 2).n;
    auto o = infer(n, {unknown, ints});
    ASSERT_FALSE(o.empty()) << op;
    EXPECT_EQ(o[0].dtype, DType::kFloat32) << op;
  }
  auto o = infer(NodeBuilder("ConstantOfShape", 1).n, {ints});
  EXPECT_EQ(o[0].dtype, DType::kFloat32);
  o = infer(NodeBuilder("Range", 3).n, {vi(DType::kInt64, Shape::FromDims({})), vi(DType::kInt64, Shape::FromDims({})),
                                        vi(DType::kInt64, Shape::FromDims({}))});
  EXPECT_EQ(o[0].shape.str(), "[?]");
}

}  // namespace
}  // namespace tessera
