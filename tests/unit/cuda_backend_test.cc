// The CUDA backend plugin (backends/cuda), loaded as the host loads it
// (Backend::LoadLibrary on <build>/lib/tessera/libtessera_backend_cuda.so).
//
// Without the plugin (no CUDA toolkit at build time) every test skips. On a
// machine without a GPU or driver (found through the plugin's own capability
// reasons: the test links no CUDA) the plugin must still load, refuse every
// node with "no CUDA device (...)", fail compile naming the missing device,
// and never crash. With a GPU, small models run through the host's
// Engine::run (which stages host tensors through device buffers) and are
// compared with the native backend's results; these cases also exercise, in
// one device run, every kind of step the plugin lowers to.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "ir/graph.h"
#include "runtime/session.h"
#include "tessera/backend.h"
#include "unit/op_test_util.h"
#include "unit/plugin_test_util.h"

namespace tessera {
namespace {

using plugintest::Builder;
using plugintest::CapabilityReport;
using plugintest::Compiled;
using plugintest::model_bytes;
using plugintest::native_outputs;
using plugintest::output_buffers;
using plugintest::random_tensor;
using testutil::set_float;
using testutil::set_int;
using testutil::set_ints;
using testutil::set_string;

std::string plugin_path() { return plugintest::beside_test_binary("../lib/tessera/libtessera_backend_cuda.so"); }

bool plugin_built() { return access(plugin_path().c_str(), R_OK) == 0; }

const Backend* plugin() {
  static std::shared_ptr<Backend> b = [] {
    auto loaded = Backend::LoadLibrary(plugin_path());
    EXPECT_TRUE(loaded.ok()) << loaded.status().message();
    return loaded.ok() ? *loaded : nullptr;
  }();
  return b.get();
}

const plugintest::PluginClient& client() {
  static const plugintest::PluginClient c(plugin()->table());
  return c;
}

// A 3x3 Conv with pads 1 from x to y: weights `w` of dims `wd` (random in [-range, range], seed `seed`) and, when
// `bias` is named, a bias of wd[0] values (seed `seed` + 1).
Node& padded_conv3x3(Builder& b, const std::string& name, const std::string& x, const std::string& w, Dims wd,
                     unsigned seed, float range, const std::string& bias, const std::string& y) {
  b.constant(w, random_tensor(wd, seed, -range, range));
  std::vector<std::string> in{x, w};
  if (!bias.empty()) {
    b.constant(bias, random_tensor({wd[0]}, seed + 1));
    in.push_back(bias);
  }
  Node& c = b.node(name, "Conv", std::move(in), y);
  set_ints(c, "pads", {1, 1, 1, 1});
  return c;
}

// A Conv and a MatMul: the model the no-device checks use.
Graph conv_matmul_model() {
  Builder b;
  b.input("x", {1, 3, 8, 8});
  padded_conv3x3(b, "conv", "x", "w", {4, 3, 3, 3}, 1, 0.5f, "b", "y");
  b.node("flat", "Flatten", {"y"}, "f");
  b.constant("m", random_tensor({256, 10}, 3, -0.1f, 0.1f));
  b.node("fc", "MatMul", {"f", "m"}, "z");
  return b.done({"z"});
}

// Whether this machine has a device, as the plugin reports it.
bool has_device() {
  static const bool yes = [] {
    CapabilityReport cap = client().capability(model_bytes(conv_matmul_model()));
    for (const auto& [i, why] : cap.refused) {
      if (why.rfind("no CUDA device", 0) == 0) return false;
    }
    return true;
  }();
  return yes;
}

class CudaBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!plugin_built()) GTEST_SKIP() << "the CUDA plugin is not built (" << plugin_path() << ")";
    ASSERT_NE(plugin(), nullptr) << "cannot load " << plugin_path();
  }
};

// --- the table ----------------------------------------------------------------------
TEST_F(CudaBackend, TableDeclaresDeviceMemoryAndItsFunctions) {
  const tessera_backend_t* t = plugin()->table();
  EXPECT_STREQ(t->name, "cuda");
  EXPECT_EQ(t->struct_size, sizeof(tessera_backend_t));
  EXPECT_EQ(t->memory, TESSERA_MEMORY_DEVICE);
  EXPECT_EQ(t->device_id, 0);
  EXPECT_NE(t->device_alloc, nullptr);
  EXPECT_NE(t->device_free, nullptr);
  EXPECT_NE(t->copy, nullptr);
  EXPECT_NE(t->synchronize, nullptr);
  EXPECT_EQ(t->threading, static_cast<uint32_t>(TESSERA_THREADING_CALLER));
  EXPECT_NE(t->flags & TESSERA_BACKEND_FLAG_CONCURRENT_RUN, 0u);
  EXPECT_TRUE(plugin()->on_device());
  ASSERT_NE(t->version, nullptr);
  std::string v = t->version();
  EXPECT_NE(v.find("cuDNN"), std::string::npos) << v;
  EXPECT_NE(v.find("cuBLASLt"), std::string::npos) << v;
}

// --- without a device -------------------------------------------------------------------
TEST_F(CudaBackend, WithoutADeviceEveryNodeIsRefusedAndCompileFails) {
  if (has_device()) GTEST_SKIP() << "this machine has a CUDA device";
  Graph g = conv_matmul_model();
  std::string model = model_bytes(g);
  CapabilityReport cap = client().capability(model);
  EXPECT_EQ(cap.status, TESSERA_OK) << cap.msg;
  EXPECT_TRUE(cap.supported.empty());
  ASSERT_EQ(cap.refused.size(), g.nodes.size());
  for (const auto& [i, why] : cap.refused) EXPECT_EQ(why.rfind("no CUDA device (", 0), 0u) << why;
  Compiled c = client().compile(model);
  EXPECT_EQ(c.status, TESSERA_ERROR_UNSUPPORTED);
  EXPECT_NE(c.msg.find("no CUDA device"), std::string::npos) << c.msg;
  EXPECT_TRUE(c.blob.empty());
  // The device functions fail the same way, and freeing nothing is harmless.
  const tessera_backend_t* t = plugin()->table();
  void* p = reinterpret_cast<void*>(1);
  char msg[256] = {0};
  EXPECT_EQ(t->device_alloc(1024, &p, msg, sizeof(msg)), TESSERA_ERROR_UNSUPPORTED);
  EXPECT_EQ(p, nullptr);
  EXPECT_NE(std::string(msg).find("no CUDA device"), std::string::npos) << msg;
  t->device_free(nullptr);
  EXPECT_NE(t->synchronize(msg, sizeof(msg)), TESSERA_OK);
  double us = 0;
  EXPECT_EQ(t->estimate_cost(model.data(), model.size(), 1, &us, msg, sizeof(msg)), TESSERA_ERROR_UNSUPPORTED);
  // A blob from elsewhere is refused without a crash.
  tessera_engine_t* e = nullptr;
  tessera_load_options_t opts{sizeof(tessera_load_options_t), 1, 0};
  EXPECT_NE(t->load("not a blob", 10, nullptr, 0, &opts, &e, msg, sizeof(msg)), TESSERA_OK);
  EXPECT_EQ(e, nullptr);
}

// A blob in the plugin's layout (version 2): magic, version, sm, cuDNN and cuBLASLt versions, region model, then the
// per-step convolution choices, here one step whose way is `path`.
std::string cuda_blob(int32_t path) {
  std::string b("TSRCUDA1", 8);
  auto u32 = [&](uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); };
  auto i64 = [&](int64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); };
  auto str = [&](const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    b += s;
  };
  u32(2);
  str("sm_90");
  u32(91900);
  u32(130100);
  str(model_bytes(conv_matmul_model()));
  u32(1);                            // one step
  u32(static_cast<uint32_t>(path));  // its way
  i64(7);                            // engine
  u32(0xffffffffu);                  // algo -1
  u32(0);                            // no knobs
  return b;
}

TEST_F(CudaBackend, BlobWithAnUnknownConvolutionWayIsRefusedByName) {
  const tessera_backend_t* t = plugin()->table();
  tessera_load_options_t opts{sizeof(tessera_load_options_t), 1, 0};
  char msg[512] = {0};
  tessera_engine_t* e = nullptr;
  std::string bad = cuda_blob(9);
  EXPECT_EQ(t->load(bad.data(), bad.size(), nullptr, 0, &opts, &e, msg, sizeof(msg)), TESSERA_ERROR_INCOMPATIBLE_BLOB);
  EXPECT_EQ(e, nullptr);
  EXPECT_NE(std::string(msg).find("convolution way 9"), std::string::npos) << msg;
  // Cut short inside the choices: refused, never read past the end.
  std::string good = cuda_blob(0);
  for (size_t cut : {good.size() - 1, good.size() - 9, good.size() - 21}) {
    EXPECT_NE(t->load(good.data(), cut, nullptr, 0, &opts, &e, msg, sizeof(msg)), TESSERA_OK) << cut;
    EXPECT_EQ(e, nullptr);
  }
  // Whole and well formed: it gets as far as the device (none here) or the machine check (another GPU/library).
  if (!has_device()) {
    EXPECT_EQ(t->load(good.data(), good.size(), nullptr, 0, &opts, &e, msg, sizeof(msg)), TESSERA_ERROR_UNSUPPORTED);
    EXPECT_NE(std::string(msg).find("no CUDA device"), std::string::npos) << msg;
  }
}

// --- with a device: the whole path against the native backend ------------------------------

// Every node claimed, compiled, loaded through the host (Backend::load) and run with host tensors (Engine::run),
// twice; |got - want| <= 1e-4 max(1, |want|). Returns the capability report.
CapabilityReport expect_matches_native(const Graph& g, const std::vector<Tensor>& inputs) {
  std::string model = model_bytes(g);
  CapabilityReport cap = client().capability(model);
  EXPECT_EQ(cap.status, TESSERA_OK) << cap.msg;
  for (const auto& [i, why] : cap.refused)
    ADD_FAILURE() << "node " << g.nodes[static_cast<size_t>(i)].name << ": " << why;
  if (!cap.refused.empty()) return cap;
  auto blob = plugin()->compile(model, "");
  EXPECT_TRUE(blob.ok()) << blob.status().message();
  if (!blob.ok()) return cap;
  std::vector<std::pair<std::string, Tensor>> constants(g.constants.begin(), g.constants.end());
  auto engine = plugin()->load(*blob, constants, 1, "test");
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  if (!engine.ok()) return cap;
  std::vector<Tensor> ref = native_outputs(g, inputs);
  for (int round = 0; round < 2; ++round) {
    std::vector<Tensor> out = output_buffers(g);
    std::vector<const Tensor*> in_ptrs;
    std::vector<Tensor*> out_ptrs;
    for (const Tensor& t : inputs) in_ptrs.push_back(&t);
    for (Tensor& t : out) out_ptrs.push_back(&t);
    Status s = (*engine)->run(in_ptrs, out_ptrs);
    EXPECT_TRUE(s.ok()) << s.message();
    if (!s.ok()) return cap;
    EXPECT_EQ(ref.size(), out.size());
    for (size_t k = 0; k < out.size() && k < ref.size(); ++k) {
      SCOPED_TRACE("output '" + g.outputs[k] + "', round " + std::to_string(round));
      EXPECT_EQ(out[k].dims(), ref[k].dims());
      int bad = 0;
      for (int64_t i = 0; i < ref[k].numel() && bad < 5; ++i) {
        double w = ref[k].as_double(i), a = out[k].as_double(i);
        if (!(std::fabs(a - w) <= 1e-4 * std::max(1.0, std::fabs(w)))) {
          ADD_FAILURE() << "at " << i << ": got " << a << ", native " << w;
          ++bad;
        }
      }
    }
  }
  return cap;
}

bool has_composite(const CapabilityReport& cap, const std::string& pattern) {
  for (const auto& [name, nodes] : cap.composites) {
    if (name == pattern) return true;
  }
  return false;
}

TEST_F(CudaBackend, MatMulAddReluMatchesCpuReference) {
  if (!has_device()) GTEST_SKIP() << "no CUDA device on this machine";
  Builder b;
  b.input("x", {4, 5, 32});
  b.constant("w", random_tensor({32, 24}, 11, -0.3f, 0.3f));
  b.constant("bias", random_tensor({24}, 12));
  b.node("mm", "MatMul", {"x", "w"}, "h");
  b.node("add", "Add", {"h", "bias"}, "a");
  b.node("relu", "Relu", {"a"}, "y");
  Graph g = b.done({"y"});
  CapabilityReport cap = expect_matches_native(g, {random_tensor({4, 5, 32}, 13)});
  EXPECT_TRUE(has_composite(cap, "MatMul+Add+Relu"));
}

// Restricts the plugin's convolution search to one way (cuda_dnn.cc) while in scope.
class ConvWays {
 public:
  explicit ConvWays(const char* ways) { setenv("TESSERA_CUDA_CONV_WAYS", ways, 1); }
  ~ConvWays() { unsetenv("TESSERA_CUDA_CONV_WAYS"); }
};

// Convolutions of every kind the plugin lowers, with and without its fusions.
Graph convolutions_model() {
  Builder b;
  b.input("x", {2, 8, 12, 11});
  padded_conv3x3(b, "c1", "x", "w1", {8, 8, 3, 3}, 21, 0.3f, "b1", "y1");
  b.node("r1", "Relu", {"y1"}, "a1");                                     // Conv+Relu
  padded_conv3x3(b, "c2", "a1", "w2", {8, 8, 3, 3}, 23, 0.3f, "", "y2");  // no bias
  b.node("res", "Add", {"y2", "x"}, "s2");
  b.node("r2", "Relu", {"s2"}, "a2");  // Conv+Add+Relu
  b.constant("w3", random_tensor({8, 1, 3, 3}, 24, -0.3f, 0.3f));
  b.constant("b3", random_tensor({8}, 25));
  Node& c3 = b.node("dw", "Conv", {"a2", "w3", "b3"}, "y3");  // depthwise, SAME_UPPER stride 2: asymmetric pads
  set_int(c3, "group", 8);
  set_ints(c3, "strides", {2, 2});
  set_string(c3, "auto_pad", "SAME_UPPER");
  b.constant("w4", random_tensor({6, 4, 1, 1}, 26, -0.3f, 0.3f));
  b.constant("b4", random_tensor({6}, 27));
  Node& c4 = b.node("grouped", "Conv", {"y3", "w4", "b4"}, "y4");  // grouped 1x1, bias, no activation
  set_int(c4, "group", 2);
  b.constant("lo", Tensor::Scalar<float>(0.0f));
  b.constant("hi", Tensor::Scalar<float>(0.75f));
  b.node("clip", "Clip", {"y4", "lo", "hi"}, "y5");  // ReLU6-like: a chain after the bias
  b.constant("wt", random_tensor({6, 3, 3, 3}, 28, -0.3f, 0.3f));
  b.constant("bt", random_tensor({3}, 29));
  Node& ct = b.node("up", "ConvTranspose", {"y5", "wt", "bt"}, "y6");
  set_ints(ct, "strides", {2, 2});
  set_ints(ct, "pads", {1, 1, 1, 1});
  set_ints(ct, "output_padding", {1, 1});
  return b.done({"a2", "y6"});
}

TEST_F(CudaBackend, ConvolutionsWithFusionsMatchNative) {
  if (!has_device()) GTEST_SKIP() << "no CUDA device on this machine";
  CapabilityReport cap = expect_matches_native(convolutions_model(), {random_tensor({2, 8, 12, 11}, 20)});
  EXPECT_TRUE(has_composite(cap, "Conv+Relu"));
  EXPECT_TRUE(has_composite(cap, "Conv+Add+Relu"));
}

// Each way on its own: the graph API (fused where cuDNN has an engine for the fusion) and the legacy API.
TEST_F(CudaBackend, ConvolutionsMatchNativeOnTheGraphApiAlone) {
  if (!has_device()) GTEST_SKIP() << "no CUDA device on this machine";
  ConvWays only("graph");
  expect_matches_native(convolutions_model(), {random_tensor({2, 8, 12, 11}, 20)});
}

TEST_F(CudaBackend, ConvolutionsMatchNativeOnTheLegacyApiAlone) {
  if (!has_device()) GTEST_SKIP() << "no CUDA device on this machine";
  ConvWays only("legacy");
  expect_matches_native(convolutions_model(), {random_tensor({2, 8, 12, 11}, 20)});
}

TEST_F(CudaBackend, PoolsAndReductionsMatchNative) {
  if (!has_device()) GTEST_SKIP() << "no CUDA device on this machine";
  Builder b;
  b.input("x", {2, 4, 15, 12});
  Node& mp = b.node("mp", "MaxPool", {"x"}, "m");
  set_ints(mp, "kernel_shape", {3, 3});
  set_ints(mp, "strides", {2, 2});
  set_ints(mp, "pads", {1, 1, 1, 1});
  Node& ap = b.node("ap", "AveragePool", {"x"}, "a");
  set_ints(ap, "kernel_shape", {2, 2});
  set_ints(ap, "strides", {2, 2});
  set_int(ap, "ceil_mode", 1);
  b.node("gap", "GlobalAveragePool", {"x"}, "g");
  b.node("gmp", "GlobalMaxPool", {"x"}, "gm");
  Node& rm = b.node("rm", "ReduceMean", {"x"}, "r");
  set_ints(rm, "axes", {2, 3});
  set_int(rm, "keepdims", 0);
  b.constant("axes", Tensor::FromVector<int64_t>({1}, {1}));
  b.node("rs", "ReduceSum", {"x", "axes"}, "rs");
  Graph g = b.done({"m", "a", "g", "gm", "r", "rs"});
  expect_matches_native(g, {random_tensor({2, 4, 15, 12}, 30)});
}

TEST_F(CudaBackend, TransformerBlockPiecesMatchNative) {
  if (!has_device()) GTEST_SKIP() << "no CUDA device on this machine";
  Builder b(20);
  b.input("x", {2, 4, 16});
  b.constant("wq", random_tensor({16, 16}, 41, -0.3f, 0.3f));
  b.constant("bq", random_tensor({16}, 42));
  b.node("q", "MatMul", {"x", "wq"}, "q0");
  b.node("qb", "Add", {"q0", "bq"}, "q1");
  b.constant("shape", Tensor::FromVector<int64_t>({2, 4, 2, 8}, {4}));
  b.node("split_heads", "Reshape", {"q1", "shape"}, "q2");
  Node& tr = b.node("tr", "Transpose", {"q2"}, "q3");  // [2, 2, 4, 8]
  set_ints(tr, "perm", {0, 2, 1, 3});
  Node& trk = b.node("trk", "Transpose", {"q2"}, "k3");  // [2, 2, 8, 4]
  set_ints(trk, "perm", {0, 2, 3, 1});
  b.node("scores", "MatMul", {"q3", "k3"}, "s");  // batched [2,2,4,4]
  Node& sm = b.node("softmax", "Softmax", {"s"}, "p");
  set_int(sm, "axis", -1);
  b.node("ctx", "MatMul", {"p", "q3"}, "c");  // [2,2,4,8]
  b.constant("ln_s", random_tensor({16}, 43));
  b.constant("ln_b", random_tensor({16}, 44));
  Node& ln = b.node("ln", "LayerNormalization", {"x", "ln_s", "ln_b"}, "n");
  set_int(ln, "axis", -1);
  // The erf Gelu as PyTorch exports it: one chain.
  b.constant("sqrt2", Tensor::Scalar<float>(1.4142135f));
  b.constant("one", Tensor::Scalar<float>(1.0f));
  b.constant("half", Tensor::Scalar<float>(0.5f));
  b.node("g_div", "Div", {"n", "sqrt2"}, "g1");
  b.node("g_erf", "Erf", {"g1"}, "g2");
  b.node("g_add", "Add", {"g2", "one"}, "g3");
  b.node("g_mul", "Mul", {"n", "g3"}, "g4");
  b.node("g_half", "Mul", {"g4", "half"}, "g5");
  b.constant("wo", random_tensor({16, 8}, 45, -0.3f, 0.3f));
  b.constant("bo", random_tensor({8}, 46));
  b.node("o", "MatMul", {"g5", "wo"}, "o0");
  b.node("ob", "Add", {"o0", "bo"}, "o1");
  Node& gt = b.node("gelu_tanh", "Gelu", {"o1"}, "o2");  // MatMul+Add+Gelu(tanh): the GELU_BIAS epilogue
  set_string(gt, "approximate", "tanh");
  b.constant("wg", random_tensor({16, 8}, 47, -0.3f, 0.3f));
  b.constant("bg", random_tensor({8}, 48));
  b.node("gm", "MatMul", {"x", "wg"}, "e0");
  b.node("gb", "Add", {"e0", "bg"}, "e1");
  b.node("gelu_erf", "Gelu", {"e1"}, "e2");  // bias epilogue, then a chain
  Graph g = b.done({"c", "o2", "e2"});
  CapabilityReport cap = expect_matches_native(g, {random_tensor({2, 4, 16}, 40)});
  EXPECT_TRUE(has_composite(cap, "MatMul+Add+Gelu"));
}

TEST_F(CudaBackend, GemmAndElementwiseChainsMatchNative) {
  if (!has_device()) GTEST_SKIP() << "no CUDA device on this machine";
  Builder b;
  b.input("a", {6, 10});
  b.input("c", {1, 7});
  b.constant("bt", random_tensor({7, 10}, 51, -0.3f, 0.3f));
  Node& g1 = b.node("g1", "Gemm", {"a", "bt", "c"}, "y1");  // transB, C broadcast from an input, alpha, beta
  set_int(g1, "transB", 1);
  set_float(g1, "alpha", 0.5f);
  set_float(g1, "beta", 2.0f);
  b.constant("at", random_tensor({10, 6}, 52, -0.3f, 0.3f));
  b.constant("cb", random_tensor({7}, 53));
  b.constant("b2", random_tensor({10, 7}, 54, -0.3f, 0.3f));
  Node& g2 = b.node("g2", "Gemm", {"at", "b2", "cb"}, "y2");  // transA, C as a bias, Relu epilogue
  set_int(g2, "transA", 1);
  set_float(g2, "beta", 0.5f);
  b.node("g2r", "Relu", {"y2"}, "y3");
  b.node("sum", "Add", {"y1", "y3"}, "s1");
  b.node("sig", "Sigmoid", {"s1"}, "s2");
  b.constant("slope", random_tensor({7}, 55, 0.0f, 0.5f));
  b.node("prelu", "PRelu", {"s1", "slope"}, "s3");
  b.node("mul", "Mul", {"s2", "s3"}, "s4");
  b.node("hs", "HardSwish", {"s4"}, "s5");
  Node& lr = b.node("lr", "LeakyRelu", {"s5"}, "s6");
  set_float(lr, "alpha", 0.2f);
  b.node("tanh", "Tanh", {"s6"}, "s7");
  Graph g = b.done({"s7"});
  expect_matches_native(g, {random_tensor({6, 10}, 50), random_tensor({1, 7}, 56)});
}

TEST_F(CudaBackend, TensorMovementMatchesNative) {
  if (!has_device()) GTEST_SKIP() << "no CUDA device on this machine";
  Builder b;
  b.input("x", {2, 3, 6, 5});
  b.input("idx", {3}, DType::kInt64);
  b.constant("bn_s", random_tensor({3}, 61, 0.5f, 1.5f));
  b.constant("bn_b", random_tensor({3}, 62));
  b.constant("bn_m", random_tensor({3}, 63));
  b.constant("bn_v", random_tensor({3}, 64, 0.5f, 1.5f));
  b.node("bn", "BatchNormalization", {"x", "bn_s", "bn_b", "bn_m", "bn_v"}, "n");
  b.constant("starts", Tensor::FromVector<int64_t>({5, 1}, {2}));
  b.constant("ends", Tensor::FromVector<int64_t>({-100, 3}, {2}));
  b.constant("axes", Tensor::FromVector<int64_t>({2, 3}, {2}));
  b.constant("steps", Tensor::FromVector<int64_t>({-2, 1}, {2}));
  b.node("slice", "Slice", {"n", "starts", "ends", "axes", "steps"}, "sl");  // [2,3,3,2]
  Node& cat = b.node("cat", "Concat", {"sl", "sl"}, "cc");                   // [2,3,3,4]
  set_int(cat, "axis", 3);
  b.constant("split", Tensor::FromVector<int64_t>({1, 2}, {2}));
  Node& sp = b.node("split", "Split", {"n", "split"}, "p0");
  sp.outputs = {"p0", "p1"};
  set_int(sp, "axis", 1);
  b.constant("gi", Tensor::FromVector<int64_t>({4, 0, -1}, {3}));
  Node& ga = b.node("gather", "Gather", {"p1", "gi"}, "gt");  // initializer indices
  set_int(ga, "axis", 3);
  Node& gb = b.node("gather2", "Gather", {"x", "idx"}, "gx");  // int64 input indices
  set_int(gb, "axis", 2);
  b.constant("eshape", Tensor::FromVector<int64_t>({2, 2, 1, 1}, {4}));
  b.node("expand", "Expand", {"p0", "eshape"}, "ex");
  b.constant("reps", Tensor::FromVector<int64_t>({1, 2, 1, 2}, {4}));
  b.node("tile", "Tile", {"p0", "reps"}, "tl");
  b.constant("pads", Tensor::FromVector<int64_t>({0, 0, 1, -1, 0, 1, 2, 0}, {8}));
  b.constant("pv", Tensor::Scalar<float>(0.25f));
  b.node("pad", "Pad", {"x", "pads", "pv"}, "pd");
  b.constant("scales", Tensor::FromVector<float>({1, 1, 2, 1.5f}, {4}));
  b.constant("roi", Tensor::FromVector<float>({}, {0}));
  Node& rz = b.node("resize", "Resize", {"x", "roi", "scales"}, "rz");
  set_string(rz, "mode", "linear");
  Node& rn = b.node("resize_n", "Resize", {"x", "roi", "scales"}, "rn");
  set_string(rn, "mode", "nearest");
  set_string(rn, "coordinate_transformation_mode", "asymmetric");
  set_string(rn, "nearest_mode", "floor");
  b.node("flat", "Flatten", {"cc"}, "fl");  // an alias that is a graph output: a copy
  Graph g = b.done({"cc", "gt", "gx", "ex", "tl", "pd", "rz", "rn", "fl"});
  Tensor idx = Tensor::FromVector<int64_t>({5, 0, 2}, {3});
  expect_matches_native(g, {random_tensor({2, 3, 6, 5}, 60), idx});
}

TEST_F(CudaBackend, DeviceBuffersCopyAndSynchronize) {
  if (!has_device()) GTEST_SKIP() << "no CUDA device on this machine";
  const tessera_backend_t* t = plugin()->table();
  char msg[256] = {0};
  void* d = nullptr;
  ASSERT_EQ(t->device_alloc(4096, &d, msg, sizeof(msg)), TESSERA_OK) << msg;
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % 256, 0u);
  std::vector<float> in(1024), out(1024, 0.0f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) * 0.5f;
  ASSERT_EQ(t->copy(d, in.data(), 4096, TESSERA_COPY_HOST_TO_DEVICE, msg, sizeof(msg)), TESSERA_OK) << msg;
  ASSERT_EQ(t->copy(out.data(), d, 4096, TESSERA_COPY_DEVICE_TO_HOST, msg, sizeof(msg)), TESSERA_OK) << msg;
  ASSERT_EQ(t->synchronize(msg, sizeof(msg)), TESSERA_OK) << msg;
  EXPECT_EQ(in, out);
  t->device_free(d);
  void* huge = nullptr;
  EXPECT_EQ(t->device_alloc(size_t{1} << 50, &huge, msg, sizeof(msg)), TESSERA_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(std::string(msg).find("1125899906842624"), std::string::npos) << msg;
  // A price for a region on this GPU, boundary copies included.
  std::string model = model_bytes(conv_matmul_model());
  double us = 0;
  ASSERT_EQ(t->estimate_cost(model.data(), model.size(), 1, &us, msg, sizeof(msg)), TESSERA_OK) << msg;
  EXPECT_GT(us, 0.0);
}

}  // namespace
}  // namespace tessera
