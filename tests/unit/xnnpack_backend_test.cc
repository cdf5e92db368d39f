// The XNNPACK backend plugin (backends/xnnpack), driven through the C ABI as
// the host drives it: dlopen, query, capability, compile, load with the
// region's constants, run. Graphs are built in the IR, shape-inferred and
// exported with export_onnx_bytes (the bytes a plugin receives); every result
// is compared with the native backend's (InferenceSession) on the same graph,
// within 1e-4 relative. Inside a region the plugin keeps 4-D values NHWC and
// converts at the boundary, so the layout-sensitive cases (a reshape after a
// convolution, a value needed in both layouts, broadcasting against NHWC)
// have tests of their own.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "onnx/onnx_export.h"
#include "passes/shape_inference.h"
#include "runtime/session.h"
#include "tessera/backend.h"
#include "unit/op_test_util.h"
#include "unit/plugin_test_util.h"

namespace tessera {
namespace {

using plugintest::Builder;
using plugintest::bytes_differ;
using plugintest::CapabilityReport;
using plugintest::Compiled;
using plugintest::int8_tensor;
using plugintest::Loaded;
using plugintest::model_bytes;
using plugintest::native_outputs;
using plugintest::output_buffers;
using plugintest::random_tensor;
using plugintest::scalar_tensor;
using testutil::set_float;
using testutil::set_int;
using testutil::set_ints;
using testutil::set_string;

// Built into <build>/lib/tessera/, where `tessera` looks for plugins.
std::string plugin_path() { return plugintest::beside_test_binary("../lib/tessera/libtessera_backend_xnnpack.so"); }

tessera_backend_query_fn query_fn() {
  static tessera_backend_query_fn fn = [] {
    void* h = dlopen(plugin_path().c_str(), RTLD_NOW | RTLD_LOCAL);  // kept loaded for the whole run
    return h ? reinterpret_cast<tessera_backend_query_fn>(dlsym(h, TESSERA_BACKEND_QUERY_SYMBOL)) : nullptr;
  }();
  return fn;
}

const tessera_backend_t* table() { return query_fn() ? query_fn()(TESSERA_BACKEND_ABI_VERSION) : nullptr; }

const plugintest::PluginClient& client() {
  static const plugintest::PluginClient c(table());
  return c;
}
CapabilityReport capability(const std::string& model) { return client().capability(model); }
Compiled compile(const std::string& model, const char* options = "") { return client().compile(model, options); }
Loaded load(const std::string& blob, const std::unordered_map<std::string, Tensor>& constants, int threads = 1) {
  return client().load(blob, constants, threads);
}
tessera_status_t run(tessera_engine_t* e, const std::vector<Tensor>& in, std::vector<Tensor>& out,
                     std::string* msg = nullptr) {
  return client().run(e, in, out, msg);
}

// |got - want| <= 1e-4 |want| + 1e-5 for every element.
void expect_close_rel(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dims(), want.dims());
  int bad = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    double a = got.as_double(i), b = want.as_double(i);
    bool ok = std::isnan(b) ? std::isnan(a) : std::fabs(a - b) <= 1e-4 * std::fabs(b) + 1e-5;
    if (!ok && bad++ < 5) ADD_FAILURE() << "at " << i << ": " << a << " vs native " << b;
  }
  EXPECT_EQ(bad, 0);
}

// The whole path, checked against the native backend: every node claimed,
// compiled, loaded (with `threads`) and run. `bit_exact`: every output of
// native's type and bytes (the quantized ops, where native computes ONNX
// Runtime's bits), else within expect_close_rel.
void expect_matches_native(const Graph& g, const std::vector<Tensor>& inputs, int threads = 1, bool bit_exact = false) {
  std::string model = model_bytes(g);
  CapabilityReport cap = capability(model);
  ASSERT_EQ(cap.status, TESSERA_OK) << cap.msg;
  ASSERT_TRUE(cap.refused.empty()) << "node " << cap.refused.begin()->first << ": " << cap.refused.begin()->second;
  Compiled c = compile(model);
  ASSERT_EQ(c.status, TESSERA_OK) << c.msg;
  Loaded l = load(c.blob, g.constants, threads);
  ASSERT_EQ(l.status, TESSERA_OK) << l.msg;
  std::vector<Tensor> out = output_buffers(g);
  std::string msg;
  ASSERT_EQ(run(l.engine.get(), inputs, out, &msg), TESSERA_OK) << msg;
  std::vector<Tensor> ref = native_outputs(g, inputs);
  ASSERT_EQ(ref.size(), out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    SCOPED_TRACE("output '" + g.outputs[i] + "'");
    if (bit_exact) {
      EXPECT_EQ(out[i].dtype(), ref[i].dtype());
      EXPECT_EQ(bytes_differ(out[i], ref[i]), 0) << "of " << ref[i].numel();
    } else {
      expect_close_rel(out[i], ref[i]);
    }
  }
}

// The reason capability gives for node `index` of `g` ("" when claimed).
std::string refusal(const Graph& g, int index) {
  CapabilityReport cap = capability(model_bytes(g));
  EXPECT_EQ(cap.status, TESSERA_OK) << cap.msg;
  auto it = cap.refused.find(index);
  return it == cap.refused.end() ? "" : it->second;
}

class XnnpackBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    // Built with the tests when XNNPACK is installed (backends/xnnpack/CMakeLists.txt).
    ASSERT_NE(query_fn(), nullptr) << "cannot load " << plugin_path() << ": " << (dlerror() ? dlerror() : "");
    ASSERT_NE(table(), nullptr);
  }
};

// A Conv node on input `x` with weights `w` [m, c/group, k, k] and a bias.
Node& conv(Builder& b, const std::string& name, const std::string& x, const std::string& y, int64_t c, int64_t m,
           int64_t k, int64_t group, unsigned seed, bool bias = true) {
  b.constant(name + ".w", random_tensor({m, c / group, k, k}, seed, -0.5f, 0.5f));
  std::vector<std::string> ins{x, name + ".w"};
  if (bias) {
    b.constant(name + ".b", random_tensor({m}, seed + 1));
    ins.push_back(name + ".b");
  }
  Node& n = b.node(name, "Conv", ins, y);
  if (group > 1) set_int(n, "group", group);
  return n;
}

// --- query -------------------------------------------------------------------
TEST_F(XnnpackBackend, QueryServesOnlyItsAbiVersion) {
  EXPECT_EQ(query_fn()(TESSERA_BACKEND_ABI_VERSION + 1), nullptr);
  EXPECT_EQ(query_fn()(0), nullptr);
  const tessera_backend_t* t = table();
  EXPECT_EQ(t->abi_version, TESSERA_BACKEND_ABI_VERSION);
  EXPECT_EQ(t->struct_size, sizeof(tessera_backend_t));
  EXPECT_STREQ(t->name, "xnnpack");
  ASSERT_NE(t->version, nullptr);
  EXPECT_NE(std::string(t->version()).find("XNNPACK"), std::string::npos);
  EXPECT_EQ(t->flags & TESSERA_BACKEND_FLAG_CONCURRENT_RUN, 0u) << "an XNNPACK runtime is not reentrant";
  EXPECT_NE(t->estimate_cost, nullptr);
}

// --- convolutions ------------------------------------------------------------------
TEST_F(XnnpackBackend, ConvWithPadsStridesDilationsAndAutoPadMatchesNative) {
  Builder b;
  b.input("x", {2, 3, 11, 13});
  Node& c1 = conv(b, "c1", "x", "y1", 3, 8, 3, 1, 1);  // pads 1
  set_ints(c1, "pads", {1, 1, 1, 1});
  Node& c2 = conv(b, "c2", "x", "y2", 3, 4, 3, 1, 3);  // stride 2, asymmetric pads
  set_ints(c2, "strides", {2, 2});
  set_ints(c2, "pads", {0, 1, 2, 0});
  Node& c3 = conv(b, "c3", "x", "y3", 3, 5, 3, 1, 5);  // dilation 2
  set_ints(c3, "dilations", {2, 2});
  set_ints(c3, "pads", {2, 1, 2, 1});
  Node& c4 = conv(b, "c4", "x", "y4", 3, 6, 3, 1, 7, /*bias=*/false);  // SAME_UPPER, stride 2
  set_string(c4, "auto_pad", "SAME_UPPER");
  set_ints(c4, "strides", {2, 2});
  Node& c5 = conv(b, "c5", "x", "y5", 3, 6, 4, 1, 9);  // SAME_LOWER with an even kernel
  set_string(c5, "auto_pad", "SAME_LOWER");
  conv(b, "c6", "x", "y6", 3, 7, 1, 1, 11);  // 1x1
  Graph g = b.done({"y1", "y2", "y3", "y4", "y5", "y6"});
  expect_matches_native(g, {random_tensor({2, 3, 11, 13}, 12)});
}

TEST_F(XnnpackBackend, GroupedAndDepthwiseConvMatchNative) {
  Builder b;
  b.input("x", {1, 8, 9, 9});
  conv(b, "grouped", "x", "g", 8, 12, 3, 4, 1);              // 4 groups of 2 -> 3
  Node& dw = conv(b, "depthwise", "x", "d", 8, 8, 3, 8, 3);  // one filter per channel
  set_ints(dw, "pads", {1, 1, 1, 1});
  Node& dw2 = conv(b, "depthwise_x2", "x", "d2", 8, 16, 5, 8, 5);  // depth multiplier 2
  set_ints(dw2, "strides", {2, 2});
  set_ints(dw2, "pads", {2, 2, 2, 2});
  Graph g = b.done({"g", "d", "d2"});
  expect_matches_native(g, {random_tensor({1, 8, 9, 9}, 7)});
}

TEST_F(XnnpackBackend, ConvFollowedByReluOrClipIsAComposite) {
  Builder b;
  b.input("x", {1, 4, 8, 8});
  conv(b, "c1", "x", "a", 4, 8, 3, 1, 1);
  b.node("relu", "Relu", {"a"}, "r");
  conv(b, "c2", "r", "c", 8, 8, 1, 1, 3);
  b.constant("lo", Tensor::Scalar(0.f)).constant("hi", Tensor::Scalar(0.5f));
  b.node("clip", "Clip", {"c", "lo", "hi"}, "y");
  Graph g = b.done({"y"});
  CapabilityReport cap = capability(model_bytes(g));
  ASSERT_EQ(cap.status, TESSERA_OK) << cap.msg;
  ASSERT_EQ(cap.composites.size(), 2u);
  EXPECT_EQ(cap.composites[0].first, "Conv+Relu");
  EXPECT_EQ(cap.composites[0].second, (std::vector<int>{0, 1}));
  EXPECT_EQ(cap.composites[1].first, "Conv+Clip");
  EXPECT_EQ(cap.composites[1].second, (std::vector<int>{2, 3}));
  expect_matches_native(g, {random_tensor({1, 4, 8, 8}, 2)});
}

TEST_F(XnnpackBackend, ActivationWhoseInputIsAlsoAnOutputStaysUnfused) {
  Builder b;
  b.input("x", {1, 3, 6, 6});
  conv(b, "c", "x", "a", 3, 4, 3, 1, 1);
  b.node("relu", "Relu", {"a"}, "r");
  Graph g = b.done({"r", "a"});  // the conv's own output leaves the region too
  CapabilityReport cap = capability(model_bytes(g));
  EXPECT_TRUE(cap.composites.empty());
  expect_matches_native(g, {random_tensor({1, 3, 6, 6}, 3)});
}

TEST_F(XnnpackBackend, ConvTransposeVariantsMatchNative) {
  Builder b;
  b.input("x", {1, 4, 5, 6});
  b.constant("w", random_tensor({4, 3, 3, 3}, 1, -0.5f, 0.5f)).constant("bias", random_tensor({3}, 2));
  b.constant("wg", random_tensor({4, 2, 2, 2}, 3, -0.5f, 0.5f));
  Node& d1 = b.node("d1", "ConvTranspose", {"x", "w", "bias"}, "y1");  // stride 2, pads, output_padding
  set_ints(d1, "strides", {2, 2});
  set_ints(d1, "pads", {1, 0, 1, 1});
  set_ints(d1, "output_padding", {1, 0});
  Node& d2 = b.node("d2", "ConvTranspose", {"x", "wg"}, "y2");  // 2 groups, dilation 2, no bias
  set_int(d2, "group", 2);
  set_ints(d2, "dilations", {2, 2});
  Node& d3 = b.node("d3", "ConvTranspose", {"x", "w", "bias"}, "y3");  // output_shape given
  set_ints(d3, "strides", {2, 2});
  set_ints(d3, "output_shape", {10, 12});
  Graph g = b.done({"y1", "y2", "y3"});
  expect_matches_native(g, {random_tensor({1, 4, 5, 6}, 4)});
}

TEST_F(XnnpackBackend, OneDimensionalWindowsRunAsTwoDimensionalAndMatchNative) {
  // NCW values are NWC inside; a 1-D window is a 2-D one of height 1.
  Builder b;
  b.input("x", {2, 4, 17}).input("k", {6, 1});
  b.constant("w", random_tensor({6, 2, 3}, 1, -0.5f, 0.5f)).constant("bias", random_tensor({6}, 2));
  Node& c = b.node("conv1d", "Conv", {"x", "w", "bias"}, "c");  // 2 groups, stride 2, pads
  set_int(c, "group", 2);
  set_ints(c, "strides", {2});
  set_ints(c, "pads", {1, 2});
  b.constant("dw", random_tensor({4, 1, 5}, 3, -0.5f, 0.5f));
  Node& d = b.node("depthwise1d", "Conv", {"x", "dw"}, "d");
  set_int(d, "group", 4);
  set_string(d, "auto_pad", "SAME_UPPER");
  b.node("add_runtime_channel", "Add", {"c", "k"}, "a");  // [6,1] broadcasts along C of NWC
  b.constant("scale", random_tensor({6}, 4)).constant("shift", random_tensor({6}, 5));
  b.constant("mean", random_tensor({6}, 6)).constant("var", random_tensor({6}, 7, 0.5f, 2));
  b.node("bn1d", "BatchNormalization", {"a", "scale", "shift", "mean", "var"}, "n");
  Node& mp = b.node("maxpool1d", "MaxPool", {"n"}, "m");
  set_ints(mp, "kernel_shape", {3});
  set_ints(mp, "pads", {1, 1});
  Node& ap = b.node("avgpool1d", "AveragePool", {"d"}, "p");
  set_ints(ap, "kernel_shape", {2});
  set_ints(ap, "strides", {2});
  set_int(ap, "ceil_mode", 1);
  b.node("gap1d", "GlobalAveragePool", {"m"}, "g");
  b.constant("wt", random_tensor({4, 3, 2}, 8, -0.5f, 0.5f));
  Node& t = b.node("deconv1d", "ConvTranspose", {"x", "wt"}, "t");
  set_ints(t, "strides", {2});
  b.constant("pads", testutil::i64({0, 1, 2, 0, 0, 1}));
  b.node("pad1d", "Pad", {"m", "pads"}, "q");
  Graph g = b.done({"m", "p", "g", "t", "q"});
  expect_matches_native(g, {random_tensor({2, 4, 17}, 9), random_tensor({6, 1}, 10)});
}

// --- fully connected -------------------------------------------------------------
TEST_F(XnnpackBackend, GemmAndMatMulWithConstantWeightsMatchNative) {
  Builder b;
  b.input("a", {4, 6}).input("a3", {2, 3, 6}).input("c_run", {4, 5});
  b.constant("b", random_tensor({6, 5}, 1)).constant("bt", random_tensor({5, 6}, 2));
  b.constant("c_row", random_tensor({5}, 3)).constant("c_mat", random_tensor({4, 5}, 4));
  b.constant("c_col", random_tensor({4, 1}, 5)).constant("c_scalar", Tensor::Scalar(0.25f));
  b.node("g_plain", "Gemm", {"a", "b", "c_row"}, "y1");
  Node& g2 = b.node("g_tb", "Gemm", {"a", "bt", "c_row"}, "y2");
  set_int(g2, "transB", 1);
  set_float(g2, "alpha", 0.5f);
  set_float(g2, "beta", 2.f);
  b.node("g_mat", "Gemm", {"a", "b", "c_mat"}, "y3");
  Node& g4 = b.node("g_col", "Gemm", {"a", "b", "c_col"}, "y4");
  set_float(g4, "beta", -1.5f);
  b.node("g_scalar", "Gemm", {"a", "b", "c_scalar"}, "y5");
  b.node("g_no_c", "Gemm", {"a", "b"}, "y6");
  b.node("g_run_c", "Gemm", {"a", "b", "c_run"}, "y7");
  b.node("mm", "MatMul", {"a", "b"}, "y8");
  b.node("mm3", "MatMul", {"a3", "b"}, "y9");
  Graph g = b.done({"y1", "y2", "y3", "y4", "y5", "y6", "y7", "y8", "y9"});
  expect_matches_native(g, {random_tensor({4, 6}, 6), random_tensor({2, 3, 6}, 7), random_tensor({4, 5}, 8)});
}

TEST_F(XnnpackBackend, GemmReluIsACompositeAndMatchesNative) {
  Builder b;
  b.input("x", {3, 8}).constant("w", random_tensor({4, 8}, 1)).constant("c", random_tensor({4}, 2));
  Node& gemm = b.node("fc", "Gemm", {"x", "w", "c"}, "f");
  set_int(gemm, "transB", 1);
  b.node("relu", "Relu", {"f"}, "y");
  Graph g = b.done({"y"});
  CapabilityReport cap = capability(model_bytes(g));
  ASSERT_EQ(cap.composites.size(), 1u);
  EXPECT_EQ(cap.composites[0].first, "Gemm+Relu");
  expect_matches_native(g, {random_tensor({3, 8}, 3)});
}

// --- pooling ---------------------------------------------------------------------
TEST_F(XnnpackBackend, MaxAndAveragePoolsMatchNative) {
  Builder b;
  b.input("x", {1, 3, 10, 11});
  Node& m1 = b.node("max_pads", "MaxPool", {"x"}, "y1");
  set_ints(m1, "kernel_shape", {3, 3});
  set_ints(m1, "strides", {2, 2});
  set_ints(m1, "pads", {1, 1, 1, 1});
  Node& m2 = b.node("max_ceil", "MaxPool", {"x"}, "y2");
  set_ints(m2, "kernel_shape", {3, 2});
  set_ints(m2, "strides", {2, 2});
  set_int(m2, "ceil_mode", 1);
  Node& m3 = b.node("max_dilated", "MaxPool", {"x"}, "y3");
  set_ints(m3, "kernel_shape", {2, 2});
  set_ints(m3, "dilations", {2, 2});
  set_string(m3, "auto_pad", "SAME_UPPER");
  Node& a1 = b.node("avg_pads", "AveragePool", {"x"}, "y4");
  set_ints(a1, "kernel_shape", {3, 3});
  set_ints(a1, "pads", {1, 1, 1, 1});
  Node& a2 = b.node("avg_include_pad", "AveragePool", {"x"}, "y5");
  set_ints(a2, "kernel_shape", {3, 3});
  set_ints(a2, "pads", {1, 0, 2, 1});
  set_int(a2, "count_include_pad", 1);
  Node& a3 = b.node("avg_ceil", "AveragePool", {"x"}, "y6");
  set_ints(a3, "kernel_shape", {3, 3});
  set_ints(a3, "strides", {2, 2});
  set_int(a3, "ceil_mode", 1);
  b.node("gap", "GlobalAveragePool", {"x"}, "y7");
  b.node("gmp", "GlobalMaxPool", {"x"}, "y8");
  Graph g = b.done({"y1", "y2", "y3", "y4", "y5", "y6", "y7", "y8"});
  expect_matches_native(g, {random_tensor({1, 3, 10, 11}, 9)});
}

// --- elementwise -----------------------------------------------------------------
TEST_F(XnnpackBackend, BroadcastingBinariesMatchNative) {
  Builder b;
  b.input("x", {2, 3, 4}).input("y", {3, 1}).input("z", {2, 1, 4});
  b.constant("c", random_tensor({4}, 1)).constant("s", Tensor::Scalar(1.5f));
  b.node("add", "Add", {"x", "c"}, "a");  // [2,3,4] + [4]
  b.node("sub", "Sub", {"y", "a"}, "d");  // [3,1] - [2,3,4]
  b.node("mul", "Mul", {"d", "s"}, "m");  // times a scalar
  b.node("div", "Div", {"m", "z"}, "q");  // [2,3,4] / [2,1,4]
  b.node("max", "Max", {"q", "y"}, "mx");
  b.node("min", "Min", {"q", "c"}, "mn");
  b.node("sum3", "Sum", {"x", "y", "z"}, "su");
  b.node("mean3", "Mean", {"x", "y", "c"}, "me");
  b.node("max1", "Max", {"x"}, "m1");
  Graph g = b.done({"q", "mx", "mn", "su", "me", "m1"});
  expect_matches_native(g, {random_tensor({2, 3, 4}, 2), random_tensor({3, 1}, 3), random_tensor({2, 1, 4}, 4, 1, 2)});
}

TEST_F(XnnpackBackend, BinariesAgainstChannelsLastValuesMatchNative) {
  // After a convolution the value is NHWC inside the engine; per-channel
  // operands (a constant [C,1,1], a runtime [C,1,1], a full NCHW tensor) must
  // broadcast along C all the same.
  Builder b;
  b.input("x", {1, 3, 6, 7}).input("per_channel", {4, 1, 1}).input("full", {1, 4, 6, 7}).input("row", {7});
  conv(b, "c", "x", "a", 3, 4, 3, 1, 1).attrs["pads"] = testutil::ints_attr({1, 1, 1, 1});
  b.constant("k", random_tensor({4, 1, 1}, 2));
  b.node("add_const", "Add", {"a", "k"}, "p");
  b.node("mul_runtime", "Mul", {"p", "per_channel"}, "q");
  b.node("sub_full", "Sub", {"q", "full"}, "r");
  b.node("add_row", "Add", {"r", "row"}, "y");  // [7] runs along W: not a channel broadcast
  Graph g = b.done({"y"});
  expect_matches_native(g, {random_tensor({1, 3, 6, 7}, 3), random_tensor({4, 1, 1}, 4), random_tensor({1, 4, 6, 7}, 5),
                            random_tensor({7}, 6)});
}

TEST_F(XnnpackBackend, EachActivationMatchesNative) {
  Builder b;
  b.input("x", {2, 3, 4, 5}).input("pos", {2, 3, 4, 5});
  b.node("relu", "Relu", {"x"}, "relu");
  b.constant("lo", Tensor::Scalar(-0.5f)).constant("hi", Tensor::Scalar(1.f));
  b.node("clip", "Clip", {"x", "lo", "hi"}, "clip");
  b.node("clip_max_only", "Clip", {"x", "", "hi"}, "clip2");
  b.node("hardswish", "HardSwish", {"x"}, "hardswish");
  b.node("sigmoid", "Sigmoid", {"x"}, "sigmoid");
  set_float(b.node("elu", "Elu", {"x"}, "elu"), "alpha", 0.7f);
  set_float(b.node("leaky", "LeakyRelu", {"x"}, "leaky"), "alpha", 0.2f);
  Node& hs = b.node("hardsigmoid", "HardSigmoid", {"x"}, "hardsigmoid");
  set_float(hs, "alpha", 0.3f);
  b.node("abs", "Abs", {"x"}, "abs");
  b.node("neg", "Neg", {"x"}, "neg");
  b.node("floor", "Floor", {"x"}, "floor");
  b.node("ceil", "Ceil", {"x"}, "ceil");
  b.node("round", "Round", {"x"}, "round");
  b.node("sqrt", "Sqrt", {"pos"}, "sqrt");
  b.node("identity", "Identity", {"x"}, "identity");
  b.node("reciprocal", "Reciprocal", {"pos"}, "reciprocal");
  b.constant("two", Tensor::Scalar(2.f)).constant("half", Tensor::Scalar(0.5f));
  b.node("square", "Pow", {"x", "two"}, "square");
  b.node("root", "Pow", {"pos", "half"}, "root");
  Graph g = b.done({"relu", "clip", "clip2", "hardswish", "sigmoid", "elu", "leaky", "hardsigmoid", "abs", "neg",
                    "floor", "ceil", "round", "sqrt", "identity", "reciprocal", "square", "root"});
  expect_matches_native(g, {random_tensor({2, 3, 4, 5}, 1, -4, 4), random_tensor({2, 3, 4, 5}, 2, 0.01f, 9)});
}

TEST_F(XnnpackBackend, PReluAndBatchNormalizationMatchNative) {
  Builder b;
  b.input("x", {2, 3, 4, 5}).input("v", {3, 4, 5}).input("s_run", {5}).input("u", {2, 3, 5});
  b.constant("slope", random_tensor({3, 1, 1}, 1, 0, 0.5f)).constant("slope_w", random_tensor({5}, 2, 0, 0.5f));
  b.node("prelu_channel", "PRelu", {"x", "slope"}, "p1");  // XNNPACK's PRelu, NHWC
  b.node("prelu_last", "PRelu", {"v", "slope_w"}, "p2");   // max + slope * min
  b.node("prelu_runtime", "PRelu", {"v", "s_run"}, "p3");
  b.constant("slope_c", random_tensor({3}, 10, 0, 0.5f));
  b.node("prelu_legacy_channel", "PRelu", {"x", "slope_c"}, "p4");  // [3] along C, as converted models mean it
  b.node("prelu_legacy_channel_3d", "PRelu", {"u", "slope_c"}, "p5");
  b.constant("scale", random_tensor({3}, 3)).constant("bias", random_tensor({3}, 4));
  b.constant("mean", random_tensor({3}, 5)).constant("var", random_tensor({3}, 6, 0.5f, 2));
  set_float(b.node("bn", "BatchNormalization", {"x", "scale", "bias", "mean", "var"}, "bn"), "epsilon", 1e-3f);
  Graph g = b.done({"p1", "p2", "p3", "p4", "p5", "bn"});
  expect_matches_native(g, {random_tensor({2, 3, 4, 5}, 7), random_tensor({3, 4, 5}, 8), random_tensor({5}, 9),
                            random_tensor({2, 3, 5}, 11)});
}

// --- softmax, resize, depth-to-space, pad --------------------------------------------
TEST_F(XnnpackBackend, SoftmaxOverTheLastAxisMatchesNative) {
  Builder b;
  b.input("x", {2, 3, 7}).input("t", {2, 5, 1, 1});
  b.node("last", "Softmax", {"x"}, "y1");
  set_int(b.node("axis1_trailing_ones", "Softmax", {"t"}, "y2"), "axis", 1);
  Graph g = b.done({"y1", "y2"});
  expect_matches_native(g, {random_tensor({2, 3, 7}, 1, -5, 5), random_tensor({2, 5, 1, 1}, 2, -5, 5)});

  Builder old(11);  // before opset 13 the axis flattens [2,3,7] to [2,21]
  old.input("x", {2, 3, 7});
  set_int(old.node("coerced", "Softmax", {"x"}, "y"), "axis", 1);
  expect_matches_native(old.done({"y"}), {random_tensor({2, 3, 7}, 3, -5, 5)});
}

TEST_F(XnnpackBackend, BilinearResizeDepthToSpaceAndPadMatchNative) {
  Builder b;
  b.input("x", {1, 8, 5, 6});
  b.constant("roi", Tensor(DType::kFloat32, {0}));
  b.constant("up", testutil::f32({1, 1, 2, 2}, {4}));
  b.constant("sizes", testutil::i64({1, 8, 3, 4}));
  Node& r1 = b.node("half_pixel", "Resize", {"x", "roi", "up"}, "r1");
  set_string(r1, "mode", "linear");
  Node& r2 = b.node("align_corners", "Resize", {"x", "roi", "up"}, "r2");
  set_string(r2, "mode", "linear");
  set_string(r2, "coordinate_transformation_mode", "align_corners");
  Node& r3 = b.node("asymmetric", "Resize", {"x", "roi", "up"}, "r3");
  set_string(r3, "mode", "linear");
  set_string(r3, "coordinate_transformation_mode", "asymmetric");
  Node& r4 = b.node("down_sizes", "Resize", {"x", "roi", "", "sizes"}, "r4");
  set_string(r4, "mode", "linear");
  set_int(b.node("d2s", "DepthToSpace", {"x"}, "d2s"), "blocksize", 2);
  b.constant("pads", testutil::i64({0, 1, 2, 0, 0, 0, 1, 3})).constant("value", Tensor::Scalar(0.75f));
  b.node("pad", "Pad", {"x", "pads", "value"}, "pad");
  Graph g = b.done({"r1", "r2", "r3", "r4", "d2s", "pad"});
  expect_matches_native(g, {random_tensor({1, 8, 5, 6}, 1)});
}

TEST_F(XnnpackBackend, PadAfterConvPermutesItsPadsToChannelsLast) {
  Builder b;
  b.input("x", {1, 2, 5, 5});
  conv(b, "c", "x", "a", 2, 3, 3, 1, 1);
  b.constant("pads", testutil::i64({0, 1, 2, 3, 0, 2, 1, 0}));
  b.node("pad", "Pad", {"a", "pads"}, "y");
  Graph g = b.done({"y"});
  expect_matches_native(g, {random_tensor({1, 2, 5, 5}, 2)});
}

// --- layouts ---------------------------------------------------------------------
TEST_F(XnnpackBackend, FlattenAndReshapeAfterConvReadNchwOrder) {
  Builder b;
  b.input("x", {2, 3, 6, 6});
  conv(b, "c", "x", "a", 3, 4, 3, 1, 1);                         // [2,4,4,4], NHWC inside
  set_int(b.node("flatten", "Flatten", {"a"}, "f"), "axis", 1);  // needs NCHW order: a real transpose
  b.constant("w", random_tensor({64, 5}, 2));
  b.node("fc", "MatMul", {"f", "w"}, "y");
  b.constant("shape", testutil::i64({2, 4, 16}));
  b.node("reshape", "Reshape", {"a", "shape"}, "r");
  b.node("softmax", "Softmax", {"r"}, "s");
  conv(b, "c2", "a", "z", 4, 2, 1, 1, 3);  // the conv output is needed NHWC too
  Graph g = b.done({"y", "s", "z"});
  expect_matches_native(g, {random_tensor({2, 3, 6, 6}, 4)});
}

TEST_F(XnnpackBackend, GlobalPoolThenFlattenThenGemmMatchesNative) {
  // The classifier head of a CNN: [N,C,1,1] has the same memory order in both
  // layouts, so no conversion is needed on the way to the Gemm.
  Builder b;
  b.input("x", {2, 3, 8, 8});
  conv(b, "c", "x", "a", 3, 16, 3, 1, 1);
  b.node("relu", "Relu", {"a"}, "r");
  b.node("gap", "GlobalAveragePool", {"r"}, "p");
  b.node("flatten", "Flatten", {"p"}, "f");
  b.constant("w", random_tensor({10, 16}, 2)).constant("bias", random_tensor({10}, 3));
  set_int(b.node("fc", "Gemm", {"f", "w", "bias"}, "y"), "transB", 1);
  Graph g = b.done({"y"});
  expect_matches_native(g, {random_tensor({2, 3, 8, 8}, 5)});
}

TEST_F(XnnpackBackend, OutputsThatAreReadInsideAndChannelsLastOutputsMatchNative) {
  Builder b;
  b.input("x", {1, 3, 7, 7});
  conv(b, "c1", "x", "a", 3, 4, 3, 1, 1);  // exported NHWC -> NCHW, and read by c2
  conv(b, "c2", "a", "b", 4, 4, 3, 1, 2);
  b.node("sig", "Sigmoid", {"x"}, "s");  // plain, exported and read by the Add
  b.node("add", "Add", {"s", "x"}, "t");
  Graph g = b.done({"b", "a", "s", "t"});
  expect_matches_native(g, {random_tensor({1, 3, 7, 7}, 6)});
}

TEST_F(XnnpackBackend, ThreadedEngineGivesTheSameAnswerRunAfterRun) {
  Builder b;
  b.input("x", {1, 8, 16, 16});
  conv(b, "c1", "x", "a", 8, 16, 3, 1, 1).attrs["pads"] = testutil::ints_attr({1, 1, 1, 1});
  b.node("relu", "Relu", {"a"}, "r");
  conv(b, "c2", "r", "y", 16, 16, 3, 16, 3);
  b.node("gap", "GlobalAveragePool", {"y"}, "p");
  b.node("flatten", "Flatten", {"p"}, "f");
  b.constant("w", random_tensor({16, 4}, 4));
  b.node("fc", "MatMul", {"f", "w"}, "z");  // written straight into the host's buffer
  Graph g = b.done({"y", "z"});
  Compiled c = compile(model_bytes(g));
  ASSERT_EQ(c.status, TESSERA_OK) << c.msg;
  Loaded l = load(c.blob, g.constants, 2);
  ASSERT_EQ(l.status, TESSERA_OK) << l.msg;
  for (unsigned seed : {21u, 22u, 23u}) {
    std::vector<Tensor> in{random_tensor({1, 8, 16, 16}, seed)};
    std::vector<Tensor> out = output_buffers(g);  // a new output buffer every run
    ASSERT_EQ(run(l.engine.get(), in, out), TESSERA_OK);
    std::vector<Tensor> ref = native_outputs(g, in);
    ASSERT_EQ(ref.size(), 2u);
    expect_close_rel(out[0], ref[0]);
    expect_close_rel(out[1], ref[1]);
  }
}

// --- int8 --------------------------------------------------------------------------
// A per-channel (or per-tensor) weight scale of `m` values.
Tensor weight_scales(int64_t m, bool per_channel, unsigned seed) {
  Tensor ws(DType::kFloat32, per_channel ? Dims{m} : Dims{});
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < ws.numel(); ++i) ws.data<float>()[i] = 0.002f + 0.001f * static_cast<float>(rng() % 17);
  return ws;
}

// Weights' zero points: 0 for int8, 128 for uint8, per tensor or per channel.
Tensor weight_zero_points(DType wt, int64_t m, bool per_channel) {
  Tensor wz(wt, per_channel ? Dims{m} : Dims{});
  std::fill_n(wz.data<uint8_t>(), wz.numel(), static_cast<uint8_t>(wt == DType::kUInt8 ? 128 : 0));
  return wz;
}

Tensor int32_bias(int64_t m, unsigned seed) {
  Tensor bias(DType::kInt32, {m});
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < m; ++i) bias.data<int32_t>()[i] = static_cast<int32_t>(rng() % 4001) - 2000;
  return bias;
}

// QLinearConv on XNNPACK's int8 convolution, every element equal to native's: input and output signedness, zero
// points, per-tensor and per-channel scales, int8 weights and uint8 ones at 128, groups, depthwise, 1-D.
TEST_F(XnnpackBackend, QLinearConvIsXnnpackInt8AndEqualsNativeToTheBit) {
  struct QCase {
    const char* name;
    Dims x, w;
    DType xt, wt, yt;
    int x_zp, y_zp;
    bool per_channel, bias;
    std::function<void(Node&)> attrs;
  };
  const QCase cases[] = {
      {"u8_pad1_per_channel",
       {1, 8, 9, 9},
       {16, 8, 3, 3},
       DType::kUInt8,
       DType::kInt8,
       DType::kUInt8,
       131,
       119,
       true,
       true,
       [](Node& n) {
         set_ints(n, "pads", {1, 1, 1, 1});
       }},
      {"s8_stride2_per_tensor",
       {2, 6, 8, 7},
       {5, 6, 3, 3},
       DType::kInt8,
       DType::kInt8,
       DType::kInt8,
       -3,
       7,
       false,
       true,
       [](Node& n) {
         set_ints(n, "strides", {2, 2}), set_ints(n, "pads", {0, 1, 1, 0});
       }},
      {"u8_to_s8_no_bias_1x1",
       {1, 32, 5, 5},
       {48, 32, 1, 1},
       DType::kUInt8,
       DType::kInt8,
       DType::kInt8,
       0,
       0,
       true,
       false,
       [](Node&) {}},
      {"depthwise_u8_weights",
       {1, 16, 10, 10},
       {16, 1, 3, 3},
       DType::kUInt8,
       DType::kUInt8,
       DType::kUInt8,
       128,
       3,
       true,
       true,
       [](Node& n) {
         set_int(n, "group", 16), set_ints(n, "pads", {1, 1, 1, 1});
       }},
      {"groups2_dilated",
       {1, 4, 11, 11},
       {6, 2, 3, 3},
       DType::kUInt8,
       DType::kInt8,
       DType::kUInt8,
       17,
       200,
       false,
       true,
       [](Node& n) {
         set_int(n, "group", 2), set_ints(n, "dilations", {2, 2});
       }},
      {"conv1d_u8_weights_per_tensor",
       {2, 6, 20},
       {7, 6, 5},
       DType::kInt8,
       DType::kUInt8,
       DType::kUInt8,
       5,
       90,
       false,
       true,
       [](Node& n) {
         set_ints(n, "strides", {2}), set_ints(n, "pads", {2, 1});
       }},
  };
  unsigned seed = 400;
  for (const QCase& c : cases) {
    SCOPED_TRACE(c.name);
    const int64_t m = c.w[0];
    seed += 4;
    Builder b;
    b.input("x", c.x, c.xt)
        .constant("xs", scalar_tensor(DType::kFloat32, 0.02))
        .constant("xz", scalar_tensor(c.xt, c.x_zp))
        .constant("w", int8_tensor(c.wt, c.w, seed))
        .constant("ws", weight_scales(m, c.per_channel, seed + 1))
        .constant("wz", weight_zero_points(c.wt, m, c.per_channel))
        .constant("ys", scalar_tensor(DType::kFloat32, 0.37))
        .constant("yz", scalar_tensor(c.yt, c.y_zp));
    std::vector<std::string> in{"x", "xs", "xz", "w", "ws", "wz", "ys", "yz"};
    if (c.bias) b.constant("b", int32_bias(m, seed + 2)), in.push_back("b");
    c.attrs(b.node("qconv", "QLinearConv", in, "y"));
    expect_matches_native(b.done({"y"}), {int8_tensor(c.xt, c.x, seed + 3)}, 2, /*bit_exact=*/true);
  }
}

// QuantizeLinear -> QLinearConv -> a table -> a depthwise QLinearConv -> a two-operand table -> Flatten ->
// QLinearMatMul -> DequantizeLinear: one region of XNNPACK nodes and the plugin's own loops, with a uint8 output
// read inside too. Its input holds values on the quantization grid's half steps (ties, rounded to even).
Graph quantized_graph() {
  Builder b;
  b.input("x", {1, 4, 9, 9});
  b.constant("qs", scalar_tensor(DType::kFloat32, 0.05)).constant("qz", scalar_tensor(DType::kUInt8, 120));
  b.node("quant", "QuantizeLinear", {"x", "qs", "qz"}, "xq");
  b.constant("w1", int8_tensor(DType::kInt8, {8, 4, 3, 3}, 1))
      .constant("w1s", weight_scales(8, true, 2))
      .constant("w1z", weight_zero_points(DType::kInt8, 8, true))
      .constant("c1s", scalar_tensor(DType::kFloat32, 0.11))
      .constant("c1z", scalar_tensor(DType::kUInt8, 100))
      .constant("b1", int32_bias(8, 3));
  set_ints(b.node("conv1", "QLinearConv", {"xq", "qs", "qz", "w1", "w1s", "w1z", "c1s", "c1z", "b1"}, "c1"), "pads",
           {1, 1, 1, 1});
  b.constant("t1", int8_tensor(DType::kUInt8, {256}, 4));
  b.node("table1", "QLinearLookup", {"c1", "t1"}, "l1").domain = "ai.tessera";
  b.constant("w2", int8_tensor(DType::kUInt8, {8, 1, 3, 3}, 5))
      .constant("w2s", weight_scales(8, true, 6))
      .constant("w2z", weight_zero_points(DType::kUInt8, 8, true))
      .constant("c2s", scalar_tensor(DType::kFloat32, 0.2))
      .constant("c2z", scalar_tensor(DType::kInt8, -4));
  Node& dw = b.node("conv2", "QLinearConv", {"l1", "c1s", "c1z", "w2", "w2s", "w2z", "c2s", "c2z"}, "c2");
  set_int(dw, "group", 8);
  set_ints(dw, "pads", {1, 1, 1, 1});
  b.constant("t2", int8_tensor(DType::kInt8, {65536}, 7));
  b.node("table2", "QLinearLookup", {"c2", "l1", "t2"}, "l2").domain = "ai.tessera";
  b.node("flatten", "Flatten", {"l2"}, "f");
  b.constant("w3", int8_tensor(DType::kInt8, {648, 10}, 8))
      .constant("w3s", scalar_tensor(DType::kFloat32, 0.003))
      .constant("w3z", scalar_tensor(DType::kInt8, 0))
      .constant("fs", scalar_tensor(DType::kFloat32, 0.6))
      .constant("fz", scalar_tensor(DType::kInt8, 2))
      .constant("l2s", scalar_tensor(DType::kFloat32, 0.07))
      .constant("l2z", scalar_tensor(DType::kInt8, -1));
  b.node("fc", "QLinearMatMul", {"f", "l2s", "l2z", "w3", "w3s", "w3z", "fs", "fz"}, "q");
  b.node("dequant", "DequantizeLinear", {"q", "fs", "fz"}, "y");
  return b.done({"y", "l1"});
}

std::vector<Tensor> quantized_inputs() {
  Tensor x = random_tensor({1, 4, 9, 9}, 9, -8.f, 8.f);
  // Two of every three elements on or next to a half step of 0.05 (k + 0.5) * 0.05 as float32 computes it: where
  // x / 0.05 and x * (1 / 0.05) round to different integers (about 4 % of these), a quantization that multiplies
  // by the reciprocal, as XNNPACK's conversion does, is a step off.
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (i % 3 == 2) continue;
    const float half = (static_cast<float>(i % 200) - 100.f + 0.5f) * 0.05f;
    const int variant = static_cast<int>(i / 3 % 3);
    x.data<float>()[i] = variant == 0 ? half : std::nextafter(half, variant == 1 ? 1e9f : -1e9f);
  }
  return {x};
}

TEST_F(XnnpackBackend, QuantizedChainWithTablesAndQuantizeEqualsNativeToTheBit) {
  expect_matches_native(quantized_graph(), quantized_inputs(), 1, /*bit_exact=*/true);
  expect_matches_native(quantized_graph(), quantized_inputs(), 2, /*bit_exact=*/true);
}

TEST_F(XnnpackBackend, QuantizedOpsRefuseWhatXnnpackCannotComputeExactly) {
  Builder b;
  b.input("x", {1, 4, 6, 6}, DType::kUInt8).input("a", {3, 8}, DType::kUInt8).input("f", {1, 4, 6, 6});
  b.constant("s", scalar_tensor(DType::kFloat32, 0.1)).constant("z", scalar_tensor(DType::kUInt8, 3));
  b.constant("w", int8_tensor(DType::kInt8, {4, 4, 1, 1}, 1))
      .constant("ws", weight_scales(4, false, 2))
      .constant("wz7", scalar_tensor(DType::kInt8, 7))
      .constant("wz0", scalar_tensor(DType::kInt8, 0))
      .constant("wu", int8_tensor(DType::kUInt8, {4, 4, 1, 1}, 3))
      .constant("wuz", scalar_tensor(DType::kUInt8, 0))
      .constant("big", scalar_tensor(DType::kFloat32, 1e4))
      .constant("small", scalar_tensor(DType::kFloat32, 1e-3))
      .constant("b", int8_tensor(DType::kInt8, {8, 5}, 4))
      .constant("bs", weight_scales(5, true, 5))
      .constant("bz", Tensor(DType::kInt8, {5}));
  std::fill_n(b.g.constants["bz"].data<int8_t>(), 5, int8_t{0});
  b.node("zp7", "QLinearConv", {"x", "s", "z", "w", "ws", "wz7", "s", "z"}, "y0");              // 0
  b.node("u8_zp0", "QLinearConv", {"x", "s", "z", "wu", "ws", "wuz", "s", "z"}, "y1");          // 1
  b.node("scale_256", "QLinearConv", {"x", "big", "z", "w", "ws", "wz0", "small", "z"}, "y2");  // 2
  b.node("per_column", "QLinearMatMul", {"a", "s", "z", "b", "bs", "bz", "s", "z"}, "y3");      // 3
  b.node("sigmoid", "Sigmoid", {"f"}, "sg");                                                    // 4
  b.node("requant", "QuantizeLinear", {"sg", "s", "z"}, "y4");                                  // 5
  b.node("relu", "Relu", {"f"}, "r");                                                           // 6
  b.node("requant2", "QuantizeLinear", {"r", "s", "z"}, "y5");                                  // 7
  Graph g = b.done({"y0", "y1", "y2", "y3", "y4", "y5"});
  CapabilityReport cap = capability(model_bytes(g));
  ASSERT_EQ(cap.status, TESSERA_OK) << cap.msg;
  auto has = [&](int i, const std::string& text) {
    EXPECT_NE(cap.refused[i].find(text), std::string::npos) << "node " << i << ": " << cap.refused[i];
  };
  has(0, "w with zero point 7");
  has(1, "w with zero point 0 (XNNPACK takes int8 weights with zero point 0, or uint8 ones with 128)");
  has(2, "requantization scale");
  has(3, "b_scale has 5 values for 5 outputs (XNNPACK's int8 fully connected takes one)");
  has(4, "Sigmoid before a requantization");
  EXPECT_EQ(cap.refused.count(5), 0u) << cap.refused[5];
  EXPECT_EQ(cap.refused.count(6), 0u) << "a Relu is exact: " << cap.refused[6];
  EXPECT_EQ(cap.refused.count(7), 0u) << cap.refused[7];
}

// --- refusals ----------------------------------------------------------------------
TEST_F(XnnpackBackend, RefusesWhatItCannotRunWithReasons) {
  Builder b;
  b.input("i", {3}, DType::kInt64).input("x", {2, 3, 4, 4}).input("w_run", {2, 3, 3, 3}).input("m", {2, 3});
  b.node("transpose", "Transpose", {"x"}, "t");           // 0
  b.node("int_add", "Add", {"i", "i"}, "j");              // 1
  b.node("conv_runtime_w", "Conv", {"x", "w_run"}, "c");  // 2
  b.constant("w5", random_tensor({4, 1, 3, 3}, 1));
  set_int(b.node("conv_groups", "Conv", {"x", "w5"}, "g"), "group", 3);  // 3: 3 groups of 4 outputs? no: 4 % 3
  set_int(b.node("softmax_axis1", "Softmax", {"x"}, "s"), "axis", 1);    // 4
  Node& rs = b.node("nearest", "Resize", {"x", "", "scales"}, "r");      // 5
  b.constant("scales", testutil::f32({1, 1, 2, 2}, {4}));
  set_string(rs, "mode", "nearest");
  Node& d2s = b.node("crd", "DepthToSpace",
                     {
                         "t4",
                     },
                     "d");  // 6
  b.input("t4", {1, 8, 2, 2});
  set_int(d2s, "blocksize", 2);
  set_string(d2s, "mode", "CRD");
  b.constant("pads", testutil::i64({0, 0, 1, 1, 0, 0, 1, 1}));
  set_string(b.node("reflect", "Pad", {"x", "pads"}, "p"), "mode", "reflect");  // 7
  b.constant("lo", Tensor::Scalar(1.f)).constant("hi", Tensor::Scalar(1.f));
  b.node("clip_empty", "Clip", {"x", "lo", "hi"}, "cl");                         // 8
  set_ints(b.node("pool_1x1", "MaxPool", {"x"}, "mp"), "kernel_shape", {1, 1});  // 9
  set_float(b.node("elu_neg", "Elu", {"x"}, "e"), "alpha", -1.f);                // 10
  b.node("tanh", "Tanh", {"m"}, "th");                                           // 11
  Graph g = b.done({"t", "j", "c", "g", "s", "r", "d", "p", "cl", "mp", "e", "th"});
  CapabilityReport cap = capability(model_bytes(g));
  ASSERT_EQ(cap.status, TESSERA_OK) << cap.msg;
  EXPECT_TRUE(cap.supported.empty());
  auto has = [&](int i, const std::string& text) {
    EXPECT_NE(cap.refused[i].find(text), std::string::npos) << "node " << i << ": " << cap.refused[i];
  };
  has(0, "op Transpose is not supported by this XNNPACK snapshot");
  has(1, "dtype int64");
  has(2, "weights not constant");
  has(3, "Conv with group count not dividing channels");
  has(4, "Softmax over axis 1 of [2,3,4,4] (only the last axis)");
  has(5, "Resize mode nearest");
  has(6, "DepthToSpace mode CRD");
  has(7, "Pad mode reflect");
  has(8, "Clip with min >= max");
  has(9, "1x1 pooling window");
  has(10, "Elu with alpha");
  has(11, "op Tanh is not supported by this XNNPACK snapshot");
}

TEST_F(XnnpackBackend, RefusesSymbolicShapes) {
  Graph g;
  g.opset = 13;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DType::kFloat32, Shape({Dim::Symbol("batch"), Dim(3)})};
  Node n;
  n.name = "relu";
  n.op_type = "Relu";
  n.inputs = {"x"};
  n.outputs = {"y"};
  g.nodes = {n};
  g.outputs = {"y"};
  ASSERT_TRUE(infer_shapes(g).ok());
  EXPECT_NE(refusal(g, 0).find("symbolic dim 'batch'"), std::string::npos) << refusal(g, 0);
}

TEST_F(XnnpackBackend, CompileRefusesAnUnsupportedNodeNamingIt) {
  Builder b;
  b.input("f", {2, 3});
  b.node("relu", "Relu", {"f"}, "r");
  b.node("tr", "Transpose", {"r"}, "t");
  Compiled c = compile(model_bytes(b.done({"t"})));
  EXPECT_EQ(c.status, TESSERA_ERROR_UNSUPPORTED);
  EXPECT_EQ(c.msg, "node 'tr' (Transpose): op Transpose is not supported by this XNNPACK snapshot");
  EXPECT_TRUE(c.blob.empty());
}

TEST_F(XnnpackBackend, CapabilityOfBytesThatAreNoModelIsAnError) {
  CapabilityReport cap = capability("certainly not a protobuf \xff\xff\xff");
  EXPECT_EQ(cap.status, TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(cap.msg.find("ModelProto"), std::string::npos);
}

// --- blobs, constants, descriptors -------------------------------------------------
struct Fixture {
  Graph g;
  std::string blob;
  std::vector<Tensor> inputs;
};

// A convolution (NHWC inside) whose output is both flattened into a fully
// connected layer (a conversion step) and exported: most record kinds.
Fixture layered_region() {
  Builder b;
  b.input("x", {1, 2, 5, 5}).input("k", {3, 1, 1});
  conv(b, "c", "x", "a", 2, 3, 3, 1, 1);
  b.node("relu", "Relu", {"a"}, "r");
  b.node("add", "Add", {"r", "k"}, "s");
  b.node("flatten", "Flatten", {"s"}, "f");
  b.constant("w", random_tensor({27, 4}, 2));
  b.node("fc", "MatMul", {"f", "w"}, "y");
  Fixture f{b.done({"y", "s"}), "", {random_tensor({1, 2, 5, 5}, 3), random_tensor({3, 1, 1}, 4)}};
  Compiled c = compile(model_bytes(f.g));
  EXPECT_EQ(c.status, TESSERA_OK) << c.msg;
  f.blob = c.blob;
  return f;
}

// Windowed ops, padding, resizing, per-channel constants, softmax.
Fixture windowed_region() {
  Builder b;
  b.input("x", {1, 4, 6, 6});
  b.constant("w", random_tensor({4, 2, 3, 3}, 1, -0.5f, 0.5f));
  Node& d = b.node("deconv", "ConvTranspose", {"x", "w"}, "d");
  set_ints(d, "strides", {2, 2});
  set_int(d, "group", 2);
  Node& mp = b.node("pool", "MaxPool", {"d"}, "m");
  set_ints(mp, "kernel_shape", {3, 3});
  set_ints(mp, "pads", {1, 1, 1, 1});
  Node& ap = b.node("avg", "AveragePool", {"m"}, "a");
  set_ints(ap, "kernel_shape", {2, 2});
  set_ints(ap, "pads", {1, 1, 0, 0});
  set_int(ap, "count_include_pad", 1);
  b.constant("slope", random_tensor({4, 1, 1}, 2, 0, 0.5f));
  b.node("prelu", "PRelu", {"a", "slope"}, "p");
  b.constant("roi", Tensor(DType::kFloat32, {0})).constant("up", testutil::f32({1, 1, 2, 2}, {4}));
  set_string(b.node("resize", "Resize", {"p", "roi", "up"}, "r"), "mode", "linear");
  set_int(b.node("d2s", "DepthToSpace", {"r"}, "s"), "blocksize", 2);
  b.node("softmax", "Softmax", {"s"}, "y");
  Fixture f{b.done({"y"}), "", {random_tensor({1, 4, 6, 6}, 3)}};
  Compiled c = compile(model_bytes(f.g));
  EXPECT_EQ(c.status, TESSERA_OK) << c.msg;
  f.blob = c.blob;
  return f;
}

// The quantized chain: element types, quantization, tables and own steps.
Fixture quantized_region() {
  Fixture f{quantized_graph(), "", quantized_inputs()};
  Compiled c = compile(model_bytes(f.g));
  EXPECT_EQ(c.status, TESSERA_OK) << c.msg;
  f.blob = c.blob;
  return f;
}

TEST_F(XnnpackBackend, WindowedRegionMatchesNative) {
  Fixture f = windowed_region();
  expect_matches_native(f.g, f.inputs);
}

TEST_F(XnnpackBackend, BlobCarriesNoWeights) {
  Builder b;
  b.input("x", {1, 64, 8, 8});
  conv(b, "c", "x", "y", 64, 64, 3, 1, 1);  // 147 KiB of weights
  Compiled c = compile(model_bytes(b.done({"y"})));
  ASSERT_EQ(c.status, TESSERA_OK) << c.msg;
  EXPECT_LT(c.blob.size(), 1024u) << "the weights arrive at load, not in the blob";
}

TEST_F(XnnpackBackend, LoadRejectsTruncatedForeignAndNewerBlobs) {
  Fixture f = layered_region();
  ASSERT_FALSE(f.blob.empty());
  client().expect_rejects_truncated_foreign_and_newer(f.blob, f.g.constants);
}

TEST_F(XnnpackBackend, LoadSurvivesRandomCorruption) {
  for (const Fixture& f : {layered_region(), windowed_region(), quantized_region()}) {
    ASSERT_FALSE(f.blob.empty());
    auto c = client().load_corrupted(
        f.blob, f.g, f.inputs, 3000, 27, 0,
        {TESSERA_ERROR_INCOMPATIBLE_BLOB, TESSERA_ERROR_INVALID_ARGUMENT, TESSERA_ERROR_COMPILE_FAILED});
    EXPECT_GT(c.rejected, 2000) << c.loaded << " of 3000 corrupt blobs loaded";
  }
}

TEST_F(XnnpackBackend, LoadChecksTheConstantsItIsGiven) {
  Fixture f = layered_region();
  std::unordered_map<std::string, Tensor> missing = f.g.constants;
  missing.erase("w");
  Loaded l1 = load(f.blob, missing);
  EXPECT_EQ(l1.status, TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(l1.msg, "constant 'w' was not given");
  std::unordered_map<std::string, Tensor> wrong = f.g.constants;
  wrong["c.w"] = random_tensor({3, 2, 2, 2}, 9);
  Loaded l2 = load(f.blob, wrong);
  EXPECT_EQ(l2.status, TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(l2.msg.find("constant 'c.w' does not match the compiled float32[3,2,3,3]"), std::string::npos) << l2.msg;
  EXPECT_EQ(load(f.blob, f.g.constants, 0).status, TESSERA_ERROR_INVALID_ARGUMENT) << "zero threads";
}

TEST_F(XnnpackBackend, RunRejectsDescriptorsThatDifferFromTheRegion) {
  Fixture f = layered_region();
  Loaded l = load(f.blob, f.g.constants);
  ASSERT_EQ(l.status, TESSERA_OK) << l.msg;
  std::vector<Tensor> out = output_buffers(f.g);
  std::string msg;
  std::vector<Tensor> one{f.inputs[0]};
  EXPECT_EQ(run(l.engine.get(), one, out, &msg), TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("expected 2 input"), std::string::npos) << msg;
  std::vector<Tensor> wrong_dtype{Tensor(DType::kInt64, {1, 2, 5, 5}), f.inputs[1]};
  EXPECT_EQ(run(l.engine.get(), wrong_dtype, out, &msg), TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("input 0 does not match the compiled float32[1,2,5,5]"), std::string::npos) << msg;
  std::vector<Tensor> wrong_shape{Tensor(DType::kFloat32, {1, 2, 5, 4}), f.inputs[1]};
  EXPECT_EQ(run(l.engine.get(), wrong_shape, out, &msg), TESSERA_ERROR_INVALID_ARGUMENT);
  std::vector<tessera_tensor_t> in{tensor_descriptor(f.inputs[0]), tensor_descriptor(f.inputs[1])}, outs;
  for (auto& t : out) outs.push_back(tensor_descriptor(t));
  char buf[256];
  in[1].data = nullptr;
  EXPECT_EQ(table()->run(l.engine.get(), in.data(), 2, outs.data(), 2, buf, sizeof(buf)),
            TESSERA_ERROR_INVALID_ARGUMENT);
  std::vector<Tensor> wrong_out{Tensor(DType::kFloat32, {1, 4}), Tensor(DType::kFloat32, {1, 3, 3, 2})};
  EXPECT_EQ(run(l.engine.get(), f.inputs, wrong_out, &msg), TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("output 1"), std::string::npos) << msg;
  ASSERT_EQ(run(l.engine.get(), f.inputs, out, &msg), TESSERA_OK) << msg;  // still usable
  std::vector<Tensor> ref = native_outputs(f.g, f.inputs);
  ASSERT_EQ(ref.size(), 2u);
  expect_close_rel(out[0], ref[0]);
  expect_close_rel(out[1], ref[1]);
}

TEST_F(XnnpackBackend, EstimatedCostGrowsWithTheWorkAndWithFewerThreads) {
  auto cost = [](int64_t c, int threads) {
    Builder b;
    b.input("x", {1, c, 64, 64});  // large enough that the work, not the fixed cost of a launch, dominates
    conv(b, "c", "x", "y", c, c, 3, 1, 1);
    std::string model = model_bytes(b.done({"y"}));
    double us = -1;
    char msg[256];
    EXPECT_EQ(table()->estimate_cost(model.data(), model.size(), threads, &us, msg, sizeof(msg)), TESSERA_OK) << msg;
    return us;
  };
  EXPECT_GT(cost(8, 1), 0);
  EXPECT_GT(cost(64, 1), 10 * cost(8, 1));
  EXPECT_LT(cost(64, 4), cost(64, 1));
  Builder b;
  b.input("f", {2, 3});
  b.node("t", "Transpose", {"f"}, "s");
  std::string model = model_bytes(b.done({"s"}));
  double us = 0;
  char msg[256];
  EXPECT_EQ(table()->estimate_cost(model.data(), model.size(), 1, &us, msg, sizeof(msg)), TESSERA_ERROR_UNSUPPORTED);
}

// engine_bytes (ABI minor revision 4): a loaded engine says how much host memory it holds of its own.
TEST_F(XnnpackBackend, EngineBytesCoverTheWeightsItHolds) { client().expect_engine_bytes_cover_the_weights(); }

}  // namespace

}  // namespace tessera
