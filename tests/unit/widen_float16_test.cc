// passes/widen_float16: float16 models computed in float32 behind Casts at their float16 inputs and outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "passes/pipeline.h"
#include "passes/widen_float16.h"
#include "runtime/session.h"
#include "unit/op_test_util.h"
#include "unit/plugin_test_util.h"
#include "unit/session_test_util.h"

namespace tessera {
namespace {

using plugintest::Builder;
using plugintest::random_tensor;
using testutil::set_int;
using testutil::run_session;
using testutil::set_ints;

Tensor to_half(const Tensor& t) {
  Tensor h(DType::kFloat16, t.dims());
  for (int64_t i = 0; i < t.numel(); ++i) h.data<Float16>()[i] = Float16(t.data<float>()[i]);
  return h;
}

// A float16 convolution net: input and output float16, weights float16, a Cast to float16 inside, an output that
// is a graph input, and one that is a weight.
Graph half_net() {
  Builder b;
  b.input("x", {1, 4, 6, 6}, DType::kFloat16);
  b.constant("w", to_half(random_tensor({4, 4, 3, 3}, 1, -.5f, .5f))).constant("bias", to_half(random_tensor({4}, 2)));
  b.constant("scale", to_half(random_tensor({1}, 3)));
  set_ints(b.node("conv", "Conv", {"x", "w", "bias"}, "c"), "pads", {1, 1, 1, 1});
  b.node("relu", "Relu", {"c"}, "r");
  set_int(b.node("to_float", "Cast", {"r"}, "rf"), "to", 1);
  b.node("exp", "Exp", {"rf"}, "e");
  set_int(b.node("back", "Cast", {"e"}, "eh"), "to", 10);
  b.node("mul", "Mul", {"eh", "scale"}, "y");
  return b.done({"y", "x", "scale", "rf"});
}

TEST(WidenFloat16, ComputesInFloat32BehindCastsAndKeepsTheInterface) {
  Graph g = half_net();
  Graph w = g;
  WidenStats st;
  ASSERT_TRUE(widen_float16(w, &st).ok());
  EXPECT_EQ(st.constants, 3);
  EXPECT_EQ(st.casts, 3);  // x in; y and scale out (x leaves as it came)
  EXPECT_EQ(w.inputs, g.inputs);
  EXPECT_EQ(w.outputs, g.outputs);
  EXPECT_EQ(w.info("x")->dtype, DType::kFloat16);
  EXPECT_EQ(w.info("y")->dtype, DType::kFloat16);
  EXPECT_EQ(w.info("scale")->dtype, DType::kFloat16);
  EXPECT_EQ(w.info("rf")->dtype, DType::kFloat32);
  for (const auto& [name, t] : w.constants) EXPECT_EQ(t.dtype(), DType::kFloat32) << name;
  for (const Node& n : w.nodes) {
    if (n.op_type == "Conv") {
      EXPECT_NE(n.inputs[0], "x");  // reads the widened input
    }
    if (n.name == "back") {
      EXPECT_EQ(n.attr_int("to", 0), 1);
    }
  }
  EXPECT_TRUE(verify_graph(w).ok());
}

// The widened model gives the float16 model's answer (computed with float16 rounding at every step) within float16
// rounding, and the float32 model's (float16-rounded weights) within the rounding of its output.
TEST(WidenFloat16, MatchesTheFloat16ModelWithinItsRounding) {
  const Graph g = half_net();
  const Tensor x = to_half(random_tensor({1, 4, 6, 6}, 4));
  const std::vector<Tensor> half = run_session(g, {x}, /*optimize=*/false);
  const std::vector<Tensor> wide = run_session(g, {x}, /*optimize=*/true);
  ASSERT_EQ(half.size(), 4u);
  ASSERT_EQ(wide.size(), 4u);
  for (size_t i = 0; i < half.size(); ++i) {
    SCOPED_TRACE("output " + std::to_string(i));
    ASSERT_EQ(wide[i].dtype(), half[i].dtype());
    ASSERT_EQ(wide[i].dims(), half[i].dims());
    for (int64_t e = 0; e < half[i].numel(); ++e) {
      const double a = wide[i].as_double(e), b = half[i].as_double(e);
      EXPECT_LE(std::fabs(a - b), 4e-3 * std::max(1.0, std::fabs(b))) << "at " << e;
    }
  }
  // x and scale pass through bit for bit.
  EXPECT_EQ(std::memcmp(wide[1].raw(), x.raw(), x.nbytes()), 0);
}

TEST(WidenFloat16, LeavesAFloat32ModelAlone) {
  Builder b;
  b.input("x", {2, 3});
  b.node("relu", "Relu", {"x"}, "y");
  Graph g = b.done({"y"});
  const size_t nodes = g.nodes.size();
  WidenStats st;
  ASSERT_TRUE(widen_float16(g, &st).ok());
  EXPECT_FALSE(st.changed());
  EXPECT_EQ(g.nodes.size(), nodes);
}

}  // namespace
}  // namespace tessera
