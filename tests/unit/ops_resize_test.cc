// Resize / Upsample / GridSample / RoiAlign. Expected values come from the
// ONNX reference implementation (onnx/backend/test/case/node/resize.py,
// interpolate_nd) for cases the ONNX node suite does not cover.
#include <gtest/gtest.h>

#include <cstring>

#include "ir/graph.h"
#include "ops/op_registry.h"
#include "ops/node_runner.h"
#include "unit/op_test_util.h"

namespace tessera {
namespace {

struct NodeBuilder : testutil::AttrSetters<NodeBuilder> {
  Node n;
  NodeBuilder(std::string op, std::vector<std::string> in, std::vector<std::string> out = {"y"}) {
    n.name = "n";
    n.op_type = std::move(op);
    n.inputs = std::move(in);
    n.outputs = std::move(out);
  }
};

Tensor iota(Dims dims) {
  Tensor t(DType::kFloat32, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

void expect_values(const Tensor& t, const Dims& dims, const std::vector<float>& want, float tol = 1e-5f) {
  ASSERT_EQ(t.dims(), dims);
  ASSERT_EQ(static_cast<size_t>(t.numel()), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(t.data<float>()[i], want[i], tol) << "at " << i;
}

TEST(ResizeOps, TrilinearOnFiveDimensionalInput) {
  NodeBuilder nb("Resize", {"x", "", "scales"});
  nb.s("mode", "linear");
  auto res = run_node_once(nb.n, 13,
                           {iota({1, 1, 2, 2, 3}), Tensor(), Tensor::FromVector<float>({1, 1, 2, 1.5f, 1}, {5})});
  ASSERT_TRUE(res.ok()) << res.status().message();
  expect_values((*res)[0], {1, 1, 4, 3, 3},
                {0, 1, 2, 1.5f, 2.5f, 3.5f, 3, 4, 5, 1.5f, 2.5f, 3.5f, 3, 4, 5, 4.5f, 5.5f, 6.5f,
                 4.5f, 5.5f, 6.5f, 6, 7, 8, 7.5f, 8.5f, 9.5f, 6, 7, 8, 7.5f, 8.5f, 9.5f, 9, 10, 11});
}

TEST(ResizeOps, CubicExcludeOutsideOnBothAxesWithSizes) {
  NodeBuilder nb("Resize", {"x", "", "", "sizes"});
  nb.s("mode", "cubic").f("cubic_coeff_a", -0.5f).i("exclude_outside", 1);
  Tensor x = Tensor::FromVector<float>({1, 3, 2, 7, 5, 0, 4, 9, 1, 2, 6, 8, 3, 3, 1}, {3, 5});
  auto res = run_node_once(nb.n, 13, {x, Tensor(), Tensor(), Tensor::FromVector<int64_t>({4, 3}, {2})});
  ASSERT_TRUE(res.ok()) << res.status().message();
  expect_values((*res)[0], {4, 3},
                {1.620432f, 1.634328f, 5.947504f, 0.7691365f, 6.808232f, 3.036967f, 3.047321f, 7.251637f, 1.186897f,
                 7.026763f, 2.686567f, 1.557128f});
}

TEST(ResizeOps, TfCropAndResizeNearestExtrapolates) {
  NodeBuilder nb("Resize", {"x", "roi", "", "sizes"});
  nb.s("coordinate_transformation_mode", "tf_crop_and_resize").f("extrapolation_value", -1.f);
  auto res = run_node_once(nb.n, 13,
                           {iota({1, 1, 4, 4}), Tensor::FromVector<float>({0, 0, 0.2f, 0.3f, 1, 1, 1.3f, 0.8f}, {8}),
                            Tensor(), Tensor::FromVector<int64_t>({1, 1, 3, 3}, {4})});
  ASSERT_TRUE(res.ok()) << res.status().message();
  expect_values((*res)[0], {1, 1, 3, 3}, {5, 6, 6, 9, 10, 10, -1, -1, -1});
}

TEST(ResizeOps, Opset10DownsampleNearestUsesAsymmetricCoordinates) {
  // The opset-10 ONNX example: [[1,2,3,4],[5,6,7,8]] * 0.6 -> [[1,3]].
  NodeBuilder nb("Resize", {"x", "scales"});
  auto res = run_node_once(nb.n, 10,
                           {Tensor::FromVector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {1, 1, 2, 4}),
                            Tensor::FromVector<float>({1, 1, 0.6f, 0.6f}, {4})});
  ASSERT_TRUE(res.ok()) << res.status().message();
  expect_values((*res)[0], {1, 1, 1, 2}, {1, 3});
}

TEST(ResizeOps, Opset10LinearUpsample) {
  NodeBuilder nb("Resize", {"x", "scales"});
  nb.s("mode", "linear");
  auto res = run_node_once(nb.n, 10,
                           {Tensor::FromVector<float>({1, 2, 3, 4}, {1, 1, 2, 2}),
                            Tensor::FromVector<float>({1, 1, 2, 2}, {4})});
  ASSERT_TRUE(res.ok()) << res.status().message();
  expect_values((*res)[0], {1, 1, 4, 4},
                {1, 1.5f, 2, 2, 2, 2.5f, 3, 3, 3, 3.5f, 4, 4, 3, 3.5f, 4, 4});
}

TEST(ResizeOps, Upsample7TakesScalesAttribute) {
  NodeBuilder nb("Upsample", {"x"});
  nb.fs("scales", {1, 1, 2, 3});
  auto res = run_node_once(nb.n, 7, {Tensor::FromVector<float>({1, 2, 3, 4}, {1, 1, 2, 2})});
  ASSERT_TRUE(res.ok()) << res.status().message();
  expect_values((*res)[0], {1, 1, 4, 6},
                {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4});
}

TEST(ResizeOps, NearestCopiesAnyElementType) {
  NodeBuilder nb("Resize", {"x", "", "scales"});
  Tensor x = Tensor::FromVector<uint8_t>({10, 20, 30, 40}, {2, 2});
  auto res = run_node_once(nb.n, 13, {x, Tensor(), Tensor::FromVector<float>({1, 2}, {2})});
  ASSERT_TRUE(res.ok()) << res.status().message();
  const Tensor& y = (*res)[0];
  ASSERT_EQ(y.dims(), (Dims{2, 4}));
  const uint8_t want[] = {10, 10, 20, 20, 30, 30, 40, 40};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(y.data<uint8_t>()[i], want[i]);
}

TEST(ResizeOps, IdentityScalesCopyInput) {
  NodeBuilder nb("Resize", {"x", "", "scales"});
  nb.s("mode", "cubic");
  Tensor x = iota({2, 3, 4});
  auto res = run_node_once(nb.n, 13, {x, Tensor(), Tensor::FromVector<float>({1, 1, 1}, {3})});
  ASSERT_TRUE(res.ok()) << res.status().message();
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ((*res)[0].data<float>()[i], x.data<float>()[i]);
}

TEST(ResizeOps, InferenceKeepsSymbolicDimsWithUnitScales) {
  NodeBuilder nb("Resize", {"x", "", "scales"});
  Tensor scales = Tensor::FromVector<float>({1, 1, 2, 2}, {4});
  std::vector<ValueInfo> info(3);
  info[0] = ValueInfo{DType::kFloat32, Shape(std::vector<Dim>{Dim::Symbol("n"), Dim(3), Dim(5), Dim()})};
  info[2] = ValueInfo{DType::kFloat32, Shape::FromDims({4})};
  InferContext ctx(nb.n, 13, info, {nullptr, nullptr, &scales});
  ASSERT_TRUE(OpRegistry::instance().find("", "Resize")->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[0].shape.str(), "[n,3,10,?]");
}

TEST(ResizeOps, InferenceWithUnknownSizesGivesUnknownDims) {
  NodeBuilder nb("Resize", {"x", "", "", "sizes"});
  InferContext ctx(nb.n, 13,
                   {ValueInfo{DType::kFloat32, Shape::FromDims({1, 3, 5, 5})}, ValueInfo{}, ValueInfo{},
                    ValueInfo{DType::kInt64, Shape::FromDims({4})}},
                   {});
  ASSERT_TRUE(OpRegistry::instance().find("", "Resize")->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[0].shape.str(), "[?,?,?,?]");
}

TEST(ResizeOps, RejectsScalesOfWrongLength) {
  NodeBuilder nb("Resize", {"x", "", "scales"});
  auto res = run_node_once(nb.n, 13, {iota({1, 2, 2}), Tensor(), Tensor::FromVector<float>({2, 2}, {2})});
  EXPECT_FALSE(res.ok());
}

// An align_corners grid that hits every pixel centre reproduces the input.
Tensor identity_grid(Dims spatial) {
  const int r = static_cast<int>(spatial.size());
  Dims gd = {1};
  for (int64_t d : spatial) gd.push_back(d);
  gd.push_back(r);
  Tensor g(DType::kFloat32, gd);
  int64_t count = numel(spatial);
  for (int64_t p = 0; p < count; ++p) {
    int64_t rem = p;
    std::vector<int64_t> idx(static_cast<size_t>(r));
    for (int k = r - 1; k >= 0; --k) {
      idx[static_cast<size_t>(k)] = rem % spatial[static_cast<size_t>(k)];
      rem /= spatial[static_cast<size_t>(k)];
    }
    // grid's last axis is (x, y[, z]) = innermost spatial axis first.
    for (int k = 0; k < r; ++k) {
      const int axis = r - 1 - k;
      const int64_t len = spatial[static_cast<size_t>(axis)];
      g.data<float>()[p * r + k] = len > 1 ? -1.f + 2.f * static_cast<float>(idx[static_cast<size_t>(axis)]) /
                                                       static_cast<float>(len - 1)
                                           : 0.f;
    }
  }
  return g;
}

TEST(GridSampleOps, IdentityGridReproducesInputIn2DAnd3D) {
  for (const char* mode : {"bilinear", "nearest", "bicubic"}) {
    NodeBuilder nb("GridSample", {"x", "g"});
    nb.i("align_corners", 1).s("mode", mode);
    Tensor x = iota({1, 2, 3, 4});
    auto res = run_node_once(nb.n, 16, {x, identity_grid({3, 4})});
    ASSERT_TRUE(res.ok()) << res.status().message();
    for (int64_t i = 0; i < x.numel(); ++i) EXPECT_NEAR((*res)[0].data<float>()[i], x.data<float>()[i], 1e-4) << mode;
  }
  for (const char* mode : {"bilinear", "nearest"}) {
    NodeBuilder nb("GridSample", {"x", "g"});
    nb.i("align_corners", 1).s("mode", mode);
    Tensor x = iota({1, 2, 2, 3, 4});
    auto res = run_node_once(nb.n, 16, {x, identity_grid({2, 3, 4})});
    ASSERT_TRUE(res.ok()) << res.status().message();
    for (int64_t i = 0; i < x.numel(); ++i) EXPECT_NEAR((*res)[0].data<float>()[i], x.data<float>()[i], 1e-4) << mode;
  }
}

TEST(GridSampleOps, ZerosPaddingFadesOutsideBorder) {
  // x = 1 everywhere; at normalised x = -1 (left edge of the first pixel,
  // align_corners=0), half the bilinear weight falls outside.
  NodeBuilder nb("GridSample", {"x", "g"});
  Tensor x = Tensor::FromVector<float>({1, 1, 1, 1}, {1, 1, 2, 2});
  Tensor g = Tensor::FromVector<float>({-1.f, 0.f, 3.f, 0.f}, {1, 1, 2, 2});
  auto res = run_node_once(nb.n, 16, {x, g});
  ASSERT_TRUE(res.ok()) << res.status().message();
  expect_values((*res)[0], {1, 1, 1, 2}, {0.5f, 0.f});
}

TEST(RoiAlignOps, AverageOfConstantImageIsConstantAndMaxModeRuns) {
  Tensor x(DType::kFloat32, {1, 2, 6, 6});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = i < 36 ? 2.f : 3.f;
  Tensor rois = Tensor::FromVector<float>({1, 1, 4, 4, 0, 0, 5, 5}, {2, 4});
  Tensor bi = Tensor::FromVector<int64_t>({0, 0}, {2});
  NodeBuilder nb("RoiAlign", {"x", "r", "b"});
  nb.i("output_height", 2).i("output_width", 3).i("sampling_ratio", 2);
  auto res = run_node_once(nb.n, 16, {x, rois, bi});
  ASSERT_TRUE(res.ok()) << res.status().message();
  const Tensor& y = (*res)[0];
  ASSERT_EQ(y.dims(), (Dims{2, 2, 2, 3}));
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t k = 0; k < 6; ++k) EXPECT_NEAR(y.data<float>()[(r * 2 + c) * 6 + k], c == 0 ? 2.f : 3.f, 1e-5);
  nb.s("mode", "max");
  auto res_max = run_node_once(nb.n, 16, {x, rois, bi});
  ASSERT_TRUE(res_max.ok()) << res_max.status().message();
}

}  // namespace
}  // namespace tessera
