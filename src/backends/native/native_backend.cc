// The native backend behind the same C contract as every plugin. It runs
// every operator Tessera has a kernel for. The partitioner inlines native
// regions into the glue graph (the glue graph is itself run by the native
// executor), so these entry points serve callers that treat native like any
// other backend: the backend conformance tests, and tools that drive
// backends one region at a time.
//
// Blob format: "TNATIVE1" followed by the region's serialized ModelProto
// (initializers included; load() rebinds the given constants over them).
#include "backends/native/native_backend.h"

#include <elf.h>
#include <link.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include <onnx/onnx_pb.h>

#include "artifact/program.h"
#include "backends/backend.h"
#include "onnx/onnx_import.h"
#include "ops/op_registry.h"
#include "runtime/session.h"

namespace tessera {

namespace {

// A native blob: a magic, then the region model. The magic says how products are computed: fp32, bf16 or fp16 (the
// region compiled with precision=bf16 or fp16 in its options; SessionOptions::products).
constexpr char kMagic[8] = {'T', 'N', 'A', 'T', 'I', 'V', 'E', '1'};
constexpr char kMagicBf16[8] = {'T', 'N', 'A', 'T', 'B', 'F', '1', '6'};
constexpr char kMagicFp16[8] = {'T', 'N', 'A', 'T', 'F', 'P', '1', '6'};

void set_msg(char* msg, size_t cap, const std::string& m) {
  if (!msg || cap == 0) return;
  size_t n = std::min(cap - 1, m.size());
  std::memcpy(msg, m.data(), n);
  msg[n] = 0;
}

tessera_status_t from_status(const Status& st, char* msg, size_t cap) {
  set_msg(msg, cap, st.message());
  switch (st.code()) {
    case ErrorCode::kOk: return TESSERA_OK;
    case ErrorCode::kInvalidModel:
    case ErrorCode::kInvalidInput: return TESSERA_ERROR_INVALID_ARGUMENT;
    case ErrorCode::kUnsupported: return TESSERA_ERROR_UNSUPPORTED;
    case ErrorCode::kRuntime: return TESSERA_ERROR_RUNTIME;
    default: return TESSERA_ERROR_INTERNAL;
  }
}

struct NativeEngine {
  std::unique_ptr<InferenceSession> session;
};

// The GNU build id of the binary holding this code (hex), or "".
std::string own_build_id() {
  struct Search {
    uintptr_t addr;
    std::string id;
  } search{reinterpret_cast<uintptr_t>(&own_build_id), {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        auto* s = static_cast<Search*>(data);
        bool mine = false;
        for (int i = 0; i < info->dlpi_phnum && !mine; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
          mine = ph.p_type == PT_LOAD && s->addr >= lo && s->addr < lo + ph.p_memsz;
        }
        if (!mine) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE) continue;
          const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
          const char* end = p + ph.p_memsz;
          while (p + sizeof(ElfW(Nhdr)) <= end) {
            const auto* nh = reinterpret_cast<const ElfW(Nhdr)*>(p);
            const char* name = p + sizeof(ElfW(Nhdr));
            const char* desc = name + ((nh->n_namesz + 3) & ~3u);
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0 &&
                desc + nh->n_descsz <= end) {
              char hex[3];
              for (unsigned k = 0; k < nh->n_descsz; ++k) {
                std::snprintf(hex, sizeof(hex), "%02x", static_cast<unsigned char>(desc[k]));
                s->id += hex;
              }
              return 1;
            }
            p = desc + ((nh->n_descsz + 3) & ~3u);
          }
        }
        return 1;
      },
      &search);
  return search.id;
}

// The release, and which build of it: measurements of native kernels (the
// tune cache keys them by backend version) must not outlive a rebuild that
// changed the kernels.
const char* native_version() {
  static const std::string v = [] {
    std::string id = own_build_id();
    return std::string(TESSERA_VERSION) + (id.empty() ? "" : "+" + id.substr(0, 12));
  }();
  return v.c_str();
}

tessera_status_t native_capability(const void* model, size_t size, const tessera_capability_sink_t* sink, char* msg,
                                   size_t cap) {
  try {
    onnx::ModelProto proto;
    if (size > static_cast<size_t>(INT32_MAX) || !proto.ParseFromArray(model, static_cast<int>(size))) {
      set_msg(msg, cap, "the model is not a valid serialized ModelProto");
      return TESSERA_ERROR_INVALID_ARGUMENT;
    }
    const auto& nodes = proto.graph().node();
    for (int i = 0; i < nodes.size(); ++i) {
      std::string domain = nodes[i].domain() == "ai.onnx" ? "" : nodes[i].domain();
      bool ok = OpRegistry::instance().find(domain, nodes[i].op_type()) != nullptr;
      std::string reason = ok ? "" : "op " + nodes[i].op_type() + " is not implemented";
      sink->node(sink->ctx, i, ok ? 1 : 0, reason.c_str());
    }
    return TESSERA_OK;
  } catch (const std::exception& e) {
    set_msg(msg, cap, e.what());
    return TESSERA_ERROR_INTERNAL;
  }
}

tessera_status_t native_compile(const void* model, size_t size, const char* options, tessera_buffer_t* out, char* msg,
                                size_t cap) {
  try {
    // A model that does not parse fails here, ahead of time; load imports it.
    // (Native regions of a program run inline in the glue graph: this path
    // serves measuring and embedders, where a full import here would only be
    // done twice.)
    onnx::ModelProto proto;
    if (size > static_cast<size_t>(INT32_MAX) || !proto.ParseFromArray(model, static_cast<int>(size))) {
      set_msg(msg, cap, "the region model is not a valid serialized ModelProto");
      return TESSERA_ERROR_INVALID_ARGUMENT;
    }
    out->size = sizeof(kMagic) + size;
    out->data = std::malloc(out->size);
    if (!out->data) return TESSERA_ERROR_OUT_OF_MEMORY;
    const kernels::Products p = kernels::products_named(options ? backend_option(options, "precision") : "");
    std::memcpy(out->data,
                p == kernels::Products::kBf16   ? kMagicBf16
                : p == kernels::Products::kFp16 ? kMagicFp16
                                                : kMagic,
                sizeof(kMagic));
    std::memcpy(static_cast<char*>(out->data) + sizeof(kMagic), model, size);
    return TESSERA_OK;
  } catch (const std::exception& e) {
    set_msg(msg, cap, e.what());
    return TESSERA_ERROR_INTERNAL;
  }
}

void native_free_buffer(tessera_buffer_t* b) {
  if (b && b->data) std::free(b->data);
  if (b) *b = tessera_buffer_t{nullptr, 0};
}

tessera_status_t native_load(const void* blob, size_t size, const tessera_named_tensor_t* constants, size_t n,
                             const tessera_load_options_t* opts, tessera_engine_t** out, char* msg, size_t cap) {
  try {
    auto magic_is = [&](const char* m) { return size >= sizeof(kMagic) && std::memcmp(blob, m, sizeof(kMagic)) == 0; };
    const kernels::Products products = magic_is(kMagicBf16)   ? kernels::Products::kBf16
                                       : magic_is(kMagicFp16) ? kernels::Products::kFp16
                                                              : kernels::Products::kFp32;
    if (products == kernels::Products::kFp32 && !magic_is(kMagic)) {
      set_msg(msg, cap, "not a native-backend blob");
      return TESSERA_ERROR_INCOMPATIBLE_BLOB;
    }
    std::string bytes(static_cast<const char*>(blob) + sizeof(kMagic), size - sizeof(kMagic));
    auto g = import_onnx_bytes(bytes, "", "native blob");
    if (!g.ok()) return from_status(g.status(), msg, cap);
    for (size_t i = 0; i < n; ++i) {
      const tessera_tensor_t& d = constants[i].tensor;
      auto it = g->constants.find(constants[i].name);
      if (it == g->constants.end()) continue;
      Dims dims(d.dims, d.dims + d.rank);
      Tensor t = Tensor::View(static_cast<DType>(d.dtype), dims, d.data);
      if (t.nbytes() != d.size_bytes || t.dtype() != it->second.dtype() || t.dims() != it->second.dims()) {
        set_msg(msg, cap, "constant '" + std::string(constants[i].name) + "' does not match the region model");
        return TESSERA_ERROR_INVALID_ARGUMENT;
      }
      it->second = t;
    }
    SessionOptions so;
    so.num_threads = opts ? std::max(1, opts->num_threads) : 1;
    so.optimize = false;
    so.products = products;
    auto s = InferenceSession::Create(std::move(*g), so);
    if (!s.ok()) return from_status(s.status(), msg, cap);
    auto* e = new NativeEngine{std::move(*s)};
    *out = reinterpret_cast<tessera_engine_t*>(e);
    return TESSERA_OK;
  } catch (const std::exception& e) {
    set_msg(msg, cap, e.what());
    return TESSERA_ERROR_INTERNAL;
  }
}

tessera_status_t native_run(tessera_engine_t* engine, const tessera_tensor_t* in, size_t n_in, tessera_tensor_t* out,
                            size_t n_out, char* msg, size_t cap) {
  try {
    auto* e = reinterpret_cast<NativeEngine*>(engine);
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < n_in; ++i) {
      inputs.push_back(Tensor::View(static_cast<DType>(in[i].dtype), Dims(in[i].dims, in[i].dims + in[i].rank),
                                    in[i].data));
    }
    auto r = e->session->run(inputs);
    if (!r.ok()) return from_status(r.status(), msg, cap);
    if (r->size() != n_out) {
      set_msg(msg, cap, "engine produced " + std::to_string(r->size()) + " outputs, caller expects " +
                            std::to_string(n_out));
      return TESSERA_ERROR_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < n_out; ++i) {
      const Tensor& t = (*r)[i];
      if (static_cast<int32_t>(t.dtype()) != out[i].dtype || t.nbytes() != out[i].size_bytes) {
        set_msg(msg, cap, "output " + std::to_string(i) + " is " + t.str() + ", the caller's buffer differs");
        return TESSERA_ERROR_INVALID_ARGUMENT;
      }
      if (t.nbytes()) std::memcpy(out[i].data, t.raw(), t.nbytes());
    }
    return TESSERA_OK;
  } catch (const std::exception& ex) {
    set_msg(msg, cap, ex.what());
    return TESSERA_ERROR_INTERNAL;
  }
}

void native_destroy(tessera_engine_t* engine) { delete reinterpret_cast<NativeEngine*>(engine); }

const tessera_backend_t kNativeTable = {
    TESSERA_BACKEND_ABI_VERSION,
    sizeof(tessera_backend_t),
    "native",
    TESSERA_BACKEND_FLAG_CONCURRENT_RUN,
    native_version,
    native_capability,
    native_compile,
    native_free_buffer,
    native_load,
    native_run,
    native_destroy,
    nullptr,                 // estimate_cost: the host prices native itself (partition/cost.h)
    TESSERA_THREADING_POOL,  // the session's thread pool, whose workers sleep when idle
    "#d9d9d9",
    nullptr,
    nullptr,
    TESSERA_MEMORY_HOST,  // minor revision 3: host memory, no device functions
    0,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,  // minor revision 4: engine_bytes (the native region's plan is counted as plans are)
};

}  // namespace

const tessera_backend_t* native_backend_table() { return &kNativeTable; }

void install_native_backend() { set_native_backend_table(&native_backend_table); }

namespace {
// Installed as soon as this file is linked in; the api layer installs it again
// before it resolves backends (install_native_backend), which also keeps this
// file linked from its static library.
const bool kInstalled = (install_native_backend(), true);
}  // namespace

}  // namespace tessera
