#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "ir/graph.h"
#include "ops/elementwise_math.h"
#include "runtime/memory_planner.h"
#include "runtime/session.h"
#include "unit/op_test_util.h"
#include "util/thread_pool.h"

namespace tessera {
namespace {

TEST(MemoryPlanner, ReusesBuffersWhoseLifetimesDoNotOverlap) {
  // a:[0,1] b:[1,2] c:[2,3]; a and c may share memory, b may not.
  MemoryPlan p = plan_memory({{1000, 0, 1}, {1000, 1, 2}, {1000, 2, 3}});
  EXPECT_EQ(p.offsets[0], p.offsets[2]);
  EXPECT_NE(p.offsets[0], p.offsets[1]);
  EXPECT_EQ(p.arena_bytes, 2 * 1024u);
  EXPECT_EQ(p.naive_bytes, 3 * 1024u);
}

TEST(MemoryPlanner, NeverOverlapsLiveBuffers) {
  std::vector<BufferRequest> reqs;
  for (int i = 0; i < 200; ++i) {
    reqs.push_back({static_cast<size_t>((i * 7919) % 5000 + 1), i % 37, i % 37 + (i * 31) % 11});
  }
  MemoryPlan p = plan_memory(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    for (size_t j = i + 1; j < reqs.size(); ++j) {
      bool live_together = reqs[i].first_step <= reqs[j].last_step && reqs[j].first_step <= reqs[i].last_step;
      bool bytes_overlap = p.offsets[i] < p.offsets[j] + reqs[j].size && p.offsets[j] < p.offsets[i] + reqs[i].size;
      EXPECT_FALSE(live_together && bytes_overlap) << i << " " << j;
    }
    EXPECT_LE(p.offsets[i] + reqs[i].size, p.arena_bytes);
  }
}

TEST(ThreadPool, CoversRangeExactlyOnceAndNests) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> hits(10000);
  pool.parallel_for(10000, 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    pool.parallel_for(4, 1, [](int64_t, int64_t) {});  // nested: runs inline
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

// Each thread's block holds an equal share of the items (to one item), whatever the chunk size: no call's range
// crosses a block's end. Cut in chunks, 10 items made 5 chunks of 2 and blocks of 4 and 6 items.
TEST(ThreadPool, BlocksShareItemsEvenly) {
  for (int threads : {2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {5, 9, 10, 20, 37, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<bool> crossed{false};
      pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
        for (int t = 1; t < threads; ++t) {
          const int64_t edge = t * n / threads;
          if (b < edge && e > edge) crossed = true;
        }
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      EXPECT_FALSE(crossed.load()) << threads << " threads, " << n << " items";
      for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    }
  }
}

// y = Relu(x + c) with x [2,3] float and c a constant.
Graph small_graph() {
  Graph g;
  g.opset = 13;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DType::kFloat32, Shape({Dim::Symbol("batch"), Dim(3)})};
  g.constants["c"] = Tensor::FromVector<float>({1.f, -2.f, 3.f}, {3});
  Node add;
  add.name = "add";
  add.op_type = "Add";
  add.inputs = {"x", "c"};
  add.outputs = {"s"};
  Node relu;
  relu.name = "relu";
  relu.op_type = "Relu";
  relu.inputs = {"s"};
  relu.outputs = {"y"};
  g.nodes = {add, relu};
  g.outputs = {"y"};
  return g;
}

// NonMaxSuppression's output is sized by the run (the boxes it keeps): the kernel allocates it, and that counts
// against the session's memory limit like every other tensor of the run.
TEST(InferenceSession, OutputsAKernelAllocatesCountAgainstTheMemoryLimit) {
  Graph g;
  g.opset = 13;
  g.inputs = {"boxes", "scores"};
  const int64_t n = 4096;
  g.values["boxes"] = ValueInfo{DType::kFloat32, Shape::FromDims({1, n, 4})};
  g.values["scores"] = ValueInfo{DType::kFloat32, Shape::FromDims({1, 1, n})};
  g.constants["max_out"] = Tensor::FromVector<int64_t>({n}, {1});
  Node nms;
  nms.name = "nms";
  nms.op_type = "NonMaxSuppression";
  nms.inputs = {"boxes", "scores", "max_out"};
  nms.outputs = {"selected"};
  g.nodes = {nms};
  g.outputs = {"selected"};
  // Disjoint unit boxes: every one is kept, n x 3 int64 = 96 KiB.
  Tensor boxes(DType::kFloat32, {1, n, 4}), scores(DType::kFloat32, {1, 1, n});
  for (int64_t i = 0; i < n; ++i) {
    float* b = boxes.data<float>() + 4 * i;
    b[0] = b[1] = static_cast<float>(2 * i);
    b[2] = b[3] = static_cast<float>(2 * i + 1);
    scores.data<float>()[i] = static_cast<float>(i) / static_cast<float>(n);
  }
  for (size_t limit : {size_t{64} << 10, size_t{1} << 20}) {
    SessionOptions opts;
    opts.max_memory = limit;
    auto s = InferenceSession::Create(g, opts);
    ASSERT_TRUE(s.ok()) << s.status().message();
    auto out = (*s)->run(std::vector<Tensor>{boxes, scores});
    if (limit < (size_t{96} << 10)) {
      ASSERT_FALSE(out.ok());
      EXPECT_EQ(out.status().code(), ErrorCode::kInvalidInput);
      EXPECT_NE(out.status().message().find("'nms'"), std::string::npos) << out.status().message();
      EXPECT_NE(out.status().message().find("memory limit"), std::string::npos) << out.status().message();
    } else {
      ASSERT_TRUE(out.ok()) << out.status().message();
      EXPECT_EQ((*out)[0].dims(), (Dims{n, 3}));
    }
  }
}

// Exporters declare output shapes as they saw them for one input. Pad's output depends on the pads it is given at
// run time, so the declared [1,3,7,12] must not size its buffer: other pads give another shape (found by fuzzing,
// an overrun of that buffer before).
TEST(InferenceSession, DeclaredShapesNeverSizeOutputsThatDependOnInputValues) {
  Graph g;
  g.opset = 13;
  g.inputs = {"x", "pads"};
  g.values["x"] = ValueInfo{DType::kFloat32, Shape::FromDims({1, 3, 4, 5})};
  g.values["pads"] = ValueInfo{DType::kInt64, Shape::FromDims({8})};
  g.values["y"] = ValueInfo{DType::kFloat32, Shape::FromDims({1, 3, 7, 12})};  // as declared
  Node pad;
  pad.name = "pad";
  pad.op_type = "Pad";
  pad.inputs = {"x", "pads"};
  pad.outputs = {"y"};
  g.nodes = {pad};
  g.outputs = {"y"};
  auto s = InferenceSession::Create(g);
  ASSERT_TRUE(s.ok()) << s.status().message();
  Tensor x(DType::kFloat32, {1, 3, 4, 5});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i + 1);
  for (const std::vector<int64_t>& pads : {std::vector<int64_t>{0, 0, 1, 3, 0, 0, 2, 4},
                                            std::vector<int64_t>{0, 1, 1, 0, 0, 0, 1, 1}}) {
    auto out = (*s)->run(std::vector<Tensor>{x, Tensor::FromVector<int64_t>(pads, {8})});
    ASSERT_TRUE(out.ok()) << out.status().message();
    const Tensor& y = (*out)[0];
    const Dims want{1, 3 + pads[1] + pads[5], 4 + pads[2] + pads[6], 5 + pads[3] + pads[7]};
    ASSERT_EQ(y.dims(), want);
    double sum = 0;
    for (int64_t i = 0; i < y.numel(); ++i) sum += y.data<float>()[i];
    EXPECT_EQ(sum, 60.0 * 61.0 / 2);  // every input element once, zeros around it
  }
}

TEST(InferenceSession, RunsWithSymbolicBatchAndChecksInputs) {
  auto s = InferenceSession::Create(small_graph());
  ASSERT_TRUE(s.ok()) << s.status().message();
  Tensor x = Tensor::FromVector<float>({0.f, 0.f, 0.f, -5.f, 5.f, -5.f}, {2, 3});
  auto out = (*s)->run(std::vector<Tensor>{x});
  ASSERT_TRUE(out.ok()) << out.status().message();
  const float* y = (*out)[0].data<float>();
  std::vector<float> expect = {1, 0, 3, 0, 3, 0};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y[i], expect[static_cast<size_t>(i)]);

  auto bad_dtype = (*s)->run(std::vector<Tensor>{Tensor(DType::kInt64, {2, 3})});
  EXPECT_EQ(bad_dtype.status().code(), ErrorCode::kInvalidInput);
  auto bad_shape = (*s)->run(std::vector<Tensor>{Tensor(DType::kFloat32, {2, 4})});
  EXPECT_EQ(bad_shape.status().code(), ErrorCode::kInvalidInput);
  EXPECT_NE(bad_shape.status().message().find("'x'"), std::string::npos);
  auto missing = (*s)->run(std::vector<Tensor>{});
  EXPECT_EQ(missing.status().code(), ErrorCode::kInvalidInput);
}

// 8 threads, `runs` runs each of small_graph at batch batch_of(thread, run): the outputs that are wrong.
int concurrent_run_errors(const InferenceSession& s, int runs, int64_t (*batch_of)(int, int)) {
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int it = 0; it < runs; ++it) {
        Tensor x(DType::kFloat32, {batch_of(t, it), 3});
        for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((t + it + i) % 7) - 3.f;
        auto out = s.run(std::vector<Tensor>{x});
        if (!out.ok() || (*out)[0].dims() != x.dims()) {
          errors++;
          continue;
        }
        const float c[3] = {1.f, -2.f, 3.f};
        for (int64_t i = 0; i < x.numel(); ++i) {
          if ((*out)[0].data<float>()[i] != std::max(0.f, x.data<float>()[i] + c[i % 3])) errors++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  return errors.load();
}

TEST(InferenceSession, ConcurrentRunsFromManyThreadsAreCorrect) {
  SessionOptions o;
  o.num_threads = 2;
  auto s = InferenceSession::Create(small_graph(), o);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(concurrent_run_errors(**s, 200, [](int t, int it) -> int64_t { return 1 + (t + it) % 4; }), 0);
}

// Plans are kept per input shape, least recently used evicted first: a stream of many shapes keeps memory bounded,
// and the shapes in use stay planned.
TEST(InferenceSession, PlanCacheEvictsTheLeastRecentlyUsedShape) {
  SessionOptions o;
  o.plan_in_background = false;  // each run plans its shape
  auto s = InferenceSession::Create(small_graph(), o);
  ASSERT_TRUE(s.ok());
  auto run_batch = [&](int64_t b) { return (*s)->run(std::vector<Tensor>{Tensor(DType::kFloat32, {b, 3})}).ok(); };
  for (int64_t b = 1; b <= 16; ++b) ASSERT_TRUE(run_batch(b));
  ASSERT_EQ((*s)->cached_plan_shapes().size(), 16u);
  EXPECT_EQ((*s)->plans_built(), 16u);
  ASSERT_TRUE(run_batch(1));   // batch 1 is used again (no new plan): batch 2 is now the least recently used
  EXPECT_EQ((*s)->plans_built(), 16u);
  ASSERT_TRUE(run_batch(17));  // one over the bound: batch 2 goes
  const auto cached = (*s)->cached_plan_shapes();
  ASSERT_EQ(cached.size(), 16u);
  EXPECT_EQ(cached[0], (std::vector<Dims>{{17, 3}}));
  EXPECT_EQ(cached[1], (std::vector<Dims>{{1, 3}}));
  EXPECT_EQ(std::count(cached.begin(), cached.end(), std::vector<Dims>{{2, 3}}), 0);
  EXPECT_EQ(std::count(cached.begin(), cached.end(), std::vector<Dims>{{3, 3}}), 1);
  ASSERT_TRUE(run_batch(2));  // planned again
  EXPECT_EQ((*s)->plans_built(), 18u);
  EXPECT_EQ((*s)->runs_waited(), 18u);
  EXPECT_EQ((*s)->runs_generic(), 0u);
}

// By default a run at a shape without a plan goes on at once on the generic plan; a shape seen a second time gets
// its own plan from the background, which later runs at that shape use. No run waits.
TEST(InferenceSession, NewShapesRunOnTheGenericPlanWhileTheirsIsBuilt) {
  auto s = InferenceSession::Create(small_graph());
  ASSERT_TRUE(s.ok());
  Tensor x = Tensor::FromVector<float>({0.f, 0.f, 0.f, -5.f, 5.f, -5.f}, {2, 3});
  const std::vector<float> want = {1, 0, 3, 0, 3, 0};
  const uint64_t built_after[] = {0, 1, 1};  // seen once: nothing built; twice: built in the background
  for (int round = 0; round < 3; ++round) {
    auto out = (*s)->run(std::vector<Tensor>{x});
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(std::vector<float>((*out)[0].data<float>(), (*out)[0].data<float>() + 6), want);
    (*s)->wait_for_background_plans();
    EXPECT_EQ((*s)->plans_built(), built_after[round]) << round;
  }
  EXPECT_EQ((*s)->cached_plan_shapes(), (std::vector<std::vector<Dims>>{{{2, 3}}}));
  EXPECT_EQ((*s)->runs_generic(), 2u);  // the third run used the shape's own plan
  EXPECT_EQ((*s)->runs_waited(), 0u);
}

// The generic plan frees each value after its last use: a chain of 8 Neg and Abs steps on 256 KiB holds two values at
// a time, so it runs within a limit of four, where holding every value to the end of the run (2 MiB) would not.
TEST(InferenceSession, TheGenericPlanFreesEachValueAfterItsLastUse) {
  Graph g;
  g.opset = 13;
  g.inputs = {"v0"};
  g.values["v0"] = ValueInfo{DType::kFloat32, Shape({Dim::Symbol("N")})};
  for (int i = 0; i < 8; ++i) {
    Node n;
    n.name = "r" + std::to_string(i);
    n.op_type = i % 2 ? "Abs" : "Neg";
    n.inputs = {"v" + std::to_string(i)};
    n.outputs = {"v" + std::to_string(i + 1)};
    g.nodes.push_back(n);
  }
  g.outputs = {"v8"};
  SessionOptions o;
  o.optimize = false;  // eight steps, not one fused chain
  o.fuse = false;
  const int64_t n = 64 * 1024;
  o.max_memory = 4 * n * sizeof(float);
  auto s = InferenceSession::Create(g, o);
  ASSERT_TRUE(s.ok()) << s.status().message();
  Tensor x(DType::kFloat32, {n});
  for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = static_cast<float>(i % 7) - 3.f;
  auto out = (*s)->run(std::vector<Tensor>{x});
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ((*s)->runs_generic(), 1u);
  for (int64_t i = 0; i < n; ++i) {
    float want = x.data<float>()[i];
    for (int k = 0; k < 8; ++k) want = k % 2 ? std::fabs(want) : -want;
    ASSERT_EQ((*out)[0].data<float>()[i], want) << i;
  }
}

// With a memory limit, the plans kept hold arenas within it.
TEST(InferenceSession, PlanCacheKeepsArenasWithinTheMemoryLimit) {
  SessionOptions o;
  o.plan_in_background = false;
  o.fuse = false;  // Add's output then lives in the arena: 12 bytes per batch row
  o.max_memory = 3 * 12 * 1000;
  auto s = InferenceSession::Create(small_graph(), o);
  ASSERT_TRUE(s.ok());
  for (int64_t b = 100; b <= 1000; b += 100) {
    ASSERT_TRUE((*s)->run(std::vector<Tensor>{Tensor(DType::kFloat32, {b, 3})}).ok()) << b;
  }
  const auto cached = (*s)->cached_plan_shapes();
  size_t held = 0;
  for (const auto& dims : cached) held += (*s)->stats(dims)->arena_bytes;
  EXPECT_GT(held, 0u);
  EXPECT_LE(held, o.max_memory);
  // 1000 + 900 + 800 rows fit 3000; 700 more would not.
  EXPECT_EQ(cached, (std::vector<std::vector<Dims>>{{{1000, 3}}, {{900, 3}}, {{800, 3}}}));
}

// Many threads, more shapes than the cache holds: plans are built, shared and evicted while runs use them.
TEST(InferenceSession, ConcurrentRunsOfManyShapesAreCorrect) {
  SessionOptions o;
  o.num_threads = 2;
  auto s = InferenceSession::Create(small_graph(), o);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(concurrent_run_errors(**s, 100, [](int t, int it) -> int64_t { return 1 + (t * 37 + it * 11) % 90; }), 0);
  (*s)->wait_for_background_plans();  // queued shapes hold a slot until built
  EXPECT_LE((*s)->cached_plan_shapes().size(), 16u);
}

TEST(InferenceSession, GraphWithNoNodesReturnsItsInput) {
  Graph g;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DType::kFloat32, Shape::FromDims({4})};
  g.outputs = {"x"};
  auto s = InferenceSession::Create(g);
  ASSERT_TRUE(s.ok()) << s.status().message();
  Tensor x = Tensor::FromVector<float>({1, 2, 3, 4}, {4});
  auto out = (*s)->run(std::vector<Tensor>{x});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].data<float>()[3], 4.f);
  EXPECT_NE((*out)[0].raw(), x.raw());  // outputs never alias the caller's inputs
}

TEST(InferenceSession, ReportsPeakArenaBelowNaiveSum) {
  // A chain of 6 Relus: each intermediate dies after its consumer.
  Graph g;
  g.opset = 13;
  g.inputs = {"v0"};
  g.values["v0"] = ValueInfo{DType::kFloat32, Shape::FromDims({1024})};
  for (int i = 0; i < 6; ++i) {
    Node n;
    n.name = "r" + std::to_string(i);
    n.op_type = "Relu";
    n.inputs = {"v" + std::to_string(i)};
    n.outputs = {"v" + std::to_string(i + 1)};
    g.nodes.push_back(n);
  }
  g.outputs = {"v6"};
  SessionOptions o;
  o.optimize = false;
  o.fuse = false;  // the chain would become one fused node
  auto s = InferenceSession::Create(g, o);
  ASSERT_TRUE(s.ok());
  auto st = (*s)->stats({{1024}});
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->arena_bytes, 2 * 4096u);
  EXPECT_EQ(st->naive_bytes, 5 * 4096u);
}

// A Reshape between arena values is a view: its output takes its input's bytes, which then stay live until the last
// read of either. Here `a` is read last by its Reshape (step 1), while its view `b` is read at the end: had a's bytes
// been freed after step 1, c, d or e would have taken them and the product would be wrong.
TEST(InferenceSession, ReshapesViewTheirInputAndKeepItLiveForEveryReader) {
  Graph g;
  g.opset = 13;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DType::kFloat32, Shape::FromDims({1024})};
  g.constants["square"] = Tensor::FromVector<int64_t>({32, 32}, {2});
  auto node = [&](const char* name, const char* op, std::vector<std::string> in, const char* out) {
    Node n;
    n.name = name;
    n.op_type = op;
    n.inputs = std::move(in);
    n.outputs = {out};
    g.nodes.push_back(n);
  };
  node("neg", "Neg", {"x"}, "a");
  node("view_a", "Reshape", {"a", "square"}, "b");
  node("abs", "Abs", {"x"}, "c");
  node("relu", "Relu", {"c"}, "d");
  node("sigmoid", "Sigmoid", {"d"}, "e");
  node("view_e", "Reshape", {"e", "square"}, "r");
  node("mul", "Mul", {"r", "b"}, "out");
  g.outputs = {"out"};
  SessionOptions o;
  o.optimize = false;
  o.fuse = false;
  auto s = InferenceSession::Create(g, o);
  ASSERT_TRUE(s.ok()) << s.status().message();
  std::vector<float> xs(1024);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 37) * 0.25f - 4.f;
  auto out = (*s)->run(std::vector<Tensor>{Tensor::FromVector<float>(xs, {1024})});
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ((*out)[0].dims(), (Dims{32, 32}));
  for (size_t i = 0; i < xs.size(); ++i) {
    const float e = 1.f / (1.f + std::exp(-std::fabs(xs[i])));
    ASSERT_NEAR((*out)[0].data<float>()[i], e * -xs[i], 1e-6f) << "at " << i;
  }
  auto st = (*s)->stats({{1024}});
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->naive_bytes, 4 * 4096u);  // a, c, d, e: the two views take no bytes of their own
}

// A Split along an axis with only 1s before it is a view too: each output is a piece of its input at its byte offset
// (a GLU's halves). `a` [1, 3, 256] splits into [1, 1, 256] and [1, 2, 256] pieces; its last reader is the Split, yet
// both pieces are read at the end, after c, d and e could have reused freed bytes. A Split with a 2 before its axis
// (pieces strided in the input) and a Split whose piece is a graph output still copy, and the results are exact.
TEST(InferenceSession, SplitsAlongAnOuterAxisViewTheirInput) {
  Graph g;
  g.opset = 13;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DType::kFloat32, Shape::FromDims({1, 3, 256})};
  g.constants["parts"] = Tensor::FromVector<int64_t>({1, 2}, {2});
  g.constants["flat"] = Tensor::FromVector<int64_t>({2, 384}, {2});
  auto node = [&](const char* name, const char* op, std::vector<std::string> in, std::vector<std::string> out) {
    Node n;
    n.name = name;
    n.op_type = op;
    n.inputs = std::move(in);
    n.outputs = std::move(out);
    g.nodes.push_back(n);
  };
  node("neg", "Neg", {"x"}, {"a"});
  node("split", "Split", {"a", "parts"}, {"p", "q"});
  g.nodes.back().attrs["axis"] = testutil::int_attr(1);
  node("abs", "Abs", {"x"}, {"c"});
  node("relu", "Relu", {"c"}, {"d"});
  node("sigmoid", "Sigmoid", {"d"}, {"e"});
  node("mul", "Mul", {"e", "p"}, {"y"});  // [1, 3, 256] * [1, 1, 256]
  node("square", "Mul", {"q", "q"}, {"z"});
  node("view", "Reshape", {"e", "flat"}, {"f"});  // [2, 384]: the pieces of this Split are strided
  node("split2", "Split", {"f", "parts2"}, {"f0", "f1"});
  g.nodes.back().attrs["axis"] = testutil::int_attr(1);
  g.constants["parts2"] = Tensor::FromVector<int64_t>({128, 256}, {2});
  node("neg2", "Neg", {"f1"}, {"w"});
  g.outputs = {"y", "z", "f0", "w"};
  SessionOptions o;
  o.optimize = false;
  o.fuse = false;
  auto s = InferenceSession::Create(g, o);
  ASSERT_TRUE(s.ok()) << s.status().message();
  std::vector<float> xs(768);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 41) * 0.25f - 5.f;
  auto out = (*s)->run(std::vector<Tensor>{Tensor::FromVector<float>(xs, {1, 3, 256})});
  ASSERT_TRUE(out.ok()) << out.status().message();
  const auto sig = [&](size_t i) { return fastmath::logistic(std::fabs(xs[i])); };
  for (size_t i = 0; i < 768; ++i) ASSERT_EQ((*out)[0].data<float>()[i], sig(i) * -xs[i % 256]) << "y at " << i;
  for (size_t i = 0; i < 512; ++i) ASSERT_EQ((*out)[1].data<float>()[i], xs[256 + i] * xs[256 + i]) << "z at " << i;
  for (size_t r = 0; r < 2; ++r) {
    for (size_t k = 0; k < 384; ++k) {
      const float e = sig(r * 384 + k);
      if (k < 128)
        ASSERT_EQ((*out)[2].data<float>()[r * 128 + k], e) << "f0 at " << r << "," << k;
      else
        ASSERT_EQ((*out)[3].data<float>()[r * 256 + k - 128], -e) << "w at " << r << "," << k;
    }
  }
  auto st = (*s)->stats({{1, 3, 256}});
  ASSERT_TRUE(st.ok());
  // Arena values a, c, d, e and f1: p and q take a's bytes, f takes e's, and f's Split copies f1 (y, z, f0 and w
  // are outputs).
  EXPECT_EQ(st->naive_bytes, (4 * 768 + 512) * 4u);
}

}  // namespace
}  // namespace tessera
