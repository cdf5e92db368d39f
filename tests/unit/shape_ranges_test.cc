// Shape ranges: `--shape NAME=D0,..,MIN..MAX,..` parsed, applied to a graph's inputs, and held to at run time.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "api/session_setup.h"
#include "artifact/artifact.h"
#include "backends/backend.h"
#include "ir/graph.h"
#include "onnx/onnx_export.h"
#include "runtime/session.h"
#include "plugin_test_util.h"

namespace tessera {
namespace {

using api::InputRanges;
using api::parse_shapes;

TEST(ShapeRanges, ParsesSizesAndRanges) {
  auto r = parse_shapes({"x=1,3,48,32..2048", "mask=4"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::vector<DimRange> x = {{1, 1}, {3, 3}, {48, 48}, {32, 2048}};
  EXPECT_EQ(r->at("x"), x);
  EXPECT_EQ(r->at("mask"), (std::vector<DimRange>{{4, 4}}));
  EXPECT_EQ(r->at("x")[3].str(), "32..2048");
  auto scalar = parse_shapes({"s="});
  ASSERT_TRUE(scalar.ok());
  EXPECT_TRUE(scalar->at("s").empty());
}

// An input named several times spans every size given: exact shapes may be named beside a range.
TEST(ShapeRanges, RepeatedInputsSpanTheirSizes) {
  auto r = parse_shapes({"x=1,3,48,32..2048", "x=1,3,48,320", "x=2,3,48,4096"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->at("x"), (std::vector<DimRange>{{1, 2}, {3, 3}, {48, 48}, {32, 4096}}));
  EXPECT_FALSE(parse_shapes({"x=1,2", "x=1,2,3"}).ok());  // ranks differ
}

TEST(ShapeRanges, RefusesMalformedSpecsNamingThem) {
  for (const char* bad : {"x", "=1,2", "x=1,,2", "x=a", "x=5..3", "x=32..", "x=..32", "x=-1", "x=1..2..3",
                          "x=99999999999999999999", "x=1, 2"}) {
    auto r = parse_shapes({bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidInput) << bad;
    EXPECT_NE(r.status().message().find("--shape"), std::string::npos) << r.status().message();
  }
}

// y = Relu(x), x float [1, W].
Graph relu_graph() {
  Graph g;
  g.opset = 13;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DType::kFloat32, Shape({Dim(1), Dim::Symbol("W")})};
  Node relu;
  relu.name = "relu";
  relu.op_type = "Relu";
  relu.inputs = {"x"};
  relu.outputs = {"y"};
  g.nodes = {relu};
  g.outputs = {"y"};
  return g;
}

TEST(ShapeRanges, ApplyKeepsTheModelsNameForARangedDim) {
  Graph g = relu_graph();
  ASSERT_TRUE(api::apply_shapes(g, {"x=1,16..64"}).ok());
  EXPECT_EQ(g.info("x")->shape.str(), "[1,W]");
  ASSERT_TRUE(api::apply_shapes(g, {"x=1,16"}).ok());  // one size pins it
  EXPECT_EQ(g.info("x")->shape.str(), "[1,16]");
  Graph h = relu_graph();
  EXPECT_EQ(api::apply_shapes(h, {"y=1,16"}).code(), ErrorCode::kInvalidInput);  // not an input
  EXPECT_EQ(api::apply_shapes(h, {"x=1,4611686018427387904..4611686018427387904"}).code(),
            ErrorCode::kInvalidInput);  // too large to make
}

TEST(ShapeRanges, RunsInsideTheRangeAndRefusesSizesOutsideItNamingTheDim) {
  SessionOptions o;
  o.input_ranges["x"] = {{1, 1}, {16, 64}};
  auto s = InferenceSession::Create(relu_graph(), o);
  ASSERT_TRUE(s.ok()) << s.status().message();
  for (int64_t w : {16, 40, 64}) {
    EXPECT_TRUE((*s)->run(std::vector<Tensor>{Tensor(DType::kFloat32, {1, w})}).ok()) << w;
  }
  for (int64_t w : {8, 65}) {
    auto r = (*s)->run(std::vector<Tensor>{Tensor(DType::kFloat32, {1, w})});
    ASSERT_FALSE(r.ok()) << w;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidInput);
    EXPECT_NE(r.status().message().find("input 'x': dim 1 is " + std::to_string(w) +
                                        ", outside the compiled range 16..64"),
              std::string::npos)
        << r.status().message();
  }
  // Random inputs take the low end of the range, not a size the model cannot run.
  auto in = api::random_inputs(**s, 1);
  ASSERT_TRUE(in.ok());
  EXPECT_EQ((*in)[0].dims(), (Dims{1, 16}));
}

TEST(ShapeRanges, SessionRefusesRangesThatDoNotFitItsInputs) {
  SessionOptions o;
  o.input_ranges["x"] = {{16, 64}};  // rank 1 for a rank-2 input
  EXPECT_EQ(InferenceSession::Create(relu_graph(), o).status().code(), ErrorCode::kInvalidInput);
  o.input_ranges = {{"z", {{1, 1}, {1, 1}}}};  // no such input
  EXPECT_EQ(InferenceSession::Create(relu_graph(), o).status().code(), ErrorCode::kInvalidInput);
  o.input_ranges = {{"x", {{1, 1}, {9, 3}}}};  // empty range
  EXPECT_EQ(InferenceSession::Create(relu_graph(), o).status().code(), ErrorCode::kInvalidInput);
}

TEST(ShapeBuckets, ExactShapesBesideARangeMakeBuckets) {
  using Buckets = std::vector<std::vector<std::string>>;
  auto b = api::bucket_shapes({"x=1,3,48,32..2048", "x=1,3,48,320", "mask=1,7", "x=1,3,48,640", "x=1,3,48,320"});
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(*b, (Buckets{{"x=1,3,48,320", "mask=1,7"}, {"x=1,3,48,640", "mask=1,7"}}));  // repeats count once
  auto none = api::bucket_shapes({"x=1,3,48,32..2048", "mask=1,7"});  // a range alone: no bucket
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto exact = api::bucket_shapes({"x=1,3,48,320"});  // no range: the model is static, no bucket
  ASSERT_TRUE(exact.ok());
  EXPECT_TRUE(exact->empty());
  // Two ranged inputs pair their k-th exact shapes: the counts must agree.
  auto pairs = api::bucket_shapes({"ids=1,8..512", "ids=1,128", "mask=1,8..512", "mask=1,128"});
  ASSERT_TRUE(pairs.ok());
  EXPECT_EQ(*pairs, (Buckets{{"ids=1,128", "mask=1,128"}}));
  auto uneven = api::bucket_shapes({"ids=1,8..512", "ids=1,128", "ids=1,256", "mask=1,8..512", "mask=1,128"});
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("'ids' names 2"), std::string::npos) << uneven.status().message();
  auto missing = api::bucket_shapes({"ids=1,8..512", "ids=1,128", "mask=1,8..512"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'mask' has a range but no exact shape"), std::string::npos)
      << missing.status().message();
}

// y = Relu(Conv(x, w, b)), x float [1, 3, 16, W]: what a text-line recogniser starts with.
Graph line_conv_graph() {
  plugintest::Builder b;
  b.g.name = "line";
  b.input("x", Shape({Dim(1), Dim(3), Dim(16), Dim::Symbol("W")}));
  b.constant("w", plugintest::random_tensor({8, 3, 3, 3}, 5, -0.5f, 0.5f));
  b.constant("b", plugintest::random_tensor({8}, 6, -0.5f, 0.5f));
  Node& conv = b.node("conv", "Conv", {"x", "w", "b"}, "c");
  conv.attrs["kernel_shape"] = Attribute::Ints({3, 3});
  conv.attrs["pads"] = Attribute::Ints({1, 1, 1, 1});
  b.node("relu", "Relu", {"c"}, "y");
  return b.done({"y"});
}

// The runs of a session at `widths`, each checked against the native reference; returns how many ran an engine.
int run_widths(const InferenceSession& s, const std::vector<int64_t>& widths) {
  auto reference = InferenceSession::Create(line_conv_graph());
  EXPECT_TRUE(reference.ok());
  int on_engines = 0;
  for (int64_t w : widths) {
    const Tensor x = plugintest::random_tensor({1, 3, 16, w}, static_cast<unsigned>(w), -1.f, 1.f);
    RunProfile profile;
    auto got = s.run(std::vector<Tensor>{x}, &profile);
    EXPECT_TRUE(got.ok()) << got.status().message();
    if (!got.ok()) return -1;
    auto want = (*reference)->run(std::vector<Tensor>{x});
    EXPECT_TRUE(want.ok());
    EXPECT_EQ((*got)[0].dims(), (*want)[0].dims());
    for (int64_t i = 0; i < (*want)[0].numel(); ++i) {
      EXPECT_NEAR((*got)[0].data<float>()[i], (*want)[0].data<float>()[i], 1e-4f) << "width " << w << " at " << i;
    }
    bool ran_an_engine = false;
    for (const auto& e : profile.entries) ran_an_engine = ran_an_engine || e.engine >= 0;
    on_engines += ran_an_engine;
  }
  return on_engines;
}

// A bucket's dims run on the engines compiled for them; every other width in the range runs the glue graph
// (native: engines need static shapes); both give the native reference's answer, through an artifact and back.
TEST(ShapeBuckets, BucketDimsRunOnTheirEnginesAndOtherWidthsOnTheGlueGraph) {
  if (!find_backend("dnnl").ok()) GTEST_SKIP() << "the dnnl plugin is not built";
  auto bytes = export_onnx_bytes(line_conv_graph());
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  const api::ModelSource model{"", *bytes};
  api::CompileOptions o;
  o.backends = "dnnl,native";
  o.policy = PlacementPolicy::kPriority;
  o.measure = MeasureMode::kOff;
  o.tune_cache = "";
  o.threads = 1;
  o.shapes = {"x=1,3,16,8..64", "x=1,3,16,24"};
  o.bucket_step = 0;  // exact buckets alone (masked ones: MaskedBuckets.*)
  auto g = api::load_graph(model, o.shapes, "compile");
  ASSERT_TRUE(g.ok()) << g.status().message();
  PartitionReport report;
  auto program = api::compile_model(model, std::move(*g), o, &report);
  ASSERT_TRUE(program.ok()) << program.status().message();
  ASSERT_EQ(program->buckets.size(), 1u);
  EXPECT_EQ(program->buckets[0].inputs, (std::vector<Dims>{{1, 3, 16, 24}}));
  EXPECT_TRUE(engines_used(program->graph).empty());  // the ranged width keeps the Conv on native
  const auto bucket_engines = engines_used(program->buckets[0].graph);
  ASSERT_FALSE(bucket_engines.empty());
  EXPECT_EQ(program->engines[static_cast<size_t>(bucket_engines[0])].backend, "dnnl");
  ASSERT_EQ(report.buckets.size(), 1u);
  EXPECT_EQ(report.buckets[0].shapes, "x=1,3,16,24");
  EXPECT_NE(report_text(report).find("bucket x=1,3,16,24"), std::string::npos) << report_text(report);

  auto stored = write_artifact_bytes(*program);
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  auto loaded = read_artifact_bytes("bucketed", stored->data(), stored->size());
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  SessionOptions so;
  so.input_ranges = api::parse_shapes(o.shapes).value();
  auto s = InferenceSession::Create(std::move(*loaded), so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ((*s)->bucket_shapes(), (std::vector<std::vector<Dims>>{{{1, 3, 16, 24}}}));
  uint64_t want_bucket_runs = 0;
  for (int64_t w : {24, 8, 40, 24, 64}) {
    EXPECT_EQ(run_widths(**s, {w}), w == 24 ? 1 : 0) << "width " << w;
    want_bucket_runs += w == 24;
    EXPECT_EQ((*s)->runs_bucket(), want_bucket_runs);
  }
}

// The line model and what a ranged compile of it with dnnl first takes (widths 8..64, no measuring, one thread),
// its tune cache, and so its engine cache, in a fresh temporary directory named by `tag` and the process.
struct RangedLine {
  api::ModelSource model;
  std::filesystem::path dir;
  api::CompileOptions o;
};
RangedLine ranged_line(const std::string& tag) {
  RangedLine r;
  auto bytes = export_onnx_bytes(line_conv_graph());
  EXPECT_TRUE(bytes.ok()) << bytes.status().message();
  r.model = api::ModelSource{"", bytes.ok() ? *bytes : std::string()};
  r.dir = std::filesystem::temp_directory_path() / (tag + std::to_string(::getpid()));
  std::filesystem::remove_all(r.dir);
  r.o.backends = "dnnl,native";
  r.o.policy = PlacementPolicy::kPriority;
  r.o.measure = MeasureMode::kOff;
  r.o.tune_cache = (r.dir / "tune.json").string();
  r.o.threads = 1;
  r.o.bucket_step = 0;  // every width but the buckets' runs on the glue graph
  r.o.shapes = {"x=1,3,16,8..64"};
  return r;
}

// The engines of buckets compiled at run time hold memory of their own (reordered weights, run buffers). It counts
// against the session's memory limit with the plans' arenas: under a limit one byte short of what two buckets hold,
// the older bucket is evicted (with engines counted as nothing, both stayed).
TEST(ShapeBuckets, BucketEnginesCountAgainstTheMemoryLimit) {
  if (!find_backend("dnnl").ok()) GTEST_SKIP() << "the dnnl plugin is not built";
  const RangedLine r = ranged_line("tessera_engine_bytes_");
  SessionOptions so;
  so.bucket_payback_ms = 0;
  const std::vector<Dims> w40{{1, 3, 16, 40}}, w56{{1, 3, 16, 56}};
  auto buckets_kept = [&](const InferenceSession& s) {
    int n = 0;
    for (const auto& d : s.cached_plan_shapes()) n += d == w40 || d == w56;
    return n;
  };
  InferenceSession::PlanCacheBytes held;
  for (const bool limited : {false, true}) {
    SCOPED_TRACE(limited ? "limited" : "no limit");
    if (limited) so.max_memory = held.arenas + held.engines - 1;
    auto s = api::open_session(r.model, r.o, so);
    ASSERT_TRUE(s.ok()) << s.status().message();
    for (const int64_t w : {40, 56}) {
      EXPECT_EQ(run_widths(**s, {w}), 0);  // on native; its bucket compiled after it
      (*s)->wait_for_background_plans();
      EXPECT_EQ(run_widths(**s, {w}), 1);
    }
    EXPECT_EQ((*s)->buckets_compiled(), 2u);
    if (!limited) {
      held = (*s)->plan_cache_bytes();
      // Each bucket's engine holds at least its weights reordered (8 x 3 x 3 x 3 floats).
      EXPECT_GE(held.engines, 2 * 8 * 27 * sizeof(float));
      EXPECT_EQ(buckets_kept(**s), 2);
    } else {
      EXPECT_EQ(buckets_kept(**s), 1);
      const auto now = (*s)->plan_cache_bytes();
      EXPECT_LE(now.arenas + now.engines, so.max_memory);
    }
  }
  std::filesystem::remove_all(r.dir);
}

// A width with no bucket runs on native at once; seen a second time, it is compiled as a bucket in the background,
// and later runs at that width use its engines. The bucket is kept in the engine cache: a new session (the next
// process) reads it back rather than compiling, and a damaged entry is recompiled with a warning.
// A shape gets a bucket compiled once its runs have taken SessionOptions::bucket_payback_ms (0 here: at once;
// by default, as long as a bucket compile takes) over two runs at least.
TEST(ShapeBuckets, AShapeThatRepaysACompileGetsEnginesFromTheBackgroundAndTheCacheKeepsThem) {
  if (!find_backend("dnnl").ok()) GTEST_SKIP() << "the dnnl plugin is not built";
  RangedLine r = ranged_line("tessera_engine_cache_");
  const api::ModelSource& model = r.model;
  const std::filesystem::path& dir = r.dir;
  api::CompileOptions& o = r.o;
  std::vector<std::string> warnings;
  o.warn = [&](const std::string& w) {
    if (w.find("engine cache") != std::string::npos) warnings.push_back(w);  // not the main compile's notes
  };
  EXPECT_EQ(api::engine_cache_dir(o), (dir / "engines").string());
  auto entries = [&] {
    std::vector<std::filesystem::path> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir / "engines", ec)) out.push_back(e.path());
    return out;
  };
  SessionOptions so;
  so.bucket_payback_ms = 0;
  auto open = [&] {
    auto s = api::open_session(model, o, so);
    EXPECT_TRUE(s.ok()) << s.status().message();
    return s.ok() ? std::move(*s) : nullptr;
  };
  {
    auto s = open();
    ASSERT_TRUE(s);
    EXPECT_TRUE(s->native_pool_spins()) << "no engine loaded: native runs alone";
    EXPECT_EQ(run_widths(*s, {40}), 0);  // on native; a bucket queued after it
    s->wait_for_background_plans();
    EXPECT_EQ(s->buckets_compiled(), 1u);
    EXPECT_EQ(s->buckets_from_cache(), 0u);
    EXPECT_EQ(s->bucket_compile_failures(), 0u);
    EXPECT_FALSE(s->native_pool_spins()) << "the bucket's oneDNN threads run beside the native pool now";
    EXPECT_EQ(run_widths(*s, {40, 40}), 2);  // on its bucket's engines now
    EXPECT_EQ(s->runs_bucket(), 2u);
  }
  ASSERT_EQ(entries().size(), 1u);
  const std::filesystem::path entry = entries()[0];
  struct stat before {};
  ASSERT_EQ(::stat(entry.c_str(), &before), 0);
  {
    // The next process: at first sight, the bucket comes from the cache, not from a compile.
    auto s = open();
    ASSERT_TRUE(s);
    EXPECT_EQ(run_widths(*s, {40}), 0);
    s->wait_for_background_plans();
    EXPECT_EQ(s->buckets_compiled(), 1u);
    EXPECT_EQ(s->buckets_from_cache(), 1u);
    EXPECT_EQ(run_widths(*s, {40}), 1);
    struct stat after {};
    ASSERT_EQ(::stat(entry.c_str(), &after), 0);
    EXPECT_EQ(after.st_ino, before.st_ino);  // read, not rewritten
  }
  EXPECT_TRUE(warnings.empty()) << warnings[0];
  {
    // Damage the entry's middle: the next session warns, recompiles, and answers right.
    std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(entry) / 2));
    f.write("\xde\xad\xbe\xef", 4);
  }
  {
    auto s = open();
    ASSERT_TRUE(s);
    EXPECT_EQ(run_widths(*s, {40}), 0);
    s->wait_for_background_plans();  // the probe found the damage; the compile asked after the run made it anew
    EXPECT_EQ(s->buckets_compiled(), 1u);
    EXPECT_EQ(s->buckets_from_cache(), 0u);
    EXPECT_EQ(run_widths(*s, {40}), 1);
  }
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("engine cache entry"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("recompiling"), std::string::npos) << warnings[0];
  ASSERT_EQ(entries().size(), 1u);
  EXPECT_TRUE(read_artifact(entries()[0].string()).ok());  // rewritten whole
  {
    // A positive payback also needs the shape back: one run, however long, asks for no compile; the second does.
    so.bucket_payback_ms = 1e-6;
    auto s = open();
    ASSERT_TRUE(s);
    EXPECT_EQ(run_widths(*s, {56}), 0);
    s->wait_for_background_plans();
    EXPECT_EQ(s->buckets_compiled(), 0u);
    EXPECT_EQ(run_widths(*s, {56}), 0);
    s->wait_for_background_plans();
    EXPECT_EQ(s->buckets_compiled(), 1u);
    EXPECT_EQ(run_widths(*s, {56}), 1);
  }
  // A shape seen twice gets a native plan, and no bucket: one that has not repaid a compile (width 24, not cached),
  // and any without background buckets (40, cached).
  for (const bool buckets : {true, false}) {
    so.bucket_payback_ms = buckets ? 1e9 : 0;
    o.background_buckets = buckets;
    const int64_t w = buckets ? 24 : 40;
    auto s = open();
    ASSERT_TRUE(s);
    EXPECT_EQ(run_widths(*s, {w, w}), 0);
    s->wait_for_background_plans();
    EXPECT_EQ(s->buckets_compiled(), 0u);
    EXPECT_EQ(run_widths(*s, {w}), 0);
    EXPECT_EQ(s->plans_built(), 1u);
  }
  std::filesystem::remove_all(dir);
}

// A bucket compiled at run time is placed for the process that runs it, whose OpenMP policy holds for the whole
// process: the compile takes a single engine's (a bounded spin) and no backend set that would need OpenMP to wait
// passively beside another engine's pool. Before, the artifact's backends, given to the compile as a list, set
// OpenMP to wait passively at the first bucket compile, and every oneDNN primitive of the buckets woke a sleeping
// worker (a keyword spotter's bucket: 1.19-1.25 ms against 1.02 for its static compile).
TEST(ShapeBuckets, BucketCompilesKeepOpenMPSpinningAndPlaceNoSetThatNeedsItPassive) {
  if (!find_backend("dnnl").ok() || !find_backend("xnnpack").ok()) GTEST_SKIP() << "needs the dnnl and xnnpack plugins";
  RangedLine r = ranged_line("tessera_bucket_policy_");
  r.o.backends = "dnnl,xnnpack,native";
  r.o.policy = PlacementPolicy::kCost;
  SessionOptions so;
  so.bucket_payback_ms = 0;
  auto s = api::open_session(r.model, r.o, so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(run_widths(**s, {40}), 0);  // on native; a bucket queued after it
  (*s)->wait_for_background_plans();
  EXPECT_EQ((*s)->buckets_compiled(), 1u);
  EXPECT_EQ(expected_thread_policy(), "GOMP_SPINCOUNT=10000");
  // The same compile as a bucket compile, with its report: no priced set holds both plugins.
  api::CompileOptions o = r.o;
  o.shapes = {"x=1,3,16,40"};
  o.openmp_spins = true;
  auto g = api::load_graph(r.model, o.shapes, "the model");
  ASSERT_TRUE(g.ok()) << g.status().message();
  PartitionReport report;
  auto program = api::compile_graph(std::move(*g), "line", o, &report);
  ASSERT_TRUE(program.ok()) << program.status().message();
  ASSERT_FALSE(report.sets.empty());
  for (const auto& set : report.sets) {
    const bool both = std::count(set.backends.begin(), set.backends.end(), "dnnl") &&
                      std::count(set.backends.begin(), set.backends.end(), "xnnpack");
    EXPECT_FALSE(both) << "a set with both OpenMP and a pool was priced";
  }
  o.openmp_spins = false;
  auto g2 = api::load_graph(r.model, o.shapes, "the model");
  ASSERT_TRUE(g2.ok());
  PartitionReport mixed;
  ASSERT_TRUE(api::compile_graph(std::move(*g2), "line", o, &mixed).ok());
  EXPECT_GT(mixed.sets.size(), report.sets.size()) << "without the flag the mixed set is priced too";
  std::filesystem::remove_all(r.dir);
}

// The engine cache stays within its bound (CompileOptions::engine_cache_max_bytes): past it, the entry used longest
// ago goes. Reading an entry counts as using it: the entry compiled first but read since outlives the one compiled
// after it (dropping the oldest written instead fails this).
TEST(ShapeBuckets, TheEngineCacheDropsTheEntryUsedLongestAgoPastItsBound) {
  if (!find_backend("dnnl").ok()) GTEST_SKIP() << "the dnnl plugin is not built";
  RangedLine r = ranged_line("tessera_engine_cache_bound_");
  SessionOptions so;
  so.bucket_payback_ms = 0;
  std::set<std::filesystem::path> known;
  // Runs `width` in a new session (a bucket compiled for it, or read from the cache) and gives the entry it added.
  auto bucket_at = [&](int64_t width) {
    auto s = api::open_session(r.model, r.o, so);
    EXPECT_TRUE(s.ok()) << s.status().message();
    if (!s.ok()) return std::filesystem::path();
    EXPECT_EQ(run_widths(**s, {width}), 0);
    (*s)->wait_for_background_plans();
    EXPECT_EQ(run_widths(**s, {width}), 1);
    std::filesystem::path added;
    for (const auto& e : std::filesystem::directory_iterator(r.dir / "engines")) {
      if (known.insert(e.path()).second) added = e.path();
    }
    return added;
  };
  const std::filesystem::path e40 = bucket_at(40), e48 = bucket_at(48);
  ASSERT_FALSE(e40.empty());
  ASSERT_FALSE(e48.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // file times apart beyond any coarse clock
  EXPECT_TRUE(bucket_at(40).empty());                          // read back, not compiled: used now
  const auto size = [](const std::filesystem::path& p) { return std::filesystem::file_size(p); };
  r.o.engine_cache_max_bytes = size(e40) + size(e48) + size(e48) / 2;  // two entries fit, three do not
  const std::filesystem::path e56 = bucket_at(56);
  ASSERT_FALSE(e56.empty());
  EXPECT_TRUE(std::filesystem::exists(e40)) << "read since: kept";
  EXPECT_FALSE(std::filesystem::exists(e48)) << "used longest ago: dropped";
  EXPECT_TRUE(std::filesystem::exists(e56)) << "just written: kept";
  std::filesystem::remove_all(r.dir);
}

}  // namespace
}  // namespace tessera
