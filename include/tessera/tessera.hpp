// Tessera's C++ API: header-only RAII over the C API (tessera.h).
//
//   tessera::Env env;
//   tessera::Session session(env, "model.tsr");
//   std::vector<float> x(1 * 3 * 224 * 224);
//   auto input = tessera::Value::Wrap(x.data(), {1, 3, 224, 224});
//   std::vector<tessera::Value> out = session.Run({{"input", &input}});
//   const float* y = out[0].Data<float>();
//
// Errors are exceptions: every failing C call throws tessera::Error (a
// std::runtime_error carrying the C code and the one-line message). The C API
// reports every failure as a value, so nothing is lost; exceptions keep the
// calling code short, as in the C++ APIs this one stands beside (ONNX
// Runtime's Ort:: classes throw Ort::Exception the same way). Handles are
// move-only; a moved-from handle is empty.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tessera/tessera.h"

namespace tessera {

class Error : public std::runtime_error {
 public:
  Error(tessera_code_t code, const std::string& message) : std::runtime_error(message), code_(code) {}
  tessera_code_t code() const { return code_; }

 private:
  tessera_code_t code_;
};

namespace detail {

inline void check(tessera_error_t* e) {
  if (!e) return;
  Error err(tessera_error_code(e), tessera_error_message(e));
  tessera_error_release(e);
  throw err;
}

inline std::string take_string(char* s) {
  std::string r = s ? s : "";
  tessera_string_free(s);
  return r;
}

// A move-only owner of a C handle released by Release.
template <class T, void (*Release)(T*)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(T* p) : p_(p) {}
  Handle(Handle&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      Release(p_);
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { Release(p_); }
  T* get() const { return p_; }
  explicit operator bool() const { return p_ != nullptr; }

 protected:
  T* p_ = nullptr;
};

template <class T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr int32_t value = TESSERA_DTYPE_FLOAT32;
};
template <>
struct DTypeOf<double> {
  static constexpr int32_t value = TESSERA_DTYPE_FLOAT64;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr int32_t value = TESSERA_DTYPE_INT8;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr int32_t value = TESSERA_DTYPE_UINT8;
};
template <>
struct DTypeOf<int16_t> {
  static constexpr int32_t value = TESSERA_DTYPE_INT16;
};
template <>
struct DTypeOf<uint16_t> {
  static constexpr int32_t value = TESSERA_DTYPE_UINT16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr int32_t value = TESSERA_DTYPE_INT32;
};
template <>
struct DTypeOf<uint32_t> {
  static constexpr int32_t value = TESSERA_DTYPE_UINT32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr int32_t value = TESSERA_DTYPE_INT64;
};
template <>
struct DTypeOf<uint64_t> {
  static constexpr int32_t value = TESSERA_DTYPE_UINT64;
};
template <>
struct DTypeOf<bool> {
  static constexpr int32_t value = TESSERA_DTYPE_BOOL;
};

}  // namespace detail

inline std::string Version() { return tessera_version_string(); }

class Env : public detail::Handle<tessera_env_t, tessera_env_release> {
 public:
  Env() { detail::check(tessera_env_create(&p_)); }
  void SetLog(tessera_log_fn fn, void* user) { detail::check(tessera_env_set_log(p_, fn, user)); }
  // "dnnl,xnnpack,native"
  std::string AvailableBackends() const {
    char* s = nullptr;
    detail::check(tessera_available_backends(p_, &s));
    return detail::take_string(s);
  }
};

class SessionOptions : public detail::Handle<tessera_session_options_t, tessera_session_options_release> {
 public:
  SessionOptions() { detail::check(tessera_session_options_create(&p_)); }
  SessionOptions& Threads(int n) { return apply(tessera_session_options_set_threads(p_, n)); }
  SessionOptions& Backends(const std::string& list) {
    return apply(tessera_session_options_set_backends(p_, list.c_str()));
  }
  SessionOptions& Shape(const std::string& input, const std::vector<int64_t>& dims) {
    return apply(tessera_session_options_set_shape(p_, input.c_str(), dims.data(), dims.size()));
  }
  // Bytes one run may hold (--max-memory); 0: no limit.
  SessionOptions& MaxMemory(uint64_t bytes) { return apply(tessera_session_options_set_max_memory(p_, bytes)); }
  // New input shapes run at once on the shape-generic plan, their own plans built in the background (default on).
  SessionOptions& PlanInBackground(bool on) { return apply(tessera_session_options_set_plan_in_background(p_, on)); }
  // Shapes whose runs have repaid a compile get a bucket with engines compiled in the background, cached on disk
  // (default on).
  SessionOptions& BackgroundBuckets(bool on) {
    return apply(tessera_session_options_set_background_buckets(p_, on));
  }
  // Masked buckets every `step` along a ranged spatial dim, compiled ahead (0: none; default 32).
  SessionOptions& BucketStep(int64_t step) { return apply(tessera_session_options_set_bucket_step(p_, step)); }
  // The time a shape's runs must take before its bucket is compiled (< 0: as long as a compile; 0: at once).
  SessionOptions& BucketPaybackMs(double ms) { return apply(tessera_session_options_set_bucket_payback_ms(p_, ms)); }
  // Background buckets measure their candidates as a compile does (default off: estimates and the tune cache).
  SessionOptions& MeasureBuckets(bool on) { return apply(tessera_session_options_set_measure_buckets(p_, on)); }
  // "NAME=D0,D1,..", as --shape.
  SessionOptions& AddShape(const std::string& spec) {
    return apply(tessera_session_options_add_shape(p_, spec.c_str()));
  }
  SessionOptions& Place(const std::string& rule) { return apply(tessera_session_options_add_place(p_, rule.c_str())); }
  SessionOptions& Placement(const std::string& p) {
    return apply(tessera_session_options_set_placement(p_, p.c_str()));
  }
  SessionOptions& Tune(tessera_tune_t t) { return apply(tessera_session_options_set_tune(p_, t)); }
  SessionOptions& TuneBudget(double seconds) { return apply(tessera_session_options_set_tune_budget(p_, seconds)); }
  SessionOptions& TuneCache(const std::string& path) {
    return apply(tessera_session_options_set_tune_cache(p_, path.c_str()));
  }
  SessionOptions& MinRegionNodes(int n) { return apply(tessera_session_options_set_min_region_nodes(p_, n)); }
  SessionOptions& BackendOptions(const std::string& o) {
    return apply(tessera_session_options_set_backend_options(p_, o.c_str()));
  }
  // "fp32", "bf16" or "fp16", as --precision.
  SessionOptions& Precision(const std::string& p) {
    return apply(tessera_session_options_set_precision(p_, p.c_str()));
  }
  // "cos=MIN,abs=MAX,rel=MAX", as --accuracy-budget.
  SessionOptions& AccuracyBudget(const std::string& b) {
    return apply(tessera_session_options_set_accuracy_budget(p_, b.c_str()));
  }
  // input_<i>.pb files for the accuracy check at reduced precision; "": random inputs.
  SessionOptions& AccuracyInputs(const std::string& dir) {
    return apply(tessera_session_options_set_accuracy_inputs(p_, dir.c_str()));
  }
  // For an ONNX model, the symbolic input dims take the sizes of input_<i>.pb in DIR (engines compiled for them).
  SessionOptions& ShapesFromInputs(const std::string& dir) {
    return apply(tessera_session_options_set_shapes_from_inputs(p_, dir.c_str()));
  }
  SessionOptions& Progress(tessera_progress_fn fn, void* user) {
    return apply(tessera_session_options_set_progress(p_, fn, user));
  }

 private:
  SessionOptions& apply(tessera_error_t* e) {
    detail::check(e);
    return *this;
  }
};

class Value : public detail::Handle<tessera_value_t, tessera_value_release> {
 public:
  Value() = default;
  explicit Value(tessera_value_t* v) : Handle(v) {}
  // A zero-filled tensor Tessera owns.
  static Value Create(int32_t dtype, const std::vector<int64_t>& dims) {
    tessera_value_t* v = nullptr;
    detail::check(tessera_value_create(dtype, dims.data(), dims.size(), &v));
    return Value(v);
  }
  // A view of caller memory of any dtype (no copy); it must outlive every run that reads it.
  static Value WrapRaw(int32_t dtype, const std::vector<int64_t>& dims, void* data, size_t size_bytes) {
    tessera_value_t* v = nullptr;
    detail::check(tessera_value_wrap(dtype, dims.data(), dims.size(), data, size_bytes, &v));
    return Value(v);
  }
  // An ONNX TensorProto file; `name` (optional) receives the tensor's name.
  static Value ReadFile(const std::string& path, std::string* name = nullptr) {
    tessera_value_t* v = nullptr;
    char* n = nullptr;
    detail::check(tessera_value_read_file(path.c_str(), &v, name ? &n : nullptr));
    if (name) *name = detail::take_string(n);
    return Value(v);
  }
  void WriteFile(const std::string& path, const std::string& name = "") const {
    detail::check(tessera_value_write_file(p_, name.c_str(), path.c_str()));
  }
  // "" when this value matches `expected` (ONNX's backend-test tolerance), else what differs.
  std::string CompareTo(const Value& expected, double rtol, double atol) const {
    char* d = nullptr;
    detail::check(tessera_value_compare(expected.get(), p_, rtol, atol, &d));
    return detail::take_string(d);
  }
  // "float32[1,3] [0.5, -1, 2]"
  std::string Describe(size_t max_elements = 8) const {
    char* d = nullptr;
    detail::check(tessera_value_describe(p_, max_elements, &d));
    return detail::take_string(d);
  }
  // A view of caller memory (no copy); it must outlive every run that reads it.
  template <class T>
  static Value Wrap(T* data, const std::vector<int64_t>& dims) {
    size_t n = 1;
    for (int64_t d : dims) n *= static_cast<size_t>(d < 0 ? 0 : d);
    tessera_value_t* v = nullptr;
    detail::check(tessera_value_wrap(detail::DTypeOf<T>::value, dims.data(), dims.size(), data, n * sizeof(T), &v));
    return Value(v);
  }
  int32_t DType() const { return tessera_value_dtype(p_); }
  std::vector<int64_t> Dims() const {
    const int64_t* d = tessera_value_dims(p_);
    return d ? std::vector<int64_t>(d, d + tessera_value_rank(p_)) : std::vector<int64_t>{};
  }
  size_t SizeBytes() const { return tessera_value_size_bytes(p_); }
  template <class T>
  T* Data() {
    if (DType() != detail::DTypeOf<T>::value) throw Error(TESSERA_CODE_INVALID_ARGUMENT, "Value::Data: wrong type");
    return static_cast<T*>(tessera_value_data(p_));
  }
  void* RawData() { return tessera_value_data(p_); }
};

// Profiled runs of one session: summaries and Chrome traces over several runs.
class Profile : public detail::Handle<tessera_profile_t, tessera_profile_release> {
 public:
  Profile() { detail::check(tessera_profile_create(&p_)); }
  size_t Runs() const {
    size_t n = 0;
    detail::check(tessera_profile_runs(p_, &n));
    return n;
  }
  // TESSERA_FORMAT_TEXT or TESSERA_FORMAT_JSON.
  std::string Summary(tessera_format_t format) const {
    char* s = nullptr;
    detail::check(tessera_profile_summary(p_, format, &s));
    return detail::take_string(s);
  }
  void WriteTrace(const std::string& title, const std::string& path, size_t max_runs) const {
    detail::check(tessera_profile_write_trace(p_, title.c_str(), path.c_str(), max_runs));
  }
};

class RunOptions : public detail::Handle<tessera_run_options_t, tessera_run_options_release> {
 public:
  RunOptions() { detail::check(tessera_run_options_create(&p_)); }
  // Runs with these options record into `profile` (nullptr: stop).
  RunOptions& SetProfile(Profile* profile) {
    detail::check(tessera_run_options_set_profile(p_, profile ? profile->get() : nullptr));
    return *this;
  }
  RunOptions& Tag(const std::string& t) {
    detail::check(tessera_run_options_set_tag(p_, t.c_str()));
    return *this;
  }
  RunOptions& TracePath(const std::string& path) {
    detail::check(tessera_run_options_set_trace_path(p_, path.empty() ? nullptr : path.c_str()));
    return *this;
  }
  // Thread-safe: runs using these options return CANCELLED (Error::code()).
  void Cancel() { detail::check(tessera_run_options_cancel(p_)); }
  void Reset() { detail::check(tessera_run_options_reset(p_)); }
};

struct IoInfo {
  std::string name;
  int32_t dtype = 0;
  int32_t rank = -1;                   // -1: unknown
  std::vector<int64_t> dims;           // -1 where unknown
  std::vector<std::string> dim_names;  // the symbol where a dim is unknown
};

class Session : public detail::Handle<tessera_session_t, tessera_session_release> {
 public:
  Session(const Env& env, const std::string& path, const SessionOptions* opts = nullptr) {
    detail::check(tessera_session_create(env.get(), path.c_str(), opts ? opts->get() : nullptr, &p_));
  }
  Session(const Env& env, const void* data, size_t size, const SessionOptions* opts = nullptr) {
    detail::check(tessera_session_create_from_buffer(env.get(), data, size, opts ? opts->get() : nullptr, &p_));
  }
  std::vector<IoInfo> Inputs() const { return infos(true); }
  std::vector<IoInfo> Outputs() const { return infos(false); }
  int Threads() const {
    int n = 0;
    detail::check(tessera_session_threads(p_, &n));
    return n;
  }
  int ThreadsAsked() const {  // since 0.8
    int n = 0;
    detail::check(tessera_session_threads_asked(p_, &n));
    return n;
  }
  // The placement report of the compile this session was made with, rendered (tessera_session_report).
  std::string RenderReport(tessera_format_t format) const {
    char* s = nullptr;
    detail::check(tessera_session_report(p_, format, &s));
    return detail::take_string(s);
  }
  // The backend of every engine ("dnnl", ...); empty for a model run natively.
  std::vector<std::string> EngineBackends() const {
    size_t n = 0;
    detail::check(tessera_session_engine_count(p_, &n));
    std::vector<std::string> r;
    for (size_t i = 0; i < n; ++i) {
      const char* b = nullptr;
      detail::check(tessera_session_engine_backend(p_, i, &b));
      r.emplace_back(b);
    }
    return r;
  }
  // Random inputs in graph order (deterministic per seed).
  std::vector<Value> RandomInputs(uint64_t seed) const {
    size_t n = 0;
    detail::check(tessera_session_input_count(p_, &n));
    std::vector<tessera_value_t*> raw(n, nullptr);
    detail::check(tessera_session_random_inputs(p_, seed, raw.data(), n));
    std::vector<Value> r;
    for (tessera_value_t* v : raw) r.emplace_back(v);
    return r;
  }
  // What plans per input shape have cost so far (tessera_session_plan_counts).
  struct PlanCounts {
    uint64_t built = 0, waited = 0, generic = 0;
    uint64_t bucket = 0;  // runs on a bucket's engines (tessera_session_bucket_runs)
    // Buckets the background made, of them read from the engine cache, and failed compiles
    // (tessera_session_background_buckets).
    uint64_t compiled = 0, from_cache = 0, compile_failed = 0;
    // What the plans hold now against the memory limit: arenas, and buckets' engines
    // (tessera_session_plan_cache_bytes).
    uint64_t arena_bytes = 0, engine_bytes = 0;
  };
  PlanCounts Plans() const {
    PlanCounts c;
    detail::check(tessera_session_plan_counts(p_, &c.built, &c.waited, &c.generic));
    detail::check(tessera_session_bucket_runs(p_, &c.bucket));
    detail::check(tessera_session_background_buckets(p_, &c.compiled, &c.from_cache, &c.compile_failed));
    detail::check(tessera_session_plan_cache_bytes(p_, &c.arena_bytes, &c.engine_bytes));
    return c;
  }
  // Returns once the plans and bucket compiles queued in the background are done
  // (tessera_session_wait_background).
  void WaitBackground() const { detail::check(tessera_session_wait_background(p_)); }
  // Arena bytes of a run on inputs shaped like these (graph order).
  size_t ArenaBytes(const std::vector<Value>& inputs) const {
    std::vector<const tessera_value_t*> raw;
    for (const Value& v : inputs) raw.push_back(v.get());
    size_t n = 0;
    detail::check(tessera_session_arena_bytes(p_, raw.data(), raw.size(), &n));
    return n;
  }

  // Every output in graph order (output_names empty) or the named ones.
  std::vector<Value> Run(const std::vector<std::pair<std::string, const Value*>>& inputs,
                         const std::vector<std::string>& output_names = {}, const RunOptions* ro = nullptr) {
    std::vector<const char*> names;
    std::vector<const tessera_value_t*> values;
    for (const auto& [n, v] : inputs) {
      names.push_back(n.c_str());
      values.push_back(v ? v->get() : nullptr);
    }
    std::vector<const char*> onames;
    for (const auto& n : output_names) onames.push_back(n.c_str());
    size_t count = output_names.size();
    if (output_names.empty()) detail::check(tessera_session_output_count(p_, &count));
    std::vector<tessera_value_t*> outs(count, nullptr);
    detail::check(tessera_session_run(p_, ro ? ro->get() : nullptr, names.data(), values.data(), names.size(),
                                      output_names.empty() ? nullptr : onames.data(), outs.data(), outs.size()));
    std::vector<Value> result;
    for (tessera_value_t* v : outs) result.emplace_back(v);
    return result;
  }

  // Outputs written into caller values (bound), in graph order or by name.
  void RunInto(const std::vector<std::pair<std::string, const Value*>>& inputs,
               const std::vector<std::pair<std::string, Value*>>& outputs, const RunOptions* ro = nullptr) {
    std::vector<const char*> names, onames;
    std::vector<const tessera_value_t*> values;
    std::vector<tessera_value_t*> outs;
    for (const auto& [n, v] : inputs) {
      names.push_back(n.c_str());
      values.push_back(v ? v->get() : nullptr);
    }
    for (const auto& [n, v] : outputs) {
      onames.push_back(n.c_str());
      outs.push_back(v ? v->get() : nullptr);
    }
    detail::check(tessera_session_run(p_, ro ? ro->get() : nullptr, names.data(), values.data(), names.size(),
                                      onames.data(), outs.data(), outs.size()));
  }

 private:
  std::vector<IoInfo> infos(bool input) const {
    size_t n = 0;
    detail::check(input ? tessera_session_input_count(p_, &n) : tessera_session_output_count(p_, &n));
    std::vector<IoInfo> r;
    for (size_t i = 0; i < n; ++i) {
      tessera_io_info_t c{};
      detail::check(input ? tessera_session_input_info(p_, i, &c) : tessera_session_output_info(p_, i, &c));
      IoInfo info;
      info.name = c.name;
      info.dtype = c.dtype;
      info.rank = c.rank;
      for (int32_t d = 0; d < c.rank; ++d) {
        info.dims.push_back(c.dims[d]);
        info.dim_names.emplace_back(c.dim_names[d]);
      }
      r.push_back(std::move(info));
    }
    return r;
  }
};

// `tessera compile`: the ONNX model at `model` into the artifact `out`.
inline void Compile(const Env& env, const std::string& model, const std::string& out,
                    const SessionOptions* opts = nullptr) {
  detail::check(tessera_compile(env.get(), model.c_str(), opts ? opts->get() : nullptr, out.c_str()));
}

// The same in memory: ONNX bytes in, artifact bytes out.
inline std::string CompileBuffer(const Env& env, const std::string& model, const SessionOptions* opts = nullptr) {
  char* out = nullptr;
  size_t size = 0;
  detail::check(
      tessera_compile_buffer(env.get(), model.data(), model.size(), opts ? opts->get() : nullptr, &out, &size));
  std::string r(out, size);
  tessera_string_free(out);
  return r;
}

// `tessera partition --json`.
inline std::string PartitionReport(const Env& env, const std::string& model, const SessionOptions* opts = nullptr) {
  char* s = nullptr;
  detail::check(tessera_partition_report(env.get(), model.c_str(), opts ? opts->get() : nullptr, &s));
  return detail::take_string(s);
}

// `tessera inspect --json`.
inline std::string InspectArtifact(const std::string& path) {
  char* s = nullptr;
  detail::check(tessera_inspect_artifact(path.c_str(), &s));
  return detail::take_string(s);
}
// `tessera inspect`, as JSON or text.
inline std::string Inspect(const std::string& path, tessera_format_t format) {
  char* s = nullptr;
  detail::check(tessera_inspect(path.c_str(), format, &s));
  return detail::take_string(s);
}

// A placement report, rendered as JSON, text, DOT or the halves of the compile line.
class Report : public detail::Handle<tessera_report_t, tessera_report_release> {
 public:
  explicit Report(tessera_report_t* r) : Handle(r) {}
  std::string Render(tessera_format_t format) const {
    char* s = nullptr;
    detail::check(tessera_report_render(p_, format, &s));
    return detail::take_string(s);
  }
};
// Compiles `model`, writing the artifact to `out` unless it is empty, and returns the placement report.
inline Report CompileWithReport(const Env& env, const std::string& model, const std::string& out,
                                const SessionOptions* opts = nullptr) {
  tessera_report_t* r = nullptr;
  detail::check(tessera_compile_with_report(env.get(), model.c_str(), opts ? opts->get() : nullptr,
                                            out.empty() ? nullptr : out.c_str(), &r));
  return Report(r);
}

}  // namespace tessera
