#include <gtest/gtest.h>

#include "ir/dtype.h"
#include "ir/graph.h"
#include "ir/shape.h"
#include "ir/tensor.h"

namespace tessera {
namespace {

TEST(DType, HalfRoundTripsExactValues) {
  for (float f : {0.f, 1.f, -2.5f, 65504.f, 6.103515625e-05f, 5.960464477539063e-08f}) {
    EXPECT_EQ(half_to_float(float_to_half(f)), f) << f;
  }
}

TEST(DType, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(1.0f)), 1.0f);
  EXPECT_NEAR(bfloat16_to_float(float_to_bfloat16(3.14159f)), 3.140625f, 1e-6);
}

TEST(Shape, BroadcastKeepsSymbolsAndRejectsMismatch) {
  Shape a({Dim::Symbol("batch"), Dim(1), Dim(4)});
  Shape b({Dim(3), Dim(4)});
  Shape out;
  ASSERT_TRUE(broadcast_shapes(a, b, &out));
  EXPECT_EQ(out.str(), "[batch,3,4]");
  EXPECT_FALSE(broadcast_shapes(Shape::FromDims({2, 3}), Shape::FromDims({4, 3}), &out));
}

TEST(Tensor, ReshapedSharesStorage) {
  Tensor t(DType::kFloat32, {2, 3});
  t.data<float>()[5] = 7.f;
  Tensor r = t.reshaped({6});
  EXPECT_EQ(r.data<float>()[5], 7.f);
  EXPECT_EQ(r.numel(), 6);
}

TEST(Graph, VerifierRejectsUseBeforeDefinition) {
  Graph g;
  g.inputs = {"x"};
  Node a;
  a.name = "a";
  a.op_type = "Relu";
  a.inputs = {"y"};
  a.outputs = {"z"};
  g.nodes.push_back(a);
  g.outputs = {"z"};
  Status st = verify_graph(g);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'y'"), std::string::npos);
}

}  // namespace
}  // namespace tessera
