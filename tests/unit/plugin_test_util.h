// What the tests of backend plugins (example, dnnl, xnnpack) share: building
// small IR graphs, exporting them as the bytes a plugin receives, and calling
// a plugin's C table (capability, compile, load, run) with results a test can
// assert on.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "ir/graph.h"
#include "onnx/onnx_export.h"
#include "passes/shape_inference.h"
#include "runtime/session.h"
#include "tessera/backend.h"

namespace tessera::plugintest {

// A path relative to the directory of the running test binary (plugins are
// built beside it: <build>/bin/../lib/tessera, <build>/bin/../examples).
inline std::string beside_test_binary(const std::string& rel) {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string exe(buf, n > 0 ? static_cast<size_t>(n) : 0);
  return exe.substr(0, exe.rfind('/')) + "/" + rel;
}

// --- graphs -----------------------------------------------------------------
struct Builder {
  Graph g;
  explicit Builder(int64_t opset = 13) { g.opset = opset; }
  Builder& input(const std::string& name, Shape shape, DType dt = DType::kFloat32) {
    g.inputs.push_back(name);
    g.values[name] = ValueInfo{dt, std::move(shape)};
    return *this;
  }
  Builder& input(const std::string& name, Dims d, DType dt = DType::kFloat32) {
    return input(name, Shape::FromDims(d), dt);
  }
  Builder& constant(const std::string& name, Tensor t) {
    g.constants[name] = std::move(t);
    return *this;
  }
  Node& node(const std::string& name, const std::string& op, std::vector<std::string> in, std::string out) {
    Node n;
    n.name = name;
    n.op_type = op;
    n.inputs = std::move(in);
    n.outputs = {std::move(out)};
    g.nodes.push_back(std::move(n));
    return g.nodes.back();
  }
  Graph done(std::vector<std::string> outputs) {
    g.outputs = std::move(outputs);
    Status s = infer_shapes(g);
    EXPECT_TRUE(s.ok()) << s.message();
    return g;
  }
};

// The native backend's outputs for `g` on `inputs` (the reference the engines are checked against); nothing, with a
// test failure, where it cannot run them.
inline std::vector<Tensor> native_outputs(const Graph& g, const std::vector<Tensor>& inputs) {
  auto session = InferenceSession::Create(g);
  EXPECT_TRUE(session.ok()) << session.status().message();
  if (!session.ok()) return {};
  auto ref = (*session)->run(inputs);
  EXPECT_TRUE(ref.ok()) << ref.status().message();
  return ref.ok() ? *ref : std::vector<Tensor>{};
}

inline std::string model_bytes(const Graph& g) {
  auto bytes = export_onnx_bytes(g);
  EXPECT_TRUE(bytes.ok()) << bytes.status().message();
  return bytes.ok() ? *bytes : std::string();
}

inline Tensor random_tensor(Dims d, unsigned seed, float lo = -2.f, float hi = 2.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DType::kFloat32, std::move(d));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// A 3x3 convolution of x [1, 16, 8, 8] by constant weights w [32, 16, 3, 3] (drawn from `seed`), padded: y.
inline Graph small_conv_graph(unsigned seed) {
  Builder b;
  b.input("x", Dims{1, 16, 8, 8}).constant("w", random_tensor({32, 16, 3, 3}, seed));
  b.node("conv", "Conv", {"x", "w"}, "y").attrs["pads"] = Attribute::Ints({1, 1, 1, 1});
  return b.done({"y"});
}

// Random uint8 or int8 elements over their whole range.
inline Tensor int8_tensor(DType dt, const Dims& d, unsigned seed) {
  Tensor t(dt, d);
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int v = static_cast<int>(rng() % 256);
    if (dt == DType::kUInt8)
      t.data<uint8_t>()[i] = static_cast<uint8_t>(v);
    else
      t.data<int8_t>()[i] = static_cast<int8_t>(v - 128);
  }
  return t;
}

// A rank-0 float32, uint8 or int8 tensor holding `v`.
inline Tensor scalar_tensor(DType dt, double v) {
  Tensor t(dt, Dims{});
  if (dt == DType::kFloat32)
    t.data<float>()[0] = static_cast<float>(v);
  else if (dt == DType::kUInt8)
    t.data<uint8_t>()[0] = static_cast<uint8_t>(v);
  else
    t.data<int8_t>()[0] = static_cast<int8_t>(v);
  return t;
}

// How many elements of `got` differ from `want` in their bytes (all of them when the shapes or types differ).
inline int64_t bytes_differ(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.dims() != want.dims()) return want.numel();
  const size_t es = want.numel() ? want.nbytes() / static_cast<size_t>(want.numel()) : 1;
  int64_t n = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    n += std::memcmp(got.data<char>() + static_cast<size_t>(i) * es, want.data<char>() + static_cast<size_t>(i) * es,
                     es) != 0;
  }
  return n;
}

// float32 buffers for the graph's outputs, with their inferred shapes.
inline std::vector<Tensor> output_buffers(const Graph& g) {
  std::vector<Tensor> out;
  for (const auto& name : g.outputs) {
    const ValueInfo* vi = g.info(name);
    out.emplace_back(vi->dtype == DType::kUndefined ? DType::kFloat32 : vi->dtype, vi->shape.concrete());
  }
  return out;
}

// --- the ABI calls, wrapped ---------------------------------------------------
struct CapabilityReport {
  tessera_status_t status = TESSERA_OK;
  std::string msg;
  std::map<int, std::string> refused;  // node index -> reason
  std::vector<int> supported;
  std::vector<std::pair<std::string, std::vector<int>>> composites;
};

struct Compiled {
  tessera_status_t status = TESSERA_OK;
  std::string blob, msg;
};

struct EngineDeleter {
  const tessera_backend_t* table = nullptr;
  void operator()(tessera_engine_t* e) const { table->destroy(e); }
};
using EnginePtr = std::unique_ptr<tessera_engine_t, EngineDeleter>;

struct Loaded {
  tessera_status_t status = TESSERA_OK;
  EnginePtr engine;
  std::string msg;
};

class PluginClient {
 public:
  explicit PluginClient(const tessera_backend_t* table) : table_(table) {}

  CapabilityReport capability(const std::string& model) const {
    CapabilityReport r;
    tessera_capability_sink_t sink{};
    sink.ctx = &r;
    sink.node = [](void* ctx, int32_t i, int32_t ok, const char* reason) {
      auto* rep = static_cast<CapabilityReport*>(ctx);
      if (ok) rep->supported.push_back(i);
      else rep->refused[i] = reason ? reason : "";
    };
    sink.composite = [](void* ctx, const char* pattern, const int32_t* idx, int32_t count) {
      static_cast<CapabilityReport*>(ctx)->composites.push_back({pattern, std::vector<int>(idx, idx + count)});
    };
    char msg[256] = {0};
    r.status = table_->capability(model.data(), model.size(), &sink, msg, sizeof(msg));
    r.msg = msg;
    return r;
  }

  Compiled compile(const std::string& model, const char* options = "") const {
    Compiled c;
    tessera_buffer_t buf{nullptr, 0};
    char msg[256] = {0};
    c.status = table_->compile(model.data(), model.size(), options, &buf, msg, sizeof(msg));
    if (buf.data) c.blob.assign(static_cast<const char*>(buf.data), buf.size);
    table_->free_buffer(&buf);
    c.msg = msg;
    return c;
  }

  Loaded load(const std::string& blob, const std::unordered_map<std::string, Tensor>& constants,
              int threads = 1, uint64_t max_memory = 0) const {
    std::vector<tessera_named_tensor_t> named;
    for (const auto& [name, t] : constants) named.push_back({name.c_str(), tensor_descriptor(t)});
    tessera_load_options_t opts{sizeof(tessera_load_options_t), threads, max_memory};
    tessera_engine_t* e = nullptr;
    char msg[256] = {0};
    Loaded l;
    l.status = table_->load(blob.data(), blob.size(), named.data(), named.size(), &opts, &e, msg, sizeof(msg));
    l.engine = EnginePtr(e, EngineDeleter{table_});
    l.msg = msg;
    return l;
  }

  tessera_status_t run(tessera_engine_t* e, const std::vector<Tensor>& in, std::vector<Tensor>& out,
                       std::string* msg_out = nullptr) const {
    std::vector<tessera_tensor_t> ins, outs;
    for (const auto& t : in) ins.push_back(tensor_descriptor(t));
    for (auto& t : out) outs.push_back(tensor_descriptor(t));
    char msg[256] = {0};
    tessera_status_t s = table_->run(e, ins.data(), ins.size(), outs.data(), outs.size(), msg, sizeof(msg));
    if (msg_out) *msg_out = msg;
    return s;
  }

  // run_profiled, with the steps the plugin reported, as the host copies them.
  struct Profiled {
    tessera_status_t status = TESSERA_OK;
    std::string msg;
    std::vector<ProfileStep> steps;
  };
  Profiled run_profiled(tessera_engine_t* e, const std::vector<Tensor>& in, std::vector<Tensor>& out) const {
    Profiled p;
    std::vector<tessera_tensor_t> ins, outs;
    for (const auto& t : in) ins.push_back(tensor_descriptor(t));
    for (auto& t : out) outs.push_back(tensor_descriptor(t));
    tessera_profile_sink_t sink{};
    sink.ctx = &p.steps;
    sink.step = [](void* ctx, const char* const* nodes, int32_t num_nodes, const char* what, double start_us,
                   double duration_us) {
      ProfileStep st;
      for (int32_t k = 0; k < num_nodes; ++k) st.nodes.emplace_back(nodes[k]);
      st.what = what ? what : "";
      st.start_us = start_us;
      st.duration_us = duration_us;
      static_cast<std::vector<ProfileStep>*>(ctx)->push_back(std::move(st));
    };
    char msg[256] = {0};
    p.status = table_->run_profiled(e, ins.data(), ins.size(), outs.data(), outs.size(), &sink, msg, sizeof(msg));
    p.msg = msg;
    return p;
  }

  // The blob checks every plugin makes before trusting one: each prefix of
  // `blob`, the blob with a byte more, a foreign magic and a newer u32 format
  // version (after the 8-byte magic) are refused as incompatible.
  void expect_rejects_truncated_foreign_and_newer(const std::string& blob,
                                                  const std::unordered_map<std::string, Tensor>& constants) const {
    for (size_t n = 0; n < blob.size(); ++n) {
      Loaded l = load(blob.substr(0, n), constants);
      EXPECT_EQ(l.status, TESSERA_ERROR_INCOMPATIBLE_BLOB) << "prefix of " << n << " bytes";
      EXPECT_EQ(l.engine, nullptr);
    }
    EXPECT_EQ(load(blob + "x", constants).status, TESSERA_ERROR_INCOMPATIBLE_BLOB);
    std::string foreign = blob;
    foreign[0] = 'X';
    Loaded lf = load(foreign, constants);
    EXPECT_EQ(lf.status, TESSERA_ERROR_INCOMPATIBLE_BLOB);
    EXPECT_NE(lf.msg.find("magic"), std::string::npos) << lf.msg;
    std::string newer = blob;
    newer[8] = static_cast<char>(newer[8] + 1);
    Loaded ln = load(newer, constants);
    EXPECT_EQ(ln.status, TESSERA_ERROR_INCOMPATIBLE_BLOB);
    uint32_t version = 0;  // the blob's own, which the message names as the one this plugin reads
    std::memcpy(&version, blob.data() + 8, sizeof version);
    EXPECT_NE(ln.msg.find("version " + std::to_string(version)), std::string::npos) << ln.msg;
  }

  struct Corruption {
    int rejected = 0, loaded = 0;
  };
  // Loads `trials` damaged copies of `blob` (compiled from `g`): 1-4 bit
  // flips, or a random 32-bit word, at offsets from `first` on. A refusal must
  // be one of `refusals`, with no engine; what still loads (a flipped alpha, a
  // renamed value...) must run `inputs` or refuse the descriptors, never touch
  // memory it was not given.
  Corruption load_corrupted(const std::string& blob, const Graph& g, const std::vector<Tensor>& inputs, int trials,
                            unsigned seed, size_t first, const std::vector<tessera_status_t>& refusals) const {
    std::mt19937 rng(seed);
    Corruption c;
    for (int trial = 0; trial < trials; ++trial) {
      std::string bad = blob;
      for (int k = 0; k <= trial % 4; ++k) {
        size_t at = std::uniform_int_distribution<size_t>(first, bad.size() - 4)(rng);
        if (trial % 5 == 4) {
          uint32_t word = static_cast<uint32_t>(rng());
          std::memcpy(&bad[at], &word, sizeof(word));
        } else {
          bad[at] = static_cast<char>(bad[at] ^ (1 << std::uniform_int_distribution<int>(0, 7)(rng)));
        }
      }
      Loaded l = load(bad, g.constants);
      if (l.status != TESSERA_OK) {
        EXPECT_NE(std::find(refusals.begin(), refusals.end(), l.status), refusals.end()) << l.status << " " << l.msg;
        EXPECT_EQ(l.engine, nullptr);
        ++c.rejected;
        continue;
      }
      ++c.loaded;
      std::vector<Tensor> out = output_buffers(g);
      tessera_status_t s = run(l.engine.get(), inputs, out);
      EXPECT_TRUE(s == TESSERA_OK || s == TESSERA_ERROR_INVALID_ARGUMENT) << s;
    }
    return c;
  }

  // engine_bytes (ABI minor revision 4) of an engine of a 3x3 Conv 16 -> 32 over 8x8: at least its copy of the
  // weights (reordered or packed), not absurdly more for so small a convolution, and 0 for no engine.
  void expect_engine_bytes_cover_the_weights() const {
    ASSERT_NE(table_->engine_bytes, nullptr);
    Graph g = small_conv_graph(77);
    Compiled c = compile(model_bytes(g));
    ASSERT_EQ(c.status, TESSERA_OK) << c.msg;
    Loaded l = load(c.blob, g.constants);
    ASSERT_EQ(l.status, TESSERA_OK) << l.msg;
    const uint64_t weights = 32 * 16 * 9 * sizeof(float);
    const uint64_t held = table_->engine_bytes(l.engine.get());
    EXPECT_GE(held, weights);
    EXPECT_LE(held, 64 * weights);
    EXPECT_EQ(table_->engine_bytes(nullptr), 0u);
  }

 private:
  const tessera_backend_t* table_;
};

}  // namespace tessera::plugintest
