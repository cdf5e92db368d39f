#include "backends/backend.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <map>

namespace fs = std::filesystem;

namespace tessera {

namespace {

constexpr size_t kMsgCap = 1024;

std::string status_name(tessera_status_t s) {
  switch (s) {
    case TESSERA_OK: return "ok";
    case TESSERA_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case TESSERA_ERROR_UNSUPPORTED: return "unsupported";
    case TESSERA_ERROR_INCOMPATIBLE_BLOB: return "incompatible blob";
    case TESSERA_ERROR_COMPILE_FAILED: return "compile failed";
    case TESSERA_ERROR_RUNTIME: return "runtime error";
    case TESSERA_ERROR_OUT_OF_MEMORY: return "out of memory";
    case TESSERA_ERROR_INTERNAL: return "internal error";
  }
  return "status " + std::to_string(static_cast<int>(s));
}

// "backend 'dnnl': compile failed: <message>"
Status backend_status(const std::string& backend, const char* stage, tessera_status_t s, const char* msg) {
  std::string m = "backend '" + backend + "': " + stage + " " + status_name(s);
  if (msg && msg[0]) m += ": " + std::string(msg);
  switch (s) {
    case TESSERA_ERROR_INVALID_ARGUMENT: return InvalidInput(m);
    case TESSERA_ERROR_UNSUPPORTED: return Unsupported(m);
    case TESSERA_ERROR_INCOMPATIBLE_BLOB: return InvalidModel(m);
    case TESSERA_ERROR_RUNTIME:
    case TESSERA_ERROR_OUT_OF_MEMORY:  // what the model asks for may not fit this machine: not a broken invariant
      return RuntimeError(m);
    default: return InternalError(m);
  }
}

std::string self_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

// The file of the shared library this code was linked into (libtessera.so
// for a program using the C API), or "" when it is the executable itself.
std::string own_library() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&self_dir), &info) == 0 || !info.dli_fname) return "";
  std::error_code ec;
  const fs::path lib = fs::canonical(info.dli_fname, ec);
  if (ec) return "";
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec || lib == exe ? "" : lib.string();
}

std::string plugin_file(const std::string& name) { return "libtessera_backend_" + name + ".so"; }

// True when a table of `struct_size` bytes has the member ending at `end`.
constexpr bool covers(uint32_t struct_size, size_t end) { return struct_size >= end; }
#define TSR_MEMBER_END(m) (offsetof(tessera_backend_t, m) + sizeof(tessera_backend_t::m))

}  // namespace

const char* threading_name(Threading t) {
  switch (t) {
    case Threading::kCaller: return "caller";
    case Threading::kPool: return "pool";
    case Threading::kOpenMP: return "openmp";
    case Threading::kUnknown: break;
  }
  return "unknown";
}

Threading threading_from_name(const std::string& s) {
  for (Threading t : {Threading::kCaller, Threading::kPool, Threading::kOpenMP}) {
    if (s == threading_name(t)) return t;
  }
  return Threading::kUnknown;
}

tessera_tensor_t tensor_descriptor(const Tensor& t) {
  tessera_tensor_t d{};
  d.dtype = static_cast<int32_t>(t.dtype());
  d.rank = t.rank();
  d.dims = t.rank() > 0 ? t.dims().data() : nullptr;
  d.data = const_cast<void*>(t.raw());
  d.size_bytes = t.nbytes();
  return d;
}

// ---- Engine ------------------------------------------------------------

Engine::~Engine() {
  if (handle_ && backend_) backend_->table()->destroy(handle_);
}

Status Engine::call_run(const tessera_tensor_t* in, size_t num_in, tessera_tensor_t* out, size_t num_out,
                        std::vector<ProfileStep>* steps) const {
  tessera_profile_sink_t sink{};
  sink.ctx = steps;
  sink.step = [](void* ctx, const char* const* nodes, int32_t num_nodes, const char* what, double start_us,
                 double duration_us) {
    ProfileStep st;
    for (int32_t k = 0; nodes && k < num_nodes; ++k) {
      if (nodes[k]) st.nodes.emplace_back(nodes[k]);
    }
    st.what = what ? what : "";
    st.start_us = start_us;
    st.duration_us = duration_us;
    static_cast<std::vector<ProfileStep>*>(ctx)->push_back(std::move(st));
  };
  const bool profiled = steps && backend_->run_profiled_;
  char msg[kMsgCap] = {0};
  tessera_status_t s;
  {
    std::unique_lock<std::mutex> lock;
    if (run_mu_) lock = std::unique_lock<std::mutex>(*run_mu_);
    s = profiled ? backend_->run_profiled_(handle_, in, num_in, out, num_out, &sink, msg, kMsgCap)
                 : backend_->table()->run(handle_, in, num_in, out, num_out, msg, kMsgCap);
  }
  msg[kMsgCap - 1] = 0;
  if (s != TESSERA_OK) return backend_status(backend_->name(), ("run of " + region_ + ":").c_str(), s, msg);
  return Status::Ok();
}

uint64_t Engine::bytes() const {
  return backend_ && backend_->engine_bytes_ && handle_ ? backend_->engine_bytes_(handle_) : 0;
}

uint64_t engine_bytes(const EngineTable& engines) {
  uint64_t sum = 0;
  for (const auto& e : engines) sum += e ? e->bytes() : 0;
  return sum;
}

Status Engine::run(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs) const {
  return run_profiled(inputs, outputs, nullptr);
}

Status Engine::run_profiled(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs,
                            std::vector<ProfileStep>* steps) const {
  if (backend_->on_device()) return run_staged(inputs, outputs, steps);
  std::vector<tessera_tensor_t> in(inputs.size()), out(outputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) in[i] = tensor_descriptor(*inputs[i]);
  for (size_t i = 0; i < outputs.size(); ++i) out[i] = tensor_descriptor(*outputs[i]);
  return call_run(in.data(), in.size(), out.data(), out.size(), steps);
}

Status Engine::run_through(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs,
                           const std::vector<void*>& stage, std::vector<ProfileStep>* steps) const {
  const size_t ni = inputs.size();
  std::vector<tessera_tensor_t> in(ni), out(outputs.size());
  // A tensor with no elements crosses nothing and its pointer is never read: NULL, as the ABI allows.
  auto describe = [&](const Tensor& t, void* staged) {
    tessera_tensor_t d = tensor_descriptor(t);
    if (staged || t.nbytes() == 0) d.data = t.nbytes() == 0 ? nullptr : staged;
    return d;
  };
  bool crossed = false;
  for (size_t i = 0; i < ni; ++i) {
    in[i] = describe(*inputs[i], stage[i]);
    if (!stage[i] || inputs[i]->nbytes() == 0) continue;  // on the device already, or nothing to copy
    Status s = backend_->copy(in[i].data, inputs[i]->raw(), inputs[i]->nbytes(), TESSERA_COPY_HOST_TO_DEVICE);
    if (!s.ok()) return s;
    crossed = true;
  }
  for (size_t i = 0; i < outputs.size(); ++i) out[i] = describe(*outputs[i], stage[ni + i]);
  Status status = call_run(in.data(), in.size(), out.data(), out.size(), steps);
  for (size_t i = 0; status.ok() && i < outputs.size(); ++i) {
    if (!stage[ni + i] || outputs[i]->nbytes() == 0) continue;
    status = backend_->copy(const_cast<void*>(outputs[i]->raw()), out[i].data, outputs[i]->nbytes(),
                            TESSERA_COPY_DEVICE_TO_HOST);
    crossed = true;
  }
  // A crossing waits: host buffers must not change (inputs) or be read (outputs) before the copies are done, and
  // staging buffers must not be reused.
  if (crossed) {
    Status done = backend_->synchronize();
    if (status.ok()) status = done;
  }
  return status;
}

// Host tensors through a device engine: every tensor through a staging buffer of the engine's, kept for the next
// run of the same sizes; one such run at a time.
Status Engine::run_staged(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs,
                          std::vector<ProfileStep>* steps) const {
  std::lock_guard<std::mutex> lock(stage_mu_);
  const size_t n = inputs.size() + outputs.size();
  stage_.resize(n);
  stage_bytes_.resize(n, 0);
  std::vector<void*> stage(n, nullptr);
  for (size_t k = 0; k < n; ++k) {
    const size_t bytes = k < inputs.size() ? inputs[k]->nbytes() : outputs[k - inputs.size()]->nbytes();
    if (bytes == 0) continue;
    if (stage_bytes_[k] < bytes) {
      stage_[k].reset();
      auto buf = backend_->device_alloc(bytes);
      if (!buf.ok()) return buf.status();
      stage_[k] = std::move(buf).value();
      stage_bytes_[k] = bytes;
    }
    stage[k] = stage_[k].get();
  }
  return run_through(inputs, outputs, stage, steps);
}

// ---- Backend -----------------------------------------------------------

Expected<std::shared_ptr<Backend>> Backend::FromTable(const tessera_backend_t* t, std::string path,
                                                      std::shared_ptr<void> library) {
  const std::string where = path.empty() ? std::string("in-process backend") : "backend plugin '" + path + "'";
  if (!t) return InvalidModel(where + ": the query symbol returned no table for ABI version " +
                              std::to_string(TESSERA_BACKEND_ABI_VERSION));
  if (t->abi_version != TESSERA_BACKEND_ABI_VERSION) {
    return InvalidModel(where + ": built for backend ABI version " + std::to_string(t->abi_version) +
                        ", this tessera uses version " + std::to_string(TESSERA_BACKEND_ABI_VERSION));
  }
  if (t->struct_size < TESSERA_BACKEND_V1_0_SIZE) {
    return InvalidModel(where + ": backend table is " + std::to_string(t->struct_size) + " bytes, expected at least " +
                        std::to_string(TESSERA_BACKEND_V1_0_SIZE));
  }
  if (!t->name || !t->name[0]) return InvalidModel(where + ": backend has no name");
  if (!t->capability || !t->compile || !t->free_buffer || !t->load || !t->run || !t->destroy) {
    return InvalidModel(where + ": backend '" + t->name + "' leaves a required function NULL");
  }
  auto b = std::shared_ptr<Backend>(new Backend());
  b->table_ = t;
  b->library_ = std::move(library);
  b->name_ = t->name;
  b->version_ = t->version ? t->version() : "";
  b->path_ = std::move(path);
  // Minor revision 1, where the table has it.
  if (covers(t->struct_size, TSR_MEMBER_END(threading)) && t->threading <= TESSERA_THREADING_OPENMP) {
    b->threading_ = static_cast<Threading>(t->threading);
  }
  if (covers(t->struct_size, TSR_MEMBER_END(color)) && t->color) b->color_ = t->color;
  if (covers(t->struct_size, TSR_MEMBER_END(estimate_region))) b->estimate_region_ = t->estimate_region;
  if (covers(t->struct_size, TSR_MEMBER_END(run_profiled))) b->run_profiled_ = t->run_profiled;
  if (covers(t->struct_size, TSR_MEMBER_END(engine_bytes))) b->engine_bytes_ = t->engine_bytes;
  // Minor revision 3: device memory.
  if (covers(t->struct_size, TSR_MEMBER_END(synchronize)) && t->memory == TESSERA_MEMORY_DEVICE) {
    if (!t->device_alloc || !t->device_free || !t->copy || !t->synchronize) {
      return InvalidModel(where + ": backend '" + b->name_ +
                          "' keeps its tensors on a device but leaves a device-memory function NULL");
    }
    b->on_device_ = true;
    b->device_id_ = t->device_id;
  } else if (covers(t->struct_size, TSR_MEMBER_END(memory)) && t->memory != TESSERA_MEMORY_HOST) {
    return InvalidModel(where + ": backend '" + b->name_ + "' declares an unknown memory kind " +
                        std::to_string(t->memory));
  }
  return b;
}

Expected<std::shared_ptr<Backend>> Backend::LoadLibrary(const std::string& path) {
  // RTLD_NODELETE: a plugin stays mapped until the process ends. Engine libraries start threads (OpenMP,
  // pthreadpool) and keep process-wide state (cpuinfo) that must not vanish under them, and LeakSanitizer must see
  // that state from their globals.
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!h) {
    const char* e = dlerror();
    return IoError("backend plugin '" + path + "' cannot be loaded: " + (e ? e : "unknown error"));
  }
  std::shared_ptr<void> lib(h, [](void* p) { dlclose(p); });
  auto query = reinterpret_cast<tessera_backend_query_fn>(dlsym(h, TESSERA_BACKEND_QUERY_SYMBOL));
  if (!query) {
    return InvalidModel("backend plugin '" + path + "' does not export " TESSERA_BACKEND_QUERY_SYMBOL);
  }
  return FromTable(query(TESSERA_BACKEND_ABI_VERSION), path, std::move(lib));
}

Capability Backend::capability(std::string_view model, int num_nodes) const {
  Capability cap;
  cap.nodes.assign(static_cast<size_t>(std::max(0, num_nodes)), NodeVerdict{false, "not reported"});
  tessera_capability_sink_t sink{};
  sink.ctx = &cap;
  sink.node = [](void* ctx, int32_t i, int32_t supported, const char* reason) {
    auto* c = static_cast<Capability*>(ctx);
    if (i < 0 || static_cast<size_t>(i) >= c->nodes.size()) return;
    c->nodes[static_cast<size_t>(i)] = NodeVerdict{supported != 0, supported ? "" : (reason ? reason : "refused")};
  };
  sink.composite = [](void* ctx, const char* pattern, const int32_t* idx, int32_t count) {
    auto* c = static_cast<Capability*>(ctx);
    if (!idx || count <= 0) return;
    CompositePattern p{pattern ? pattern : "composite", {}};
    for (int32_t k = 0; k < count; ++k) {
      if (idx[k] < 0 || static_cast<size_t>(idx[k]) >= c->nodes.size()) return;  // ignore a malformed pattern
      p.nodes.push_back(idx[k]);
    }
    std::sort(p.nodes.begin(), p.nodes.end());
    p.nodes.erase(std::unique(p.nodes.begin(), p.nodes.end()), p.nodes.end());
    c->composites.push_back(std::move(p));
  };
  char msg[kMsgCap] = {0};
  tessera_status_t s = table_->capability(model.data(), model.size(), &sink, msg, kMsgCap);
  msg[kMsgCap - 1] = 0;
  if (s != TESSERA_OK) {
    std::string reason = "capability failed: " + status_name(s) + (msg[0] ? ": " + std::string(msg) : "");
    for (auto& v : cap.nodes) v = NodeVerdict{false, reason};
    cap.composites.clear();
  }
  return cap;
}

Expected<Blob> Backend::compile(std::string_view model, const std::string& options, int threads) const {
  tessera_buffer_t buf{nullptr, 0};
  char msg[kMsgCap] = {0};
  const std::string all = threads > 0 ? with_backend_option(options, "threads", std::to_string(threads)) : options;
  tessera_status_t s = table_->compile(model.data(), model.size(), all.c_str(), &buf, msg, kMsgCap);
  msg[kMsgCap - 1] = 0;
  if (s != TESSERA_OK) {
    table_->free_buffer(&buf);
    return backend_status(name_, "compile:", s, msg);
  }
  Blob b = Blob::Copy(buf.data, buf.size);
  table_->free_buffer(&buf);
  return b;
}

Expected<std::shared_ptr<const Engine>> Backend::load(const Blob& blob,
                                                      const std::vector<std::pair<std::string, Tensor>>& constants,
                                                      int num_threads, const std::string& region,
                                                      size_t max_memory) const {
  std::vector<tessera_named_tensor_t> named(constants.size());
  for (size_t i = 0; i < constants.size(); ++i) {
    named[i].name = constants[i].first.c_str();
    named[i].tensor = tensor_descriptor(constants[i].second);
  }
  tessera_load_options_t opts{};
  opts.struct_size = sizeof(opts);
  opts.num_threads = std::max(1, num_threads);
  opts.max_memory = max_memory;
  tessera_engine_t* handle = nullptr;
  char msg[kMsgCap] = {0};
  tessera_status_t s =
      table_->load(blob.data, blob.size, named.data(), named.size(), &opts, &handle, msg, kMsgCap);
  msg[kMsgCap - 1] = 0;
  if (s != TESSERA_OK || !handle) {
    if (handle) table_->destroy(handle);
    if (s == TESSERA_OK) return InternalError("backend '" + name_ + "': load of " + region + " returned no engine");
    return backend_status(name_, ("load of " + region + ":").c_str(), s, msg);
  }
  auto e = std::shared_ptr<Engine>(new Engine());
  e->backend_ = shared_from_this();
  e->handle_ = handle;
  e->region_ = region;
  for (const auto& c : constants) e->constants_.push_back(c.second);
  if (!(table_->flags & TESSERA_BACKEND_FLAG_CONCURRENT_RUN)) e->run_mu_ = std::make_unique<std::mutex>();
  return std::shared_ptr<const Engine>(std::move(e));
}

Expected<double> Backend::estimate_cost(std::string_view model, const tessera_machine_t& machine) const {
  if (!estimate_region_ && !table_->estimate_cost) return Unsupported("backend '" + name_ + "' gives no cost estimates");
  double us = 0;
  char msg[kMsgCap] = {0};
  tessera_status_t s =
      estimate_region_ ? estimate_region_(model.data(), model.size(), &machine, &us, msg, kMsgCap)
                       : table_->estimate_cost(model.data(), model.size(), machine.num_threads, &us, msg, kMsgCap);
  msg[kMsgCap - 1] = 0;
  if (s != TESSERA_OK) return backend_status(name_, "estimate_cost:", s, msg);
  return us;
}

Expected<std::shared_ptr<void>> Backend::device_alloc(size_t bytes) const {
  if (!on_device_) return InternalError("backend '" + name_ + "' has no device memory");
  void* p = nullptr;
  char msg[kMsgCap] = {0};
  tessera_status_t s = table_->device_alloc(bytes, &p, msg, kMsgCap);
  msg[kMsgCap - 1] = 0;
  if (s != TESSERA_OK || !p) {
    if (s == TESSERA_OK) return InternalError("backend '" + name_ + "': device_alloc returned no buffer");
    return backend_status(name_, ("device_alloc of " + std::to_string(bytes) + " bytes:").c_str(), s, msg);
  }
  auto self = shared_from_this();  // the table (and its library) must outlive the buffer
  return std::shared_ptr<void>(p, [self](void* q) { self->table_->device_free(q); });
}

Status Backend::copy(void* dst, const void* src, size_t bytes, int32_t direction) const {
  if (!on_device_) return InternalError("backend '" + name_ + "' has no device memory");
  if (bytes == 0) return Status::Ok();
  char msg[kMsgCap] = {0};
  tessera_status_t s = table_->copy(dst, src, bytes, direction, msg, kMsgCap);
  msg[kMsgCap - 1] = 0;
  if (s != TESSERA_OK) return backend_status(name_, "copy:", s, msg);
  return Status::Ok();
}

Status Backend::synchronize() const {
  if (!on_device_) return Status::Ok();
  char msg[kMsgCap] = {0};
  tessera_status_t s = table_->synchronize(msg, kMsgCap);
  msg[kMsgCap - 1] = 0;
  if (s != TESSERA_OK) return backend_status(name_, "synchronize:", s, msg);
  return Status::Ok();
}

// ---- threads -----------------------------------------------------------

// Measured at 2 threads on an idle machine, oneDNN alone, passive /
// GOMP_SPINCOUNT=10000: resnet50 47.0 / 40.4 ms, mobilenet_v2 6.5 / 4.2 ms,
// bert_tiny 2.14 / 0.79 ms; with XNNPACK regions alternating with oneDNN
// ones (bert_tiny xnnpack,dnnl): 1.40 / 16.0 ms. Hence a bounded spin unless
// another pooled engine runs beside an OpenMP one, then passive.
bool engines_need_passive_wait(const std::vector<Threading>& engines) {
  for (size_t a = 0; a < engines.size(); ++a) {
    if (engines[a] != Threading::kOpenMP && engines[a] != Threading::kUnknown) continue;
    for (size_t b = 0; b < engines.size(); ++b) {
      if (b != a && (engines[b] == Threading::kPool || engines[b] == Threading::kUnknown)) return true;
    }
  }
  return false;
}

namespace {

struct ThreadPolicyState {
  std::mutex mu;
  std::map<std::string, Threading> expected;  // backend name -> threading (kUnknown until known)
  std::map<std::string, Threading> known;     // from plugins already open
  bool alone = false;
  bool user_set = std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT");
  bool applied = false;  // our own variables are in the environment
};

ThreadPolicyState& policy_state() {
  static ThreadPolicyState s;
  return s;
}

// The variable the expectation asks for ("" when no OpenMP engine is possible).
std::string policy_locked(ThreadPolicyState& st) {
  std::vector<Threading> t;
  for (const auto& [name, threading] : st.expected) {
    if (name == "native") continue;
    auto k = st.known.find(name);
    t.push_back(k != st.known.end() ? k->second : threading);
  }
  bool openmp = false;
  for (Threading x : t) openmp = openmp || x == Threading::kOpenMP || x == Threading::kUnknown;
  if (!openmp) return "";
  if (!st.alone && engines_need_passive_wait(t)) return "OMP_WAIT_POLICY=PASSIVE";
  return "GOMP_SPINCOUNT=10000";
}

bool libgomp_loaded() {
  void* h = dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (h) dlclose(h);
  return h != nullptr;
}

// Puts the expected policy into the environment while it can still matter.
void apply_policy_locked(ThreadPolicyState& st) {
  if (st.user_set || libgomp_loaded()) return;
  if (st.applied) {
    unsetenv("OMP_WAIT_POLICY");
    unsetenv("GOMP_SPINCOUNT");
    st.applied = false;
  }
  std::string p = policy_locked(st);
  if (p.empty()) return;
  auto eq = p.find('=');
  setenv(p.substr(0, eq).c_str(), p.substr(eq + 1).c_str(), 1);
  st.applied = true;
}

void plugin_opening(const std::string& name) {
  ThreadPolicyState& st = policy_state();
  std::lock_guard<std::mutex> lock(st.mu);
  // A plugin nobody announced counts as unknown beside what was expected.
  st.expected.emplace(name, Threading::kUnknown);
  apply_policy_locked(st);
}

void plugin_opened(const std::string& name, Threading t) {
  ThreadPolicyState& st = policy_state();
  std::lock_guard<std::mutex> lock(st.mu);
  st.known[name] = t;
}

}  // namespace

void expect_engines(const std::vector<std::pair<std::string, Threading>>& engines, bool alone) {
  ThreadPolicyState& st = policy_state();
  std::lock_guard<std::mutex> lock(st.mu);
  st.expected.clear();
  for (const auto& [name, t] : engines) st.expected[name] = t;
  st.alone = alone;
  apply_policy_locked(st);
}

std::string expected_thread_policy() {
  ThreadPolicyState& st = policy_state();
  std::lock_guard<std::mutex> lock(st.mu);
  return policy_locked(st);
}

// ---- discovery ---------------------------------------------------------

std::vector<std::string> backend_search_path() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("TESSERA_BACKEND_PATH")) {
    std::string s = env;
    size_t start = 0;
    while (start <= s.size()) {
      size_t end = s.find(':', start);
      if (end == std::string::npos) end = s.size();
      if (end > start) dirs.push_back(s.substr(start, end - start));
      start = end + 1;
    }
  }
  std::string self = self_dir();
  if (!self.empty()) dirs.push_back((fs::path(self) / ".." / "lib" / "tessera").lexically_normal().string());
  // A program linked against libtessera.so: plugins beside the library (PREFIX/lib/tessera).
  const std::string lib = own_library();
  if (!lib.empty()) {
    const std::string d = (fs::path(lib).parent_path() / "tessera").lexically_normal().string();
    if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
  }
  return dirs;
}

namespace {
std::mutex& registry_mu() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, std::shared_ptr<const Backend>>& registry() {
  static std::map<std::string, std::shared_ptr<const Backend>> cache;
  return cache;
}
}  // namespace

namespace {
std::atomic<const tessera_backend_t* (*)()> g_native_table{nullptr};
}  // namespace

void set_native_backend_table(const tessera_backend_t* (*table)()) {
  g_native_table.store(table, std::memory_order_release);
}

Status register_backend(std::shared_ptr<const Backend> backend) {
  std::lock_guard<std::mutex> lock(registry_mu());
  if (!registry().emplace(backend->name(), backend).second) {
    return InvalidInput("a backend named '" + backend->name() + "' is already registered");
  }
  return Status::Ok();
}

Expected<std::shared_ptr<const Backend>> find_backend(const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mu());
  auto& cache = registry();
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  std::shared_ptr<Backend> b;
  if (name == "native") {
    const auto table = g_native_table.load(std::memory_order_acquire);
    if (!table) return InternalError("the native backend is not installed (the runtime installs it)");
    TSR_ASSIGN_OR_RETURN(b, Backend::FromTable(table(), "", nullptr));
  } else {
    if (name.empty() || name.find_first_of("/\\. ") != std::string::npos) {
      return InvalidInput("'" + name + "' is not a backend name");
    }
    std::string found;
    std::vector<std::string> dirs = backend_search_path();
    for (const auto& d : dirs) {
      fs::path p = fs::path(d) / plugin_file(name);
      std::error_code ec;
      if (fs::is_regular_file(p, ec)) {
        found = p.string();
        break;
      }
    }
    if (found.empty()) {
      std::string list;
      for (const auto& d : dirs) list += (list.empty() ? "" : ":") + d;
      return Unsupported("backend '" + name + "' not found: no " + plugin_file(name) + " in " + list +
                         " (set TESSERA_BACKEND_PATH)");
    }
    plugin_opening(name);
    TSR_ASSIGN_OR_RETURN(b, Backend::LoadLibrary(found));
    plugin_opened(name, b->threading());
    if (b->name() != name) {
      return InvalidModel("backend plugin '" + found + "' calls itself '" + b->name() + "', expected '" + name + "'");
    }
  }
  cache[name] = b;
  return std::shared_ptr<const Backend>(b);
}

std::vector<std::string> available_backends() {
  std::vector<std::string> names;
  const std::string prefix = "libtessera_backend_", suffix = ".so";
  for (const auto& d : backend_search_path()) {
    std::error_code ec;
    for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) {
      std::string f = it->path().filename().string();
      if (f.size() > prefix.size() + suffix.size() && f.rfind(prefix, 0) == 0 &&
          f.compare(f.size() - suffix.size(), suffix.size(), suffix) == 0) {
        std::string n = f.substr(prefix.size(), f.size() - prefix.size() - suffix.size());
        if (n != "native" && std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
      }
    }
  }
  std::sort(names.begin(), names.end());
  names.push_back("native");
  return names;
}

Expected<std::vector<std::shared_ptr<const Backend>>> resolve_backends(const std::string& list,
                                                                       bool engines_run_alone) {
  std::vector<std::string> names;
  if (list.empty()) {
    names = available_backends();
  } else {
    size_t start = 0;
    while (start <= list.size()) {
      size_t end = list.find(',', start);
      if (end == std::string::npos) end = list.size();
      std::string n = list.substr(start, end - start);
      if (n.empty()) return InvalidInput("--backends '" + list + "': empty backend name");
      if (std::find(names.begin(), names.end(), n) != names.end()) {
        return InvalidInput("--backends '" + list + "': '" + n + "' is listed twice");
      }
      names.push_back(n);
      start = end + 1;
    }
    auto nat = std::find(names.begin(), names.end(), "native");
    if (nat == names.end()) names.push_back("native");
    else if (nat + 1 != names.end()) return InvalidInput("--backends '" + list + "': native must be last");
  }
  // Every backend found (no list): cost-based placement charges what an
  // OpenMP engine loses beside another pooled engine and so rarely mixes
  // them; the process takes the policy a single-engine program wants, as it
  // does when engines are measured one at a time. (An artifact gets its
  // policy from the engines it holds.)
  std::vector<std::pair<std::string, Threading>> expected;
  for (const auto& n : names) expected.emplace_back(n, Threading::kUnknown);
  expect_engines(expected, list.empty() || engines_run_alone);
  std::vector<std::shared_ptr<const Backend>> out;
  for (const auto& n : names) {
    std::shared_ptr<const Backend> b;
    TSR_ASSIGN_OR_RETURN(b, find_backend(n));
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace tessera
