// Planned execution of If/Loop bodies (runtime/body_plans.h): a body is
// planned once per signature and reused, reads outer constants as constants,
// and falls back to eager execution when its signature keeps changing.
#include "runtime/body_plans.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "runtime/execution_plan.h"
#include "util/thread_pool.h"
#include "unit/op_test_util.h"

namespace tessera {
namespace {

using testutil::graph_node;
using testutil::set_graph;

std::vector<float> values(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

// y = If(c) then x * w + 1 (w an outer constant), else x - 1 (x an outer input, [3]).
Graph if_model() {
  Graph g;
  g.inputs = {"x", "c"};
  g.values["x"] = ValueInfo{DType::kFloat32, Shape::FromDims({3})};
  g.values["c"] = ValueInfo{DType::kBool, Shape::FromDims({})};
  g.constants["w"] = Tensor::FromVector<float>({2, 3, 4}, {3});
  Graph then_g;
  then_g.name = "then";
  then_g.constants["one"] = Tensor::FromVector<float>({1.f}, {1});
  then_g.nodes.push_back(graph_node("Mul", {"x", "w"}, {"xw"}));
  then_g.nodes.push_back(graph_node("Add", {"xw", "one"}, {"t_out"}));
  then_g.outputs = {"t_out"};
  Graph else_g;
  else_g.name = "else";
  else_g.constants["one"] = Tensor::FromVector<float>({1.f}, {1});
  else_g.nodes.push_back(graph_node("Sub", {"x", "one"}, {"e_out"}));
  else_g.outputs = {"e_out"};
  Node n = graph_node("If", {"c"}, {"y"});
  set_graph(n, "then_branch", std::move(then_g));
  set_graph(n, "else_branch", std::move(else_g));
  g.nodes.push_back(std::move(n));
  g.outputs = {"y"};
  return g;
}

// v_final = Loop(M) { v = v + x } from v0; with `grow`, v = Concat(v, x[0:1]) instead (a shape that changes on
// every iteration).
Graph loop_model(bool grow) {
  Graph g;
  g.inputs = {"M", "v0", "x"};
  g.values["M"] = ValueInfo{DType::kInt64, Shape::FromDims({})};
  g.values["v0"] = ValueInfo{DType::kFloat32, Shape::FromDims({2})};
  g.values["x"] = ValueInfo{DType::kFloat32, Shape::FromDims({2})};
  Graph body;
  body.name = "body";
  body.inputs = {"i", "cond_in", "v"};
  body.values["i"] = ValueInfo{DType::kInt64, Shape::FromDims({})};
  body.values["cond_in"] = ValueInfo{DType::kBool, Shape::FromDims({})};
  body.values["v"] = ValueInfo{DType::kFloat32, grow ? Shape::FromDims({-1}) : Shape::FromDims({2})};
  if (grow) {
    body.values["v"].shape = Shape();
    Node c = graph_node("Concat", {"v", "x"}, {"v_out"});
    Attribute axis;
    axis.kind = Attribute::Kind::kInt;
    axis.i = 0;
    c.attrs["axis"] = axis;
    body.nodes.push_back(c);
  } else {
    body.nodes.push_back(graph_node("Add", {"v", "x"}, {"v_out"}));
  }
  body.nodes.push_back(graph_node("Identity", {"cond_in"}, {"cond_out"}));
  body.outputs = {"cond_out", "v_out"};
  Node n = graph_node("Loop", {"M", "", "v0"}, {"v_final"});
  set_graph(n, "body", std::move(body));
  g.nodes.push_back(std::move(n));
  g.outputs = {"v_final"};
  return g;
}

std::shared_ptr<ExecutionPlan> plan(Graph g, ThreadPool* pool) {
  const PlanOptions opts;
  Status s = prepare_for_plan(g, opts);
  EXPECT_TRUE(s.ok()) << s.message();
  auto p = ExecutionPlan::Build(std::move(g), pool, nullptr, opts);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.ok() ? *p : nullptr;
}

TEST(BodyPlans, an_if_plans_each_branch_once_and_reuses_it) {
  ThreadPool pool(2);
  auto p = plan(if_model(), &pool);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->num_body_plans(), 0);  // planned on first use
  Tensor x = Tensor::FromVector<float>({1, 2, 3}, {3});
  for (int run = 0; run < 6; ++run) {
    bool c = run % 2 == 0;
    auto out = p->run({x, Tensor::Scalar<bool>(c)});
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(values((*out)[0]), c ? (std::vector<float>{3, 7, 13}) : (std::vector<float>{0, 1, 2}));
  }
  EXPECT_EQ(p->num_body_plans(), 2);
  // Another shape of the outer value the branches read is another signature.
  auto out = p->run({Tensor::FromVector<float>({1, 2, 3}, {3}), Tensor::Scalar<bool>(true)});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(p->num_body_plans(), 2);
}

TEST(BodyPlans, a_loop_body_is_planned_once_for_every_iteration) {
  ThreadPool pool(2);
  auto p = plan(loop_model(false), &pool);
  ASSERT_TRUE(p);
  for (int64_t trips : {10, 3, 0}) {
    auto out = p->run({Tensor::Scalar<int64_t>(trips), Tensor::FromVector<float>({1, 2}, {2}),
                       Tensor::FromVector<float>({0.5f, -1}, {2})});
    ASSERT_TRUE(out.ok()) << out.status().message();
    const float t = static_cast<float>(trips);
    EXPECT_EQ(values((*out)[0]), (std::vector<float>{1 + 0.5f * t, 2 - t}));
  }
  EXPECT_EQ(p->num_body_plans(), 1);
}

TEST(BodyPlans, a_body_whose_shapes_keep_changing_runs_eagerly_with_the_same_results) {
  ThreadPool pool(2);
  auto p = plan(loop_model(true), &pool);
  ASSERT_TRUE(p);
  const int64_t trips = 3 * BodyPlanCache::kMaxPlansPerBody;
  auto out = p->run({Tensor::Scalar<int64_t>(trips), Tensor::FromVector<float>({1, 2}, {2}),
                     Tensor::FromVector<float>({5, 6}, {2})});
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ((*out)[0].dims(), (Dims{2 + 2 * trips}));
  std::vector<float> v = values((*out)[0]);
  EXPECT_EQ(v[0], 1);
  EXPECT_EQ(v[1], 2);
  for (int64_t k = 0; k < trips; ++k) {
    EXPECT_EQ(v[static_cast<size_t>(2 + 2 * k)], 5);
    EXPECT_EQ(v[static_cast<size_t>(3 + 2 * k)], 6);
  }
  EXPECT_EQ(p->num_body_plans(), 0);  // gave up planning this body: no plans kept
}

TEST(BodyPlans, concurrent_runs_share_the_body_plans) {
  ThreadPool pool(2);
  auto p = plan(if_model(), &pool);
  ASSERT_TRUE(p);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int it = 0; it < 100; ++it) {
        const float a = static_cast<float>(t * 1000 + it);
        const bool c = (t + it) % 3 == 0;
        auto out = p->run({Tensor::FromVector<float>({a, a, a}, {3}), Tensor::Scalar<bool>(c)});
        if (!out.ok()) {
          errors++;
          continue;
        }
        std::vector<float> want = c ? std::vector<float>{2 * a + 1, 3 * a + 1, 4 * a + 1}
                                    : std::vector<float>{a - 1, a - 1, a - 1};
        if (values((*out)[0]) != want) errors++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(p->num_body_plans(), 2);
}

}  // namespace
}  // namespace tessera
