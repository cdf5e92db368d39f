#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"
#include "ops/op_registry.h"
#include "ops/node_runner.h"
#include "util/thread_pool.h"
#include "unit/op_test_util.h"

namespace tessera {
namespace {

using testutil::set_int;
using testutil::set_ints;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Node make_node(const std::string& op, int num_inputs) {
  Node n;
  n.name = "r";
  n.op_type = op;
  for (int i = 0; i < num_inputs; ++i) n.inputs.push_back("x" + std::to_string(i));
  n.outputs = {"y"};
  return n;
}

Tensor run1(const Node& n, const std::vector<Tensor>& inputs, int64_t opset = 11, ThreadPool* pool = nullptr) {
  auto r = run_node_once(n, opset, inputs, pool);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return Tensor();
  return r.value()[0];
}

template <class T>
std::vector<T> values(const Tensor& t) {
  const T* p = t.data<T>();
  return std::vector<T>(p, p + t.numel());
}

std::vector<float> random_floats(size_t n, unsigned seed = 3) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Reference: reduce `x` of dims `d` over `axes` (all when empty) with f over
// doubles, returning the kept-dims-order result.
template <class F>
std::vector<double> naive_reduce(const std::vector<float>& x, const Dims& d, std::vector<int64_t> axes, double init,
                                 F f) {
  std::vector<bool> red(d.size(), axes.empty());
  for (int64_t a : axes) red[static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(d.size()) : a)] = true;
  Dims od;
  for (size_t i = 0; i < d.size(); ++i) od.push_back(red[i] ? 1 : d[i]);
  std::vector<double> out(static_cast<size_t>(numel(od)), init);
  for (int64_t i = 0; i < numel(d); ++i) {
    int64_t rem = i, o = 0, stride = 1;
    for (size_t k = d.size(); k-- > 0;) {
      int64_t idx = rem % d[k];
      rem /= d[k];
      if (!red[k]) o += idx * stride;
      stride *= od[k];
    }
    out[static_cast<size_t>(o)] = f(out[static_cast<size_t>(o)], static_cast<double>(x[static_cast<size_t>(i)]));
  }
  return out;
}

TEST(Reduce, SumMatchesNaiveForRowColumnAndMixedLayouts) {
  ThreadPool pool(2);
  struct Case {
    Dims d;
    std::vector<int64_t> axes;
  };
  const Case cases[] = {
      {{4, 1000}, {1}},        {{4, 1000}, {0}},      {{3, 5, 7}, {1}},     {{3, 5, 7}, {0, 2}},
      {{2, 3, 4, 5}, {1, 3}},  {{2, 3, 4, 5}, {}},    {{2, 3, 4, 5}, {-1}}, {{64, 768}, {-1}},
      {{7, 1, 9}, {1}},        {{1, 1}, {0, 1}},      {{5}, {0}},           {{3000, 3}, {0}},
      {{2, 2000, 33}, {1}},    {{33, 4, 5, 6}, {0, 2, 3}},
  };
  for (const Case& c : cases) {
    std::vector<float> xv = random_floats(static_cast<size_t>(numel(c.d)));
    Node n = make_node("ReduceSum", 1);
    set_ints(n, "axes", c.axes);
    Tensor y = run1(n, {Tensor::FromVector(xv, c.d)}, 11, &pool);
    auto ref = naive_reduce(xv, c.d, c.axes, 0.0, [](double a, double b) { return a + b; });
    ASSERT_EQ(y.numel(), static_cast<int64_t>(ref.size())) << dims_str(c.d);
    ASSERT_EQ(y.rank(), static_cast<int>(c.d.size()));  // keepdims defaults to 1
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_NEAR(y.data<float>()[i], ref[i], 1e-4 * (1 + std::fabs(ref[i]))) << dims_str(c.d) << " at " << i;
    }
  }
}

TEST(Reduce, AxesAttributeBefore13AndAxesInputFrom13) {
  std::vector<float> xv = {1, 2, 3, 4, 5, 6};
  Tensor x = Tensor::FromVector(xv, {2, 3});
  Node a = make_node("ReduceSum", 1);
  set_ints(a, "axes", {1});
  set_int(a, "keepdims", 0);
  Tensor ya = run1(a, {x}, 11);
  EXPECT_EQ(ya.dims(), (Dims{2}));
  EXPECT_EQ(values<float>(ya), (std::vector<float>{6, 15}));
  Node b = make_node("ReduceSum", 2);
  set_int(b, "keepdims", 0);
  Tensor yb = run1(b, {x, Tensor::FromVector<int64_t>({-2}, {1})}, 13);
  EXPECT_EQ(yb.dims(), (Dims{3}));
  EXPECT_EQ(values<float>(yb), (std::vector<float>{5, 7, 9}));
  // Empty axes input: all axes, or nothing with noop_with_empty_axes.
  Node c = make_node("ReduceSum", 2);
  Tensor yc = run1(c, {x, Tensor(DType::kInt64, {0})}, 13);
  EXPECT_EQ(yc.dims(), (Dims{1, 1}));
  EXPECT_EQ(values<float>(yc), (std::vector<float>{21}));
  set_int(c, "noop_with_empty_axes", 1);
  Tensor yn = run1(c, {x, Tensor(DType::kInt64, {0})}, 13);
  EXPECT_EQ(yn.dims(), (Dims{2, 3}));
  EXPECT_EQ(values<float>(yn), xv);
  Node d = make_node("ReduceSum", 1);
  Tensor yd = run1(d, {x}, 13);
  EXPECT_EQ(values<float>(yd), (std::vector<float>{21}));
}

TEST(Reduce, OutOfRangeAxisFailsInference) {
  Node n = make_node("ReduceMean", 1);
  set_ints(n, "axes", {2});
  auto r = run_node_once(n, 11, {Tensor(DType::kFloat32, {2, 3})});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("axis 2"), std::string::npos);
}

TEST(Reduce, InferenceWithUnknownAxesValueOrSymbolicDims) {
  Node n = make_node("ReduceSum", 2);
  Shape in({Dim::Symbol("b"), Dim(4), Dim(8)});
  InferContext ctx(n, 13, {ValueInfo{DType::kFloat32, in}, ValueInfo{DType::kInt64, Shape::FromDims({1})}}, {});
  ASSERT_TRUE(OpRegistry::instance().find("", "ReduceSum")->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[0].shape.str(), "[?,?,?]");
  Node m = make_node("ReduceMax", 1);
  set_ints(m, "axes", {1});
  set_int(m, "keepdims", 0);
  InferContext mctx(m, 13, {ValueInfo{DType::kFloat32, in}}, {});
  ASSERT_TRUE(OpRegistry::instance().find("", "ReduceMax")->infer(mctx).ok());
  EXPECT_EQ(mctx.outputs()[0].shape.str(), "[b,8]");
  const OpSchema* s = OpRegistry::instance().find("", "ReduceSum");
  EXPECT_EQ(s->shape_inputs, (std::vector<int>{1}));
}

TEST(Reduce, EveryKindMatchesItsDefinition) {
  ThreadPool pool(2);
  const Dims d = {3, 40, 5};
  std::vector<float> xv = random_floats(static_cast<size_t>(numel(d)), 11);
  for (float& v : xv) v = v * 0.6f + (v > 0 ? 0.2f : -0.2f);  // keep products and logs tame
  struct Case {
    const char* op;
    double init;
    double (*step)(double, double);
    double (*post)(double, double);  // (acc, count)
  };
  const Case cases[] = {
      {"ReduceMean", 0, [](double a, double b) { return a + b; }, [](double a, double n) { return a / n; }},
      {"ReduceMax", -INFINITY, [](double a, double b) { return std::max(a, b); }, [](double a, double) { return a; }},
      {"ReduceMin", INFINITY, [](double a, double b) { return std::min(a, b); }, [](double a, double) { return a; }},
      {"ReduceProd", 1, [](double a, double b) { return a * b; }, [](double a, double) { return a; }},
      {"ReduceL1", 0, [](double a, double b) { return a + std::fabs(b); }, [](double a, double) { return a; }},
      {"ReduceL2", 0, [](double a, double b) { return a + b * b; }, [](double a, double) { return std::sqrt(a); }},
      {"ReduceSumSquare", 0, [](double a, double b) { return a + b * b; }, [](double a, double) { return a; }},
      {"ReduceLogSumExp", 0, [](double a, double b) { return a + std::exp(b); },
       [](double a, double) { return std::log(a); }},
  };
  for (const std::vector<int64_t>& axes : {std::vector<int64_t>{1}, std::vector<int64_t>{2}, std::vector<int64_t>{0, 2}}) {
    for (const Case& c : cases) {
      Node n = make_node(c.op, 1);
      set_ints(n, "axes", axes);
      Tensor y = run1(n, {Tensor::FromVector(xv, d)}, 11, &pool);
      auto acc = naive_reduce(xv, d, axes, c.init, c.step);
      double count = 1;
      for (int64_t a : axes) count *= static_cast<double>(d[static_cast<size_t>(a)]);
      ASSERT_EQ(y.numel(), static_cast<int64_t>(acc.size()));
      for (size_t i = 0; i < acc.size(); ++i) {
        double r = c.post(acc[i], count);
        EXPECT_NEAR(y.data<float>()[i], r, 1e-5 * (1 + std::fabs(r))) << c.op << " axes " << axes[0] << " at " << i;
      }
    }
  }
  // ReduceLogSum on positive data.
  std::vector<float> pos(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) pos[i] = std::fabs(xv[i]);
  Node ls = make_node("ReduceLogSum", 1);
  set_ints(ls, "axes", {1});
  Tensor y = run1(ls, {Tensor::FromVector(pos, d)});
  auto acc = naive_reduce(pos, d, {1}, 0, [](double a, double b) { return a + b; });
  for (size_t i = 0; i < acc.size(); ++i) EXPECT_NEAR(y.data<float>()[i], std::log(acc[i]), 1e-5);
}

TEST(Reduce, LogSumExpIsStableForLargeValues) {
  Node n = make_node("ReduceLogSumExp", 1);
  set_int(n, "keepdims", 0);
  Tensor x = Tensor::FromVector<float>({1000.f, 1000.f, -kInf, -kInf, 5.f, kInf}, {3, 2});
  auto y = values<float>(run1(n, {x.reshaped({3, 2})}));
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0], kInf);
  Node m = make_node("ReduceLogSumExp", 1);
  set_ints(m, "axes", {1});
  set_int(m, "keepdims", 0);
  auto z = values<float>(run1(m, {x}));
  EXPECT_FLOAT_EQ(z[0], 1000.f + std::log(2.f));
  EXPECT_EQ(z[1], -kInf);
  EXPECT_EQ(z[2], kInf);
}

TEST(Reduce, MaxMinPropagateNaNAndHandleIntegers) {
  Node n = make_node("ReduceMax", 1);
  set_ints(n, "axes", {1});
  auto y = values<float>(run1(n, {Tensor::FromVector<float>({1.f, kNaN, 3.f, 4.f, 5.f, 6.f}, {2, 3})}));
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 6.f);
  Node m = make_node("ReduceMin", 1);
  set_ints(m, "axes", {0});
  set_int(m, "keepdims", 0);
  Tensor yi = run1(m, {Tensor::FromVector<int64_t>({5, -7, 3, 2, 9, -8}, {2, 3})});
  EXPECT_EQ(values<int64_t>(yi), (std::vector<int64_t>{2, -7, -8}));
  Node s = make_node("ReduceSum", 1);
  Tensor ys = run1(s, {Tensor::FromVector<int32_t>({2000000000, 2000000000}, {2})});
  EXPECT_EQ(values<int32_t>(ys), (std::vector<int32_t>{static_cast<int32_t>(4000000000u)}));  // wraps
  Node mean = make_node("ReduceMean", 1);
  EXPECT_EQ(values<int32_t>(run1(mean, {Tensor::FromVector<int32_t>({1, 2, 2, -9}, {4})})),
            (std::vector<int32_t>{-1}));
}

TEST(Reduce, EmptyReductionsGiveTheIdentity) {
  Tensor x(DType::kFloat32, {0, 3});
  auto reduce0 = [&](const char* op) {
    Node n = make_node(op, 1);
    set_ints(n, "axes", {0});
    set_int(n, "keepdims", 0);
    return values<float>(run1(n, {x}));
  };
  EXPECT_EQ(reduce0("ReduceSum"), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(reduce0("ReduceProd"), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(reduce0("ReduceMax"), (std::vector<float>{-kInf, -kInf, -kInf}));
  EXPECT_EQ(reduce0("ReduceMin"), (std::vector<float>{kInf, kInf, kInf}));
  EXPECT_EQ(reduce0("ReduceLogSumExp")[0], -kInf);
  EXPECT_TRUE(std::isnan(reduce0("ReduceMean")[0]));
  Node n = make_node("ReduceSum", 1);
  set_ints(n, "axes", {1});
  Tensor y = run1(n, {x});
  EXPECT_EQ(y.dims(), (Dims{0, 1}));
}

TEST(Reduce, HalfAndDoubleInputs) {
  Tensor xh(DType::kFloat16, {4});
  for (int i = 0; i < 4; ++i) xh.data<Float16>()[i] = Float16(0.5f * static_cast<float>(i + 1));
  Tensor yh = run1(make_node("ReduceSum", 1), {xh});
  EXPECT_EQ(yh.dtype(), DType::kFloat16);
  EXPECT_EQ(static_cast<float>(yh.data<Float16>()[0]), 5.f);
  Tensor yd = run1(make_node("ReduceMean", 1), {Tensor::FromVector<double>({0.1, 0.2, 0.3}, {3})});
  EXPECT_DOUBLE_EQ(yd.data<double>()[0], (0.1 + 0.2 + 0.3) / 3);
}

// ---- ArgMax / ArgMin ------------------------------------------------------

TEST(ArgReduce, FirstOrLastIndexAlongAnAxis) {
  Tensor x = Tensor::FromVector<float>({2, 2, 1, 5, 0, 5}, {2, 3});
  Node n = make_node("ArgMax", 1);
  set_int(n, "axis", 1);
  Tensor y = run1(n, {x});
  EXPECT_EQ(y.dtype(), DType::kInt64);
  EXPECT_EQ(y.dims(), (Dims{2, 1}));
  EXPECT_EQ(values<int64_t>(y), (std::vector<int64_t>{0, 0}));
  set_int(n, "select_last_index", 1);
  EXPECT_EQ(values<int64_t>(run1(n, {x}, 12)), (std::vector<int64_t>{1, 2}));
  Node m = make_node("ArgMin", 1);
  set_int(m, "keepdims", 0);
  Tensor ym = run1(m, {x});
  EXPECT_EQ(ym.dims(), (Dims{3}));
  EXPECT_EQ(values<int64_t>(ym), (std::vector<int64_t>{0, 1, 0}));
  Node neg = make_node("ArgMin", 1);
  set_int(neg, "axis", -1);
  set_int(neg, "keepdims", 0);
  EXPECT_EQ(values<int64_t>(run1(neg, {x})), (std::vector<int64_t>{2, 1}));
}

TEST(ArgReduce, InnerDimsNaNAndIntegers) {
  ThreadPool pool(2);
  const int64_t A = 3, N = 50, I = 700;
  std::vector<float> xv = random_floats(static_cast<size_t>(A * N * I), 5);
  Node n = make_node("ArgMax", 1);
  set_int(n, "axis", 1);
  set_int(n, "keepdims", 0);
  auto y = values<int64_t>(run1(n, {Tensor::FromVector(xv, {A, N, I})}, 11, &pool));
  for (int64_t a = 0; a < A; ++a) {
    for (int64_t i = 0; i < I; i += 13) {
      int64_t best = 0;
      for (int64_t k = 1; k < N; ++k) {
        if (xv[static_cast<size_t>((a * N + k) * I + i)] > xv[static_cast<size_t>((a * N + best) * I + i)]) best = k;
      }
      EXPECT_EQ(y[static_cast<size_t>(a * I + i)], best);
    }
  }
  Node m = make_node("ArgMax", 1);
  EXPECT_EQ(values<int64_t>(run1(m, {Tensor::FromVector<float>({1.f, kNaN, 3.f, kNaN}, {4})})),
            (std::vector<int64_t>{1}));
  EXPECT_EQ(values<int64_t>(run1(m, {Tensor::FromVector<uint8_t>({1, 200, 3}, {3})})), (std::vector<int64_t>{1}));
  Node bad = make_node("ArgMax", 1);
  set_int(bad, "axis", 2);
  EXPECT_FALSE(run_node_once(bad, 11, {Tensor(DType::kFloat32, {2, 3})}).ok());
}

}  // namespace
}  // namespace tessera
