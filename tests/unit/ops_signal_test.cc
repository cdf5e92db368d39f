#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <numbers>
#include <random>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"
#include "ops/op_registry.h"
#include "ops/signal_fft.h"
#include "ops/node_runner.h"
#include "util/thread_pool.h"
#include "unit/op_test_util.h"

namespace tessera {
namespace {

using testutil::set_int;

using cd = std::complex<double>;
constexpr double kPi = std::numbers::pi;

Node make_node(const std::string& op, std::vector<std::string> inputs) {
  Node n;
  n.name = "n";
  n.op_type = op;
  n.inputs = std::move(inputs);
  n.outputs = {"y"};
  return n;
}

std::vector<double> random_vec(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Naive DFT of n points (x zero-padded or cut to n).
std::vector<cd> naive_dft(const std::vector<cd>& x, int64_t n, bool inverse) {
  std::vector<cd> y(static_cast<size_t>(n));
  const double sign = inverse ? 1.0 : -1.0;
  for (int64_t k = 0; k < n; ++k) {
    cd s = 0;
    for (int64_t j = 0; j < n && j < static_cast<int64_t>(x.size()); ++j) {
      s += x[static_cast<size_t>(j)] * std::polar(1.0, sign * 2.0 * kPi * static_cast<double>((j * k) % n) /
                                                           static_cast<double>(n));
    }
    y[static_cast<size_t>(k)] = inverse ? s / static_cast<double>(n) : s;
  }
  return y;
}

Tensor run_one(const Node& node, const std::vector<Tensor>& inputs, int64_t opset = 17) {
  ThreadPool pool(2);
  auto out = run_node_once(node, opset, inputs, &pool);
  EXPECT_TRUE(out.ok()) << out.status().message();
  if (!out.ok()) return Tensor();
  return out.value()[0];
}

Status run_status(const Node& node, const std::vector<Tensor>& inputs) {
  auto out = run_node_once(node, 17, inputs);
  return out.status();
}

ValueInfo infer_one(const Node& node, std::vector<ValueInfo> in_info, std::vector<const Tensor*> values,
                    Status* status = nullptr) {
  const OpSchema* schema = OpRegistry::instance().find("", node.op_type);
  EXPECT_NE(schema, nullptr);
  if (values.size() < in_info.size()) values.resize(in_info.size(), nullptr);
  InferContext ctx(node, 17, std::move(in_info), std::move(values));
  Status st = schema->infer(ctx);
  if (status != nullptr) *status = st;
  if (!st.ok() || ctx.outputs().empty()) return ValueInfo();
  return ctx.outputs()[0];
}

// ---- FFT plans --------------------------------------------------------------------

TEST(SignalFft, EveryPlanKindMatchesTheNaiveDft) {
  for (int64_t n : {1, 2, 3, 5, 8, 12, 34, 63, 64, 65, 100, 121, 127, 128, 400, 1000, 1018, 1024}) {
    auto re = random_vec(static_cast<size_t>(n), 1), im = random_vec(static_cast<size_t>(n), 2);
    std::vector<cd> x(static_cast<size_t>(n));
    for (size_t i = 0; i < x.size(); ++i) x[i] = cd(re[i], im[i]);
    const auto ref = naive_dft(x, n, false);
    FftPlan plan(n);
    std::vector<cd> scratch(plan.scratch_size());
    plan.forward(x.data(), scratch.data());
    for (int64_t k = 0; k < n; ++k) {
      EXPECT_NEAR(std::abs(x[static_cast<size_t>(k)] - ref[static_cast<size_t>(k)]), 0.0, 1e-11 * static_cast<double>(n))
          << "n=" << n << " k=" << k;
    }
  }
}

// ---- DFT ----------------------------------------------------------------------------

// Reference for a real or complex input [outer, n, inner, comps] along axis 1.
std::vector<double> dft_reference(const std::vector<double>& x, int64_t outer, int64_t n, int64_t inner,
                                  int64_t comps, int64_t len, bool onesided, bool inverse) {
  const int64_t bins = onesided ? len / 2 + 1 : len;
  std::vector<double> y(static_cast<size_t>(outer * bins * inner * 2));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      std::vector<cd> line(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        const size_t at = static_cast<size_t>(((o * n + j) * inner + i) * comps);
        line[static_cast<size_t>(j)] = cd(x[at], comps == 2 ? x[at + 1] : 0.0);
      }
      const auto spec = naive_dft(line, len, inverse);
      for (int64_t k = 0; k < bins; ++k) {
        const size_t at = static_cast<size_t>(((o * bins + k) * inner + i) * 2);
        y[at] = spec[static_cast<size_t>(k)].real();
        y[at + 1] = spec[static_cast<size_t>(k)].imag();
      }
    }
  }
  return y;
}

void expect_close(const Tensor& t, const std::vector<double>& ref, double tol) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(ref.size()));
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_NEAR(t.as_double(static_cast<int64_t>(i)), ref[i], tol * (1.0 + std::abs(ref[i]))) << "at " << i;
  }
}

std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }
std::vector<double> round_float(const std::vector<double>& v) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = static_cast<float>(v[i]);
  return r;
}

TEST(Dft, RealInputAlongMiddleAxisWithOddLineCount) {
  // [3, 12, 5, 1]: 15 real lines (the pairing leaves one alone), axis 1.
  auto x = round_float(random_vec(3 * 12 * 5, 3));
  Node n = make_node("DFT", {"x"});
  Tensor y = run_one(n, {Tensor::FromVector(to_float(x), {3, 12, 5, 1})});
  EXPECT_EQ(y.dims(), (Dims{3, 12, 5, 2}));
  expect_close(y, dft_reference(x, 3, 12, 5, 1, 12, false, false), 1e-5);
}

TEST(Dft, OnesidedRealKeepsHalfThePlusOneBins) {
  auto x = round_float(random_vec(2 * 16, 4));
  Node n = make_node("DFT", {"x"});
  set_int(n, "onesided", 1);
  Tensor y = run_one(n, {Tensor::FromVector(to_float(x), {2, 16, 1})});
  EXPECT_EQ(y.dims(), (Dims{2, 9, 2}));
  expect_close(y, dft_reference(x, 2, 16, 1, 1, 16, true, false), 1e-5);
}

TEST(Dft, DftLengthZeroPadsAndTruncates) {
  auto x = round_float(random_vec(4 * 10, 5));
  Tensor xt = Tensor::FromVector(to_float(x), {4, 10, 1});
  for (int64_t len : {16, 7, 100}) {
    Node n = make_node("DFT", {"x", "len"});
    Tensor y = run_one(n, {xt, Tensor::Scalar<int64_t>(len)});
    EXPECT_EQ(y.dims(), (Dims{4, len, 2}));
    expect_close(y, dft_reference(x, 4, 10, 1, 1, len, false, false), 1e-5);
  }
  // An int32 one-element dft_length works as well.
  Node n = make_node("DFT", {"x", "len"});
  Tensor y = run_one(n, {xt, Tensor::FromVector(std::vector<int32_t>{12}, {1})});
  expect_close(y, dft_reference(x, 4, 10, 1, 1, 12, false, false), 1e-5);
}

TEST(Dft, ComplexInverseUndoesForwardInDouble) {
  auto x = random_vec(2 * 45 * 3 * 2, 6);
  Tensor xt = Tensor::FromVector(x, {2, 45, 3, 2});
  Node fwd = make_node("DFT", {"x"});
  Tensor spec = run_one(fwd, {xt});
  EXPECT_EQ(spec.dtype(), DType::kFloat64);
  expect_close(spec, dft_reference(x, 2, 45, 3, 2, 45, false, false), 1e-12);
  Node inv = make_node("DFT", {"x"});
  set_int(inv, "inverse", 1);
  Tensor back = run_one(inv, {spec});
  expect_close(back, x, 1e-12);
}

TEST(Dft, InverseOfRealInputMatchesReference) {
  auto x = random_vec(5 * 33, 7);
  Node n = make_node("DFT", {"x"});
  set_int(n, "inverse", 1);
  set_int(n, "axis", -2);  // the last signal dim
  Tensor y = run_one(n, {Tensor::FromVector(x, {5, 33, 1})});
  expect_close(y, dft_reference(x, 5, 33, 1, 1, 33, false, true), 1e-12);
}

TEST(Dft, LongNonPowerOfTwoUsesBluesteinAccurately) {
  auto x = random_vec(2 * 400 * 2, 8);
  Node n = make_node("DFT", {"x"});
  Tensor y = run_one(n, {Tensor::FromVector(x, {2, 400, 2})});
  expect_close(y, dft_reference(x, 2, 400, 1, 2, 400, false, false), 1e-10);
}

TEST(Dft, Float16InputComputesInDouble) {
  std::vector<Float16> x;
  std::vector<double> xd;
  for (double v : random_vec(8, 9)) {
    x.emplace_back(static_cast<float>(v));
    xd.push_back(static_cast<float>(x.back()));
  }
  Node n = make_node("DFT", {"x"});
  Tensor y = run_one(n, {Tensor::FromVector(x, {1, 8, 1})});
  EXPECT_EQ(y.dtype(), DType::kFloat16);
  expect_close(y, dft_reference(xd, 1, 8, 1, 1, 8, false, false), 2e-3);
}

TEST(Dft, InferenceKeepsSymbolicDimsAndChecksAxis) {
  Node n = make_node("DFT", {"x"});
  set_int(n, "onesided", 1);
  Shape in({Dim::Symbol("batch"), Dim(20), Dim(7), Dim(1)});
  ValueInfo out = infer_one(n, {{DType::kFloat32, in}}, {});
  ASSERT_TRUE(out.shape.rank_known);
  EXPECT_EQ(out.shape.str(), "[batch,11,7,2]");

  Node unknown_len = make_node("DFT", {"x", "len"});
  out = infer_one(unknown_len, {{DType::kFloat32, in}, {DType::kInt64, Shape::FromDims({})}}, {});
  EXPECT_EQ(out.shape.str(), "[batch,?,7,2]");

  Tensor len = Tensor::Scalar<int64_t>(32);
  out = infer_one(unknown_len, {{DType::kFloat32, in}, {DType::kInt64, Shape::FromDims({})}}, {nullptr, &len});
  EXPECT_EQ(out.shape.str(), "[batch,32,7,2]");

  Status st;
  Node last_axis = make_node("DFT", {"x"});
  set_int(last_axis, "axis", 3);
  infer_one(last_axis, {{DType::kFloat32, in}}, {}, &st);
  EXPECT_FALSE(st.ok());

  infer_one(n, {{DType::kFloat32, Shape::FromDims({1, 8, 3})}}, {}, &st);
  EXPECT_FALSE(st.ok()) << "a last dim of 3 is neither real nor complex";

  out = infer_one(n, {{DType::kFloat32, Shape::Unranked()}}, {}, &st);
  EXPECT_TRUE(st.ok());
  EXPECT_FALSE(out.shape.rank_known);
}

TEST(Dft, KernelPreparedForOneLengthRunsAnother) {
  // The kernel is created for [1, 8, 1] (plan of 8 points) but runs on 12.
  Node n = make_node("DFT", {"x"});
  const OpSchema* schema = OpRegistry::instance().find("", "DFT");
  ASSERT_NE(schema, nullptr);
  KernelInit init{n, 17, {ValueInfo{DType::kFloat64, Shape::FromDims({1, 8, 1})}}, {nullptr}};
  auto kernel = create_kernel(*schema, init);
  ASSERT_TRUE(kernel.ok()) << kernel.status().message();
  auto x = random_vec(12, 13);
  Tensor xt = Tensor::FromVector(x, {1, 12, 1});
  Tensor y(DType::kFloat64, {1, 12, 2});
  ThreadPool pool(1);
  KernelContext ctx(n, {&xt}, {&y}, &pool, nullptr);
  ASSERT_TRUE(kernel.value()->run(ctx).ok());
  expect_close(y, dft_reference(x, 1, 12, 1, 1, 12, false, false), 1e-12);
}

TEST(Dft, RejectsNonPositiveLength) {
  Node n = make_node("DFT", {"x", "len"});
  Status st = run_status(n, {Tensor::FromVector(std::vector<float>(8, 1.f), {1, 8, 1}), Tensor::Scalar<int64_t>(0)});
  EXPECT_FALSE(st.ok());
}

// ---- STFT ---------------------------------------------------------------------------

std::vector<double> stft_reference(const std::vector<double>& x, int64_t batch, int64_t length, int64_t comps,
                                   int64_t step, const std::vector<double>& window, int64_t frame_length,
                                   bool onesided) {
  const int64_t frames = 1 + (length - frame_length) / step;
  const int64_t bins = onesided ? frame_length / 2 + 1 : frame_length;
  std::vector<double> y;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t f = 0; f < frames; ++f) {
      std::vector<cd> frame(static_cast<size_t>(frame_length));
      for (int64_t j = 0; j < frame_length; ++j) {
        const size_t at = static_cast<size_t>((b * length + f * step + j) * comps);
        const double w = window.empty() ? 1.0 : window[static_cast<size_t>(j)];
        frame[static_cast<size_t>(j)] = cd(x[at], comps == 2 ? x[at + 1] : 0.0) * w;
      }
      const auto spec = naive_dft(frame, frame_length, false);
      for (int64_t k = 0; k < bins; ++k) {
        y.push_back(spec[static_cast<size_t>(k)].real());
        y.push_back(spec[static_cast<size_t>(k)].imag());
      }
    }
  }
  return y;
}

TEST(Stft, RealSignalWithWindowIsOnesidedByDefault) {
  auto x = random_vec(2 * 300, 10);
  std::vector<double> w(50);
  for (size_t j = 0; j < w.size(); ++j) w[j] = 0.5 - 0.5 * std::cos(2 * kPi * static_cast<double>(j) / 50.0);
  Node n = make_node("STFT", {"x", "step", "w"});
  Tensor y = run_one(n, {Tensor::FromVector(x, {2, 300, 1}), Tensor::Scalar<int64_t>(20), Tensor::FromVector(w, {50})});
  // frames = 1 + (300 - 50) / 20 = 13, bins = 26.
  EXPECT_EQ(y.dims(), (Dims{2, 13, 26, 2}));
  expect_close(y, stft_reference(x, 2, 300, 1, 20, w, 50, true), 1e-12);
}

TEST(Stft, FrameLengthWithoutWindowAndTwoSidedOutput) {
  auto x = round_float(random_vec(128, 11));
  Node n = make_node("STFT", {"x", "step", "", "len"});
  set_int(n, "onesided", 0);
  Tensor y = run_one(n, {Tensor::FromVector(to_float(x), {1, 128, 1}), Tensor::Scalar<int32_t>(8), Tensor(),
                         Tensor::Scalar<int32_t>(16)});
  EXPECT_EQ(y.dims(), (Dims{1, 15, 16, 2}));
  expect_close(y, stft_reference(x, 1, 128, 1, 8, {}, 16, false), 1e-5);
}

TEST(Stft, ComplexSignal) {
  auto x = random_vec(3 * 70 * 2, 12);
  Node n = make_node("STFT", {"x", "step", "", "len"});
  set_int(n, "onesided", 0);
  Tensor y = run_one(n, {Tensor::FromVector(x, {3, 70, 2}), Tensor::Scalar<int64_t>(9), Tensor(),
                         Tensor::Scalar<int64_t>(24)});
  EXPECT_EQ(y.dims(), (Dims{3, 6, 24, 2}));  // 1 + (70 - 24) / 9 frames
  expect_close(y, stft_reference(x, 3, 70, 2, 9, {}, 24, false), 1e-12);
}

TEST(Stft, InferenceFromConstantsAndWindowShape) {
  Node n = make_node("STFT", {"x", "step", "w"});
  Tensor step = Tensor::Scalar<int64_t>(160);
  ValueInfo out = infer_one(n,
                            {{DType::kFloat32, Shape({Dim::Symbol("b"), Dim(16000), Dim(1)})},
                             {DType::kInt64, Shape::FromDims({})},
                             {DType::kFloat32, Shape::FromDims({400})}},
                            {nullptr, &step, nullptr});
  EXPECT_EQ(out.shape.str(), "[b,98,201,2]");
  // Unknown step: frames unknown, bins still known.
  out = infer_one(n,
                  {{DType::kFloat32, Shape({Dim::Symbol("b"), Dim(16000), Dim(1)})},
                   {DType::kInt64, Shape::FromDims({})},
                   {DType::kFloat32, Shape::FromDims({400})}},
                  {});
  EXPECT_EQ(out.shape.str(), "[b,?,201,2]");
  Status st;
  infer_one(n,
            {{DType::kFloat32, Shape::FromDims({1, 100, 1})},
             {DType::kInt64, Shape::FromDims({})},
             {DType::kFloat32, Shape::FromDims({400})}},
            {nullptr, &step, nullptr}, &st);
  EXPECT_FALSE(st.ok()) << "window longer than the signal";
}

// ---- windows -------------------------------------------------------------------------

std::vector<double> cosine_window(int64_t size, bool periodic, double a0, double a1, double a2) {
  const double period = static_cast<double>(periodic ? size : size - 1);
  std::vector<double> w(static_cast<size_t>(size));
  for (int64_t n = 0; n < size; ++n) {
    const double a = 2 * kPi * static_cast<double>(n) / period;
    w[static_cast<size_t>(n)] = a0 - a1 * std::cos(a) + a2 * std::cos(2 * a);
  }
  return w;
}

TEST(Windows, HannHammingBlackmanPeriodicAndSymmetric) {
  struct Case {
    const char* op;
    double a0, a1, a2;
  };
  for (const Case& c : {Case{"HannWindow", 0.5, 0.5, 0.0}, Case{"HammingWindow", 25.0 / 46, 21.0 / 46, 0.0},
                        Case{"BlackmanWindow", 0.42, 0.5, 0.08}}) {
    for (int periodic : {1, 0}) {
      Node n = make_node(c.op, {"size"});
      if (periodic == 0) set_int(n, "periodic", 0);
      Tensor y = run_one(n, {Tensor::Scalar<int32_t>(10)});
      EXPECT_EQ(y.dtype(), DType::kFloat32);
      EXPECT_EQ(y.dims(), (Dims{10}));
      expect_close(y, cosine_window(10, periodic != 0, c.a0, c.a1, c.a2), 1e-6);
    }
  }
}

TEST(Windows, OutputDatatypeAndEdgeSizes) {
  Node n = make_node("HannWindow", {"size"});
  set_int(n, "output_datatype", 11);
  Tensor y = run_one(n, {Tensor::Scalar<int64_t>(7)});
  EXPECT_EQ(y.dtype(), DType::kFloat64);
  expect_close(y, cosine_window(7, true, 0.5, 0.5, 0.0), 1e-15);

  Node ints = make_node("HannWindow", {"size"});
  set_int(ints, "output_datatype", 7);
  y = run_one(ints, {Tensor::Scalar<int64_t>(4)});
  EXPECT_EQ(y.dtype(), DType::kInt64);
  // [0, 0.5, 1, 0.5] truncated.
  EXPECT_EQ(y.to_int64_vector(), (std::vector<int64_t>{0, 0, 1, 0}));

  Node sym = make_node("BlackmanWindow", {"size"});
  set_int(sym, "periodic", 0);
  y = run_one(sym, {Tensor::Scalar<int64_t>(1)});
  ASSERT_EQ(y.numel(), 1);
  EXPECT_EQ(y.as_double(0), 1.0);
  y = run_one(sym, {Tensor::Scalar<int64_t>(0)});
  EXPECT_EQ(y.dims(), (Dims{0}));

  Node bad = make_node("HannWindow", {"size"});
  set_int(bad, "output_datatype", 9);  // bool
  Status st;
  infer_one(bad, {{DType::kInt64, Shape::FromDims({})}}, {}, &st);
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(run_status(n, {Tensor::Scalar<int64_t>(-3)}).ok());
}

TEST(Windows, UnknownSizeInfersOneUnknownDim) {
  Node n = make_node("HannWindow", {"size"});
  ValueInfo out = infer_one(n, {{DType::kInt64, Shape::FromDims({})}}, {});
  EXPECT_EQ(out.dtype, DType::kFloat32);
  EXPECT_EQ(out.shape.str(), "[?]");
}

// ---- MelWeightMatrix -------------------------------------------------------------------

TEST(MelWeightMatrix, MatchesTheOnnxExample) {
  Node n = make_node("MelWeightMatrix", {"mel", "dft", "sr", "lo", "hi"});
  Tensor y = run_one(n, {Tensor::Scalar<int32_t>(8), Tensor::Scalar<int32_t>(16), Tensor::Scalar<int32_t>(8192),
                         Tensor::Scalar<float>(0.f), Tensor::Scalar<float>(4096.f)});
  EXPECT_EQ(y.dims(), (Dims{9, 8}));
  std::vector<double> ref(72, 0.0);
  // Peaks at (row, col): (0,0) (0,1) (1,2) (1,3) (2,4) (3,5) (4,6) (5,7).
  for (auto [r, c] : std::vector<std::pair<int, int>>{{0, 0}, {0, 1}, {1, 2}, {1, 3}, {2, 4}, {3, 5}, {4, 6}, {5, 7}}) {
    ref[static_cast<size_t>(r * 8 + c)] = 1.0;
  }
  expect_close(y, ref, 0.0);
}

TEST(MelWeightMatrix, TrianglesRiseAndFallLinearly) {
  Node n = make_node("MelWeightMatrix", {"mel", "dft", "sr", "lo", "hi"});
  set_int(n, "output_datatype", 11);
  Tensor y = run_one(n, {Tensor::Scalar<int64_t>(4), Tensor::Scalar<int64_t>(512), Tensor::Scalar<int64_t>(16000),
                         Tensor::Scalar<double>(20.0), Tensor::Scalar<double>(8000.0)});
  ASSERT_EQ(y.dims(), (Dims{257, 4}));
  EXPECT_EQ(y.dtype(), DType::kFloat64);
  for (int64_t c = 0; c < 4; ++c) {
    double peak = 0;
    int64_t nonzero = 0;
    for (int64_t r = 0; r < 257; ++r) {
      const double v = y.as_double(r * 4 + c);
      EXPECT_GE(v, 0.0);
      EXPECT_LE(v, 1.0);
      peak = std::max(peak, v);
      nonzero += v > 0;
    }
    EXPECT_EQ(peak, 1.0) << "mel bin " << c;
    EXPECT_GT(nonzero, 2) << "mel bin " << c;
  }
}

TEST(MelWeightMatrix, InferenceFromValues) {
  Node n = make_node("MelWeightMatrix", {"mel", "dft", "sr", "lo", "hi"});
  Tensor mel = Tensor::Scalar<int64_t>(80), dft = Tensor::Scalar<int64_t>(400);
  std::vector<ValueInfo> info(5, ValueInfo{DType::kInt64, Shape::FromDims({})});
  ValueInfo out = infer_one(n, info, {&mel, &dft, nullptr, nullptr, nullptr});
  EXPECT_EQ(out.shape.str(), "[201,80]");
  out = infer_one(n, info, {&mel, nullptr, nullptr, nullptr, nullptr});
  EXPECT_EQ(out.shape.str(), "[?,80]");
}

}  // namespace
}  // namespace tessera
