// The C API (include/tessera/tessera.h) over the runtime and the compile path
// the command line uses (api/session_setup.h). Every entry point catches
// everything: a C caller never sees an exception, and misuse becomes an
// error object naming the function and what was wrong.
#include "tessera/tessera.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "api/profile.h"
#include "api/session_setup.h"
#include "api/text.h"
#include "artifact/artifact.h"
#include "backends/backend.h"
#include "backends/native/native_backend.h"
#include "onnx/onnx_import.h"
#include "partition/partition.h"
#include "runtime/session.h"

namespace fs = std::filesystem;
using namespace tessera;

struct tessera_error {
  tessera_code_t code;
  std::string message;
};

namespace {

struct EnvState {
  std::mutex mu;
  tessera_log_fn fn = nullptr;
  void* user = nullptr;
  void log(tessera_log_level_t level, const std::string& msg) {
    std::lock_guard<std::mutex> lock(mu);
    if (fn) fn(user, level, msg.c_str());
  }
};

// Returned when there is no memory even for an error; never deleted.
tessera_error_t* oom_error() {
  static tessera_error oom{TESSERA_CODE_INTERNAL, "out of memory"};
  return &oom;
}

tessera_error_t* make_error(tessera_code_t code, std::string msg) {
  try {
    return new tessera_error{code, std::move(msg)};
  } catch (...) {
    return oom_error();
  }
}

tessera_error_t* invalid(const char* fn, const std::string& what) {
  return make_error(TESSERA_CODE_INVALID_ARGUMENT, std::string(fn) + ": " + what);
}

tessera_code_t code_of(ErrorCode c) {
  switch (c) {
    case ErrorCode::kOk:
      return TESSERA_CODE_OK;
    case ErrorCode::kInvalidModel:
      return TESSERA_CODE_INVALID_MODEL;
    case ErrorCode::kInvalidInput:
      return TESSERA_CODE_INVALID_ARGUMENT;
    case ErrorCode::kUnsupported:
      return TESSERA_CODE_UNSUPPORTED;
    case ErrorCode::kIo:
      return TESSERA_CODE_IO;
    case ErrorCode::kRuntime:
      return TESSERA_CODE_RUNTIME;
    case ErrorCode::kCancelled:
      return TESSERA_CODE_CANCELLED;
    case ErrorCode::kInternal:
      return TESSERA_CODE_INTERNAL;
  }
  return TESSERA_CODE_INTERNAL;
}

tessera_error_t* from_status(const Status& st) {
  if (st.ok()) return nullptr;
  std::string msg = st.message();
  for (char& c : msg) {
    if (c == '\n') c = ' ';
  }
  return make_error(code_of(st.code()), std::move(msg));
}

// Runs `body` (returning tessera_error_t*) with every exception turned into an error.
template <class F>
tessera_error_t* guarded(const char* fn, F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return make_error(TESSERA_CODE_RUNTIME, std::string(fn) + ": out of memory");
  } catch (const std::exception& e) {
    return make_error(TESSERA_CODE_INTERNAL, std::string(fn) + ": " + e.what());
  } catch (...) {
    return make_error(TESSERA_CODE_INTERNAL, std::string(fn) + ": unknown exception");
  }
}

// A malloc'ed copy of `s` (any bytes, NULs included) with a NUL after it, for
// tessera_string_free.
char* copy_string(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (!p) throw std::bad_alloc();
  std::memcpy(p, s.data(), s.size());
  p[s.size()] = '\0';
  return p;
}

// Element count of `dims`, or false on a negative dim, more than 64 dims or an
// overflow of 64 bits.
bool element_count(const int64_t* dims, size_t rank, int64_t* out) {
  return rank <= 64 && checked_numel(rank > 0 ? Dims(dims, dims + rank) : Dims{}, out);
}

// The checks tessera_value_create and tessera_value_wrap share: a dtype
// Tessera computes on, dims given for a nonzero rank, a valid element count
// (into *n). Null when they hold.
tessera_error_t* check_value_args(const char* fn, int32_t dtype, const int64_t* dims, size_t rank, int64_t* n) {
  if (!dtype_is_supported(dtype_from_onnx(dtype))) return invalid(fn, "unknown dtype " + std::to_string(dtype));
  if (rank > 0 && !dims) return invalid(fn, "dims is NULL for rank " + std::to_string(rank));
  if (!element_count(dims, rank, n)) {
    return invalid(fn, "dims must be >= 0, at most 64 of them, with a product that fits in 64 bits");
  }
  return nullptr;
}

// The index of the input or output called `name`, or list.size().
template <class List>
size_t index_of(const List& list, const std::string& name) {
  return static_cast<size_t>(std::find_if(list.begin(), list.end(), [&](const auto& e) { return e.name == name; }) -
                             list.begin());
}

// An input's or output's description, with storage for the C view.
struct IoEntry {
  std::string name;
  int32_t dtype = 0;
  int32_t rank = -1;
  std::vector<int64_t> dims;
  std::vector<std::string> dim_name_storage;
  std::vector<const char*> dim_names;
};

IoEntry io_entry(const IOInfo& in) {
  IoEntry e;
  e.name = in.name;
  e.dtype = static_cast<int32_t>(in.dtype);
  if (in.shape.rank_known) {
    e.rank = static_cast<int32_t>(in.shape.dims.size());
    for (const Dim& d : in.shape.dims) {
      e.dims.push_back(d.known() ? d.value : -1);
      e.dim_name_storage.push_back(d.known() ? std::string() : d.symbol);
    }
  }
  return e;
}

// Points dim_names at the strings, once the entry is in its final place
// (moving a short std::string moves its characters).
void link_dim_names(IoEntry& e) {
  e.dim_names.clear();
  for (const std::string& s : e.dim_name_storage) e.dim_names.push_back(s.c_str());
}

}  // namespace

struct tessera_env {
  std::shared_ptr<EnvState> state = std::make_shared<EnvState>();
};

struct tessera_session_options {
  api::CompileOptions compile;
  bool plan_in_background = true;
  double bucket_payback_ms = -1;
  tessera_progress_fn progress = nullptr;
  void* progress_user = nullptr;
};

struct tessera_session {
  std::shared_ptr<EnvState> env;
  std::unique_ptr<InferenceSession> session;
  PartitionReport report;  // of the compile the session was made with (empty: none)
  api::RegionNodes region_nodes;
  std::vector<IoEntry> inputs, outputs;
  std::string label;
};

struct tessera_value {
  Tensor tensor;
};

struct tessera_profile {
  mutable std::mutex mu;
  const InferenceSession* session = nullptr;  // the session whose runs it holds
  std::vector<RunProfile> runs;
  std::vector<std::vector<api::ProfileItem>> items;
};

struct tessera_run_options {
  std::string tag;
  std::string trace_path;
  tessera_profile* profile = nullptr;
  std::atomic<bool> cancel{false};
};

struct tessera_report {
  PartitionReport report;
  size_t engines = 0;
};

namespace {

// A session-option setter: exceptions caught, a NULL handle refused, the
// function's name handed to the body for its messages.
template <class F>
tessera_error_t* set_option(const char* fn, tessera_session_options_t* opts, F&& body) {
  return guarded(fn, [&]() -> tessera_error_t* {
    if (!opts) return invalid(fn, "options is NULL");
    return body(fn);
  });
}

// The library's compile options from session options (NULL: defaults), with
// warnings routed to the environment's log.
api::CompileOptions compile_options(const tessera_session_options_t* opts, const std::shared_ptr<EnvState>& env) {
  api::CompileOptions o;
  if (opts) {
    o = opts->compile;
    if (opts->progress) {
      o.progress = [fn = opts->progress, user = opts->progress_user](int done, int total, const std::string& what) {
        fn(user, done, total, what.c_str());
      };
    }
  } else {
    o.measure = api::default_measure();
  }
  o.warn = [env](const std::string& w) { env->log(TESSERA_LOG_WARNING, w); };
  return o;
}

tessera_error_t* finish_session(tessera_env_t* env, std::unique_ptr<InferenceSession> s, const PartitionReport& report,
                                const std::string& label, tessera_session_t** out) {
  auto h = std::make_unique<tessera_session>();
  h->env = env->state;
  h->region_nodes = api::region_nodes_of(report);
  h->report = report;
  for (const IOInfo& in : s->inputs()) h->inputs.push_back(io_entry(in));
  for (const IOInfo& o : s->outputs()) h->outputs.push_back(io_entry(o));
  for (IoEntry& e : h->inputs) link_dim_names(e);
  for (IoEntry& e : h->outputs) link_dim_names(e);
  h->session = std::move(s);
  h->label = label;
  *out = h.release();
  return nullptr;
}

tessera_error_t* create_session(const char* fn, tessera_env_t* env, api::ModelSource src,
                                const tessera_session_options_t* opts, tessera_session_t** out) {
  if (!env) return invalid(fn, "env is NULL");
  if (!out) return invalid(fn, "out is NULL");
  const api::CompileOptions o = compile_options(opts, env->state);
  SessionOptions so;
  so.num_threads = o.threads;
  so.max_memory = o.max_memory;
  so.plan_in_background = opts ? opts->plan_in_background : true;
  so.bucket_payback_ms = opts ? opts->bucket_payback_ms : -1;
  PartitionReport report;
  const std::string label = src.name();
  auto s = api::open_session(src, o, so, &report);
  if (!s.ok()) return from_status(s.status());
  return finish_session(env, std::move(*s), report, label, out);
}

tessera_error_t* io_info(const char* fn, const tessera_session_t* s, size_t index, bool input, tessera_io_info_t* out) {
  if (!s) return invalid(fn, "session is NULL");
  if (!out) return invalid(fn, "out is NULL");
  const auto& list = input ? s->inputs : s->outputs;
  if (index >= list.size()) {
    return invalid(fn, "index " + std::to_string(index) + " is out of range (the model has " +
                           std::to_string(list.size()) + (input ? " inputs)" : " outputs)"));
  }
  const IoEntry& e = list[index];
  out->name = e.name.c_str();
  out->dtype = e.dtype;
  out->rank = e.rank;
  out->dims = e.dims.empty() ? nullptr : e.dims.data();
  out->dim_names = e.dim_names.empty() ? nullptr : e.dim_names.data();
  return nullptr;
}

tessera_error_t* render_report(const char* fn, const PartitionReport& r, size_t engines, tessera_format_t format,
                               char** out) {
  if (!out) return invalid(fn, "out is NULL");
  switch (format) {
    case TESSERA_FORMAT_JSON: *out = copy_string(report_json(r)); return nullptr;
    case TESSERA_FORMAT_TEXT: *out = copy_string(report_text(r)); return nullptr;
    case TESSERA_FORMAT_DOT: *out = copy_string(report_dot(r)); return nullptr;
    case TESSERA_FORMAT_REGIONS_LINE: *out = copy_string(api::regions_line(r, engines)); return nullptr;
    case TESSERA_FORMAT_PLACEMENT_LINE: *out = copy_string(api::placement_line(r)); return nullptr;
    case TESSERA_FORMAT_ACCURACY_LINE: *out = copy_string(api::accuracy_report_line(r)); return nullptr;
  }
  return invalid(fn, "unknown format " + std::to_string(static_cast<int>(format)));
}

Expected<Program> compile_source(const api::ModelSource& src, const api::CompileOptions& o, PartitionReport* report,
                                 const std::string& what) {
  Graph g;
  TSR_ASSIGN_OR_RETURN(g, api::load_graph(src, o.shapes, what));
  return api::compile_model(src, std::move(g), o, report);
}

}  // namespace

extern "C" {

// ---- errors and versions --------------------------------------------------------

tessera_code_t tessera_error_code(const tessera_error_t* error) { return error ? error->code : TESSERA_CODE_OK; }

const char* tessera_error_message(const tessera_error_t* error) { return error ? error->message.c_str() : ""; }

void tessera_error_release(tessera_error_t* error) {
  if (error != oom_error()) delete error;
}

void tessera_string_free(char* s) { std::free(s); }

uint32_t tessera_api_version(void) { return (TESSERA_API_VERSION_MAJOR << 16) | TESSERA_API_VERSION_MINOR; }

const char* tessera_version_string(void) { return TESSERA_VERSION; }

// ---- environment ------------------------------------------------------------------

tessera_error_t* tessera_env_create(tessera_env_t** out) {
  return guarded("tessera_env_create", [&]() -> tessera_error_t* {
    if (!out) return invalid("tessera_env_create", "out is NULL");
    *out = new tessera_env();
    return nullptr;
  });
}

tessera_error_t* tessera_env_set_log(tessera_env_t* env, tessera_log_fn fn, void* user) {
  return guarded("tessera_env_set_log", [&]() -> tessera_error_t* {
    if (!env) return invalid("tessera_env_set_log", "env is NULL");
    std::lock_guard<std::mutex> lock(env->state->mu);
    env->state->fn = fn;
    env->state->user = user;
    return nullptr;
  });
}

void tessera_env_release(tessera_env_t* env) { delete env; }

tessera_error_t* tessera_available_backends(tessera_env_t* env, char** out) {
  return guarded("tessera_available_backends", [&]() -> tessera_error_t* {
    if (!env) return invalid("tessera_available_backends", "env is NULL");
    if (!out) return invalid("tessera_available_backends", "out is NULL");
    install_native_backend();
    auto backends = resolve_backends("");
    if (!backends.ok()) return from_status(backends.status());
    std::string list;
    for (const auto& b : *backends) list += (list.empty() ? "" : ",") + b->name();
    *out = copy_string(list);
    return nullptr;
  });
}

// ---- session options ---------------------------------------------------------------

tessera_error_t* tessera_session_options_create(tessera_session_options_t** out) {
  return guarded("tessera_session_options_create", [&]() -> tessera_error_t* {
    if (!out) return invalid("tessera_session_options_create", "out is NULL");
    auto* o = new tessera_session_options();
    o->compile.measure = api::default_measure();
    *out = o;
    return nullptr;
  });
}

void tessera_session_options_release(tessera_session_options_t* opts) { delete opts; }

tessera_error_t* tessera_session_options_set_threads(tessera_session_options_t* opts, int threads) {
  return set_option(__func__, opts, [&](const char* kFn) -> tessera_error_t* {
    if (threads < 0) return invalid(kFn, "threads must be >= 0, got " + std::to_string(threads));
    opts->compile.threads = threads;
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_set_backends(tessera_session_options_t* opts, const char* backends) {
  return set_option(__func__, opts, [&](const char*) -> tessera_error_t* {
    opts->compile.backends = backends ? backends : "";
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_set_shape(tessera_session_options_t* opts, const char* name,
                                                   const int64_t* dims, size_t rank) {
  return set_option(__func__, opts, [&](const char* kFn) -> tessera_error_t* {
    if (!name || !*name) return invalid(kFn, "name is NULL or empty");
    if (rank > 0 && !dims) return invalid(kFn, "dims is NULL for rank " + std::to_string(rank));
    int64_t n = 0;
    if (!element_count(dims, rank, &n)) {
      return invalid(kFn, "input '" + std::string(name) + "': dims must be >= 0 and their product fit in 64 bits");
    }
    // As --shape NAME=D0,D1,..; a later pin of the same input replaces an earlier one.
    const std::string prefix = std::string(name) + "=";
    const std::string spec = api::shape_spec(name, Dims(dims, dims + rank));
    auto& shapes = opts->compile.shapes;
    shapes.erase(
        std::remove_if(shapes.begin(), shapes.end(), [&](const std::string& s) { return s.rfind(prefix, 0) == 0; }),
        shapes.end());
    shapes.push_back(spec);
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_set_max_memory(tessera_session_options_t* opts, uint64_t bytes) {
  return set_option(__func__, opts, [&](const char*) -> tessera_error_t* {
    opts->compile.max_memory = static_cast<size_t>(std::min<uint64_t>(bytes, SIZE_MAX));
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_set_plan_in_background(tessera_session_options_t* opts, int on) {
  return set_option(__func__, opts, [&](const char*) -> tessera_error_t* {
    opts->plan_in_background = on != 0;
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_set_background_buckets(tessera_session_options_t* opts, int on) {
  return set_option(__func__, opts, [&](const char*) -> tessera_error_t* {
    opts->compile.background_buckets = on != 0;
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_set_bucket_step(tessera_session_options_t* opts, int64_t step) {
  return set_option(__func__, opts, [&](const char* fn) -> tessera_error_t* {
    if (step < 0) return invalid(fn, "step must be 0 (no masked buckets) or more, got " + std::to_string(step));
    opts->compile.bucket_step = step;
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_set_bucket_payback_ms(tessera_session_options_t* opts, double ms) {
  return set_option(__func__, opts, [&](const char*) -> tessera_error_t* {
    opts->bucket_payback_ms = ms;
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_set_measure_buckets(tessera_session_options_t* opts, int on) {
  return set_option(__func__, opts, [&](const char*) -> tessera_error_t* {
    opts->compile.measure_buckets = on != 0;
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_add_shape(tessera_session_options_t* opts, const char* spec) {
  return set_option(__func__, opts, [&](const char* kFn) -> tessera_error_t* {
    if (!spec) return invalid(kFn, "spec is NULL");
    opts->compile.shapes.push_back(spec);
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_add_place(tessera_session_options_t* opts, const char* rule) {
  return set_option(__func__, opts, [&](const char* kFn) -> tessera_error_t* {
    if (!rule) return invalid(kFn, "rule is NULL");
    auto r = parse_place_rule(rule);
    if (!r.ok()) return from_status(r.status());
    opts->compile.places.push_back(rule);
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_set_placement(tessera_session_options_t* opts, const char* placement) {
  return set_option(__func__, opts, [&](const char* kFn) -> tessera_error_t* {
    const std::string p = placement ? placement : "";
    if (p == "cost")
      opts->compile.policy = PlacementPolicy::kCost;
    else if (p == "priority")
      opts->compile.policy = PlacementPolicy::kPriority;
    else
      return invalid(kFn, "placement must be \"cost\" or \"priority\", got \"" + p + "\"");
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_set_tune(tessera_session_options_t* opts, tessera_tune_t tune) {
  return set_option(__func__, opts, [&](const char* kFn) -> tessera_error_t* {
    switch (tune) {
      case TESSERA_TUNE_DEFAULT:
        opts->compile.measure = api::default_measure();
        break;
      case TESSERA_TUNE_OFF:
        opts->compile.measure = MeasureMode::kOff;
        break;
      case TESSERA_TUNE_FULL:
        opts->compile.measure = MeasureMode::kFull;
        break;
      default:
        return invalid(kFn, "unknown tune mode " + std::to_string(static_cast<int>(tune)));
    }
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_set_tune_budget(tessera_session_options_t* opts, double seconds) {
  return set_option(__func__, opts, [&](const char* kFn) -> tessera_error_t* {
    if (!(seconds >= 0) || seconds > 1e6) return invalid(kFn, "seconds must be a number in [0, 1e6]");
    opts->compile.tune_budget_s = seconds;
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_set_tune_cache(tessera_session_options_t* opts, const char* path) {
  return set_option(__func__, opts, [&](const char*) -> tessera_error_t* {
    if (path)
      opts->compile.tune_cache = std::string(path);
    else
      opts->compile.tune_cache.reset();
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_set_min_region_nodes(tessera_session_options_t* opts, int n) {
  return set_option(__func__, opts, [&](const char* kFn) -> tessera_error_t* {
    if (n < 0) return invalid(kFn, "n must be >= 0, got " + std::to_string(n));
    opts->compile.min_region_nodes = n;
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_set_backend_options(tessera_session_options_t* opts, const char* options) {
  return set_option(__func__, opts, [&](const char*) -> tessera_error_t* {
    opts->compile.backend_options = options ? options : "";
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_set_precision(tessera_session_options_t* opts, const char* precision) {
  return set_option(__func__, opts, [&](const char* fn) -> tessera_error_t* {
    auto p = api::parse_precision(precision ? precision : "");
    if (!p.ok()) return invalid(fn, p.status().message());
    if (std::string why = api::precision_unavailable(*p); !why.empty()) {
      return from_status(Unsupported(std::string(fn) + ": " + why));
    }
    opts->compile.precision = *p;
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_set_accuracy_budget(tessera_session_options_t* opts, const char* budget) {
  return set_option(__func__, opts, [&](const char* fn) -> tessera_error_t* {
    if (!budget || !*budget) {
      opts->compile.accuracy_budget = {};
      return nullptr;
    }
    auto b = api::parse_accuracy_budget(budget);
    if (!b.ok()) return invalid(fn, b.status().message());
    opts->compile.accuracy_budget = *b;
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_set_accuracy_inputs(tessera_session_options_t* opts, const char* dir) {
  return set_option(__func__, opts, [&](const char*) -> tessera_error_t* {
    opts->compile.accuracy_inputs = dir ? dir : "";
    return nullptr;
  });
}

tessera_error_t* tessera_session_options_set_shapes_from_inputs(tessera_session_options_t* opts, const char* dir) {
  return set_option(__func__, opts, [&](const char*) -> tessera_error_t* {
    opts->compile.shapes_from_inputs = dir ? dir : "";
    return nullptr;
  });
}

// ---- sessions ------------------------------------------------------------------------

tessera_error_t* tessera_session_create(tessera_env_t* env, const char* path, const tessera_session_options_t* opts,
                                        tessera_session_t** out) {
  return guarded("tessera_session_create", [&]() -> tessera_error_t* {
    if (!path) return invalid("tessera_session_create", "path is NULL");
    return create_session("tessera_session_create", env, api::ModelSource{path, {}}, opts, out);
  });
}

tessera_error_t* tessera_session_create_from_buffer(tessera_env_t* env, const void* data, size_t size,
                                                    const tessera_session_options_t* opts, tessera_session_t** out) {
  return guarded("tessera_session_create_from_buffer", [&]() -> tessera_error_t* {
    if (!data || size == 0) return invalid("tessera_session_create_from_buffer", "the buffer is NULL or empty");
    api::ModelSource src;
    src.bytes.assign(static_cast<const char*>(data), size);
    return create_session("tessera_session_create_from_buffer", env, std::move(src), opts, out);
  });
}

void tessera_session_release(tessera_session_t* session) { delete session; }

tessera_error_t* tessera_session_input_count(const tessera_session_t* session, size_t* out) {
  return guarded("tessera_session_input_count", [&]() -> tessera_error_t* {
    if (!session) return invalid("tessera_session_input_count", "session is NULL");
    if (!out) return invalid("tessera_session_input_count", "out is NULL");
    *out = session->inputs.size();
    return nullptr;
  });
}

tessera_error_t* tessera_session_output_count(const tessera_session_t* session, size_t* out) {
  return guarded("tessera_session_output_count", [&]() -> tessera_error_t* {
    if (!session) return invalid("tessera_session_output_count", "session is NULL");
    if (!out) return invalid("tessera_session_output_count", "out is NULL");
    *out = session->outputs.size();
    return nullptr;
  });
}

tessera_error_t* tessera_session_input_info(const tessera_session_t* session, size_t index, tessera_io_info_t* out) {
  return guarded("tessera_session_input_info",
                 [&] { return io_info("tessera_session_input_info", session, index, true, out); });
}

tessera_error_t* tessera_session_output_info(const tessera_session_t* session, size_t index, tessera_io_info_t* out) {
  return guarded("tessera_session_output_info",
                 [&] { return io_info("tessera_session_output_info", session, index, false, out); });
}

tessera_error_t* tessera_session_engines_json(const tessera_session_t* session, char** out) {
  return guarded("tessera_session_engines_json", [&]() -> tessera_error_t* {
    if (!session) return invalid("tessera_session_engines_json", "session is NULL");
    if (!out) return invalid("tessera_session_engines_json", "out is NULL");
    std::string j = "[";
    const EngineTable& engines = session->session->engines();
    for (size_t i = 0; i < engines.size(); ++i) {
      const Engine& e = *engines[i];
      j += std::string(i ? ", " : "") + "{\"backend\": \"" + e.backend().name() + "\", \"version\": \"" +
           e.backend().version() + "\"}";
    }
    *out = copy_string(j + "]");
    return nullptr;
  });
}

tessera_error_t* tessera_session_engine_count(const tessera_session_t* session, size_t* out) {
  return guarded("tessera_session_engine_count", [&]() -> tessera_error_t* {
    if (!session) return invalid("tessera_session_engine_count", "session is NULL");
    if (!out) return invalid("tessera_session_engine_count", "out is NULL");
    *out = session->session->engines().size();
    return nullptr;
  });
}

tessera_error_t* tessera_session_engine_backend(const tessera_session_t* session, size_t index, const char** out) {
  return guarded("tessera_session_engine_backend", [&]() -> tessera_error_t* {
    static constexpr const char* kFn = "tessera_session_engine_backend";
    if (!session) return invalid(kFn, "session is NULL");
    if (!out) return invalid(kFn, "out is NULL");
    const EngineTable& engines = session->session->engines();
    if (index >= engines.size()) {
      return invalid(kFn, "index " + std::to_string(index) + " is out of range (" + std::to_string(engines.size()) +
                              " engines)");
    }
    *out = engines[index]->backend().name().c_str();
    return nullptr;
  });
}

tessera_error_t* tessera_session_threads(const tessera_session_t* session, int* out) {
  return guarded("tessera_session_threads", [&]() -> tessera_error_t* {
    if (!session) return invalid("tessera_session_threads", "session is NULL");
    if (!out) return invalid("tessera_session_threads", "out is NULL");
    *out = session->session->num_threads();
    return nullptr;
  });
}

tessera_error_t* tessera_session_threads_asked(const tessera_session_t* session, int* out) {
  return guarded("tessera_session_threads_asked", [&]() -> tessera_error_t* {
    if (!session) return invalid("tessera_session_threads_asked", "session is NULL");
    if (!out) return invalid("tessera_session_threads_asked", "out is NULL");
    *out = session->session->threads_asked();
    return nullptr;
  });
}

tessera_error_t* tessera_session_random_inputs(const tessera_session_t* session, uint64_t seed,
                                               tessera_value_t** out, size_t n) {
  return guarded("tessera_session_random_inputs", [&]() -> tessera_error_t* {
    static constexpr const char* kFn = "tessera_session_random_inputs";
    if (!session) return invalid(kFn, "session is NULL");
    if (!out) return invalid(kFn, "out is NULL");
    if (n != session->inputs.size()) {
      return invalid(kFn, "n is " + std::to_string(n) + " but the model has " + std::to_string(session->inputs.size()) +
                              " inputs");
    }
    auto inputs = api::random_inputs(*session->session, static_cast<uint32_t>(seed ^ (seed >> 32)));
    if (!inputs.ok()) return from_status(inputs.status());
    std::vector<std::unique_ptr<tessera_value>> made(n);
    for (size_t i = 0; i < n; ++i) {
      made[i] = std::make_unique<tessera_value>();
      made[i]->tensor = std::move((*inputs)[i]);
    }
    for (size_t i = 0; i < n; ++i) out[i] = made[i].release();
    return nullptr;
  });
}

tessera_error_t* tessera_session_arena_bytes(const tessera_session_t* session, const tessera_value_t* const* inputs,
                                             size_t n, size_t* out) {
  return guarded("tessera_session_arena_bytes", [&]() -> tessera_error_t* {
    static constexpr const char* kFn = "tessera_session_arena_bytes";
    if (!session) return invalid(kFn, "session is NULL");
    if (!out) return invalid(kFn, "out is NULL");
    if (n != session->inputs.size() || (n > 0 && !inputs)) {
      return invalid(kFn, "give one value per input (" + std::to_string(session->inputs.size()) + ")");
    }
    std::vector<Dims> dims;
    for (size_t i = 0; i < n; ++i) {
      if (!inputs[i]) return invalid(kFn, "input " + std::to_string(i) + " is NULL");
      dims.push_back(inputs[i]->tensor.dims());
    }
    auto stats = session->session->stats(dims);
    if (!stats.ok()) return from_status(stats.status());
    *out = stats->arena_bytes;
    return nullptr;
  });
}

tessera_error_t* tessera_session_plan_counts(const tessera_session_t* session, uint64_t* built, uint64_t* waited,
                                             uint64_t* generic) {
  return guarded("tessera_session_plan_counts", [&]() -> tessera_error_t* {
    if (!session) return invalid("tessera_session_plan_counts", "session is NULL");
    if (built) *built = session->session->plans_built();
    if (waited) *waited = session->session->runs_waited();
    if (generic) *generic = session->session->runs_generic();
    return nullptr;
  });
}

tessera_error_t* tessera_session_bucket_runs(const tessera_session_t* session, uint64_t* runs) {
  return guarded("tessera_session_bucket_runs", [&]() -> tessera_error_t* {
    if (!session) return invalid("tessera_session_bucket_runs", "session is NULL");
    if (!runs) return invalid("tessera_session_bucket_runs", "runs is NULL");
    *runs = session->session->runs_bucket();
    return nullptr;
  });
}

tessera_error_t* tessera_session_background_buckets(const tessera_session_t* session, uint64_t* compiled,
                                                    uint64_t* from_cache, uint64_t* failed) {
  return guarded("tessera_session_background_buckets", [&]() -> tessera_error_t* {
    if (!session) return invalid("tessera_session_background_buckets", "session is NULL");
    if (compiled) *compiled = session->session->buckets_compiled();
    if (from_cache) *from_cache = session->session->buckets_from_cache();
    if (failed) *failed = session->session->bucket_compile_failures();
    return nullptr;
  });
}

tessera_error_t* tessera_session_wait_background(const tessera_session_t* session) {
  return guarded("tessera_session_wait_background", [&]() -> tessera_error_t* {
    if (!session) return invalid("tessera_session_wait_background", "session is NULL");
    session->session->wait_for_background_plans();
    return nullptr;
  });
}

tessera_error_t* tessera_session_plan_cache_bytes(const tessera_session_t* session, uint64_t* arenas,
                                                  uint64_t* engines) {
  return guarded("tessera_session_plan_cache_bytes", [&]() -> tessera_error_t* {
    if (!session) return invalid("tessera_session_plan_cache_bytes", "session is NULL");
    const InferenceSession::PlanCacheBytes b = session->session->plan_cache_bytes();
    if (arenas) *arenas = b.arenas;
    if (engines) *engines = b.engines;
    return nullptr;
  });
}

// ---- values ----------------------------------------------------------------------------

tessera_error_t* tessera_value_create(int32_t dtype, const int64_t* dims, size_t rank, tessera_value_t** out) {
  return guarded("tessera_value_create", [&]() -> tessera_error_t* {
    static constexpr const char* kFn = "tessera_value_create";
    if (!out) return invalid(kFn, "out is NULL");
    int64_t n = 0;
    if (tessera_error_t* e = check_value_args(kFn, dtype, dims, rank, &n)) return e;
    if (n > (int64_t{1} << 40) / static_cast<int64_t>(dtype_size(static_cast<DType>(dtype)))) {
      return invalid(kFn, "dims must describe at most 1 TiB");
    }
    auto v = std::make_unique<tessera_value>();
    v->tensor = Tensor(static_cast<DType>(dtype), Dims(dims, dims + rank));
    if (v->tensor.nbytes() > 0) std::memset(v->tensor.raw(), 0, v->tensor.nbytes());
    *out = v.release();
    return nullptr;
  });
}

tessera_error_t* tessera_value_wrap(int32_t dtype, const int64_t* dims, size_t rank, void* data, size_t size_bytes,
                                    tessera_value_t** out) {
  return guarded("tessera_value_wrap", [&]() -> tessera_error_t* {
    static constexpr const char* kFn = "tessera_value_wrap";
    if (!out) return invalid(kFn, "out is NULL");
    int64_t n = 0;
    if (tessera_error_t* e = check_value_args(kFn, dtype, dims, rank, &n)) return e;
    const size_t elem = dtype_size(static_cast<DType>(dtype));
    if (static_cast<uint64_t>(n) > SIZE_MAX / elem || static_cast<size_t>(n) * elem != size_bytes) {
      return invalid(kFn, "size_bytes is " + std::to_string(size_bytes) + " but the dims describe " +
                              std::to_string(n) + " elements of " + std::to_string(elem) + " bytes");
    }
    if (size_bytes > 0 && !data) return invalid(kFn, "data is NULL");
    auto v = std::make_unique<tessera_value>();
    v->tensor = Tensor::View(static_cast<DType>(dtype), Dims(dims, dims + rank), data);
    *out = v.release();
    return nullptr;
  });
}

void tessera_value_release(tessera_value_t* value) { delete value; }

int32_t tessera_value_dtype(const tessera_value_t* value) {
  return value ? static_cast<int32_t>(value->tensor.dtype()) : 0;
}

size_t tessera_value_rank(const tessera_value_t* value) { return value ? value->tensor.dims().size() : 0; }

const int64_t* tessera_value_dims(const tessera_value_t* value) {
  return value && !value->tensor.dims().empty() ? value->tensor.dims().data() : nullptr;
}

void* tessera_value_data(tessera_value_t* value) { return value ? value->tensor.raw() : nullptr; }

size_t tessera_value_size_bytes(const tessera_value_t* value) { return value ? value->tensor.nbytes() : 0; }

tessera_error_t* tessera_value_read_file(const char* path, tessera_value_t** out, char** name) {
  return guarded("tessera_value_read_file", [&]() -> tessera_error_t* {
    if (!path) return invalid("tessera_value_read_file", "path is NULL");
    if (!out) return invalid("tessera_value_read_file", "out is NULL");
    std::string tensor_name;
    auto t = read_tensor_file(path, &tensor_name);
    if (!t.ok()) return from_status(t.status());
    auto v = std::make_unique<tessera_value>();
    v->tensor = std::move(*t);
    if (name) *name = copy_string(tensor_name);
    *out = v.release();
    return nullptr;
  });
}

tessera_error_t* tessera_value_write_file(const tessera_value_t* value, const char* name, const char* path) {
  return guarded("tessera_value_write_file", [&]() -> tessera_error_t* {
    if (!value) return invalid("tessera_value_write_file", "value is NULL");
    if (!path) return invalid("tessera_value_write_file", "path is NULL");
    return from_status(write_tensor_file(path, value->tensor, name ? name : ""));
  });
}

tessera_error_t* tessera_value_compare(const tessera_value_t* expected, const tessera_value_t* actual, double rtol,
                                       double atol, char** diff) {
  return guarded("tessera_value_compare", [&]() -> tessera_error_t* {
    static constexpr const char* kFn = "tessera_value_compare";
    if (!expected || !actual) return invalid(kFn, "expected or actual is NULL");
    if (!diff) return invalid(kFn, "diff is NULL");
    if (!(rtol >= 0) || !(atol >= 0)) return invalid(kFn, "rtol and atol must be >= 0");
    *diff = copy_string(api::compare_values(expected->tensor, actual->tensor, rtol, atol));
    return nullptr;
  });
}

tessera_error_t* tessera_value_describe(const tessera_value_t* value, size_t max_elements, char** out) {
  return guarded("tessera_value_describe", [&]() -> tessera_error_t* {
    if (!value) return invalid("tessera_value_describe", "value is NULL");
    if (!out) return invalid("tessera_value_describe", "out is NULL");
    const auto n = static_cast<int64_t>(std::min<size_t>(max_elements, INT64_MAX));
    *out = copy_string(api::describe_value(value->tensor, n));
    return nullptr;
  });
}

// ---- running ------------------------------------------------------------------------------

tessera_error_t* tessera_run_options_create(tessera_run_options_t** out) {
  return guarded("tessera_run_options_create", [&]() -> tessera_error_t* {
    if (!out) return invalid("tessera_run_options_create", "out is NULL");
    *out = new tessera_run_options();
    return nullptr;
  });
}

void tessera_run_options_release(tessera_run_options_t* ro) { delete ro; }

tessera_error_t* tessera_run_options_set_tag(tessera_run_options_t* ro, const char* tag) {
  return guarded("tessera_run_options_set_tag", [&]() -> tessera_error_t* {
    if (!ro) return invalid("tessera_run_options_set_tag", "run options is NULL");
    ro->tag = tag ? tag : "";
    return nullptr;
  });
}

tessera_error_t* tessera_run_options_cancel(tessera_run_options_t* ro) {
  if (!ro) return invalid("tessera_run_options_cancel", "run options is NULL");
  ro->cancel.store(true, std::memory_order_relaxed);
  return nullptr;
}

tessera_error_t* tessera_run_options_reset(tessera_run_options_t* ro) {
  if (!ro) return invalid("tessera_run_options_reset", "run options is NULL");
  ro->cancel.store(false, std::memory_order_relaxed);
  return nullptr;
}

tessera_error_t* tessera_run_options_set_trace_path(tessera_run_options_t* ro, const char* path) {
  return guarded("tessera_run_options_set_trace_path", [&]() -> tessera_error_t* {
    if (!ro) return invalid("tessera_run_options_set_trace_path", "run options is NULL");
    if (path) {
      Status st = api::check_trace_path(path);
      if (!st.ok()) return from_status(st);
    }
    ro->trace_path = path ? path : "";
    return nullptr;
  });
}

tessera_error_t* tessera_profile_create(tessera_profile_t** out) {
  return guarded("tessera_profile_create", [&]() -> tessera_error_t* {
    if (!out) return invalid("tessera_profile_create", "out is NULL");
    *out = new tessera_profile();
    return nullptr;
  });
}

void tessera_profile_release(tessera_profile_t* profile) { delete profile; }

tessera_error_t* tessera_run_options_set_profile(tessera_run_options_t* ro, tessera_profile_t* profile) {
  if (!ro) return invalid("tessera_run_options_set_profile", "run options is NULL");
  ro->profile = profile;
  return nullptr;
}

tessera_error_t* tessera_profile_runs(const tessera_profile_t* profile, size_t* out) {
  return guarded("tessera_profile_runs", [&]() -> tessera_error_t* {
    if (!profile) return invalid("tessera_profile_runs", "profile is NULL");
    if (!out) return invalid("tessera_profile_runs", "out is NULL");
    std::lock_guard<std::mutex> lock(profile->mu);
    *out = profile->runs.size();
    return nullptr;
  });
}

tessera_error_t* tessera_profile_summary(const tessera_profile_t* profile, tessera_format_t format, char** out) {
  return guarded("tessera_profile_summary", [&]() -> tessera_error_t* {
    static constexpr const char* kFn = "tessera_profile_summary";
    if (!profile) return invalid(kFn, "profile is NULL");
    if (!out) return invalid(kFn, "out is NULL");
    if (format != TESSERA_FORMAT_JSON && format != TESSERA_FORMAT_TEXT) return invalid(kFn, "format must be JSON or TEXT");
    std::lock_guard<std::mutex> lock(profile->mu);
    if (profile->runs.empty()) return invalid(kFn, "the profile holds no run");
    const api::ProfileSummary summary = api::summarize(profile->items);
    *out = copy_string(format == TESSERA_FORMAT_JSON ? api::profile_json(summary) : api::profile_text(summary));
    return nullptr;
  });
}

tessera_error_t* tessera_profile_write_trace(const tessera_profile_t* profile, const char* title, const char* path,
                                             size_t max_runs) {
  return guarded("tessera_profile_write_trace", [&]() -> tessera_error_t* {
    static constexpr const char* kFn = "tessera_profile_write_trace";
    if (!profile) return invalid(kFn, "profile is NULL");
    if (!path) return invalid(kFn, "path is NULL");
    std::lock_guard<std::mutex> lock(profile->mu);
    if (profile->runs.empty()) return invalid(kFn, "the profile holds no run");
    const size_t n = std::min(max_runs, profile->runs.size());
    const std::vector<RunProfile> runs(profile->runs.begin(), profile->runs.begin() + static_cast<std::ptrdiff_t>(n));
    const std::vector<std::vector<api::ProfileItem>> items(profile->items.begin(),
                                                           profile->items.begin() + static_cast<std::ptrdiff_t>(n));
    return from_status(api::write_trace(path, title ? title : "tessera", runs, items, *profile->session));
  });
}

tessera_error_t* tessera_session_run(tessera_session_t* session, const tessera_run_options_t* run_options,
                                     const char* const* input_names, const tessera_value_t* const* inputs,
                                     size_t n_inputs, const char* const* output_names, tessera_value_t** outputs,
                                     size_t n_outputs) {
  return guarded("tessera_session_run", [&]() -> tessera_error_t* {
    static constexpr const char* kFn = "tessera_session_run";
    if (!session) return invalid(kFn, "session is NULL");
    if (n_inputs > 0 && (!input_names || !inputs)) return invalid(kFn, "input_names or inputs is NULL");
    if (n_outputs > 0 && !outputs) return invalid(kFn, "outputs is NULL");
    const auto& ins = session->inputs;
    const auto& outs = session->outputs;
    // Inputs by name, in graph order.
    std::vector<Tensor> ordered(ins.size());
    std::vector<bool> given(ins.size(), false);
    for (size_t i = 0; i < n_inputs; ++i) {
      if (!input_names[i]) return invalid(kFn, "input name " + std::to_string(i) + " is NULL");
      const std::string name = input_names[i];
      const size_t k = index_of(ins, name);
      if (k == ins.size()) return invalid(kFn, "the model has no input named '" + name + "'");
      if (given[k]) return invalid(kFn, "input '" + name + "' is given twice");
      if (!inputs[i]) return invalid(kFn, "the value for input '" + name + "' is NULL");
      ordered[k] = inputs[i]->tensor;
      given[k] = true;
    }
    for (size_t k = 0; k < ins.size(); ++k) {
      if (!given[k]) return invalid(kFn, "input '" + ins[k].name + "' is missing");
    }
    // Requested outputs: their graph indices, and caller buffers bound to them.
    if (!output_names && n_outputs != outs.size()) {
      return invalid(kFn, "n_outputs is " + std::to_string(n_outputs) + " but the model has " +
                              std::to_string(outs.size()) + " outputs (output_names is NULL: all of them)");
    }
    std::vector<size_t> index(n_outputs);
    std::vector<Tensor> bound(outs.size());
    for (size_t i = 0; i < n_outputs; ++i) {
      if (output_names) {
        if (!output_names[i]) return invalid(kFn, "output name " + std::to_string(i) + " is NULL");
        const std::string name = output_names[i];
        const size_t k = index_of(outs, name);
        if (k == outs.size()) return invalid(kFn, "the model has no output named '" + name + "'");
        index[i] = k;
      } else {
        index[i] = i;
      }
      if (outputs[i] && !bound[index[i]].defined()) bound[index[i]] = outputs[i]->tensor;
    }
    tessera_profile* record = run_options ? run_options->profile : nullptr;
    if (record) {
      std::lock_guard<std::mutex> lock(record->mu);
      if (record->session && record->session != session->session.get()) {
        return invalid(kFn, "the run options' profile holds runs of another session");
      }
      record->session = session->session.get();
    }
    RunOptions ro;
    ro.bound_outputs = &bound;
    RunProfile profile;
    const bool trace = run_options && !run_options->trace_path.empty();
    if (trace || record) ro.profile = &profile;
    if (run_options) ro.cancel = &run_options->cancel;
    auto result = session->session->run(ordered, ro);
    if (!result.ok()) return from_status(result.status());
    if (trace) {
      const std::string label =
          "tessera " + session->label + (run_options->tag.empty() ? "" : " [" + run_options->tag + "]");
      Status st =
          api::write_trace(run_options->trace_path, label, {profile},
                           {api::profile_items(*session->session, profile, session->region_nodes)}, *session->session);
      if (!st.ok()) return from_status(st);
    }
    if (record) {
      auto items = api::profile_items(*session->session, profile, session->region_nodes);
      std::lock_guard<std::mutex> lock(record->mu);
      record->runs.push_back(std::move(profile));
      record->items.push_back(std::move(items));
    }
    // New values for the unbound slots, all made before any is handed out.
    std::vector<std::unique_ptr<tessera_value>> made(n_outputs);
    for (size_t i = 0; i < n_outputs; ++i) {
      if (outputs[i]) continue;
      made[i] = std::make_unique<tessera_value>();
      made[i]->tensor = (*result)[index[i]];
    }
    for (size_t i = 0; i < n_outputs; ++i) {
      if (made[i]) outputs[i] = made[i].release();
    }
    return nullptr;
  });
}

// ---- compiling and reports ----------------------------------------------------------------

tessera_error_t* tessera_compile(tessera_env_t* env, const char* model_path, const tessera_session_options_t* opts,
                                 const char* out_path) {
  return guarded("tessera_compile", [&]() -> tessera_error_t* {
    static constexpr const char* kFn = "tessera_compile";
    if (!env) return invalid(kFn, "env is NULL");
    if (!model_path || !out_path) return invalid(kFn, "model_path or out_path is NULL");
    auto program = compile_source(api::ModelSource{model_path, {}}, compile_options(opts, env->state), nullptr, kFn);
    if (!program.ok()) return from_status(program.status());
    return from_status(write_artifact(*program, out_path));
  });
}

tessera_error_t* tessera_compile_buffer(tessera_env_t* env, const void* model, size_t model_size,
                                        const tessera_session_options_t* opts, char** out, size_t* out_size) {
  return guarded("tessera_compile_buffer", [&]() -> tessera_error_t* {
    static constexpr const char* kFn = "tessera_compile_buffer";
    if (!env) return invalid(kFn, "env is NULL");
    if (!model || model_size == 0) return invalid(kFn, "the model buffer is NULL or empty");
    if (!out || !out_size) return invalid(kFn, "out or out_size is NULL");
    api::ModelSource src;
    src.bytes.assign(static_cast<const char*>(model), model_size);
    auto program = compile_source(src, compile_options(opts, env->state), nullptr, kFn);
    if (!program.ok()) return from_status(program.status());
    auto bytes = write_artifact_bytes(*program);
    if (!bytes.ok()) return from_status(bytes.status());
    *out = copy_string(*bytes);
    *out_size = bytes->size();
    return nullptr;
  });
}

tessera_error_t* tessera_partition_report(tessera_env_t* env, const char* model_path,
                                          const tessera_session_options_t* opts, char** json) {
  return guarded("tessera_partition_report", [&]() -> tessera_error_t* {
    static constexpr const char* kFn = "tessera_partition_report";
    if (!env) return invalid(kFn, "env is NULL");
    if (!model_path) return invalid(kFn, "model_path is NULL");
    if (!json) return invalid(kFn, "json is NULL");
    PartitionReport report;
    auto program = compile_source(api::ModelSource{model_path, {}}, compile_options(opts, env->state), &report, kFn);
    if (!program.ok()) return from_status(program.status());
    *json = copy_string(report_json(report));
    return nullptr;
  });
}

tessera_error_t* tessera_compile_with_report(tessera_env_t* env, const char* model_path,
                                             const tessera_session_options_t* opts, const char* out_path,
                                             tessera_report_t** report) {
  return guarded("tessera_compile_with_report", [&]() -> tessera_error_t* {
    static constexpr const char* kFn = "tessera_compile_with_report";
    if (!env) return invalid(kFn, "env is NULL");
    if (!model_path) return invalid(kFn, "model_path is NULL");
    if (!out_path && !report) return invalid(kFn, "out_path and report are both NULL");
    auto r = std::make_unique<tessera_report>();
    auto program =
        compile_source(api::ModelSource{model_path, {}}, compile_options(opts, env->state), &r->report, kFn);
    if (!program.ok()) return from_status(program.status());
    if (out_path) {
      if (tessera_error_t* e = from_status(write_artifact(*program, out_path))) return e;
    }
    r->engines = program->engines.size();
    if (report) *report = r.release();
    return nullptr;
  });
}

void tessera_report_release(tessera_report_t* report) { delete report; }

tessera_error_t* tessera_report_render(const tessera_report_t* report, tessera_format_t format, char** out) {
  return guarded("tessera_report_render", [&]() -> tessera_error_t* {
    static constexpr const char* kFn = "tessera_report_render";
    if (!report) return invalid(kFn, "report is NULL");
    return render_report(kFn, report->report, report->engines, format, out);
  });
}

tessera_error_t* tessera_session_report(const tessera_session_t* session, tessera_format_t format, char** out) {
  return guarded("tessera_session_report", [&]() -> tessera_error_t* {
    static constexpr const char* kFn = "tessera_session_report";
    if (!session) return invalid(kFn, "session is NULL");
    return render_report(kFn, session->report, session->session->engines().size(), format, out);
  });
}

tessera_error_t* tessera_inspect(const char* path, tessera_format_t format, char** out) {
  return guarded("tessera_inspect", [&]() -> tessera_error_t* {
    if (!path) return invalid("tessera_inspect", "path is NULL");
    if (!out) return invalid("tessera_inspect", "out is NULL");
    if (format != TESSERA_FORMAT_JSON && format != TESSERA_FORMAT_TEXT) {
      return invalid("tessera_inspect", "format must be JSON or TEXT");
    }
    std::error_code ec;
    if (!fs::exists(path, ec)) return from_status(IoError("artifact '" + std::string(path) + "' does not exist"));
    auto text = describe_artifact(path, format == TESSERA_FORMAT_JSON);
    if (!text.ok()) return from_status(text.status());
    *out = copy_string(*text);
    return nullptr;
  });
}

tessera_error_t* tessera_inspect_artifact(const char* path, char** json) {
  return tessera_inspect(path, TESSERA_FORMAT_JSON, json);
}

tessera_error_t* tessera_session_options_set_progress(tessera_session_options_t* opts, tessera_progress_fn fn,
                                                      void* user) {
  return set_option(__func__, opts, [&](const char*) -> tessera_error_t* {
    opts->progress = fn;
    opts->progress_user = user;
    return nullptr;
  });
}

}  // extern "C"
