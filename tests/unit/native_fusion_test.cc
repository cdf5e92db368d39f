// Native fusion (src/passes/native_fusion.cc, src/ops/fused_elementwise.cc):
// every graph runs in a session with fusion and in one without, on random
// inputs over many seeds; outputs must agree and the plan must have the
// expected number of steps. Graphs that must not fuse keep their steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ir/graph.h"
#include "passes/native_fusion.h"
#include "passes/shape_inference.h"
#include "runtime/session.h"

namespace tessera {
namespace {

struct GraphBuilder {
  Graph g;
  GraphBuilder() { g.opset = 17; }
  GraphBuilder& input(const std::string& name, Dims d, DType dt = DType::kFloat32) {
    g.inputs.push_back(name);
    g.values[name] = ValueInfo{dt, Shape::FromDims(d)};
    return *this;
  }
  GraphBuilder& constant(const std::string& name, Tensor t) {
    g.constants[name] = std::move(t);
    return *this;
  }
  Node& node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs) {
    Node n;
    n.name = op + "_" + std::to_string(g.nodes.size());
    n.op_type = op;
    n.inputs = std::move(ins);
    n.outputs = std::move(outs);
    g.nodes.push_back(std::move(n));
    return g.nodes.back();
  }
  GraphBuilder& output(const std::string& name) {
    g.outputs.push_back(name);
    return *this;
  }
};

Attribute ints(std::vector<int64_t> v) { return Attribute::Ints(std::move(v)); }
Attribute flt(float v) { return Attribute::Float(v); }

Tensor random_tensor(DType dt, const Dims& d, std::mt19937& rng, float lo = -2.f, float hi = 2.f) {
  Tensor t(dt, d);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dt == DType::kFloat32) t.data<float>()[i] = u(rng);
    if (dt == DType::kInt32) t.data<int32_t>()[i] = static_cast<int32_t>(u(rng) * 10);
    if (dt == DType::kBool) t.data<bool>()[i] = u(rng) > 0.f;
  }
  return t;
}

struct Runs {
  int fused_steps = 0;
  int unfused_steps = 0;
};

// Runs `g` with and without fusion on `seeds` random input sets and checks
// that every output agrees within 1e-5 (relative, absolute below 1).
Runs compare(const Graph& g, int seeds = 20) {
  Runs r;
  SessionOptions on, off;
  on.num_threads = off.num_threads = 2;
  off.fuse = false;
  auto fused = InferenceSession::Create(g, on);
  auto plain = InferenceSession::Create(g, off);
  EXPECT_TRUE(fused.ok()) << fused.status().message();
  EXPECT_TRUE(plain.ok()) << plain.status().message();
  if (!fused.ok() || !plain.ok()) return r;
  std::vector<Dims> dims;
  for (const auto& in : (*fused)->inputs()) dims.push_back(in.shape.concrete());
  auto sf = (*fused)->stats(dims);
  auto sp = (*plain)->stats(dims);
  EXPECT_TRUE(sf.ok() && sp.ok());
  if (!sf.ok() || !sp.ok()) return r;
  r.fused_steps = sf->num_steps;
  r.unfused_steps = sp->num_steps;
  for (int seed = 0; seed < seeds; ++seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    std::vector<Tensor> ins;
    for (const auto& in : (*fused)->inputs()) ins.push_back(random_tensor(in.dtype, in.shape.concrete(), rng));
    auto a = (*fused)->run(ins);
    auto b = (*plain)->run(ins);
    EXPECT_TRUE(a.ok()) << a.status().message();
    EXPECT_TRUE(b.ok()) << b.status().message();
    if (!a.ok() || !b.ok()) return r;
    EXPECT_EQ(a->size(), b->size());
    for (size_t o = 0; o < a->size() && o < b->size(); ++o) {
      const Tensor& x = (*a)[o];
      const Tensor& y = (*b)[o];
      EXPECT_EQ(x.dims(), y.dims());
      EXPECT_EQ(x.dtype(), y.dtype());
      if (x.dims() != y.dims() || x.dtype() != y.dtype()) return r;
      if (x.dtype() == DType::kInt32) {
        for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(x.data<int32_t>()[i], y.data<int32_t>()[i]);
        continue;
      }
      int bad = 0;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const float p = x.data<float>()[i], q = y.data<float>()[i];
        const bool same = (std::isnan(p) && std::isnan(q)) || std::fabs(p - q) <= 1e-5f * std::max(1.f, std::fabs(q));
        if (!same && bad++ < 3) ADD_FAILURE() << "seed " << seed << " output " << o << " [" << i << "]: " << p
                                              << " vs " << q;
      }
      EXPECT_EQ(bad, 0);
    }
  }
  return r;
}

// Conv 4->cout channels, 3x3, pad 1, with bias, on x [1,4,9,9].
void add_conv(GraphBuilder& b, const std::string& x, const std::string& y, int64_t cout, unsigned seed) {
  std::mt19937 rng(seed);
  b.constant(y + "_w", random_tensor(DType::kFloat32, {cout, 4, 3, 3}, rng, -0.5f, 0.5f));
  b.constant(y + "_b", random_tensor(DType::kFloat32, {cout}, rng));
  Node& c = b.node("Conv", {x, y + "_w", y + "_b"}, {y});
  c.attrs["pads"] = ints({1, 1, 1, 1});
}

TEST(NativeFusion, ConvThenEachEpilogueActivationBecomesOneFusedConv) {
  for (const std::string act : {"Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish"}) {
    GraphBuilder b;
    b.input("x", {1, 4, 9, 9});
    add_conv(b, "x", "c", 8, 1);
    std::vector<std::string> ins = {"c"};
    if (act == "Clip") {
      b.constant("lo", Tensor::Scalar<float>(0.f)).constant("hi", Tensor::Scalar<float>(0.75f));
      ins = {"c", "lo", "hi"};
    }
    Node& a = b.node(act, ins, {"y"});
    if (act == "LeakyRelu") a.attrs["alpha"] = flt(0.2f);
    if (act == "HardSigmoid") a.attrs["alpha"] = flt(0.3f);
    b.output("y");
    Runs r = compare(b.g);
    EXPECT_EQ(r.unfused_steps, 2) << act;
    EXPECT_EQ(r.fused_steps, 1) << act;
  }
}

// x times a gate of x after a convolution and after a residual add, Mul's operands either way round: hard swish as
// PaddlePaddle and Keras export it (x * HardSigmoid(x)) and SiLU as PyTorch exports it (x * Sigmoid(x)) each become one
// FusedConv. Not where the convolution's output has a third reader, or the gate's output a second one.
TEST(NativeFusion, ConvThenTimesItsGateBecomesOneFusedConv) {
  for (const std::string gate : {"HardSigmoid", "Sigmoid"}) {
    for (int form = 0; form < 5; ++form) {
      SCOPED_TRACE(gate + " form " + std::to_string(form));
      GraphBuilder b;
      b.input("x", {1, 4, 9, 9}).input("r", {1, 4, 9, 9});
      add_conv(b, "x", "c", 4, 3);
      std::string y = "c";
      if (form == 2) {
        b.node("Add", {"c", "r"}, {"s"});
        y = "s";
      }
      Node& hs = b.node(gate, {y}, {"h"});
      if (gate == "HardSigmoid") hs.attrs["alpha"] = flt(1.f / 6.f);
      b.node("Mul", form == 1 ? std::vector<std::string>{"h", y} : std::vector<std::string>{y, "h"}, {"out"});
      b.output("out");
      if (form == 3) b.output(y);  // a third reader of the convolution's output
      if (form == 4) {             // a second reader of h
        b.node("Relu", {"h"}, {"hr"});
        b.output("hr");
      }
      Runs r = compare(b.g);
      EXPECT_EQ(r.unfused_steps, form == 2 || form == 4 ? 4 : 3);
      if (form < 3)
        EXPECT_EQ(r.fused_steps, 1);
      else
        EXPECT_GT(r.fused_steps, 1);
    }
  }
}

TEST(NativeFusion, ConvResidualAddThenReluBecomesFusedConvWithSummand) {
  for (bool conv_first : {true, false}) {
    GraphBuilder b;
    b.input("x", {1, 4, 9, 9}).input("r", {1, 4, 9, 9});
    add_conv(b, "x", "c", 4, 2);
    b.node("Add", conv_first ? std::vector<std::string>{"c", "r"} : std::vector<std::string>{"r", "c"}, {"s"});
    b.node("Relu", {"s"}, {"y"});
    b.output("y");
    Runs r = compare(b.g);
    EXPECT_EQ(r.unfused_steps, 3);
    EXPECT_EQ(r.fused_steps, 1);
  }
}

TEST(NativeFusion, ConvResidualAddWithoutActivationFuses) {
  GraphBuilder b;
  b.input("x", {1, 4, 9, 9}).input("r", {1, 4, 9, 9});
  add_conv(b, "x", "c", 4, 3);
  b.node("Add", {"c", "r"}, {"y"});
  b.output("y");
  Runs r = compare(b.g);
  EXPECT_EQ(r.unfused_steps, 2);
  EXPECT_EQ(r.fused_steps, 1);
}

TEST(NativeFusion, GemmThenActivationAndTwoDimensionalMatMulThenActivationFuse) {
  std::mt19937 rng(4);
  GraphBuilder b;
  b.input("a", {5, 7});
  b.constant("w", random_tensor(DType::kFloat32, {7, 9}, rng)).constant("bias", random_tensor(DType::kFloat32, {9}, rng));
  b.constant("w2", random_tensor(DType::kFloat32, {9, 6}, rng));
  b.node("Gemm", {"a", "w", "bias"}, {"g"});
  b.node("Relu", {"g"}, {"h"});
  b.node("MatMul", {"h", "w2"}, {"m"});
  b.node("Tanh", {"m"}, {"y"});
  b.output("y");
  Runs r = compare(b.g);
  EXPECT_EQ(r.unfused_steps, 4);
  EXPECT_EQ(r.fused_steps, 2);
}

TEST(NativeFusion, BatchedMatMulWithBiasAndActivationBecomesFusedMatMul) {
  for (bool bias_left : {false, true}) {
    for (const std::string act : {"", "Relu", "Sigmoid"}) {
      std::mt19937 rng(10);
      GraphBuilder b;
      b.input("a", {2, 5, 24});
      b.constant("w", random_tensor(DType::kFloat32, {24, 40}, rng));
      b.constant("bias", random_tensor(DType::kFloat32, {40}, rng));
      b.node("MatMul", {"a", "w"}, {"m"});
      const std::string added = act.empty() ? "y" : "s";
      b.node("Add", bias_left ? std::vector<std::string>{"bias", "m"} : std::vector<std::string>{"m", "bias"},
             {added});
      if (!act.empty()) b.node(act, {"s"}, {"y"});
      b.output("y");
      Runs r = compare(b.g);
      EXPECT_EQ(r.unfused_steps, act.empty() ? 2 : 3) << act;
      EXPECT_EQ(r.fused_steps, 1) << act;
    }
  }
}

TEST(NativeFusion, MatMulWithNonConstantWeightOrWrongBiasIsNotFused) {
  GraphBuilder b;
  b.input("a", {2, 5, 24}).input("w", {24, 40});
  std::mt19937 rng(11);
  b.constant("w2", random_tensor(DType::kFloat32, {40, 8}, rng));
  b.node("MatMul", {"a", "w"}, {"m"});  // B is not a constant
  b.node("Relu", {"m"}, {"r"});
  b.node("MatMul", {"r", "w2"}, {"m2"});
  b.node("Add", {"m2", "a8"}, {"y"});  // [5, 8] is not a per-column bias
  b.input("a8", {5, 8});
  b.output("y");
  Runs r = compare(b.g, 5);
  EXPECT_EQ(r.unfused_steps, 4);
  EXPECT_EQ(r.fused_steps, 4);
}

TEST(NativeFusion, MatMulTimesAScalarTakesItAsAlphaUnlessItBroadcasts) {
  std::mt19937 rng(12);
  // y = MatMul(a, w) * s, with b holding a and w; the steps of the fused and unfused plans.
  auto scaled_product = [](GraphBuilder& b, Tensor s) {
    b.constant("s", std::move(s));
    b.node("MatMul", {"a", "w"}, {"m"});
    b.node("Mul", {"m", "s"}, {"y"});
    b.output("y");
    return compare(b.g, 5);
  };
  GraphBuilder batched;
  batched.input("a", {2, 5, 24}).input("w", {2, 24, 7});
  Runs r = scaled_product(batched, Tensor::Scalar<float>(0.3f));
  EXPECT_EQ(r.unfused_steps, 2);
  EXPECT_EQ(r.fused_steps, 1);
  // [7] * [1, 1] is [1, 7]: the factor broadcasts the product, so it stays a Mul.
  GraphBuilder vector;
  vector.input("a", {24});
  vector.constant("w", random_tensor(DType::kFloat32, {24, 7}, rng));
  r = scaled_product(vector, Tensor::FromVector<float>({0.3f}, {1, 1}));
  EXPECT_EQ(r.unfused_steps, 2);
  EXPECT_EQ(r.fused_steps, 2);
}

TEST(NativeFusion, DecomposedGeluAfterBiasIsOneChain) {
  std::mt19937 rng(5);
  GraphBuilder b;
  b.input("x", {2, 3, 64});
  b.constant("bias", random_tensor(DType::kFloat32, {64}, rng));
  // x * (1 / sqrt 2), which canonicalisation leaves decomposed (as ONNX Runtime does), unlike x / sqrt 2.
  b.constant("rsqrt2", Tensor::Scalar<float>(0.70710677f)).constant("one", Tensor::Scalar<float>(1.f));
  b.constant("half", Tensor::Scalar<float>(0.5f));
  b.node("Add", {"x", "bias"}, {"h"});  // h has two consumers: stays unfused
  b.node("Mul", {"h", "rsqrt2"}, {"d"});
  b.node("Erf", {"d"}, {"e"});
  b.node("Add", {"e", "one"}, {"p"});
  b.node("Mul", {"h", "p"}, {"m"});
  b.node("Mul", {"m", "half"}, {"y"});
  b.output("y");
  Runs r = compare(b.g);
  EXPECT_EQ(r.unfused_steps, 6);
  EXPECT_EQ(r.fused_steps, 2);
}

TEST(NativeFusion, LayerNormTailWithRowAndChannelBroadcastsIsOneChain) {
  std::mt19937 rng(6);
  GraphBuilder b;
  b.input("d", {2, 3, 40}).input("s", {2, 3, 1});
  b.constant("gamma", random_tensor(DType::kFloat32, {40}, rng)).constant("beta", random_tensor(DType::kFloat32, {40}, rng));
  b.node("Div", {"d", "s"}, {"n"});
  b.node("Mul", {"n", "gamma"}, {"m"});
  b.node("Add", {"m", "beta"}, {"y"});
  b.output("y");
  Runs r = compare(b.g);
  EXPECT_EQ(r.unfused_steps, 3);
  EXPECT_EQ(r.fused_steps, 1);
}

// Every instruction, both operand orders, a scalar, a trailing vector that
// straddles blocks, and a per-row operand, over several blocks and tasks.
TEST(NativeFusion, LongChainOfEveryInstructionMatchesUnfusedKernels) {
  std::mt19937 rng(7);
  GraphBuilder b;
  b.input("x", {3, 5000}).input("row", {3, 1}).input("full", {3, 5000});
  b.constant("three", Tensor::Scalar<float>(3.f)).constant("eps", Tensor::Scalar<float>(1e-3f));
  b.constant("two", Tensor::Scalar<float>(2.f)).constant("halfexp", Tensor::Scalar<float>(0.5f));
  b.constant("cubic", Tensor::Scalar<float>(3.f)).constant("odd", Tensor::Scalar<float>(1.7f));
  b.constant("vec", random_tensor(DType::kFloat32, {5000}, rng));
  b.constant("lo", Tensor::Scalar<float>(-0.5f)).constant("hi", Tensor::Scalar<float>(0.5f));
  b.node("Sub", {"three", "x"}, {"v0"});
  b.node("Add", {"v0", "eps"}, {"v1"});  // 3 - x is in [1, 5]
  b.node("Log", {"v1"}, {"v2"});
  b.node("Abs", {"v2"}, {"v3"});
  b.node("Neg", {"v3"}, {"v4"});
  b.node("Exp", {"v4"}, {"v5"});
  b.node("Pow", {"v5", "halfexp"}, {"v6"});
  b.node("Sqrt", {"v6"}, {"v7"});
  b.node("Pow", {"v7", "two"}, {"v8"});
  b.node("Pow", {"v8", "odd"}, {"v9"});
  b.node("Reciprocal", {"v9"}, {"v10"});
  b.node("Sigmoid", {"v10"}, {"v11"});
  b.node("Mul", {"vec", "v11"}, {"v12"});
  b.node("Sub", {"v12", "row"}, {"v13"});
  b.node("Clip", {"v13", "lo", "hi"}, {"v14"});
  b.node("LeakyRelu", {"v14"}, {"v15"}).attrs["alpha"] = flt(0.1f);
  b.node("HardSigmoid", {"v15"}, {"v16"});
  b.node("Tanh", {"v16"}, {"v17"});
  b.node("Div", {"two", "v17"}, {"v18"});
  b.node("Erf", {"v18"}, {"v19"});
  b.node("Pow", {"v19", "cubic"}, {"v20"});
  b.node("Div", {"v20", "full"}, {"v21"});
  b.node("Relu", {"v21"}, {"v22"});
  b.node("Sin", {"v22"}, {"v23"});
  b.node("Cos", {"v23"}, {"v24"});
  b.node("Gelu", {"v24"}, {"y"});
  b.output("y");
  Runs r = compare(b.g, 10);
  EXPECT_EQ(r.unfused_steps, 26);
  EXPECT_EQ(r.fused_steps, 1);
}

// A Snake activation (x + 1 / a * sin(a x)^2) and a Cos is one chain with the unfused kernels' bits, also where
// some |a x| is beyond the vector forms' range (libm there, in those blocks alone).
TEST(NativeFusion, SnakeActivationIsOneChainEqualToTheUnfusedKernels) {
  std::mt19937 rng(11);
  for (const float scale : {1.f, 3e4f}) {
    SCOPED_TRACE(scale);
    GraphBuilder b;
    b.input("x", {2, 3, 4000});
    Tensor a = random_tensor(DType::kFloat32, {1, 3, 1}, rng);
    for (int64_t i = 0; i < 3; ++i) a.data<float>()[i] = scale * (1.5f + a.data<float>()[i]);
    b.constant("alpha", a).constant("two", Tensor::Scalar<float>(2.f));
    b.node("Mul", {"x", "alpha"}, {"ax"});
    b.node("Sin", {"ax"}, {"s"});
    b.node("Pow", {"s", "two"}, {"s2"});
    b.node("Reciprocal", {"alpha"}, {"inv"});
    b.node("Mul", {"s2", "inv"}, {"t"});
    b.node("Add", {"x", "t"}, {"snake"});
    b.node("Cos", {"snake"}, {"y"});
    b.output("y");
    Runs r = compare(b.g, 3);
    EXPECT_EQ(r.fused_steps, 1);  // the Reciprocal of the constant is folded
  }
}

// Runs `fused` and `plain` on the same float inputs: every output has the same dims and agrees within 1e-5 (relative:
// scaled by the larger of 1 and the value; else absolute).
void expect_same_outputs(InferenceSession& fused, InferenceSession& plain, const std::vector<Tensor>& ins,
                         const std::string& what, bool relative) {
  auto x = fused.run(ins);
  auto y = plain.run(ins);
  ASSERT_TRUE(x.ok()) << what << ": " << x.status().message();
  ASSERT_TRUE(y.ok()) << what << ": " << y.status().message();
  ASSERT_EQ(x->size(), y->size()) << what;
  for (size_t o = 0; o < x->size(); ++o) {
    const Tensor& p = (*x)[o];
    const Tensor& q = (*y)[o];
    ASSERT_EQ(p.dims(), q.dims()) << what;
    for (int64_t i = 0; i < p.numel(); ++i) {
      const float want = q.data<float>()[i];
      ASSERT_NEAR(p.data<float>()[i], want, 1e-5f * (relative ? std::max(1.f, std::fabs(want)) : 1.f))
          << what << " output " << o << " [" << i << "]";
    }
  }
}

// With symbolic dims (the shape-generic plan's graph) a chain fuses where the shapes are equal whatever sizes the
// symbols take: side operands whose dims are a known 1 or the output's own symbol, in one run. A side operand with
// another symbol, or a known 1 between dims of the output's, may not broadcast as one block at run time: not fused.
TEST(NativeFusion, SymbolicShapesFuseWhereEqualAtEverySize) {
  std::mt19937 rng(8);
  GraphBuilder b;
  auto sym = [&](const std::string& name, std::vector<Dim> dims) {
    b.g.inputs.push_back(name);
    b.g.values[name] = ValueInfo{DType::kFloat32, Shape(std::move(dims))};
  };
  sym("d", {Dim::Symbol("N"), Dim::Symbol("S"), 40});
  sym("s", {Dim::Symbol("N"), Dim::Symbol("S"), 1});
  sym("t", {Dim::Symbol("S"), 40});
  sym("u", {Dim::Symbol("M"), 40});
  sym("v", {Dim::Symbol("N"), 1, 40});
  b.constant("gamma", random_tensor(DType::kFloat32, {40}, rng));
  b.node("Div", {"d", "s"}, {"n"});
  b.node("Mul", {"n", "gamma"}, {"m"});
  b.node("Add", {"m", "t"}, {"a"});
  b.node("Relu", {"a"}, {"r"});
  b.node("Add", {"r", "u"}, {"y"});  // M may differ from S: not fused
  b.node("Sub", {"d", "s"}, {"c"});
  b.node("Mul", {"c", "v"}, {"z"});  // [N, 1, 40] on [N, S, 40]: N and 40 apart, not one block
  b.output("y").output("z");
  Graph g = b.g;
  ASSERT_TRUE(infer_shapes(g).ok());
  ASSERT_TRUE(fuse_for_native(g).ok());
  int fused = 0, plain = 0;
  for (const Node& n : g.nodes) (n.op_type == "FusedElementwise" ? fused : plain)++;
  EXPECT_EQ(fused, 1);  // Div, Mul, Add, Relu
  EXPECT_EQ(plain, 3);  // Add u, Sub, Mul v

  // The generic plan runs the fused chain at sizes where the symbols differ and where they are 1.
  SessionOptions on, off;
  on.num_threads = off.num_threads = 2;
  off.fuse = false;
  auto a = InferenceSession::Create(b.g, on);
  auto c = InferenceSession::Create(b.g, off);
  ASSERT_TRUE(a.ok() && c.ok());
  for (auto [n, s, m] : {std::tuple<int64_t, int64_t, int64_t>{2, 3, 3}, {1, 5, 1}, {3, 1, 1}, {1, 1, 1}}) {
    std::vector<Tensor> ins = {random_tensor(DType::kFloat32, {n, s, 40}, rng), random_tensor(DType::kFloat32, {n, s, 1}, rng, 0.5f, 2.f),
                               random_tensor(DType::kFloat32, {s, 40}, rng), random_tensor(DType::kFloat32, {m, 40}, rng),
                               random_tensor(DType::kFloat32, {n, 1, 40}, rng)};
    expect_same_outputs(**a, **c, ins, std::to_string(n) + "x" + std::to_string(s), true);
  }
  EXPECT_GT((*a)->runs_generic(), 0u);
}

// A residual Add of the same symbolic shape joins a Conv in the shape-generic plan too, and runs at several sizes.
TEST(NativeFusion, SymbolicResidualAddJoinsTheConv) {
  GraphBuilder b;
  b.g.inputs.push_back("x");
  b.g.values["x"] = ValueInfo{DType::kFloat32, Shape({1, 4, Dim::Symbol("H"), Dim::Symbol("W")})};
  add_conv(b, "x", "c", 4, 3);
  b.node("Add", {"c", "x"}, {"a"});
  b.node("Relu", {"a"}, {"y"});
  b.output("y");
  Graph g = b.g;
  ASSERT_TRUE(infer_shapes(g).ok());
  ASSERT_TRUE(fuse_for_native(g).ok());
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "FusedConv");
  EXPECT_EQ(g.nodes[0].inputs.size(), 4u);  // x, w, b, the summand
  SessionOptions on, off;
  off.fuse = false;
  auto f = InferenceSession::Create(b.g, on);
  auto p = InferenceSession::Create(b.g, off);
  ASSERT_TRUE(f.ok() && p.ok());
  std::mt19937 rng(4);
  for (auto [h, w] : {std::pair<int64_t, int64_t>{5, 7}, {9, 3}, {1, 1}}) {
    std::vector<Tensor> ins = {random_tensor(DType::kFloat32, {1, 4, h, w}, rng)};
    expect_same_outputs(**f, **p, ins, std::to_string(h) + "x" + std::to_string(w), false);
  }
  EXPECT_GT((*f)->runs_generic(), 0u);
}

// Conv [-> activation] -> MaxPool is one FusedConvMaxPool step, equal to the two or three steps to the bit: by rows
// (the row and the wide kernel), pointwise, im2col (too narrow to run by rows), strided, windows of 2x2, 2x1, 1x2 and
// 3x3 that tile sizes they do not divide, overlapping and padded windows (a ResNet stem's 3x3 / 2 with pads of 1;
// 3x3 / 1; 2x2 / 1), a subsampling 1x1 / 2, batches, bands cut by output channels (fewer pooled rows than threads),
// 1 to 3 threads, and symbolic sizes in the shape-generic plan. Dilated windows, ceil mode, SAME padding, a second
// reader, two groups, the identity or a summand keep MaxPool apart.
struct PoolCase {
  Dims x;
  int64_t cout, k, stride, pad;
  std::string act;
  std::vector<int64_t> window;
  std::vector<int64_t> pool_strides = {};  // the window's when empty
  std::vector<int64_t> pool_pads = {};
};

Graph conv_max_pool_graph(const PoolCase& c, const std::vector<Dim>& x_dims, unsigned seed) {
  GraphBuilder b;
  b.g.inputs.push_back("x");
  b.g.values["x"] = ValueInfo{DType::kFloat32, Shape(x_dims)};
  std::mt19937 rng(seed);
  const float scale = 1.f / std::sqrt(static_cast<float>(c.x[1] * c.k * c.k));
  b.constant("w", random_tensor(DType::kFloat32, {c.cout, c.x[1], c.k, c.k}, rng, -scale, scale));
  b.constant("b", random_tensor(DType::kFloat32, {c.cout}, rng));
  Node& conv = b.node("Conv", {"x", "w", "b"}, {"c"});
  conv.attrs["pads"] = ints({c.pad, c.pad, c.pad, c.pad});
  conv.attrs["strides"] = ints({c.stride, c.stride});
  std::string y = "c";
  if (!c.act.empty()) {
    b.node(c.act, {"c"}, {"a"});
    y = "a";
  }
  Node& mp = b.node("MaxPool", {y}, {"y"});
  mp.attrs["kernel_shape"] = ints(c.window);
  mp.attrs["strides"] = ints(c.pool_strides.empty() ? c.window : c.pool_strides);
  if (!c.pool_pads.empty()) mp.attrs["pads"] = ints(c.pool_pads);
  b.output("y");
  return b.g;
}

void expect_equal_bits(InferenceSession& fused, InferenceSession& plain, const std::vector<Tensor>& ins,
                       const std::string& what) {
  auto x = fused.run(ins);
  auto y = plain.run(ins);
  ASSERT_TRUE(x.ok()) << what << ": " << x.status().message();
  ASSERT_TRUE(y.ok()) << what << ": " << y.status().message();
  ASSERT_EQ((*x)[0].dims(), (*y)[0].dims()) << what;
  ASSERT_GT((*x)[0].numel(), 0) << what;
  EXPECT_EQ(std::memcmp((*x)[0].raw(), (*y)[0].raw(), (*x)[0].nbytes()), 0) << what;
}

TEST(NativeFusion, ConvThenAMaxPoolIsOneStepEqualToTheBits) {
  const PoolCase cases[] = {
      {{1, 3, 24, 150}, 32, 3, 1, 1, "Relu", {2, 2}},      // by rows, wide kernel
      {{1, 5, 20, 70}, 12, 3, 1, 1, "", {2, 2}},           // by rows, row kernel, no activation
      {{2, 4, 9, 9}, 8, 3, 1, 1, "Relu", {2, 2}},          // im2col; 9 rows and columns: the last of each dropped
      {{1, 16, 10, 30}, 24, 1, 1, 0, "Relu", {2, 1}},      // pointwise
      {{1, 6, 33, 65}, 16, 3, 2, 1, "Sigmoid", {1, 2}},    // strided, an activation after the store
      {{1, 40, 7, 60}, 48, 3, 1, 1, "Relu", {2, 1}},       // 3 pooled rows: bands cut by channels
      {{2, 40, 7, 60}, 48, 3, 1, 1, "Relu", {2, 1}},       // the same in 2 images: each thread a slice of each
      {{3, 8, 12, 40}, 32, 3, 1, 1, "LeakyRelu", {3, 3}},  // 3x3 windows, 3 images
      {{2, 3, 45, 67}, 16, 7, 2, 3, "Relu", {3, 3}, {2, 2}, {1, 1, 1, 1}},     // a ResNet stem
      {{1, 8, 30, 90}, 32, 3, 1, 1, "Relu", {3, 3}, {1, 1}, {1, 1, 1, 1}},     // 3x3 / 1, padded: the same size
      {{1, 5, 17, 33}, 12, 3, 1, 1, "", {2, 2}, {1, 1}},                       // 2x2 / 1: overlapping, no padding
      {{1, 40, 7, 60}, 48, 3, 1, 1, "Sigmoid", {3, 2}, {2, 1}, {1, 0, 0, 1}},  // few pooled rows: channel slices
      {{1, 16, 10, 30}, 24, 1, 1, 0, "Relu", {1, 1}, {2, 2}},                  // pointwise, subsampled
  };
  int index = 0;
  for (const PoolCase& c : cases) {
    SCOPED_TRACE("case " + std::to_string(index++));
    std::vector<Dim> dims(c.x.begin(), c.x.end());
    const Graph g = conv_max_pool_graph(c, dims, 7);
    Graph fused_graph = g;
    ASSERT_TRUE(infer_shapes(fused_graph).ok());
    ASSERT_TRUE(fuse_for_native(fused_graph).ok());
    ASSERT_EQ(fused_graph.nodes.size(), 1u);
    EXPECT_EQ(fused_graph.nodes[0].op_type, "FusedConvMaxPool");
    for (int threads : {1, 2, 3}) {
      SessionOptions on, off;
      on.num_threads = off.num_threads = threads;
      off.fuse = false;
      auto f = InferenceSession::Create(g, on);
      auto p = InferenceSession::Create(g, off);
      ASSERT_TRUE(f.ok() && p.ok());
      std::mt19937 rng(static_cast<unsigned>(threads));
      expect_equal_bits(**f, **p, {random_tensor(DType::kFloat32, c.x, rng)}, std::to_string(threads) + " threads");
    }
  }
}

TEST(NativeFusion, ConvThenAMaxPoolWithSymbolicSizesRunsEveryShapeEqualToTheBits) {
  const PoolCase c{{1, 3, 0, 0}, 32, 3, 1, 1, "Relu", {2, 2}};
  const Graph g = conv_max_pool_graph(c, {1, 3, Dim::Symbol("H"), Dim::Symbol("W")}, 9);
  SessionOptions on, off;
  on.num_threads = off.num_threads = 2;
  off.fuse = false;
  auto f = InferenceSession::Create(g, on);
  auto p = InferenceSession::Create(g, off);
  ASSERT_TRUE(f.ok() && p.ok());
  std::mt19937 rng(5);
  for (auto [h, w] : {std::pair<int64_t, int64_t>{48, 97}, {5, 300}, {2, 2}, {17, 33}, {48, 97}}) {
    expect_equal_bits(**f, **p, {random_tensor(DType::kFloat32, {1, 3, h, w}, rng)},
                      std::to_string(h) + "x" + std::to_string(w));
  }
  EXPECT_GT((*f)->runs_generic(), 0u);
}

// Random geometries (kernels, strides, dilations and pads of the convolution; windows that tile sizes they do not
// divide, or any strides and pads; channel counts that fill no panel; 1 to 3 threads): the fused step equals the
// unfused ones to the bit.
TEST(NativeFusion, ConvThenAMaxPoolOverRandomGeometriesEqualsTheBits) {
  std::mt19937 rng(2027);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int64_t channels[] = {1, 3, 4, 8, 16, 33}, outputs[] = {1, 5, 16, 32, 40, 64};
  const char* acts[] = {"", "Relu", "Sigmoid", "LeakyRelu"};
  int fused = 0;
  for (int i = 0; i < 40; ++i) {
    const int64_t n = pick(1, 2), c = channels[pick(0, 5)], m = outputs[pick(0, 5)], kh = pick(1, 3), kw = pick(1, 3);
    const int64_t sh = pick(1, 2), sw = pick(1, 2), dh = pick(1, 2), dw = pick(1, 2), h = pick(2, 40), w = pick(2, 300);
    const std::vector<int64_t> pads = {pick(0, 1), pick(0, 1), pick(0, 1), pick(0, 1)};
    int64_t ph = pick(1, 3), pw = pick(1, 3);
    if (ph * pw < 2) pw = 2;
    // Windows that tile half the time, else any strides and pads below the window.
    const bool tile = pick(0, 1) == 0;
    const std::vector<int64_t> ps = tile ? std::vector<int64_t>{ph, pw} : std::vector<int64_t>{pick(1, 3), pick(1, 3)};
    const std::vector<int64_t> pp =
        tile ? std::vector<int64_t>{0, 0, 0, 0}
             : std::vector<int64_t>{pick(0, static_cast<int>(ph) - 1), pick(0, static_cast<int>(pw) - 1),
                                    pick(0, static_cast<int>(ph) - 1), pick(0, static_cast<int>(pw) - 1)};
    const int64_t oh = (h + pads[0] + pads[2] - (kh - 1) * dh - 1) / sh + 1;
    const int64_t ow = (w + pads[1] + pads[3] - (kw - 1) * dw - 1) / sw + 1;
    const bool conv_fits = h + pads[0] + pads[2] >= (kh - 1) * dh + 1 && w + pads[1] + pads[3] >= (kw - 1) * dw + 1;
    if (!conv_fits || oh + pp[0] + pp[2] < ph || ow + pp[1] + pp[3] < pw) continue;
    const std::string what = "case " + std::to_string(i);
    GraphBuilder b;
    b.input("x", {n, c, h, w});
    const float scale = 1.f / std::sqrt(static_cast<float>(c * kh * kw));
    b.constant("w", random_tensor(DType::kFloat32, {m, c, kh, kw}, rng, -scale, scale));
    b.constant("b", random_tensor(DType::kFloat32, {m}, rng));
    Node& conv = b.node("Conv", {"x", "w", "b"}, {"c"});
    conv.attrs["kernel_shape"] = ints({kh, kw});
    conv.attrs["strides"] = ints({sh, sw});
    conv.attrs["dilations"] = ints({dh, dw});
    conv.attrs["pads"] = ints(pads);
    const std::string act = acts[pick(0, 3)];
    if (!act.empty()) b.node(act, {"c"}, {"a"});
    Node& mp = b.node("MaxPool", {act.empty() ? "c" : "a"}, {"y"});
    mp.attrs["kernel_shape"] = ints({ph, pw});
    mp.attrs["strides"] = ints(ps);
    mp.attrs["pads"] = ints(pp);
    b.output("y");
    SessionOptions on, off;
    on.num_threads = off.num_threads = 1 + i % 3;
    off.fuse = false;
    auto f = InferenceSession::Create(b.g, on);
    auto p = InferenceSession::Create(b.g, off);
    ASSERT_TRUE(f.ok() && p.ok()) << what;
    auto stats = (*f)->stats({{n, c, h, w}});
    ASSERT_TRUE(stats.ok()) << what;
    EXPECT_EQ(stats->num_steps, 1) << what;
    expect_equal_bits(**f, **p, {random_tensor(DType::kFloat32, {n, c, h, w}, rng)}, what);
    ++fused;
  }
  EXPECT_GT(fused, 25);
}

TEST(NativeFusion, MaxPoolsThatDoNotTileOrConvolutionsItCannotJoinStayApart) {
  for (int form = 0; form < 7; ++form) {
    SCOPED_TRACE("form " + std::to_string(form));
    PoolCase c{{1, 4, 12, 20}, 8, 3, 1, 1, "Relu", {2, 2}};
    Graph g = conv_max_pool_graph(c, std::vector<Dim>(c.x.begin(), c.x.end()), 3);
    Node& mp = g.nodes.back();
    if (form == 0) mp.attrs["dilations"] = ints({2, 2});
    if (form == 1) mp.attrs["auto_pad"] = Attribute::String("SAME_UPPER");
    if (form == 2) mp.attrs["ceil_mode"] = Attribute::Int(1);
    if (form == 3) g.outputs.push_back("a");  // a second reader of the activation
    if (form == 4) {                          // two groups
      g.nodes[0].attrs["group"] = Attribute::Int(2);
      std::mt19937 rng(1);
      g.constants["w"] = random_tensor(DType::kFloat32, {8, 2, 3, 3}, rng);
    }
    if (form == 5) mp.attrs["kernel_shape"] = mp.attrs["strides"] = ints({1, 1});
    if (form == 6) {  // a summand before the activation
      g.inputs.push_back("r");
      g.values["r"] = ValueInfo{DType::kFloat32, Shape::FromDims({1, 8, 12, 20})};
      g.nodes[1].inputs = {"s"};
      Node add;
      add.name = "add";
      add.op_type = "Add";
      add.inputs = {"c", "r"};
      add.outputs = {"s"};
      g.nodes.insert(g.nodes.begin() + 1, add);
    }
    Graph fused = g;
    ASSERT_TRUE(infer_shapes(fused).ok());
    ASSERT_TRUE(fuse_for_native(fused).ok());
    for (const Node& n : fused.nodes) EXPECT_NE(n.op_type, "FusedConvMaxPool");
    EXPECT_EQ(fused.nodes.back().op_type, "MaxPool");
    Runs r = compare(g, 3);
    EXPECT_GT(r.fused_steps, 1);
  }
}

TEST(NativeFusion, IntermediateWithTwoConsumersIsNotFused) {
  GraphBuilder b;
  b.input("x", {1, 4, 9, 9});
  add_conv(b, "x", "c", 8, 8);
  b.node("Relu", {"c"}, {"y1"});
  b.node("Sigmoid", {"c"}, {"y2"});
  b.output("y1").output("y2");
  Runs r = compare(b.g, 5);
  EXPECT_EQ(r.unfused_steps, 3);
  EXPECT_EQ(r.fused_steps, 3);
}

TEST(NativeFusion, IntermediateThatIsAGraphOutputIsNotFused) {
  GraphBuilder b;
  b.input("x", {1, 4, 9, 9}).input("z", {4, 16});
  add_conv(b, "x", "c", 8, 9);
  b.node("Relu", {"c"}, {"y"});
  b.node("Exp", {"z"}, {"e"});
  b.node("Neg", {"e"}, {"n"});
  b.output("c").output("y").output("e").output("n");
  Runs r = compare(b.g, 5);
  EXPECT_EQ(r.unfused_steps, 4);
  EXPECT_EQ(r.fused_steps, 4);
}

TEST(NativeFusion, NonFloatChainIsNotFused) {
  GraphBuilder b;
  b.input("x", {4, 16}, DType::kInt32).input("w", {4, 16}, DType::kInt32);
  b.node("Add", {"x", "w"}, {"s"});
  b.node("Mul", {"s", "w"}, {"y"});
  b.output("y");
  Runs r = compare(b.g, 5);
  EXPECT_EQ(r.unfused_steps, 2);
  EXPECT_EQ(r.fused_steps, 2);
}

// What dynamically quantized models write after ConvInteger/MatMulInteger:
// Cast(int32 -> float32), then the scale, the bias and an activation.
TEST(NativeFusion, CastOfInt32HeadsAChainAndConvertsAsCastDoes) {
  GraphBuilder b;
  b.input("acc", {2, 3, 40}, DType::kInt32).input("s", {}).input("bias", {40});
  b.node("Cast", {"acc"}, {"f"}).attrs["to"] = Attribute::Int(static_cast<int64_t>(DType::kFloat32));
  b.node("Mul", {"f", "s"}, {"m"});
  b.node("Add", {"m", "bias"}, {"a"});
  b.node("Relu", {"a"}, {"y"});
  b.output("y");
  Runs r = compare(b.g, 5);
  EXPECT_EQ(r.unfused_steps, 4);
  EXPECT_EQ(r.fused_steps, 1);
  // Integers beyond 2^24 round to float as Cast rounds them.
  SessionOptions on, off;
  off.fuse = false;
  auto fused = InferenceSession::Create(b.g, on);
  auto plain = InferenceSession::Create(b.g, off);
  ASSERT_TRUE(fused.ok() && plain.ok());
  Tensor acc(DType::kInt32, {2, 3, 40});
  for (int64_t i = 0; i < acc.numel(); ++i) {
    acc.data<int32_t>()[i] = static_cast<int32_t>((i % 2 ? -1 : 1) * (2147483647 - i * 7919));
  }
  Tensor bias(DType::kFloat32, {40});
  for (int64_t i = 0; i < 40; ++i) bias.data<float>()[i] = 0.f;
  const std::vector<Tensor> ins = {acc, Tensor::Scalar<float>(1.f), bias};
  auto a = (*fused)->run(ins);
  auto c = (*plain)->run(ins);
  ASSERT_TRUE(a.ok() && c.ok());
  for (int64_t i = 0; i < acc.numel(); ++i) {
    ASSERT_EQ((*a)[0].data<float>()[i], (*c)[0].data<float>()[i]) << i;
    ASSERT_EQ((*a)[0].data<float>()[i], std::max(0.f, static_cast<float>(acc.data<int32_t>()[i]))) << i;
  }
}

TEST(NativeFusion, CastOfAnotherTypeDoesNotHeadAChain) {
  GraphBuilder b;
  b.input("x", {4, 16}, DType::kBool).input("w", {4, 16});
  b.node("Cast", {"x"}, {"f"}).attrs["to"] = Attribute::Int(static_cast<int64_t>(DType::kFloat32));
  b.node("Mul", {"f", "w"}, {"y"});
  b.output("y");
  Runs r = compare(b.g, 3);
  EXPECT_EQ(r.fused_steps, 2);
}

TEST(NativeFusion, BroadcastThatIsNotOneBlockIsNotFused) {
  GraphBuilder b;
  b.input("x", {2, 3, 4}).input("m", {2, 1, 4}).input("o", {2, 3, 4});
  b.node("Mul", {"x", "m"}, {"s"});  // [2,1,4] on [2,3,4]: two separate blocks
  b.node("Relu", {"s"}, {"r"});
  b.node("Add", {"r", "o"}, {"y"});
  b.output("y");
  Runs r = compare(b.g, 5);
  EXPECT_EQ(r.unfused_steps, 3);
  EXPECT_EQ(r.fused_steps, 2);  // Mul stays; Relu + Add fuse behind it
}

TEST(NativeFusion, ValueReadByANestedBodyIsNotFused) {
  GraphBuilder b;
  b.input("x", {8}).input("cond", {}, DType::kBool);
  b.node("Exp", {"x"}, {"e"});
  b.node("Neg", {"e"}, {"n"});  // e is also read by both branches below
  auto branch = [](const std::string& op) {
    auto body = std::make_shared<Graph>();
    body->opset = 17;
    Node k;
    k.name = op;
    k.op_type = op;
    k.inputs = {"e"};
    k.outputs = {"b"};
    body->nodes = {k};
    body->outputs = {"b"};
    return body;
  };
  Node& iff = b.node("If", {"cond"}, {"i"});
  Attribute t, f;
  t.kind = f.kind = Attribute::Kind::kGraph;
  t.g = branch("Relu");
  f.g = branch("Sigmoid");
  iff.attrs["then_branch"] = t;
  iff.attrs["else_branch"] = f;
  b.node("Add", {"n", "x"}, {"y"});
  b.output("y").output("i");
  // The fused and unfused plans must agree whichever branch runs; the chain
  // Neg -> Add still fuses (n has one consumer).
  Runs r = compare(b.g, 6);
  EXPECT_EQ(r.unfused_steps, 4);
  EXPECT_EQ(r.fused_steps, 3);
}

// If/Loop/Scan bodies run through the eager subgraph runner, which finds
// the fused ops in the same registry: chains inside them fuse too.
TEST(NativeFusion, ChainInsideAnIfBodyFusesAndRunsTheSame) {
  GraphBuilder b;
  b.input("x", {2, 50}).input("cond", {}, DType::kBool);
  auto branch = [](bool fuse_me) {
    auto body = std::make_shared<Graph>();
    body->opset = 17;
    Node e, n;
    e.name = "exp";
    e.op_type = "Exp";
    e.inputs = {"x"};
    e.outputs = {"be"};
    n.name = "neg";
    n.op_type = fuse_me ? "Neg" : "Identity";
    n.inputs = {"be"};
    n.outputs = {"b"};
    body->nodes = {e, n};
    body->outputs = {"b"};
    body->values["be"] = body->values["b"] = ValueInfo{DType::kFloat32, Shape::FromDims({2, 50})};
    return body;
  };
  Node& iff = b.node("If", {"cond"}, {"y"});
  Attribute t, f;
  t.kind = f.kind = Attribute::Kind::kGraph;
  t.g = branch(true);
  f.g = branch(false);
  iff.attrs["then_branch"] = t;
  iff.attrs["else_branch"] = f;
  b.output("y");
  compare(b.g, 8);

  Graph g = b.g;
  unshare_nested_graphs(g);
  NativeFusionStats st;
  ASSERT_TRUE(fuse_for_native(g, &st).ok());
  EXPECT_EQ(st.elementwise_chains, 1);  // Exp -> Neg in the then branch; Identity is not fused
  const Graph& then_body = *g.nodes[0].attr_graph("then_branch");
  ASSERT_EQ(then_body.nodes.size(), 1u);
  EXPECT_EQ(then_body.nodes[0].op_type, "FusedElementwise");
  EXPECT_EQ(g.nodes[0].attr_graph("else_branch")->nodes.size(), 2u);
  // The session's graph was copied, not changed.
  EXPECT_EQ(b.g.nodes[0].attr_graph("then_branch")->nodes.size(), 2u);
}

TEST(NativeFusion, EnvironmentSwitchDisablesFusion) {
  GraphBuilder b;
  b.input("x", {16});
  b.node("Exp", {"x"}, {"e"});
  b.node("Neg", {"e"}, {"y"});
  b.output("y");
  // The pass alone, on a graph typed by hand.
  Graph g = b.g;
  g.values["e"] = g.values["y"] = ValueInfo{DType::kFloat32, Shape::FromDims({16})};
  NativeFusionStats st;
  ASSERT_TRUE(fuse_for_native(g, &st).ok());
  EXPECT_EQ(st.elementwise_chains, 1);
  EXPECT_EQ(st.nodes_removed, 1);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "FusedElementwise");
  EXPECT_EQ(g.nodes[0].domain, "ai.tessera");
  ::setenv("TESSERA_NO_FUSION", "1", 1);
  EXPECT_TRUE(native_fusion_disabled_by_env());
  auto s = InferenceSession::Create(b.g);
  ::unsetenv("TESSERA_NO_FUSION");
  EXPECT_FALSE(native_fusion_disabled_by_env());
  ASSERT_TRUE(s.ok());
  auto stats = (*s)->stats({{16}});
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->num_steps, 2);
}

}  // namespace
}  // namespace tessera
