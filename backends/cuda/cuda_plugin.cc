// libtessera_backend_cuda.so: Tessera's CUDA backend behind the C ABI
// (include/tessera/backend.h, minor revision 3: device memory). Float32
// regions with static shapes run on one NVIDIA GPU: GEMMs on cuBLASLt,
// convolutions on cuDNN, everything else on Tessera's own kernels
// (cuda_kernels.h); cuda_lower.h lists what is claimed and fused.
//
//   capability   each node lowered on its own (cuda_lower.h); composites for
//                the fusions the engine makes (GEMM epilogues, conv + relu)
//   compile      the region lowered, then loaded once on this GPU (trial), so
//                that anything cuBLASLt or cuDNN refuses fails here, where the
//                host can still place the region elsewhere; the blob is the
//                region model without its large initializers, tagged with the
//                GPU architecture and the library versions, and the way each
//                convolution runs (chosen by timing in that trial load)
//   load         validate the blob, re-lower, upload constants, rebuild the
//                plans as the blob says (no search, no timing)
//   run          enqueue on the calling thread's stream, return (no wait)
//   device_*     memory, copies and synchronize for the host
//
// The device is found lazily; without one (no driver, no GPU) capability
// refuses every node with "no CUDA device (...)" and compile, load and the
// device functions fail with TESSERA_ERROR_UNSUPPORTED.
#include <cstddef>
#include <memory>
#include <string>

#include "cuda_cost.h"
#include "cuda_device.h"
#include "cuda_engine.h"
#include "cuda_lower.h"

using tessera_plugin::BlobReader;
using tessera_plugin::BlobWriter;
using tessera_plugin::fail;
using tessera_plugin::Failure;
using tessera_plugin::guarded;
using tessera_plugin::ModelView;
using namespace tessera_cuda;

struct tessera_engine {
  std::unique_ptr<Engine> engine;
};

namespace {

constexpr char kMagic[8] = {'T', 'S', 'R', 'C', 'U', 'D', 'A', '1'};
// 2: the convolution choices follow the region model.
constexpr uint32_t kBlobVersion = 2;
// Initializers above this size are left out of the blob: load() receives them again.
constexpr size_t kInlineInitializerBytes = 4096;

const char* cuda_version() {
  static const std::string v = [] {
    const DeviceInfo& d = device_info();
    return "0.1 (CUDA runtime " + runtime_version_str(d.runtime_version) + ", cuBLASLt " +
           cublaslt_version_str(d.cublaslt_version) + ", cuDNN " + cudnn_version_str(d.cudnn_version) + ", " + d.sm() +
           ")";
  }();
  return v.c_str();
}

std::string machine_str(const std::string& sm, uint32_t cudnn, uint32_t lt) {
  return sm + " with cuDNN " + cudnn_version_str(cudnn) + ", cuBLASLt " + cublaslt_version_str(lt);
}

tessera_status_t cuda_capability(const void* model, size_t size, const tessera_capability_sink_t* sink, char* msg,
                                 size_t cap) {
  return guarded(msg, cap, [&] {
    if (!sink || !sink->node) fail(TESSERA_ERROR_INVALID_ARGUMENT, "no capability sink");
    ModelView m(model, size);
    const DeviceInfo& d = device_info();
    if (!d.present) {
      std::string why = "no CUDA device (" + d.error + ")";
      for (int i = 0; i < m.num_nodes(); ++i) sink->node(sink->ctx, i, 0, why.c_str());
      return;
    }
    Lowering lowering(m);
    std::vector<bool> ok(static_cast<size_t>(m.num_nodes()), false);
    for (int i = 0; i < m.num_nodes(); ++i) {
      std::string why = lowering.check(i);
      ok[static_cast<size_t>(i)] = why.empty();
      sink->node(sink->ctx, i, why.empty() ? 1 : 0, why.c_str());
    }
    if (!sink->composite) return;
    for (const auto& [name, nodes] : lowering.composites(ok)) {
      sink->composite(sink->ctx, name.c_str(), nodes.data(), static_cast<int32_t>(nodes.size()));
    }
  });
}

// The region model without the data of its large initializers (their dims and dtype stay).
std::string stripped_model(const void* model, size_t size) {
  onnx::ModelProto mp;
  if (!mp.ParseFromArray(model, static_cast<int>(size))) {
    fail(TESSERA_ERROR_INVALID_ARGUMENT, "the model is not a valid serialized ONNX ModelProto");
  }
  for (auto& t : *mp.mutable_graph()->mutable_initializer()) {
    size_t bytes = t.raw_data().size() + 4 * static_cast<size_t>(t.float_data_size()) +
                   8 * static_cast<size_t>(t.int64_data_size() + t.double_data_size()) +
                   4 * static_cast<size_t>(t.int32_data_size());
    if (bytes <= kInlineInitializerBytes) continue;
    t.clear_raw_data();
    t.clear_float_data();
    t.clear_int64_data();
    t.clear_int32_data();
    t.clear_double_data();
  }
  return mp.SerializeAsString();
}

// One ConvChoice per step of the region's program (kNone for the steps that are not convolutions).
void write_choices(BlobWriter& w, const std::vector<ConvChoice>& choices) {
  w.u32(static_cast<uint32_t>(choices.size()));
  for (const ConvChoice& c : choices) {
    w.i32(c.path);
    w.i64(c.engine);
    w.i32(c.algo);
    w.u32(static_cast<uint32_t>(c.knobs.size()));
    for (const auto& [type, value] : c.knobs) {
      w.i32(type);
      w.i64(value);
    }
  }
}

std::vector<ConvChoice> read_choices(BlobReader& r) {
  uint32_t n = r.u32();
  if (n > (1u << 20)) fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "blob claims " + std::to_string(n) + " steps");
  std::vector<ConvChoice> out;
  for (uint32_t i = 0; i < n; ++i) {
    ConvChoice c;
    c.path = r.i32();
    if (c.path < ConvChoice::kNone || c.path > ConvChoice::kLegacy) {
      fail(TESSERA_ERROR_INCOMPATIBLE_BLOB,
           "step " + std::to_string(i) + ": convolution way " + std::to_string(c.path));
    }
    c.engine = r.i64();
    c.algo = r.i32();
    uint32_t knobs = r.u32();
    if (knobs > 256)
      fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "step " + std::to_string(i) + ": " + std::to_string(knobs) + " knobs");
    for (uint32_t k = 0; k < knobs; ++k) {
      int32_t type = r.i32();
      int64_t value = r.i64();
      c.knobs.emplace_back(type, value);
    }
    out.push_back(std::move(c));
  }
  return out;
}

tessera_status_t cuda_compile(const void* model, size_t size, const char* /*options: none yet*/,
                              tessera_buffer_t* out_blob, char* msg, size_t cap) {
  if (out_blob) *out_blob = tessera_buffer_t{nullptr, 0};
  return guarded(msg, cap, [&] {
    if (!out_blob) fail(TESSERA_ERROR_INVALID_ARGUMENT, "out_blob is NULL");
    if (size > static_cast<size_t>(INT32_MAX)) fail(TESSERA_ERROR_INVALID_ARGUMENT, "model too large");
    ModelView m(model, size);
    require_device();
    Program p = Lowering(m).lower();
    std::vector<ConvChoice> choices;
    try {
      Engine trial(m, std::move(p), nullptr, 0, 0, nullptr);
      choices = trial.conv_choices();
    } catch (const Failure& f) {
      fail(f.status == TESSERA_ERROR_UNSUPPORTED ? f.status : TESSERA_ERROR_COMPILE_FAILED, "trial load: " + f.message);
    }
    const DeviceInfo& d = device_info();
    BlobWriter w;
    w.bytes(kMagic, sizeof(kMagic));
    w.u32(kBlobVersion);
    w.str(d.sm());
    w.u32(static_cast<uint32_t>(d.cudnn_version));
    w.u32(static_cast<uint32_t>(d.cublaslt_version));
    w.str(stripped_model(model, size));
    write_choices(w, choices);
    w.release_to(out_blob);
  });
}

tessera_status_t cuda_load(const void* blob, size_t size, const tessera_named_tensor_t* constants, size_t count,
                           const tessera_load_options_t* options, tessera_engine_t** out_engine, char* msg,
                           size_t cap) {
  if (out_engine) *out_engine = nullptr;
  return guarded(msg, cap, [&] {
    if (!out_engine) fail(TESSERA_ERROR_INVALID_ARGUMENT, "out_engine is NULL");
    if (!blob && size) fail(TESSERA_ERROR_INVALID_ARGUMENT, "blob is NULL");
    BlobReader r(blob, size);
    char magic[8] = {};
    r.bytes(magic, sizeof(magic));
    if (std::memcmp(magic, kMagic, sizeof(magic)) != 0) {
      fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "not a CUDA engine blob (bad magic)");
    }
    uint32_t version = r.u32();
    if (version != kBlobVersion) {
      fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "blob format version " + std::to_string(version) +
                                                "; this plugin reads version " + std::to_string(kBlobVersion));
    }
    std::string sm = r.str(64);
    uint32_t cudnn = r.u32(), lt = r.u32();
    std::string model = r.str(size);
    std::vector<ConvChoice> choices = read_choices(r);
    if (!r.at_end()) fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "blob has trailing bytes");
    require_device();
    const DeviceInfo& d = device_info();
    if (sm != d.sm() || cudnn != d.cudnn_version || lt != d.cublaslt_version) {
      fail(TESSERA_ERROR_INCOMPATIBLE_BLOB,
           "blob built for " + machine_str(sm, cudnn, lt) + "; this machine has " +
               machine_str(d.sm(), static_cast<uint32_t>(d.cudnn_version), static_cast<uint32_t>(d.cublaslt_version)));
    }
    uint64_t max_memory = 0;
    if (options && options->struct_size >= offsetof(tessera_load_options_t, max_memory) + sizeof(uint64_t)) {
      max_memory = options->max_memory;
    }
    std::unique_ptr<ModelView> m;
    try {
      m = std::make_unique<ModelView>(model.data(), model.size());
    } catch (const Failure& f) {
      fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "blob's region model: " + f.message);
    }
    Program p = Lowering(*m).lower();
    auto e = std::make_unique<tessera_engine>();
    e->engine = std::make_unique<Engine>(*m, std::move(p), constants, count, max_memory, &choices);
    *out_engine = e.release();
  });
}

tessera_status_t cuda_run(tessera_engine_t* engine, const tessera_tensor_t* inputs, size_t num_inputs,
                          tessera_tensor_t* outputs, size_t num_outputs, char* msg, size_t cap) {
  return guarded(msg, cap, [&] {
    if (!engine || !engine->engine) fail(TESSERA_ERROR_INVALID_ARGUMENT, "engine is NULL");
    engine->engine->run(inputs, num_inputs, outputs, num_outputs, nullptr);
  });
}

tessera_status_t cuda_run_profiled(tessera_engine_t* engine, const tessera_tensor_t* inputs, size_t num_inputs,
                                   tessera_tensor_t* outputs, size_t num_outputs, const tessera_profile_sink_t* sink,
                                   char* msg, size_t cap) {
  return guarded(msg, cap, [&] {
    if (!engine || !engine->engine) fail(TESSERA_ERROR_INVALID_ARGUMENT, "engine is NULL");
    engine->engine->run(inputs, num_inputs, outputs, num_outputs, sink);
  });
}

void cuda_destroy(tessera_engine_t* engine) {
  try {
    delete engine;
  } catch (...) {
  }
}

tessera_status_t cuda_estimate_cost(const void* model, size_t size, int32_t /*num_threads*/, double* out_us, char* msg,
                                    size_t cap) {
  return guarded(msg, cap, [&] {
    if (!out_us) fail(TESSERA_ERROR_INVALID_ARGUMENT, "out_us is NULL");
    *out_us = estimate_region_us(model, size);
  });
}

tessera_status_t cuda_estimate_region(const void* model, size_t size, const tessera_machine_t* /*machine: the
                                      host's CPU; the GPU is measured here*/
                                      ,
                                      double* out_us, char* msg, size_t cap) {
  return guarded(msg, cap, [&] {
    if (!out_us) fail(TESSERA_ERROR_INVALID_ARGUMENT, "out_us is NULL");
    *out_us = estimate_region_us(model, size);
  });
}

// ---- device memory ------------------------------------------------------------

tessera_status_t cuda_device_alloc(size_t bytes, void** out_ptr, char* msg, size_t cap) {
  if (out_ptr) *out_ptr = nullptr;
  return guarded(msg, cap, [&] {
    if (!out_ptr) fail(TESSERA_ERROR_INVALID_ARGUMENT, "out_ptr is NULL");
    require_device();
    *out_ptr = device_malloc(bytes, "device_alloc");
  });
}

void cuda_device_free(void* ptr) {
  if (!ptr) return;
  if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
}

tessera_status_t cuda_copy(void* dst, const void* src, size_t bytes, int32_t direction, char* msg, size_t cap) {
  return guarded(msg, cap, [&] {
    if (bytes == 0) return;
    if (!dst || !src)
      fail(TESSERA_ERROR_INVALID_ARGUMENT, "copy of " + std::to_string(bytes) + " bytes with a NULL pointer");
    cudaMemcpyKind kind;
    switch (direction) {
      case TESSERA_COPY_HOST_TO_DEVICE:
        kind = cudaMemcpyHostToDevice;
        break;
      case TESSERA_COPY_DEVICE_TO_HOST:
        kind = cudaMemcpyDeviceToHost;
        break;
      case TESSERA_COPY_DEVICE_TO_DEVICE:
        kind = cudaMemcpyDeviceToDevice;
        break;
      default:
        fail(TESSERA_ERROR_INVALID_ARGUMENT, "copy direction " + std::to_string(direction));
    }
    ThreadContext& ctx = thread_context();
    check_cuda(cudaMemcpyAsync(dst, src, bytes, kind, ctx.stream()),
               "copy of " + std::to_string(bytes) + " bytes: cudaMemcpyAsync");
  });
}

tessera_status_t cuda_synchronize(char* msg, size_t cap) {
  return guarded(msg, cap, [&] {
    ThreadContext& ctx = thread_context();
    check_cuda(cudaStreamSynchronize(ctx.stream()), "synchronize: cudaStreamSynchronize");
  });
}

const tessera_backend_t kTable = {
    .abi_version = TESSERA_BACKEND_ABI_VERSION,
    .struct_size = sizeof(tessera_backend_t),
    .name = "cuda",
    // Runs of one engine from several threads use each thread's own stream, handles and scratch.
    .flags = TESSERA_BACKEND_FLAG_CONCURRENT_RUN,
    .version = cuda_version,
    .capability = cuda_capability,
    .compile = cuda_compile,
    .free_buffer = tessera_plugin::free_buffer,
    .load = cuda_load,
    .run = cuda_run,
    .destroy = cuda_destroy,
    .estimate_cost = cuda_estimate_cost,
    .threading = TESSERA_THREADING_CALLER,
    .color = "#76b900",
    .estimate_region = cuda_estimate_region,
    .run_profiled = cuda_run_profiled,
    .memory = TESSERA_MEMORY_DEVICE,
    .device_id = 0,
    .device_alloc = cuda_device_alloc,
    .device_free = cuda_device_free,
    .copy = cuda_copy,
    .synchronize = cuda_synchronize,
    .engine_bytes = nullptr,  // its engines hold device memory, not host memory
};

}  // namespace

extern "C" TESSERA_BACKEND_EXPORT const tessera_backend_t* tessera_backend_query(uint32_t host_abi_version) {
  return host_abi_version == TESSERA_BACKEND_ABI_VERSION ? &kTable : nullptr;
}
