// Tessera's oneDNN backend: the ABI table (include/tessera/backend.h).
//
//   capability   lowers node by node (dnnl_lowering.h) and asks oneDNN whether
//                it implements each op (probe); reports fusable chains as
//                composites (dnnl_fusion.h)
//   compile      lowers the region, fuses post-ops, serializes the program
//                (dnnl_program.h; no weights), then re-reads the blob and
//                builds every primitive descriptor once, so that a blob that
//                compiles also loads
//   load         validates the blob, binds the constants, creates the stream
//                and primitives and reorders weights (dnnl_engine.h)
//   run          checks the descriptors and executes (dnnl_run.cc)
//   run_profiled the same, one step per primitive, each waited for and timed
//   estimate_region / estimate_cost  the fused program priced on the
//                machine's measured figures (dnnl_cost.cc)
// It links tessera_plugin_common, oneDNN and the ONNX protobuf classes, never
// Tessera's own library.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <string>

#include "dnnl_cost.h"
#include "dnnl_engine.h"
#include "dnnl_fusion.h"
#include "dnnl_lowering.h"
#include "dnnl_primitives.h"
#include "plugin_util.h"

namespace tessera_dnnl {
namespace {

using tessera_plugin::describe;
using tessera_plugin::fail;
using tessera_plugin::guarded;
using tessera_plugin::ModelView;

const char* dnnl_backend_version() {
  static const std::string v = [] {
    const dnnl_version_t* d = dnnl_version();
    return "1.0 (oneDNN " + std::to_string(d->major) + "." + std::to_string(d->minor) + "." +
           std::to_string(d->patch) + ")";
  }();
  return v.c_str();
}

// "key=value;key=value" -> value of `key`, or "".
std::string option(const char* options, const std::string& key) {
  const std::string s = options ? options : "";
  size_t at = 0;
  while (at <= s.size()) {
    size_t end = s.find(';', at);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(at, end - at);
    if (item.rfind(key + "=", 0) == 0) return item.substr(key.size() + 1);
    at = end + 1;
  }
  return "";
}

// The ops lowered for nodes [from, to) of `l`'s program must all be
// implemented by oneDNN; else the reason.
std::string probe_ops(const Program& p, size_t from) {
  for (size_t i = from; i < p.ops.size(); ++i) {
    std::string why = probe(p.ops[i], p.values, probe_engine());
    if (!why.empty()) return why;
  }
  return "";
}

// The ops whose result this plugin computes to ONNX Runtime's bits: integer ops, the plugin's own loops
// (quantization, tables, the logistic), and float ops with one rounding per element (binary arithmetic, max/min,
// relu, clip) or none (data movement, max pooling).
bool bit_exact(const onnx::NodeProto& n) {
  static const char* kExact[] = {
      "DynamicQuantizeLinear", "ConvInteger", "MatMulInteger", "Cast", "QuantizeLinear", "DequantizeLinear",
      "QLinearConv", "QLinearMatMul", "QLinearLookup", "Add", "Sub", "Mul", "Div", "Max", "Min", "Relu",
      "LeakyRelu", "PRelu", "Clip", "Abs", "Neg", "Sigmoid", "HardSigmoid", "HardSwish", "BatchNormalization", "MaxPool", "GlobalMaxPool", "Concat", "Split", "Slice",
      "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"};
  return std::any_of(std::begin(kExact), std::end(kExact), [&](const char* op) { return n.op_type() == op; });
}

// In a dynamically quantized model every activation is requantized (DynamicQuantizeLinear) before the next integer
// layer, and a last-bit difference in a float op before it flips roundings, which grow layer by layer into whole
// quantization steps (a BatchNormalization, HardSwish or average pool on oneDNN moved a DBNet map by 0.13). Such an
// op is left to native, which computes ONNX Runtime's bits, where its result reaches a DynamicQuantizeLinear.
void refuse_inexact_before_requantization(const ModelView& m, std::vector<bool>& ok, std::vector<std::string>& reasons) {
  const auto n = static_cast<size_t>(m.num_nodes());
  const std::vector<bool> reaches = tessera_plugin::reaches_op(m, {"DynamicQuantizeLinear"});
  for (size_t i = 0; i < n; ++i) {
    if (ok[i] && reaches[i] && !bit_exact(m.node(static_cast<int>(i)))) {
      ok[i] = false;
      reasons[i] = m.node(static_cast<int>(i)).op_type() +
                   " before a DynamicQuantizeLinear: oneDNN's result may differ from ONNX Runtime's in the last bit, "
                   "which requantization turns into quantization steps (native computes its bits)";
    }
  }
}

tessera_status_t capability(const void* model, size_t size, const tessera_capability_sink_t* sink, char* msg,
                            size_t cap) {
  return guarded(msg, cap, [&] {
    if (!sink || !sink->node) fail(TESSERA_ERROR_INVALID_ARGUMENT, "no capability sink");
    const ModelView m(model, size);
    Lowering l(m);
    std::vector<bool> ok(static_cast<size_t>(m.num_nodes()), false);
    std::vector<std::string> reasons(static_cast<size_t>(m.num_nodes()));
    for (int i = 0; i < m.num_nodes(); ++i) {
      const size_t before = l.program().ops.size();
      std::string why;
      try {
        l.lower(i);
        why = probe_ops(l.program(), before);
      } catch (const Refusal& r) {
        why = r.reason;
      } catch (const dnnl::error& e) {
        why = std::string("oneDNN: ") + e.what();
      }
      ok[static_cast<size_t>(i)] = why.empty();
      reasons[static_cast<size_t>(i)] = why;
    }
    refuse_inexact_before_requantization(m, ok, reasons);
    // A pattern stands or falls with its nodes: the one that emits its op, and (Gelu, LayerNorm) any refused above.
    for (const Pattern& p : l.patterns()) {
      size_t last = static_cast<size_t>(p.nodes.back());
      for (int n : p.nodes) {
        if (!ok[static_cast<size_t>(n)] && p.kind != Pattern::Kind::kDynConv && p.kind != Pattern::Kind::kDynMatMul) {
          last = static_cast<size_t>(n);
        }
      }
      for (int n : p.nodes) ok[static_cast<size_t>(n)] = ok[last], reasons[static_cast<size_t>(n)] = reasons[last];
    }
    // A DynamicQuantizeLinear's scale and zero point exist only inside this plugin's dynamically quantized products
    // (Lowering::lower): it is claimed with them or not at all, and one composite holds it and every product reading
    // it, so that no placement separates them.
    std::map<int, std::vector<int>> quantized_by;  // DynamicQuantizeLinear node -> its products' nodes
    std::map<std::string, int> producer;
    for (int i = 0; i < m.num_nodes(); ++i) {
      for (const std::string& o : m.node(i).output()) producer[o] = i;
    }
    for (int i = 0; i < m.num_nodes(); ++i) {
      const onnx::NodeProto& n = m.node(i);
      if (n.op_type() != "DynamicQuantizeLinear" || !ok[static_cast<size_t>(i)]) continue;
      for (int k = 1; k < n.output_size(); ++k) {
        for (int r : m.consumers(n.output(k))) {
          if (ok[static_cast<size_t>(r)]) continue;
          ok[static_cast<size_t>(i)] = false;
          reasons[static_cast<size_t>(i)] = "its scale or zero point feeds '" + m.node(r).name() +
                                            "', which this backend does not run (" + reasons[static_cast<size_t>(r)] + ")";
        }
      }
    }
    for (const Pattern& p : l.patterns()) {
      if (p.kind != Pattern::Kind::kDynConv && p.kind != Pattern::Kind::kDynMatMul) continue;
      const int q = producer.count(p.x) ? producer[p.x] : -1;
      if (q < 0 || !ok[static_cast<size_t>(q)]) {  // the product reads what only its DynamicQuantizeLinear here holds
        for (int n : p.nodes) {
          if (!ok[static_cast<size_t>(n)]) continue;
          ok[static_cast<size_t>(n)] = false;
          reasons[static_cast<size_t>(n)] = "its DynamicQuantizeLinear does not run on this backend";
        }
        continue;
      }
      quantized_by[q].insert(quantized_by[q].end(), p.nodes.begin(), p.nodes.end());
    }
    for (int i = 0; i < m.num_nodes(); ++i) {
      sink->node(sink->ctx, i, ok[static_cast<size_t>(i)] ? 1 : 0, reasons[static_cast<size_t>(i)].c_str());
    }
    if (!sink->composite) return;
    for (auto& [q, members] : quantized_by) {
      if (!ok[static_cast<size_t>(q)] || members.empty()) continue;
      members.push_back(q);
      std::sort(members.begin(), members.end());
      sink->composite(sink->ctx, "DynamicQuantizeLinear+products", members.data(), static_cast<int32_t>(members.size()));
    }
    for (const Pattern& p : l.patterns()) {
      if (p.kind == Pattern::Kind::kDynConv || p.kind == Pattern::Kind::kDynMatMul) continue;  // in the composites above
      if (ok[static_cast<size_t>(p.nodes.back())]) {
        sink->composite(sink->ctx, p.name(), p.nodes.data(), static_cast<int32_t>(p.nodes.size()));
      }
    }
    for (const Composite& c : find_composites(m, ok)) {
      sink->composite(sink->ctx, c.pattern.c_str(), c.nodes.data(), static_cast<int32_t>(c.nodes.size()));
    }
  });
}

// Whether `op` computes in bf16 and reads its source in[0] in bf16 as a
// producer would write it: a convolution (which takes any layout), or a
// matmul that reads its source row-major (no transpose), through any dims.
bool reads_bf16_source(const Op& op) {
  if (!op.bf16) return false;
  if (op.kind != OpKind::kMatMul) return true;
  MatMulOperands mo;
  if (!matmul_operands(op, &mo)) return false;
  for (size_t d = 0; d < mo.perm[0].size(); ++d) {
    if (mo.perm[0][d] != static_cast<int64_t>(d)) return false;
  }
  return mo.read[0] == mo.stored[0];
}

// Op::bf16_dst for every bf16 op whose value only bf16 ops read, as their
// source: it stays bf16 from one to the next, with no reorder between them.
void keep_bf16_between_ops(Program& p) {
  const size_t nv = p.values.size();
  std::vector<int> bf16_reads(nv, 0), other_reads(nv, 0);
  for (const Op& op : p.ops) {
    const bool bf16_source = reads_bf16_source(op);
    for (size_t k = 0; k < op.in.size(); ++k) {
      if (op.in[k] >= 0) ++(k == 0 && bf16_source ? bf16_reads : other_reads)[static_cast<size_t>(op.in[k])];
    }
    for (const PostOp& po : op.post) {
      if (po.operand >= 0) ++other_reads[static_cast<size_t>(po.operand)];
    }
  }
  for (int32_t v : p.outputs) ++other_reads[static_cast<size_t>(v)];
  for (Op& op : p.ops) {
    const auto x = static_cast<size_t>(op.out);
    if (!op.bf16 || bf16_reads[x] == 0 || other_reads[x] > 0) continue;
    op.bf16_dst = true;
    if (!probe(op, p.values, probe_engine()).empty()) op.bf16_dst = false;
  }
}

// The lowered, fused program of a region; fails naming the first node oneDNN
// cannot run. `bf16`: the precision=bf16 option (Op::bf16). `impl`: the impl option: "" (or "time") times the
// implementations of each product (choose_impl) on `threads` threads, "first" keeps oneDNN's first choice, anything
// else names the implementation every product builds where oneDNN offers it.
Program lower_region(const ModelView& m, bool fusion, bool bf16, const std::string& impl = "first", int threads = 1) {
  Program p = Lowering::lower_all(m);
  for (Op& op : p.ops) {
    std::string why = probe(op, p.values, probe_engine());
    if (!why.empty()) fail(TESSERA_ERROR_UNSUPPORTED, "node '" + nodes_str(op) + "': " + why);
    // precision=bf16: convolutions and matmuls compute in bf16 where oneDNN implements them so, else in float32.
    if (bf16 && (op.kind == OpKind::kConv || op.kind == OpKind::kDeconv || op.kind == OpKind::kMatMul)) {
      op.bf16 = true;
      if (!probe(op, p.values, probe_engine()).empty()) op.bf16 = false;
    }
  }
  if (fusion) fuse(p, probe_engine());
  if (bf16) keep_bf16_between_ops(p);
  for (Op& op : p.ops) {
    if (!impl_choice_kind(op.kind) || impl == "first") continue;
    if (impl.empty() || impl == "time") {
      if (impl_timed_kind(op.kind)) choose_impl(op, p.values, probe_engine(), threads);
    } else {
      op.impl = impl;
    }
  }
  return p;
}

tessera_status_t compile(const void* model, size_t size, const char* options, tessera_buffer_t* out_blob, char* msg,
                         size_t cap) {
  if (out_blob) *out_blob = tessera_buffer_t{nullptr, 0};
  return guarded(msg, cap, [&] {
    if (!out_blob) fail(TESSERA_ERROR_INVALID_ARGUMENT, "out_blob is NULL");
    const ModelView m(model, size);
    const std::string precision = option(options, "precision");
    // precision=fp16: oneDNN 2.6 has no fp16 convolutions or matmuls on x86 (it refuses their descriptors), so its
    // products stay in float32, as bf16 ones do where it lacks them.
    if (!precision.empty() && precision != "fp32" && precision != "bf16" && precision != "fp16") {
      fail(TESSERA_ERROR_INVALID_ARGUMENT, "precision=" + precision + ": this backend computes in fp32, bf16 or fp16");
    }
    const std::string threads = option(options, "threads");
    const Program p = lower_region(m, option(options, "fusion") != "0", precision == "bf16", option(options, "impl"),
                                   threads.empty() ? 1 : std::max(1, std::atoi(threads.c_str())));
    tessera_plugin::BlobWriter w;
    const std::string bytes = serialize(p);
    // What load would reject must fail here, at build time: re-read the blob
    // and build every primitive descriptor (no kernels, no weights).
    const Program again = deserialize(bytes.data(), bytes.size());
    try {
      build_plan(again, probe_engine(), nullptr, 1);
    } catch (const dnnl::error& e) {
      fail(TESSERA_ERROR_COMPILE_FAILED, std::string("oneDNN: ") + e.what());
    }
    w.bytes(bytes.data(), bytes.size());
    w.release_to(out_blob);
  });
}

void free_buffer(tessera_buffer_t* b) { tessera_plugin::free_buffer(b); }

tessera_status_t load(const void* blob, size_t size, const tessera_named_tensor_t* constants, size_t count,
                      const tessera_load_options_t* options, tessera_engine_t** out_engine, char* msg, size_t cap) {
  if (out_engine) *out_engine = nullptr;
  return guarded(msg, cap, [&] {
    if (!out_engine) fail(TESSERA_ERROR_INVALID_ARGUMENT, "out_engine is NULL");
    int threads = 1;
    uint64_t max_memory = 0;
    if (options && options->struct_size >= offsetof(tessera_load_options_t, num_threads) + sizeof(int32_t)) {
      threads = std::max(1, options->num_threads);
    }
    if (options && options->struct_size >= offsetof(tessera_load_options_t, max_memory) + sizeof(uint64_t)) {
      max_memory = options->max_memory;
    }
    Program p = deserialize(blob, size);
    try {
      *out_engine = make_engine(std::move(p), constants, count, threads, max_memory).release();
    } catch (const dnnl::error& e) {
      // compile built this very program, so a blob oneDNN rejects now was
      // altered (or comes from a machine with other instructions).
      fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, std::string("the blob does not build here: oneDNN: ") + e.what());
    }
  });
}

tessera_status_t run(tessera_engine_t* engine, const tessera_tensor_t* inputs, size_t num_inputs,
                     tessera_tensor_t* outputs, size_t num_outputs, char* msg, size_t cap) {
  return guarded(msg, cap, [&] {
    if (!engine) fail(TESSERA_ERROR_INVALID_ARGUMENT, "engine is NULL");
    run_engine(*engine, inputs, num_inputs, outputs, num_outputs);
  });
}

// One step per primitive executed, waited for (dnnl_run.cc): a convolution
// with its fused post-ops names every node it does the work of; a reorder
// names the value it converts and covers no node; views and concatenations
// in place are steps of no duration. `what` is the primitive kind and
// oneDNN's implementation ("convolution jit:avx512_core", "matmul gemm:jit",
// "eltwise ref:any" for a slow reference path).
tessera_status_t run_profiled(tessera_engine_t* engine, const tessera_tensor_t* inputs, size_t num_inputs,
                              tessera_tensor_t* outputs, size_t num_outputs, const tessera_profile_sink_t* sink,
                              char* msg, size_t cap) {
  return guarded(msg, cap, [&] {
    if (!engine) fail(TESSERA_ERROR_INVALID_ARGUMENT, "engine is NULL");
    if (!sink) fail(TESSERA_ERROR_INVALID_ARGUMENT, "profile sink is NULL");
    run_engine_profiled(*engine, inputs, num_inputs, outputs, num_outputs, *sink);
  });
}

void destroy(tessera_engine_t* engine) { delete engine; }

uint64_t engine_bytes(const tessera_engine_t* engine) { return engine ? tessera_dnnl::engine_bytes(*engine) : 0; }

// Both estimates price the fused program compile would build (post-ops cost
// nothing extra) with dnnl_cost.cc: on the host's measured machine
// (estimate_region), or on nominal figures for an older host (estimate_cost).
double estimate_program(const void* model, size_t size, const tessera_plugin::MachineFigures& f) {
  const ModelView m(model, size);
  // The options compile would get, which the host attaches to models for estimates.
  const bool bf16 = option(m.metadata("tessera.backend_options").c_str(), "precision") == "bf16";
  Program p;
  try {
    p = lower_region(m, /*fusion=*/true, bf16);
  } catch (const tessera_plugin::Failure& fl) {
    fail(TESSERA_ERROR_UNSUPPORTED, "no estimate: " + fl.message);
  }
  // oneDNN's own choices: primitive descriptors, no weights (as compile's
  // check builds them).
  std::optional<Plan> plan;
  try {
    plan = build_plan(p, probe_engine(), nullptr, f.threads);
  } catch (const dnnl::error&) {
    // priced without them
  } catch (const tessera_plugin::Failure&) {
  }
  return region_cost_us(p, plan ? &*plan : nullptr, f);
}

tessera_status_t estimate_cost(const void* model, size_t size, int32_t num_threads, double* out_us, char* msg,
                               size_t cap) {
  return guarded(msg, cap, [&] {
    if (!out_us) fail(TESSERA_ERROR_INVALID_ARGUMENT, "out_us is NULL");
    *out_us = estimate_program(model, size, tessera_plugin::MachineFigures::Nominal(num_threads));
  });
}

tessera_status_t estimate_region(const void* model, size_t size, const tessera_machine_t* machine, double* out_us,
                                 char* msg, size_t cap) {
  return guarded(msg, cap, [&] {
    if (!out_us || !machine) fail(TESSERA_ERROR_INVALID_ARGUMENT, "out_us or machine is NULL");
    *out_us = estimate_program(model, size, tessera_plugin::MachineFigures::From(machine));
  });
}

const tessera_backend_t kTable = {
    .abi_version = TESSERA_BACKEND_ABI_VERSION,
    .struct_size = sizeof(tessera_backend_t),
    .name = "dnnl",
    .flags = TESSERA_BACKEND_FLAG_CONCURRENT_RUN,  // runs take separate contexts (dnnl_run.cc)
    .version = dnnl_backend_version,
    .capability = capability,
    .compile = compile,
    .free_buffer = free_buffer,
    .load = load,
    .run = run,
    .destroy = destroy,
    .estimate_cost = estimate_cost,
    .threading = TESSERA_THREADING_OPENMP,  // oneDNN 2.6 from Debian runs on libgomp
    .color = "#9ecae1",
    .estimate_region = estimate_region,
    .run_profiled = run_profiled,
    .memory = TESSERA_MEMORY_HOST,
    .device_id = 0,
    .device_alloc = nullptr,
    .device_free = nullptr,
    .copy = nullptr,
    .synchronize = nullptr,
    .engine_bytes = engine_bytes,
};

}  // namespace
}  // namespace tessera_dnnl

extern "C" TESSERA_BACKEND_EXPORT const tessera_backend_t* tessera_backend_query(uint32_t host_abi_version) {
  return host_abi_version == TESSERA_BACKEND_ABI_VERSION ? &tessera_dnnl::kTable : nullptr;
}
