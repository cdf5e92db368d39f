// The host side of the backend ABI (include/tessera/backend.h): a Backend
// wraps one validated tessera_backend_t table (a plugin's, or the native
// backend's in-process one) and turns its C calls into Status/Expected; an
// Engine owns one loaded engine handle and destroys it.
//
// Plugins are found by name: libtessera_backend_<name>.so in, in order, the
// directories of $TESSERA_BACKEND_PATH (colon-separated), then
// <directory of the running binary>/../lib/tessera (the build tree and the
// install tree share that layout). "native" is always available, in-process.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "artifact/program.h"
#include "ir/tensor.h"
#include "tessera/backend.h"
#include "util/status.h"

namespace tessera {

struct NodeVerdict {
  bool supported = false;
  std::string reason;  // why not, when refused
};

struct CompositePattern {
  std::string pattern;
  std::vector<int> nodes;  // indices into the model's graph.node
};

struct Capability {
  std::vector<NodeVerdict> nodes;
  std::vector<CompositePattern> composites;
};

class Backend;

// How a backend's engines use threads (the ABI's TESSERA_THREADING_*).
enum class Threading { kUnknown = 0, kCaller = 1, kPool = 2, kOpenMP = 3 };
const char* threading_name(Threading t);       // "unknown", "caller", "pool", "openmp"
Threading threading_from_name(const std::string& s);  // kUnknown for anything else

// One step of a profiled engine run (the ABI's tessera_profile_sink_t).
struct ProfileStep {
  std::vector<std::string> nodes;  // region-model node names the step computed
  std::string what;                // the engine's name for the step
  double start_us = 0, duration_us = 0;
};

class Engine {
 public:
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Inputs/outputs in the region model's order; outputs are preallocated.
  Status run(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs) const;
  // Like run(), also collecting the engine's per-node steps. An engine whose
  // backend gives no profile runs as usual and leaves `steps` empty.
  Status run_profiled(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs,
                      std::vector<ProfileStep>* steps) const;
  const Backend& backend() const { return *backend_; }
  const std::string& region() const { return region_; }
  // Host memory the engine holds of its own (its backend's engine_bytes; 0 where the backend does not say).
  uint64_t bytes() const;

  // A device backend's engine (Backend::on_device) reads and writes device
  // memory. run() above takes host tensors for it too: it stages them through
  // device buffers of its own (one run of the engine at a time). run_through()
  // is the call for a caller that keeps some values on the device (the
  // execution plan): `stage` holds, for each input then each output, the
  // device buffer a host tensor passes through, or null for a tensor that
  // already lives on the device. Host inputs are copied in, the engine runs,
  // host outputs are copied back, and the call waits (Backend::synchronize)
  // when anything crossed; otherwise the work is only enqueued on the calling
  // thread's stream. With `steps`, profiled as run_profiled() is.
  Status run_through(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs,
                     const std::vector<void*>& stage, std::vector<ProfileStep>* steps = nullptr) const;

 private:
  friend class Backend;
  Engine() = default;
  Status run_staged(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs,
                    std::vector<ProfileStep>* steps) const;
  // The table's run, or its run_profiled where `steps` asks for a profile and the backend gives one.
  Status call_run(const tessera_tensor_t* in, size_t num_in, tessera_tensor_t* out, size_t num_out,
                  std::vector<ProfileStep>* steps) const;
  std::shared_ptr<const Backend> backend_;
  tessera_engine_t* handle_ = nullptr;
  std::string region_;
  std::vector<Tensor> constants_;  // kept alive: the engine may point into them
  std::unique_ptr<std::mutex> run_mu_;  // set when the backend lacks CONCURRENT_RUN
  // run() of a device engine: device buffers its host tensors pass through.
  mutable std::mutex stage_mu_;
  mutable std::vector<std::shared_ptr<void>> stage_;
  mutable std::vector<size_t> stage_bytes_;
};

using EngineTable = std::vector<std::shared_ptr<const Engine>>;
// The sum of the table's Engine::bytes().
uint64_t engine_bytes(const EngineTable& engines);

class Backend : public std::enable_shared_from_this<Backend> {
 public:
  // Validates `table` (ABI version, struct size, required members). `library`
  // keeps the shared object loaded for as long as the Backend lives.
  static Expected<std::shared_ptr<Backend>> FromTable(const tessera_backend_t* table, std::string path,
                                                      std::shared_ptr<void> library);
  // dlopen()s a plugin file and validates what its query symbol returns.
  static Expected<std::shared_ptr<Backend>> LoadLibrary(const std::string& path);

  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  const std::string& path() const { return path_; }  // "" for in-process backends
  bool is_native() const { return name_ == "native"; }
  bool has_estimate_cost() const { return table_->estimate_cost != nullptr || estimate_region_ != nullptr; }
  const tessera_backend_t* table() const { return table_; }

  // Properties of ABI minor revision 1 (absent in an older table: unknown
  // threading, no colour, no estimate_region, no profile).
  Threading threading() const { return threading_; }
  const std::string& color() const { return color_; }
  bool gives_profile() const { return run_profiled_ != nullptr; }

  // Minor revision 3: a backend whose tensors live on a device (absent in an
  // older table: host). The buffers and copies below fail on a host backend.
  bool on_device() const { return on_device_; }
  int device_id() const { return device_id_; }
  // A device buffer of `bytes` (> 0), freed when the last reference goes.
  Expected<std::shared_ptr<void>> device_alloc(size_t bytes) const;
  // Enqueues a copy on the calling thread's stream (TESSERA_COPY_*).
  Status copy(void* dst, const void* src, size_t bytes, int32_t direction) const;
  // Waits for everything the calling thread enqueued on this backend.
  Status synchronize() const;

  // Verdicts for the `num_nodes` nodes of the serialized model. A backend
  // error becomes a refusal of every node with the message as reason.
  Capability capability(std::string_view model, int num_nodes) const;
  // `threads` > 0 adds "threads=N" to the options: the thread count the engine will run with, for a backend that
  // times its kernels' variants as it compiles (oneDNN's choose_impl).
  Expected<Blob> compile(std::string_view model, const std::string& options, int threads = 0) const;
  Expected<std::shared_ptr<const Engine>> load(const Blob& blob,
                                               const std::vector<std::pair<std::string, Tensor>>& constants,
                                               int num_threads, const std::string& region,
                                               size_t max_memory = 0) const;  // 0: no limit
  // Microseconds on the machine `machine` describes (estimate_region), or,
  // from a table without it, estimate_cost at machine.num_threads; an error
  // when the backend gives no estimate.
  Expected<double> estimate_cost(std::string_view model, const tessera_machine_t& machine) const;

 private:
  friend class Engine;
  Backend() = default;
  const tessera_backend_t* table_ = nullptr;
  std::shared_ptr<void> library_;
  std::string name_, version_, path_, color_;
  Threading threading_ = Threading::kUnknown;
  decltype(tessera_backend_t::estimate_region) estimate_region_ = nullptr;
  decltype(tessera_backend_t::run_profiled) run_profiled_ = nullptr;
  decltype(tessera_backend_t::engine_bytes) engine_bytes_ = nullptr;
  bool on_device_ = false;
  int device_id_ = 0;
};

// Directories searched for plugins, in order.
std::vector<std::string> backend_search_path();

// The backend called `name`, loading its plugin on first use (cached).
Expected<std::shared_ptr<const Backend>> find_backend(const std::string& name);

// Makes an in-process backend findable by name (embedders, tests). Fails if
// the name is taken.
Status register_backend(std::shared_ptr<const Backend> backend);

// ---- how idle engine threads wait ----------------------------------------
//
// OpenMP's workers spin after every parallel region for as long as
// OMP_WAIT_POLICY / GOMP_SPINCOUNT say, and libgomp reads them once, when the
// first plugin that needs it is opened. A bounded spin keeps the wake-ups
// between one engine's primitives cheap, but a spinning worker holds a core
// that another engine's pool needs: beside such an engine OpenMP must wait
// passively. The host knows engines only by their declared threading.

// True when engines of these threadings in one process make OpenMP wait
// passively: a possible OpenMP engine beside another engine with (possibly)
// its own pool. Unknown counts as both. Native runs on its own pool between
// regions and is priced as a hand-over instead (partition/cost.h), so callers
// leave it out.
bool engines_need_passive_wait(const std::vector<Threading>& engines);

// Declares the engines the process expects to run, by backend name, with
// their threading where known (an artifact records it); `alone`: they run one
// at a time (measuring), so a single engine's policy applies. The policy is
// applied before each plugin is opened, as long as libgomp is not loaded yet,
// from what is known by then: plugins already open tell their threading,
// the rest count as unknown. A user's own OMP_WAIT_POLICY / GOMP_SPINCOUNT
// always wins.
void expect_engines(const std::vector<std::pair<std::string, Threading>>& engines, bool alone);
// The environment the current expectation gives, as "OMP_WAIT_POLICY=PASSIVE",
// "GOMP_SPINCOUNT=10000" or "" (no OpenMP engine expected); for tests.
std::string expected_thread_policy();

// Names of every backend found on the search path, sorted, then "native".
std::vector<std::string> available_backends();

// Parses a --backends list ("dnnl,xnnpack,native"; "" = every available
// backend). Native is appended when missing, and must be last when given.
// `engines_run_alone`: the caller runs one engine at a time (measuring with
// --tune), so the process takes the OpenMP policy of a single engine.
Expected<std::vector<std::shared_ptr<const Backend>>> resolve_backends(const std::string& list,
                                                                       bool engines_run_alone = false);

// The native backend runs regions with the runtime (src/runtime/native_backend.cc),
// which sits above this host: it installs its table here, and the host never
// calls into the runtime. find_backend("native") fails until it is installed
// (the runtime does so when it is linked, and on every session it creates).
void set_native_backend_table(const tessera_backend_t* (*table)());

// tessera DType <-> descriptor helpers shared by the host and the native backend.
tessera_tensor_t tensor_descriptor(const Tensor& t);

}  // namespace tessera
