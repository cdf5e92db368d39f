// The partitioner end to end (partition_and_compile): placement by priority
// and --place pins, pruning, trial-compile fallback, composites, lowering to
// Region nodes, and programs that really run. The external backends here are
// in-process ABI tables ("alpha", "beta", "gamma") copied from the native
// backend's, each answering capability from its own configuration (op types
// it takes, nodes it refuses by a seeded hash of their name, composites it
// declares) and optionally failing compile for regions holding a chosen op;
// compile/load/run are the native backend's, so their regions really run.
// They are registered with register_backend so sessions find them by name.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backends/native/native_backend.h"
#include "artifact/artifact.h"
#include "backends/backend.h"
#include "ir/graph.h"
#include "ops/region_attrs.h"
#include "partition/machine.h"
#include "partition/partition.h"
#include "partition/tune.h"
#include "passes/pipeline.h"
#include "passes/shape_inference.h"
#include "runtime/session.h"
#include "unit/op_test_util.h"

namespace tessera {
namespace {

using testutil::random_vec;

// ---- configurable test backends ---------------------------------------------

uint64_t fnv1a(uint64_t seed, const std::string& s) {
  uint64_t h = 1469598103934665603ull ^ (seed * 1099511628211ull);
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

enum class Composites { kNone, kMatMulAdd, kRandomChains };

struct SlotConfig {
  std::set<std::string> ops;  // op types it runs
  uint64_t seed = 0;
  int refuse_pct = 0;  // refuses a node when hash(seed, name) % 100 < refuse_pct
  Composites composites = Composites::kNone;
  int composite_pct = 0;          // for kRandomChains
  std::string fail_compile_op;    // compile fails for a region holding this op
  bool constant_weights = false;  // refuses MatMul/Mul whose second input is not an initializer
  std::vector<std::vector<std::string>> named_composites;  // declared by node names, when all are present
  double est_us_per_node = -1;    // estimate_cost answer per node; < 0: no estimate
  std::map<std::string, double> est_us_by_op;  // overrides est_us_per_node for these op types
  // A slow path its estimates do not know: every run of an engine holding
  // this op takes slow_us longer.
  std::string slow_op;
  double slow_us = 0;

  // "" when the node is supported, else why not.
  std::string refusal(const std::string& op, const std::string& name) const {
    if (!ops.count(op)) return "op " + op + " is not in this backend's set";
    if (refuse_pct > 0 && static_cast<int>(fnv1a(seed, name) % 100) < refuse_pct) return "refused by hash";
    return "";
  }
};

constexpr int kSlots = 3;
const char* const kSlotNames[kSlots] = {"alpha", "beta", "gamma"};
SlotConfig g_slots[kSlots];
std::vector<std::string> g_abi_violations;  // what compile saw that the ABI promises it never sees
struct DeclaredComposite {
  std::string backend;
  std::vector<std::string> nodes;
};
std::vector<DeclaredComposite> g_declared;  // every composite capability declared, in call order

void set_msg(char* msg, size_t cap, const std::string& m) { std::snprintf(msg, cap, "%s", m.c_str()); }

// The ABI promises compile a model where every value has a concrete type.
std::string untyped_value(const onnx::ModelProto& m) {
  auto concrete = [](const onnx::ValueInfoProto& v) {
    if (!v.type().has_tensor_type() || v.type().tensor_type().elem_type() == 0) return false;
    if (!v.type().tensor_type().has_shape()) return false;
    for (const auto& d : v.type().tensor_type().shape().dim()) {
      if (!d.has_dim_value()) return false;
    }
    return true;
  };
  std::set<std::string> typed;
  const auto& gr = m.graph();
  for (const auto* list : {&gr.input(), &gr.output(), &gr.value_info()}) {
    for (const auto& v : *list) {
      if (!concrete(v)) return "value '" + v.name() + "' has no concrete type";
      typed.insert(v.name());
    }
  }
  for (const auto& n : gr.node()) {
    for (const auto& o : n.output()) {
      if (!o.empty() && !typed.count(o)) return "value '" + o + "' (output of " + n.name() + ") is not typed";
    }
  }
  return "";
}

tessera_status_t capability_impl(int slot, const void* model, size_t size, const tessera_capability_sink_t* sink,
                                 char* msg, size_t cap) {
  onnx::ModelProto m;
  if (!m.ParseFromArray(model, static_cast<int>(size))) {
    set_msg(msg, cap, "not a ModelProto");
    return TESSERA_ERROR_INVALID_ARGUMENT;
  }
  const SlotConfig& c = g_slots[slot];
  const auto& nodes = m.graph().node();
  std::set<std::string> initializers;
  for (const auto& t : m.graph().initializer()) initializers.insert(t.name());
  std::vector<char> ok(static_cast<size_t>(nodes.size()));
  for (int i = 0; i < nodes.size(); ++i) {
    std::string why = c.refusal(nodes[i].op_type(), nodes[i].name());
    bool weighted = nodes[i].op_type() == "MatMul" || nodes[i].op_type() == "Mul";
    if (why.empty() && c.constant_weights && weighted &&
        (nodes[i].input_size() < 2 || !initializers.count(nodes[i].input(1)))) {
      why = "weights not constant";
    }
    ok[static_cast<size_t>(i)] = why.empty();
    sink->node(sink->ctx, i, why.empty() ? 1 : 0, why.c_str());
  }
  // consumers[i]: nodes reading an output of node i, in graph order.
  std::map<std::string, int> producer;
  std::vector<std::vector<int>> consumers(static_cast<size_t>(nodes.size()));
  for (int i = 0; i < nodes.size(); ++i) {
    for (const auto& in : nodes[i].input()) {
      auto it = producer.find(in);
      if (it != producer.end()) consumers[static_cast<size_t>(it->second)].push_back(i);
    }
    for (const auto& o : nodes[i].output()) producer[o] = i;
  }
  auto declare = [&](const char* pattern, std::vector<int32_t> members) {
    sink->composite(sink->ctx, pattern, members.data(), static_cast<int32_t>(members.size()));
    DeclaredComposite d{kSlotNames[slot], {}};
    for (int32_t k : members) d.nodes.push_back(nodes[k].name());
    g_declared.push_back(std::move(d));
  };
  std::map<std::string, int32_t> by_name;
  for (int i = 0; i < nodes.size(); ++i) by_name[nodes[i].name()] = i;
  for (const auto& names : c.named_composites) {
    std::vector<int32_t> members;
    for (const auto& name : names) {
      if (by_name.count(name)) members.push_back(by_name[name]);
    }
    if (members.size() == names.size()) declare("named", members);
  }
  for (int i = 0; i < nodes.size(); ++i) {
    if (!ok[static_cast<size_t>(i)]) continue;
    for (int j : consumers[static_cast<size_t>(i)]) {
      if (!ok[static_cast<size_t>(j)]) continue;
      if (c.composites == Composites::kMatMulAdd && nodes[i].op_type() == "MatMul" && nodes[j].op_type() == "Add") {
        declare("MatMul+Add", {i, j});
        break;
      }
      if (c.composites != Composites::kRandomChains) continue;
      uint64_t h = fnv1a(c.seed, nodes[i].name() + ">" + nodes[j].name());
      if (static_cast<int>(h % 100) >= c.composite_pct) continue;
      // Sometimes a chain of three; such pairs and chains may be non-convex
      // (another path i -> w -> j), which the host must drop.
      const auto& next = consumers[static_cast<size_t>(j)];
      if ((h >> 8) % 3 == 0 && !next.empty() && ok[static_cast<size_t>(next.front())]) {
        declare("chain3", {i, j, next.front()});
      } else {
        declare("pair", {i, j});
      }
    }
  }
  return TESSERA_OK;
}

tessera_status_t compile_impl(int slot, const void* model, size_t size, const char* options, tessera_buffer_t* out,
                              char* msg, size_t cap) {
  onnx::ModelProto m;
  if (!m.ParseFromArray(model, static_cast<int>(size))) {
    set_msg(msg, cap, "not a ModelProto");
    return TESSERA_ERROR_INVALID_ARGUMENT;
  }
  std::string problem = untyped_value(m);
  if (!problem.empty()) {
    g_abi_violations.push_back(std::string(kSlotNames[slot]) + ": " + problem);
    set_msg(msg, cap, problem);
    return TESSERA_ERROR_INVALID_ARGUMENT;
  }
  const SlotConfig& c = g_slots[slot];
  double slow_us = 0;
  for (const auto& n : m.graph().node()) {
    if (!c.fail_compile_op.empty() && n.op_type() == c.fail_compile_op) {
      set_msg(msg, cap, "cannot compile " + c.fail_compile_op + " (" + n.name() + ")");
      return TESSERA_ERROR_COMPILE_FAILED;
    }
    if (!c.slow_op.empty() && n.op_type() == c.slow_op) slow_us = c.slow_us;
  }
  // The blob: how long each run waits, then native's blob.
  tessera_buffer_t inner{nullptr, 0};
  tessera_status_t st = native_backend_table()->compile(model, size, options, &inner, msg, cap);
  if (st != TESSERA_OK) {
    native_backend_table()->free_buffer(&inner);
    return st;
  }
  out->size = sizeof(double) + inner.size;
  out->data = std::malloc(out->size);
  std::memcpy(out->data, &slow_us, sizeof(double));
  std::memcpy(static_cast<char*>(out->data) + sizeof(double), inner.data, inner.size);
  native_backend_table()->free_buffer(&inner);
  return TESSERA_OK;
}

struct SlotEngine {
  tessera_engine_t* inner = nullptr;
  double slow_us = 0;
};

void slot_free_buffer(tessera_buffer_t* b) {
  if (b && b->data) std::free(b->data);
  if (b) *b = tessera_buffer_t{nullptr, 0};
}

tessera_status_t slot_load(const void* blob, size_t size, const tessera_named_tensor_t* constants, size_t n,
                           const tessera_load_options_t* opts, tessera_engine_t** out, char* msg, size_t cap) {
  *out = nullptr;
  if (size < sizeof(double)) {
    set_msg(msg, cap, "blob too short");
    return TESSERA_ERROR_INCOMPATIBLE_BLOB;
  }
  auto e = std::make_unique<SlotEngine>();
  std::memcpy(&e->slow_us, blob, sizeof(double));
  tessera_status_t st = native_backend_table()->load(static_cast<const char*>(blob) + sizeof(double),
                                                     size - sizeof(double), constants, n, opts, &e->inner, msg, cap);
  if (st != TESSERA_OK) return st;
  *out = reinterpret_cast<tessera_engine_t*>(e.release());
  return TESSERA_OK;
}

tessera_status_t slot_run(tessera_engine_t* engine, const tessera_tensor_t* in, size_t n_in, tessera_tensor_t* out,
                          size_t n_out, char* msg, size_t cap) {
  auto* e = reinterpret_cast<SlotEngine*>(engine);
  if (e->slow_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(e->slow_us)));
  return native_backend_table()->run(e->inner, in, n_in, out, n_out, msg, cap);
}

void slot_destroy(tessera_engine_t* engine) {
  auto* e = reinterpret_cast<SlotEngine*>(engine);
  if (!e) return;
  native_backend_table()->destroy(e->inner);
  delete e;
}

template <int S>
tessera_status_t slot_capability(const void* m, size_t n, const tessera_capability_sink_t* s, char* msg, size_t c) {
  return capability_impl(S, m, n, s, msg, c);
}
template <int S>
tessera_status_t slot_compile(const void* m, size_t n, const char* o, tessera_buffer_t* b, char* msg, size_t c) {
  return compile_impl(S, m, n, o, b, msg, c);
}

template <int S>
tessera_status_t slot_estimate(const void* m, size_t n, int32_t, double* out_us, char* msg, size_t c) {
  onnx::ModelProto model;
  if (!model.ParseFromArray(m, static_cast<int>(n))) {
    set_msg(msg, c, "not a ModelProto");
    return TESSERA_ERROR_INVALID_ARGUMENT;
  }
  const SlotConfig& slot = g_slots[S];
  if (slot.est_us_per_node < 0) return TESSERA_ERROR_UNSUPPORTED;
  *out_us = 0;
  for (const auto& n : model.graph().node()) {
    auto it = slot.est_us_by_op.find(n.op_type());
    *out_us += it != slot.est_us_by_op.end() ? it->second : slot.est_us_per_node;
  }
  return TESSERA_OK;
}

template <int S>
tessera_backend_t make_table() {
  tessera_backend_t t = *native_backend_table();
  t.name = kSlotNames[S];
  t.capability = slot_capability<S>;
  t.compile = slot_compile<S>;
  t.free_buffer = slot_free_buffer;
  t.load = slot_load;
  t.run = slot_run;
  t.destroy = slot_destroy;
  t.estimate_cost = slot_estimate<S>;
  t.threading = TESSERA_THREADING_CALLER;
  t.color = nullptr;
  return t;
}

// The slot backends, created and registered once for the whole binary.
std::shared_ptr<const Backend> slot_backend(int slot) {
  static tessera_backend_t tables[kSlots] = {make_table<0>(), make_table<1>(), make_table<2>()};
  static std::vector<std::shared_ptr<const Backend>> backends = [] {
    std::vector<std::shared_ptr<const Backend>> v;
    for (int s = 0; s < kSlots; ++s) {
      auto b = Backend::FromTable(&tables[s], "", nullptr);
      EXPECT_TRUE(b.ok()) << b.status().message();
      if (!b.ok()) return v;
      Status st = register_backend(*b);
      EXPECT_TRUE(st.ok()) << st.message();
      v.push_back(*b);
    }
    return v;
  }();
  return backends.at(static_cast<size_t>(slot));
}

int slot_of(const std::string& name) {
  for (int s = 0; s < kSlots; ++s) {
    if (name == kSlotNames[s]) return s;
  }
  return -1;
}

PartitionOptions options_for(const std::vector<std::string>& names, int min_region_nodes) {
  PartitionOptions o;
  for (const auto& n : names) o.backends.push_back(slot_backend(slot_of(n)));
  auto native = find_backend("native");
  EXPECT_TRUE(native.ok());
  o.backends.push_back(*native);
  o.min_region_nodes = min_region_nodes;
  o.policy = PlacementPolicy::kPriority;  // the cost-based tests say so
  return o;
}

// ---- graphs -------------------------------------------------------------------

const Shape kShape = Shape::FromDims({2, 3});

struct Builder {
  Graph g;
  Builder& input(const std::string& name) {
    g.inputs.push_back(name);
    g.values[name] = ValueInfo{DType::kFloat32, kShape};
    return *this;
  }
  Builder& constant(const std::string& name, Tensor t) {
    g.constants[name] = std::move(t);
    return *this;
  }
  // The node's name is also its output's name.
  Builder& node(const std::string& name, const std::string& op, std::vector<std::string> in) {
    Node n;
    n.name = name;
    n.op_type = op;
    n.inputs = std::move(in);
    n.outputs = {name};
    g.nodes.push_back(std::move(n));
    return *this;
  }
  Graph done(std::vector<std::string> outputs) {
    g.outputs = std::move(outputs);
    Status s = infer_shapes(g);
    EXPECT_TRUE(s.ok()) << s.message();
    return g;
  }
};

// A random DAG of `n` elementwise nodes on float32[2,3]; inputs drawn mostly
// from recent values so that graphs get deep as well as wide.
Graph random_dag(std::mt19937& rng, int n) {
  static const char* const kOps[] = {"Relu", "Sigmoid", "Add", "Mul", "Tanh"};
  Builder b;
  std::vector<std::string> vals;
  int num_inputs = 1 + static_cast<int>(rng() % 3);
  for (int k = 0; k < num_inputs; ++k) {
    b.input("in" + std::to_string(k));
    vals.push_back("in" + std::to_string(k));
  }
  auto pick = [&] {
    size_t window = std::min<size_t>(6, vals.size());
    if (rng() % 10 < 7) return vals[vals.size() - 1 - rng() % window];
    return vals[rng() % vals.size()];
  };
  for (int i = 0; i < n; ++i) {
    std::string op = kOps[rng() % 5];
    std::vector<std::string> in = {pick()};
    if (op == "Add" || op == "Mul") in.push_back(pick());
    std::string name = "n" + std::to_string(i);
    b.node(name, op, in);
    vals.push_back(name);
  }
  std::vector<std::string> outs;
  int num_outputs = 1 + static_cast<int>(rng() % 3);
  for (int k = 0; k < num_outputs; ++k) {
    std::string v = rng() % 100 < 12 ? vals[rng() % static_cast<size_t>(num_inputs)]
                                     : vals[static_cast<size_t>(num_inputs) + rng() % static_cast<size_t>(n)];
    if (std::find(outs.begin(), outs.end(), v) == outs.end()) outs.push_back(v);
  }
  return b.done(outs);
}

// ---- checks -----------------------------------------------------------------

struct CheckStats {
  long composites_checked = 0;  // convex, non-overlapping composites declared
  long composites_placed = 0;   // ... whose members all went to the declaring backend
};

// Every invariant of a main-graph partition of `g` (no nested bodies), or ""
// when all hold. Written independently of the partitioner's own helpers.

std::string check_partition(const Graph& g, const PartitionReport& rep, const Program& prog, int min_nodes,
                            CheckStats* stats = nullptr) {
  const size_t n = g.nodes.size();
  std::map<std::string, size_t> index;
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < n; ++i) {
    index[g.nodes[i].name] = i;
    for (const auto& o : g.nodes[i].outputs) producer[o] = i;
  }
  // Coverage: each node in exactly one region.
  std::vector<int> region_of(n, -1);
  for (size_t r = 0; r < rep.regions.size(); ++r) {
    const RegionInfo& ri = rep.regions[r];
    if (ri.graph != "main") return "region " + std::to_string(ri.id) + " in " + ri.graph;
    if (ri.id != static_cast<int>(r)) return "region ids are not in report order";
    if (ri.nodes.empty()) return "region " + std::to_string(r) + " is empty";
    for (const auto& name : ri.nodes) {
      auto it = index.find(name);
      if (it == index.end()) return "region " + std::to_string(r) + " names unknown node " + name;
      if (region_of[it->second] >= 0) return "node " + name + " is in two regions";
      region_of[it->second] = static_cast<int>(r);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (region_of[i] < 0) return "node " + g.nodes[i].name + " is in no region";
  }
  // Consistency with report.placed, with capability, pruning and compile.
  if (rep.placed.size() != n || rep.num_nodes != static_cast<int>(n)) return "report.placed does not list every node";
  size_t external = 0;
  for (size_t i = 0; i < n; ++i) {
    const PlacedNode& p = rep.placed[i];
    const RegionInfo& ri = rep.regions[static_cast<size_t>(region_of[i])];
    if (p.name != g.nodes[i].name) return "placed[" + std::to_string(i) + "] is " + p.name;
    if (p.region != ri.id || p.backend != ri.backend) {
      return "node " + p.name + " placed on " + p.backend + " region " + std::to_string(p.region) +
             " but listed in region " + std::to_string(ri.id) + " on " + ri.backend;
    }
    int slot = slot_of(p.backend);
    if (slot >= 0) {
      std::string why = g_slots[slot].refusal(g.nodes[i].op_type, p.name);
      if (!why.empty()) return "node " + p.name + " placed on " + p.backend + ", which refuses it: " + why;
    } else if (p.backend != "native") {
      return "node " + p.name + " on unknown backend " + p.backend;
    }
  }
  for (const RegionInfo& ri : rep.regions) {
    int slot = slot_of(ri.backend);
    if (slot < 0) {
      if (ri.engine != -1) return "native region " + std::to_string(ri.id) + " has an engine";
      continue;
    }
    ++external;
    if (ri.engine == -1) {
      // Dropped as dead code: legal only if nothing outside reads what it makes.
      std::set<std::string> inside(ri.nodes.begin(), ri.nodes.end());
      std::set<std::string> made;
      for (const auto& name : ri.nodes) {
        for (const auto& o : g.nodes[index[name]].outputs) made.insert(o);
      }
      for (const auto& o : g.outputs) {
        if (made.count(o)) return "dropped region " + std::to_string(ri.id) + " makes graph output " + o;
      }
      for (const Node& node : g.nodes) {
        if (inside.count(node.name)) continue;
        for (const auto& in : node.inputs) {
          if (made.count(in)) return "dropped region " + std::to_string(ri.id) + " feeds " + node.name;
        }
      }
      --external;
      continue;
    }
    if (min_nodes > 0 && static_cast<int>(ri.nodes.size()) < min_nodes) {
      return "external region " + std::to_string(ri.id) + " has " + std::to_string(ri.nodes.size()) +
             " nodes, below min_region_nodes";
    }
    const std::string& fail = g_slots[slot].fail_compile_op;
    if (!fail.empty() && ri.op_histogram.count(fail)) {
      return "region " + std::to_string(ri.id) + " on " + ri.backend + " holds " + fail + ", which cannot compile";
    }
    if (ri.engine < 0 || ri.engine >= static_cast<int>(prog.engines.size())) return "bad engine index";
    const EngineSpec& spec = prog.engines[static_cast<size_t>(ri.engine)];
    if (spec.backend != ri.backend || spec.inputs != ri.inputs || spec.outputs != ri.outputs) {
      return "engine " + std::to_string(ri.engine) + " does not match region " + std::to_string(ri.id);
    }
  }
  // Convexity: reach[i] = nodes reachable from i by a path of length >= 1.
  std::vector<uint64_t> reach(n, 0);
  std::vector<std::vector<size_t>> preds(n);
  for (size_t v = 0; v < n; ++v) {
    for (const auto& in : g.nodes[v].inputs) {
      auto it = producer.find(in);
      if (it != producer.end()) preds[v].push_back(it->second);
    }
  }
  for (size_t v = n; v-- > 0;) {
    for (size_t w = v + 1; w < n; ++w) {
      if (std::find(preds[w].begin(), preds[w].end(), v) != preds[w].end()) reach[v] |= (uint64_t{1} << w) | reach[w];
    }
  }
  // The node outside `members` through which a path leaves and re-enters it,
  // or -1 when the set is convex.
  auto escape = [&](uint64_t members) -> int {
    for (size_t x = 0; x < n; ++x) {
      if ((members >> x) & 1) continue;
      bool from = false;
      for (size_t i = 0; i < n; ++i) from = from || (((members >> i) & 1) && ((reach[i] >> x) & 1));
      if (from && (reach[x] & members)) return static_cast<int>(x);
    }
    return -1;
  };
  for (size_t r = 0; r < rep.regions.size(); ++r) {
    uint64_t members = 0;
    for (size_t i = 0; i < n; ++i) members |= region_of[i] == static_cast<int>(r) ? uint64_t{1} << i : 0;
    int x = escape(members);
    if (x >= 0) {
      return "region " + std::to_string(r) + " is not convex: a path leaves it through " +
             g.nodes[static_cast<size_t>(x)].name + " and comes back";
    }
  }
  // Composites (include/tessera/backend.h): "if the host places any of them
  // on this backend it places all of them there, in one region". Checked for
  // the convex composites that share no node with another composite (shared
  // nodes force the host to choose).
  std::map<std::string, int> uses;
  std::set<std::pair<std::string, std::vector<std::string>>> declared;
  for (const auto& d : g_declared) {
    if (!declared.insert({d.backend, d.nodes}).second) continue;
    for (const auto& name : d.nodes) uses[name]++;
  }
  for (const auto& [backend, names] : declared) {
    uint64_t members = 0;
    bool alone = true;
    for (const auto& name : names) {
      alone = alone && uses[name] == 1 && index.count(name);
      if (index.count(name)) members |= uint64_t{1} << index[name];
    }
    if (!alone || escape(members) >= 0) continue;
    size_t on = 0;
    std::set<int> regs;
    std::string list;
    for (const auto& name : names) {
      on += rep.placed[index[name]].backend == backend;
      regs.insert(region_of[index[name]]);
      list += (list.empty() ? "" : ",") + name + "@" + rep.placed[index[name]].backend;
    }
    if (stats) {
      stats->composites_checked++;
      stats->composites_placed += on == names.size();
    }
    if (on > 0 && (on != names.size() || regs.size() != 1)) {
      return "composite {" + list + "} declared by " + backend + " is split (" + std::to_string(regs.size()) +
             " regions)";
    }
  }
  // The quotient graph of regions is acyclic (Kahn).
  const size_t m = rep.regions.size();
  std::vector<std::set<size_t>> succ(m);
  for (size_t v = 0; v < n; ++v) {
    for (size_t u : preds[v]) {
      if (region_of[u] != region_of[v])
        succ[static_cast<size_t>(region_of[u])].insert(static_cast<size_t>(region_of[v]));
    }
  }
  std::vector<int> indeg(m, 0);
  for (const auto& s : succ) {
    for (size_t b : s) ++indeg[b];
  }
  std::vector<size_t> ready;
  for (size_t a = 0; a < m; ++a) {
    if (!indeg[a]) ready.push_back(a);
  }
  size_t seen = 0;
  while (!ready.empty()) {
    size_t a = ready.back();
    ready.pop_back();
    ++seen;
    for (size_t b : succ[a]) {
      if (--indeg[b] == 0) ready.push_back(b);
    }
  }
  if (seen != m) return "the region graph has a cycle";
  // The glue graph: valid, one Region node per external region bound to its engine.
  Status vs = verify_graph(prog.graph);
  if (!vs.ok()) return "glue graph does not verify: " + vs.message();
  if (prog.graph.inputs != g.inputs || prog.graph.outputs != g.outputs) return "glue graph changed the signature";
  if (prog.engines.size() != external) return "engines != external regions";
  std::set<int64_t> engines_seen;
  size_t region_nodes = 0;
  for (const Node& node : prog.graph.nodes) {
    if (!is_region_node(node)) {
      if (!index.count(node.name)) return "glue node " + node.name + " is not from the model";
      if (rep.regions[static_cast<size_t>(region_of[index[node.name]])].backend != "native") {
        return "glue node " + node.name + " is placed externally but was not lowered";
      }
      continue;
    }
    ++region_nodes;
    int64_t e = node.attr_int("engine", -1);
    if (e < 0 || e >= static_cast<int64_t>(prog.engines.size()) || !engines_seen.insert(e).second) {
      return "Region node " + node.name + " has a bad or repeated engine " + std::to_string(e);
    }
    const EngineSpec& spec = prog.engines[static_cast<size_t>(e)];
    if (node.inputs != spec.inputs || node.outputs != spec.outputs || node.attr_string("backend", "") != spec.backend) {
      return "Region node " + node.name + " does not match engine " + std::to_string(e);
    }
  }
  if (region_nodes != external) return "Region nodes != external regions";
  return "";
}

std::vector<Tensor> random_inputs(const Graph& g, unsigned seed) {
  std::vector<Tensor> in;
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    const ValueInfo* vi = g.info(g.inputs[k]);
    if (vi && vi->dtype == DType::kBool) {
      Tensor t(DType::kBool, {});
      *t.data<bool>() = seed % 2 == 1;
      in.push_back(t);
      continue;
    }
    in.push_back(Tensor::FromVector(random_vec(6, seed * 31 + static_cast<unsigned>(k)), {2, 3}));
  }
  return in;
}

SessionOptions one_thread() {
  SessionOptions o;
  o.num_threads = 1;
  return o;
}

Expected<std::vector<Tensor>> run_program(const Program& p, const std::vector<Tensor>& in) {
  std::unique_ptr<InferenceSession> s;
  TSR_ASSIGN_OR_RETURN(s, InferenceSession::Create(p, one_thread()));
  return s->run(in);
}

std::vector<Tensor> run_native(const Graph& g, const std::vector<Tensor>& in) {
  auto s = InferenceSession::Create(g, one_thread());
  EXPECT_TRUE(s.ok()) << s.status().message();
  if (!s.ok()) return {};
  auto out = (*s)->run(in);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? std::move(out).value() : std::vector<Tensor>{};
}

void expect_same_outputs(const std::vector<Tensor>& got, const std::vector<Tensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].dims(), want[i].dims()) << what << " output " << i;
    for (int64_t k = 0; k < got[i].numel(); ++k) {
      ASSERT_NEAR(got[i].as_double(k), want[i].as_double(k), 1e-5) << what << " output " << i << " at " << k;
    }
  }
}

class Partitioner : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto& s : g_slots) s = SlotConfig{};
    g_abi_violations.clear();
    g_declared.clear();
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("tessera_partitioner_" + std::to_string(::getpid()) + "_" + info->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    EXPECT_TRUE(g_abi_violations.empty()) << g_abi_violations.front();
  }

  // Partition, compile, write, read back, run; compare with a native-only
  // session of the same graph. Returns the program as compiled.
  Program round_trip(const Graph& g, const PartitionOptions& o, PartitionReport* rep, unsigned seed) {
    auto p = partition_and_compile(g, o, rep);
    EXPECT_TRUE(p.ok()) << p.status().message();
    if (!p.ok()) return {};
    std::vector<Tensor> in = random_inputs(g, seed);
    std::vector<Tensor> want = run_native(g, in);
    auto direct = run_program(*p, in);
    EXPECT_TRUE(direct.ok()) << direct.status().message();
    if (direct.ok()) expect_same_outputs(*direct, want, "program");
    std::string file = (dir_ / ("m" + std::to_string(seed) + ".tsr")).string();
    Status ws = write_artifact(*p, file);
    EXPECT_TRUE(ws.ok()) << ws.message();
    auto back = read_artifact(file);
    EXPECT_TRUE(back.ok()) << back.status().message();
    if (back.ok()) {
      EXPECT_EQ(back->engines.size(), p->engines.size());
      auto loaded = run_program(*back, in);
      EXPECT_TRUE(loaded.ok()) << loaded.status().message();
      if (loaded.ok()) expect_same_outputs(*loaded, want, "artifact");
    }
    return std::move(p).value();
  }

  std::filesystem::path dir_;
};

const std::set<std::string> kAllOps = {"Relu", "Sigmoid", "Add", "Mul", "Tanh", "MatMul", "Identity", "Reshape"};

const RegionInfo* region_with(const PartitionReport& r, const std::string& node) {
  for (const auto& ri : r.regions) {
    if (std::find(ri.nodes.begin(), ri.nodes.end(), node) != ri.nodes.end()) return &ri;
  }
  return nullptr;
}

std::string backend_of(const PartitionReport& r, const std::string& node) {
  for (const auto& p : r.placed) {
    if (p.name == node) return p.backend;
  }
  return "?";
}

bool any_contains(const std::vector<std::string>& v, const std::string& needle) {
  for (const auto& s : v) {
    if (s.find(needle) != std::string::npos) return true;
  }
  return false;
}

// Random backend configurations for the property and running tests.
std::vector<std::string> random_slots(std::mt19937& rng) {
  static const char* const kOps[] = {"Relu", "Sigmoid", "Add", "Mul", "Tanh"};
  int nb = 2 + static_cast<int>(rng() % 2);
  std::vector<std::string> names;
  for (int s = 0; s < nb; ++s) {
    SlotConfig c;
    for (const char* op : kOps) {
      if (rng() % 100 < 70) c.ops.insert(op);
    }
    c.seed = rng();
    c.refuse_pct = static_cast<int>(rng() % 40);
    if (rng() % 3 == 0) {
      c.composites = Composites::kRandomChains;
      c.composite_pct = 20 + static_cast<int>(rng() % 60);
    }
    if (rng() % 4 == 0) c.fail_compile_op = kOps[rng() % 5];
    g_slots[s] = c;
    names.push_back(kSlotNames[s]);
  }
  // Random priority order.
  std::shuffle(names.begin(), names.end(), rng);
  return names;
}

// ---- 1. property test -------------------------------------------------------

// Returns "" or the first failure; `totals` gets the counts for the summary.
struct PropertyTotals {
  long nodes = 0, regions = 0, external = 0, refusals = 0, compile_failures = 0, prunes = 0, moves = 0;
  std::vector<std::string> unexpected;
  CheckStats stats;
};

void partition_random_dags(int graphs, PlacementPolicy policy, PropertyTotals& t) {
  const int kGraphs = graphs;
  long& nodes = t.nodes; long& regions = t.regions; long& external = t.external; long& refusals = t.refusals;
  long& compile_failures = t.compile_failures; long& prunes = t.prunes;
  std::vector<std::string>& unexpected = t.unexpected;
  CheckStats& stats = t.stats;
  for (int seed = 0; seed < kGraphs; ++seed) {
    std::mt19937 rng(static_cast<unsigned>(seed) * 2654435761u + 17);
    Graph g = random_dag(rng, 1 + static_cast<int>(rng() % 40));
    if (seed % 2) {
      // The CLI's path: dead nodes removed. Even seeds keep them, which
      // also gives regions whose every output is dead.
      OptimizeOptions oo;
      ASSERT_TRUE(optimize_graph(g, oo).ok());
    }
    std::vector<std::string> names = random_slots(rng);
    int min_nodes = static_cast<int>(rng() % 4);
    PartitionOptions o = options_for(names, min_nodes);
    o.policy = policy;
    if (policy == PlacementPolicy::kCost) {
      // Random per-node prices, some backends without estimates.
      for (int s = 0; s < kSlots; ++s) {
        g_slots[s].est_us_per_node = rng() % 4 == 0 ? -1 : 0.01 * (rng() % 300);
        for (const char* op : {"Relu", "Sigmoid", "Add", "Mul", "Tanh"}) {
          if (rng() % 2) g_slots[s].est_us_by_op[op] = 0.01 * (rng() % 300);
        }
      }
    }
    PartitionReport rep;
    g_declared.clear();
    auto p = partition_and_compile(g, o, &rep);
    ASSERT_TRUE(p.ok()) << "seed " << seed << ": " << p.status().message();
    std::string why = check_partition(g, rep, *p, min_nodes, &stats);
    ASSERT_EQ(why, "") << "seed " << seed << "\n" << print_graph(g) << report_text(rep);
    PartitionReport again;
    auto p2 = partition_and_compile(g, o, &again);
    ASSERT_TRUE(p2.ok());
    ASSERT_EQ(report_json(rep), report_json(again)) << "seed " << seed;
    ASSERT_EQ(print_graph(p->graph), print_graph(p2->graph)) << "seed " << seed;
    nodes += static_cast<long>(g.nodes.size());
    regions += static_cast<long>(rep.regions.size());
    external += static_cast<long>(p->engines.size());
    refusals += static_cast<long>(rep.refusals.size());
    for (const auto& e : rep.events) {
      bool failed = e.find("failed to compile") != std::string::npos;
      compile_failures += failed;
      prunes += e.find("pruned") != std::string::npos;
      t.moves += e.find("moved from") != std::string::npos;
      // Only the configured op may fail; anything else means the region
      // model handed to compile was wrong.
      if (failed && e.find("cannot compile") == std::string::npos) {
        unexpected.push_back("seed " + std::to_string(seed) + ": " + e);
      }
    }
  }
}

TEST_F(Partitioner, random_dags_give_convex_acyclic_regions_covering_every_node_once_and_a_valid_glue_graph) {
  PropertyTotals t;
  partition_random_dags(1000, PlacementPolicy::kPriority, t);
  std::cout << "[partitioner] 1000 graphs, " << t.nodes << " nodes, " << t.regions << " regions (" << t.external
            << " external), " << t.refusals << " refusals, " << t.prunes << " prunings, " << t.compile_failures
            << " compile fallbacks; " << t.stats.composites_checked << " composites checked, "
            << t.stats.composites_placed << " placed whole\n";
  EXPECT_GT(t.stats.composites_placed, 100);
  EXPECT_TRUE(t.unexpected.empty()) << t.unexpected.size() << " unexpected compile failures, first: " << t.unexpected.front();
  EXPECT_GT(t.external, 500);
  EXPECT_GT(t.prunes, 10);
  EXPECT_GT(t.compile_failures, 10);
}

// The same invariants under cost-based placement, with random prices: the
// relocations and the backend-set search never break convexity, coverage,
// composites or determinism.
TEST_F(Partitioner, cost_based_placement_keeps_every_invariant_on_random_dags) {
  PropertyTotals t;
  partition_random_dags(400, PlacementPolicy::kCost, t);
  std::cout << "[partitioner cost] 400 graphs, " << t.nodes << " nodes, " << t.regions << " regions (" << t.external
            << " external), " << t.moves << " relocations, " << t.prunes << " prunings, " << t.compile_failures
            << " compile fallbacks; " << t.stats.composites_placed << " composites placed whole\n";
  EXPECT_TRUE(t.unexpected.empty()) << t.unexpected.size() << " unexpected compile failures, first: " << t.unexpected.front();
  EXPECT_GT(t.external, 5);
  EXPECT_GT(t.moves, 0);
}

// The checker above can fail: corrupted copies of a valid partition are caught.
TEST_F(Partitioner, the_partition_checker_rejects_missing_doubled_and_non_convex_regions) {
  g_slots[0].ops = {"Relu", "Add", "Tanh"};
  g_slots[1].ops = {"Mul"};
  Graph g = Builder()
                .input("x")
                .node("relu_0", "Relu", {"x"})
                .node("add_0", "Add", {"relu_0", "x"})
                .node("mul_0", "Mul", {"add_0", "x"})
                .node("relu_1", "Relu", {"mul_0"})
                .node("tanh_0", "Tanh", {"relu_1"})
                .done({"tanh_0"});
  PartitionReport rep;
  auto p = partition_and_compile(g, options_for({"alpha", "beta"}, 0), &rep);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(check_partition(g, rep, *p, 0), "");
  ASSERT_EQ(rep.regions.size(), 3u);

  PartitionReport missing = rep;
  missing.regions[2].nodes.pop_back();
  EXPECT_NE(check_partition(g, missing, *p, 0).find("in no region"), std::string::npos);
  PartitionReport doubled = rep;
  doubled.regions[0].nodes.push_back("mul_0");
  EXPECT_NE(check_partition(g, doubled, *p, 0).find("two regions"), std::string::npos);
  PartitionReport moved = rep;
  moved.placed[2].backend = "alpha";
  EXPECT_NE(check_partition(g, moved, *p, 0), "");
  // Merging the two alpha regions around mul_0 makes one non-convex region.
  PartitionReport merged = rep;
  for (const auto& n : merged.regions[2].nodes) merged.regions[0].nodes.push_back(n);
  merged.regions.pop_back();
  for (auto& pn : merged.placed) pn.region = pn.region == 2 ? 0 : pn.region;
  EXPECT_NE(check_partition(g, merged, *p, 0).find("not convex"), std::string::npos);
}

// ---- 2. placement -------------------------------------------------------------

Graph chain_graph() {
  return Builder()
      .input("x")
      .node("relu_0", "Relu", {"x"})
      .node("add_0", "Add", {"relu_0", "x"})
      .node("mul_0", "Mul", {"add_0", "x"})
      .node("relu_1", "Relu", {"mul_0"})
      .node("tanh_0", "Tanh", {"relu_1"})
      .done({"tanh_0"});
}

TEST_F(Partitioner, placement_takes_the_first_capable_backend_in_priority_order) {
  g_slots[0].ops = {"Relu", "Add", "Tanh"};
  g_slots[1].ops = {"Relu", "Add", "Mul", "Tanh"};
  Graph g = chain_graph();
  PartitionReport rep;
  ASSERT_TRUE(partition_and_compile(g, options_for({"alpha", "beta"}, 0), &rep).ok());
  EXPECT_EQ(backend_of(rep, "relu_0"), "alpha");
  EXPECT_EQ(backend_of(rep, "add_0"), "alpha");
  EXPECT_EQ(backend_of(rep, "mul_0"), "beta");
  EXPECT_EQ(backend_of(rep, "relu_1"), "alpha");
  EXPECT_EQ(backend_of(rep, "tanh_0"), "alpha");
  EXPECT_EQ(rep.regions.size(), 3u);

  PartitionReport swapped;
  ASSERT_TRUE(partition_and_compile(g, options_for({"beta", "alpha"}, 0), &swapped).ok());
  ASSERT_EQ(swapped.regions.size(), 1u);
  EXPECT_EQ(swapped.regions[0].backend, "beta");
  EXPECT_EQ(swapped.regions[0].nodes.size(), 5u);
}

TEST_F(Partitioner, place_pins_by_op_type_and_by_node_name_with_the_node_name_winning) {
  g_slots[0].ops = {"Relu", "Add", "Tanh"};
  g_slots[1].ops = {"Relu", "Add", "Mul", "Tanh"};
  Graph g = chain_graph();
  // The node rule comes first, so winning is not a matter of rule order.
  PartitionOptions o = options_for({"alpha", "beta"}, 0);
  o.place = {{"relu_1", "alpha"}, {"Relu", "beta"}, {"tanh_0", "native"}};
  PartitionReport rep;
  ASSERT_TRUE(partition_and_compile(g, o, &rep).ok());
  EXPECT_EQ(backend_of(rep, "relu_0"), "beta");
  EXPECT_EQ(backend_of(rep, "add_0"), "alpha");
  EXPECT_EQ(backend_of(rep, "mul_0"), "beta");
  EXPECT_EQ(backend_of(rep, "relu_1"), "alpha");
  EXPECT_EQ(backend_of(rep, "tanh_0"), "native");
  EXPECT_FALSE(any_contains(rep.events, "not applied"));

  o.place = {{"Relu", "beta"}, {"relu_1", "alpha"}};
  PartitionReport rep2;
  ASSERT_TRUE(partition_and_compile(g, o, &rep2).ok());
  EXPECT_EQ(backend_of(rep2, "relu_0"), "beta");
  EXPECT_EQ(backend_of(rep2, "relu_1"), "alpha");
}

TEST_F(Partitioner, a_pin_to_a_backend_that_refuses_the_node_is_reported_and_not_applied) {
  g_slots[0].ops = {"Relu", "Add", "Tanh"};
  g_slots[1].ops = {"Relu", "Add", "Mul", "Tanh"};
  PartitionOptions o = options_for({"alpha", "beta"}, 0);
  o.place = {{"Mul", "alpha"}};
  PartitionReport rep;
  ASSERT_TRUE(partition_and_compile(chain_graph(), o, &rep).ok());
  EXPECT_EQ(backend_of(rep, "mul_0"), "beta");
  EXPECT_TRUE(any_contains(rep.events, "--place for node 'mul_0' not applied: alpha refuses it")) << report_text(rep);

  o.place = {{"Relu", "gamma"}};  // not in the backend list
  auto bad = partition_and_compile(chain_graph(), o, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidInput);
  EXPECT_NE(bad.status().message().find("gamma"), std::string::npos);
}

// ---- 3. pruning ---------------------------------------------------------------

TEST_F(Partitioner, a_one_node_region_without_a_heavy_op_is_pruned_unless_min_region_nodes_is_zero) {
  g_slots[0].ops = {"Relu"};
  Graph g = Builder().input("x").node("relu_0", "Relu", {"x"}).node("sig_0", "Sigmoid", {"relu_0"}).done({"sig_0"});
  PartitionReport pruned;
  auto p = partition_and_compile(g, options_for({"alpha"}, 2), &pruned);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(backend_of(pruned, "relu_0"), "native");
  EXPECT_TRUE(p->engines.empty());
  bool found = false;
  for (const auto& r : pruned.refusals) {
    found = found || (r.backend == "alpha" && r.node == "relu_0" && r.reason.find("pruned") != std::string::npos);
  }
  EXPECT_TRUE(found) << report_text(pruned);
  EXPECT_TRUE(any_contains(pruned.events, "pruned"));

  PartitionReport kept;
  auto k = partition_and_compile(g, options_for({"alpha"}, 0), &kept);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(backend_of(kept, "relu_0"), "alpha");
  EXPECT_EQ(k->engines.size(), 1u);
}

TEST_F(Partitioner, a_region_of_only_reshape_and_identity_is_pruned_and_a_lone_heavy_op_is_kept) {
  g_slots[0].ops = {"Identity", "Reshape", "MatMul"};
  Graph g = Builder()
                .input("x")
                .constant("shape", testutil::i64({3, 2}))
                .constant("w", Tensor::FromVector(random_vec(6, 3), {2, 3}))
                .node("id_0", "Identity", {"x"})
                .node("reshape_0", "Reshape", {"id_0", "shape"})
                .node("relu_0", "Relu", {"reshape_0"})
                .node("mm_0", "MatMul", {"relu_0", "w"})
                .done({"mm_0"});
  PartitionReport rep;
  auto p = round_trip(g, options_for({"alpha"}, 2), &rep, 1);
  EXPECT_EQ(backend_of(rep, "id_0"), "native");
  EXPECT_EQ(backend_of(rep, "reshape_0"), "native");
  EXPECT_EQ(backend_of(rep, "mm_0"), "alpha");
  int pruned = 0;
  for (const auto& r : rep.refusals) pruned += r.reason.find("pruned: no compute") != std::string::npos;
  EXPECT_EQ(pruned, 2) << report_text(rep);

  PartitionReport kept;
  ASSERT_TRUE(partition_and_compile(g, options_for({"alpha"}, 0), &kept).ok());
  EXPECT_EQ(backend_of(kept, "reshape_0"), "alpha");
}

// ---- 4. trial compile ---------------------------------------------------------

TEST_F(Partitioner, a_region_that_fails_to_compile_goes_to_the_next_candidate_without_an_error) {
  g_slots[0].ops = {"Relu", "Tanh", "Mul", "Add"};
  g_slots[0].fail_compile_op = "Mul";
  g_slots[1].ops = {"Relu", "Tanh", "Mul", "Add", "Sigmoid"};
  Graph g = Builder()
                .input("x")
                .node("relu_0", "Relu", {"x"})
                .node("tanh_0", "Tanh", {"relu_0"})
                .node("sig_0", "Sigmoid", {"tanh_0"})
                .node("mul_0", "Mul", {"sig_0", "x"})
                .node("add_0", "Add", {"mul_0", "x"})
                .done({"add_0"});
  PartitionReport rep;
  Program p = round_trip(g, options_for({"alpha", "beta"}, 2), &rep, 2);
  EXPECT_EQ(backend_of(rep, "relu_0"), "alpha");
  EXPECT_EQ(backend_of(rep, "tanh_0"), "alpha");
  EXPECT_EQ(backend_of(rep, "mul_0"), "beta");
  EXPECT_EQ(backend_of(rep, "add_0"), "beta");
  EXPECT_EQ(p.engines.size(), 2u);
  EXPECT_TRUE(any_contains(rep.events, "failed to compile")) << report_text(rep);
  bool refused = false;
  for (const auto& r : rep.refusals) {
    refused = refused || (r.backend == "alpha" && r.node == "mul_0" && r.reason.find("compile failed") == 0);
  }
  EXPECT_TRUE(refused) << report_text(rep);

  // With no other candidate the nodes end on native.
  PartitionReport alone;
  auto q = partition_and_compile(g, options_for({"alpha"}, 0), &alone);
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ(backend_of(alone, "mul_0"), "native");
}

// ---- 5. composites ------------------------------------------------------------

TEST_F(Partitioner, a_declared_composite_keeps_matmul_and_add_together_against_priority) {
  g_slots[0].ops = {"Add"};
  g_slots[1].ops = {"MatMul", "Add"};
  g_slots[1].composites = Composites::kMatMulAdd;
  Graph g = Builder()
                .input("x")
                .constant("w", Tensor::FromVector(random_vec(9, 4), {3, 3}))
                .constant("bias", Tensor::FromVector(random_vec(3, 5), {3}))
                .node("mm_0", "MatMul", {"x", "w"})
                .node("add_0", "Add", {"mm_0", "bias"})
                .node("relu_0", "Relu", {"add_0"})
                .node("add_1", "Add", {"relu_0", "x"})
                .node("add_2", "Add", {"add_1", "x"})
                .done({"add_2"});
  PartitionReport rep;
  round_trip(g, options_for({"alpha", "beta"}, 2), &rep, 3);
  const RegionInfo* mm = region_with(rep, "mm_0");
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->backend, "beta");
  EXPECT_EQ(mm, region_with(rep, "add_0")) << report_text(rep);
  EXPECT_EQ(backend_of(rep, "add_1"), "alpha");  // alpha keeps priority for Adds outside the composite

  // Without the composite, alpha's priority takes the Add away from the MatMul.
  g_slots[1].composites = Composites::kNone;
  PartitionReport plain;
  ASSERT_TRUE(partition_and_compile(g, options_for({"alpha", "beta"}, 0), &plain).ok());
  EXPECT_EQ(backend_of(plain, "add_0"), "alpha");
  EXPECT_NE(region_with(plain, "mm_0"), region_with(plain, "add_0"));
}

// Two composites of one backend, each convex, whose contraction closes a
// cycle: relu_a -> add_b and tanh_b -> mul_a. The ABI promises that a
// composite is never split; the placer may keep one of the two, but may not
// place relu_a on beta while mul_a, its composite partner, goes to alpha.
TEST_F(Partitioner, composites_that_close_a_cycle_between_them_are_not_split) {
  g_slots[0].ops = {"Mul"};
  g_slots[1].ops = {"Relu", "Tanh", "Mul", "Add"};
  g_slots[1].named_composites = {{"relu_a", "mul_a"}, {"tanh_b", "add_b"}};
  Graph g = Builder()
                .input("x")
                .node("relu_a", "Relu", {"x"})
                .node("tanh_b", "Tanh", {"x"})
                .node("mul_a", "Mul", {"relu_a", "tanh_b"})
                .node("add_b", "Add", {"tanh_b", "relu_a"})
                .done({"mul_a", "add_b"});
  PartitionReport rep;
  Program p = round_trip(g, options_for({"alpha", "beta"}, 0), &rep, 5);
  EXPECT_EQ(check_partition(g, rep, p, 0), "") << report_text(rep);
  EXPECT_EQ(backend_of(rep, "relu_a") == "beta", backend_of(rep, "mul_a") == "beta") << report_text(rep);
}

// ---- 6. lowering --------------------------------------------------------------

TEST_F(Partitioner, lowering_gives_one_region_node_per_engine_and_stores_a_shared_constant_once) {
  g_slots[0].ops = {"Add", "Relu", "Mul", "Tanh"};
  Tensor w = Tensor::FromVector(random_vec(6, 6), {2, 3});
  Graph g = Builder()
                .input("x")
                .constant("w", w)
                .node("add_0", "Add", {"x", "w"})
                .node("relu_0", "Relu", {"add_0"})
                .node("sig_0", "Sigmoid", {"relu_0"})
                .node("mul_0", "Mul", {"sig_0", "w"})
                .node("tanh_0", "Tanh", {"mul_0"})
                .done({"tanh_0"});
  PartitionReport rep;
  Program p = round_trip(g, options_for({"alpha"}, 2), &rep, 4);
  ASSERT_EQ(p.engines.size(), 2u) << report_text(rep);
  EXPECT_EQ(check_partition(g, rep, p, 2), "");
  std::vector<const Node*> region_nodes;
  for (const Node& n : p.graph.nodes) {
    if (is_region_node(n)) region_nodes.push_back(&n);
  }
  ASSERT_EQ(region_nodes.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    const Node& n = *region_nodes[k];
    int64_t e = n.attr_int("engine", -1);
    ASSERT_GE(e, 0);
    ASSERT_LT(e, 2);
    EXPECT_EQ(n.domain, "ai.tessera");
    EXPECT_EQ(n.attr_string("backend", ""), "alpha");
    const EngineSpec& spec = p.engines[static_cast<size_t>(e)];
    ASSERT_EQ(spec.constants.size(), 1u);
    EXPECT_EQ(spec.constants[0].name, "w");
  }
  EXPECT_NE(region_nodes[0]->attr_int("engine", -1), region_nodes[1]->attr_int("engine", -1));
  EXPECT_EQ(p.engines[0].constants[0].key, p.engines[1].constants[0].key);
  ASSERT_EQ(p.constants.size(), 1u);
  const Tensor& stored = p.constants.begin()->second;
  ASSERT_EQ(stored.nbytes(), w.nbytes());
  EXPECT_EQ(std::memcmp(stored.raw(), w.raw(), w.nbytes()), 0);
  EXPECT_FALSE(p.graph.is_constant("w"));  // no glue node reads it
}

// ---- 7. running mixed placements --------------------------------------------

TEST_F(Partitioner, mixed_placements_compute_what_native_computes_also_after_an_artifact_round_trip) {
  int mixed = 0;
  for (unsigned seed = 0; seed < 40; ++seed) {
    std::mt19937 rng(seed * 7919u + 5);
    Graph g = random_dag(rng, 4 + static_cast<int>(rng() % 30));
    std::vector<std::string> names = random_slots(rng);
    PartitionReport rep;
    SCOPED_TRACE("seed " + std::to_string(seed));
    Program p = round_trip(g, options_for(names, static_cast<int>(rng() % 3)), &rep, seed);
    if (HasFatalFailure()) return;
    bool native = false;
    for (const auto& r : rep.regions) native = native || r.backend == "native";
    mixed += native && !p.engines.empty();
  }
  EXPECT_GE(mixed, 10);
}

// If branches are partitioned like the main graph: their external regions
// become Region nodes inside the bodies, bound to engines of the one program,
// and may read values (and constants) of the enclosing graph.
TEST_F(Partitioner, regions_inside_if_branches_run_on_their_backend_for_either_branch) {
  g_slots[0].ops = {"Relu", "Tanh", "Mul", "Add"};
  auto body = [](std::vector<Node> nodes, const std::string& out) {
    auto b = std::make_shared<Graph>();
    b->nodes = std::move(nodes);
    b->outputs = {out};
    return b;
  };
  auto node = [](const std::string& name, const std::string& op, std::vector<std::string> in) {
    Node n;
    n.name = name;
    n.op_type = op;
    n.inputs = std::move(in);
    n.outputs = {name};
    return n;
  };
  Builder b;
  b.input("x").constant("w", Tensor::FromVector(random_vec(6, 8), {2, 3}));
  b.g.inputs.push_back("c");
  b.g.values["c"] = ValueInfo{DType::kBool, Shape::FromDims({})};
  Node iff = node("if_0", "If", {"c"});
  iff.attrs["then_branch"].kind = Attribute::Kind::kGraph;
  iff.attrs["then_branch"].g =
      body({node("t_relu", "Relu", {"x"}), node("t_tanh", "Tanh", {"t_relu"}), node("t_mul", "Mul", {"t_tanh", "w"})},
           "t_mul");
  iff.attrs["else_branch"].kind = Attribute::Kind::kGraph;
  iff.attrs["else_branch"].g = body({node("e_sig", "Sigmoid", {"x"}), node("e_add", "Add", {"e_sig", "x"})}, "e_add");
  b.g.nodes.push_back(iff);
  Graph g = b.node("out", "Sigmoid", {"if_0"}).done({"out"});

  for (unsigned seed : {20u, 21u}) {
    PartitionReport rep;
    Program p = round_trip(g, options_for({"alpha"}, 2), &rep, seed);
    ASSERT_EQ(p.engines.size(), 1u) << report_text(rep);
    const RegionInfo* r = region_with(rep, "t_mul");
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->backend, "alpha");
    EXPECT_EQ(r->graph, "node 'if_0' then_branch");
    EXPECT_EQ(r->nodes.size(), 3u);
    EXPECT_EQ(backend_of(rep, "if_0"), "native");
    const Node& lowered = p.graph.nodes[0];
    ASSERT_EQ(lowered.op_type, "If");
    auto then_g = lowered.attr_graph("then_branch");
    ASSERT_TRUE(then_g);
    ASSERT_EQ(then_g->nodes.size(), 1u);
    EXPECT_TRUE(is_region_node(then_g->nodes[0]));
    // Partitioning copies the bodies: the source graph keeps its nodes.
    EXPECT_EQ(g.nodes[0].attr_graph("then_branch")->nodes.size(), 3u);
  }
}

// A constant of the main graph read inside a branch is still a constant: a
// backend that needs constant weights sees it as an initializer of the body
// model, not as a runtime input.
TEST_F(Partitioner, a_main_graph_constant_read_in_a_branch_reaches_the_backend_as_a_constant) {
  g_slots[0].ops = {"Relu", "Mul"};
  g_slots[0].constant_weights = true;
  auto then_g = std::make_shared<Graph>();
  Node relu, mul;
  relu.name = relu.outputs.emplace_back("t_relu");
  relu.op_type = "Relu";
  relu.inputs = {"x"};
  mul.name = mul.outputs.emplace_back("t_mul");
  mul.op_type = "Mul";
  mul.inputs = {"t_relu", "w"};
  then_g->nodes = {relu, mul};
  then_g->outputs = {"t_mul"};
  auto else_g = std::make_shared<Graph>();
  else_g->outputs = {"x"};
  Builder b;
  b.input("x").constant("w", Tensor::FromVector(random_vec(6, 9), {2, 3}));
  b.g.inputs.push_back("c");
  b.g.values["c"] = ValueInfo{DType::kBool, Shape::FromDims({})};
  Node iff;
  iff.name = iff.outputs.emplace_back("if_0");
  iff.op_type = "If";
  iff.inputs = {"c"};
  iff.attrs["then_branch"].kind = iff.attrs["else_branch"].kind = Attribute::Kind::kGraph;
  iff.attrs["then_branch"].g = then_g;
  iff.attrs["else_branch"].g = else_g;
  b.g.nodes.push_back(iff);
  Graph g = b.done({"if_0"});
  // In the main graph the same Mul is accepted.
  Graph flat = Builder()
                   .input("x")
                   .constant("w", Tensor::FromVector(random_vec(6, 9), {2, 3}))
                   .node("t_relu", "Relu", {"x"})
                   .node("t_mul", "Mul", {"t_relu", "w"})
                   .done({"t_mul"});
  PartitionReport flat_rep;
  round_trip(flat, options_for({"alpha"}, 2), &flat_rep, 22);
  ASSERT_EQ(backend_of(flat_rep, "t_mul"), "alpha") << report_text(flat_rep);

  PartitionReport rep;
  round_trip(g, options_for({"alpha"}, 2), &rep, 23);
  const RegionInfo* r = region_with(rep, "t_mul");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->backend, "alpha") << report_text(rep);
}

// ---- 8. edge programs ---------------------------------------------------------

TEST_F(Partitioner, a_graph_without_nodes_compiles_exports_reloads_and_runs) {
  Graph g = Builder().input("x").done({"x"});
  PartitionReport rep;
  Program p = round_trip(g, options_for({"alpha"}, 2), &rep, 10);
  EXPECT_TRUE(rep.regions.empty());
  EXPECT_TRUE(p.engines.empty());
}

TEST_F(Partitioner, an_output_that_is_a_constant_survives_compile_and_reload) {
  g_slots[0].ops = kAllOps;
  Graph g = Builder()
                .input("x")
                .constant("c", Tensor::FromVector(random_vec(6, 7), {2, 3}))
                .node("relu_0", "Relu", {"x"})
                .node("tanh_0", "Tanh", {"relu_0"})
                .done({"tanh_0", "c"});
  PartitionReport rep;
  Program p = round_trip(g, options_for({"alpha"}, 2), &rep, 11);
  EXPECT_EQ(p.engines.size(), 1u);
}

TEST_F(Partitioner, a_graph_input_that_is_also_an_output_and_feeds_nodes_survives) {
  g_slots[0].ops = kAllOps;
  Graph g =
      Builder().input("x").node("relu_0", "Relu", {"x"}).node("mul_0", "Mul", {"relu_0", "x"}).done({"x", "mul_0"});
  PartitionReport rep;
  Program p = round_trip(g, options_for({"alpha"}, 2), &rep, 12);
  EXPECT_EQ(p.engines.size(), 1u);
  EXPECT_EQ(p.graph.outputs, (std::vector<std::string>{"x", "mul_0"}));
}

TEST_F(Partitioner, a_graph_entirely_on_one_external_backend_is_one_region_node) {
  g_slots[0].ops = kAllOps;
  Graph g = chain_graph();
  PartitionReport rep;
  Program p = round_trip(g, options_for({"alpha"}, 2), &rep, 13);
  ASSERT_EQ(rep.regions.size(), 1u);
  EXPECT_EQ(rep.regions[0].backend, "alpha");
  ASSERT_EQ(p.graph.nodes.size(), 1u);
  EXPECT_TRUE(is_region_node(p.graph.nodes[0]));
  EXPECT_EQ(p.engines.size(), 1u);
}

TEST_F(Partitioner, a_graph_with_no_external_region_keeps_its_nodes_in_the_glue_graph) {
  Graph g = chain_graph();  // alpha supports nothing
  PartitionReport rep;
  Program p = round_trip(g, options_for({"alpha"}, 2), &rep, 14);
  EXPECT_TRUE(p.engines.empty());
  ASSERT_EQ(rep.regions.size(), 1u);
  EXPECT_EQ(rep.regions[0].backend, "native");
  EXPECT_EQ(p.graph.nodes.size(), g.nodes.size());
  EXPECT_EQ(rep.refusals.size(), g.nodes.size());
}

// The report names an unnamed node "<op>_<index>"; that name must not be one
// a real node already has, or the report (and --place) cannot tell them apart.
TEST_F(Partitioner, names_given_to_unnamed_nodes_do_not_collide_with_real_names) {
  g_slots[0].ops = {"Relu", "Mul"};
  Graph g = Builder().input("x").node("", "Relu", {"x"}).node("Relu_0", "Tanh", {"x"}).node("", "Mul", {"x", "x"}).g;
  g.nodes[0].outputs = {"a"};
  g.nodes[1].outputs = {"b"};
  g.nodes[2].inputs = {"a", "b"};
  g.nodes[2].outputs = {"c"};
  g.outputs = {"c"};
  ASSERT_TRUE(infer_shapes(g).ok());
  PartitionReport rep;
  round_trip(g, options_for({"alpha"}, 0), &rep, 24);
  std::set<std::string> names;
  for (const auto& p : rep.placed) names.insert(p.name);
  EXPECT_EQ(names.size(), g.nodes.size()) << report_json(rep);
}

// ---- cost-based placement -------------------------------------------------------

PartitionOptions cost_options(const std::vector<std::string>& names) {
  PartitionOptions o = options_for(names, 0);
  o.policy = PlacementPolicy::kCost;
  o.num_threads = 1;
  return o;
}

const CostOption* considered(const RegionInfo& r, const std::string& backend) {
  for (const auto& o : r.considered) {
    if (o.backend == backend) return &o;
  }
  return nullptr;
}

TEST_F(Partitioner, cost_placement_takes_the_cheapest_backend_not_the_first_listed) {
  for (int s : {0, 1}) g_slots[s].ops = kAllOps;
  g_slots[0].est_us_per_node = 500;   // alpha: listed first, dear
  g_slots[1].est_us_per_node = 0.01;  // beta: cheap
  Graph g = chain_graph();
  PartitionReport prio;
  round_trip(g, options_for({"alpha", "beta"}, 0), &prio, 31);
  ASSERT_EQ(prio.regions.size(), 1u);
  EXPECT_EQ(prio.regions[0].backend, "alpha");
  EXPECT_EQ(prio.policy, "priority");

  PartitionReport cost;
  round_trip(g, cost_options({"alpha", "beta"}), &cost, 31);
  ASSERT_EQ(cost.regions.size(), 1u) << report_text(cost);
  EXPECT_EQ(cost.regions[0].backend, "beta") << report_text(cost);
  EXPECT_EQ(cost.policy, "cost");
  // The report says what was considered and why beta won.
  const RegionInfo& r = cost.regions[0];
  ASSERT_NE(considered(r, "alpha"), nullptr);
  ASSERT_NE(considered(r, "beta"), nullptr);
  ASSERT_NE(considered(r, "native"), nullptr);
  EXPECT_EQ(r.considered.front().backend, "beta");
  EXPECT_LT(considered(r, "beta")->us, considered(r, "native")->us);
  EXPECT_LT(considered(r, "native")->us, considered(r, "alpha")->us);
  EXPECT_FALSE(considered(r, "beta")->measured);
  EXPECT_EQ(r.decision, "least estimated time");
  EXPECT_NE(report_text(cost).find("-> beta: least estimated time"), std::string::npos) << report_text(cost);
  // Every subset of {alpha, beta} was priced, the single-engine ones also
  // engine first (whole, and with the engine's cliffs left to native); the
  // chosen one holds beta only.
  ASSERT_EQ(cost.sets.size(), 8u);
  int engine_first = 0, cliffs = 0;
  for (const auto& set : cost.sets) {
    engine_first += set.plan == "engine first" ? 1 : 0;
    cliffs += set.plan == kEngineFirstCliffsNative ? 1 : 0;
  }
  EXPECT_EQ(engine_first, 2);
  EXPECT_EQ(cliffs, 2);
  int chosen = 0;
  for (const auto& set : cost.sets) {
    if (!set.chosen) continue;
    ++chosen;
    EXPECT_EQ(set.backends, (std::vector<std::string>{"beta", "native"}));
  }
  EXPECT_EQ(chosen, 1);
  EXPECT_GT(cost.estimated_us, 0);
}

// The engine-first plan's second variant leaves the engine's cliffs to native: a node the engine is priced at over 4x
// native's price (oneDNN's reference Softmax over a middle axis) runs on native, the rest stays on the engine. The
// whole engine-first plan carries the cliff's price.
TEST_F(Partitioner, engine_first_plans_leave_the_engines_cliffs_to_native) {
  g_slots[0].ops = kAllOps;
  g_slots[0].est_us_per_node = 0.01;
  g_slots[0].est_us_by_op["Tanh"] = 50000;  // its cliff
  Graph g = chain_graph();
  PartitionReport cost;
  round_trip(g, cost_options({"alpha"}), &cost, 31);
  const SetOption *whole = nullptr, *cliffs = nullptr;
  for (const auto& set : cost.sets) {
    if (set.plan == "engine first") whole = &set;
    if (set.plan == kEngineFirstCliffsNative) cliffs = &set;
  }
  ASSERT_NE(whole, nullptr) << report_text(cost);
  ASSERT_NE(cliffs, nullptr) << report_text(cost);
  EXPECT_GE(whole->us, 50000) << report_text(cost);
  EXPECT_LT(cliffs->us, 50000) << report_text(cost);
  EXPECT_EQ(backend_of(cost, "tanh_0"), "native") << report_text(cost);
  EXPECT_EQ(backend_of(cost, "mul_0"), "alpha") << report_text(cost);
}

TEST_F(Partitioner, cost_placement_keeps_an_offload_that_does_not_pay_for_its_boundary_native) {
  g_slots[0].ops = {"Mul"};
  g_slots[0].est_us_per_node = 0.5;  // cheaper than native's node, not than two boundary crossings
  Graph g = chain_graph();
  PartitionReport prio;
  round_trip(g, options_for({"alpha"}, 0), &prio, 32);
  EXPECT_EQ(backend_of(prio, "mul_0"), "alpha");
  EXPECT_EQ(prio.regions.size(), 3u);

  PartitionReport cost;
  Program p = round_trip(g, cost_options({"alpha"}), &cost, 32);
  EXPECT_EQ(backend_of(cost, "mul_0"), "native") << report_text(cost);
  EXPECT_TRUE(p.engines.empty());
  ASSERT_EQ(cost.regions.size(), 1u);
}

TEST_F(Partitioner, a_native_node_between_two_regions_of_one_engine_joins_them_when_that_is_cheaper) {
  // Node by node, mul_0 is cheaper on native (~1 us) than on alpha (1.2 us);
  // as a region between two alpha regions it would pay two crossings, so
  // the region-level correction moves it to alpha and one engine remains.
  g_slots[0].ops = kAllOps;
  g_slots[0].est_us_per_node = 0.01;
  g_slots[0].est_us_by_op["Mul"] = 1.2;
  Graph g = chain_graph();
  PartitionReport cost;
  Program p = round_trip(g, cost_options({"alpha"}), &cost, 33);
  ASSERT_EQ(cost.regions.size(), 1u) << report_text(cost);
  EXPECT_EQ(cost.regions[0].backend, "alpha");
  EXPECT_EQ(p.engines.size(), 1u);
  EXPECT_TRUE(any_contains(cost.events, "moved from native to alpha")) << report_text(cost);
}

TEST_F(Partitioner, place_pins_win_over_cost) {
  for (int s : {0, 1}) g_slots[s].ops = kAllOps;
  g_slots[0].est_us_per_node = 500;
  g_slots[1].est_us_per_node = 0.01;
  PartitionOptions o = cost_options({"alpha", "beta"});
  o.place.push_back({"mul_0", "alpha"});
  PartitionReport rep;
  round_trip(chain_graph(), o, &rep, 34);
  EXPECT_EQ(backend_of(rep, "mul_0"), "alpha") << report_text(rep);
  const RegionInfo* r = region_with(rep, "mul_0");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->decision, "pinned by --place");
}

TEST_F(Partitioner, tune_measures_candidate_regions_and_a_later_compile_reuses_the_cache) {
  for (int s : {0, 1}) g_slots[s].ops = kAllOps;
  // Estimates say alpha; both really run native's kernels, so measurements
  // decide between near-equal times — what matters here is the mechanism.
  g_slots[0].est_us_per_node = 0.01;
  g_slots[1].est_us_per_node = 0.02;
  const std::string path = (dir_ / "tune.json").string();
  Graph g = chain_graph();
  {
    partition::TuneCache cache = partition::TuneCache::Open(path, nullptr);
    PartitionOptions o = cost_options({"alpha", "beta"});
    o.tune_cache = &cache;
    o.measure = MeasureMode::kFull;
    PartitionReport rep;
    round_trip(g, o, &rep, 35);
    EXPECT_GT(rep.measured, 2) << report_text(rep);
    EXPECT_EQ(rep.cache_hits, 0);
    ASSERT_FALSE(rep.regions.empty());
    for (const auto& r : rep.regions) {
      for (const auto& c : r.considered) EXPECT_TRUE(c.measured) << c.backend << "\n" << report_text(rep);
    }
    EXPECT_NE(report_text(rep).find("least measured time"), std::string::npos) << report_text(rep);
    ASSERT_TRUE(cache.save().ok());
  }
  ASSERT_TRUE(std::filesystem::exists(path));
  std::string warning;
  partition::TuneCache cache = partition::TuneCache::Open(path, &warning);
  EXPECT_EQ(warning, "");
  EXPECT_GT(cache.size(), 2u);
  PartitionOptions o = cost_options({"alpha", "beta"});
  o.tune_cache = &cache;  // no --tune: measurements are only read
  PartitionReport again;
  round_trip(g, o, &again, 36);
  EXPECT_EQ(again.measured, 0);
  EXPECT_GT(again.cache_hits, 0);
  ASSERT_FALSE(again.regions.empty());
  EXPECT_TRUE(again.regions[0].considered.front().measured) << report_text(again);
  // Another thread count is another key: nothing reused, estimates again.
  o.num_threads = 3;
  PartitionReport other;
  round_trip(g, o, &other, 37);
  EXPECT_EQ(other.cache_hits, 0);
}

TEST_F(Partitioner, the_tune_cache_ignores_a_damaged_file_with_a_warning_and_rewrites_it) {
  const std::string path = (dir_ / "tune.json").string();
  for (const char* text : {"not json at all", "{\"format\": \"tessera-tune\", \"version\": 9, \"entries\": {}}",
                           "{\"format\": \"tessera-tune\", \"version\": 1, \"entries\": {\"k\": {\"us\": -4}}}",
                           "{\"format\": \"tessera-tune\", \"version\": 1, \"entries\": {\"k\": {\"us\": 3, \"runs\": \"x\"}}}",
                           "{\"format\": 7, \"version\": \"1\", \"entries\": []}", ""}) {
    {
      std::ofstream f(path, std::ios::binary | std::ios::trunc);
      f << text;
    }
    std::string warning;
    partition::TuneCache cache = partition::TuneCache::Open(path, &warning);
    EXPECT_EQ(cache.size(), 0u) << text;
    EXPECT_NE(warning.find("not a tessera tune cache"), std::string::npos) << text;
    ASSERT_TRUE(cache.save().ok());
    std::string again;
    EXPECT_EQ(partition::TuneCache::Open(path, &again).size(), 0u);
    EXPECT_EQ(again, "") << "the rewritten file is a valid, empty cache";
  }
  // A directory where the file should be: ignored with the same warning.
  const std::string dir = (dir_ / "a_directory").string();
  std::filesystem::create_directories(dir);
  std::string warning;
  EXPECT_EQ(partition::TuneCache::Open(dir, &warning).size(), 0u);
  EXPECT_NE(warning.find("not a tessera tune cache"), std::string::npos);
}

TEST_F(Partitioner, region_keys_follow_structure_and_shapes_not_weight_values) {
  auto matmul = [](Dims wdims, float wval, const std::string& op) {
    Graph g = Builder().input("x").g;
    g.values["x"] = ValueInfo{DType::kFloat32, Shape::FromDims({2, 3})};
    Tensor w(DType::kFloat32, wdims);
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = wval;
    g.constants["w"] = w;
    Node n;
    n.name = "mm";
    n.op_type = op;
    n.inputs = {"x", "w"};
    n.outputs = {"y"};
    g.nodes.push_back(n);
    g.outputs = {"y"};
    EXPECT_TRUE(infer_shapes(g).ok());
    return g;
  };
  const std::string base = partition::region_key(matmul({3, 40}, 1.f, "MatMul"));
  EXPECT_EQ(base.size(), 32u);
  EXPECT_EQ(base, partition::region_key(matmul({3, 40}, 2.f, "MatMul")));  // weights differ: same work
  EXPECT_NE(base, partition::region_key(matmul({3, 41}, 1.f, "MatMul")));  // shape differs
  Graph renamed = matmul({3, 40}, 1.f, "MatMul");
  renamed.nodes[0].name = "other_name";
  EXPECT_EQ(base, partition::region_key(renamed));
  Graph attr = matmul({3, 40}, 1.f, "MatMul");
  attr.nodes[0].attrs["transB"] = Attribute::Int(1);
  EXPECT_NE(base, partition::region_key(attr));
  // A small constant (a shape, an axis) is part of the key by value.
  EXPECT_NE(partition::region_key(matmul({3, 2}, 1.f, "MatMul")), partition::region_key(matmul({3, 2}, 2.f, "MatMul")));
}


// ---- measuring by default ----------------------------------------------------

// x -> mm0 (MatMul) -> relu -> mm1 (MatMul) -> ...: `n` products of distinct
// shapes, so each is its own measurement.
Graph matmul_chain(int n) {
  Builder b;
  b.input("x");  // [2, 3]
  std::string prev = "x";
  int64_t k = 3;
  for (int i = 0; i < n; ++i) {
    const int64_t m = 4 + i;
    std::string w = "w" + std::to_string(i);
    b.constant(w, Tensor::FromVector(random_vec(static_cast<size_t>(k * m), 100u + static_cast<unsigned>(i)), {k, m}));
    std::string mm = "mm" + std::to_string(i), relu = "relu" + std::to_string(i);
    b.node(mm, "MatMul", {prev, w});
    b.node(relu, "Relu", {mm});
    prev = relu;
    k = m;
  }
  return b.done({prev});
}

// Native priced as if its products were very slow: the estimates send every
// MatMul to a plugin.
partition::MachineProfile slow_native_machine() {
  partition::MachineProfile m = partition::identify_machine(1);
  m.gemm_gflops = 1e-6;
  m.peak_gflops = 1e-6;
  return m;
}

// Cost-based placement that measures by default on `machine`, into `cache`.
PartitionOptions measuring_options(const std::vector<std::string>& names, const partition::MachineProfile* machine,
                                   partition::TuneCache* cache) {
  PartitionOptions o = cost_options(names);
  o.machine = machine;
  o.tune_cache = cache;
  o.measure = MeasureMode::kDefault;
  return o;
}

TEST_F(Partitioner, a_slow_path_the_estimates_miss_is_measured_and_avoided) {
  g_slots[0].ops = kAllOps;
  g_slots[0].est_us_per_node = 1;  // alpha claims to be fast...
  g_slots[0].slow_op = "MatMul";
  g_slots[0].slow_us = 20000;      // ...but every engine holding a MatMul takes 20 ms longer
  g_slots[1].ops = kAllOps;
  g_slots[1].est_us_per_node = 50;
  const partition::MachineProfile machine = slow_native_machine();
  Graph g = matmul_chain(2);
  PartitionOptions o = cost_options({"alpha", "beta"});
  o.machine = &machine;
  // Estimates only: alpha, which says it is the cheapest.
  PartitionReport est;
  round_trip(g, o, &est, 41);
  EXPECT_EQ(backend_of(est, "mm0"), "alpha") << report_text(est);
  EXPECT_EQ(backend_of(est, "mm1"), "alpha") << report_text(est);
  EXPECT_EQ(est.measured, 0);
  // Measured by default: alpha's products are seen for what they are.
  partition::TuneCache cache = partition::TuneCache::Open((dir_ / "tune.json").string(), nullptr);
  o.tune_cache = &cache;
  o.measure = MeasureMode::kDefault;
  PartitionReport rep;
  round_trip(g, o, &rep, 42);
  EXPECT_NE(backend_of(rep, "mm0"), "alpha") << report_text(rep);
  EXPECT_NE(backend_of(rep, "mm1"), "alpha") << report_text(rep);
  bool saw_slow = false;
  for (const auto& m : rep.measurements) {
    if (m.backend == "alpha" && m.kind == "node" && m.what.rfind("mm", 0) == 0) {
      saw_slow = saw_slow || m.measured_us >= 10000;
      EXPECT_LT(m.estimated_us, 100) << "the estimate recorded is the one made before measuring";
    }
  }
  EXPECT_TRUE(saw_slow) << report_text(rep);
  EXPECT_NE(report_text(rep).find("measurements (estimate before measuring -> measured"), std::string::npos);
}

TEST_F(Partitioner, measuring_stops_at_its_budget_counted_on_the_injected_clock) {
  g_slots[0].ops = kAllOps;
  g_slots[0].est_us_per_node = 1;
  Graph g = matmul_chain(6);
  const partition::MachineProfile machine = slow_native_machine();
  for (int round = 0; round < 2; ++round) {
    partition::TuneCache cache;  // in memory: every round starts cold
    PartitionOptions o = measuring_options({"alpha"}, &machine, &cache);
    partition::MeasureBudget budget;
    double now = 0;
    if (round == 0) {
      // Each reading of the clock moves it by a second: every measurement
      // costs one second, whatever it really takes.
      budget.clock = [&now] { return now += 1e6; };
      budget.limit_us = 2.5e6;
    } else {
      budget.max_measurements = 4;
    }
    o.budget = &budget;
    PartitionReport rep;
    round_trip(g, o, &rep, 43 + static_cast<unsigned>(round));
    // Twelve candidates (six products on alpha and on native) and more regions.
    EXPECT_EQ(rep.measured, round == 0 ? 3 : 4) << report_text(rep);
    EXPECT_EQ(budget.measurements, rep.measured);
    EXPECT_TRUE(rep.budget_exhausted);
    if (round == 0) {
      EXPECT_DOUBLE_EQ(rep.measure_seconds, 3.0);
    }
  }
  // --tune (kFull) is not bound by the default budget.
  partition::TuneCache cache;
  PartitionOptions o = measuring_options({"alpha"}, &machine, &cache);
  o.measure = MeasureMode::kFull;
  partition::MeasureBudget budget;
  budget.max_measurements = 4;
  o.budget = &budget;
  PartitionReport rep;
  round_trip(g, o, &rep, 45);
  EXPECT_GT(rep.measured, 12) << report_text(rep);
  EXPECT_FALSE(rep.budget_exhausted);
}

TEST_F(Partitioner, measurements_are_reused_on_the_same_machine_only) {
  g_slots[0].ops = kAllOps;
  g_slots[0].est_us_per_node = 1;
  Graph g = matmul_chain(2);
  partition::MachineProfile machine = slow_native_machine();
  const std::string path = (dir_ / "tune.json").string();
  {
    partition::TuneCache cache = partition::TuneCache::Open(path, nullptr);
    PartitionOptions o = measuring_options({"alpha"}, &machine, &cache);
    PartitionReport rep;
    round_trip(g, o, &rep, 46);
    EXPECT_GT(rep.measured, 0);
    ASSERT_TRUE(cache.save().ok());
  }
  partition::TuneCache cache = partition::TuneCache::Open(path, nullptr);
  PartitionOptions o = measuring_options({"alpha"}, &machine, &cache);
  PartitionReport again;
  round_trip(g, o, &again, 47);
  EXPECT_EQ(again.measured, 0) << report_text(again);
  EXPECT_GT(again.cache_hits, 0);
  // Another CPU is another machine: nothing reused, measured afresh.
  partition::MachineProfile other = machine;
  other.cpu = "another CPU";
  o.machine = &other;
  PartitionReport elsewhere;
  round_trip(g, o, &elsewhere, 48);
  EXPECT_EQ(elsewhere.cache_hits, 0);
  EXPECT_GT(elsewhere.measured, 0);
}

}  // namespace
}  // namespace tessera
