// libtessera_backend_xnnpack.so: Tessera's XNNPACK backend behind the C ABI
// (include/tessera/backend.h). Float32 regions with static shapes run on
// XNNPACK's subgraph API: convolutions, pooling, fully connected, arithmetic,
// activations, softmax, resize, pad and reshapes (onnx_ops.inc lists them).
//
//   capability   each node lowered on its own (lowering.h); composites for a
//                convolution / fully connected / arithmetic node followed by
//                the Relu or Clip that folds into its output range
//   compile      the region lowered to a Program, serialized; then loaded once
//                with the model's own initializers, so that anything XNNPACK
//                itself refuses fails here, where the host can still place the
//                region elsewhere
//   load         validate the blob, build constants and runtimes (engine.h)
//   run          layout conversion at the boundary, invoke the runtimes
//
// Like every plugin it links the ONNX protobuf classes, tessera_plugin_common
// and its engine, never Tessera's own library.
#include <algorithm>
#include <cstddef>
#include <map>
#include <memory>
#include <set>

#include "cost.h"
#include "engine.h"
#include "lowering.h"

using tessera_plugin::fail;
using tessera_plugin::guarded;
using tessera_plugin::ModelView;
using namespace tessera_xnn;

struct tessera_engine {
  std::unique_ptr<Engine> engine;
};

namespace {

const char* xnnpack_version() { return "1.0 (XNNPACK 2022-02-16 snapshot)"; }

// Nodes whose output range a following Relu / Clip narrows (fuse_clamps).
const std::set<std::string>& range_producers() {
  static const std::set<std::string> kOps = {
      "Conv", "ConvTranspose", "Gemm",        "MatMul",           "Add", "Sub", "Mul",
      "Div",  "MaxPool",       "AveragePool", "GlobalAveragePool"};
  return kOps;
}

// The ops whose result XNNPACK computes to ONNX's (and ONNX Runtime's) bits:
// one rounding per element (arithmetic, square root), none (clamps, max
// pooling, data movement), the integer products and the plugin's own loops.
bool bit_exact(const onnx::NodeProto& n) {
  static const char* kExact[] = {"Add",
                                 "Sub",
                                 "Mul",
                                 "Div",
                                 "Max",
                                 "Min",
                                 "Relu",
                                 "Clip",
                                 "Abs",
                                 "Neg",
                                 "Floor",
                                 "Ceil",
                                 "Round",
                                 "Sqrt",
                                 "Reciprocal",
                                 "PRelu",
                                 "LeakyRelu",
                                 "MaxPool",
                                 "GlobalMaxPool",
                                 "Reshape",
                                 "Flatten",
                                 "Squeeze",
                                 "Unsqueeze",
                                 "Identity",
                                 "Dropout",
                                 "Pad",
                                 "DepthToSpace",
                                 "QLinearConv",
                                 "QLinearMatMul",
                                 "QLinearLookup",
                                 "QuantizeLinear",
                                 "DequantizeLinear"};
  return std::any_of(std::begin(kExact), std::end(kExact), [&](const char* op) { return n.op_type() == op; });
}

tessera_status_t xnnpack_capability(const void* model, size_t size, const tessera_capability_sink_t* sink, char* msg,
                                    size_t cap) {
  return guarded(msg, cap, [&] {
    if (!sink || !sink->node) fail(TESSERA_ERROR_INVALID_ARGUMENT, "no capability sink");
    ModelView m(model, size);
    Lowering lowering(m);
    std::vector<bool> ok(static_cast<size_t>(m.num_nodes()), false);
    // A quantized model requantizes what its float ops compute, and a last-bit difference there becomes a whole
    // quantization step: a float op whose result reaches a QuantizeLinear or DynamicQuantizeLinear runs here only
    // when XNNPACK computes its bits.
    const std::vector<bool> requantized = tessera_plugin::reaches_op(m, {"QuantizeLinear", "DynamicQuantizeLinear"});
    for (int i = 0; i < m.num_nodes(); ++i) {
      std::string why = lowering.check_alone(i);
      if (why.empty() && requantized[static_cast<size_t>(i)] && !bit_exact(m.node(i))) {
        why = m.node(i).op_type() +
              " before a requantization: XNNPACK's result may differ from ONNX Runtime's in the last bit, which "
              "requantization turns into quantization steps (native computes its bits)";
      }
      ok[static_cast<size_t>(i)] = why.empty();
      sink->node(sink->ctx, i, why.empty() ? 1 : 0, why.c_str());
    }
    if (!sink->composite) return;
    for (int i = 0; i < m.num_nodes(); ++i) {
      const onnx::NodeProto& n = m.node(i);
      if (!ok[static_cast<size_t>(i)] || !range_producers().count(n.op_type()) || n.output_size() != 1) continue;
      const std::vector<int>& users = m.consumers(n.output(0));
      if (users.size() != 1 || m.is_graph_output(n.output(0)) || !ok[static_cast<size_t>(users[0])]) continue;
      const std::string& act = m.node(users[0]).op_type();
      if (act != "Relu" && act != "Clip") continue;
      const int32_t nodes[2] = {i, users[0]};
      sink->composite(sink->ctx, (n.op_type() + "+" + act).c_str(), nodes, 2);
    }
  });
}

// Named views of a model's initializers (what load() would get): float32,
// and the 8-bit and int32 ones the quantized ops read.
struct InitializerSet {
  std::vector<std::vector<uint8_t>> data;
  std::vector<std::vector<int64_t>> dims;
  std::vector<tessera_named_tensor_t> named;
};

bool usable_initializer(const onnx::TensorProto& t) {
  const int32_t d = t.data_type();
  if (d != TESSERA_DTYPE_FLOAT32 && d != TESSERA_DTYPE_UINT8 && d != TESSERA_DTYPE_INT8 && d != TESSERA_DTYPE_INT32) {
    return false;
  }
  for (int64_t x : t.dims()) {
    if (x <= 0) return false;
  }
  return true;
}

// The initializer's elements as bytes of its own type.
std::vector<uint8_t> initializer_bytes(const onnx::TensorProto& t) {
  std::vector<uint8_t> out;
  auto append = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  };
  if (t.data_type() == TESSERA_DTYPE_FLOAT32) {
    const std::vector<float> v = tessera_plugin::initializer_floats(t);
    append(v.data(), v.size() * sizeof(float));
    return out;
  }
  for (int64_t x : tessera_plugin::initializer_ints(t)) {
    if (t.data_type() == TESSERA_DTYPE_INT32) {
      const auto v = static_cast<int32_t>(x);
      append(&v, sizeof(v));
    } else {
      out.push_back(static_cast<uint8_t>(x));
    }
  }
  return out;
}

void collect_initializers(const ModelView& m, InitializerSet& s) {
  const auto& g = m.graph();
  std::vector<const onnx::TensorProto*> kept;
  for (const auto& t : g.initializer()) {
    if (!usable_initializer(t)) continue;
    s.data.push_back(initializer_bytes(t));
    s.dims.emplace_back(t.dims().begin(), t.dims().end());
    kept.push_back(&t);
  }
  for (size_t k = 0; k < kept.size(); ++k) {
    tessera_tensor_t d{kept[k]->data_type(), static_cast<int32_t>(s.dims[k].size()),
                       s.dims[k].empty() ? nullptr : s.dims[k].data(), s.data[k].data(), s.data[k].size()};
    s.named.push_back(tessera_named_tensor_t{kept[k]->name().c_str(), d});
  }
}

tessera_status_t xnnpack_compile(const void* model, size_t size, const char* /*options: none yet*/,
                                 tessera_buffer_t* out_blob, char* msg, size_t cap) {
  if (out_blob) *out_blob = tessera_buffer_t{nullptr, 0};
  return guarded(msg, cap, [&] {
    if (!out_blob) fail(TESSERA_ERROR_INVALID_ARGUMENT, "out_blob is NULL");
    ModelView m(model, size);
    Program p = Lowering(m).lower_region();
    std::string bytes = serialize(p);
    Program decoded = deserialize(bytes.data(), bytes.size());  // what load() would reject fails here
    InitializerSet inits;
    collect_initializers(m, inits);
    try {
      Engine trial(std::move(decoded), inits.named.data(), inits.named.size(), 1);
    } catch (const tessera_plugin::Failure& f) {
      fail(TESSERA_ERROR_COMPILE_FAILED, "trial load: " + f.message);
    }
    tessera_plugin::BlobWriter w;
    w.bytes(bytes.data(), bytes.size());
    w.release_to(out_blob);
  });
}

tessera_status_t xnnpack_load(const void* blob, size_t size, const tessera_named_tensor_t* constants, size_t count,
                              const tessera_load_options_t* options, tessera_engine_t** out_engine, char* msg,
                              size_t cap) {
  if (out_engine) *out_engine = nullptr;
  return guarded(msg, cap, [&] {
    if (!out_engine) fail(TESSERA_ERROR_INVALID_ARGUMENT, "out_engine is NULL");
    int threads = 1;
    if (options && options->struct_size >= offsetof(tessera_load_options_t, num_threads) + sizeof(int32_t)) {
      threads = options->num_threads;
    }
    if (threads < 1 || threads > 1024) fail(TESSERA_ERROR_INVALID_ARGUMENT, "num_threads " + std::to_string(threads));
    auto e = std::make_unique<tessera_engine>();
    e->engine = std::make_unique<Engine>(deserialize(blob, size), constants, count, threads);
    *out_engine = e.release();
  });
}

tessera_status_t xnnpack_run(tessera_engine_t* engine, const tessera_tensor_t* inputs, size_t num_inputs,
                             tessera_tensor_t* outputs, size_t num_outputs, char* msg, size_t cap) {
  return guarded(msg, cap, [&] {
    if (!engine || !engine->engine) fail(TESSERA_ERROR_INVALID_ARGUMENT, "engine is NULL");
    engine->engine->run(inputs, num_inputs, outputs, num_outputs);
  });
}

void xnnpack_destroy(tessera_engine_t* engine) { delete engine; }

uint64_t engine_bytes(const tessera_engine_t* engine) { return engine && engine->engine ? engine->engine->bytes() : 0; }

// Both estimates price the lowered program with cost.cc: on the host's
// measured machine (estimate_region), or on nominal figures for an older host
// (estimate_cost).
double estimate_program(const void* model, size_t size, const tessera_plugin::MachineFigures& f) {
  ModelView m(model, size);
  Program p;
  try {
    p = Lowering(m).lower_region();
  } catch (const tessera_plugin::Failure& fl) {
    fail(TESSERA_ERROR_UNSUPPORTED, "no estimate: " + fl.message);
  }
  return region_cost_us(p, f);
}

tessera_status_t xnnpack_estimate_cost(const void* model, size_t size, int32_t num_threads, double* out_us, char* msg,
                                       size_t cap) {
  return guarded(msg, cap, [&] {
    if (!out_us) fail(TESSERA_ERROR_INVALID_ARGUMENT, "out_us is NULL");
    *out_us = estimate_program(model, size, tessera_plugin::MachineFigures::Nominal(num_threads));
  });
}

tessera_status_t xnnpack_estimate_region(const void* model, size_t size, const tessera_machine_t* machine,
                                         double* out_us, char* msg, size_t cap) {
  return guarded(msg, cap, [&] {
    if (!out_us || !machine) fail(TESSERA_ERROR_INVALID_ARGUMENT, "out_us or machine is NULL");
    *out_us = estimate_program(model, size, tessera_plugin::MachineFigures::From(machine));
  });
}

const tessera_backend_t kTable = {
    .abi_version = TESSERA_BACKEND_ABI_VERSION,
    .struct_size = sizeof(tessera_backend_t),
    .name = "xnnpack",
    .flags = 0,  // an XNNPACK runtime is not safe for concurrent invokes: the host serializes run()
    .version = xnnpack_version,
    .capability = xnnpack_capability,
    .compile = xnnpack_compile,
    .free_buffer = tessera_plugin::free_buffer,
    .load = xnnpack_load,
    .run = xnnpack_run,
    .destroy = xnnpack_destroy,
    .estimate_cost = xnnpack_estimate_cost,
    .threading = TESSERA_THREADING_POOL,  // pthreadpool
    .color = "#a1d99b",
    .estimate_region = xnnpack_estimate_region,
    // No per-node profile: this XNNPACK snapshot (2022-02-16) has no runtime
    // profiling (xnn_get_runtime_profiling_info came later), and a subgraph
    // runtime runs its operators in one xnn_invoke_runtime call.
    .run_profiled = nullptr,
    .memory = TESSERA_MEMORY_HOST,
    .device_id = 0,
    .device_alloc = nullptr,
    .device_free = nullptr,
    .copy = nullptr,
    .synchronize = nullptr,
    .engine_bytes = engine_bytes,
};

}  // namespace

extern "C" TESSERA_BACKEND_EXPORT const tessera_backend_t* tessera_backend_query(uint32_t host_abi_version) {
  return host_abi_version == TESSERA_BACKEND_ABI_VERSION ? &kTable : nullptr;
}
