// The example backend plugin (examples/example_backend), driven through the C
// ABI exactly as the host drives a plugin: dlopen, query, capability,
// compile, load with the region's constants, run. Graphs are built in the IR,
// shape-inferred and exported with export_onnx_bytes (the bytes a plugin
// receives); every result is compared with the native backend's
// (InferenceSession) on the same graph.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

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
using plugintest::CapabilityReport;
using plugintest::Compiled;
using plugintest::Loaded;
using plugintest::model_bytes;
using plugintest::output_buffers;
using plugintest::random_tensor;
using testutil::random_vec;
using testutil::set_float;
using testutil::set_int;

// The plugin is built with the tests, next to bin/: <build>/examples/.
std::string plugin_path() { return plugintest::beside_test_binary("../examples/libtessera_backend_example.so"); }

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

// The whole path, checked against the native backend: every node claimed,
// compiled, loaded and run; outputs within `tol` of InferenceSession's.
void expect_matches_native(const Graph& g, const std::vector<Tensor>& inputs, double tol = 1e-5) {
  std::string model = model_bytes(g);
  CapabilityReport cap = capability(model);
  ASSERT_EQ(cap.status, TESSERA_OK) << cap.msg;
  ASSERT_TRUE(cap.refused.empty()) << "node " << cap.refused.begin()->first << ": " << cap.refused.begin()->second;
  Compiled c = compile(model);
  ASSERT_EQ(c.status, TESSERA_OK) << c.msg;
  Loaded l = load(c.blob, g.constants);
  ASSERT_EQ(l.status, TESSERA_OK) << l.msg;
  std::vector<Tensor> out = output_buffers(g);
  std::string msg;
  ASSERT_EQ(run(l.engine.get(), inputs, out, &msg), TESSERA_OK) << msg;

  auto session = InferenceSession::Create(g);
  ASSERT_TRUE(session.ok()) << session.status().message();
  auto ref = (*session)->run(inputs);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  ASSERT_EQ(ref->size(), out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    SCOPED_TRACE("output '" + g.outputs[i] + "'");
    ASSERT_EQ((*ref)[i].dims(), out[i].dims());
    testutil::expect_close(out[i], testutil::values((*ref)[i]), tol);
  }
}

class ExampleBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    // Always built with the tests (examples/CMakeLists.txt adds the dependency).
    ASSERT_NE(query_fn(), nullptr) << "cannot load " << plugin_path() << ": " << (dlerror() ? dlerror() : "");
    ASSERT_NE(table(), nullptr);
  }
};

// --- query -------------------------------------------------------------------
TEST_F(ExampleBackend, QueryServesOnlyItsAbiVersion) {
  EXPECT_EQ(query_fn()(TESSERA_BACKEND_ABI_VERSION + 1), nullptr);
  EXPECT_EQ(query_fn()(0), nullptr);
  const tessera_backend_t* t = table();
  EXPECT_EQ(t->abi_version, TESSERA_BACKEND_ABI_VERSION);
  EXPECT_EQ(t->struct_size, sizeof(tessera_backend_t));
  EXPECT_STREQ(t->name, "example");
  ASSERT_NE(t->version, nullptr);
  EXPECT_STREQ(t->version(), "1.0");
  EXPECT_EQ(t->flags & TESSERA_BACKEND_FLAG_CONCURRENT_RUN, 0u) << "engines keep per-engine scratch";
  EXPECT_NE(t->estimate_cost, nullptr);
}

// --- capability ----------------------------------------------------------------
TEST_F(ExampleBackend, ClaimsEveryListedOpAndReportsMatMulAddComposite) {
  Builder b;
  b.input("x", Shape::FromDims({4, 3})).constant("w", random_tensor({3, 5}, 1)).constant("bias", random_tensor({5}, 2));
  b.node("mm", "MatMul", {"x", "w"}, "m");
  b.node("add", "Add", {"m", "bias"}, "a");
  const char* unary[] = {"Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs"};
  std::string prev = "a";
  for (const char* op : unary) {
    b.node(std::string("u_") + op, op, {prev}, std::string("v_") + op);
    prev = std::string("v_") + op;
  }
  b.node("sub", "Sub", {prev, "a"}, "s");
  b.node("mul", "Mul", {"s", "a"}, "p");
  b.node("div", "Div", {"p", "bias"}, "d");
  b.constant("wt", random_tensor({5, 5}, 3));
  b.node("gemm", "Gemm", {"d", "wt", "bias"}, "y");
  Graph g = b.done({"y"});
  CapabilityReport cap = capability(model_bytes(g));
  ASSERT_EQ(cap.status, TESSERA_OK) << cap.msg;
  EXPECT_TRUE(cap.refused.empty());
  EXPECT_EQ(cap.supported.size(), g.nodes.size());
  ASSERT_EQ(cap.composites.size(), 1u);
  EXPECT_EQ(cap.composites[0].first, "MatMul+Add");
  EXPECT_EQ(cap.composites[0].second, (std::vector<int>{0, 1}));
}

TEST_F(ExampleBackend, RefusesWhatItCannotRunWithReasons) {
  Builder b;
  b.input("i", Shape::FromDims({3}), DType::kInt64).input("j", Shape::FromDims({3}), DType::kInt64);
  b.input("x", Shape({Dim::Symbol("batch"), Dim(3)})).input("f", Shape::FromDims({2, 3}));
  b.input("a3", Shape::FromDims({2, 3, 4})).input("b3", Shape::FromDims({2, 4, 5}));
  b.node("iadd", "Add", {"i", "j"}, "k");      // 0
  b.node("relu_sym", "Relu", {"x"}, "r");      // 1
  b.node("sm", "Softmax", {"f"}, "s");         // 2
  b.node("relu_after", "Relu", {"s"}, "t");    // 3: fine beside a refused producer
  b.node("bmm", "MatMul", {"a3", "b3"}, "m");  // 4
  b.node("mm", "MatMul", {"f", "w"}, "q");     // 5: MatMul with two consumers...
  b.constant("w", random_tensor({3, 3}, 4));
  b.node("add1", "Add", {"q", "f"}, "q1");  // 6
  b.node("add2", "Add", {"q", "f"}, "q2");  // 7  ...so no composite
  Graph g = b.done({"k", "r", "t", "m", "q1", "q2"});
  CapabilityReport cap = capability(model_bytes(g));
  ASSERT_EQ(cap.status, TESSERA_OK) << cap.msg;
  EXPECT_NE(cap.refused[0].find("dtype int64 (only float32)"), std::string::npos) << cap.refused[0];
  EXPECT_NE(cap.refused[1].find("input 'x' has a symbolic dim 'batch'"), std::string::npos) << cap.refused[1];
  EXPECT_EQ(cap.refused[2], "op Softmax is not supported");
  EXPECT_EQ(cap.refused[4], "MatMul with a rank-3 right operand");
  EXPECT_EQ(cap.refused.size(), 4u);
  EXPECT_EQ(cap.supported, (std::vector<int>{3, 5, 6, 7}));
  EXPECT_TRUE(cap.composites.empty());
}

TEST_F(ExampleBackend, RefusesGemmWhoseCDoesNotBroadcastToTheOutput) {
  // Typed by hand: shape inference itself rejects such a C.
  Graph g;
  g.inputs = {"a", "b", "c"};
  g.values["a"] = ValueInfo{DType::kFloat32, Shape::FromDims({2, 4})};
  g.values["b"] = ValueInfo{DType::kFloat32, Shape::FromDims({4, 3})};
  g.values["c"] = ValueInfo{DType::kFloat32, Shape::FromDims({4, 3})};
  g.values["y"] = ValueInfo{DType::kFloat32, Shape::FromDims({2, 3})};
  Node n;
  n.name = "gemm";
  n.op_type = "Gemm";
  n.inputs = {"a", "b", "c"};
  n.outputs = {"y"};
  g.nodes = {n};
  g.outputs = {"y"};
  CapabilityReport cap = capability(model_bytes(g));
  ASSERT_EQ(cap.status, TESSERA_OK);
  EXPECT_NE(cap.refused[0].find("Gemm with a non-unidirectional-broadcastable C [4,3]"), std::string::npos)
      << cap.refused[0];
}

TEST_F(ExampleBackend, CapabilityOfBytesThatAreNoModelIsAnError) {
  CapabilityReport cap = capability("certainly not a protobuf \xff\xff\xff");
  EXPECT_EQ(cap.status, TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(cap.msg.find("ModelProto"), std::string::npos);
}

TEST_F(ExampleBackend, CompileRefusesAnUnsupportedNodeNamingIt) {
  Builder b;
  b.input("f", Shape::FromDims({2, 3}));
  b.node("relu", "Relu", {"f"}, "r");
  b.node("sm", "Softmax", {"r"}, "s");
  Compiled c = compile(model_bytes(b.done({"s"})));
  EXPECT_EQ(c.status, TESSERA_ERROR_UNSUPPORTED);
  EXPECT_EQ(c.msg, "node 'sm' (Softmax): op Softmax is not supported");
  EXPECT_TRUE(c.blob.empty());
}

// --- numerics against the native backend ---------------------------------------
TEST_F(ExampleBackend, ElementwiseOpsWithBroadcastingMatchNative) {
  Builder b;
  b.input("x", Shape::FromDims({2, 3, 4})).input("y", Shape::FromDims({3, 1})).input("z", Shape::FromDims({2, 1, 4}));
  b.constant("c", random_tensor({4}, 5)).constant("s", Tensor::Scalar(1.5f));
  b.node("add", "Add", {"x", "c"}, "a");  // [2,3,4] + [4]
  b.node("sub", "Sub", {"y", "a"}, "d");  // [3,1] - [2,3,4]: the smaller operand first
  b.node("mul", "Mul", {"d", "s"}, "m");  // times a scalar
  b.node("div", "Div", {"m", "z"}, "q");  // [2,3,4] / [2,1,4]
  b.node("relu", "Relu", {"q"}, "r");
  b.node("sig", "Sigmoid", {"q"}, "sg");
  b.node("tanh", "Tanh", {"q"}, "th");
  b.node("exp", "Exp", {"c"}, "e");
  b.node("neg", "Neg", {"q"}, "n");
  b.node("abs", "Abs", {"n"}, "ab");
  b.node("outer", "Mul", {"y", "c"}, "o");  // [3,1] * [4] -> [3,4]
  Graph g = b.done({"r", "sg", "th", "e", "ab", "o"});
  expect_matches_native(g, {random_tensor({2, 3, 4}, 6), random_tensor({3, 1}, 7), random_tensor({2, 1, 4}, 8, 1, 2)},
                        1e-5);
}

TEST_F(ExampleBackend, MatMulTwoDimensionalAndBatchedRowsMatchNative) {
  Builder b;
  b.input("a", Shape::FromDims({5, 7})).input("a3", Shape::FromDims({2, 5, 7})).constant("w", random_tensor({7, 3}, 9));
  b.node("mm", "MatMul", {"a", "w"}, "y");
  b.node("bmm", "MatMul", {"a3", "w"}, "y3");
  Graph g = b.done({"y", "y3"});
  expect_matches_native(g, {random_tensor({5, 7}, 10), random_tensor({2, 5, 7}, 11)});
}

TEST_F(ExampleBackend, GemmWithTransposesAlphaBetaAndBroadcastCMatchesNative) {
  Builder b;
  b.input("a", Shape::FromDims({4, 6})).input("at", Shape::FromDims({6, 4}));
  b.constant("bt", random_tensor({5, 6}, 12)).constant("b", random_tensor({6, 5}, 13));
  b.constant("c_row", random_tensor({5}, 14)).constant("c_col", random_tensor({4, 1}, 15));
  b.constant("c_scalar", Tensor::Scalar(0.25f));
  Node& g1 = b.node("gemm_tb", "Gemm", {"a", "bt", "c_row"}, "y1");
  set_int(g1, "transB", 1);
  set_float(g1, "alpha", 0.5f);
  set_float(g1, "beta", 2.f);
  Node& g2 = b.node("gemm_ta", "Gemm", {"at", "b", "c_col"}, "y2");
  set_int(g2, "transA", 1);
  b.node("gemm_scalar_c", "Gemm", {"a", "b", "c_scalar"}, "y3");
  b.node("gemm_no_c", "Gemm", {"a", "b"}, "y4");
  Graph g = b.done({"y1", "y2", "y3", "y4"});
  expect_matches_native(g, {random_tensor({4, 6}, 16), random_tensor({6, 4}, 17)});
}

TEST_F(ExampleBackend, MatMulAddReluChainMatchesNative) {
  Builder b;
  b.input("x", Shape::FromDims({3, 8}))
      .constant("w", random_tensor({8, 4}, 18))
      .constant("bias", random_tensor({4}, 19));
  b.node("mm", "MatMul", {"x", "w"}, "m");
  b.node("add", "Add", {"m", "bias"}, "a");
  b.node("relu", "Relu", {"a"}, "y");
  Graph g = b.done({"y", "x"});  // x also leaves the region unchanged
  EXPECT_EQ(capability(model_bytes(g)).composites.size(), 1u);
  expect_matches_native(g, {random_tensor({3, 8}, 20)});
}

TEST_F(ExampleBackend, OneEngineGivesTheRightAnswerRunAfterRun) {
  Builder b;
  b.input("x", Shape::FromDims({3, 8})).constant("w", random_tensor({8, 4}, 18));
  b.node("mm", "MatMul", {"x", "w"}, "m");
  b.node("sig", "Sigmoid", {"m"}, "s");   // m and s live in the engine's scratch...
  b.node("mul", "Mul", {"s", "m"}, "y");  // ...reused by every run
  Graph g = b.done({"y"});
  Compiled c = compile(model_bytes(g));
  ASSERT_EQ(c.status, TESSERA_OK) << c.msg;
  Loaded l = load(c.blob, g.constants);
  ASSERT_EQ(l.status, TESSERA_OK) << l.msg;
  auto session = InferenceSession::Create(g);
  ASSERT_TRUE(session.ok()) << session.status().message();
  for (unsigned seed : {21u, 22u, 23u}) {
    std::vector<Tensor> in{random_tensor({3, 8}, seed)}, out = output_buffers(g);
    ASSERT_EQ(run(l.engine.get(), in, out), TESSERA_OK);
    auto ref = (*session)->run(in);
    ASSERT_TRUE(ref.ok()) << ref.status().message();
    testutil::expect_close(out[0], testutil::values((*ref)[0]), 1e-5);
  }
}

TEST_F(ExampleBackend, BlobCarriesNoWeights) {
  Builder b;
  b.input("x", Shape::FromDims({1, 256})).constant("w", random_tensor({256, 256}, 23));
  b.node("mm", "MatMul", {"x", "w"}, "y");
  Compiled c = compile(model_bytes(b.done({"y"})));
  ASSERT_EQ(c.status, TESSERA_OK) << c.msg;
  EXPECT_LT(c.blob.size(), 512u) << "the 256 KiB of weights arrive at load, not in the blob";
}

// --- load and run validation ------------------------------------------------------
struct Fixture {
  Graph g;
  std::string blob;
  std::vector<Tensor> inputs;
};

Fixture small_region() {
  Builder b;
  b.input("x", Shape::FromDims({2, 4})).constant("w", random_tensor({4, 3}, 24)).constant("c", random_tensor({3}, 25));
  b.node("gemm", "Gemm", {"x", "w", "c"}, "g");
  b.node("tanh", "Tanh", {"g"}, "y");
  Fixture f{b.done({"y"}), "", {random_tensor({2, 4}, 26)}};
  Compiled c = compile(model_bytes(f.g));
  EXPECT_EQ(c.status, TESSERA_OK) << c.msg;
  f.blob = c.blob;
  return f;
}

TEST_F(ExampleBackend, LoadRejectsTruncatedForeignAndNewerBlobs) {
  Fixture f = small_region();
  ASSERT_FALSE(f.blob.empty());
  client().expect_rejects_truncated_foreign_and_newer(f.blob, f.g.constants);
}

// Broadcasting, a batched MatMul, a reused intermediate and an output that
// passes an input through: more kinds of record for corruption to hit.
Fixture broadcast_region() {
  Builder b;
  b.input("x", Shape::FromDims({2, 3, 4})).input("s", Shape::FromDims({3, 1}));
  b.constant("c", random_tensor({4}, 30)).constant("w", random_tensor({4, 5}, 31));
  b.node("add", "Add", {"x", "c"}, "a");
  b.node("mul", "Mul", {"a", "s"}, "m");
  b.node("mm", "MatMul", {"m", "w"}, "p");
  b.node("relu", "Relu", {"p"}, "y");
  b.node("sub", "Sub", {"a", "m"}, "d");
  Fixture f{b.done({"y", "d", "s"}), "", {random_tensor({2, 3, 4}, 32), random_tensor({3, 1}, 33)}};
  Compiled c = compile(model_bytes(f.g));
  EXPECT_EQ(c.status, TESSERA_OK) << c.msg;
  f.blob = c.blob;
  return f;
}

TEST_F(ExampleBackend, LoadSurvivesRandomCorruption) {
  for (const Fixture& f : {small_region(), broadcast_region()}) {
    ASSERT_FALSE(f.blob.empty());
    auto c = client().load_corrupted(f.blob, f.g, f.inputs, 3000, 27, 0,
                                     {TESSERA_ERROR_INCOMPATIBLE_BLOB, TESSERA_ERROR_INVALID_ARGUMENT});
    EXPECT_GT(c.rejected, 2000) << c.loaded << " of 3000 corrupt blobs loaded";
  }
}

TEST_F(ExampleBackend, LoadChecksTheConstantsItIsGiven) {
  Fixture f = small_region();
  std::unordered_map<std::string, Tensor> missing = f.g.constants;
  missing.erase("w");
  Loaded l1 = load(f.blob, missing);
  EXPECT_EQ(l1.status, TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(l1.msg, "constant 'w' was not given");

  std::unordered_map<std::string, Tensor> wrong_shape = f.g.constants;
  wrong_shape["w"] = random_tensor({3, 4}, 28);
  Loaded l2 = load(f.blob, wrong_shape);
  EXPECT_EQ(l2.status, TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(l2.msg.find("constant 'w' has shape [3,4], expected [4,3]"), std::string::npos) << l2.msg;

  std::unordered_map<std::string, Tensor> wrong_dtype = f.g.constants;
  wrong_dtype["c"] = Tensor(DType::kFloat64, {3});
  Loaded l3 = load(f.blob, wrong_dtype);
  EXPECT_EQ(l3.status, TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(l3.msg.find("float64"), std::string::npos) << l3.msg;
}

TEST_F(ExampleBackend, RunRejectsDescriptorsThatDifferFromTheRegion) {
  Fixture f = small_region();
  Loaded l = load(f.blob, f.g.constants);
  ASSERT_EQ(l.status, TESSERA_OK) << l.msg;
  std::vector<Tensor> out = output_buffers(f.g);
  std::string msg;

  std::vector<Tensor> none;
  EXPECT_EQ(run(l.engine.get(), none, out, &msg), TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("expected 1 and 1"), std::string::npos) << msg;

  EXPECT_EQ(run(l.engine.get(), {Tensor(DType::kInt64, {2, 4})}, out, &msg), TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("input 0 ('x') has dtype int64"), std::string::npos) << msg;

  EXPECT_EQ(run(l.engine.get(), {Tensor(DType::kFloat32, {4, 2})}, out, &msg), TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("shape [4,2], expected [2,4]"), std::string::npos) << msg;

  EXPECT_EQ(run(l.engine.get(), {Tensor(DType::kFloat32, {8})}, out, &msg), TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("rank 1, expected 2"), std::string::npos) << msg;

  std::vector<tessera_tensor_t> in{tensor_descriptor(f.inputs[0])}, outs{tensor_descriptor(out[0])};
  in[0].size_bytes -= 4;
  char buf[256];
  EXPECT_EQ(table()->run(l.engine.get(), in.data(), 1, outs.data(), 1, buf, sizeof(buf)),
            TESSERA_ERROR_INVALID_ARGUMENT);
  in[0] = tensor_descriptor(f.inputs[0]);
  in[0].data = nullptr;
  EXPECT_EQ(table()->run(l.engine.get(), in.data(), 1, outs.data(), 1, buf, sizeof(buf)),
            TESSERA_ERROR_INVALID_ARGUMENT);

  std::vector<Tensor> wrong_out{Tensor(DType::kFloat32, {2, 4})};
  EXPECT_EQ(run(l.engine.get(), f.inputs, wrong_out, &msg), TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("output 0 ('y')"), std::string::npos) << msg;

  EXPECT_EQ(run(l.engine.get(), f.inputs, out, &msg), TESSERA_OK) << msg;  // the engine is still usable
}

TEST_F(ExampleBackend, EstimatedCostGrowsWithTheWork) {
  auto cost = [](int64_t n) {
    Builder b;
    b.input("x", Shape::FromDims({n, n})).constant("w", random_tensor({n, n}, 29));
    b.node("mm", "MatMul", {"x", "w"}, "y");
    std::string model = model_bytes(b.done({"y"}));
    double us = -1;
    char msg[256];
    EXPECT_EQ(table()->estimate_cost(model.data(), model.size(), 1, &us, msg, sizeof(msg)), TESSERA_OK) << msg;
    return us;
  };
  double small = cost(8), large = cost(64);
  EXPECT_GT(small, 0);
  EXPECT_GT(large, 100 * small);

  Builder b;
  b.input("f", Shape::FromDims({2, 3}));
  b.node("sm", "Softmax", {"f"}, "s");
  std::string model = model_bytes(b.done({"s"}));
  double us = 0;
  char msg[256];
  EXPECT_EQ(table()->estimate_cost(model.data(), model.size(), 1, &us, msg, sizeof(msg)), TESSERA_ERROR_UNSUPPORTED);
}

}  // namespace
}  // namespace tessera
