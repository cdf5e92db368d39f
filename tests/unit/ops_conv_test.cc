// Conv, FusedConv and ConvTranspose against naive references over random
// shapes: 1-D to 3-D, groups and depthwise, strides, dilations, pads and
// every auto_pad mode, with constant (pre-packed) and runtime weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/node_runner.h"
#include "ops/op_registry.h"
#include "unit/op_test_util.h"
#include "util/cpu_isa.h"
#include "util/thread_pool.h"

namespace tessera {
namespace {

using testutil::int_attr;
using testutil::ints_attr;
using testutil::str_attr;

Attribute floats_attr(std::vector<float> v) { return Attribute::Floats(std::move(v)); }

Tensor random_tensor(Dims d, std::mt19937& rng) {
  Tensor t(DType::kFloat32, std::move(d));
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// Runs a node like run_node_once, but lets the test choose whether inputs
// are seen as constants when the kernel is created.
Expected<std::vector<Tensor>> run_node(const Node& node, const std::vector<Tensor>& inputs, bool consts,
                                       ThreadPool* pool, kernels::Products products = kernels::Products::kFp32) {
  const OpSchema* schema = OpRegistry::instance().find(node.domain, node.op_type);
  if (!schema) return Unsupported("no schema");
  std::vector<ValueInfo> out_info;
  TSR_ASSIGN_OR_RETURN(out_info, infer_node_concrete(node, 13, inputs));
  KernelInit init{node, 13, {}, {}};
  init.products = products;
  init.in_info.resize(inputs.size());
  init.const_inputs.resize(inputs.size(), nullptr);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    init.in_info[i] = ValueInfo{inputs[i].dtype(), Shape::FromDims(inputs[i].dims())};
    if (consts && i > 0) init.const_inputs[i] = &inputs[i];
  }
  std::unique_ptr<Kernel> kernel;
  TSR_ASSIGN_OR_RETURN(kernel, create_kernel(*schema, init));
  std::vector<Tensor> outs(node.outputs.size());
  std::vector<Tensor*> out_ptrs;
  for (size_t i = 0; i < outs.size(); ++i) {
    outs[i] = Tensor(out_info[i].dtype, out_info[i].shape.concrete());
    out_ptrs.push_back(&outs[i]);
  }
  std::vector<const Tensor*> in_ptrs;
  for (const Tensor& t : inputs) in_ptrs.push_back(t.defined() ? &t : nullptr);
  KernelContext kctx(node, in_ptrs, out_ptrs, pool, nullptr);
  TSR_RETURN_IF_ERROR(kernel->run(kctx));
  return outs;
}

struct ConvParams {
  int r;  // spatial rank
  int64_t n, group, cg, mg;
  Dims in, k, s, d, pb, pe;
  std::string auto_pad;
};

// Output size per axis by the ONNX formulas, with the pads actually used.
void conv_out(ConvParams& p, Dims* out) {
  out->clear();
  for (int i = 0; i < p.r; ++i) {
    const int64_t eff = (p.k[i] - 1) * p.d[i] + 1;
    if (p.auto_pad == "SAME_UPPER" || p.auto_pad == "SAME_LOWER") {
      const int64_t o = (p.in[i] + p.s[i] - 1) / p.s[i];
      const int64_t total = std::max<int64_t>(0, (o - 1) * p.s[i] + eff - p.in[i]);
      p.pb[i] = p.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      p.pe[i] = total - p.pb[i];
      out->push_back(o);
    } else {
      if (p.auto_pad == "VALID") p.pb[i] = p.pe[i] = 0;
      out->push_back((p.in[i] + p.pb[i] + p.pe[i] - eff) / p.s[i] + 1);
    }
  }
}

// y[n, m, o...] = b[m] + sum_{c, k} x[n, g*cg + c, o*s - pb + k*d] w[m, c, k]
std::vector<float> ref_conv(const ConvParams& p, const Dims& out, const Tensor& x, const Tensor& w, const Tensor* b) {
  const int64_t c = p.group * p.cg, m = p.group * p.mg;
  const int64_t isz = numel(p.in), osz = numel(out), ksz = numel(p.k);
  std::vector<float> y(static_cast<size_t>(p.n * m * osz));
  std::vector<int64_t> oi(p.r), ki(p.r);
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t oc = 0; oc < m; ++oc) {
      const int64_t g = oc / p.mg;
      for (int64_t o = 0; o < osz; ++o) {
        int64_t rem = o;
        for (int i = p.r - 1; i >= 0; --i) {
          oi[i] = rem % out[i];
          rem /= out[i];
        }
        double acc = b ? b->data<float>()[oc] : 0.0;
        for (int64_t ci = 0; ci < p.cg; ++ci) {
          for (int64_t kk = 0; kk < ksz; ++kk) {
            int64_t kr = kk;
            for (int i = p.r - 1; i >= 0; --i) {
              ki[i] = kr % p.k[i];
              kr /= p.k[i];
            }
            int64_t off = 0;
            bool ok = true;
            for (int i = 0; i < p.r; ++i) {
              const int64_t pos = oi[i] * p.s[i] - p.pb[i] + ki[i] * p.d[i];
              ok = ok && pos >= 0 && pos < p.in[i];
              off = off * p.in[i] + pos;
            }
            if (!ok) continue;
            acc += double(x.data<float>()[(n * c + g * p.cg + ci) * isz + off]) *
                   w.data<float>()[(oc * p.cg + ci) * ksz + kk];
          }
        }
        y[static_cast<size_t>((n * m + oc) * osz + o)] = static_cast<float>(acc);
      }
    }
  }
  return y;
}

ConvParams random_conv(std::mt19937& rng, int it) {
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  ConvParams p;
  p.r = static_cast<int>(uni(1, 3));
  p.n = uni(1, 2);
  const int kind = static_cast<int>(uni(0, 3));  // 0 plain, 1 grouped, 2 depthwise, 3 pointwise
  p.group = kind == 1 ? uni(2, 3) : 1;
  p.cg = uni(1, 5);
  p.mg = uni(1, 6);
  if (kind == 2) {
    p.group = uni(2, 6);
    p.cg = 1;
    p.mg = uni(1, 2);
  }
  if (it % 7 == 0) p.mg = uni(9, 40);  // several MR panels
  const std::string modes[] = {"NOTSET", "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"};
  p.auto_pad = modes[uni(0, 4)];
  for (int i = 0; i < p.r; ++i) {
    const int64_t maxin = p.r == 3 ? 6 : p.r == 2 ? 12 : 40;
    p.k.push_back(kind == 3 ? 1 : uni(1, 3));
    p.s.push_back(kind == 3 ? 1 : uni(1, 3));
    p.d.push_back(kind == 3 ? 1 : uni(1, 2));
    p.pb.push_back(kind == 3 ? 0 : uni(0, 2));
    p.pe.push_back(kind == 3 ? 0 : uni(0, 2));
    const int64_t eff = (p.k.back() - 1) * p.d.back() + 1;
    p.in.push_back(uni(eff, maxin));
  }
  if (kind == 3) p.auto_pad = "NOTSET";
  return p;
}

Node conv_node(const ConvParams& p, bool bias, const std::string& op = "Conv") {
  Node node;
  node.name = "conv";
  node.op_type = op;
  node.domain = op == "FusedConv" ? "com.microsoft" : "";
  node.inputs = {"x", "w"};
  if (bias) node.inputs.push_back("b");
  node.outputs = {"y"};
  node.attrs["group"] = int_attr(p.group);
  node.attrs["strides"] = ints_attr(p.s);
  node.attrs["dilations"] = ints_attr(p.d);
  if (rand() % 2) node.attrs["kernel_shape"] = ints_attr(p.k);
  if (p.auto_pad == "NOTSET") {
    Dims pads = p.pb;
    pads.insert(pads.end(), p.pe.begin(), p.pe.end());
    node.attrs["pads"] = ints_attr(pads);
  } else {
    node.attrs["auto_pad"] = str_attr(p.auto_pad);
  }
  return node;
}

void expect_close(const Tensor& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got.data<float>()[i], want[i], 1e-4f + 1e-4f * std::abs(want[i])) << what << " at " << i;
  }
}

std::string describe(const ConvParams& p) {
  std::string s = "r=" + std::to_string(p.r) + " n=" + std::to_string(p.n) + " g=" + std::to_string(p.group) +
                  " cg=" + std::to_string(p.cg) + " mg=" + std::to_string(p.mg) + " in=" + dims_str(p.in) +
                  " k=" + dims_str(p.k) + " s=" + dims_str(p.s) + " d=" + dims_str(p.d) + " pb=" + dims_str(p.pb) +
                  " pe=" + dims_str(p.pe) + " " + p.auto_pad;
  return s;
}

TEST(Conv, MatchesNaiveReferenceOnRandomShapes) {
  std::mt19937 rng(123);
  ThreadPool pool(2), one(1);
  for (int it = 0; it < 250; ++it) {
    ConvParams p = random_conv(rng, it);
    Dims out;
    conv_out(p, &out);
    const int64_t c = p.group * p.cg, m = p.group * p.mg;
    Dims xd = {p.n, c}, wd = {m, p.cg};
    xd.insert(xd.end(), p.in.begin(), p.in.end());
    wd.insert(wd.end(), p.k.begin(), p.k.end());
    Tensor x = random_tensor(xd, rng), w = random_tensor(wd, rng), b = random_tensor({m}, rng);
    const bool with_bias = it % 3 != 0;
    Node node = conv_node(p, with_bias);
    std::vector<Tensor> inputs = {x, w};
    if (with_bias) inputs.push_back(b);
    auto res = run_node(node, inputs, it % 2 == 0, it % 4 < 2 ? &pool : &one);
    ASSERT_TRUE(res.ok()) << res.status().message() << " " << describe(p);
    Dims yd = {p.n, m};
    yd.insert(yd.end(), out.begin(), out.end());
    ASSERT_EQ(res->at(0).dims(), yd) << describe(p);
    expect_close(res->at(0), ref_conv(p, out, x, w, with_bias ? &b : nullptr), describe(p));
  }
}

TEST(Conv, LargeChannelCountsUseSeveralKBlocks) {
  std::mt19937 rng(5);
  ThreadPool pool(2);
  ConvParams p{2, 1, 1, 70, 37, {15, 13}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, "NOTSET"};
  Dims out;
  conv_out(p, &out);
  Tensor x = random_tensor({1, 70, 15, 13}, rng), w = random_tensor({37, 70, 3, 3}, rng), b = random_tensor({37}, rng);
  for (bool consts : {false, true}) {
    auto res = run_node(conv_node(p, true), {x, w, b}, consts, &pool);
    ASSERT_TRUE(res.ok()) << res.status().message();
    expect_close(res->at(0), ref_conv(p, out, x, w, &b), "large");
  }
}

// Narrow products only where they pay against the fp32 path (conv.cc): a 3x3 kernel over fewer than 256 output
// channels keeps fp32 products at --precision fp16 (the bits of the fp32 run), a 1x1 kernel or 256 output channels
// takes fp16 ones (other bits, within fp16's rounding).
TEST(Conv, Fp16ProductsWhereTheyPayAgainstTheFloatPath) {
  if (!cpu::avx512_fp16()) GTEST_SKIP() << "this CPU (or TESSERA_ISA) has no AVX512-FP16";
  std::mt19937 rng(9);
  ThreadPool pool(2);
  struct Case {
    int64_t cin, cout, k;
    bool narrow;
  };
  for (const Case& c : {Case{24, 64, 3, false}, Case{24, 64, 1, true}, Case{24, 256, 3, true}}) {
    const int64_t pad = c.k / 2;
    ConvParams p{2, 1, 1, c.cin, c.cout, {9, 40}, {c.k, c.k}, {1, 1}, {1, 1}, {pad, pad}, {pad, pad}, "NOTSET"};
    Tensor x = random_tensor({1, c.cin, 9, 40}, rng), w = random_tensor({c.cout, c.cin, c.k, c.k}, rng),
           b = random_tensor({c.cout}, rng);
    auto f32 = run_node(conv_node(p, true), {x, w, b}, true, &pool);
    auto f16 = run_node(conv_node(p, true), {x, w, b}, true, &pool, kernels::Products::kFp16);
    ASSERT_TRUE(f32.ok() && f16.ok());
    const bool same = std::memcmp(f32->at(0).raw(), f16->at(0).raw(), f32->at(0).nbytes()) == 0;
    EXPECT_EQ(same, !c.narrow) << c.cin << "->" << c.cout << " " << c.k << "x" << c.k;
    Dims out;
    conv_out(p, &out);
    const std::vector<float> want = ref_conv(p, out, x, w, &b);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(f16->at(0).data<float>()[i], want[i], 0.05f) << i;
  }
}

// Inputs whose copy spans several L2-sized bands of output rows (conv_by_rows), which the two threads share out:
// strides, dilations, uneven pads, several K blocks, a summand, and runtime as well as constant weights.
TEST(Conv, BandsOfOutputRowsMatchReference) {
  std::mt19937 rng(21);
  ThreadPool pool(2), one(1);
  const ConvParams cases[] = {
      {2, 1, 1, 64, 9, {40, 200}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, "NOTSET"},
      {2, 1, 1, 48, 11, {61, 131}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {0, 2}, "NOTSET"},
      {2, 2, 1, 40, 17, {33, 150}, {3, 5}, {1, 3}, {2, 1}, {2, 0}, {1, 3}, "NOTSET"},
      {2, 1, 1, 32, 8, {70, 90}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, "NOTSET"},
      {1, 1, 1, 96, 13, {5000}, {4}, {3}, {2}, {3}, {1}, "NOTSET"},
      // 1-D rows whose copy exceeds the band budget are cut into pieces of output columns (a speech encoder's
      // strided layer; two images, a dilation and pads wider than a tap): wide kernel for constant weights too.
      {1, 1, 1, 64, 64, {3001}, {3}, {2}, {1}, {1}, {1}, "NOTSET"},
      {1, 2, 1, 48, 40, {2500}, {5}, {1}, {3}, {6}, {7}, "NOTSET"},
      // Rows of 52 columns, 2 dropped: nearly every tile of 48 columns has dropped ones inside.
      {2, 1, 1, 24, 40, {12, 50}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, "NOTSET"},
      // One output row: two threads take slices of the output channels, not bands (rows of 32, 2 dropped).
      {2, 1, 1, 16, 40, {3, 30}, {3, 3}, {1, 1}, {1, 1}, {0, 1}, {0, 1}, "NOTSET"},
      // Output channels in whole panels of 32 and K >= 72: constant weights go to the wide kernel (tiles of 14
      // columns straddle rows of 72, 41 and 52 columns), with strides, dilations, a Sigmoid, a partial last panel
      // (260 = 8 x 32 + 4) and one output row cut into slices of whole panels.
      {2, 1, 1, 16, 64, {20, 70}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, "NOTSET"},
      {2, 1, 1, 24, 32, {41, 77}, {3, 3}, {2, 2}, {2, 1}, {1, 0}, {0, 2}, "NOTSET"},
      {2, 1, 1, 8, 64, {12, 50}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, "NOTSET"},
      {2, 1, 1, 8, 260, {6, 40}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, "NOTSET"},
      {2, 1, 1, 32, 96, {3, 40}, {3, 3}, {1, 1}, {1, 1}, {0, 1}, {0, 1}, "NOTSET"},
  };
  int i = 0;
  for (ConvParams p : cases) {
    // Sigmoid is applied after the tile is stored (a pass over the stored columns); Relu in the store.
    const bool sigmoid = p.in.size() == 2 && p.in[1] == 50;
    Dims out;
    conv_out(p, &out);
    Dims xd = {p.n, p.cg}, wd = {p.mg, p.cg}, yd = {p.n, p.mg};
    xd.insert(xd.end(), p.in.begin(), p.in.end());
    wd.insert(wd.end(), p.k.begin(), p.k.end());
    yd.insert(yd.end(), out.begin(), out.end());
    Tensor x = random_tensor(xd, rng), w = random_tensor(wd, rng), b = random_tensor({p.mg}, rng),
           z = random_tensor(yd, rng);
    std::vector<float> want = ref_conv(p, out, x, w, &b);
    for (size_t j = 0; j < want.size(); ++j) {
      const float v = want[j] + z.data<float>()[j];
      want[j] = sigmoid ? 1.f / (1.f + std::exp(-v)) : std::max(v, 0.f);
    }
    Node node = conv_node(p, true, "FusedConv");
    node.inputs.push_back("z");
    node.attrs["activation"] = str_attr(sigmoid ? "Sigmoid" : "Relu");
    for (bool consts : {false, true}) {
      auto res = run_node(node, {x, w, b, z}, consts, ++i % 2 ? &pool : &one);
      ASSERT_TRUE(res.ok()) << res.status().message();
      expect_close(res->at(0), want, describe(p) + (consts ? " constant weights" : " runtime weights"));
    }
    // bf16 and fp16 products (where the CPU has them) read the same rows, packed for the pair kernels. bf16: each
    // operand rounded to 8 significant bits, so an output is off by at most 2^-8 of the sum of |x| |w| it adds up.
    // fp16: operands rounded to 11 bits, and runs of up to 32 products summed in fp16 (2^-11 of a partial sum per
    // add): within 2^-7 of that sum for these random signs.
    Tensor xa = x.clone(), wa = w.clone();
    for (Tensor* t : {&xa, &wa}) {
      for (int64_t j = 0; j < t->numel(); ++j) t->data<float>()[j] = std::abs(t->data<float>()[j]);
    }
    const std::vector<float> mags = ref_conv(p, out, xa, wa, nullptr);
    for (kernels::Products products : {kernels::Products::kBf16, kernels::Products::kFp16}) {
      auto res = run_node(node, {x, w, b, z}, true, &pool, products);
      ASSERT_TRUE(res.ok()) << res.status().message();
      const float share = products == kernels::Products::kBf16 ? 1.f / 256.f : 1.f / 128.f;
      for (size_t j = 0; j < want.size(); ++j) {
        // Sigmoid's slope is at most 1/4.
        ASSERT_NEAR(res->at(0).data<float>()[j], want[j], 1e-4f + mags[j] * share / (sigmoid ? 4.f : 1.f))
            << describe(p) << (products == kernels::Products::kBf16 ? " bf16" : " fp16");
      }
    }
  }
}

// FusedConv of p with summand z and Clip(-0.5, 0.6) after it, against ref_conv + z clipped.
void expect_summand_then_clip(const ConvParams& p, const Dims& out, const Tensor& x, const Tensor& w, const Tensor& b,
                              const Tensor& z, ThreadPool* pool, const std::string& what) {
  Node node = conv_node(p, true, "FusedConv");
  node.inputs.push_back("z");
  node.attrs["activation"] = str_attr("Clip");
  node.attrs["activation_params"] = floats_attr({-0.5f, 0.6f});
  auto res = run_node(node, {x, w, b, z}, true, pool);
  ASSERT_TRUE(res.ok()) << res.status().message();
  std::vector<float> want = ref_conv(p, out, x, w, &b);
  for (size_t i = 0; i < want.size(); ++i) want[i] = std::min(std::max(want[i] + z.data<float>()[i], -0.5f), 0.6f);
  expect_close(res->at(0), want, what);
}

TEST(Conv, FusedConvAppliesSummandThenActivation) {
  std::mt19937 rng(9);
  ThreadPool pool(2);
  for (int variant = 0; variant < 4; ++variant) {
    const bool depthwise = variant > 0;
    const Dims strides = variant == 2 ? Dims{1, 1} : variant == 3 ? Dims{2, 2} : Dims{1, 2};
    ConvParams p{2, 2, depthwise ? 4 : 1, depthwise ? 1 : 3, depthwise ? 1 : 5, {7, 6}, {3, 3}, strides, {1, 1},
                 {1, 1}, {1, 0}, "NOTSET"};
    Dims out;
    conv_out(p, &out);
    const int64_t c = p.group * p.cg, m = p.group * p.mg;
    Tensor x = random_tensor({2, c, 7, 6}, rng), w = random_tensor({m, p.cg, 3, 3}, rng),
           b = random_tensor({m}, rng);
    Tensor z = random_tensor({2, m, out[0], out[1]}, rng);
    expect_summand_then_clip(p, out, x, w, b, z, &pool, depthwise ? "depthwise" : "gemm");
  }
}

TEST(Conv, DepthwiseFastPathsMatchReference) {
  // Square 3x3/5x5 kernels with equal strides 1/2 take the padded AVX-512
  // path; others the masked or scalar paths. Sweep widths around the vector
  // length and every padding.
  std::mt19937 rng(31);
  ThreadPool pool(2);
  for (int64_t k : {3, 5, 4}) {
    for (int64_t s : {1, 2}) {
      for (int64_t pad = 0; pad <= 2; ++pad) {
        for (int64_t w : {5, 16, 17, 33, 64, 70}) {
          for (int64_t mult : {1, 2}) {
            const int64_t h = 6 + (w % 3);
            if (w + 2 * pad < k || h + 2 * pad < k) continue;
            ConvParams p{2, 1, 3, 1, mult, {h, w}, {k, k}, {s, s}, {1, 1}, {pad, pad}, {pad, pad % 2}, "NOTSET"};
            Dims out;
            conv_out(p, &out);
            Tensor x = random_tensor({1, 3, h, w}, rng), wt = random_tensor({3 * mult, 1, k, k}, rng),
                   b = random_tensor({3 * mult}, rng);
            auto res = run_node(conv_node(p, true), {x, wt, b}, true, &pool);
            ASSERT_TRUE(res.ok()) << res.status().message();
            expect_close(res->at(0), ref_conv(p, out, x, wt, &b), describe(p));
          }
        }
      }
    }
  }
}

TEST(Conv, LongDepthwiseKernelsMatchReference) {
  // 1-D depthwise kernels of every length (31 taps, as in Conformers; 87, as in QuartzNet), with strides, dilations,
  // every padding, channel multipliers and rows of several 64-output blocks; then 2-D kernels of one row or wider
  // than the masked path takes, and a summand with an activation after (FusedConv).
  std::mt19937 rng(37);
  ThreadPool pool(2);
  for (int64_t k : {5, 9, 31, 87}) {
    for (int64_t s : {1, 2, 3}) {
      for (int64_t d : {1, 2}) {
        for (int64_t pad : {int64_t{0}, k / 2, k}) {
          for (int64_t len : {70, 200}) {
            const int64_t mult = len == 200 ? 2 : 1;
            if (len + 2 * pad < (k - 1) * d + 1) continue;
            ConvParams p{1, 1, 4, 1, mult, {len}, {k}, {s}, {d}, {pad}, {pad / 2}, "NOTSET"};
            Dims out;
            conv_out(p, &out);
            if (out[0] <= 0) continue;
            Tensor x = random_tensor({1, 4, len}, rng), wt = random_tensor({4 * mult, 1, k}, rng),
                   b = random_tensor({4 * mult}, rng);
            auto res = run_node(conv_node(p, true), {x, wt, b}, true, &pool);
            ASSERT_TRUE(res.ok()) << res.status().message();
            expect_close(res->at(0), ref_conv(p, out, x, wt, &b), describe(p));
          }
        }
      }
    }
  }
  struct Plane {
    Dims in, kernel, strides, dilations, pb, pe;
  };
  const Plane planes[] = {
      {{6, 75}, {1, 5}, {1, 1}, {1, 1}, {0, 2}, {0, 2}},
      {{5, 40}, {3, 11}, {1, 1}, {1, 1}, {1, 5}, {1, 5}},
      {{9, 33}, {2, 13}, {2, 1}, {2, 2}, {1, 0}, {0, 12}},
  };
  for (const Plane& pl : planes) {
    ConvParams p{2, 2, 3, 1, 1, pl.in, pl.kernel, pl.strides, pl.dilations, pl.pb, pl.pe, "NOTSET"};
    Dims out;
    conv_out(p, &out);
    Tensor x = random_tensor({2, 3, pl.in[0], pl.in[1]}, rng),
           wt = random_tensor({3, 1, pl.kernel[0], pl.kernel[1]}, rng), b = random_tensor({3}, rng);
    auto res = run_node(conv_node(p, true), {x, wt, b}, true, &pool);
    ASSERT_TRUE(res.ok()) << res.status().message();
    expect_close(res->at(0), ref_conv(p, out, x, wt, &b), describe(p));
  }
  ConvParams p{1, 1, 8, 1, 1, {130}, {31}, {1}, {1}, {15}, {15}, "NOTSET"};
  Dims out;
  conv_out(p, &out);
  Tensor x = random_tensor({1, 8, 130}, rng), wt = random_tensor({8, 1, 31}, rng), b = random_tensor({8}, rng),
         z = random_tensor({1, 8, out[0]}, rng);
  expect_summand_then_clip(p, out, x, wt, b, z, &pool, "1-D depthwise with a summand and Clip");
}

TEST(Conv, InferenceKeepsUnknownDims) {
  Node node;
  node.name = "c";
  node.op_type = "Conv";
  node.inputs = {"x", "w"};
  node.outputs = {"y"};
  node.attrs["pads"] = ints_attr({1, 1, 1, 1});
  const OpSchema* schema = OpRegistry::instance().find("", "Conv");
  ASSERT_NE(schema, nullptr);
  InferContext ctx(node, 13,
                   {ValueInfo{DType::kFloat32, Shape({Dim::Symbol("N"), Dim(3), Dim(), Dim(32)})},
                    ValueInfo{DType::kFloat32, Shape::FromDims({8, 3, 3, 3})}},
                   {});
  ASSERT_TRUE(schema->infer(ctx).ok());
  EXPECT_EQ(ctx.outputs()[0].shape.str(), "[N,8,?,32]");
}

TEST(Conv, RejectsChannelMismatch) {
  std::mt19937 rng(1);
  Node node;
  node.name = "c";
  node.op_type = "Conv";
  node.inputs = {"x", "w"};
  node.outputs = {"y"};
  auto res = run_node_once(node, 13, {random_tensor({1, 4, 5, 5}, rng), random_tensor({2, 3, 3, 3}, rng)});
  EXPECT_FALSE(res.ok());
}

// ---- ConvTranspose ------------------------------------------------------------

// y[n, g*mg + m, i*s - pb + k*d] += x[n, g*cg + c, i] * w[g*cg + c, m, k]
std::vector<float> ref_convtranspose(int r, int64_t n, int64_t group, int64_t cg, int64_t mg, const Dims& in,
                                     const Dims& k, const Dims& s, const Dims& d, const Dims& pb, const Dims& out,
                                     const Tensor& x, const Tensor& w, const Tensor* b) {
  const int64_t c = group * cg, m = group * mg;
  const int64_t isz = numel(in), osz = numel(out), ksz = numel(k);
  std::vector<double> y(static_cast<size_t>(n * m * osz), 0.0);
  std::vector<int64_t> ii(r), ki(r);
  for (int64_t b0 = 0; b0 < n; ++b0) {
    for (int64_t ci = 0; ci < c; ++ci) {
      const int64_t g = ci / cg;
      for (int64_t p = 0; p < isz; ++p) {
        int64_t rem = p;
        for (int i = r - 1; i >= 0; --i) {
          ii[i] = rem % in[i];
          rem /= in[i];
        }
        const float xv = x.data<float>()[(b0 * c + ci) * isz + p];
        for (int64_t mm = 0; mm < mg; ++mm) {
          for (int64_t kk = 0; kk < ksz; ++kk) {
            int64_t kr = kk;
            for (int i = r - 1; i >= 0; --i) {
              ki[i] = kr % k[i];
              kr /= k[i];
            }
            int64_t off = 0;
            bool ok = true;
            for (int i = 0; i < r; ++i) {
              const int64_t pos = ii[i] * s[i] - pb[i] + ki[i] * d[i];
              ok = ok && pos >= 0 && pos < out[i];
              off = off * out[i] + pos;
            }
            if (!ok) continue;
            y[static_cast<size_t>((b0 * m + g * mg + mm) * osz + off)] +=
                double(xv) * w.data<float>()[(ci * mg + mm) * ksz + kk];
          }
        }
      }
    }
  }
  std::vector<float> yf(y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    const int64_t oc = static_cast<int64_t>(i) / osz % m;
    yf[i] = static_cast<float>(y[i] + (b ? b->data<float>()[oc] : 0.f));
  }
  return yf;
}

TEST(ConvTranspose, MatchesNaiveReferenceOnRandomShapes) {
  std::mt19937 rng(77);
  ThreadPool pool(2);
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int it = 0; it < 120; ++it) {
    const int r = static_cast<int>(uni(1, 3));
    const int64_t n = uni(1, 2), group = uni(1, 2), cg = uni(1, 4), mg = uni(1, 4);
    Dims in, k, s, d, pb, pe, op, out;
    const int mode = static_cast<int>(uni(0, 3));  // 0 pads, 1 output_shape, 2 SAME_UPPER, 3 SAME_LOWER
    for (int i = 0; i < r; ++i) {
      in.push_back(uni(1, r == 3 ? 4 : 7));
      k.push_back(uni(1, 3));
      s.push_back(uni(1, 3));
      d.push_back(uni(1, 2));
      op.push_back(uni(0, std::max(s.back(), d.back()) - 1));
      const int64_t eff = (k.back() - 1) * d.back() + 1;
      const int64_t full = s.back() * (in.back() - 1) + op.back() + eff;
      if (mode == 0) {
        pb.push_back(uni(0, std::min<int64_t>(2, (full - 1) / 2)));
        pe.push_back(uni(0, std::min<int64_t>(2, (full - 1) / 2)));
        out.push_back(full - pb.back() - pe.back());
      } else {
        const int64_t o = mode == 1 ? full + uni(-1, 1) : in.back() * s.back();
        const int64_t total = full - o;
        const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
        pb.push_back(mode == 2 ? half : total - half);
        out.push_back(o);
      }
    }
    const int64_t c = group * cg, m = group * mg;
    Dims xd = {n, c}, wd = {c, mg};
    xd.insert(xd.end(), in.begin(), in.end());
    wd.insert(wd.end(), k.begin(), k.end());
    Tensor x = random_tensor(xd, rng), w = random_tensor(wd, rng), b = random_tensor({m}, rng);
    Node node;
    node.name = "ct";
    node.op_type = "ConvTranspose";
    node.inputs = {"x", "w", "b"};
    node.outputs = {"y"};
    node.attrs["group"] = int_attr(group);
    node.attrs["strides"] = ints_attr(s);
    node.attrs["dilations"] = ints_attr(d);
    node.attrs["output_padding"] = ints_attr(op);
    if (mode == 0) {
      Dims pads = pb;
      pads.insert(pads.end(), pe.begin(), pe.end());
      node.attrs["pads"] = ints_attr(pads);
    } else if (mode == 1) {
      node.attrs["output_shape"] = ints_attr(out);
    } else {
      node.attrs["auto_pad"] = str_attr(mode == 2 ? "SAME_UPPER" : "SAME_LOWER");
    }
    auto res = run_node(node, {x, w, b}, it % 2 == 0, &pool);
    ASSERT_TRUE(res.ok()) << res.status().message();
    Dims yd = {n, m};
    yd.insert(yd.end(), out.begin(), out.end());
    ASSERT_EQ(res->at(0).dims(), yd) << "it " << it;
    expect_close(res->at(0), ref_convtranspose(r, n, group, cg, mg, in, k, s, d, pb, out, x, w, &b),
                 "convtranspose it " + std::to_string(it));
  }
}

// Windows that never overlap (stride >= dilated kernel) take an assignment path, and windows that tile the output
// exactly (kernel == stride, no pads) an interleaving one; both against the naive reference, with and without bias,
// over one and two spatial axes, constant and runtime weights.
TEST(ConvTranspose, DisjointAndTilingWindowsMatchNaiveReference) {
  std::mt19937 rng(78);
  ThreadPool pool(2);
  struct Case {
    Dims in, k, s, d, pb, pe, op;
  };
  const Case cases[] = {
      {{5, 7}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {0, 0}},  // tiles, kw == 2
      {{4, 3}, {3, 3}, {3, 3}, {1, 1}, {0, 0}, {0, 0}, {0, 0}},  // tiles, kw == 3
      {{9}, {2}, {2}, {1}, {0}, {0}, {0}},                       // tiles, 1-D
      {{4, 5}, {2, 2}, {3, 3}, {1, 1}, {0, 0}, {0, 0}, {1, 2}},  // disjoint, gaps and output padding
      {{4, 5}, {2, 2}, {2, 2}, {1, 1}, {1, 0}, {0, 1}, {0, 0}},  // disjoint, cropped by pads
      {{3, 4}, {2, 1}, {3, 2}, {2, 1}, {0, 0}, {0, 0}, {0, 1}},  // disjoint with a dilation
  };
  int index = 0;
  for (const Case& cs : cases) {
    for (int with_bias = 0; with_bias < 2; ++with_bias) {
      const int r = static_cast<int>(cs.in.size());
      const int64_t n = 2, group = 1 + index % 2, cg = 3, mg = 2, c = group * cg, m = group * mg;
      Dims out;
      for (int i = 0; i < r; ++i) {
        const auto a = static_cast<size_t>(i);
        out.push_back(cs.s[a] * (cs.in[a] - 1) + cs.op[a] + (cs.k[a] - 1) * cs.d[a] + 1 - cs.pb[a] - cs.pe[a]);
      }
      Dims xd = {n, c}, wd = {c, mg};
      xd.insert(xd.end(), cs.in.begin(), cs.in.end());
      wd.insert(wd.end(), cs.k.begin(), cs.k.end());
      Tensor x = random_tensor(xd, rng), w = random_tensor(wd, rng), b = random_tensor({m}, rng);
      Node node;
      node.name = "ct";
      node.op_type = "ConvTranspose";
      node.inputs = {"x", "w"};
      if (with_bias) node.inputs.push_back("b");
      node.outputs = {"y"};
      node.attrs["group"] = int_attr(group);
      node.attrs["strides"] = ints_attr(cs.s);
      node.attrs["dilations"] = ints_attr(cs.d);
      node.attrs["output_padding"] = ints_attr(cs.op);
      Dims pads = cs.pb;
      pads.insert(pads.end(), cs.pe.begin(), cs.pe.end());
      node.attrs["pads"] = ints_attr(pads);
      std::vector<Tensor> ins = {x, w};
      if (with_bias) ins.push_back(b);
      auto res = run_node(node, ins, index % 2 == 0, &pool);
      ASSERT_TRUE(res.ok()) << res.status().message();
      Dims yd = {n, m};
      yd.insert(yd.end(), out.begin(), out.end());
      ASSERT_EQ(res->at(0).dims(), yd) << "case " << index;
      expect_close(
          res->at(0),
          ref_convtranspose(r, n, group, cg, mg, cs.in, cs.k, cs.s, cs.d, cs.pb, out, x, w, with_bias ? &b : nullptr),
          "convtranspose case " + std::to_string(index));
      ++index;
    }
  }
}

}  // namespace
}  // namespace tessera
