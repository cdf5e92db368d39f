// Pooling ops against naive references: MaxPool (Indices, storage_order,
// dilations, ceil_mode), AveragePool (count_include_pad), LpPool, the global
// pools and MaxUnpool.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/op_registry.h"
#include "ops/node_runner.h"
#include "util/thread_pool.h"
#include "unit/op_test_util.h"

namespace tessera {
namespace {

using testutil::int_attr;
using testutil::ints_attr;
using testutil::str_attr;


Tensor random_tensor(Dims d, std::mt19937& rng) {
  Tensor t(DType::kFloat32, std::move(d));
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

struct PoolCase {
  std::string op;
  int r;
  Dims in, k, s, d, pb, pe;
  std::string auto_pad = "NOTSET";
  bool ceil = false;
  bool include_pad = false;
  bool column_major = false;
  int64_t p = 2;
};

// Output size by the ONNX formulas (with the PyTorch rule that a ceil-mode
// window must start inside the input or left padding).
Dims pool_out(PoolCase& c) {
  Dims out;
  for (int i = 0; i < c.r; ++i) {
    const int64_t eff = (c.k[i] - 1) * c.d[i] + 1;
    if (c.auto_pad == "SAME_UPPER" || c.auto_pad == "SAME_LOWER") {
      const int64_t o = (c.in[i] + c.s[i] - 1) / c.s[i];
      const int64_t total = std::max<int64_t>(0, (o - 1) * c.s[i] + eff - c.in[i]);
      c.pb[i] = c.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      c.pe[i] = total - c.pb[i];
      out.push_back(o);
      continue;
    }
    if (c.auto_pad == "VALID") c.pb[i] = c.pe[i] = 0;
    const int64_t span = c.in[i] + c.pb[i] + c.pe[i] - eff;
    int64_t o = c.ceil ? (span + c.s[i] - 1) / c.s[i] + 1 : span / c.s[i] + 1;
    if (c.ceil && (o - 1) * c.s[i] >= c.in[i] + c.pb[i]) --o;
    out.push_back(o);
  }
  return out;
}

void ref_pool(const PoolCase& c, const Dims& out, int64_t planes, const Tensor& x, std::vector<float>* y,
              std::vector<int64_t>* idx) {
  const int64_t isz = numel(c.in), osz = numel(out);
  std::vector<int64_t> oi(c.r);
  for (int64_t pl = 0; pl < planes; ++pl) {
    for (int64_t o = 0; o < osz; ++o) {
      int64_t rem = o;
      for (int i = c.r - 1; i >= 0; --i) {
        oi[i] = rem % out[i];
        rem /= out[i];
      }
      double best = -std::numeric_limits<double>::infinity(), sum = 0;
      int64_t arg = -1, count = 0, padded = 1;
      for (int i = 0; i < c.r; ++i) {
        int64_t n = 0;
        for (int64_t j = 0; j < c.k[i]; ++j) {
          const int64_t pos = oi[i] * c.s[i] - c.pb[i] + j * c.d[i];
          if (pos >= -c.pb[i] && pos < c.in[i] + c.pe[i]) ++n;
        }
        padded *= n;
      }
      const int64_t ksz = numel(c.k);
      for (int64_t kk = 0; kk < ksz; ++kk) {
        int64_t kr = kk, off = 0, coff = 0, cstride = 1;
        std::vector<int64_t> ki(c.r);
        for (int i = c.r - 1; i >= 0; --i) {
          ki[i] = kr % c.k[i];
          kr /= c.k[i];
        }
        bool ok = true;
        for (int i = 0; i < c.r; ++i) {
          const int64_t pos = oi[i] * c.s[i] - c.pb[i] + ki[i] * c.d[i];
          ok = ok && pos >= 0 && pos < c.in[i];
          off = off * c.in[i] + pos;
          coff += pos * cstride;
          cstride *= c.in[i];
        }
        if (!ok) continue;
        const double v = x.data<float>()[pl * isz + off];
        ++count;
        if (c.op == "MaxPool") {
          if (v > best) {
            best = v;
            arg = pl * isz + (c.column_major ? coff : off);
          }
        } else if (c.op == "AveragePool") {
          sum += v;
        } else {
          sum += std::pow(std::abs(v), double(c.p));
        }
      }
      float r;
      if (c.op == "MaxPool") {
        r = static_cast<float>(best);
      } else if (c.op == "AveragePool") {
        r = static_cast<float>(sum / double(c.include_pad ? padded : count));
      } else {
        r = static_cast<float>(std::pow(sum, 1.0 / double(c.p)));
      }
      (*y)[static_cast<size_t>(pl * osz + o)] = r;
      if (idx) (*idx)[static_cast<size_t>(pl * osz + o)] = arg;
    }
  }
}

Node pool_node(const PoolCase& c, bool indices) {
  Node node;
  node.name = "pool";
  node.op_type = c.op;
  node.inputs = {"x"};
  node.outputs = {"y"};
  if (indices) node.outputs.push_back("i");
  node.attrs["kernel_shape"] = ints_attr(c.k);
  node.attrs["strides"] = ints_attr(c.s);
  if (c.op == "MaxPool") node.attrs["dilations"] = ints_attr(c.d);
  if (c.auto_pad == "NOTSET") {
    Dims pads = c.pb;
    pads.insert(pads.end(), c.pe.begin(), c.pe.end());
    node.attrs["pads"] = ints_attr(pads);
  } else {
    node.attrs["auto_pad"] = str_attr(c.auto_pad);
  }
  if (c.op != "LpPool") node.attrs["ceil_mode"] = int_attr(c.ceil);
  if (c.op == "AveragePool") node.attrs["count_include_pad"] = int_attr(c.include_pad);
  if (c.op == "MaxPool") node.attrs["storage_order"] = int_attr(c.column_major);
  if (c.op == "LpPool") node.attrs["p"] = int_attr(c.p);
  return node;
}

// Runs the 2-D pool `c` on one image of `planes` channels of random values and compares every output with the naive
// reference within `tol` (0: exactly); `what` names the case in failures.
void expect_pool_matches_reference(PoolCase c, int64_t planes, float tol, std::mt19937& rng, ThreadPool* pool,
                                   const std::string& what) {
  const Dims out = pool_out(c);
  Tensor x = random_tensor({1, planes, c.in[0], c.in[1]}, rng);
  auto res = run_node_once(pool_node(c, false), 13, {x}, pool);
  ASSERT_TRUE(res.ok()) << res.status().message();
  std::vector<float> want(static_cast<size_t>(planes * numel(out)));
  ref_pool(c, out, planes, x, &want, nullptr);
  ASSERT_EQ(res->at(0).numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(res->at(0).data<float>()[i], want[i], tol) << what << " at " << i;
  }
}

TEST(Pool, WindowedPoolsMatchNaiveReference) {
  std::mt19937 rng(11);
  ThreadPool pool(2);
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const std::string ops[] = {"MaxPool", "AveragePool", "LpPool"};
  const std::string modes[] = {"NOTSET", "NOTSET", "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"};
  for (int it = 0; it < 300; ++it) {
    PoolCase c;
    c.op = ops[it % 3];
    c.r = static_cast<int>(uni(1, 3));
    c.auto_pad = modes[uni(0, 5)];
    c.ceil = c.op != "LpPool" && c.auto_pad == "NOTSET" && uni(0, 1);
    c.include_pad = uni(0, 1);
    c.column_major = uni(0, 1);
    c.p = uni(1, 3);
    for (int i = 0; i < c.r; ++i) {
      c.k.push_back(uni(1, 3));
      c.s.push_back(uni(1, 3));
      c.d.push_back(c.op == "MaxPool" ? uni(1, 2) : 1);
      // ONNX requires pads smaller than the kernel.
      c.pb.push_back(uni(0, c.k.back() - 1));
      c.pe.push_back(uni(0, c.k.back() - 1));
      const int64_t eff = (c.k.back() - 1) * c.d.back() + 1;
      c.in.push_back(uni(eff, c.r == 3 ? 6 : 11));
    }
    Dims out = pool_out(c);
    const int64_t n = uni(1, 2), ch = uni(1, 3);
    Dims xd = {n, ch};
    xd.insert(xd.end(), c.in.begin(), c.in.end());
    Tensor x = random_tensor(xd, rng);
    const bool indices = c.op == "MaxPool" && uni(0, 1);
    auto res = run_node_once(pool_node(c, indices), 13, {x}, &pool);
    ASSERT_TRUE(res.ok()) << res.status().message();
    Dims yd = {n, ch};
    yd.insert(yd.end(), out.begin(), out.end());
    ASSERT_EQ(res->at(0).dims(), yd) << c.op << " it " << it;
    std::vector<float> want(static_cast<size_t>(numel(yd)));
    std::vector<int64_t> want_idx(want.size());
    ref_pool(c, out, n * ch, x, &want, indices ? &want_idx : nullptr);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(res->at(0).data<float>()[i], want[i], 1e-5f) << c.op << " it " << it << " at " << i;
      if (indices) {
        ASSERT_EQ(res->at(1).data<int64_t>()[i], want_idx[i]) << "indices it " << it;
      }
    }
  }
}

TEST(Pool, WideRowsMatchNaiveReference) {
  // Rows wider than the vector blocks, every stride-1/2 vector path and
  // border.
  std::mt19937 rng(13);
  ThreadPool pool(2);
  for (const char* op : {"MaxPool", "AveragePool", "LpPool"}) {
    for (int64_t k : {1, 2, 3, 5}) {
      for (int64_t s : {1, 2, 3}) {
        for (int64_t w : {16, 31, 70, 112, 129}) {
          for (int64_t pad = 0; pad < k && pad <= 2; ++pad) {
            PoolCase c{op, 2, {5, w}, {k, k}, {s, s}, {1, 1}, {pad, pad}, {pad, pad % 2}};
            c.include_pad = w % 2 == 1;
            c.ceil = std::string(op) != "LpPool" && k == 3;
            expect_pool_matches_reference(c, 2, 1e-5f, rng, &pool,
                                          std::string(op) + " k" + std::to_string(k) + " s" + std::to_string(s) + " w" +
                                              std::to_string(w) + " pad" + std::to_string(pad));
          }
        }
      }
    }
  }
}

TEST(Pool, MaxPoolsWhoseWindowsTileThePlaneMatchNaiveReference) {
  // Windows of kh x 1 or kh x 2 with equal strides and no padding (a CRNN's 2x2 and 2x1 pools) take their own
  // path: rows and columns left over past the last window, outputs that end inside a vector.
  std::mt19937 rng(17);
  ThreadPool pool(2);
  for (int64_t kh : {1, 2, 3}) {
    for (int64_t kw : {1, 2}) {
      for (int64_t w : {2, 17, 33, 70, 129}) {
        PoolCase c{"MaxPool", 2, {7, w}, {kh, kw}, {kh, kw}, {1, 1}, {0, 0}, {0, 0}};
        expect_pool_matches_reference(c, 3, 0.f, rng, &pool,
                                      "k " + std::to_string(kh) + "x" + std::to_string(kw) + " w" + std::to_string(w));
      }
    }
  }
}

// 8-bit max pooling (the QDQ pass's MaxPool of quantized values) takes the float paths a plane at a time: the
// tiling windows, rows at stride 1 and 2, and the general loop give the reference's values, uint8 and int8.
TEST(Pool, EightBitMaxPoolsMatchNaiveReferenceOnEveryPath) {
  std::mt19937 rng(19);
  ThreadPool pool(2);
  struct K {
    int64_t k, s, w, pad;
  };
  for (DType t : {DType::kUInt8, DType::kInt8}) {
    for (const K& e : {K{3, 1, 70, 1}, K{3, 2, 33, 1}, K{2, 2, 17, 0}, K{3, 3, 31, 1}}) {
      PoolCase c{"MaxPool", 2, {5, e.w}, {e.k, e.k}, {e.s, e.s}, {1, 1}, {e.pad, e.pad}, {e.pad, e.pad}};
      const Dims out = pool_out(c);
      Tensor xb(t, {1, 3, 5, e.w});
      Tensor xf(DType::kFloat32, {1, 3, 5, e.w});
      for (int64_t i = 0; i < xb.numel(); ++i) {
        const auto b = static_cast<uint8_t>(rng() & 255);
        static_cast<uint8_t*>(xb.raw())[i] = b;
        xf.data<float>()[i] = t == DType::kInt8 ? static_cast<float>(static_cast<int8_t>(b)) : b;
      }
      auto res = run_node_once(pool_node(c, false), 13, {xb}, &pool);
      ASSERT_TRUE(res.ok()) << res.status().message();
      ASSERT_EQ(res->at(0).dtype(), t);
      std::vector<float> want(static_cast<size_t>(3 * numel(out)));
      ref_pool(c, out, 3, xf, &want, nullptr);
      ASSERT_EQ(res->at(0).numel(), static_cast<int64_t>(want.size()));
      for (size_t i = 0; i < want.size(); ++i) {
        const uint8_t b = static_cast<const uint8_t*>(res->at(0).raw())[i];
        const float got = t == DType::kInt8 ? static_cast<float>(static_cast<int8_t>(b)) : b;
        ASSERT_EQ(got, want[i]) << dtype_name(t) << " k" << e.k << " s" << e.s << " w" << e.w << " at " << i;
      }
    }
  }
}

TEST(Pool, GlobalPoolsReduceEverySpatialAxis) {
  std::mt19937 rng(2);
  Tensor x = random_tensor({2, 3, 4, 5}, rng);
  for (const char* op : {"GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"}) {
    Node node;
    node.name = "g";
    node.op_type = op;
    node.inputs = {"x"};
    node.outputs = {"y"};
    auto res = run_node_once(node, 13, {x});
    ASSERT_TRUE(res.ok()) << res.status().message();
    ASSERT_EQ(res->at(0).dims(), (Dims{2, 3, 1, 1}));
    for (int64_t pl = 0; pl < 6; ++pl) {
      double mx = -1e30, sum = 0, sq = 0;
      for (int64_t j = 0; j < 20; ++j) {
        const double v = x.data<float>()[pl * 20 + j];
        mx = std::max(mx, v);
        sum += v;
        sq += v * v;
      }
      const double want = std::string(op) == "GlobalMaxPool" ? mx : std::string(op) == "GlobalAveragePool" ? sum / 20 : std::sqrt(sq);
      EXPECT_NEAR(res->at(0).data<float>()[pl], want, 1e-5) << op;
    }
  }
}

// GlobalAveragePool sums each plane as ONNX Runtime does (MLAS): four lanes (element j in lane j % 4) in order,
// folded (0 + 2) + (1 + 3), then the tail in order. The planes are summed several at a time; each must still be that
// sum to the bit (a quantized squeeze-excite block rounds the mean), on plane counts around the block of planes
// and sizes around the lanes.
TEST(Pool, GlobalAveragePoolSumsEachPlaneAsOnnxRuntimeToTheBit) {
  std::mt19937 rng(5);
  for (const Dims& d :
       {Dims{1, 19, 7, 9}, Dims{2, 8, 1, 4}, Dims{1, 3, 1, 3}, Dims{3, 17, 5, 5}, Dims{1, 40, 12, 80}}) {
    Tensor x = random_tensor(d, rng);
    for (int64_t i = 0; i < x.numel(); i += 7) x.data<float>()[i] *= 1e4f;  // rounding that shows the order
    Node node;
    node.name = "g";
    node.op_type = "GlobalAveragePool";
    node.inputs = {"x"};
    node.outputs = {"y"};
    auto res = run_node_once(node, 13, {x});
    ASSERT_TRUE(res.ok()) << res.status().message();
    const int64_t planes = d[0] * d[1], sz = d[2] * d[3];
    for (int64_t pl = 0; pl < planes; ++pl) {
      const float* v = x.data<float>() + pl * sz;
      float lane[4] = {0.f, 0.f, 0.f, 0.f};
      int64_t j = 0;
      for (; j + 4 <= sz; j += 4) {
        for (int k = 0; k < 4; ++k) lane[k] += v[j + k];
      }
      float r = (lane[0] + lane[2]) + (lane[1] + lane[3]);
      for (; j < sz; ++j) r += v[j];
      const float want = r / static_cast<float>(sz);
      EXPECT_EQ(res->at(0).data<float>()[pl], want) << dims_str(d) << " plane " << pl;
    }
  }
}

TEST(Pool, MaxPoolOnUint8KeepsDtype) {
  Tensor x(DType::kUInt8, {1, 1, 2, 2});
  const uint8_t v[] = {3, 200, 7, 9};
  for (int i = 0; i < 4; ++i) x.data<uint8_t>()[i] = v[i];
  PoolCase c{"MaxPool", 2, {2, 2}, {2, 2}, {1, 1}, {1, 1}, {0, 0}, {0, 0}};
  auto res = run_node_once(pool_node(c, false), 13, {x});
  ASSERT_TRUE(res.ok()) << res.status().message();
  ASSERT_EQ(res->at(0).dtype(), DType::kUInt8);
  EXPECT_EQ(res->at(0).data<uint8_t>()[0], 200);
}

TEST(Pool, MaxUnpoolInvertsMaxPoolIndices) {
  std::mt19937 rng(4);
  Tensor x = random_tensor({1, 2, 4, 6}, rng);
  PoolCase c{"MaxPool", 2, {4, 6}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}};
  auto pooled = run_node_once(pool_node(c, true), 13, {x});
  ASSERT_TRUE(pooled.ok());
  Node node;
  node.name = "u";
  node.op_type = "MaxUnpool";
  node.inputs = {"x", "i"};
  node.outputs = {"y"};
  node.attrs["kernel_shape"] = ints_attr({2, 2});
  node.attrs["strides"] = ints_attr({2, 2});
  auto res = run_node_once(node, 13, {pooled->at(0), pooled->at(1)});
  ASSERT_TRUE(res.ok()) << res.status().message();
  ASSERT_EQ(res->at(0).dims(), x.dims());
  const Tensor& y = res->at(0);
  int nonzero = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    if (y.data<float>()[i] != 0.f) {
      ++nonzero;
      EXPECT_EQ(y.data<float>()[i], x.data<float>()[i]);
    }
  }
  EXPECT_EQ(nonzero, 12);
}

TEST(Pool, InferenceRejectsMissingKernelShape) {
  Node node;
  node.name = "p";
  node.op_type = "MaxPool";
  node.inputs = {"x"};
  node.outputs = {"y"};
  InferContext ctx(node, 13, {ValueInfo{DType::kFloat32, Shape::FromDims({1, 1, 4, 4})}}, {});
  EXPECT_FALSE(OpRegistry::instance().find("", "MaxPool")->infer(ctx).ok());
}

}  // namespace
}  // namespace tessera
