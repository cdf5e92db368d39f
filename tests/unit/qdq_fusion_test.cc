// passes/qdq_fusion: QDQ-wrapped Conv and MatMul become QLinearConv / QLinearMatMul, with the float path's results
// within a quantization step; pointwise sandwiches (DQ -> Relu -> Q, Add(DQ, DQ) -> Q, ...) become QLinearLookup with
// the float path's bits on every input value (pair); patterns it cannot represent exactly are left alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "ops/qlinear_add_math.h"
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

// ---- pointwise sandwiches as QLinearLookup -------------------------------------

// Every value of an 8-bit type once, as [4, 64].
Tensor every_value(DType t) {
  Tensor x(t, {4, 64});
  for (int k = 0; k < 256; ++k) static_cast<uint8_t*>(x.raw())[k] = static_cast<uint8_t>(k);
  return x;
}

// Every pair of 8-bit values once: a[i, j] = i, b[i, j] = j, as [256, 256].
std::vector<Tensor> every_pair(DType ta, DType tb) {
  Tensor a(ta, {256, 256}), b(tb, {256, 256});
  for (int k = 0; k < 65536; ++k) {
    static_cast<uint8_t*>(a.raw())[k] = static_cast<uint8_t>(k >> 8);
    static_cast<uint8_t*>(b.raw())[k] = static_cast<uint8_t>(k & 255);
  }
  return {a, b};
}

template <class T>
Tensor scalar_q(int v) {
  return Tensor::Scalar<T>(static_cast<T>(v));
}

int count_op(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op_type == op;
  return n;
}

// `g` optimised as a session does: `lookups` QLinearLookup nodes and `kept` other nodes left of the sandwiches, and
// the same bytes out as the unfused graph on `inputs`.
void expect_exact_lookups(const Graph& g, const std::vector<Tensor>& inputs, int lookups, int kept = 0) {
  Graph f = g;
  OptimizeStats st;
  Status s = optimize_graph(f, OptimizeOptions{}, &st);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(st.qdq_fused, lookups);
  EXPECT_EQ(count_op(f, "QLinearLookup"), lookups);
  EXPECT_EQ(static_cast<int>(f.nodes.size()), lookups + kept) << print_graph(f);
  Graph off = g;
  OptimizeOptions no_qdq;
  no_qdq.fuse_qdq = false;
  ASSERT_TRUE(optimize_graph(off, no_qdq).ok());
  EXPECT_EQ(count_op(off, "QLinearLookup"), 0);
  const std::vector<Tensor> plain = run_session(g, inputs, /*optimize=*/false);
  const std::vector<Tensor> fused = run_session(g, inputs, /*optimize=*/true);
  ASSERT_EQ(plain.size(), g.outputs.size());
  ASSERT_EQ(fused.size(), g.outputs.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_EQ(plain[i].dtype(), fused[i].dtype()) << i;
    ASSERT_EQ(plain[i].dims(), fused[i].dims()) << i;
    int64_t differ = 0;
    for (int64_t e = 0; e < plain[i].numel(); ++e) {
      differ += std::memcmp(static_cast<const uint8_t*>(plain[i].raw()) + e * dtype_size(plain[i].dtype()),
                            static_cast<const uint8_t*>(fused[i].raw()) + e * dtype_size(plain[i].dtype()),
                            dtype_size(plain[i].dtype())) != 0;
    }
    EXPECT_EQ(differ, 0) << "output " << g.outputs[i];
  }
}

// Q(Gemm(DQ(x), DQ(w), DQ(b))) as ONNX Runtime's quantizer writes a classifier (transB 1, per-channel weights, an
// int32 bias; and transB 0 per tensor without a bias): one QLinearConv 1x1 between two Reshapes, no Gemm left, and
// within a step of the float path, nearly everywhere equal.
TEST(QdqFusion, GemmBecomesAOneByOneQLinearConvWithinAStepOfTheFloatPath) {
  for (bool trans_b : {true, false}) {
    SCOPED_TRACE(trans_b ? "transB 1, per channel, bias" : "transB 0, per tensor");
    Builder b;
    b.input("x", {3, 40});
    b.constant("xs", scalar_f(0.02f)).constant("xz", Tensor::Scalar<uint8_t>(128));
    Tensor ws(DType::kFloat32, trans_b ? Dims{7} : Dims{});
    for (int64_t c = 0; c < ws.numel(); ++c) ws.data<float>()[c] = 0.01f + 0.004f * static_cast<float>(c);
    b.constant("wq", trans_b ? values<int8_t>({7, 40}, 11, -127, 127) : values<int8_t>({40, 7}, 12, -127, 127));
    b.constant("ws", ws).constant("ys", scalar_f(0.3f)).constant("yz", Tensor::Scalar<uint8_t>(90));
    b.node("qx", "QuantizeLinear", {"x", "xs", "xz"}, "xq");
    b.node("dqx", "DequantizeLinear", {"xq", "xs", "xz"}, "xd");
    set_int(b.node("dqw", "DequantizeLinear", {"wq", "ws"}, "wd"), "axis", 0);
    std::vector<std::string> in{"xd", "wd"};
    if (trans_b) {
      Tensor bs(DType::kFloat32, {7});
      for (int c = 0; c < 7; ++c) bs.data<float>()[c] = 0.02f * ws.data<float>()[c];
      b.constant("bq", values<int32_t>({7}, 13, -3000, 3000)).constant("bs", bs);
      set_int(b.node("dqb", "DequantizeLinear", {"bq", "bs"}, "bd"), "axis", 0);
      in.push_back("bd");
    }
    set_int(b.node("fc", "Gemm", in, "yf"), "transB", trans_b ? 1 : 0);
    b.node("qy", "QuantizeLinear", {"yf", "ys", "yz"}, "yq");
    b.node("dqy", "DequantizeLinear", {"yq", "ys", "yz"}, "y");
    b.g.opset = 13;
    Graph g = b.done({"y"});
    Graph f = g;
    auto fused = fuse_qdq(f);
    ASSERT_TRUE(fused.ok()) << fused.status().message();
    EXPECT_EQ(count_op(f, "QLinearConv"), 1) << print_graph(f);
    EXPECT_EQ(count_op(f, "Reshape"), 2);
    EXPECT_EQ(count_op(f, "Gemm"), 0);
    const Tensor x = random_tensor({3, 40}, 14, -2.f, 2.f);
    const std::vector<Tensor> plain = run_session(g, {x}, /*optimize=*/false);
    const std::vector<Tensor> opt = run_session(g, {x}, /*optimize=*/true);
    ASSERT_EQ(opt.size(), 1u);
    ASSERT_EQ(opt[0].dims(), (Dims{3, 7}));
    int exact = 0;
    for (int64_t e = 0; e < plain[0].numel(); ++e) {
      const double d = std::fabs(plain[0].as_double(e) - opt[0].as_double(e));
      EXPECT_LE(d, 0.3 * 1.001) << e;
      exact += d == 0;
    }
    EXPECT_GT(exact, plain[0].numel() * 8 / 10);
  }
}

// Q(op(DQ(x))) with the DequantizeLinear's scale and zero point, for an op that only moves or selects values: the
// op on the 8-bit values, the same bytes as the sandwich; a Q of another scale keeps the float op.
TEST(QdqFusion, MovesBetweenOneScaleRunOnTheQuantizedValuesWithTheSameBits) {
  for (const char* op : {"MaxPool", "Transpose", "Flatten", "Resize"}) {
    for (bool same : {true, false}) {
      SCOPED_TRACE(std::string(op) + (same ? " same scale" : " another scale"));
      Builder b;
      b.input("xq", {1, 4, 9, 9}, DType::kInt8);
      b.constant("xs", scalar_f(0.05f)).constant("xz", scalar_q<int8_t>(-3));
      b.constant("ys", scalar_f(same ? 0.05f : 0.06f)).constant("yz", scalar_q<int8_t>(-3));
      b.constant("scales", Tensor::FromVector<float>({1.f, 1.f, 2.f, 1.5f}, {4}));
      b.node("dq", "DequantizeLinear", {"xq", "xs", "xz"}, "x");
      const bool resize = std::string(op) == "Resize";  // nearest, the default mode
      Node& n =
          b.node("op", op, resize ? std::vector<std::string>{"x", "", "scales"} : std::vector<std::string>{"x"}, "m");
      if (std::string(op) == "MaxPool") {
        set_ints(n, "kernel_shape", {3, 3});
        set_ints(n, "pads", {1, 1, 1, 1});
        set_ints(n, "strides", {2, 2});
      } else if (std::string(op) == "Transpose") {
        set_ints(n, "perm", {0, 2, 3, 1});
      }
      b.node("q", "QuantizeLinear", {"m", "ys", "yz"}, "yq");
      b.g.opset = 13;
      Graph g = b.done({"yq"});
      Graph f = g;
      ASSERT_TRUE(optimize_graph(f, OptimizeOptions{}).ok());
      EXPECT_EQ(count_op(f, "DequantizeLinear"), same ? 0 : 1) << print_graph(f);
      EXPECT_EQ(count_op(f, "QuantizeLinear"), same ? 0 : 1);
      const Tensor x = values<int8_t>({1, 4, 9, 9}, 21, -128, 127);
      const std::vector<Tensor> plain = run_session(g, {x}, /*optimize=*/false);
      const std::vector<Tensor> opt = run_session(g, {x}, /*optimize=*/true);
      ASSERT_EQ(plain[0].dims(), opt[0].dims());
      EXPECT_EQ(std::memcmp(plain[0].raw(), opt[0].raw(), plain[0].nbytes()), 0);
    }
  }
}

TEST(QdqFusion, Uint8ReluSandwichBecomesALookupWithTheSameBits) {
  Builder b;
  b.input("xq", {4, 64}, DType::kUInt8);
  b.constant("xs", scalar_f(0.05f)).constant("xz", scalar_q<uint8_t>(128));
  b.constant("ys", scalar_f(0.025f)).constant("yz", scalar_q<uint8_t>(3));
  b.node("dq", "DequantizeLinear", {"xq", "xs", "xz"}, "x");
  b.node("relu", "Relu", {"x"}, "r");
  b.node("q", "QuantizeLinear", {"r", "ys", "yz"}, "yq");
  expect_exact_lookups(b.done({"yq"}), {every_value(DType::kUInt8)}, 1);
}

TEST(QdqFusion, Int8ClipSandwichBecomesALookupWithTheSameBits) {
  Builder b;
  b.input("xq", {4, 64}, DType::kInt8);
  b.constant("xs", scalar_f(0.07f)).constant("xz", scalar_q<int8_t>(-10));
  b.constant("lo", scalar_f(0.f)).constant("hi", scalar_f(6.f));
  b.constant("ys", scalar_f(6.f / 255.f)).constant("yz", scalar_q<int8_t>(-128));
  b.node("dq", "DequantizeLinear", {"xq", "xs", "xz"}, "x");
  b.node("clip", "Clip", {"x", "lo", "hi"}, "c");
  b.node("q", "QuantizeLinear", {"c", "ys", "yz"}, "yq");
  expect_exact_lookups(b.done({"yq"}), {every_value(DType::kInt8)}, 1);
}

TEST(QdqFusion, SigmoidTimesAConstantBecomesOneLookupWithTheSameBits) {
  Builder b;
  b.input("xq", {4, 64}, DType::kUInt8);
  b.constant("xs", scalar_f(0.04f)).constant("xz", scalar_q<uint8_t>(100));
  b.constant("k", scalar_f(1.7f));
  b.constant("ys", scalar_f(1.f / 128.f)).constant("yz", scalar_q<uint8_t>(0));
  b.node("dq", "DequantizeLinear", {"xq", "xs", "xz"}, "x");
  b.node("sig", "Sigmoid", {"x"}, "s");
  b.node("mul", "Mul", {"s", "k"}, "m");
  b.node("q", "QuantizeLinear", {"m", "ys", "yz"}, "yq");
  expect_exact_lookups(b.done({"yq"}), {every_value(DType::kUInt8)}, 1);
}

// Two uint8 inputs aq, bq of `dims` dequantized into a (scale 0.03, zero point 120) and b (0.05, 90), with the
// constants ys = 0.04, yz = 10 for a QuantizeLinear of their result.
Builder uint8_pair(const Dims& dims) {
  Builder b;
  b.input("aq", dims, DType::kUInt8).input("bq", dims, DType::kUInt8);
  b.constant("as", scalar_f(0.03f)).constant("az", scalar_q<uint8_t>(120));
  b.constant("bs", scalar_f(0.05f)).constant("bz", scalar_q<uint8_t>(90));
  b.constant("ys", scalar_f(0.04f)).constant("yz", scalar_q<uint8_t>(10));
  b.node("dqa", "DequantizeLinear", {"aq", "as", "az"}, "a");
  b.node("dqb", "DequantizeLinear", {"bq", "bs", "bz"}, "b");
  return b;
}

TEST(QdqFusion, Uint8AddOfTwoScalesThenReluBecomesAPairLookupWithTheSameBits) {
  Builder b = uint8_pair({256, 256});
  b.node("add", "Add", {"a", "b"}, "s");
  b.node("relu", "Relu", {"s"}, "r");
  b.node("q", "QuantizeLinear", {"r", "ys", "yz"}, "yq");
  expect_exact_lookups(b.done({"yq"}), every_pair(DType::kUInt8, DType::kUInt8), 1);
}

// An Add or a Mul of two dequantized values of one type, quantized to it, gets ONNX Runtime's QLinearAdd or
// QLinearMul as its table (its default level fuses them so), and the node names that form (qlinear_add,
// qlinear_mul), which the kernels check against the table and then compute.
TEST(QdqFusion, AnAddOrMulOfOneTypeNamesTheFormItsTableHolds) {
  for (const char* op : {"Add", "Mul"}) {
    Builder b = uint8_pair({4, 64});
    b.node("op", op, {"a", "b"}, "s");
    b.node("q", "QuantizeLinear", {"s", "ys", "yz"}, "yq");
    Graph g = b.done({"yq"});
    ASSERT_TRUE(optimize_graph(g, OptimizeOptions{}).ok());
    ASSERT_EQ(count_op(g, "QLinearLookup"), 1) << print_graph(g);
    const Node& n = g.nodes[0];
    const std::vector<float> add = n.attr_floats("qlinear_add"), mul = n.attr_floats("qlinear_mul");
    const auto* table = static_cast<const uint8_t*>(g.constants.at(n.inputs.back()).raw());
    if (std::string(op) == "Mul") {
      EXPECT_TRUE(add.empty());
      ASSERT_EQ(mul.size(), 4u);
      EXPECT_EQ(mul[0], 0.03f * 0.05f / 0.04f);
      EXPECT_EQ(mul[1], 120.f);
      EXPECT_EQ(mul[2], 90.f);
      EXPECT_EQ(mul[3], 10.f);
      EXPECT_TRUE(qadd::checked_form({}, mul, false, table).has_value());
      continue;
    }
    EXPECT_TRUE(mul.empty());
    ASSERT_EQ(add.size(), 3u);
    EXPECT_FLOAT_EQ(add[0], 0.03f / 0.04f);
    EXPECT_FLOAT_EQ(add[1], 0.05f / 0.04f);
    EXPECT_TRUE(qadd::checked_form(add, {}, false, table).has_value());
  }
}

// An int8 Mul sandwich becomes ONNX Runtime's QLinearMul: at every operand pair the fused graph gives the form's
// value (the product of the debiased operands in int32, times s_a * s_b / s_y, plus z_y, rounded apart), and at most
// one step from dequantize, multiply, quantize (which it differs from at some pairs).
TEST(QdqFusion, Int8MulBecomesOnnxRuntimesQLinearMulWithinAStepOfTheUnfusedNodes) {
  Builder b;
  b.input("aq", {256, 256}, DType::kInt8).input("bq", {256, 256}, DType::kInt8);
  b.constant("as", scalar_f(0.02f)).constant("az", scalar_q<int8_t>(3));
  b.constant("bs", scalar_f(0.03f)).constant("bz", scalar_q<int8_t>(-7));
  b.constant("ys", scalar_f(0.05f)).constant("yz", scalar_q<int8_t>(0));
  b.node("dqa", "DequantizeLinear", {"aq", "as", "az"}, "a");
  b.node("dqb", "DequantizeLinear", {"bq", "bs", "bz"}, "b");
  b.node("mul", "Mul", {"a", "b"}, "m");
  b.node("q", "QuantizeLinear", {"m", "ys", "yz"}, "yq");
  Graph g = b.done({"yq"});
  const std::vector<Tensor> in = every_pair(DType::kInt8, DType::kInt8);
  const std::vector<Tensor> plain = run_session(g, in, /*optimize=*/false);
  const std::vector<Tensor> fused = run_session(g, in, /*optimize=*/true);
  ASSERT_EQ(plain.size(), 1u);
  ASSERT_EQ(fused.size(), 1u);
  const qadd::Form f{0.02f * 0.03f / 0.05f, 0.f, 0.f, true, 3.f, -7.f};
  int64_t off_form = 0, apart = 0, far = 0;
  for (int64_t e = 0; e < plain[0].numel(); ++e) {
    const int a = static_cast<const int8_t*>(in[0].raw())[e], bb = static_cast<const int8_t*>(in[1].raw())[e];
    const int got = static_cast<const int8_t*>(fused[0].raw())[e], want = static_cast<const int8_t*>(plain[0].raw())[e];
    off_form += got != qadd::value(f, a, bb, -128, 127);
    apart += got != want;
    far += std::abs(got - want) > 1;
  }
  EXPECT_EQ(off_form, 0);
  EXPECT_EQ(far, 0);
  EXPECT_GT(apart, 0) << "the two arithmetics should differ somewhere at these scales";
}

TEST(QdqFusion, ADequantizeLinearReadElsewhereStaysForItsOtherReader) {
  Builder b;
  b.input("xq", {4, 64}, DType::kUInt8);
  b.constant("xs", scalar_f(0.05f)).constant("xz", scalar_q<uint8_t>(128));
  b.constant("ys", scalar_f(0.05f)).constant("yz", scalar_q<uint8_t>(0));
  b.node("dq", "DequantizeLinear", {"xq", "xs", "xz"}, "x");
  b.node("relu", "Relu", {"x"}, "r");
  b.node("q", "QuantizeLinear", {"r", "ys", "yz"}, "yq");
  Graph g = b.done({"yq", "x"});
  Graph f = g;
  auto fused = fuse_qdq(f);
  ASSERT_TRUE(fused.ok());
  EXPECT_EQ(*fused, 1);
  EXPECT_EQ(count_op(f, "QLinearLookup"), 1);
  EXPECT_EQ(count_op(f, "DequantizeLinear"), 1);
  EXPECT_EQ(count_op(f, "Relu"), 0);
  expect_exact_lookups(g, {every_value(DType::kUInt8)}, 1, /*kept=*/1);
}

// The negative cases: the same sandwich with one thing the lookup cannot take.
TEST(QdqFusion, APerChannelDequantizeIsNotLookedUp) {
  Builder b;
  b.input("xq", {4, 64}, DType::kUInt8);
  b.constant("xs", Tensor::FromVector<float>({0.1f, 0.2f, 0.3f, 0.4f}, {4}));
  b.constant("xz", Tensor(DType::kUInt8, {4}));
  b.constant("ys", scalar_f(0.05f)).constant("yz", scalar_q<uint8_t>(0));
  set_int(b.node("dq", "DequantizeLinear", {"xq", "xs", "xz"}, "x"), "axis", 0);
  b.node("relu", "Relu", {"x"}, "r");
  b.node("q", "QuantizeLinear", {"r", "ys", "yz"}, "yq");
  Graph g = b.done({"yq"});
  auto fused = fuse_qdq(g);
  ASSERT_TRUE(fused.ok());
  EXPECT_EQ(*fused, 0);
  EXPECT_EQ(count_op(g, "QLinearLookup"), 0);
  EXPECT_EQ(count_op(g, "Relu"), 1);
}

TEST(QdqFusion, AnIntermediateWithTwoReadersIsNotLookedUp) {
  Builder b;
  b.input("xq", {4, 64}, DType::kUInt8);
  b.constant("xs", scalar_f(0.05f)).constant("xz", scalar_q<uint8_t>(128));
  b.constant("ys", scalar_f(0.05f)).constant("yz", scalar_q<uint8_t>(0));
  b.node("dq", "DequantizeLinear", {"xq", "xs", "xz"}, "x");
  b.node("relu", "Relu", {"x"}, "r");  // read by the Sigmoid and by the second QuantizeLinear
  b.node("sig", "Sigmoid", {"r"}, "s");
  b.node("q", "QuantizeLinear", {"s", "ys", "yz"}, "yq");
  b.node("q2", "QuantizeLinear", {"r", "ys", "yz"}, "yq2");
  Graph g = b.done({"yq", "yq2"});
  auto fused = fuse_qdq(g);
  ASSERT_TRUE(fused.ok());
  EXPECT_EQ(*fused, 0);
  EXPECT_EQ(count_op(g, "QLinearLookup"), 0);
}

TEST(QdqFusion, ABroadcastingBinaryOpIsNotLookedUp) {
  Builder b;
  b.input("aq", {4, 64}, DType::kUInt8).input("bq", {1, 64}, DType::kUInt8);
  b.constant("as", scalar_f(0.03f)).constant("az", scalar_q<uint8_t>(120));
  b.constant("bs", scalar_f(0.05f)).constant("bz", scalar_q<uint8_t>(90));
  b.constant("ys", scalar_f(0.04f)).constant("yz", scalar_q<uint8_t>(10));
  b.node("dqa", "DequantizeLinear", {"aq", "as", "az"}, "a");
  b.node("dqb", "DequantizeLinear", {"bq", "bs", "bz"}, "b");
  b.node("add", "Add", {"a", "b"}, "s");
  b.node("q", "QuantizeLinear", {"s", "ys", "yz"}, "yq");
  Graph g = b.done({"yq"});
  auto fused = fuse_qdq(g);
  ASSERT_TRUE(fused.ok());
  EXPECT_EQ(*fused, 0);
  EXPECT_EQ(count_op(g, "QLinearLookup"), 0);
}

}  // namespace
}  // namespace tessera
