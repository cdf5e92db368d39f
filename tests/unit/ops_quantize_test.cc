// Quantization family: QuantizeLinear/DequantizeLinear (ties to even,
// saturation, per-axis, int32), DynamicQuantizeLinear (the spec's float32
// formula), and the integer matrix ops (MatMulInteger, QLinearMatMul,
// ConvInteger, QLinearConv) against naive references, with constant and
// run-time weights, odd sizes that cut GEMM panels, and two threads.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/op_registry.h"
#include "ops/quantize_ops.h"
#include "ops/node_runner.h"
#include "util/thread_pool.h"
#include "unit/op_test_util.h"

namespace tessera {
namespace {

using testutil::set_int;
using testutil::set_ints;
using testutil::set_string;

Node make_node(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs = {"y"}) {
  Node node;
  node.name = "n";
  node.op_type = op;
  node.inputs = std::move(inputs);
  node.outputs = std::move(outputs);
  return node;
}

// Runs `schema` directly (MatMulInteger/ConvInteger may be registered by
// another family): inference, allocation, kernel creation with the inputs
// as constants or not, and the kernel.
Expected<std::vector<Tensor>> run_schema(const OpSchema& schema, const Node& node, const std::vector<Tensor>& inputs,
                                         bool constants, ThreadPool* pool) {
  std::vector<ValueInfo> info(inputs.size());
  std::vector<const Tensor*> values(inputs.size(), nullptr), consts(inputs.size(), nullptr);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    info[i] = ValueInfo{inputs[i].dtype(), Shape::FromDims(inputs[i].dims())};
    values[i] = &inputs[i];
    if (constants) consts[i] = &inputs[i];
  }
  InferContext ictx(node, 13, info, values);
  TSR_RETURN_IF_ERROR(schema.infer(ictx));
  KernelInit init{node, 13, info, consts};
  std::unique_ptr<Kernel> kernel;
  TSR_ASSIGN_OR_RETURN(kernel, create_kernel(schema, init));
  std::vector<Tensor> outputs(node.outputs.size());
  std::vector<Tensor*> out_ptrs;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const ValueInfo& vi = ictx.outputs()[i];
    outputs[i] = Tensor(vi.dtype, vi.shape.concrete());
    out_ptrs.push_back(&outputs[i]);
  }
  ThreadPool local(1);
  KernelContext kctx(node, values, out_ptrs, pool ? pool : &local, nullptr);
  TSR_RETURN_IF_ERROR(kernel->run(kctx));
  return outputs;
}

Tensor random_int8(DType dt, Dims dims, std::mt19937& rng) {
  Tensor t(dt, std::move(dims));
  std::uniform_int_distribution<int> d(0, 255);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int v = d(rng);
    if (dt == DType::kUInt8) t.data<uint8_t>()[i] = static_cast<uint8_t>(v);
    else t.data<int8_t>()[i] = static_cast<int8_t>(v - 128);
  }
  return t;
}

// Zero points spread over the type's range.
Tensor random_zp(DType dt, Dims dims, std::mt19937& rng) { return random_int8(dt, std::move(dims), rng); }

Tensor floats(std::vector<float> v, Dims d) { return Tensor::FromVector<float>(v, std::move(d)); }

template <class T>
std::vector<int> as_ints(const Tensor& t) {
  std::vector<int> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(static_cast<int>(t.data<T>()[i]));
  return v;
}

int64_t value(const Tensor& t, int64_t i) { return t.as_int64(i); }

// saturate(round_half_even(v) + zp) to the range of `dt`.
int requant_ref(double v, int zp, DType dt) {
  const double lo = dt == DType::kUInt8 ? 0 : -128, hi = dt == DType::kUInt8 ? 255 : 127;
  double r = std::nearbyint(static_cast<float>(v)) + zp;
  if (std::isnan(r)) r = lo;
  return static_cast<int>(std::min(hi, std::max(lo, r)));
}

// ---- QuantizeLinear -------------------------------------------------------------

TEST(QuantizeLinear, RoundsHalfToEvenAndSaturates) {
  Node node = make_node("QuantizeLinear", {"x", "s", "z"});
  Tensor x = floats({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 1000.f, -1000.f, 3.4f}, {9});
  auto r = run_node_once(node, 13, {x, Tensor::Scalar<float>(1.f), Tensor::Scalar<uint8_t>(128)});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(as_ints<uint8_t>(r.value()[0]), (std::vector<int>{128, 130, 130, 128, 126, 126, 255, 0, 131}));
}

TEST(QuantizeLinear, DefaultsToUint8ZeroPointZero) {
  Node node = make_node("QuantizeLinear", {"x", "s"});
  auto r = run_node_once(node, 10, {floats({-3.f, 3.f, 7.f, 600.f}, {2, 2}), Tensor::Scalar<float>(2.f)});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value()[0].dtype(), DType::kUInt8);
  EXPECT_EQ(r.value()[0].dims(), (Dims{2, 2}));
  EXPECT_EQ(as_ints<uint8_t>(r.value()[0]), (std::vector<int>{0, 2, 4, 255}));
}

TEST(QuantizeLinear, Int8ZeroPointGivesInt8Output) {
  Node node = make_node("QuantizeLinear", {"x", "s", "z"});
  auto r = run_node_once(node, 13, {floats({-300.f, -10.f, 0.f, 10.f, 300.f}, {5}), Tensor::Scalar<float>(2.f),
                                    Tensor::Scalar<int8_t>(-3)});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value()[0].dtype(), DType::kInt8);
  EXPECT_EQ(as_ints<int8_t>(r.value()[0]), (std::vector<int>{-128, -8, -3, 2, 127}));
}

TEST(QuantizeLinear, PerAxisUsesEachChannelsScaleAndZeroPoint) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-50.f, 50.f);
  for (int64_t axis : {0, 1, 2, -1}) {
    Node node = make_node("QuantizeLinear", {"x", "s", "z"});
    set_int(node, "axis", axis);
    Dims dims{2, 3, 4};
    Tensor x(DType::kFloat32, dims);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = d(rng);
    const int ax = static_cast<int>(axis < 0 ? axis + 3 : axis);
    const int64_t c = dims[static_cast<size_t>(ax)];
    std::vector<float> s;
    for (int64_t i = 0; i < c; ++i) s.push_back(0.25f * static_cast<float>(i + 1));
    Tensor z = random_zp(DType::kInt8, {c}, rng);
    auto r = run_node_once(node, 13, {x, floats(s, {c}), z});
    ASSERT_TRUE(r.ok()) << r.status().message();
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t ch = ax == 0 ? i / 12 : ax == 1 ? (i / 4) % 3 : i % 4;
      const int want = requant_ref(x.data<float>()[i] / s[static_cast<size_t>(ch)],
                                   z.data<int8_t>()[ch], DType::kInt8);
      ASSERT_EQ(value(r.value()[0], i), want) << "axis " << axis << " element " << i;
    }
  }
}

TEST(QuantizeLinear, LargeTensorMatchesReferenceOnTwoThreads) {
  ThreadPool pool(2);
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> d(-400.f, 400.f);
  Tensor x(DType::kFloat32, {100003});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = d(rng);
  x.data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  x.data<float>()[8] = std::numeric_limits<float>::infinity();
  Node node = make_node("QuantizeLinear", {"x", "s", "z"});
  auto r = run_node_once(node, 13, {x, Tensor::Scalar<float>(1.7f), Tensor::Scalar<uint8_t>(77)}, &pool);
  ASSERT_TRUE(r.ok()) << r.status().message();
  for (int64_t i = 0; i < x.numel(); ++i) {
    ASSERT_EQ(value(r.value()[0], i), requant_ref(x.data<float>()[i] / 1.7f, 77, DType::kUInt8)) << i;
  }
}

TEST(QuantizeLinear, Int32Input) {
  Node node = make_node("QuantizeLinear", {"x", "s", "z"});
  auto r = run_node_once(node, 13, {Tensor::FromVector<int32_t>({-1000, -5, 5, 15, 1000}, {5}),
                                    Tensor::Scalar<float>(10.f), Tensor::Scalar<int8_t>(0)});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(as_ints<int8_t>(r.value()[0]), (std::vector<int>{-100, 0, 0, 2, 100}));
}

TEST(QuantizeLinear, RejectsScaleThatDoesNotMatchTheAxis) {
  Node node = make_node("QuantizeLinear", {"x", "s"});
  auto r = run_node_once(node, 13, {Tensor(DType::kFloat32, {2, 3}), floats({1.f, 2.f}, {2})});
  EXPECT_FALSE(r.ok());
  set_int(node, "axis", 5);
  r = run_node_once(node, 13, {Tensor(DType::kFloat32, {2, 3}), floats({1.f, 2.f}, {2})});
  EXPECT_FALSE(r.ok());
}

TEST(QuantizeLinear, InferenceKeepsSymbolicDimsAndTakesTheZeroPointType) {
  const OpSchema* s = OpRegistry::instance().find("", "QuantizeLinear");
  ASSERT_NE(s, nullptr);
  Node node = make_node("QuantizeLinear", {"x", "s", "z"});
  Shape x({Dim::Symbol("batch"), Dim(3)});
  InferContext ctx(node, 13, {{DType::kFloat32, x}, {DType::kFloat32, Shape::Unranked()}, {DType::kInt8, Shape()}},
                   {});
  ASSERT_TRUE(s->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[0].dtype, DType::kInt8);
  EXPECT_EQ(ctx.outputs()[0].shape.str(), "[batch,3]");
}

// ---- DequantizeLinear -----------------------------------------------------------

TEST(DequantizeLinear, PerTensorUint8AndInt8) {
  Node node = make_node("DequantizeLinear", {"x", "s", "z"});
  auto r = run_node_once(node, 13, {Tensor::FromVector<uint8_t>({0, 3, 128, 255}, {4}), Tensor::Scalar<float>(2.f),
                                    Tensor::Scalar<uint8_t>(128)});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const float* y = r.value()[0].data<float>();
  EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{-256.f, -250.f, 0.f, 254.f}));
  r = run_node_once(node, 13, {Tensor::FromVector<int8_t>({-128, 0, 127}, {3}), Tensor::Scalar<float>(0.5f),
                               Tensor::Scalar<int8_t>(-1)});
  ASSERT_TRUE(r.ok()) << r.status().message();
  y = r.value()[0].data<float>();
  EXPECT_EQ(std::vector<float>(y, y + 3), (std::vector<float>{-63.5f, 0.5f, 64.f}));
}

TEST(DequantizeLinear, Int32WithoutZeroPoint) {
  Node node = make_node("DequantizeLinear", {"x", "s"});
  auto r = run_node_once(node, 10, {Tensor::FromVector<int32_t>({-70000, 0, 123456}, {3}),
                                    Tensor::Scalar<float>(0.25f)});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const float* y = r.value()[0].data<float>();
  EXPECT_EQ(std::vector<float>(y, y + 3), (std::vector<float>{-17500.f, 0.f, 30864.f}));
}

TEST(DequantizeLinear, PerAxisNegativeAxis) {
  Node node = make_node("DequantizeLinear", {"x", "s", "z"});
  set_int(node, "axis", -1);
  Tensor x = Tensor::FromVector<uint8_t>({10, 20, 30, 40, 50, 60}, {2, 3});
  auto r = run_node_once(node, 13, {x, floats({1.f, 2.f, 4.f}, {3}), Tensor::FromVector<uint8_t>({0, 10, 20}, {3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const float* y = r.value()[0].data<float>();
  EXPECT_EQ(std::vector<float>(y, y + 6), (std::vector<float>{10.f, 20.f, 40.f, 40.f, 80.f, 160.f}));
}

TEST(DequantizeLinear, RejectsZeroPointOfAnotherType) {
  Node node = make_node("DequantizeLinear", {"x", "s", "z"});
  auto r = run_node_once(node, 13, {Tensor::FromVector<uint8_t>({1}, {1}), Tensor::Scalar<float>(1.f),
                                    Tensor::Scalar<int8_t>(0)});
  EXPECT_FALSE(r.ok());
}

// ---- DynamicQuantizeLinear --------------------------------------------------------

struct DynRef {
  float scale;
  int zp;
  std::vector<int> y;
};

// The spec's function body in float32.
DynRef dynamic_ref(const std::vector<float>& x) {
  float mn = 0.f, mx = 0.f;
  for (float v : x) {
    mn = std::min(mn, v);
    mx = std::max(mx, v);
  }
  DynRef r;
  r.scale = (mx - mn) / 255.f;
  float z = 0.f - mn / r.scale;
  z = std::min(255.f, std::max(0.f, z));
  r.zp = static_cast<int>(std::nearbyint(z));
  for (float v : x) r.y.push_back(requant_ref(v / r.scale, r.zp, DType::kUInt8));
  return r;
}

TEST(DynamicQuantizeLinear, MatchesTheSpecFormula) {
  std::mt19937 rng(3);
  ThreadPool pool(2);
  for (auto [lo, hi, n] : std::vector<std::tuple<float, float, int>>{
           {-3.f, 2.f, 6}, {1.f, 9.f, 37}, {-9.f, -1.f, 100}, {-0.7f, 5.3f, 70001}}) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> xv(static_cast<size_t>(n));
    for (float& v : xv) v = d(rng);
    Node node = make_node("DynamicQuantizeLinear", {"x"}, {"y", "ys", "yz"});
    auto r = run_node_once(node, 11, {floats(xv, {n})}, &pool);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const DynRef want = dynamic_ref(xv);
    EXPECT_EQ(*r.value()[1].data<float>(), want.scale);
    EXPECT_EQ(static_cast<int>(*r.value()[2].data<uint8_t>()), want.zp);
    EXPECT_EQ(as_ints<uint8_t>(r.value()[0]), want.y);
  }
}

TEST(DynamicQuantizeLinear, AllZeroInputHasScaleZero) {
  Node node = make_node("DynamicQuantizeLinear", {"x"}, {"y", "ys", "yz"});
  auto r = run_node_once(node, 11, {floats({0.f, 0.f, 0.f}, {3})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r.value()[1].data<float>(), 0.f);
  EXPECT_EQ(*r.value()[2].data<uint8_t>(), 0);
  EXPECT_EQ(as_ints<uint8_t>(r.value()[0]), (std::vector<int>{0, 0, 0}));
}

TEST(DynamicQuantizeLinear, InfersScalarScaleAndZeroPoint) {
  const OpSchema* s = OpRegistry::instance().find("", "DynamicQuantizeLinear");
  ASSERT_NE(s, nullptr);
  Node node = make_node("DynamicQuantizeLinear", {"x"}, {"y", "ys", "yz"});
  InferContext ctx(node, 11, {{DType::kFloat32, Shape({Dim::Symbol("n"), Dim(4)})}}, {});
  ASSERT_TRUE(s->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[0].shape.str(), "[n,4]");
  EXPECT_EQ(ctx.outputs()[1].shape.str(), "[]");
  EXPECT_EQ(ctx.outputs()[2].dtype, DType::kUInt8);
}

// ---- Integer matmul -----------------------------------------------------------------

// acc[b, i, j] = sum_k (A - za)(B - zb) with numpy broadcasting of batch dims;
// za/zb given per row of every A matrix / per column of every B matrix.
struct MatRef {
  Dims dims;
  std::vector<int64_t> acc;
  std::vector<int64_t> a_mat, b_mat;  // matrix index of A and B for every batch item
};

MatRef matmul_ref(const Tensor& a, const Tensor& b, const std::vector<int>& za, const std::vector<int>& zb) {
  Dims ad = a.dims(), bd = b.dims();
  const int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
  Dims ab(ad.begin(), ad.end() - 2), bb(bd.begin(), bd.end() - 2), batch;
  EXPECT_TRUE(broadcast_dims(ab, bb, &batch));
  auto as = broadcast_strides(ab, batch), bs = broadcast_strides(bb, batch);
  MatRef r;
  r.dims = batch;
  r.dims.push_back(m);
  r.dims.push_back(n);
  const int64_t count = numel(batch);
  for (int64_t t = 0; t < count; ++t) {
    int64_t rem = t, ai = 0, bi = 0;
    for (size_t i = batch.size(); i-- > 0;) {
      ai += rem % batch[i] * as[i];
      bi += rem % batch[i] * bs[i];
      rem /= batch[i];
    }
    r.a_mat.push_back(ai);
    r.b_mat.push_back(bi);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        int64_t s = 0;
        for (int64_t p = 0; p < k; ++p) {
          s += (value(a, (ai * m + i) * k + p) - za[static_cast<size_t>(ai * m + i) % za.size()]) *
               (value(b, (bi * k + p) * n + j) - zb[static_cast<size_t>(bi * n + j) % zb.size()]);
        }
        r.acc.push_back(s);
      }
    }
  }
  return r;
}

std::vector<int> ints_of(const Tensor& t) {
  std::vector<int> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(static_cast<int>(value(t, i)));
  return v;
}

struct MatCase {
  Dims a, b, za, zb;
  DType at, bt;
};

TEST(MatMulInteger, MatchesReferenceForEveryZeroPointLayout) {
  std::mt19937 rng(4);
  ThreadPool pool(2);
  const std::vector<MatCase> cases = {
      {{4, 3}, {3, 2}, {}, {}, DType::kUInt8, DType::kUInt8},
      {{5, 7}, {7, 9}, {1}, {1}, DType::kUInt8, DType::kInt8},
      {{37, 45}, {45, 70}, {37}, {70}, DType::kInt8, DType::kUInt8},
      {{2, 3, 9, 17}, {17, 33}, {2, 3, 9, 1}, {33}, DType::kInt8, DType::kInt8},
      {{3, 9, 16}, {2, 1, 16, 40}, {9}, {2, 1, 1, 40}, DType::kUInt8, DType::kInt8},
      {{130, 301}, {301, 67}, {}, {67}, DType::kUInt8, DType::kInt8},
  };
  for (const MatCase& c : cases) {
    for (bool constants : {false, true}) {
      Tensor a = random_int8(c.at, c.a, rng), b = random_int8(c.bt, c.b, rng);
      Tensor za = c.za.empty() ? Tensor() : random_zp(c.at, c.za, rng);
      Tensor zb = c.zb.empty() ? Tensor() : random_zp(c.bt, c.zb, rng);
      std::vector<int> zav = za.defined() ? ints_of(za) : std::vector<int>{0};
      std::vector<int> zbv = zb.defined() ? ints_of(zb) : std::vector<int>{0};
      Node node = make_node("MatMulInteger", {"a", "b", za.defined() ? "za" : "", zb.defined() ? "zb" : ""});
      auto r = run_schema(quant::matmul_integer_schema(), node, {a, b, za, zb}, constants, &pool);
      ASSERT_TRUE(r.ok()) << r.status().message();
      const MatRef want = matmul_ref(a, b, zav, zbv);
      const Tensor& y = r.value()[0];
      ASSERT_EQ(y.dtype(), DType::kInt32);
      ASSERT_EQ(y.dims(), want.dims);
      for (int64_t i = 0; i < y.numel(); ++i) {
        ASSERT_EQ(y.data<int32_t>()[i], want.acc[static_cast<size_t>(i)]) << dims_str(c.a) << " element " << i;
      }
    }
  }
}

// Operands and zero points at the ends of their ranges, over sums long enough
// that a 16-bit intermediate or a saturating step would show, for every pair of
// signednesses (the kQuads layout offsets both operands; quantize_gemm.h).
Tensor extreme_int8(DType dt, Dims dims, std::mt19937& rng) {
  Tensor t(dt, std::move(dims));
  std::bernoulli_distribution high(0.5);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const bool h = high(rng);
    if (dt == DType::kUInt8) {
      t.data<uint8_t>()[i] = h ? 255 : 0;
    } else {
      t.data<int8_t>()[i] = static_cast<int8_t>(h ? 127 : -128);
    }
  }
  return t;
}

TEST(MatMulInteger, ExtremeValuesOverLongSumsAreExactForEverySignedness) {
  std::mt19937 rng(40);
  ThreadPool pool(2);
  for (DType at : {DType::kUInt8, DType::kInt8}) {
    for (DType bt : {DType::kUInt8, DType::kInt8}) {
      for (bool constants : {false, true}) {
        Tensor a = extreme_int8(at, {9, 1027}, rng), b = extreme_int8(bt, {1027, 35}, rng);
        Tensor za = extreme_int8(at, {9}, rng), zb = extreme_int8(bt, {35}, rng);
        Node node = make_node("MatMulInteger", {"a", "b", "za", "zb"});
        auto r = run_schema(quant::matmul_integer_schema(), node, {a, b, za, zb}, constants, &pool);
        ASSERT_TRUE(r.ok()) << r.status().message();
        const MatRef want = matmul_ref(a, b, ints_of(za), ints_of(zb));
        const Tensor& y = r.value()[0];
        for (int64_t i = 0; i < y.numel(); ++i) {
          ASSERT_EQ(y.data<int32_t>()[i], want.acc[static_cast<size_t>(i)])
              << dtype_name(at) << " x " << dtype_name(bt) << " element " << i;
        }
      }
    }
  }
}

TEST(MatMulInteger, OneDimensionalOperands) {
  std::mt19937 rng(5);
  Tensor a = random_int8(DType::kUInt8, {9}, rng), b = random_int8(DType::kInt8, {9, 4}, rng);
  Node node = make_node("MatMulInteger", {"a", "b"});
  auto r = run_schema(quant::matmul_integer_schema(), node, {a, b}, false, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r.value()[0].dims(), (Dims{4}));
  const MatRef want = matmul_ref(a.reshaped({1, 9}), b, {0}, {0});
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(r.value()[0].data<int32_t>()[i], want.acc[static_cast<size_t>(i)]);
}

TEST(MatMulInteger, EmptyInnerDimensionGivesZeros) {
  Node node = make_node("MatMulInteger", {"a", "b", "za"});
  for (bool constants : {false, true}) {
    auto r = run_schema(quant::matmul_integer_schema(), node,
                        {Tensor(DType::kUInt8, {3, 0}), Tensor(DType::kInt8, {0, 4}), Tensor::Scalar<uint8_t>(7)},
                        constants, nullptr);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(ints_of(r.value()[0]), std::vector<int>(12, 0));
  }
  Node q = make_node("QLinearMatMul", {"a", "sa", "za", "b", "sb", "zb", "ys", "yz"});
  auto r = run_schema(quant::qlinear_matmul_schema(), q,
                      {Tensor(DType::kUInt8, {2, 0}), Tensor::Scalar<float>(1.f), Tensor::Scalar<uint8_t>(3),
                       Tensor(DType::kUInt8, {0, 3}), Tensor::Scalar<float>(1.f), Tensor::Scalar<uint8_t>(3),
                       Tensor::Scalar<float>(1.f), Tensor::Scalar<uint8_t>(9)},
                      false, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(ints_of(r.value()[0]), std::vector<int>(6, 9));
}

TEST(MatMulInteger, RejectsZeroPointWithWrongLength) {
  std::mt19937 rng(6);
  Node node = make_node("MatMulInteger", {"a", "b", "za"});
  auto r = run_schema(quant::matmul_integer_schema(), node,
                      {random_int8(DType::kUInt8, {4, 3}, rng), random_int8(DType::kUInt8, {3, 2}, rng),
                       random_zp(DType::kUInt8, {3}, rng)},
                      false, nullptr);
  EXPECT_FALSE(r.ok());
}

TEST(QLinearMatMul, MatchesReferenceWithPerRowAndPerColumnScales) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> sd(0.001f, 0.02f);
  ThreadPool pool(2);
  const std::vector<MatCase> cases = {
      {{2, 4}, {4, 3}, {1}, {1}, DType::kUInt8, DType::kUInt8},
      {{2, 2, 4}, {2, 4, 3}, {}, {}, DType::kUInt8, DType::kInt8},
      {{33, 70}, {70, 65}, {33}, {65}, DType::kInt8, DType::kInt8},
      {{3, 5, 19}, {19, 40}, {3, 5, 1}, {40}, DType::kUInt8, DType::kInt8},
      {{96, 300}, {300, 130}, {}, {}, DType::kUInt8, DType::kInt8},
  };
  for (const MatCase& c : cases) {
    for (DType yt : {DType::kUInt8, DType::kInt8}) {
      for (bool constants : {false, true}) {
        Tensor a = random_int8(c.at, c.a, rng), b = random_int8(c.bt, c.b, rng);
        Dims za_dims = c.za.empty() ? Dims{} : c.za, zb_dims = c.zb.empty() ? Dims{} : c.zb;
        Tensor za = random_zp(c.at, za_dims, rng), zb = random_zp(c.bt, zb_dims, rng);
        Tensor sa(DType::kFloat32, za_dims), sb(DType::kFloat32, zb_dims);
        for (int64_t i = 0; i < sa.numel(); ++i) sa.data<float>()[i] = sd(rng);
        for (int64_t i = 0; i < sb.numel(); ++i) sb.data<float>()[i] = sd(rng);
        const float ys = 0.05f;
        Tensor yz = random_zp(yt, {}, rng);
        Node node = make_node("QLinearMatMul", {"a", "sa", "za", "b", "sb", "zb", "ys", "yz"});
        auto r = run_schema(quant::qlinear_matmul_schema(), node,
                            {a, sa, za, b, sb, zb, Tensor::Scalar<float>(ys), yz}, constants, &pool);
        ASSERT_TRUE(r.ok()) << r.status().message();
        const MatRef want = matmul_ref(a, b, ints_of(za), ints_of(zb));
        const Tensor& y = r.value()[0];
        ASSERT_EQ(y.dtype(), yt);
        ASSERT_EQ(y.dims(), want.dims);
        const int64_t m = want.dims[want.dims.size() - 2], n = want.dims.back();
        for (int64_t i = 0; i < y.numel(); ++i) {
          const int64_t t = i / (m * n), row = (i / n) % m, col = i % n;
          const float fa = sa.data<float>()[static_cast<size_t>(want.a_mat[static_cast<size_t>(t)] * m + row) %
                                            static_cast<size_t>(sa.numel())];
          const float fb = sb.data<float>()[static_cast<size_t>(want.b_mat[static_cast<size_t>(t)] * n + col) %
                                            static_cast<size_t>(sb.numel())];
          const float mult = fa * fb / ys;
          const int expect = requant_ref(static_cast<float>(want.acc[static_cast<size_t>(i)]) * mult,
                                         static_cast<int>(value(yz, 0)), yt);
          ASSERT_EQ(value(y, i), expect) << dims_str(c.a) << " element " << i;
        }
      }
    }
  }
}

// ---- Integer convolution ----------------------------------------------------------

struct ConvCase {
  Dims x, w;
  int64_t group;
  std::vector<int64_t> strides, dilations, pads;
  std::string auto_pad;
  DType xt, wt;
  bool per_channel;
};

// acc[n, oc, out...] for zero-point-adjusted operands; padding contributes 0.
std::vector<int64_t> conv_ref(const Tensor& x, const Tensor& w, int64_t group, const std::vector<int64_t>& strides,
                              const std::vector<int64_t>& dil, const std::vector<int64_t>& pads, int xz,
                              const std::vector<int>& wz, const Dims& out) {
  const size_t r = x.dims().size() - 2;
  const int64_t n = x.dim(0), c = x.dim(1), m = w.dim(0), cg = c / group, mg = m / group;
  Dims in(x.dims().begin() + 2, x.dims().end()), ks(w.dims().begin() + 2, w.dims().end());
  Dims os(out.begin() + 2, out.end());
  const int64_t isz = numel(in), osz = numel(os), ksz = numel(ks);
  std::vector<int64_t> y(static_cast<size_t>(n * m * osz));
  std::vector<int64_t> oi(r), ki(r);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t oc = 0; oc < m; ++oc) {
      const int64_t g = oc / mg;
      for (int64_t o = 0; o < osz; ++o) {
        int64_t rem = o;
        for (size_t i = r; i-- > 0;) {
          oi[i] = rem % os[i];
          rem /= os[i];
        }
        int64_t s = 0;
        for (int64_t ci = 0; ci < cg; ++ci) {
          for (int64_t kk = 0; kk < ksz; ++kk) {
            int64_t kr = kk, off = 0;
            bool ok = true;
            for (size_t i = r; i-- > 0;) {
              ki[i] = kr % ks[i];
              kr /= ks[i];
            }
            for (size_t i = 0; i < r; ++i) {
              const int64_t p = oi[i] * strides[i] - pads[i] + ki[i] * dil[i];
              ok = ok && p >= 0 && p < in[i];
              off = off * in[i] + p;
            }
            if (!ok) continue;
            const int64_t xv = value(x, (b * c + g * cg + ci) * isz + off) - xz;
            const int64_t wv = value(w, (oc * cg + ci) * ksz + kk) - wz[static_cast<size_t>(oc) % wz.size()];
            s += xv * wv;
          }
        }
        y[static_cast<size_t>((b * m + oc) * osz + o)] = s;
      }
    }
  }
  return y;
}

Node conv_node(const std::string& op, const ConvCase& c, std::vector<std::string> inputs) {
  Node node = make_node(op, std::move(inputs));
  if (c.group != 1) set_int(node, "group", c.group);
  if (!c.strides.empty()) set_ints(node, "strides", c.strides);
  if (!c.dilations.empty()) set_ints(node, "dilations", c.dilations);
  if (!c.pads.empty()) set_ints(node, "pads", c.pads);
  if (!c.auto_pad.empty()) set_string(node, "auto_pad", c.auto_pad);
  return node;
}

// Pads actually applied (begin values) from the output size, for the reference.
std::vector<int64_t> begin_pads(const ConvCase& c, const Dims& out) {
  const size_t r = c.x.size() - 2;
  std::vector<int64_t> p(r, 0);
  for (size_t i = 0; i < r; ++i) {
    const int64_t s = c.strides.empty() ? 1 : c.strides[i], d = c.dilations.empty() ? 1 : c.dilations[i];
    if (!c.pads.empty()) {
      p[i] = c.pads[i];
    } else if (c.auto_pad == "SAME_UPPER" || c.auto_pad == "SAME_LOWER") {
      const int64_t total = std::max<int64_t>(0, (out[i + 2] - 1) * s + (c.w[i + 2] - 1) * d + 1 - c.x[i + 2]);
      p[i] = c.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    }
  }
  return p;
}

std::vector<int64_t> ones_if_empty(const std::vector<int64_t>& v, size_t r) {
  return v.empty() ? std::vector<int64_t>(r, 1) : v;
}

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {{1, 1, 3, 3}, {1, 1, 2, 2}, 1, {}, {}, {}, "", DType::kUInt8, DType::kUInt8, false},
      {{1, 1, 3, 3}, {1, 1, 2, 2}, 1, {}, {}, {1, 1, 1, 1}, "", DType::kUInt8, DType::kUInt8, false},
      {{2, 6, 9, 11}, {8, 3, 3, 3}, 2, {2, 1}, {1, 2}, {1, 0, 2, 1}, "", DType::kUInt8, DType::kInt8, true},
      {{1, 16, 12, 12}, {40, 16, 1, 1}, 1, {}, {}, {}, "", DType::kUInt8, DType::kInt8, true},
      {{1, 8, 10, 10}, {8, 1, 3, 3}, 8, {}, {}, {1, 1, 1, 1}, "", DType::kInt8, DType::kInt8, true},
      {{2, 3, 17}, {5, 3, 4}, 1, {3}, {}, {}, "SAME_UPPER", DType::kInt8, DType::kUInt8, false},
      {{1, 4, 5, 6, 7}, {6, 2, 2, 3, 2}, 2, {1, 2, 1}, {2, 1, 1}, {1, 0, 1, 0, 1, 1}, "", DType::kUInt8,
       DType::kInt8, true},
      {{1, 32, 20, 20}, {64, 32, 3, 3}, 1, {}, {}, {}, "SAME_LOWER", DType::kUInt8, DType::kInt8, true},
      {{1, 3, 15}, {6, 1, 3}, 3, {2}, {2}, {2, 1}, "", DType::kUInt8, DType::kInt8, true},
      {{2, 4, 9, 8}, {4, 1, 3, 2}, 4, {2, 2}, {}, {}, "SAME_UPPER", DType::kUInt8, DType::kUInt8, false},
      {{1, 2, 4, 5, 6}, {2, 1, 2, 2, 2}, 2, {}, {}, {1, 1, 0, 0, 1, 1}, "", DType::kInt8, DType::kInt8, true},
      // Depthwise with a column stride of 3 and dilation 2: the padded rows' three phases.
      {{1, 3, 11, 40}, {6, 1, 3, 5}, 3, {2, 3}, {1, 2}, {2, 1, 2, 3}, "", DType::kUInt8, DType::kInt8, true},
  };
  return cases;
}

TEST(ConvInteger, MatchesReferenceAcrossGeometries) {
  std::mt19937 rng(8);
  ThreadPool pool(2);
  for (const ConvCase& c : conv_cases()) {
    for (bool constants : {false, true}) {
      Tensor x = random_int8(c.xt, c.x, rng), w = random_int8(c.wt, c.w, rng);
      Tensor xz = random_zp(c.xt, {}, rng);
      Tensor wz = random_zp(c.wt, c.per_channel ? Dims{c.w[0]} : Dims{}, rng);
      Node node = conv_node("ConvInteger", c, {"x", "w", "xz", "wz"});
      auto r = run_schema(quant::conv_integer_schema(), node, {x, w, xz, wz}, constants, &pool);
      ASSERT_TRUE(r.ok()) << r.status().message();
      const Tensor& y = r.value()[0];
      ASSERT_EQ(y.dtype(), DType::kInt32);
      const size_t rank = c.x.size() - 2;
      const auto want = conv_ref(x, w, c.group, ones_if_empty(c.strides, rank), ones_if_empty(c.dilations, rank),
                                 begin_pads(c, Dims(y.dims().begin(), y.dims().end())), static_cast<int>(value(xz, 0)),
                                 ints_of(wz), y.dims());
      for (int64_t i = 0; i < y.numel(); ++i) {
        ASSERT_EQ(y.data<int32_t>()[i], want[static_cast<size_t>(i)]) << dims_str(c.x) << " element " << i;
      }
    }
  }
}

TEST(ConvInteger, ExtremeValuesAreExactForEverySignedness) {
  std::mt19937 rng(41);
  ThreadPool pool(2);
  for (DType xt : {DType::kUInt8, DType::kInt8}) {
    for (DType wt : {DType::kUInt8, DType::kInt8}) {
      // 130 input channels x 3 x 3 = 1170 terms per output, with padding.
      const ConvCase c{{1, 130, 6, 7}, {11, 130, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, "", xt, wt, true};
      Tensor x = extreme_int8(xt, c.x, rng), w = extreme_int8(wt, c.w, rng);
      Tensor xz = extreme_int8(xt, {}, rng), wz = extreme_int8(wt, {c.w[0]}, rng);
      Node node = conv_node("ConvInteger", c, {"x", "w", "xz", "wz"});
      auto r = run_schema(quant::conv_integer_schema(), node, {x, w, xz, wz}, true, &pool);
      ASSERT_TRUE(r.ok()) << r.status().message();
      const Tensor& y = r.value()[0];
      const auto want = conv_ref(x, w, 1, {1, 1}, {1, 1}, {1, 1}, static_cast<int>(value(xz, 0)), ints_of(wz),
                                 y.dims());
      for (int64_t i = 0; i < y.numel(); ++i) {
        ASSERT_EQ(y.data<int32_t>()[i], want[static_cast<size_t>(i)])
            << dtype_name(xt) << " x " << dtype_name(wt) << " element " << i;
      }
    }
  }
}

TEST(ConvInteger, ZeroPointsAreOptional) {
  Node node = make_node("ConvInteger", {"x", "w"});
  auto r = run_schema(quant::conv_integer_schema(), node,
                      {Tensor::FromVector<uint8_t>({2, 3, 4, 5, 6, 7, 8, 9, 10}, {1, 1, 3, 3}),
                       Tensor::FromVector<uint8_t>({1, 1, 1, 1}, {1, 1, 2, 2})},
                      false, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(ints_of(r.value()[0]), (std::vector<int>{16, 20, 28, 32}));
}

TEST(QLinearConv, MatchesReferenceWithBiasAndPerChannelScales) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> sd(0.001f, 0.01f);
  std::uniform_int_distribution<int32_t> bd(-5000, 5000);
  ThreadPool pool(2);
  for (const ConvCase& c : conv_cases()) {
    for (DType yt : {DType::kUInt8, DType::kInt8}) {
      for (bool with_bias : {false, true}) {
        Tensor x = random_int8(c.xt, c.x, rng), w = random_int8(c.wt, c.w, rng);
        Tensor xz = random_zp(c.xt, {}, rng), yz = random_zp(yt, {}, rng);
        const Dims wq = c.per_channel ? Dims{c.w[0]} : Dims{};
        Tensor wz = random_zp(c.wt, wq, rng), ws(DType::kFloat32, wq);
        for (int64_t i = 0; i < ws.numel(); ++i) ws.data<float>()[i] = sd(rng);
        Tensor bias(DType::kInt32, {c.w[0]});
        for (int64_t i = 0; i < bias.numel(); ++i) bias.data<int32_t>()[i] = bd(rng);
        const float xs = 0.02f, ys = 0.3f;
        std::vector<std::string> names = {"x", "xs", "xz", "w", "ws", "wz", "ys", "yz"};
        std::vector<Tensor> ins = {x, Tensor::Scalar<float>(xs), xz, w, ws, wz, Tensor::Scalar<float>(ys), yz};
        if (with_bias) {
          names.push_back("b");
          ins.push_back(bias);
        }
        Node node = conv_node("QLinearConv", c, names);
        auto r = run_schema(quant::qlinear_conv_schema(), node, ins, with_bias, &pool);
        ASSERT_TRUE(r.ok()) << r.status().message();
        const Tensor& y = r.value()[0];
        ASSERT_EQ(y.dtype(), yt);
        const size_t rank = c.x.size() - 2;
        const auto acc = conv_ref(x, w, c.group, ones_if_empty(c.strides, rank), ones_if_empty(c.dilations, rank),
                                  begin_pads(c, y.dims()), static_cast<int>(value(xz, 0)), ints_of(wz), y.dims());
        const int64_t m = y.dim(1), osz = y.numel() / (y.dim(0) * m);
        for (int64_t i = 0; i < y.numel(); ++i) {
          const int64_t oc = (i / osz) % m;
          const int64_t a = acc[static_cast<size_t>(i)] + (with_bias ? bias.data<int32_t>()[oc] : 0);
          const float mult = xs * ws.data<float>()[ws.numel() == 1 ? 0 : oc] / ys;
          ASSERT_EQ(value(y, i), requant_ref(static_cast<float>(a) * mult, static_cast<int>(value(yz, 0)), yt))
              << dims_str(c.x) << " element " << i;
        }
      }
    }
  }
}

TEST(QLinearConv, InfersOutputShapeAndZeroPointType) {
  const OpSchema* s = OpRegistry::instance().find("", "QLinearConv");
  ASSERT_NE(s, nullptr);
  Node node = make_node("QLinearConv", {"x", "xs", "xz", "w", "ws", "wz", "ys", "yz"});
  set_ints(node, "pads", {1, 1, 1, 1});
  set_ints(node, "strides", {2, 2});
  const Shape scalar = Shape::FromDims({});
  InferContext ctx(node, 10,
                   {{DType::kUInt8, Shape({Dim::Symbol("n"), Dim(3), Dim(8), Dim()})},
                    {DType::kFloat32, scalar},
                    {DType::kUInt8, scalar},
                    {DType::kInt8, Shape::FromDims({16, 3, 3, 3})},
                    {DType::kFloat32, Shape::FromDims({16})},
                    {DType::kInt8, Shape::FromDims({16})},
                    {DType::kFloat32, scalar},
                    {DType::kInt8, scalar}},
                   {});
  ASSERT_TRUE(s->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[0].dtype, DType::kInt8);
  EXPECT_EQ(ctx.outputs()[0].shape.str(), "[n,16,4,?]");
}

}  // namespace
}  // namespace tessera
