// Shape ranges: `--shape NAME=D0,..,MIN..MAX,..` parsed, applied to a graph's inputs, and held to at run time.
#include <gtest/gtest.h>

#include "api/session_setup.h"
#include "ir/graph.h"
#include "runtime/session.h"

namespace tessera {
namespace {

using api::InputRanges;
using api::parse_shapes;

TEST(ShapeRanges, ParsesSizesAndRanges) {
  auto r = parse_shapes({"x=1,3,48,32..2048", "mask=4"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::vector<DimRange> x = {{1, 1}, {3, 3}, {48, 48}, {32, 2048}};
  EXPECT_EQ(r->at("x"), x);
  EXPECT_EQ(r->at("mask"), (std::vector<DimRange>{{4, 4}}));
  EXPECT_EQ(r->at("x")[3].str(), "32..2048");
  auto scalar = parse_shapes({"s="});
  ASSERT_TRUE(scalar.ok());
  EXPECT_TRUE(scalar->at("s").empty());
}

// An input named several times spans every size given: exact shapes may be named beside a range.
TEST(ShapeRanges, RepeatedInputsSpanTheirSizes) {
  auto r = parse_shapes({"x=1,3,48,32..2048", "x=1,3,48,320", "x=2,3,48,4096"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->at("x"), (std::vector<DimRange>{{1, 2}, {3, 3}, {48, 48}, {32, 4096}}));
  EXPECT_FALSE(parse_shapes({"x=1,2", "x=1,2,3"}).ok());  // ranks differ
}

TEST(ShapeRanges, RefusesMalformedSpecsNamingThem) {
  for (const char* bad : {"x", "=1,2", "x=1,,2", "x=a", "x=5..3", "x=32..", "x=..32", "x=-1", "x=1..2..3",
                          "x=99999999999999999999", "x=1, 2"}) {
    auto r = parse_shapes({bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidInput) << bad;
    EXPECT_NE(r.status().message().find("--shape"), std::string::npos) << r.status().message();
  }
}

// y = Relu(x), x float [1, W].
Graph relu_graph() {
  Graph g;
  g.opset = 13;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DType::kFloat32, Shape({Dim(1), Dim::Symbol("W")})};
  Node relu;
  relu.name = "relu";
  relu.op_type = "Relu";
  relu.inputs = {"x"};
  relu.outputs = {"y"};
  g.nodes = {relu};
  g.outputs = {"y"};
  return g;
}

TEST(ShapeRanges, ApplyKeepsTheModelsNameForARangedDim) {
  Graph g = relu_graph();
  ASSERT_TRUE(api::apply_shapes(g, {"x=1,16..64"}).ok());
  EXPECT_EQ(g.info("x")->shape.str(), "[1,W]");
  ASSERT_TRUE(api::apply_shapes(g, {"x=1,16"}).ok());  // one size pins it
  EXPECT_EQ(g.info("x")->shape.str(), "[1,16]");
  Graph h = relu_graph();
  EXPECT_EQ(api::apply_shapes(h, {"y=1,16"}).code(), ErrorCode::kInvalidInput);  // not an input
  EXPECT_EQ(api::apply_shapes(h, {"x=1,4611686018427387904..4611686018427387904"}).code(),
            ErrorCode::kInvalidInput);  // too large to make
}

TEST(ShapeRanges, RunsInsideTheRangeAndRefusesSizesOutsideItNamingTheDim) {
  SessionOptions o;
  o.input_ranges["x"] = {{1, 1}, {16, 64}};
  auto s = InferenceSession::Create(relu_graph(), o);
  ASSERT_TRUE(s.ok()) << s.status().message();
  for (int64_t w : {16, 40, 64}) {
    EXPECT_TRUE((*s)->run(std::vector<Tensor>{Tensor(DType::kFloat32, {1, w})}).ok()) << w;
  }
  for (int64_t w : {8, 65}) {
    auto r = (*s)->run(std::vector<Tensor>{Tensor(DType::kFloat32, {1, w})});
    ASSERT_FALSE(r.ok()) << w;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidInput);
    EXPECT_NE(r.status().message().find("input 'x': dim 1 is " + std::to_string(w) +
                                        ", outside the compiled range 16..64"),
              std::string::npos)
        << r.status().message();
  }
  // Random inputs take the low end of the range, not a size the model cannot run.
  auto in = api::random_inputs(**s, 1);
  ASSERT_TRUE(in.ok());
  EXPECT_EQ((*in)[0].dims(), (Dims{1, 16}));
}

TEST(ShapeRanges, SessionRefusesRangesThatDoNotFitItsInputs) {
  SessionOptions o;
  o.input_ranges["x"] = {{16, 64}};  // rank 1 for a rank-2 input
  EXPECT_EQ(InferenceSession::Create(relu_graph(), o).status().code(), ErrorCode::kInvalidInput);
  o.input_ranges = {{"z", {{1, 1}, {1, 1}}}};  // no such input
  EXPECT_EQ(InferenceSession::Create(relu_graph(), o).status().code(), ErrorCode::kInvalidInput);
  o.input_ranges = {{"x", {{1, 1}, {9, 3}}}};  // empty range
  EXPECT_EQ(InferenceSession::Create(relu_graph(), o).status().code(), ErrorCode::kInvalidInput);
}

}  // namespace
}  // namespace tessera
