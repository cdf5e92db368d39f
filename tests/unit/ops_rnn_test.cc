// RNN / GRU / LSTM against a direct transcription of the ONNX equations
// (double precision, one scalar at a time) and against values from the ONNX
// reference helpers.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ir/graph.h"
#include "ops/node_runner.h"
#include "ops/op_registry.h"
#include "unit/op_test_util.h"
#include "util/thread_pool.h"

namespace tessera {
namespace {

struct NodeBuilder : testutil::AttrSetters<NodeBuilder> {
  Node n;
  NodeBuilder(std::string op, std::vector<std::string> in, std::vector<std::string> out) {
    n.name = "n";
    n.op_type = std::move(op);
    n.inputs = std::move(in);
    n.outputs = std::move(out);
  }
};

Tensor random_tensor(Dims dims, std::mt19937& rng, float scale = 0.5f) {
  Tensor t(DType::kFloat32, std::move(dims));
  std::uniform_real_distribution<float> u(-scale, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

enum class Kind { kRnn, kGru, kLstm };

struct RefConfig {
  Kind kind = Kind::kLstm;
  int64_t T = 3, B = 2, I = 3, H = 4;
  int dirs = 1;
  bool reverse = false;
  int64_t layout = 0;
  bool bias = true, init = true, peep = false, lens = false, lbr = false;
  double clip = 0;
  Parallel* pool = nullptr;  // null: one thread
};

double clipv(double v, double c) { return c > 0 ? std::min(std::max(v, -c), c) : v; }

// Direct transcription of the ONNX equations. Returns {Y, Y_h, Y_c} flattened
// in the layout of the config.
std::vector<std::vector<double>> reference(const RefConfig& c, const Tensor& x, const Tensor& w, const Tensor& r,
                                           const Tensor* b, const std::vector<int64_t>& lens, const Tensor* h0,
                                           const Tensor* c0, const Tensor* p) {
  const int G = c.kind == Kind::kRnn ? 1 : c.kind == Kind::kGru ? 3 : 4;
  const int64_t T = c.T, B = c.B, I = c.I, H = c.H;
  const int D = c.dirs;
  std::vector<double> Y(static_cast<size_t>(T * D * B * H), 0.0), Yh(static_cast<size_t>(D * B * H), 0.0),
      Yc(static_cast<size_t>(D * B * H), 0.0);
  auto X = [&](int64_t t, int64_t bb, int64_t i) {
    return static_cast<double>(c.layout == 0 ? x.data<float>()[(t * B + bb) * I + i]
                                             : x.data<float>()[(bb * T + t) * I + i]);
  };
  auto S = [&](int d, int64_t bb, int64_t j) { return c.layout == 0 ? (d * B + bb) * H + j : (bb * D + d) * H + j; };
  auto Yi = [&](int64_t t, int d, int64_t bb, int64_t j) {
    return c.layout == 0 ? ((t * D + d) * B + bb) * H + j : ((bb * T + t) * D + d) * H + j;
  };
  for (int d = 0; d < D; ++d) {
    const bool rev = c.reverse || d == 1;
    const float* W = w.data<float>() + d * G * H * I;
    const float* R = r.data<float>() + d * G * H * H;
    const float* Bb = b ? b->data<float>() + d * 2 * G * H : nullptr;
    for (int64_t bb = 0; bb < B; ++bb) {
      std::vector<double> h(static_cast<size_t>(H)), cc(static_cast<size_t>(H));
      for (int64_t j = 0; j < H; ++j) {
        h[j] = h0 ? h0->data<float>()[S(d, bb, j)] : 0.0;
        cc[j] = c0 ? c0->data<float>()[S(d, bb, j)] : 0.0;
      }
      const int64_t L = lens.empty() ? T : lens[bb];
      for (int64_t s = 0; s < L; ++s) {
        const int64_t t = rev ? L - 1 - s : s;
        // pre[g*H+j] = x W^T + Wb (+ h R^T + Rb except GRU's h gate).
        auto xw = [&](int64_t row) {
          double v = Bb ? Bb[row] : 0.0;
          for (int64_t i = 0; i < I; ++i) v += X(t, bb, i) * W[row * I + i];
          return v;
        };
        auto hr = [&](int64_t row, const std::vector<double>& hv) {
          double v = Bb ? Bb[G * H + row] : 0.0;
          for (int64_t k = 0; k < H; ++k) v += hv[k] * R[row * H + k];
          return v;
        };
        std::vector<double> nh(static_cast<size_t>(H)), nc(static_cast<size_t>(H));
        if (c.kind == Kind::kRnn) {
          for (int64_t j = 0; j < H; ++j) nh[j] = std::tanh(clipv(xw(j) + hr(j, h), c.clip));
        } else if (c.kind == Kind::kGru) {
          std::vector<double> z(H), rr(H), rh(H);
          for (int64_t j = 0; j < H; ++j) {
            z[j] = sigmoid(clipv(xw(j) + hr(j, h), c.clip));
            rr[j] = sigmoid(clipv(xw(H + j) + hr(H + j, h), c.clip));
            rh[j] = rr[j] * h[j];
          }
          for (int64_t j = 0; j < H; ++j) {
            double pre = c.lbr ? xw(2 * H + j) + rr[j] * hr(2 * H + j, h) : xw(2 * H + j) + hr(2 * H + j, rh);
            double hc = std::tanh(clipv(pre, c.clip));
            nh[j] = (1 - z[j]) * hc + z[j] * h[j];
          }
        } else {
          const float* P = p ? p->data<float>() + d * 3 * H : nullptr;
          for (int64_t j = 0; j < H; ++j) {
            double ig = sigmoid(clipv(xw(j) + hr(j, h) + (P ? P[j] * cc[j] : 0), c.clip));
            double fg = sigmoid(clipv(xw(2 * H + j) + hr(2 * H + j, h) + (P ? P[2 * H + j] * cc[j] : 0), c.clip));
            double cg = std::tanh(clipv(xw(3 * H + j) + hr(3 * H + j, h), c.clip));
            nc[j] = fg * cc[j] + ig * cg;
            double og = sigmoid(clipv(xw(H + j) + hr(H + j, h) + (P ? P[H + j] * nc[j] : 0), c.clip));
            nh[j] = og * std::tanh(nc[j]);
          }
          cc = nc;
        }
        h = nh;
        for (int64_t j = 0; j < H; ++j) Y[Yi(t, d, bb, j)] = h[j];
      }
      for (int64_t j = 0; j < H; ++j) {
        Yh[S(d, bb, j)] = h[j];
        Yc[S(d, bb, j)] = cc[j];
      }
    }
  }
  return {Y, Yh, Yc};
}

void run_and_compare(const RefConfig& c) {
  std::mt19937 rng(42);
  const int G = c.kind == Kind::kRnn ? 1 : c.kind == Kind::kGru ? 3 : 4;
  const char* op = c.kind == Kind::kRnn ? "RNN" : c.kind == Kind::kGru ? "GRU" : "LSTM";
  Dims xd = c.layout == 0 ? Dims{c.T, c.B, c.I} : Dims{c.B, c.T, c.I};
  Dims sd = c.layout == 0 ? Dims{c.dirs, c.B, c.H} : Dims{c.B, c.dirs, c.H};
  Tensor x = random_tensor(xd, rng, 1.f);
  Tensor w = random_tensor({c.dirs, G * c.H, c.I}, rng);
  Tensor r = random_tensor({c.dirs, G * c.H, c.H}, rng);
  Tensor b = random_tensor({c.dirs, 2 * G * c.H}, rng);
  Tensor h0 = random_tensor(sd, rng);
  Tensor c0 = random_tensor(sd, rng);
  Tensor p = random_tensor({c.dirs, 3 * c.H}, rng);
  std::vector<int64_t> lens;
  Tensor lt;
  if (c.lens) {
    for (int64_t i = 0; i < c.B; ++i) lens.push_back(std::max<int64_t>(1, c.T - i));
    std::vector<int32_t> l32(lens.begin(), lens.end());
    lt = Tensor::FromVector<int32_t>(l32, {c.B});
  }
  std::vector<std::string> ins = {"x", "w", "r", c.bias ? "b" : "", c.lens ? "l" : "", c.init ? "h0" : ""};
  std::vector<Tensor> vals = {x, w, r, c.bias ? b : Tensor(), lt, c.init ? h0 : Tensor()};
  if (c.kind == Kind::kLstm) {
    ins.push_back(c.init ? "c0" : "");
    vals.push_back(c.init ? c0 : Tensor());
    ins.push_back(c.peep ? "p" : "");
    vals.push_back(c.peep ? p : Tensor());
  }
  std::vector<std::string> outs = {"y", "yh"};
  if (c.kind == Kind::kLstm) outs.push_back("yc");
  NodeBuilder nb(op, ins, outs);
  nb.i("hidden_size", c.H).i("layout", c.layout);
  if (c.dirs == 2) nb.s("direction", "bidirectional");
  if (c.reverse) nb.s("direction", "reverse");
  if (c.lbr) nb.i("linear_before_reset", 1);
  if (c.clip > 0) nb.f("clip", static_cast<float>(c.clip));
  auto res = run_node_once(nb.n, 14, vals, c.pool);
  ASSERT_TRUE(res.ok()) << res.status().message();
  auto ref = reference(c, x, w, r, c.bias ? &b : nullptr, lens, c.init ? &h0 : nullptr, c.init ? &c0 : nullptr,
                       c.peep ? &p : nullptr);
  for (size_t k = 0; k < outs.size(); ++k) {
    const Tensor& got = (*res)[k];
    ASSERT_EQ(static_cast<size_t>(got.numel()), ref[k].size()) << "output " << k;
    for (int64_t i = 0; i < got.numel(); ++i) {
      ASSERT_NEAR(got.data<float>()[i], ref[k][static_cast<size_t>(i)], 1e-5) << "output " << k << " elem " << i;
    }
  }
}

TEST(RnnOps, LstmForwardMatchesEquations) { run_and_compare({}); }

TEST(RnnOps, LstmBidirectionalWithPeepholesAndSequenceLengths) {
  RefConfig c;
  c.dirs = 2;
  c.peep = true;
  c.lens = true;
  c.B = 3;
  c.T = 4;
  run_and_compare(c);
}

TEST(RnnOps, LstmReverseBatchFirstLayoutWithClip) {
  RefConfig c;
  c.reverse = true;
  c.layout = 1;
  c.clip = 0.3;
  c.lens = true;
  run_and_compare(c);
}

TEST(RnnOps, LstmLargeUsesBlockedGemmPaths) {
  RefConfig c;
  c.T = 7;
  c.B = 9;
  c.I = 40;
  c.H = 70;
  c.dirs = 2;
  run_and_compare(c);
}

// On two threads a bidirectional layer with small steps runs its directions side by side, each with its own
// working memory, writing its own half of Y, Y_h and Y_c.
TEST(RnnOps, BidirectionalLayersOnTwoThreadsRunTheirDirectionsSideBySide) {
  ThreadPool pool(2);
  for (Kind kind : {Kind::kLstm, Kind::kGru, Kind::kRnn}) {
    for (int64_t layout : {0, 1}) {
      RefConfig c;
      c.kind = kind;
      c.dirs = 2;
      c.layout = layout;
      c.lens = true;
      c.peep = kind == Kind::kLstm;
      c.lbr = kind == Kind::kGru && layout == 1;
      c.B = 3;
      c.T = 5;
      c.pool = &pool;
      run_and_compare(c);
    }
  }
}

TEST(RnnOps, GruLinearAfterResetMatchesEquations) {
  RefConfig c;
  c.kind = Kind::kGru;
  c.dirs = 2;
  c.lens = true;
  c.B = 3;
  run_and_compare(c);
}

TEST(RnnOps, GruLinearBeforeResetMatchesEquations) {
  RefConfig c;
  c.kind = Kind::kGru;
  c.lbr = true;
  c.layout = 1;
  run_and_compare(c);
}

TEST(RnnOps, RnnWithoutBiasOrInitialState) {
  RefConfig c;
  c.kind = Kind::kRnn;
  c.bias = false;
  c.init = false;
  c.dirs = 2;
  run_and_compare(c);
}

TEST(RnnOps, CustomActivationsWithAlpha) {
  // RNN with LeakyRelu(alpha=0.5): h = leaky(x*w), single step, no recurrence weight effect.
  Tensor x = Tensor::FromVector<float>({-2.f, 4.f}, {1, 2, 1});
  Tensor w = Tensor::FromVector<float>({1.f}, {1, 1, 1});
  Tensor r = Tensor::FromVector<float>({0.f}, {1, 1, 1});
  NodeBuilder nb("RNN", {"x", "w", "r"}, {"y", "yh"});
  nb.i("hidden_size", 1).ss("activations", {"LeakyRelu"}).fs("activation_alpha", {0.5f});
  auto res = run_node_once(nb.n, 14, {x, w, r});
  ASSERT_TRUE(res.ok()) << res.status().message();
  EXPECT_FLOAT_EQ((*res)[1].data<float>()[0], -1.f);
  EXPECT_FLOAT_EQ((*res)[1].data<float>()[1], 4.f);
}

TEST(RnnOps, LstmDefaultsMatchOnnxReference) {
  // onnx backend test "lstm_defaults": X = [[1,2],[3,4],[5,6]], W = R = 0.1.
  Tensor x = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {1, 3, 2});
  Tensor w(DType::kFloat32, {1, 12, 2});
  Tensor r(DType::kFloat32, {1, 12, 3});
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = 0.1f;
  for (int64_t i = 0; i < r.numel(); ++i) r.data<float>()[i] = 0.1f;
  NodeBuilder nb("LSTM", {"x", "w", "r"}, {"", "yh"});
  nb.i("hidden_size", 3);
  auto res = run_node_once(nb.n, 14, {x, w, r});
  ASSERT_TRUE(res.ok()) << res.status().message();
  const float expect[3] = {0.0952412f, 0.25606447f, 0.40323776f};
  for (int b = 0; b < 3; ++b) EXPECT_NEAR((*res)[1].data<float>()[b * 3], expect[b], 1e-6);
}

TEST(RnnOps, Float16ComputesInFloatAndRoundsBack) {
  std::mt19937 rng(7);
  Tensor x = random_tensor({4, 2, 3}, rng, 1.f);
  Tensor w = random_tensor({1, 12, 3}, rng);
  Tensor r = random_tensor({1, 12, 4}, rng);
  auto half = [](const Tensor& t) {
    Tensor h(DType::kFloat16, t.dims());
    for (int64_t i = 0; i < t.numel(); ++i) h.data<Float16>()[i] = Float16(t.data<float>()[i]);
    return h;
  };
  NodeBuilder nb("GRU", {"x", "w", "r"}, {"y", "yh"});
  nb.i("hidden_size", 4);
  auto ref = run_node_once(nb.n, 14, {x, w, r});
  auto got = run_node_once(nb.n, 14, {half(x), half(w), half(r)});
  ASSERT_TRUE(ref.ok() && got.ok()) << got.status().message();
  ASSERT_EQ((*got)[0].dtype(), DType::kFloat16);
  for (int64_t i = 0; i < (*ref)[0].numel(); ++i) {
    EXPECT_NEAR(static_cast<float>((*got)[0].data<Float16>()[i]), (*ref)[0].data<float>()[i], 5e-3);
  }
}

TEST(RnnOps, InferenceGivesLayoutDependentShapes) {
  NodeBuilder nb("LSTM", {"x", "w", "r"}, {"y", "yh", "yc"});
  nb.i("hidden_size", 5).i("layout", 1).s("direction", "bidirectional");
  InferContext ctx(nb.n, 14,
                   {ValueInfo{DType::kFloat32, Shape({Dim::Symbol("b"), Dim(7), Dim(3)})},
                    ValueInfo{DType::kFloat32, Shape::FromDims({2, 20, 3})},
                    ValueInfo{DType::kFloat32, Shape::FromDims({2, 20, 5})}},
                   {});
  const OpSchema* s = OpRegistry::instance().find("", "LSTM");
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[0].shape.str(), "[b,7,2,5]");
  EXPECT_EQ(ctx.outputs()[1].shape.str(), "[b,2,5]");
}

TEST(RnnOps, RejectsWeightsOfWrongSize) {
  NodeBuilder nb("GRU", {"x", "w", "r"}, {"y"});
  nb.i("hidden_size", 5);
  InferContext ctx(nb.n, 14,
                   {ValueInfo{DType::kFloat32, Shape::FromDims({2, 1, 3})},
                    ValueInfo{DType::kFloat32, Shape::FromDims({1, 20, 3})},
                    ValueInfo{DType::kFloat32, Shape::FromDims({1, 15, 5})}},
                   {});
  EXPECT_FALSE(OpRegistry::instance().find("", "GRU")->infer(ctx).ok());
}

}  // namespace
}  // namespace tessera
