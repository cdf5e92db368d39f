// Seeing inside engines: run_profiled through the ABI (the oneDNN plugin's
// per-primitive steps, the example plugin's per-node ones) and the host's
// mapping of a region's steps back to the nodes of the region (a profiled
// InferenceSession run). Only structure is asserted — which nodes each step
// names, their order, that steps do not overlap, that outputs equal a plain
// run's — never how long anything took.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "ir/graph.h"
#include "partition/partition.h"
#include "runtime/session.h"
#include "tessera/backend.h"
#include "unit/op_test_util.h"
#include "unit/plugin_test_util.h"

namespace tessera {
namespace {

using plugintest::Builder;
using plugintest::model_bytes;
using plugintest::output_buffers;
using plugintest::random_tensor;
using testutil::set_int;
using testutil::set_ints;

std::string dnnl_path() { return plugintest::beside_test_binary("../lib/tessera/libtessera_backend_dnnl.so"); }
std::string example_path() { return plugintest::beside_test_binary("../examples/libtessera_backend_example.so"); }

// A plugin loaded the way the host loads it, kept for the whole run.
std::shared_ptr<Backend> load_plugin(const std::string& path) {
  auto b = Backend::LoadLibrary(path);
  EXPECT_TRUE(b.ok()) << b.status().message();
  return b.ok() ? *b : nullptr;
}
const Backend* dnnl() {
  static std::shared_ptr<Backend> b = load_plugin(dnnl_path());
  return b.get();
}
std::shared_ptr<Backend> example_backend() {
  static std::shared_ptr<Backend> b = load_plugin(example_path());
  return b;
}
const Backend* example() { return example_backend().get(); }

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : "+") + x;
  return s;
}

// What every plugin's steps must be: in order and not overlapping, each with
// a name for what it ran, naming only nodes of `names`, and together covering
// every one of them.
void expect_steps_cover(const std::vector<ProfileStep>& steps, const std::set<std::string>& names) {
  ASSERT_FALSE(steps.empty());
  std::set<std::string> covered;
  double end = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const ProfileStep& st = steps[i];
    SCOPED_TRACE("step " + std::to_string(i) + " '" + joined(st.nodes) + "' (" + st.what + ")");
    EXPECT_GE(st.start_us, 0.0);
    EXPECT_GE(st.duration_us, 0.0);
    EXPECT_GE(st.start_us + 1e-3, end) << "starts before the step ahead of it ends";
    end = std::max(end, st.start_us + st.duration_us);
    EXPECT_FALSE(st.what.empty());
    for (const auto& n : st.nodes) {
      EXPECT_TRUE(names.count(n)) << "names '" << n << "', which is no node of the region";
      covered.insert(n);
    }
  }
  for (const auto& n : names) EXPECT_TRUE(covered.count(n)) << "node '" << n << "' is in no step";
}

std::set<std::string> node_names(const Graph& g) {
  std::set<std::string> s;
  for (const Node& n : g.nodes) s.insert(n.name);
  return s;
}

void expect_equal(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].dims(), want[i].dims());
    for (int64_t k = 0; k < got[i].numel(); ++k) {
      ASSERT_NEAR(got[i].as_double(k), want[i].as_double(k), 1e-5 * std::max(1.0, std::fabs(want[i].as_double(k))))
          << "output " << i << " at " << k;
    }
  }
}

// A region compiled, loaded, run, then run profiled on the same inputs.
struct Profiled {
  std::vector<Tensor> plain, profiled;
  plugintest::PluginClient::Profiled result;
};
Profiled run_both(const tessera_backend_t* table, const Graph& g, const std::vector<Tensor>& inputs) {
  plugintest::PluginClient client(table);
  Profiled p;
  plugintest::Compiled c = client.compile(model_bytes(g));
  EXPECT_EQ(c.status, TESSERA_OK) << c.msg;
  plugintest::Loaded l = client.load(c.blob, g.constants);
  EXPECT_EQ(l.status, TESSERA_OK) << l.msg;
  if (!l.engine) return p;
  p.plain = output_buffers(g);
  std::string msg;
  EXPECT_EQ(client.run(l.engine.get(), inputs, p.plain, &msg), TESSERA_OK) << msg;
  p.profiled = output_buffers(g);
  p.result = client.run_profiled(l.engine.get(), inputs, p.profiled);
  EXPECT_EQ(p.result.status, TESSERA_OK) << p.result.msg;
  return p;
}

const ProfileStep* step_naming(const std::vector<ProfileStep>& steps, const std::vector<std::string>& nodes) {
  for (const auto& st : steps) {
    if (st.nodes == nodes) return &st;
  }
  return nullptr;
}

// ---- oneDNN ---------------------------------------------------------------------

class DnnlProfile : public ::testing::Test {
 protected:
  void SetUp() override {
#if defined(__SANITIZE_ADDRESS__)
    // The sanitized build (scripts/sanitize_check.sh) builds the example plugin only.
    if (!std::filesystem::exists(dnnl_path())) GTEST_SKIP() << "the oneDNN plugin is not built here";
#endif
    ASSERT_NE(dnnl(), nullptr) << "cannot load " << dnnl_path();
    ASSERT_TRUE(dnnl()->gives_profile());
  }
};

// A small CNN: conv1+relu1 and conv2+add+relu2 fuse into two convolutions,
// Flatten is a view (no primitive), the input and the output are reordered.
Graph small_cnn() {
  Builder b;
  b.input("x", {1, 3, 8, 8});
  b.constant("w1", random_tensor({16, 3, 3, 3}, 1)).constant("b1", random_tensor({16}, 2));
  b.constant("w2", random_tensor({16, 16, 1, 1}, 3)).constant("wf", random_tensor({4, 16}, 4));
  b.constant("bf", random_tensor({4}, 5));
  set_ints(b.node("conv1", "Conv", {"x", "w1", "b1"}, "c1"), "pads", {1, 1, 1, 1});
  b.node("relu1", "Relu", {"c1"}, "r1");
  b.node("conv2", "Conv", {"r1", "w2"}, "c2");
  b.node("add", "Add", {"c2", "r1"}, "s");
  b.node("relu2", "Relu", {"s"}, "r2");
  b.node("gap", "GlobalAveragePool", {"r2"}, "g");
  b.node("flat", "Flatten", {"g"}, "f");
  set_int(b.node("fc", "Gemm", {"f", "wf", "bf"}, "l"), "transB", 1);
  set_int(b.node("sm", "Softmax", {"l"}, "y"), "axis", 1);
  return b.done({"y"});
}

TEST_F(DnnlProfile, StepsCoverEveryNodeInOrderAndOutputsEqualRun) {
  Graph g = small_cnn();
  Profiled p = run_both(dnnl()->table(), g, {random_tensor({1, 3, 8, 8}, 6)});
  expect_equal(p.profiled, p.plain);
  expect_steps_cover(p.result.steps, node_names(g));
}

TEST_F(DnnlProfile, AFusedPrimitiveNamesEveryNodeItComputes) {
  Graph g = small_cnn();
  Profiled p = run_both(dnnl()->table(), g, {random_tensor({1, 3, 8, 8}, 7)});
  const ProfileStep* c1 = step_naming(p.result.steps, {"conv1", "relu1"});
  ASSERT_NE(c1, nullptr) << "no step names conv1+relu1";
  EXPECT_EQ(c1->what.rfind("convolution ", 0), 0u) << c1->what;
  const ProfileStep* c2 = step_naming(p.result.steps, {"conv2", "add", "relu2"});
  ASSERT_NE(c2, nullptr) << "no step names conv2+add+relu2 (a sum and an eltwise post-op)";
  // Every node appears in exactly one step here: no node is split.
  std::map<std::string, int> steps_of;
  for (const auto& st : p.result.steps) {
    for (const auto& n : st.nodes) steps_of[n]++;
  }
  for (const auto& [n, k] : steps_of) EXPECT_EQ(k, 1) << n;
}

TEST_F(DnnlProfile, ViewsAreStepsOfNoDurationAndReordersNameTheirValue) {
  Graph g = small_cnn();
  Profiled p = run_both(dnnl()->table(), g, {random_tensor({1, 3, 8, 8}, 8)});
  const ProfileStep* flat = step_naming(p.result.steps, {"flat"});
  ASSERT_NE(flat, nullptr);
  EXPECT_EQ(flat->what, "view (no work)");
  EXPECT_EQ(flat->duration_us, 0.0);
  for (const auto& st : p.result.steps) {
    // A step covering no node is a layout conversion, named after its value;
    // no node's step is one here (a Transpose would be: oneDNN reorders for it).
    if (st.nodes.empty()) {
      EXPECT_EQ(st.what.rfind("reorder of '", 0), 0u) << st.what;
    } else {
      EXPECT_EQ(st.what.find("reorder"), std::string::npos) << st.what;
    }
  }
}

// Exporters' decomposed LayerNorm and GELU each run as one primitive, which
// names all of its nodes (Erf among them, which no step could name alone).
TEST_F(DnnlProfile, PatternsNameEveryNodeOfThePattern) {
  Builder b;
  b.input("x", {2, 5, 16}).constant("g", random_tensor({16}, 66, 0.5f, 1.5f)).constant("beta", random_tensor({16}, 67));
  b.constant("two", Tensor::Scalar(2.f)).constant("eps", Tensor::Scalar(1e-5f));
  b.constant("sqrt2", Tensor::Scalar(1.4142135381698608f)).constant("one", Tensor::Scalar(1.f));
  b.constant("half", Tensor::Scalar(0.5f));
  set_ints(b.node("mean", "ReduceMean", {"x"}, "mu"), "axes", {-1});
  b.node("center", "Sub", {"x", "mu"}, "d");
  b.node("square", "Pow", {"d", "two"}, "d2");
  set_ints(b.node("var", "ReduceMean", {"d2"}, "v"), "axes", {-1});
  b.node("add_eps", "Add", {"v", "eps"}, "ve");
  b.node("std", "Sqrt", {"ve"}, "s");
  b.node("norm", "Div", {"d", "s"}, "n");
  b.node("scale", "Mul", {"n", "g"}, "ng");
  b.node("shift", "Add", {"beta", "ng"}, "h");
  b.node("div", "Div", {"h", "sqrt2"}, "q");
  b.node("erf", "Erf", {"q"}, "e");
  b.node("plus1", "Add", {"e", "one"}, "e1");
  b.node("times_x", "Mul", {"h", "e1"}, "xe");
  b.node("times_half", "Mul", {"xe", "half"}, "y");
  Graph g = b.done({"y"});
  Profiled p = run_both(dnnl()->table(), g, {random_tensor({2, 5, 16}, 68)});
  expect_equal(p.profiled, p.plain);
  expect_steps_cover(p.result.steps, node_names(g));
  EXPECT_NE(
      step_naming(p.result.steps, {"mean", "center", "square", "var", "add_eps", "std", "norm", "scale", "shift"}),
      nullptr);
  EXPECT_NE(step_naming(p.result.steps, {"div", "erf", "plus1", "times_x", "times_half"}), nullptr);
}

TEST_F(DnnlProfile, RefusesWrongDescriptorsLikeRunAndReportsNothing) {
  Graph g = small_cnn();
  plugintest::PluginClient client(dnnl()->table());
  plugintest::Compiled c = client.compile(model_bytes(g));
  ASSERT_EQ(c.status, TESSERA_OK) << c.msg;
  plugintest::Loaded l = client.load(c.blob, g.constants);
  ASSERT_EQ(l.status, TESSERA_OK) << l.msg;
  std::vector<Tensor> out = output_buffers(g);
  auto r = client.run_profiled(l.engine.get(), {random_tensor({1, 3, 8, 9}, 9)}, out);
  EXPECT_EQ(r.status, TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(r.msg.find("input"), std::string::npos) << r.msg;
  EXPECT_TRUE(r.steps.empty());
}

// ---- the example plugin ---------------------------------------------------------

class ExampleProfile : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(example(), nullptr) << "cannot load " << example_path();
    ASSERT_TRUE(example()->gives_profile());
  }
};

Graph mlp() {
  Builder b;
  b.input("x", {3, 4}).constant("w", random_tensor({4, 5}, 11)).constant("c", random_tensor({5}, 12));
  b.constant("w2", random_tensor({5, 2}, 13));
  b.node("mm", "MatMul", {"x", "w"}, "h");
  b.node("bias", "Add", {"h", "c"}, "hb");
  b.node("relu", "Relu", {"hb"}, "r");
  b.node("fc", "Gemm", {"r", "w2"}, "y");
  return b.done({"y"});
}

TEST_F(ExampleProfile, OneStepPerNodeInNodeOrder) {
  Graph g = mlp();
  Profiled p = run_both(example()->table(), g, {random_tensor({3, 4}, 14)});
  expect_equal(p.profiled, p.plain);
  expect_steps_cover(p.result.steps, node_names(g));
  std::vector<std::string> order, what;
  for (const auto& st : p.result.steps) {
    ASSERT_EQ(st.nodes.size(), 1u);
    order.push_back(st.nodes[0]);
    what.push_back(st.what);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"mm", "bias", "relu", "fc"}));
  EXPECT_EQ(what, (std::vector<std::string>{"gemm loop", "binary loop", "unary loop", "gemm loop"}));
}

// ---- the host: a profiled session maps engine steps to the region's nodes -------

// `g` partitioned by priority over `backends` (then native), every region kept.
struct Compiled {
  Program program;
  PartitionReport report;
};
Compiled partition(const Graph& g, const std::vector<std::shared_ptr<const Backend>>& backends) {
  PartitionOptions o;
  o.backends = backends;
  auto native = find_backend("native");
  EXPECT_TRUE(native.ok());
  o.backends.push_back(*native);
  o.min_region_nodes = 0;
  o.policy = PlacementPolicy::kPriority;
  Compiled c;
  auto p = partition_and_compile(g, o, &c.report);
  EXPECT_TRUE(p.ok()) << p.status().message();
  if (p.ok()) c.program = std::move(p).value();
  return c;
}

// Checks the profile of one run of `s` against the placement: a native entry
// has no steps; a region's steps name exactly the nodes placed in it.
void expect_profile_matches_placement(const InferenceSession& s, const RunProfile& prof, const PartitionReport& rep,
                                      int* regions_with_steps) {
  double end = 0;
  for (const RunProfile::Entry& e : prof.entries) {
    SCOPED_TRACE("entry '" + e.node + "'");
    EXPECT_GE(e.start_us + 1e-3, end) << "entries overlap";
    end = e.start_us + e.us;
    if (e.engine < 0) {
      EXPECT_TRUE(e.steps.empty());
      EXPECT_NE(e.op_type, "Region");
      continue;
    }
    EXPECT_EQ(e.op_type, "Region");
    ASSERT_LT(static_cast<size_t>(e.engine), s.engines().size());
    const RegionInfo* info = nullptr;
    for (const auto& r : rep.regions) {
      if (r.engine == e.engine) info = &r;
    }
    ASSERT_NE(info, nullptr);
    if (!s.engines()[static_cast<size_t>(e.engine)]->backend().gives_profile()) {
      EXPECT_TRUE(e.steps.empty());
      continue;
    }
    std::set<std::string> names(info->nodes.begin(), info->nodes.end());
    expect_steps_cover(e.steps, names);
    for (const auto& st : e.steps)
      EXPECT_LE(st.start_us + st.duration_us, e.us + 1e-3) << "a step ends after its region";
    ++*regions_with_steps;
  }
}

// x -> conv -> relu -> Erf (no engine runs it alone: native) -> conv -> relu.
Graph conv_erf_conv() {
  Builder b;
  b.input("x", {1, 4, 6, 6})
      .constant("w1", random_tensor({8, 4, 3, 3}, 21))
      .constant("w2", random_tensor({8, 8, 1, 1}, 22));
  set_ints(b.node("conv_a", "Conv", {"x", "w1"}, "a"), "pads", {1, 1, 1, 1});
  b.node("relu_a", "Relu", {"a"}, "ra");
  b.node("erf", "Erf", {"ra"}, "e");
  b.node("conv_b", "Conv", {"e", "w2"}, "c");
  b.node("relu_b", "Relu", {"c"}, "y");
  return b.done({"y"});
}

TEST(ProfiledSession, DnnlRegionStepsNameTheNodesPlacedInTheirRegion) {
#if defined(__SANITIZE_ADDRESS__)
  if (!std::filesystem::exists(dnnl_path())) GTEST_SKIP() << "the oneDNN plugin is not built here";
#endif
  auto backend = find_backend("dnnl");  // beside the test binary: <build>/lib/tessera
  ASSERT_TRUE(backend.ok()) << backend.status().message();
  Graph g = conv_erf_conv();
  Compiled c = partition(g, {*backend});
  ASSERT_EQ(c.program.engines.size(), 2u) << "two oneDNN regions around the native Erf";
  auto session = InferenceSession::Create(std::move(c.program));
  ASSERT_TRUE(session.ok()) << session.status().message();
  const InferenceSession& s = **session;
  std::vector<Tensor> in = {random_tensor({1, 4, 6, 6}, 23)};
  auto plain = s.run(in);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  RunProfile prof;
  auto profiled = s.run(in, &prof);
  ASSERT_TRUE(profiled.ok()) << profiled.status().message();
  expect_equal(*profiled, *plain);
  int with_steps = 0;
  expect_profile_matches_placement(s, prof, c.report, &with_steps);
  EXPECT_EQ(with_steps, 2);
}

// The example plugin, and the same plugin with run_profiled taken out of its
// table: a region of a backend that gives no profile is one entry, no steps.
TEST(ProfiledSession, ARegionWithoutProfileIsOneEntryAndWithProfileItsSteps) {
  ASSERT_NE(example(), nullptr);
  static tessera_backend_t quiet = *example()->table();
  quiet.name = "example_quiet";
  quiet.run_profiled = nullptr;
  static std::shared_ptr<const Backend> quiet_backend = [] {
    auto b = Backend::FromTable(&quiet, "", nullptr);  // the example's library stays loaded by example()
    EXPECT_TRUE(b.ok()) << b.status().message();
    EXPECT_TRUE(register_backend(*b).ok());
    return b.ok() ? std::shared_ptr<const Backend>(*b) : nullptr;
  }();
  ASSERT_NE(quiet_backend, nullptr);
  EXPECT_FALSE(quiet_backend->gives_profile());
  if (!find_backend("example").ok()) {  // unless TESSERA_BACKEND_PATH finds it
    ASSERT_TRUE(register_backend(example_backend()).ok());
  }

  // mlp, then a Softmax the example refuses (native), then more for the example.
  Builder b;
  b.input("x", {3, 4}).constant("w", random_tensor({4, 5}, 31)).constant("w2", random_tensor({5, 5}, 32));
  b.node("mm", "MatMul", {"x", "w"}, "h");
  b.node("relu", "Relu", {"h"}, "r");
  set_int(b.node("sm", "Softmax", {"r"}, "p"), "axis", 1);
  b.node("mm2", "MatMul", {"p", "w2"}, "q");
  b.node("sig", "Sigmoid", {"q"}, "y");
  Graph g = b.done({"y"});
  for (const char* name : {"example", "example_quiet"}) {
    SCOPED_TRACE(name);
    auto backend = find_backend(name);
    ASSERT_TRUE(backend.ok()) << backend.status().message();
    Compiled c = partition(g, {*backend});
    ASSERT_EQ(c.program.engines.size(), 2u);
    auto session = InferenceSession::Create(std::move(c.program));
    ASSERT_TRUE(session.ok()) << session.status().message();
    std::vector<Tensor> in = {random_tensor({3, 4}, 33)};
    RunProfile prof;
    auto out = (*session)->run(in, &prof);
    ASSERT_TRUE(out.ok()) << out.status().message();
    auto plain = (*session)->run(in);
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    expect_equal(*out, *plain);
    int with_steps = 0;
    expect_profile_matches_placement(**session, prof, c.report, &with_steps);
    int regions = 0;
    for (const auto& e : prof.entries) regions += e.engine >= 0 ? 1 : 0;
    EXPECT_EQ(regions, 2);
    EXPECT_EQ(with_steps, std::string(name) == "example" ? 2 : 0);
  }
}

}  // namespace
}  // namespace tessera
