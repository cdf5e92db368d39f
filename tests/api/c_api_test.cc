// The C API (include/tessera/tessera.h) as a program embedding Tessera uses
// it: sessions from ONNX models and artifacts (paths and buffers), outputs
// against ONNX Runtime's references, bound outputs, concurrent runs,
// cancellation, traces, reports, and misuse that must return errors.
#include <cpuid.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "api/api_test_util.h"
#include "tessera/tessera.h"

namespace {

using apitest::model_path;
using apitest::reference;
using apitest::RefTensor;

// Fails the test with the error's message when `e` is set; releases it.
#define ASSERT_OK(expr)                                                   \
  do {                                                                    \
    tessera_error_t* e_ = (expr);                                         \
    ASSERT_EQ(e_, nullptr) << #expr << ": " << tessera_error_message(e_); \
  } while (0)

// The error's code (releasing it); TESSERA_CODE_OK for none.
tessera_code_t code_of(tessera_error_t* e, std::string* msg = nullptr) {
  const tessera_code_t c = tessera_error_code(e);
  if (msg) *msg = tessera_error_message(e);
  tessera_error_release(e);
  return c;
}

struct Env {
  tessera_env_t* env = nullptr;
  Env() { EXPECT_EQ(tessera_env_create(&env), nullptr); }
  ~Env() { tessera_env_release(env); }
};

struct Options {
  tessera_session_options_t* o = nullptr;
  // Tests never measure (placements depend only on the build) and never touch the user's tune cache.
  Options() {
    EXPECT_EQ(tessera_session_options_create(&o), nullptr);
    EXPECT_EQ(tessera_session_options_set_tune(o, TESSERA_TUNE_OFF), nullptr);
    EXPECT_EQ(tessera_session_options_set_tune_cache(o, ""), nullptr);
  }
  ~Options() { tessera_session_options_release(o); }
};

struct Session {
  tessera_session_t* s = nullptr;
  ~Session() { tessera_session_release(s); }
};

struct Values {
  std::vector<tessera_value_t*> v;
  explicit Values(size_t n = 0) : v(n, nullptr) {}
  ~Values() {
    for (auto* x : v) tessera_value_release(x);
  }
};

tessera_value_t* wrap(const RefTensor& t) {
  tessera_value_t* v = nullptr;
  EXPECT_EQ(
      tessera_value_wrap(t.dtype, t.dims.data(), t.dims.size(), const_cast<char*>(t.bytes.data()), t.bytes.size(), &v),
      nullptr);
  return v;
}

// The model's reference inputs, wrapped, with their input names.
struct RefInputs {
  std::vector<RefTensor> tensors;
  std::vector<std::string> names;
  Values values;
  std::vector<const char*> cnames;
  RefInputs(const std::string& model, const std::vector<std::string>& input_names) : names(input_names) {
    for (size_t i = 0; i < names.size(); ++i) tensors.push_back(reference(model, "input_" + std::to_string(i) + ".pb"));
    for (const auto& t : tensors) values.v.push_back(wrap(t));
    for (const auto& n : names) cnames.push_back(n.c_str());
  }
  const tessera_value_t* const* ptrs() const { return values.v.data(); }
};

// A native session of a generated model, with the model's reference inputs.
struct NativeSession {
  Env env;
  Options opts;
  Session s;
  RefInputs in;
  NativeSession(const std::string& model, const std::vector<std::string>& input_names) : in(model, input_names) {
    EXPECT_EQ(tessera_session_options_set_backends(opts.o, "native"), nullptr);
    tessera_error_t* e = tessera_session_create(env.env, model_path(model).c_str(), opts.o, &s.s);
    EXPECT_EQ(e, nullptr) << tessera_error_message(e);
    tessera_error_release(e);
  }
};

// Every output in graph order matches ONNX Runtime's reference.
void expect_matches_reference(tessera_session_t* s, const std::string& model, const RefInputs& in) {
  size_t n = 0;
  ASSERT_OK(tessera_session_output_count(s, &n));
  Values out(n);
  ASSERT_OK(tessera_session_run(s, nullptr, in.cnames.data(), in.ptrs(), in.cnames.size(), nullptr, out.v.data(), n));
  for (size_t i = 0; i < n; ++i) {
    const RefTensor want = reference(model, "output_" + std::to_string(i) + ".pb");
    ASSERT_EQ(tessera_value_dtype(out.v[i]), TESSERA_DTYPE_FLOAT32);
    ASSERT_EQ(
        std::vector<int64_t>(tessera_value_dims(out.v[i]), tessera_value_dims(out.v[i]) + tessera_value_rank(out.v[i])),
        want.dims);
    EXPECT_LE(
        apitest::worst_ratio(static_cast<const float*>(tessera_value_data(out.v[i])), want.floats(), want.count()), 1.0)
        << model << " output " << i;
  }
}

TEST(CApi, VersionAndErrorsOfNothing) {
  EXPECT_EQ(tessera_api_version(), (uint32_t{TESSERA_API_VERSION_MAJOR} << 16) | TESSERA_API_VERSION_MINOR);
  EXPECT_GT(std::strlen(tessera_version_string()), 0u);
  EXPECT_EQ(tessera_error_code(nullptr), TESSERA_CODE_OK);
  EXPECT_STREQ(tessera_error_message(nullptr), "");
  tessera_error_release(nullptr);
  tessera_string_free(nullptr);
}

TEST(CApi, SessionFromOnnxDescribesItsInputsAndMatchesOnnxRuntime) {
  NativeSession n("bert_tiny", {"input_ids", "attention_mask"});
  Session& s = n.s;
  ASSERT_NE(s.s, nullptr);
  size_t n_in = 0, n_out = 0;
  ASSERT_OK(tessera_session_input_count(s.s, &n_in));
  ASSERT_OK(tessera_session_output_count(s.s, &n_out));
  ASSERT_EQ(n_in, 2u);
  ASSERT_EQ(n_out, 2u);
  tessera_io_info_t info{};
  ASSERT_OK(tessera_session_input_info(s.s, 0, &info));
  EXPECT_STREQ(info.name, "input_ids");
  EXPECT_EQ(info.dtype, TESSERA_DTYPE_INT64);
  ASSERT_EQ(info.rank, 2);
  EXPECT_EQ(info.dims[1], 128);
  ASSERT_OK(tessera_session_output_info(s.s, 1, &info));
  EXPECT_STREQ(info.name, "pooler_output");
  EXPECT_EQ(info.dtype, TESSERA_DTYPE_FLOAT32);
  char* engines = nullptr;
  ASSERT_OK(tessera_session_engines_json(s.s, &engines));
  EXPECT_STREQ(engines, "[]");
  tessera_string_free(engines);
  expect_matches_reference(s.s, "bert_tiny", n.in);
}

TEST(CApi, SessionsFromBuffersAndArtifactsMatchOnnxRuntime) {
  Env env;
  Options opts;  // every backend found, cost placement from estimates
  const std::string onnx = apitest::read_bytes(model_path("mlp"));
  const RefInputs in("mlp", {"input"});
  {
    Session s;
    ASSERT_OK(tessera_session_create_from_buffer(env.env, onnx.data(), onnx.size(), opts.o, &s.s));
    expect_matches_reference(s.s, "mlp", in);
  }
  const std::string tsr = testing::TempDir() + "capi_mlp_" + std::to_string(getpid()) + ".tsr";
  ASSERT_OK(tessera_compile(env.env, model_path("mlp").c_str(), opts.o, tsr.c_str()));
  {
    Session s;
    ASSERT_OK(tessera_session_create(env.env, tsr.c_str(), nullptr, &s.s));
    expect_matches_reference(s.s, "mlp", in);
  }
  char* json = nullptr;
  ASSERT_OK(tessera_inspect_artifact(tsr.c_str(), &json));
  EXPECT_NE(std::string(json).find("\"sections\""), std::string::npos) << json;
  tessera_string_free(json);
  std::remove(tsr.c_str());
  char* bytes = nullptr;
  size_t size = 0;
  ASSERT_OK(tessera_compile_buffer(env.env, onnx.data(), onnx.size(), opts.o, &bytes, &size));
  ASSERT_GT(size, 64u);
  EXPECT_EQ(std::memcmp(bytes, "\x89TSR\r\n\x1a\n", 8), 0);  // the artifact magic
  {
    Session s;
    ASSERT_OK(tessera_session_create_from_buffer(env.env, bytes, size, nullptr, &s.s));
    tessera_string_free(bytes);  // the session keeps its own copy
    expect_matches_reference(s.s, "mlp", in);
  }
}

TEST(CApi, BoundOutputsAreWrittenInPlaceAndMustMatch) {
  NativeSession n("bert_tiny", {"input_ids", "attention_mask"});
  Session& s = n.s;
  const RefInputs& in = n.in;
  ASSERT_NE(s.s, nullptr);
  const RefTensor want = reference("bert_tiny", "output_1.pb");
  // Only pooler_output, into a caller buffer.
  std::vector<float> buf(want.count(), -7.f);
  tessera_value_t* bound = nullptr;
  ASSERT_OK(tessera_value_wrap(TESSERA_DTYPE_FLOAT32, want.dims.data(), want.dims.size(), buf.data(),
                               buf.size() * sizeof(float), &bound));
  const char* names[] = {"pooler_output"};
  tessera_value_t* outs[] = {bound};
  ASSERT_OK(tessera_session_run(s.s, nullptr, in.cnames.data(), in.ptrs(), 2, names, outs, 1));
  EXPECT_EQ(outs[0], bound);  // the caller's value, not a new one
  EXPECT_LE(apitest::worst_ratio(buf.data(), want.floats(), want.count()), 1.0);
  tessera_value_release(bound);
  // A buffer of the wrong shape is refused, naming the output.
  std::vector<float> small(want.count() / 2);
  const int64_t half[] = {static_cast<int64_t>(small.size())};
  ASSERT_OK(tessera_value_wrap(TESSERA_DTYPE_FLOAT32, half, 1, small.data(), small.size() * sizeof(float), &bound));
  outs[0] = bound;
  std::string msg;
  EXPECT_EQ(code_of(tessera_session_run(s.s, nullptr, in.cnames.data(), in.ptrs(), 2, names, outs, 1), &msg),
            TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("pooler_output"), std::string::npos) << msg;
  tessera_value_release(bound);
}

// 8 threads x 200 runs on one session: every output bit-identical to a serial run.
TEST(CApi, ConcurrentRunsOnOneSessionAreBitIdenticalToSerialOnes) {
  Env env;
  Options opts;
  ASSERT_OK(tessera_session_options_set_threads(opts.o, 2));
  Session s;
  ASSERT_OK(tessera_session_create(env.env, model_path("bert_tiny").c_str(), opts.o, &s.s));
  const RefInputs in("bert_tiny", {"input_ids", "attention_mask"});
  Values serial(2);
  ASSERT_OK(tessera_session_run(s.s, nullptr, in.cnames.data(), in.ptrs(), 2, nullptr, serial.v.data(), 2));
  std::atomic<int> mismatches{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int r = 0; r < 200; ++r) {
        Values out(2);
        tessera_error_t* e =
            tessera_session_run(s.s, nullptr, in.cnames.data(), in.ptrs(), 2, nullptr, out.v.data(), 2);
        if (e) {
          ++failures;
          tessera_error_release(e);
          continue;
        }
        for (size_t i = 0; i < 2; ++i) {
          if (tessera_value_size_bytes(out.v[i]) != tessera_value_size_bytes(serial.v[i]) ||
              std::memcmp(tessera_value_data(out.v[i]), tessera_value_data(serial.v[i]),
                          tessera_value_size_bytes(out.v[i])) != 0) {
            ++mismatches;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(CApi, CancelledRunsReturnCancelled) {
  NativeSession n("bert_tiny", {"input_ids", "attention_mask"});
  Session& s = n.s;
  const RefInputs& in = n.in;
  ASSERT_NE(s.s, nullptr);
  tessera_run_options_t* ro = nullptr;
  ASSERT_OK(tessera_run_options_create(&ro));
  ASSERT_OK(tessera_run_options_set_tag(ro, "cancel-test"));
  // Cancelled before it starts.
  ASSERT_OK(tessera_run_options_cancel(ro));
  {
    Values out(2);
    EXPECT_EQ(code_of(tessera_session_run(s.s, ro, in.cnames.data(), in.ptrs(), 2, nullptr, out.v.data(), 2)),
              TESSERA_CODE_CANCELLED);
    EXPECT_EQ(out.v[0], nullptr);  // no value on failure
  }
  ASSERT_OK(tessera_run_options_reset(ro));
  {
    Values out(2);
    ASSERT_OK(tessera_session_run(s.s, ro, in.cnames.data(), in.ptrs(), 2, nullptr, out.v.data(), 2));
  }
  // Cancelled from another thread while runs are going: the loop ends with CANCELLED.
  std::atomic<bool> started{false};
  std::thread canceller([&] {
    while (!started.load()) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(tessera_run_options_cancel(ro), nullptr);
  });
  tessera_code_t last = TESSERA_CODE_OK;
  for (int r = 0; r < 100000 && last == TESSERA_CODE_OK; ++r) {
    Values out(2);
    started = true;
    last = code_of(tessera_session_run(s.s, ro, in.cnames.data(), in.ptrs(), 2, nullptr, out.v.data(), 2));
  }
  canceller.join();
  EXPECT_EQ(last, TESSERA_CODE_CANCELLED);
  tessera_run_options_release(ro);
}

TEST(CApi, TraceAndReports) {
  NativeSession n("mlp", {"input"});
  Session& s = n.s;
  const RefInputs& in = n.in;
  ASSERT_NE(s.s, nullptr);
  tessera_run_options_t* ro = nullptr;
  ASSERT_OK(tessera_run_options_create(&ro));
  const std::string trace = testing::TempDir() + "capi_trace_" + std::to_string(getpid()) + ".json";
  ASSERT_OK(tessera_run_options_set_trace_path(ro, trace.c_str()));
  Values out(1);
  ASSERT_OK(tessera_session_run(s.s, ro, in.cnames.data(), in.ptrs(), 1, nullptr, out.v.data(), 1));
  tessera_run_options_release(ro);
  EXPECT_NE(apitest::read_bytes(trace).find("traceEvents"), std::string::npos);
  std::remove(trace.c_str());
  char* json = nullptr;
  ASSERT_OK(tessera_partition_report(n.env.env, model_path("mlp").c_str(), n.opts.o, &json));
  EXPECT_NE(std::string(json).find("\"regions\""), std::string::npos) << json;
  tessera_string_free(json);
  char* list = nullptr;
  ASSERT_OK(tessera_available_backends(n.env.env, &list));
  const std::string backends = list;
  tessera_string_free(list);
  EXPECT_EQ(backends.substr(backends.size() - 6), "native") << backends;
}

// 0.2: what the command line runs on. TensorProto files, comparisons, random inputs, session facts, profiles over
// several runs, placement reports in every format, inspect as text, --shape specs and compile progress.
TEST(CApi, FilesComparisonsProfilesAndReports) {
  NativeSession n("mlp", {"input"});
  ASSERT_NE(n.s.s, nullptr);
  // A reference file read back equals its bytes; written and read again it compares equal to itself.
  tessera_value_t* ref_in = nullptr;
  char* name = nullptr;
  ASSERT_OK(tessera_value_read_file(apitest::reference_path("mlp", "input_0.pb").c_str(), &ref_in, &name));
  tessera_string_free(name);
  const RefTensor want_in = reference("mlp", "input_0.pb");
  ASSERT_EQ(tessera_value_size_bytes(ref_in), want_in.bytes.size());
  EXPECT_EQ(std::memcmp(tessera_value_data(ref_in), want_in.bytes.data(), want_in.bytes.size()), 0);
  const std::string file = testing::TempDir() + "capi_value_" + std::to_string(getpid()) + ".pb";
  ASSERT_OK(tessera_value_write_file(ref_in, "x", file.c_str()));
  tessera_value_t* back = nullptr;
  ASSERT_OK(tessera_value_read_file(file.c_str(), &back, &name));
  EXPECT_STREQ(name, "x");
  tessera_string_free(name);
  std::remove(file.c_str());
  char* diff = nullptr;
  ASSERT_OK(tessera_value_compare(ref_in, back, 0, 0, &diff));
  EXPECT_STREQ(diff, "");
  tessera_string_free(diff);
  // A changed element is reported with where and by how much.
  static_cast<float*>(tessera_value_data(back))[3] += 1.0f;
  ASSERT_OK(tessera_value_compare(ref_in, back, 1e-3, 1e-5, &diff));
  EXPECT_NE(std::string(diff).find("1 of 256 values differ"), std::string::npos) << diff;
  EXPECT_NE(std::string(diff).find("first at 3"), std::string::npos) << diff;
  tessera_string_free(diff);
  char* text = nullptr;
  ASSERT_OK(tessera_value_describe(ref_in, 2, &text));
  EXPECT_EQ(std::string(text).rfind("float32[1,256] [", 0), 0u) << text;
  EXPECT_NE(std::string(text).find(", ...]"), std::string::npos) << text;
  tessera_string_free(text);

  // Random inputs: one per input, deterministic per seed, shaped as the model says.
  Values r1(1), r2(1);
  ASSERT_OK(tessera_session_random_inputs(n.s.s, 7, r1.v.data(), 1));
  ASSERT_OK(tessera_session_random_inputs(n.s.s, 7, r2.v.data(), 1));
  ASSERT_OK(tessera_value_compare(r1.v[0], r2.v[0], 0, 0, &diff));
  EXPECT_STREQ(diff, "");
  tessera_string_free(diff);
  EXPECT_EQ(tessera_value_size_bytes(r1.v[0]), 256 * sizeof(float));
  EXPECT_EQ(code_of(tessera_session_random_inputs(n.s.s, 7, r1.v.data(), 2)), TESSERA_CODE_INVALID_ARGUMENT);
  size_t arena = 0;
  ASSERT_OK(tessera_session_arena_bytes(n.s.s, r1.v.data(), 1, &arena));
  int threads = 0;
  ASSERT_OK(tessera_session_threads(n.s.s, &threads));
  EXPECT_GE(threads, 1);
  // 0.8: the count asked for, never fewer than the session runs on.
  int asked = 0;
  ASSERT_OK(tessera_session_threads_asked(n.s.s, &asked));
  EXPECT_GE(asked, threads);
  EXPECT_EQ(code_of(tessera_session_threads_asked(n.s.s, nullptr)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_session_threads_asked(nullptr, &asked)), TESSERA_CODE_INVALID_ARGUMENT);
  // 0.3: plan counts. The model's one static shape was planned when the session was made (no run waited for it).
  uint64_t built = 0, waited = 7, generic = 7;
  ASSERT_OK(tessera_session_plan_counts(n.s.s, &built, &waited, &generic));
  EXPECT_EQ(built, 1u);
  EXPECT_EQ(waited, 0u);
  EXPECT_EQ(generic, 0u);
  ASSERT_OK(tessera_session_plan_counts(n.s.s, nullptr, nullptr, nullptr));
  EXPECT_EQ(code_of(tessera_session_plan_counts(nullptr, &built, nullptr, nullptr)), TESSERA_CODE_INVALID_ARGUMENT);
  // 0.9: what the plans hold against the memory limit: the planned shape's arena; no bucket engines (native).
  uint64_t plan_arenas = 0, bucket_engines = 7;
  ASSERT_OK(tessera_session_plan_cache_bytes(n.s.s, &plan_arenas, &bucket_engines));
  EXPECT_EQ(plan_arenas, arena);
  EXPECT_EQ(bucket_engines, 0u);
  ASSERT_OK(tessera_session_plan_cache_bytes(n.s.s, nullptr, nullptr));
  EXPECT_EQ(code_of(tessera_session_plan_cache_bytes(nullptr, &plan_arenas, nullptr)), TESSERA_CODE_INVALID_ARGUMENT);
  // 0.11: nothing queued in the background: waiting returns at once; measuring buckets is an option like the others.
  ASSERT_OK(tessera_session_wait_background(n.s.s));
  EXPECT_EQ(code_of(tessera_session_wait_background(nullptr)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_session_options_set_measure_buckets(nullptr, 1)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_session_options_set_plan_in_background(nullptr, 0)), TESSERA_CODE_INVALID_ARGUMENT);
  size_t engines = 99;
  ASSERT_OK(tessera_session_engine_count(n.s.s, &engines));
  EXPECT_EQ(engines, 0u);  // native
  const char* backend = nullptr;
  EXPECT_EQ(code_of(tessera_session_engine_backend(n.s.s, 0, &backend)), TESSERA_CODE_INVALID_ARGUMENT);

  // A profile over three runs: a summary in both formats and a trace of two of them.
  tessera_profile_t* profile = nullptr;
  ASSERT_OK(tessera_profile_create(&profile));
  char* summary = nullptr;
  EXPECT_EQ(code_of(tessera_profile_summary(profile, TESSERA_FORMAT_TEXT, &summary)), TESSERA_CODE_INVALID_ARGUMENT);
  tessera_run_options_t* ro = nullptr;
  ASSERT_OK(tessera_run_options_create(&ro));
  ASSERT_OK(tessera_run_options_set_profile(ro, profile));
  for (int i = 0; i < 3; ++i) {
    Values out(1);
    ASSERT_OK(tessera_session_run(n.s.s, ro, n.in.cnames.data(), n.in.ptrs(), 1, nullptr, out.v.data(), 1));
  }
  size_t runs = 0;
  ASSERT_OK(tessera_profile_runs(profile, &runs));
  EXPECT_EQ(runs, 3u);
  ASSERT_OK(tessera_profile_summary(profile, TESSERA_FORMAT_TEXT, &summary));
  EXPECT_NE(std::string(summary).find("time per op type"), std::string::npos) << summary;
  tessera_string_free(summary);
  ASSERT_OK(tessera_profile_summary(profile, TESSERA_FORMAT_JSON, &summary));
  EXPECT_NE(std::string(summary).find("\"runs\": 3"), std::string::npos) << summary;
  tessera_string_free(summary);
  const std::string trace = testing::TempDir() + "capi_profile_" + std::to_string(getpid()) + ".json";
  ASSERT_OK(tessera_profile_write_trace(profile, "two runs", trace.c_str(), 2));
  EXPECT_NE(apitest::read_bytes(trace).find("traceEvents"), std::string::npos);
  std::remove(trace.c_str());
  // The profile belongs to the session whose runs it holds.
  NativeSession other("mlp", {"input"});
  Values out(1);
  EXPECT_EQ(code_of(tessera_session_run(other.s.s, ro, other.in.cnames.data(), other.in.ptrs(), 1, nullptr,
                                        out.v.data(), 1)),
            TESSERA_CODE_INVALID_ARGUMENT);
  tessera_run_options_release(ro);
  tessera_profile_release(profile);

  // A compile with its report, rendered in every format, and the artifact inspected as text.
  const std::string artifact = testing::TempDir() + "capi_report_" + std::to_string(getpid()) + ".tsr";
  std::atomic<int> progress_calls{0};
  ASSERT_OK(tessera_session_options_set_progress(
      n.opts.o, [](void* user, int, int, const char*) { ++*static_cast<std::atomic<int>*>(user); }, &progress_calls));
  ASSERT_OK(tessera_session_options_add_shape(n.opts.o, "input=1,256"));
  tessera_report_t* report = nullptr;
  ASSERT_OK(tessera_compile_with_report(n.env.env, model_path("mlp").c_str(), n.opts.o, artifact.c_str(), &report));
  const std::pair<tessera_format_t, const char*> formats[] = {{TESSERA_FORMAT_JSON, "\"regions\""},
                                                              {TESSERA_FORMAT_TEXT, "region"},
                                                              {TESSERA_FORMAT_DOT, "digraph"},
                                                              {TESSERA_FORMAT_REGIONS_LINE, "1 regions (1 native), 0 engines"},
                                                              {TESSERA_FORMAT_PLACEMENT_LINE, "placement "}};
  for (const auto& [format, want] : formats) {
    char* r = nullptr;
    ASSERT_OK(tessera_report_render(report, format, &r));
    EXPECT_NE(std::string(r).find(want), std::string::npos) << format << ": " << r;
    tessera_string_free(r);
  }
  EXPECT_EQ(code_of(tessera_report_render(report, static_cast<tessera_format_t>(42), &text)),
            TESSERA_CODE_INVALID_ARGUMENT);
  tessera_report_release(report);
  ASSERT_OK(tessera_inspect(artifact.c_str(), TESSERA_FORMAT_TEXT, &text));
  EXPECT_NE(std::string(text).find("native"), std::string::npos) << text;
  tessera_string_free(text);
  std::remove(artifact.c_str());
  // A pin of an input the model lacks is the model's error, at compile time.
  ASSERT_OK(tessera_session_options_add_shape(n.opts.o, "nope=1"));
  std::string msg;
  EXPECT_EQ(code_of(tessera_compile_with_report(n.env.env, model_path("mlp").c_str(), n.opts.o, nullptr, &report), &msg),
            TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("nope"), std::string::npos) << msg;
  tessera_value_release(ref_in);
  tessera_value_release(back);

  // A memory limit below what a run needs refuses the run (or the session, when it plans at creation), by name.
  {
    Options limited;
    ASSERT_OK(tessera_session_options_set_backends(limited.o, "native"));
    ASSERT_OK(tessera_session_options_set_max_memory(limited.o, 64));
    Session ls;
    tessera_error_t* e = tessera_session_create(n.env.env, model_path("mlp").c_str(), limited.o, &ls.s);
    if (!e) {
      Values out(1);
      e = tessera_session_run(ls.s, nullptr, n.in.cnames.data(), n.in.ptrs(), 1, nullptr, out.v.data(), 1);
    }
    EXPECT_EQ(code_of(e, &msg), TESSERA_CODE_INVALID_ARGUMENT);
    EXPECT_NE(msg.find("memory limit"), std::string::npos) << msg;
  }

  // Misuse of the 0.2 functions.
  EXPECT_EQ(code_of(tessera_value_read_file("/nonexistent.pb", &back, nullptr)), TESSERA_CODE_IO);
  EXPECT_EQ(code_of(tessera_value_read_file(nullptr, &back, nullptr)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_value_write_file(nullptr, "x", "/tmp/x.pb")), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_value_compare(nullptr, nullptr, 0, 0, &diff)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_value_describe(nullptr, 1, &text)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_session_random_inputs(nullptr, 0, nullptr, 0)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_session_arena_bytes(nullptr, nullptr, 0, &arena)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_profile_create(nullptr)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_run_options_set_profile(nullptr, nullptr)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_profile_write_trace(nullptr, "t", "/tmp/t.json", 1)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_compile_with_report(n.env.env, model_path("mlp").c_str(), nullptr, nullptr, nullptr)),
            TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_report_render(nullptr, TESSERA_FORMAT_JSON, &text)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_inspect("/nonexistent.tsr", TESSERA_FORMAT_TEXT, &text)), TESSERA_CODE_IO);
  EXPECT_EQ(code_of(tessera_session_options_add_shape(nullptr, "x=1")), TESSERA_CODE_INVALID_ARGUMENT);
}

// Misuse returns INVALID_ARGUMENT (or the model's own error), naming what was wrong; nothing crashes.
// --precision through the API: a bad name is an invalid argument; a precision this CPU (or the dispatch switch
// TESSERA_ISA=avx2) cannot compute in is unsupported, with the reason; a bf16 session reports each output's error
// against fp32, and a budget it exceeds refuses the session naming the output.
TEST(CApi, PrecisionIsRefusedWithAReasonOrReportsItsAccuracy) {
  Env env;
  Options opts;
  EXPECT_EQ(code_of(tessera_session_options_set_precision(opts.o, "int8")), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_session_options_set_accuracy_budget(opts.o, "cos=2")), TESSERA_CODE_INVALID_ARGUMENT);
  std::string msg;
  __builtin_cpu_init();
  const char* isa = std::getenv("TESSERA_ISA");
  const bool avx2_only = isa && std::string(isa) == "avx2";
  unsigned a = 0, b = 0, c = 0, d = 0;  // AVX512-FP16: CPUID leaf 7, EDX bit 23
  const bool fp16 = !avx2_only && __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && (d & (1u << 23)) != 0 &&
                    __builtin_cpu_supports("avx512f");
  if (fp16) {
    ASSERT_OK(tessera_session_options_set_precision(opts.o, "fp16"));
  } else {
    EXPECT_EQ(code_of(tessera_session_options_set_precision(opts.o, "fp16"), &msg), TESSERA_CODE_UNSUPPORTED);
    EXPECT_NE(msg.find("fp16"), std::string::npos) << msg;
  }
  // A native session compiles nothing: an empty accuracy line.
  {
    NativeSession n("mlp", {"input"});
    char* line = nullptr;
    ASSERT_OK(tessera_session_report(n.s.s, TESSERA_FORMAT_ACCURACY_LINE, &line));
    EXPECT_STREQ(line, "");
    tessera_string_free(line);
  }
  const bool bf16 = __builtin_cpu_supports("avx512bf16") && !avx2_only;
  tessera_error_t* e = tessera_session_options_set_precision(opts.o, "bf16");
  if (!bf16) {
    EXPECT_EQ(code_of(e, &msg), TESSERA_CODE_UNSUPPORTED);
    EXPECT_NE(msg.find("BF16"), std::string::npos) << msg;
    return;
  }
  ASSERT_OK(e);
  ASSERT_OK(tessera_session_options_set_backends(opts.o, "dnnl,native"));
  ASSERT_OK(tessera_session_options_set_placement(opts.o, "priority"));  // oneDNN takes the nodes, even of a tiny model
  ASSERT_OK(tessera_session_options_set_tune(opts.o, TESSERA_TUNE_OFF));
  Session s;
  e = tessera_session_create(env.env, model_path("mlp").c_str(), opts.o, &s.s);
  if (e && std::string(tessera_error_message(e)).find("dnnl") != std::string::npos) {
    tessera_error_release(e);
    GTEST_SKIP() << "no dnnl plugin found";
  }
  ASSERT_OK(e);
  char* line = nullptr;
  ASSERT_OK(tessera_session_report(s.s, TESSERA_FORMAT_ACCURACY_LINE, &line));
  EXPECT_EQ(std::string(line).rfind("bf16 against fp32 (random inputs): ", 0), 0u) << line;
  EXPECT_NE(std::string(line).find("cosine 0.99"), std::string::npos) << line;
  tessera_string_free(line);
  ASSERT_OK(tessera_session_options_set_accuracy_budget(opts.o, "abs=0"));
  Session refused;
  EXPECT_EQ(code_of(tessera_session_create(env.env, model_path("mlp").c_str(), opts.o, &refused.s), &msg),
            TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("output '"), std::string::npos) << msg;
}

TEST(CApi, MisuseIsAnErrorNeverACrash) {
  Env env;
  std::string msg;
  EXPECT_EQ(code_of(tessera_env_create(nullptr)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_session_create(nullptr, "x.onnx", nullptr, nullptr)), TESSERA_CODE_INVALID_ARGUMENT);
  tessera_session_t* none = nullptr;
  EXPECT_EQ(code_of(tessera_session_create(env.env, nullptr, nullptr, &none)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_session_create(env.env, "/nonexistent/model.onnx", nullptr, &none), &msg), TESSERA_CODE_IO);
  EXPECT_NE(msg.find("/nonexistent/model.onnx"), std::string::npos) << msg;
  const char garbage[] = "definitely not a model";
  EXPECT_EQ(code_of(tessera_session_create_from_buffer(env.env, garbage, sizeof garbage, nullptr, &none)),
            TESSERA_CODE_INVALID_MODEL);
  EXPECT_EQ(code_of(tessera_session_create_from_buffer(env.env, nullptr, 0, nullptr, &none)),
            TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(code_of(tessera_session_run(nullptr, nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0)),
            TESSERA_CODE_INVALID_ARGUMENT);
  size_t n = 0;
  EXPECT_EQ(code_of(tessera_session_input_count(nullptr, &n)), TESSERA_CODE_INVALID_ARGUMENT);
  tessera_io_info_t info{};
  EXPECT_EQ(code_of(tessera_session_input_info(nullptr, 0, &info)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_session_options_set_threads(nullptr, 1)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_run_options_cancel(nullptr)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_compile(env.env, nullptr, nullptr, nullptr)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_inspect_artifact(nullptr, nullptr)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(tessera_value_dtype(nullptr), 0);
  EXPECT_EQ(tessera_value_data(nullptr), nullptr);

  Options opts;
  EXPECT_EQ(code_of(tessera_session_options_set_threads(opts.o, -1)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_session_options_set_placement(opts.o, "fastest")), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_session_options_set_bucket_step(opts.o, -1)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_session_options_set_bucket_step(opts.o, 0)), TESSERA_CODE_OK);
  EXPECT_EQ(code_of(tessera_session_options_set_bucket_step(nullptr, 32)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_session_options_add_place(opts.o, "no-equals-sign")), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_session_options_set_shape(opts.o, "x", nullptr, 2)), TESSERA_CODE_INVALID_ARGUMENT);
  const int64_t huge[] = {int64_t{1} << 40, int64_t{1} << 40};
  EXPECT_EQ(code_of(tessera_session_options_set_shape(opts.o, "x", huge, 2)), TESSERA_CODE_INVALID_ARGUMENT);

  // Values.
  tessera_value_t* v = nullptr;
  const int64_t dims[] = {2, 3};
  float data[6] = {};
  EXPECT_EQ(code_of(tessera_value_create(999, dims, 2, &v)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_value_create(TESSERA_DTYPE_FLOAT32, huge, 2, &v)), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(tessera_value_wrap(TESSERA_DTYPE_FLOAT32, dims, 2, data, 5 * sizeof(float), &v), &msg),
            TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("size_bytes"), std::string::npos) << msg;
  EXPECT_EQ(code_of(tessera_value_wrap(TESSERA_DTYPE_FLOAT32, dims, 2, nullptr, sizeof data, &v)),
            TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(v, nullptr);

  // Runs with wrong inputs and outputs.
  ASSERT_OK(tessera_session_options_set_backends(opts.o, "native"));
  Session s;
  ASSERT_OK(tessera_session_create(env.env, model_path("mlp").c_str(), opts.o, &s.s));
  EXPECT_EQ(code_of(tessera_session_input_info(s.s, 5, &info), &msg), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
  std::vector<float> x(256, 0.5f);
  const int64_t xd[] = {1, 256};
  tessera_value_t* good = nullptr;
  ASSERT_OK(tessera_value_wrap(TESSERA_DTYPE_FLOAT32, xd, 2, x.data(), x.size() * sizeof(float), &good));
  std::vector<int64_t> xi(256, 1);
  tessera_value_t* wrong_dtype = nullptr;
  ASSERT_OK(tessera_value_wrap(TESSERA_DTYPE_INT64, xd, 2, xi.data(), xi.size() * sizeof(int64_t), &wrong_dtype));
  const int64_t bad_dims[] = {2, 128};
  tessera_value_t* wrong_shape = nullptr;
  ASSERT_OK(tessera_value_wrap(TESSERA_DTYPE_FLOAT32, bad_dims, 2, x.data(), x.size() * sizeof(float), &wrong_shape));
  const char* in_name[] = {"input"};
  const char* bad_name[] = {"nope"};
  const char* twice[] = {"input", "input"};
  const tessera_value_t* two[] = {good, good};
  tessera_value_t* out[1] = {nullptr};
  auto run = [&](const char* const* names, const tessera_value_t* const* vals, size_t n_in, const char* const* onames,
                 size_t n_out) {
    out[0] = nullptr;
    return code_of(tessera_session_run(s.s, nullptr, names, vals, n_in, onames, out, n_out), &msg);
  };
  const tessera_value_t* one_wrong_dtype[] = {wrong_dtype};
  const tessera_value_t* one_wrong_shape[] = {wrong_shape};
  const tessera_value_t* one_null[] = {nullptr};
  EXPECT_EQ(run(in_name, one_wrong_dtype, 1, nullptr, 1), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("input"), std::string::npos) << msg;
  EXPECT_EQ(run(in_name, one_wrong_shape, 1, nullptr, 1), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(run(bad_name, two, 1, nullptr, 1), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("nope"), std::string::npos) << msg;
  EXPECT_EQ(run(twice, two, 2, nullptr, 1), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(run(in_name, one_null, 1, nullptr, 1), TESSERA_CODE_INVALID_ARGUMENT);
  EXPECT_EQ(run(nullptr, nullptr, 0, nullptr, 1), TESSERA_CODE_INVALID_ARGUMENT);  // input missing
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
  EXPECT_EQ(run(in_name, two, 1, nullptr, 3), TESSERA_CODE_INVALID_ARGUMENT);   // wrong output count
  EXPECT_EQ(run(in_name, two, 1, bad_name, 1), TESSERA_CODE_INVALID_ARGUMENT);  // unknown output
  EXPECT_EQ(out[0], nullptr);
  EXPECT_EQ(run(in_name, two, 1, nullptr, 1), TESSERA_CODE_OK);
  tessera_value_release(out[0]);
  tessera_value_release(good);
  tessera_value_release(wrong_dtype);
  tessera_value_release(wrong_shape);
}

}  // namespace
