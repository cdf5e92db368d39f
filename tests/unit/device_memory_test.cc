// The host's side of device memory (backend ABI minor revision 3): a backend
// whose tensors live on a device gets device pointers in run(), values that
// pass between two of its regions stay on the device, and only what crosses
// to or from the host is copied, once per run.
//
// The "device" here is a region of host memory the test backend hands out
// through device_alloc and checks: run() and copy() fail on any pointer that
// is not inside one of its live allocations on the side the call says, so a
// host pointer reaching an engine (or a device pointer reaching host code
// through a copy) is an error, not a silent success. Compile, load and the
// arithmetic itself are the native backend's.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "backends/native/native_backend.h"
#include "partition/partition.h"
#include "passes/shape_inference.h"
#include "runtime/session.h"
#include "unit/op_test_util.h"

namespace tessera {
namespace {

struct SimDevice {
  std::mutex mu;
  std::map<const char*, size_t> live;  // allocations: start -> size
  size_t h2d_bytes = 0, d2h_bytes = 0, d2d_bytes = 0;
  int h2d = 0, d2h = 0, syncs = 0, runs = 0, allocs = 0;
  std::vector<std::string> violations;

  bool on_device(const void* p, size_t bytes) {
    auto c = static_cast<const char*>(p);
    auto it = live.upper_bound(c);
    if (it == live.begin()) return false;
    --it;
    return c >= it->first && c + bytes <= it->first + it->second;
  }
  void reset_counts() {
    std::lock_guard<std::mutex> lock(mu);
    h2d_bytes = d2h_bytes = d2d_bytes = 0;
    h2d = d2h = syncs = runs = 0;
  }
};

SimDevice& sim() {
  static SimDevice d;
  return d;
}

void set_msg(char* msg, size_t cap, const std::string& m) { std::snprintf(msg, cap, "%s", m.c_str()); }

const std::set<std::string>& device_ops() {
  static const std::set<std::string> ops = {"Relu", "Sigmoid", "Add", "Tanh"};
  return ops;
}

tessera_status_t dev_capability(const void* model, size_t size, const tessera_capability_sink_t* sink, char* msg,
                                size_t cap) {
  onnx::ModelProto m;
  if (!m.ParseFromArray(model, static_cast<int>(size))) {
    set_msg(msg, cap, "not a ModelProto");
    return TESSERA_ERROR_INVALID_ARGUMENT;
  }
  for (int i = 0; i < m.graph().node_size(); ++i) {
    const bool ok = device_ops().count(m.graph().node(i).op_type()) > 0;
    sink->node(sink->ctx, i, ok ? 1 : 0, ok ? "" : "not on this device");
  }
  return TESSERA_OK;
}

tessera_status_t dev_run(tessera_engine_t* e, const tessera_tensor_t* in, size_t n_in, tessera_tensor_t* out,
                         size_t n_out, char* msg, size_t cap) {
  {
    std::lock_guard<std::mutex> lock(sim().mu);
    sim().runs++;
    for (size_t k = 0; k < n_in + n_out; ++k) {
      const tessera_tensor_t& t = k < n_in ? in[k] : out[k - n_in];
      if (t.size_bytes > 0 && !sim().on_device(t.data, t.size_bytes)) {
        set_msg(msg, cap, "a tensor handed to run() is not in device memory");
        sim().violations.push_back(msg);
        return TESSERA_ERROR_INVALID_ARGUMENT;
      }
    }
  }
  return native_backend_table()->run(e, in, n_in, out, n_out, msg, cap);
}

tessera_status_t dev_alloc(size_t bytes, void** out, char* msg, size_t cap) {
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!p) {
    set_msg(msg, cap, "out of device memory");
    return TESSERA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard<std::mutex> lock(sim().mu);
  sim().live[static_cast<const char*>(p)] = bytes;
  sim().allocs++;
  *out = p;
  return TESSERA_OK;
}

void dev_free(void* p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lock(sim().mu);
    if (!sim().live.erase(static_cast<const char*>(p))) sim().violations.push_back("device_free of a foreign pointer");
  }
  std::free(p);
}

tessera_status_t dev_copy(void* dst, const void* src, size_t bytes, int32_t dir, char* msg, size_t cap) {
  std::lock_guard<std::mutex> lock(sim().mu);
  const bool src_dev = sim().on_device(src, bytes), dst_dev = sim().on_device(dst, bytes);
  const bool ok = (dir == TESSERA_COPY_HOST_TO_DEVICE && !src_dev && dst_dev) ||
                  (dir == TESSERA_COPY_DEVICE_TO_HOST && src_dev && !dst_dev) ||
                  (dir == TESSERA_COPY_DEVICE_TO_DEVICE && src_dev && dst_dev);
  if (!ok) {
    set_msg(msg, cap, "copy direction " + std::to_string(dir) + " does not match where its pointers are");
    sim().violations.push_back(msg);
    return TESSERA_ERROR_INVALID_ARGUMENT;
  }
  std::memcpy(dst, src, bytes);
  if (dir == TESSERA_COPY_HOST_TO_DEVICE) sim().h2d_bytes += bytes, sim().h2d++;
  if (dir == TESSERA_COPY_DEVICE_TO_HOST) sim().d2h_bytes += bytes, sim().d2h++;
  if (dir == TESSERA_COPY_DEVICE_TO_DEVICE) sim().d2d_bytes += bytes;
  return TESSERA_OK;
}

tessera_status_t dev_sync(char*, size_t) {
  std::lock_guard<std::mutex> lock(sim().mu);
  sim().syncs++;
  return TESSERA_OK;
}

std::shared_ptr<const Backend> device_backend() {
  static tessera_backend_t table = [] {
    tessera_backend_t t = *native_backend_table();
    t.struct_size = sizeof(tessera_backend_t);
    t.name = "simdev";
    t.capability = dev_capability;
    t.run = dev_run;
    t.run_profiled = nullptr;
    t.estimate_cost = nullptr;
    t.estimate_region = nullptr;
    t.threading = TESSERA_THREADING_CALLER;
    t.color = nullptr;
    t.memory = TESSERA_MEMORY_DEVICE;
    t.device_id = 0;
    t.device_alloc = dev_alloc;
    t.device_free = dev_free;
    t.copy = dev_copy;
    t.synchronize = dev_sync;
    return t;
  }();
  static std::shared_ptr<const Backend> b = [] {
    auto r = Backend::FromTable(&table, "", nullptr);
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (!r.ok()) return std::shared_ptr<const Backend>();
    Status st = register_backend(*r);  // sessions find a program's backends by name
    EXPECT_TRUE(st.ok()) << st.message();
    return std::shared_ptr<const Backend>(*r);
  }();
  return b;
}

Node make_node(const std::string& name, const std::string& op, std::vector<std::string> in) {
  Node n;
  n.name = name;
  n.op_type = op;
  n.inputs = std::move(in);
  n.outputs = {name};
  return n;
}

// x -> a1 = Relu(x), a2 = Sigmoid(x)      region A (device)
//      w = Abs(a2)                        native: the device refuses Abs
//      s = Add(a1, w), y = Tanh(s)        region B (device)
// A and B cannot merge (the path A -> Abs -> B would leave the region and come
// back), so a1 passes from one device region to the other: it must stay on
// the device, while x, a2, w and y cross.
Graph split_graph(int64_t n) {
  Graph g;
  g.opset = 13;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DType::kFloat32, Shape::FromDims({n})};
  g.nodes.push_back(make_node("a1", "Relu", {"x"}));
  g.nodes.push_back(make_node("a2", "Sigmoid", {"x"}));
  g.nodes.push_back(make_node("w", "Abs", {"a2"}));
  g.nodes.push_back(make_node("s", "Add", {"a1", "w"}));
  g.nodes.push_back(make_node("y", "Tanh", {"s"}));
  g.outputs = {"y"};
  EXPECT_TRUE(infer_shapes(g).ok());
  return g;
}

PartitionOptions device_options() {
  PartitionOptions o;
  o.backends.push_back(device_backend());
  auto native = find_backend("native");
  EXPECT_TRUE(native.ok());
  o.backends.push_back(*native);
  o.min_region_nodes = 1;
  o.policy = PlacementPolicy::kPriority;
  return o;
}

// Nothing the simulated device was handed so far was in the wrong memory.
void expect_no_violations() {
  std::lock_guard<std::mutex> lock(sim().mu);
  EXPECT_TRUE(sim().violations.empty()) << sim().violations.front();
}

// split_graph(n) placed on the simulated device around the native Abs.
Expected<Program> split_program(int64_t n, PartitionReport* rep = nullptr) {
  return partition_and_compile(split_graph(n), device_options(), rep);
}

SessionOptions one_thread() {
  SessionOptions o;
  o.num_threads = 1;
  return o;
}

TEST(DeviceMemory, TableWithDeviceMemoryAndNoCopyFunctionIsRefused) {
  tessera_backend_t t = *native_backend_table();
  t.struct_size = sizeof(tessera_backend_t);
  t.name = "halfdev";
  t.memory = TESSERA_MEMORY_DEVICE;
  t.device_alloc = dev_alloc;
  t.device_free = dev_free;
  t.copy = nullptr;
  t.synchronize = dev_sync;
  auto b = Backend::FromTable(&t, "", nullptr);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("device-memory function NULL"), std::string::npos) << b.status().message();
  t.memory = 7;
  auto c = Backend::FromTable(&t, "", nullptr);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("unknown memory kind 7"), std::string::npos) << c.status().message();
}

TEST(DeviceMemory, OlderTableIsAHostBackend) {
  tessera_backend_t t = *native_backend_table();
  t.struct_size = static_cast<uint32_t>(offsetof(tessera_backend_t, memory));  // a minor-2 plugin
  t.name = "oldhost";
  t.memory = TESSERA_MEMORY_DEVICE;  // beyond its struct_size: never read
  auto b = Backend::FromTable(&t, "", nullptr);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_FALSE((*b)->on_device());
}

TEST(DeviceMemory, ValuesBetweenRegionsOfOneDeviceStayThereAndOnlyCrossingsAreCopied) {
  const int64_t n = 1000;
  Graph g = split_graph(n);
  PartitionReport rep;
  auto p = split_program(n, &rep);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->engines.size(), 2u) << "expected two device regions around the native Abs";
  // The report counts what crosses: x in and a2 out (region A), w in and y out (region B); a1 stays.
  double crossing = 0;
  for (const auto& r : rep.regions) crossing += r.crossing_bytes;
  EXPECT_EQ(crossing, 4.0 * n * 4);
  EXPECT_NE(report_text(rep).find("host<->device"), std::string::npos) << report_text(rep);

  auto s = InferenceSession::Create(*p, one_thread());
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto stats = (*s)->stats({{n}});
  ASSERT_TRUE(stats.ok()) << stats.status().message();
  EXPECT_EQ(stats->num_device_steps, 2);
  EXPECT_EQ(stats->device_crossing_bytes, static_cast<size_t>(4 * n * 4));
  EXPECT_GT(stats->device_arena_bytes, 0u);

  Tensor x = Tensor::FromVector(testutil::random_vec(static_cast<size_t>(n), 7), {n});
  auto native = InferenceSession::Create(g, one_thread());
  ASSERT_TRUE(native.ok());
  auto want = (*native)->run({x});
  ASSERT_TRUE(want.ok());
  for (int rep_run = 0; rep_run < 3; ++rep_run) {
    sim().reset_counts();
    auto got = (*s)->run({x});
    ASSERT_TRUE(got.ok()) << got.status().message();
    ASSERT_EQ(got->size(), 1u);
    for (int64_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ((*got)[0].data<float>()[i], (*want)[0].data<float>()[i]) << i;
    std::lock_guard<std::mutex> lock(sim().mu);
    EXPECT_EQ(sim().runs, 2);
    EXPECT_EQ(sim().h2d, 2) << "x into region A, w into region B";
    EXPECT_EQ(sim().d2h, 2) << "a2 out of region A, y out of region B";
    EXPECT_EQ(sim().h2d_bytes + sim().d2h_bytes, static_cast<size_t>(4 * n * 4));
    EXPECT_EQ(sim().d2d_bytes, 0u);
    EXPECT_GE(sim().syncs, 2);
  }
  expect_no_violations();
}

TEST(DeviceMemory, ConcurrentRunsEachTakeTheirOwnDeviceArena) {
  const int64_t n = 4096;
  Graph g = split_graph(n);
  auto p = split_program(n);
  ASSERT_TRUE(p.ok()) << p.status().message();
  auto s = InferenceSession::Create(*p, one_thread());
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto native = InferenceSession::Create(g, one_thread());
  ASSERT_TRUE(native.ok());
  constexpr int kThreads = 4, kRuns = 25;
  std::vector<Tensor> inputs, wants;
  for (int t = 0; t < kThreads; ++t) {
    inputs.push_back(Tensor::FromVector(testutil::random_vec(static_cast<size_t>(n), 100 + t), {n}));
    auto want = (*native)->run({inputs.back()});
    ASSERT_TRUE(want.ok());
    wants.push_back((*want)[0]);
  }
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRuns && errors[t].empty(); ++r) {
        auto got = (*s)->run({inputs[t]});
        if (!got.ok()) {
          errors[t] = got.status().message();
          break;
        }
        if (std::memcmp((*got)[0].raw(), wants[t].raw(), wants[t].nbytes()) != 0) {
          errors[t] = "run " + std::to_string(r) + " differs from the native result";
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(errors[t].empty()) << "thread " << t << ": " << errors[t];
  expect_no_violations();
}

TEST(DeviceMemory, EngineRunWithHostTensorsStagesThroughTheDevice) {
  const int64_t n = 64;
  auto p = split_program(n);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->engines.size(), 2u);
  ASSERT_EQ(p->engines[0].outputs, (std::vector<std::string>{"a1", "a2"}));
  // What measuring a region does: the engine alone, run with host tensors.
  auto engine = device_backend()->load(p->engines[0].blob, {}, 1, "region A");
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  Tensor x = Tensor::FromVector(testutil::random_vec(static_cast<size_t>(n), 3), {n});
  Tensor a1(DType::kFloat32, {n}), a2(DType::kFloat32, {n});
  sim().reset_counts();
  Status st = (*engine)->run({&x}, {&a1, &a2});
  ASSERT_TRUE(st.ok()) << st.message();
  for (int64_t i = 0; i < n; ++i) {
    const float v = x.data<float>()[i];
    ASSERT_NEAR(a1.data<float>()[i], v > 0 ? v : 0.f, 1e-6) << i;
    ASSERT_NEAR(a2.data<float>()[i], 1 / (1 + std::exp(-v)), 1e-6) << i;
  }
  std::lock_guard<std::mutex> lock(sim().mu);
  EXPECT_EQ(sim().h2d, 1);
  EXPECT_EQ(sim().d2h, 2);
  EXPECT_EQ(sim().syncs, 1);
  EXPECT_TRUE(sim().violations.empty()) << sim().violations.front();
}

}  // namespace
}  // namespace tessera
