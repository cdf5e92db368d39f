// NonMaxSuppression and MaxRoiPool. NMS expectations are hand-derived from
// the ONNX operator definition plus onnxruntime's ordering rules (descending
// score, ascending index on ties, IoU strictly above the threshold
// suppresses, score strictly above score_threshold qualifies); a randomized
// case compares with a direct transcription of onnxruntime's loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "ir/graph.h"
#include "ops/op_registry.h"
#include "ops/node_runner.h"
#include "util/thread_pool.h"

namespace tessera {
namespace {

Node make_node(std::string op, std::vector<std::string> in) {
  Node n;
  n.name = "n";
  n.op_type = std::move(op);
  n.inputs = std::move(in);
  n.outputs = {"y"};
  return n;
}

void set_int(Node* n, const std::string& name, int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::kInt;
  a.i = v;
  n->attrs[name] = a;
}

void set_ints(Node* n, const std::string& name, std::vector<int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::kInts;
  a.ints = std::move(v);
  n->attrs[name] = a;
}

void set_float(Node* n, const std::string& name, float v) {
  Attribute a;
  a.kind = Attribute::Kind::kFloat;
  a.f = v;
  n->attrs[name] = a;
}

Node nms_node(int64_t center_point_box = 0) {
  Node n = make_node("NonMaxSuppression",
                     {"boxes", "scores", "max_output_boxes_per_class", "iou_threshold", "score_threshold"});
  if (center_point_box) set_int(&n, "center_point_box", center_point_box);
  return n;
}

// The ONNX examples' six boxes: two clusters of three plus a lone box.
Tensor example_boxes() {
  return Tensor::FromVector<float>({0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, -0.1f, 1, 0.9f, 0, 10, 1, 11, 0, 10.1f, 1, 11.1f,
                                    0, 100, 1, 101},
                                   {1, 6, 4});
}
Tensor example_scores() { return Tensor::FromVector<float>({0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f}, {1, 1, 6}); }

std::vector<int64_t> run_nms(const Node& n, std::vector<Tensor> inputs, ThreadPool* pool = nullptr) {
  auto res = run_node_once(n, 11, inputs, pool);
  EXPECT_TRUE(res.ok()) << res.status().message();
  if (!res.ok()) return {};
  const Tensor& y = (*res)[0];
  EXPECT_EQ(y.dtype(), DType::kInt64);
  EXPECT_EQ(y.rank(), 2);
  EXPECT_EQ(y.dim(1), 3);
  return std::vector<int64_t>(y.data<int64_t>(), y.data<int64_t>() + y.numel());
}

std::vector<Tensor> nms_inputs(Tensor boxes, Tensor scores, int64_t max_out, float iou, float score) {
  return {std::move(boxes), std::move(scores), Tensor::FromVector<int64_t>({max_out}, {1}),
          Tensor::FromVector<float>({iou}, {1}), Tensor::FromVector<float>({score}, {1})};
}

TEST(NonMaxSuppression, SuppressesOverlapsInScoreOrder) {
  auto got = run_nms(nms_node(), nms_inputs(example_boxes(), example_scores(), 3, 0.5f, 0.0f));
  EXPECT_EQ(got, (std::vector<int64_t>{0, 0, 3, 0, 0, 0, 0, 0, 5}));
}

TEST(NonMaxSuppression, LimitsSelectionsPerClass) {
  auto got = run_nms(nms_node(), nms_inputs(example_boxes(), example_scores(), 2, 0.5f, 0.0f));
  EXPECT_EQ(got, (std::vector<int64_t>{0, 0, 3, 0, 0, 0}));
}

TEST(NonMaxSuppression, ScoreMustExceedScoreThresholdStrictly) {
  // 0.3 (box 5) equals the threshold and is dropped.
  auto got = run_nms(nms_node(), nms_inputs(example_boxes(), example_scores(), 3, 0.5f, 0.3f));
  EXPECT_EQ(got, (std::vector<int64_t>{0, 0, 3, 0, 0, 0}));
}

TEST(NonMaxSuppression, CenterPointFormat) {
  Tensor boxes = Tensor::FromVector<float>({0.5f, 0.5f, 1, 1, 0.5f, 0.6f, 1, 1, 0.5f, 0.4f, 1, 1, 0.5f, 10.5f, 1, 1,
                                            0.5f, 10.6f, 1, 1, 0.5f, 100.5f, 1, 1},
                                           {1, 6, 4});
  auto got = run_nms(nms_node(1), nms_inputs(boxes, example_scores(), 3, 0.5f, 0.0f));
  EXPECT_EQ(got, (std::vector<int64_t>{0, 0, 3, 0, 0, 0, 0, 0, 5}));
}

TEST(NonMaxSuppression, FlippedCornersAreNormalised) {
  Tensor boxes = Tensor::FromVector<float>({1, 1, 0, 0, 0, 0.1f, 1, 1.1f, 0, 0.9f, 1, -0.1f, 0, 10, 1, 11, 1, 10.1f,
                                            0, 11.1f, 1, 101, 0, 100},
                                           {1, 6, 4});
  auto got = run_nms(nms_node(), nms_inputs(boxes, example_scores(), 3, 0.5f, 0.0f));
  EXPECT_EQ(got, (std::vector<int64_t>{0, 0, 3, 0, 0, 0, 0, 0, 5}));
}

TEST(NonMaxSuppression, EqualScoresKeepAscendingIndexOrder) {
  // Four disjoint boxes with one score: all kept, lowest index first.
  Tensor boxes = Tensor::FromVector<float>({0, 0, 1, 1, 0, 2, 1, 3, 0, 4, 1, 5, 0, 6, 1, 7}, {1, 4, 4});
  Tensor scores = Tensor::FromVector<float>({0.5f, 0.5f, 0.5f, 0.5f}, {1, 1, 4});
  auto got = run_nms(nms_node(), nms_inputs(boxes, scores, 10, 0.5f, 0.0f));
  EXPECT_EQ(got, (std::vector<int64_t>{0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 3}));
}

TEST(NonMaxSuppression, IdenticalBoxesKeepTheFirst) {
  std::vector<float> b;
  for (int i = 0; i < 10; ++i) b.insert(b.end(), {0, 0, 1, 1});
  Tensor scores = Tensor::FromVector<float>(std::vector<float>(10, 0.9f), {1, 1, 10});
  auto got = run_nms(nms_node(), nms_inputs(Tensor::FromVector<float>(b, {1, 10, 4}), scores, 3, 0.5f, 0.0f));
  EXPECT_EQ(got, (std::vector<int64_t>{0, 0, 0}));
}

TEST(NonMaxSuppression, IouEqualToThresholdDoesNotSuppress) {
  // Box 1 covers box 0 and twice its area: IoU exactly 0.5.
  Tensor boxes = Tensor::FromVector<float>({0, 0, 1, 1, 0, 0, 2, 1}, {1, 2, 4});
  Tensor scores = Tensor::FromVector<float>({0.9f, 0.8f}, {1, 1, 2});
  EXPECT_EQ(run_nms(nms_node(), nms_inputs(boxes, scores, 5, 0.5f, 0.0f)),
            (std::vector<int64_t>{0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(run_nms(nms_node(), nms_inputs(boxes, scores, 5, 0.49f, 0.0f)), (std::vector<int64_t>{0, 0, 0}));
}

TEST(NonMaxSuppression, RowsGoByBatchThenClass) {
  // Two batches, two classes; class 1 prefers the other box of each cluster.
  Tensor boxes = Tensor::FromVector<float>({0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 5, 1, 6,  //
                                            0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 5, 1, 6},
                                           {2, 3, 4});
  Tensor scores = Tensor::FromVector<float>({0.9f, 0.8f, 0.1f, 0.2f, 0.7f, 0.6f,  //
                                             0.1f, 0.2f, 0.3f, 0.9f, 0.8f, 0.7f},
                                            {2, 2, 3});
  auto got = run_nms(nms_node(), nms_inputs(boxes, scores, 2, 0.5f, 0.0f));
  EXPECT_EQ(got, (std::vector<int64_t>{0, 0, 0, 0, 0, 2,  //
                                       0, 1, 1, 0, 1, 2,  //
                                       1, 0, 2, 1, 0, 1,  //
                                       1, 1, 0, 1, 1, 2}));
}

TEST(NonMaxSuppression, WithoutMaxOutputSelectsNothing) {
  Node n = make_node("NonMaxSuppression", {"boxes", "scores"});
  auto got = run_node_once(n, 10, {example_boxes(), example_scores()});
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ((*got)[0].dims(), (Dims{0, 3}));
  auto neg = run_node_once(nms_node(), 11, nms_inputs(example_boxes(), example_scores(), -4, 0.5f, 0.0f));
  ASSERT_TRUE(neg.ok()) << neg.status().message();
  EXPECT_EQ((*neg)[0].dims(), (Dims{0, 3}));
}

TEST(NonMaxSuppression, OptionalThresholdsDefault) {
  // iou_threshold absent = 0 (any overlap suppresses), score_threshold absent
  // = no filtering (negative scores qualify).
  Node n = make_node("NonMaxSuppression", {"boxes", "scores", "max_output_boxes_per_class"});
  Tensor scores = Tensor::FromVector<float>({-0.1f, -0.2f, -0.3f, -0.4f, -0.5f, -0.6f}, {1, 1, 6});
  auto got = run_nms(n, {example_boxes(), scores, Tensor::FromVector<int64_t>({10}, {1})});
  EXPECT_EQ(got, (std::vector<int64_t>{0, 0, 0, 0, 0, 3, 0, 0, 5}));
}

TEST(NonMaxSuppression, SpecialScoresOrderWithTheirTies) {
  // 20 disjoint boxes (past one 16-wide block): NaN ranks with -inf, -0 with
  // +0, and every tie goes by ascending index.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> b, s(20, 0.5f);
  for (int i = 0; i < 20; ++i) b.insert(b.end(), {0, 2.0f * static_cast<float>(i), 1, 2.0f * static_cast<float>(i) + 1});
  s[0] = nan;
  s[3] = -0.0f;
  s[5] = 0.0f;
  s[7] = -inf;
  s[17] = -0.0f;
  s[18] = nan;
  Node n = make_node("NonMaxSuppression", {"boxes", "scores", "max_output_boxes_per_class"});
  auto got = run_nms(n, {Tensor::FromVector<float>(b, {1, 20, 4}), Tensor::FromVector<float>(s, {1, 1, 20}),
                         Tensor::FromVector<int64_t>({100}, {1})});
  std::vector<int64_t> order;
  for (size_t r = 0; r < got.size(); r += 3) order.push_back(got[r + 2]);
  EXPECT_EQ(order, (std::vector<int64_t>{1, 2, 4, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16, 19, 3, 5, 17, 0, 7, 18}));
  // With a threshold NaN and -inf never qualify.
  auto thr = run_nms(nms_node(), nms_inputs(Tensor::FromVector<float>(b, {1, 20, 4}),
                                            Tensor::FromVector<float>(s, {1, 1, 20}), 100, 0.5f, -1.0f));
  EXPECT_EQ(thr.size(), 17u * 3);
}

TEST(NonMaxSuppression, RejectsIouThresholdOutsideUnitRange) {
  auto res = run_node_once(nms_node(), 11, nms_inputs(example_boxes(), example_scores(), 3, 1.5f, 0.0f));
  EXPECT_FALSE(res.ok());
}

TEST(NonMaxSuppression, RejectsMismatchedShapes) {
  auto res = run_node_once(nms_node(), 11, nms_inputs(example_boxes(), Tensor::FromVector<float>({1, 2, 3}, {1, 1, 3}),
                                                  3, 0.5f, 0.0f));
  EXPECT_FALSE(res.ok());
  Node bad = nms_node(2);
  EXPECT_FALSE(run_node_once(bad, 11, nms_inputs(example_boxes(), example_scores(), 3, 0.5f, 0.0f)).ok());
}

TEST(NonMaxSuppression, InferenceLeavesTheRowCountUnknown) {
  Node n = nms_node();
  std::vector<ValueInfo> info(5);
  info[0] = ValueInfo{DType::kFloat32, Shape(std::vector<Dim>{Dim::Symbol("b"), Dim(), Dim(4)})};
  info[1] = ValueInfo{DType::kFloat32, Shape(std::vector<Dim>{Dim::Symbol("b"), Dim(80), Dim()})};
  info[2] = ValueInfo{DType::kInt64, Shape::FromDims({1})};
  InferContext ctx(n, 11, info, {});
  ASSERT_TRUE(OpRegistry::instance().find("", "NonMaxSuppression")->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[0].dtype, DType::kInt64);
  EXPECT_EQ(ctx.outputs()[0].shape.str(), "[?,3]");

  InferContext unranked(n, 11, std::vector<ValueInfo>(5), {});
  ASSERT_TRUE(OpRegistry::instance().find("", "NonMaxSuppression")->infer(unranked).ok());
  EXPECT_EQ(unranked.outputs()[0].shape.str(), "[?,3]");
}

TEST(NonMaxSuppression, InferenceRejectsKnownBadShapes) {
  Node n = nms_node();
  std::vector<ValueInfo> info(5);
  info[0] = ValueInfo{DType::kFloat32, Shape::FromDims({1, 6, 5})};
  info[1] = ValueInfo{DType::kFloat32, Shape::FromDims({1, 1, 6})};
  InferContext ctx(n, 11, info, {});
  EXPECT_FALSE(OpRegistry::instance().find("", "NonMaxSuppression")->infer(ctx).ok());
  info[0] = ValueInfo{DType::kFloat32, Shape::FromDims({2, 6, 4})};
  InferContext batch(n, 11, info, {});
  EXPECT_FALSE(OpRegistry::instance().find("", "NonMaxSuppression")->infer(batch).ok());
}

// onnxruntime's selection loop transcribed directly (per-pair SuppressByIOU
// with its early returns, a full sort instead of the priority queue).
std::vector<int64_t> reference_nms(const std::vector<float>& boxes, const std::vector<float>& scores, int64_t batches,
                                   int64_t classes, int64_t n, int64_t max_out, float iou, float score_thr) {
  auto suppress = [&](const float* b1, const float* b2) {
    auto mm = [](float a, float b, float& lo, float& hi) {
      if (a >= b) {
        lo = b;
        hi = a;
      } else {
        lo = a;
        hi = b;
      }
    };
    float x1a, x1b, y1a, y1b, x2a, x2b, y2a, y2b;
    mm(b1[1], b1[3], x1a, x1b);
    mm(b2[1], b2[3], x2a, x2b);
    float ixa = std::max(x1a, x2a), ixb = std::min(x1b, x2b);
    if (ixb <= ixa) return false;
    mm(b1[0], b1[2], y1a, y1b);
    mm(b2[0], b2[2], y2a, y2b);
    float iya = std::max(y1a, y2a), iyb = std::min(y1b, y2b);
    if (iyb <= iya) return false;
    float inter = (ixb - ixa) * (iyb - iya);
    if (inter <= 0) return false;
    float a1 = (x1b - x1a) * (y1b - y1a), a2 = (x2b - x2a) * (y2b - y2a);
    float uni = a1 + a2 - inter;
    if (a1 <= 0 || a2 <= 0 || uni <= 0) return false;
    return inter / uni > iou;
  };
  std::vector<int64_t> out;
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t c = 0; c < classes; ++c) {
      const float* s = scores.data() + (b * classes + c) * n;
      std::vector<int64_t> order;
      for (int64_t i = 0; i < n; ++i) {
        if (s[i] > score_thr) order.push_back(i);
      }
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return s[x] > s[y]; });
      std::vector<int64_t> kept;
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= max_out) break;
        bool ok = true;
        for (int64_t k : kept) {
          if (suppress(boxes.data() + (b * n + k) * 4, boxes.data() + (b * n + i) * 4)) {
            ok = false;
            break;
          }
        }
        if (ok) {
          kept.push_back(i);
          out.insert(out.end(), {b, c, i});
        }
      }
    }
  }
  return out;
}

TEST(NonMaxSuppression, MatchesReferenceOnRandomClutter) {
  const int64_t batches = 2, classes = 5, n = 700;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> pos(0.0f, 50.0f), size(0.5f, 8.0f), sc(0.0f, 1.0f);
  std::vector<float> boxes, scores;
  for (int64_t i = 0; i < batches * n; ++i) {
    float y = pos(rng), x = pos(rng), h = size(rng), w = size(rng);
    // Some boxes flipped, some degenerate (zero width).
    if (i % 7 == 0) boxes.insert(boxes.end(), {y + h, x + w, y, x});
    else if (i % 31 == 0) boxes.insert(boxes.end(), {y, x, y + h, x});
    else boxes.insert(boxes.end(), {y, x, y + h, x + w});
  }
  // Quantized scores create many ties.
  for (int64_t i = 0; i < batches * classes * n; ++i) scores.push_back(std::round(sc(rng) * 20.0f) / 20.0f);
  ThreadPool pool(2);
  for (float iou : {0.0f, 0.3f, 0.7f}) {
    auto want = reference_nms(boxes, scores, batches, classes, n, 200, iou, 0.2f);
    auto got = run_nms(nms_node(), nms_inputs(Tensor::FromVector<float>(boxes, {batches, n, 4}),
                                              Tensor::FromVector<float>(scores, {batches, classes, n}), 200, iou,
                                              0.2f),
                       &pool);
    EXPECT_EQ(got, want) << "iou " << iou;
  }
}

// ---- MaxRoiPool ------------------------------------------------------------

Node roi_node(std::vector<int64_t> pooled, float scale = 1.0f) {
  Node n = make_node("MaxRoiPool", {"x", "rois"});
  set_ints(&n, "pooled_shape", std::move(pooled));
  if (scale != 1.0f) set_float(&n, "spatial_scale", scale);
  return n;
}

Tensor iota(Dims dims, float start = 0.0f) {
  Tensor t(DType::kFloat32, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + static_cast<float>(i);
  return t;
}

std::vector<float> values(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

TEST(MaxRoiPool, PoolsBinsOfTheWholeImage) {
  // Region (0,0)-(3,3) is 4x4 pixels: 2x2 bins of 2x2.
  auto res = run_node_once(roi_node({2, 2}), 1, {iota({1, 1, 4, 4}), Tensor::FromVector<float>({0, 0, 0, 3, 3}, {1, 5})});
  ASSERT_TRUE(res.ok()) << res.status().message();
  EXPECT_EQ((*res)[0].dims(), (Dims{1, 1, 2, 2}));
  EXPECT_EQ(values((*res)[0]), (std::vector<float>{5, 7, 13, 15}));
}

TEST(MaxRoiPool, UnevenBinsOverlapAndScaleRounds) {
  // Region x 1..3 (3 px), y 0..1 (2 px) after scaling by 0.5 and rounding
  // half away from zero; pooled 2x2: row bins [0,1) [1,2); column bins
  // [floor(0), ceil(1.5)) = [0,2) and [floor(1.5), ceil(3)) = [1,3), offset 1.
  auto res = run_node_once(roi_node({2, 2}, 0.5f), 1,
                           {iota({1, 1, 4, 5}), Tensor::FromVector<float>({0, 1.0f, 0.4f, 6.0f, 2.6f}, {1, 5})});
  ASSERT_TRUE(res.ok()) << res.status().message();
  // Rows 0..1 of a 4x5 iota: row 0 = 0..4, row 1 = 5..9.
  EXPECT_EQ(values((*res)[0]), (std::vector<float>{2, 3, 7, 8}));
}

TEST(MaxRoiPool, NegativeInputsGiveTheirTrueMaximum) {
  auto res = run_node_once(roi_node({1, 1}), 1,
                           {iota({1, 1, 2, 2}, -10.0f), Tensor::FromVector<float>({0, 0, 0, 1, 1}, {1, 5})});
  ASSERT_TRUE(res.ok()) << res.status().message();
  EXPECT_EQ(values((*res)[0]), (std::vector<float>{-7}));
}

TEST(MaxRoiPool, RegionsOutsideTheImageGiveZeroAndSelectTheirBatch) {
  Tensor rois = Tensor::FromVector<float>({1, 0, 0, 0, 0, 0, 10, 10, 12, 12}, {2, 5});
  auto res = run_node_once(roi_node({1, 1}), 1, {iota({2, 2, 2, 2}), rois});
  ASSERT_TRUE(res.ok()) << res.status().message();
  EXPECT_EQ((*res)[0].dims(), (Dims{2, 2, 1, 1}));
  // roi 0: batch 1, pixel (0,0) of channels 0 and 1; roi 1: empty.
  EXPECT_EQ(values((*res)[0]), (std::vector<float>{8, 12, 0, 0}));
}

TEST(MaxRoiPool, RejectsBatchIndexOutOfRange) {
  auto res = run_node_once(roi_node({1, 1}), 1, {iota({1, 1, 2, 2}), Tensor::FromVector<float>({1, 0, 0, 1, 1}, {1, 5})});
  EXPECT_FALSE(res.ok());
}

TEST(MaxRoiPool, RejectsNonFiniteCoordinatesAndClampsHugeOnes) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(
      run_node_once(roi_node({1, 1}), 1, {iota({1, 1, 2, 2}), Tensor::FromVector<float>({0, 0, nan, 1, 1}, {1, 5})})
          .ok());
  auto res = run_node_once(roi_node({1, 1}, 1e30f), 1,
                           {iota({1, 1, 2, 2}), Tensor::FromVector<float>({0, 1e20f, 1e20f, 3e20f, 3e20f}, {1, 5})});
  ASSERT_TRUE(res.ok()) << res.status().message();
  EXPECT_EQ(values((*res)[0]), (std::vector<float>{0}));
}

TEST(MaxRoiPool, InferenceKeepsRoiAndChannelDims) {
  Node n = roi_node({7, 6});
  std::vector<ValueInfo> info = {ValueInfo{DType::kFloat32, Shape(std::vector<Dim>{Dim(), Dim(256), Dim(), Dim()})},
                                 ValueInfo{DType::kFloat32, Shape(std::vector<Dim>{Dim::Symbol("r"), Dim(5)})}};
  InferContext ctx(n, 11, info, {});
  ASSERT_TRUE(OpRegistry::instance().find("", "MaxRoiPool")->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[0].shape.str(), "[r,256,7,6]");
  Node bad = roi_node({7});
  InferContext bad_ctx(bad, 11, info, {});
  EXPECT_FALSE(OpRegistry::instance().find("", "MaxRoiPool")->infer(bad_ctx).ok());
}

}  // namespace
}  // namespace tessera
