// passes/qdq_fusion: QDQ-wrapped Conv and MatMul become QLinearConv / QLinearMatMul, with the float path's results
// within a quantization step, and patterns it cannot represent exactly are left alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "passes/pipeline.h"
#include "passes/qdq_fusion.h"
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

template <class T>
Tensor values(Dims dims, int seed, int lo, int hi) {
  Tensor t(dtype_of<T>(), dims);
  std::srand(static_cast<unsigned>(seed));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<T>()[i] = static_cast<T>(lo + std::rand() % (hi - lo + 1));
  return t;
}

Tensor scalar_f(float v) { return Tensor::Scalar<float>(v); }

// x -> Q -> DQ -> Conv(DQ(w int8 per channel), DQ(b int32)) -> Q -> DQ -> y, and a MatMul on the same pattern.
Graph qdq_net(float bias_scale_factor) {
  Builder b;
  b.input("x", {1, 8, 6, 6});
  b.constant("xs", scalar_f(0.02f)).constant("xz", Tensor::Scalar<uint8_t>(128));
  Tensor ws(DType::kFloat32, {4});
  for (int c = 0; c < 4; ++c) ws.data<float>()[c] = 0.01f * static_cast<float>(c + 1);
  Tensor bs(DType::kFloat32, {4});
  for (int c = 0; c < 4; ++c) bs.data<float>()[c] = 0.02f * ws.data<float>()[c] * bias_scale_factor;
  b.constant("wq", values<int8_t>({4, 8, 3, 3}, 1, -127, 127)).constant("ws", ws);
  b.constant("wz", Tensor(DType::kInt8, {4}));
  std::memset(b.g.constants["wz"].raw(), 0, 4);
  b.constant("bq", values<int32_t>({4}, 2, -500, 500)).constant("bs", bs);
  b.constant("ys", scalar_f(0.05f)).constant("yz", Tensor::Scalar<uint8_t>(100));
  b.node("qx", "QuantizeLinear", {"x", "xs", "xz"}, "xq");
  b.node("dqx", "DequantizeLinear", {"xq", "xs", "xz"}, "xd");
  set_int(b.node("dqw", "DequantizeLinear", {"wq", "ws", "wz"}, "wd"), "axis", 0);
  set_int(b.node("dqb", "DequantizeLinear", {"bq", "bs"}, "bd"), "axis", 0);
  set_ints(b.node("conv", "Conv", {"xd", "wd", "bd"}, "yf"), "pads", {1, 1, 1, 1});
  b.node("qy", "QuantizeLinear", {"yf", "ys", "yz"}, "yq");
  b.node("dqy", "DequantizeLinear", {"yq", "ys", "yz"}, "y");
  // MatMul: y viewed [1, 4*36] -> [36, 4]... a 2-D product over the flattened map.
  b.constant("shape", Tensor::FromVector<int64_t>({36, 4}, {2}));
  b.node("flat", "Reshape", {"yq", "shape"}, "yq2");
  b.node("dqy2", "DequantizeLinear", {"yq2", "ys", "yz"}, "a");
  Tensor ms(DType::kFloat32, {5});
  for (int c = 0; c < 5; ++c) ms.data<float>()[c] = 0.03f + 0.01f * static_cast<float>(c);
  b.constant("mq", values<int8_t>({4, 5}, 3, -100, 100)).constant("ms", ms);
  set_int(b.node("dqm", "DequantizeLinear", {"mq", "ms"}, "md"), "axis", 1);
  b.node("mm", "MatMul", {"a", "md"}, "zf");
  b.constant("zs", scalar_f(0.1f)).constant("zz", Tensor::Scalar<uint8_t>(128));
  b.node("qz", "QuantizeLinear", {"zf", "zs", "zz"}, "zq");
  b.node("dqz", "DequantizeLinear", {"zq", "zs", "zz"}, "z");
  b.g.opset = 13;
  return b.done({"y", "z"});
}

TEST(QdqFusion, ConvAndMatMulBecomeQLinearOpsWithinAStepOfTheFloatPath) {
  Graph g = qdq_net(1.f);
  Graph f = g;
  auto fused = fuse_qdq(f);
  ASSERT_TRUE(fused.ok()) << fused.status().message();
  EXPECT_EQ(*fused, 2);
  int qconv = 0, qmatmul = 0;
  for (const Node& n : f.nodes) {
    qconv += n.op_type == "QLinearConv";
    qmatmul += n.op_type == "QLinearMatMul";
    EXPECT_NE(n.op_type, "Conv");
    EXPECT_NE(n.op_type, "MatMul");
  }
  EXPECT_EQ(qconv, 1);
  EXPECT_EQ(qmatmul, 1);
  const Tensor x = random_tensor({1, 8, 6, 6}, 5, -2.f, 2.f);
  const std::vector<Tensor> plain = run_session(g, {x}, /*optimize=*/false);
  const std::vector<Tensor> opt = run_session(g, {x}, /*optimize=*/true);
  ASSERT_EQ(plain.size(), 2u);
  ASSERT_EQ(opt.size(), 2u);
  const float steps[] = {0.05f, 0.1f};
  for (size_t i = 0; i < 2; ++i) {
    int exact = 0;
    for (int64_t e = 0; e < plain[i].numel(); ++e) {
      const double d = std::fabs(plain[i].as_double(e) - opt[i].as_double(e));
      EXPECT_LE(d, steps[i] * 1.001) << "output " << i << " at " << e;
      exact += d == 0;
    }
    EXPECT_GT(exact, plain[i].numel() * 9 / 10);  // nearly all identical: the same arithmetic up to rounding
  }
}

TEST(QdqFusion, ABiasAtAnotherScaleIsLeftInFloat) {
  Graph g = qdq_net(1.5f);
  auto fused = fuse_qdq(g);
  ASSERT_TRUE(fused.ok());
  EXPECT_EQ(*fused, 1);  // the MatMul only
  for (const Node& n : g.nodes) EXPECT_NE(n.op_type, "QLinearConv");
}

}  // namespace
}  // namespace tessera
