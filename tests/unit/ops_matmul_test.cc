// MatMul (1-D promotion, batch broadcasting, constant B pre-packed), Gemm
// (transposes, alpha, beta, every C broadcast), FusedGemm and MatMulInteger
// against naive references.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "ops/op_registry.h"
#include "ops/node_runner.h"
#include "util/thread_pool.h"
#include "unit/op_test_util.h"

namespace tessera {
namespace {

using testutil::set_int;
using testutil::set_float;

Tensor random_tensor(Dims d, std::mt19937& rng, DType dt = DType::kFloat32) {
  Tensor t(dt, std::move(d));
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = dist(rng);
    if (dt == DType::kFloat32) t.data<float>()[i] = v;
    if (dt == DType::kFloat64) t.data<double>()[i] = v;
    if (dt == DType::kInt32) t.data<int32_t>()[i] = static_cast<int32_t>(v * 10);
  }
  return t;
}

Node make_node(const std::string& op, std::vector<std::string> inputs) {
  Node node;
  node.name = "n";
  node.op_type = op;
  node.domain = op == "FusedGemm" ? "com.microsoft" : "";
  node.inputs = std::move(inputs);
  node.outputs = {"y"};
  return node;
}

// numpy matmul reference.
std::vector<double> ref_matmul(const Tensor& a, const Tensor& b, Dims* out_dims) {
  Dims ad = a.dims(), bd = b.dims();
  const bool a1 = ad.size() == 1, b1 = bd.size() == 1;
  if (a1) ad.insert(ad.begin(), 1);
  if (b1) bd.push_back(1);
  const int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
  Dims ab(ad.begin(), ad.end() - 2), bb(bd.begin(), bd.end() - 2), batch;
  EXPECT_TRUE(broadcast_dims(ab, bb, &batch));
  auto as = broadcast_strides(ab, batch), bs = broadcast_strides(bb, batch);
  const int64_t count = numel(batch);
  std::vector<double> y(static_cast<size_t>(count * m * n));
  for (int64_t bi = 0; bi < count; ++bi) {
    int64_t rem = bi, ao = 0, bo = 0;
    for (size_t i = batch.size(); i-- > 0;) {
      const int64_t c = rem % batch[i];
      rem /= batch[i];
      ao += c * as[i];
      bo += c * bs[i];
    }
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) {
          s += a.as_double((ao * m + i) * k + p) * b.as_double((bo * k + p) * n + j);
        }
        y[static_cast<size_t>((bi * m + i) * n + j)] = s;
      }
    }
  }
  *out_dims = batch;
  if (!a1) out_dims->push_back(m);
  if (!b1) out_dims->push_back(n);
  return y;
}

TEST(MatMul, MatchesNumpySemanticsOnRandomShapes) {
  std::mt19937 rng(21);
  ThreadPool pool(2);
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int it = 0; it < 200; ++it) {
    const int64_t m = uni(1, 40), n = uni(1, 70), k = it % 9 == 0 ? uni(250, 600) : uni(1, 50);
    const int ra = static_cast<int>(uni(1, 4)), rb = static_cast<int>(uni(1, 4));
    Dims ad, bd;
    for (int i = 0; i < ra - 2; ++i) ad.push_back(uni(1, 3));
    for (int i = 0; i < rb - 2; ++i) bd.push_back(uni(1, 3));
    // Make batch dims compatible: equal or 1.
    for (size_t i = 0; i < std::min(ad.size(), bd.size()); ++i) {
      int64_t& x = ad[ad.size() - 1 - i];
      int64_t& y = bd[bd.size() - 1 - i];
      if (x != y && x != 1 && y != 1) y = 1;
    }
    if (ra >= 2) {
      ad.push_back(m);
    }
    ad.push_back(k);
    bd.push_back(k);
    if (rb >= 2) bd.push_back(n);
    const DType dt = it % 10 == 3 ? DType::kFloat64 : it % 10 == 7 ? DType::kInt32 : DType::kFloat32;
    Tensor a = random_tensor(ad, rng, dt), b = random_tensor(bd, rng, dt);
    auto res = run_node_once(make_node("MatMul", {"a", "b"}), 13, {a, b}, &pool);
    ASSERT_TRUE(res.ok()) << res.status().message() << " " << dims_str(ad) << " x " << dims_str(bd);
    Dims want_dims;
    std::vector<double> want = ref_matmul(a, b, &want_dims);
    ASSERT_EQ(res->at(0).dims(), want_dims) << dims_str(ad) << " x " << dims_str(bd);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(res->at(0).as_double(static_cast<int64_t>(i)), want[i], 1e-4 * (1 + std::abs(want[i])) + 1e-5 * k)
          << dims_str(ad) << " x " << dims_str(bd) << " at " << i;
    }
  }
}

TEST(MatMul, InferenceBroadcastsSymbolicBatch) {
  Node node = make_node("MatMul", {"a", "b"});
  InferContext ctx(node, 13,
                   {ValueInfo{DType::kFloat32, Shape({Dim::Symbol("B"), Dim(1), Dim(7), Dim(16)})},
                    ValueInfo{DType::kFloat32, Shape({Dim(4), Dim(16), Dim(9)})}},
                   {});
  ASSERT_TRUE(OpRegistry::instance().find("", "MatMul")->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[0].shape.str(), "[B,4,7,9]");
  InferContext bad(node, 13,
                   {ValueInfo{DType::kFloat32, Shape::FromDims({3, 5})}, ValueInfo{DType::kFloat32, Shape::FromDims({4, 2})}},
                   {});
  EXPECT_FALSE(OpRegistry::instance().find("", "MatMul")->infer(bad).ok());
}

TEST(GemmOp, AllAttributesAndBiasShapes) {
  std::mt19937 rng(8);
  ThreadPool pool(2);
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int it = 0; it < 160; ++it) {
    const int64_t m = uni(1, 50), n = uni(1, 60), k = uni(1, 300);
    const bool ta = uni(0, 1), tb = uni(0, 1);
    const float alpha = it % 3 == 0 ? 1.f : 0.7f, beta = it % 4 == 0 ? 1.f : it % 4 == 1 ? 0.f : -1.5f;
    const int cshape = static_cast<int>(uni(0, 6));  // none, scalar, [n], [1,n], [m,1], [m,n], [1,1]
    const std::string op = it % 5 == 4 ? "FusedGemm" : "Gemm";
    const DType dt = it % 11 == 5 ? DType::kFloat64 : DType::kFloat32;
    Tensor a = random_tensor(ta ? Dims{k, m} : Dims{m, k}, rng, dt);
    Tensor b = random_tensor(tb ? Dims{n, k} : Dims{k, n}, rng, dt);
    Dims cd;
    switch (cshape) {
      case 1: cd = {}; break;
      case 2: cd = {n}; break;
      case 3: cd = {1, n}; break;
      case 4: cd = {m, 1}; break;
      case 5: cd = {m, n}; break;
      case 6: cd = {1, 1}; break;
      default: break;
    }
    Tensor c = random_tensor(cd, rng, dt);
    Node node = make_node(op, cshape ? std::vector<std::string>{"a", "b", "c"} : std::vector<std::string>{"a", "b"});
    set_int(node, "transA", ta);
    set_int(node, "transB", tb);
    set_float(node, "alpha", alpha);
    set_float(node, "beta", beta);
    if (op == "FusedGemm") {
      Attribute act;
      act.kind = Attribute::Kind::kString;
      act.s = "LeakyRelu";
      node.attrs["activation"] = act;
      set_float(node, "activation_alpha", 0.3f);
    }
    std::vector<Tensor> inputs = {a, b};
    if (cshape) inputs.push_back(c);
    auto res = run_node_once(node, 13, inputs, &pool);
    ASSERT_TRUE(res.ok()) << res.status().message();
    ASSERT_EQ(res->at(0).dims(), (Dims{m, n}));
    auto cs = broadcast_strides(cd, {m, n});
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) {
          s += a.as_double(ta ? p * m + i : i * k + p) * b.as_double(tb ? j * k + p : p * n + j);
        }
        double v = alpha * s;
        if (cshape) v += beta * c.as_double(i * cs[0] + j * cs[1]);
        if (op == "FusedGemm" && v < 0) v *= 0.3;
        ASSERT_NEAR(res->at(0).as_double(i * n + j), v, 1e-4 * (1 + std::abs(v)) + 1e-5 * k)
            << op << " it " << it << " c" << cshape << " at " << i << "," << j;
      }
    }
  }
}

TEST(MatMulInteger, SubtractsZeroPoints) {
  Tensor a(DType::kUInt8, {2, 3}), b(DType::kUInt8, {3, 2}), az(DType::kUInt8, {}), bz(DType::kUInt8, {2});
  const uint8_t av[] = {1, 2, 3, 4, 5, 6}, bv[] = {7, 8, 9, 10, 11, 12};
  for (int i = 0; i < 6; ++i) {
    a.data<uint8_t>()[i] = av[i];
    b.data<uint8_t>()[i] = bv[i];
  }
  az.data<uint8_t>()[0] = 1;
  bz.data<uint8_t>()[0] = 2;
  bz.data<uint8_t>()[1] = 3;
  auto res = run_node_once(make_node("MatMulInteger", {"a", "b", "az", "bz"}), 13, {a, b, az, bz});
  ASSERT_TRUE(res.ok()) << res.status().message();
  ASSERT_EQ(res->at(0).dtype(), DType::kInt32);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      int32_t s = 0;
      for (int p = 0; p < 3; ++p) s += (av[i * 3 + p] - 1) * (bv[p * 2 + j] - (j == 0 ? 2 : 3));
      EXPECT_EQ(res->at(0).data<int32_t>()[i * 2 + j], s);
    }
  }
}

}  // namespace
}  // namespace tessera
