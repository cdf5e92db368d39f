// The tessera command line. Contract (see the README and the design):
//   tessera compile MODEL.onnx -o OUT.tsr [--backends L] [--shape N=D,..] [--place K=B] ...
//   tessera run MODEL(.onnx|.tsr) [--input-dir DIR --output-dir DIR] [--backends L] [--threads N] [--trace F]
//   tessera check CASE_DIR.. [--backends L] [--rtol R] [--atol A]
//   tessera bench MODEL [--backends L] [--threads N] [--runs R] [--warmup W] [--json] [--profile] [--trace F]
//   tessera partition MODEL [--backends L] [--json] [--dot F] [--svg F]
//   tessera inspect OUT.tsr [--json]
// Exit codes: 0 success, 1 a run or check failed, 2 bad input (with a
// one-line message on stderr).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <new>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"

namespace fs = std::filesystem;
using namespace tessera;
using namespace tessera::cli;

namespace {

// The exit code for an error: 2 for bad input, 1 for a failed run.
int fail_code(tessera_code_t code) {
  switch (code) {
    case TESSERA_CODE_INVALID_ARGUMENT:
    case TESSERA_CODE_INVALID_MODEL:
    case TESSERA_CODE_UNSUPPORTED:
    case TESSERA_CODE_IO:
      return 2;
    default:
      return 1;
  }
}

// Called inside a catch block of a std::exception: its exit code (fail_code of an Error's code; running out of
// memory is bad input, anything else a failed run) and its message on one line.
int current_error(std::string* message) {
  int code = 1;
  try {
    throw;
  } catch (const Error& e) {
    *message = e.what();
    code = fail_code(e.code());
  } catch (const std::bad_alloc&) {
    *message = "out of memory (is a dimension in the model or input absurdly large?)";
    code = 2;
  } catch (const std::exception& e) {
    *message = e.what();
  }
  std::replace(message->begin(), message->end(), '\n', ' ');
  return code;
}

// input_<i>.pb of DIR for every input of the session, in graph order.
std::vector<Value> read_inputs(const std::string& dir, const std::vector<IoInfo>& inputs) {
  if (!fs::is_directory(dir)) throw Error(TESSERA_CODE_IO, "input directory '" + dir + "' does not exist");
  std::vector<Value> values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string path = dir + "/input_" + std::to_string(i) + ".pb";
    if (!fs::exists(path)) usage_error("input '" + inputs[i].name + "' is missing: no file '" + path + "'");
    values.push_back(Value::ReadFile(path));
  }
  std::string extra = dir + "/input_" + std::to_string(inputs.size()) + ".pb";
  if (fs::exists(extra)) {
    usage_error("'" + extra + "': the model has only " + std::to_string(inputs.size()) + " inputs");
  }
  return values;
}

// The session's inputs named, for Session::Run.
std::vector<std::pair<std::string, const Value*>> named(const std::vector<IoInfo>& infos,
                                                        const std::vector<Value>& values) {
  std::vector<std::pair<std::string, const Value*>> r;
  for (size_t i = 0; i < infos.size(); ++i) r.emplace_back(infos[i].name, &values[i]);
  return r;
}

// The input dims the model leaves open, "x dim 2, x dim 3", leaving out the inputs --shape names (`given`): what
// random inputs size at the low end of the compiled range, or 1.
std::string symbolic_dims(const std::vector<IoInfo>& ins, const std::vector<std::string>& given) {
  std::string open;
  for (const IoInfo& in : ins) {
    if (std::any_of(given.begin(), given.end(),
                    [&](const std::string& spec) { return spec.rfind(in.name + "=", 0) == 0; })) {
      continue;
    }
    for (size_t d = 0; d < in.dims.size(); ++d) {
      if (in.dims[d] < 0) open += (open.empty() ? "" : ", ") + in.name + " dim " + std::to_string(d);
    }
  }
  return open;
}

// Runs on random inputs. When that fails and an input has symbolic dims (random inputs give each the low end of its
// compiled range, or 1), the error says so and how to give sizes that work.
std::vector<Value> run_random(Session& s, const std::vector<IoInfo>& ins,
                              const std::vector<std::pair<std::string, const Value*>>& args, const RunOptions* ro) {
  try {
    return s.Run(args, {}, ro);
  } catch (const Error& e) {
    const std::string symbolic = symbolic_dims(ins, {});
    if (symbolic.empty()) throw;
    throw Error(e.code(), std::string(e.what()) + " (random inputs sized the symbolic dims (" + symbolic +
                              ") at the low end of their compiled range, or 1: give real inputs with --input-dir, "
                              "or sizes with --shape NAME=D0,D1,..)");
  }
}

// bench on random inputs of a model whose input dims are left to run time: says which dims took size 1 (or their
// range's low end), as the time is then for that size. Inputs --shape names (`shapes`) have the sizes given.
void warn_unsized(const std::vector<IoInfo>& ins, const std::vector<std::string>& shapes) {
  const std::string symbolic = symbolic_dims(ins, shapes);
  if (symbolic.empty()) return;
  std::fprintf(stderr,
               "tessera: warning: random inputs size the symbolic dims (%s) at the low end of their compiled range, "
               "or 1: the times are for that size; give --shape NAME=D0,D1,.. or --input-dir\n",
               symbolic.c_str());
}

// Fails early, before a model is loaded, on a trace path that cannot be written.
void check_trace_path(const std::string& path) { RunOptions().TracePath(path); }

int cmd_run(const Args& a) {
  if (a.positional.size() != 1) usage_error("run: expected exactly one MODEL argument");
  // Random inputs are for trying a model out; results written to files must
  // come from real inputs.
  if (a.opts.count("--output-dir") && !a.opts.count("--input-dir")) {
    usage_error("run: --output-dir needs --input-dir (without both, run prints outputs for random inputs)");
  }
  // --trace profiles the run: engines report their steps (and wait for each).
  const bool trace = a.opts.count("--trace") > 0;
  if (trace) check_trace_path(a.opts.at("--trace"));
  const Env env = make_env();
  const SessionOptions opts = session_options(a, false);
  Session s(env, a.positional[0], &opts);
  const std::vector<IoInfo> ins = s.Inputs(), outs = s.Outputs();
  const auto it = a.opts.find("--input-dir");
  const bool random = it == a.opts.end();
  const std::vector<Value> inputs = random ? s.RandomInputs(42) : read_inputs(it->second, ins);
  Profile profile;
  RunOptions ro;
  if (trace) ro.SetProfile(&profile);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Value> out = random ? run_random(s, ins, named(ins, inputs), &ro) : s.Run(named(ins, inputs), {}, &ro);
  auto t1 = std::chrono::steady_clock::now();
  if (trace) profile.WriteTrace("tessera run " + a.positional[0], a.opts.at("--trace"), 1);
  if (auto od = a.opts.find("--output-dir"); od != a.opts.end()) {
    std::error_code ec;
    fs::create_directories(od->second, ec);
    for (size_t i = 0; i < out.size(); ++i) {
      out[i].WriteFile(od->second + "/output_" + std::to_string(i) + ".pb", outs[i].name);
    }
  } else {
    std::printf("outputs (%.3f ms):\n", std::chrono::duration<double, std::milli>(t1 - t0).count());
    for (size_t i = 0; i < out.size(); ++i) std::printf("  %s: %s\n", outs[i].name.c_str(), out[i].Describe(8).c_str());
  }
  return 0;
}

// ONNX's test data (numpy has no bfloat16) stores bfloat16 tensors as uint16
// bit patterns: read them back as the bfloat16 the model declares (a view of
// the same memory).
Value as_bfloat16_if_stored_as_uint16(Value& t, int32_t declared) {
  if (declared != TESSERA_DTYPE_BFLOAT16 || t.DType() != TESSERA_DTYPE_UINT16) return Value();
  return Value::WrapRaw(TESSERA_DTYPE_BFLOAT16, t.Dims(), t.RawData(), t.SizeBytes());
}

// Runs one ONNX backend test case on `env`: prints "engines: B=N .." (which external engines share the work; the
// conformance runner counts them per backend) and a FAIL line per output that differs; returns the first of those
// ("" when all match). An error (bad case, failed run) is thrown, the data set named.
std::string check_case(const Env& env, const SessionOptions& opts, const std::string& dir, const std::string& model,
                       double rtol, double atol) {
  if (!fs::is_directory(dir)) throw Error(TESSERA_CODE_IO, "case directory '" + dir + "' does not exist");
  Session s(env, model, &opts);
  const std::vector<IoInfo> ins = s.Inputs(), outs = s.Outputs();
  if (const std::vector<std::string> engines = s.EngineBackends(); !engines.empty()) {
    std::map<std::string, int> per_backend;
    for (const auto& b : engines) per_backend[b]++;
    std::printf("engines:");
    for (const auto& [name, count] : per_backend) std::printf(" %s=%d", name.c_str(), count);
    std::printf("\n");
  }
  std::vector<std::string> sets;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n.rfind("test_data_set_", 0) == 0 && fs::is_directory(e.path())) sets.push_back(e.path().string());
  }
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) usage_error("case '" + dir + "' has no test_data_set_* directory");
  std::string first;
  for (const auto& set : sets) {
    std::vector<Value> inputs = read_inputs(set, ins);
    std::vector<Value> views(inputs.size());
    std::vector<std::pair<std::string, const Value*>> args;
    for (size_t i = 0; i < inputs.size(); ++i) {
      views[i] = as_bfloat16_if_stored_as_uint16(inputs[i], ins[i].dtype);
      args.emplace_back(ins[i].name, views[i] ? &views[i] : &inputs[i]);
    }
    std::vector<Value> out;
    try {
      out = s.Run(args);
    } catch (const Error& e) {
      throw Error(e.code(), set + ": " + e.what());  // which data set failed
    }
    for (size_t i = 0; i < out.size(); ++i) {
      Value expected = Value::ReadFile(set + "/output_" + std::to_string(i) + ".pb");
      Value view = as_bfloat16_if_stored_as_uint16(expected, out[i].DType());
      std::string diff = out[i].CompareTo(view ? view : expected, rtol, atol);
      if (diff.empty()) continue;
      const std::string line =
          fs::path(set).filename().string() + " output " + std::to_string(i) + " '" + outs[i].name + "': " + diff;
      std::printf("FAIL %s\n", line.c_str());
      if (first.empty()) first = line;
    }
  }
  if (first.empty()) std::printf("PASS %s (%zu data sets)\n", dir.c_str(), sets.size());
  return first;
}

// check CASE_DIR..: one case as before (an error ends it with its exit code). Several cases share one Env (the
// plugins load once: most of a small case's time) and each ends with one line, "PASS DIR (N data sets)" or
// "FAIL DIR: REASON", flushed, so that a runner can tell where a process that died stopped. Exits 0 only if every
// case passed, 2 if any case was bad input, else 1.
int cmd_check(const Args& a) {
  if (a.positional.empty()) usage_error("check: expected a CASE_DIR argument");
  if (a.positional.size() > 1 && a.opts.count("--model")) usage_error("check: --model takes exactly one CASE_DIR");
  const double rtol = float_opt(a, "--rtol", 1e-3);
  const double atol = float_opt(a, "--atol", 1e-7);
  const Env env = make_env();
  const SessionOptions opts = session_options(a, false);
  if (a.positional.size() == 1) {
    const std::string& dir = a.positional[0];
    const std::string model = a.opts.count("--model") ? a.opts.at("--model") : dir + "/model.onnx";
    return check_case(env, opts, dir, model, rtol, atol).empty() ? 0 : 1;
  }
  int worst = 0;
  for (const std::string& dir : a.positional) {
    int code = 0;
    try {
      if (const std::string differ = check_case(env, opts, dir, dir + "/model.onnx", rtol, atol); !differ.empty()) {
        std::printf("FAIL %s: %s\n", dir.c_str(), differ.c_str());
        code = 1;
      }
    } catch (const std::exception&) {
      std::string msg;
      code = current_error(&msg);
      std::printf("FAIL %s: %s\n", dir.c_str(), msg.c_str());
    }
    std::fflush(stdout);
    worst = std::max(worst, code);
  }
  return worst;
}

// Bench's profiled runs, after the timed ones so that the median is a plain
// run's: --profile summarises them (medians per node), --trace writes the
// first kMaxTraceRuns of them.
constexpr size_t kMaxTraceRuns = 20;

// A field of /proc/self/status in MiB (VmRSS: resident now, VmHWM: the most resident so far); -1 where the system
// has no such file.
double proc_status_mib(const char* field) {
  std::ifstream f("/proc/self/status");
  const size_t n = std::strlen(field);
  for (std::string line; std::getline(f, line);)
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':')
      return std::atof(line.c_str() + n + 1) / 1024.0;
  return -1;
}

// One request of a --shapes-from stream: per input, the dims given (empty: the shape random inputs take).
struct ShapeRequest {
  std::vector<std::vector<int64_t>> dims;
  std::string key;  // the line, normalised: requests of one shape share it
};

// FILE: one request per line, "NAME=D0,D1,.. [NAME=D0,..]" (inputs not named keep the shape random inputs take);
// blank lines and lines starting with '#' are skipped.
std::vector<ShapeRequest> read_shape_stream(const std::string& path, const std::vector<IoInfo>& ins) {
  std::ifstream f(path);
  if (!f) throw Error(TESSERA_CODE_IO, "--shapes-from: cannot open '" + path + "'");
  std::vector<ShapeRequest> out;
  std::string line;
  for (int no = 1; std::getline(f, line); ++no) {
    std::istringstream words(line);
    std::string w;
    ShapeRequest r;
    r.dims.resize(ins.size());
    const std::string where = path + ":" + std::to_string(no) + ": ";
    while (words >> w) {
      if (w[0] == '#') break;
      const size_t eq = w.find('=');
      size_t i = 0;
      while (i < ins.size() && (eq == std::string::npos || ins[i].name != w.substr(0, eq))) ++i;
      if (i == ins.size()) usage_error(where + "expected NAME=D0,D1,.. naming a model input, got '" + w + "'");
      std::vector<int64_t> dims;
      std::istringstream list(w.substr(eq + 1));
      for (std::string tok; std::getline(list, tok, ',');) {
        char* end = nullptr;
        const long long v = std::strtoll(tok.c_str(), &end, 10);
        if (tok.empty() || *end != '\0' || v < 0) usage_error(where + "bad dimension '" + tok + "' in '" + w + "'");
        dims.push_back(v);
      }
      r.dims[i] = dims;
      r.key += w + " ";
    }
    if (!r.key.empty()) out.push_back(std::move(r));
  }
  if (out.empty()) usage_error("--shapes-from: '" + path + "' holds no request");
  return out;
}

// bench --shapes-from: replays the stream once (after --warmup requests of it) and reports latency percentiles over
// every request, how many waited for a plan of their shape (a shape new to the session, or one evicted) and how many
// ran on the shape-generic plan (a shape without a plan of its own: seen once, or being planned in the background).
int bench_shape_stream(const Args& a, Session& s, double load_ms) {
  const std::vector<IoInfo> ins = s.Inputs();
  const std::vector<ShapeRequest> stream = read_shape_stream(a.opts.at("--shapes-from"), ins);
  const double loaded_mib = proc_status_mib("VmRSS");  // the libraries, the weights, the engines compiled ahead
  const std::vector<Value> random = s.RandomInputs(42);
  uint32_t state = 12345;
  // The request's inputs: `made` holds those of the sizes it names; the others are the random inputs, shared.
  auto inputs_for = [&](const ShapeRequest& r, std::vector<Value>* made) {
    made->clear();
    made->reserve(ins.size());
    std::vector<std::pair<std::string, const Value*>> args;
    for (size_t i = 0; i < ins.size(); ++i) {
      if (r.dims[i].empty()) {
        args.emplace_back(ins[i].name, &random[i]);
        continue;
      }
      made->push_back(Value::Create(ins[i].dtype, r.dims[i]));
      if (ins[i].dtype == TESSERA_DTYPE_FLOAT32) {  // uniform in [-1, 1); other dtypes stay 0 (valid ids and masks)
        float* p = made->back().Data<float>();
        const size_t count = made->back().SizeBytes() / sizeof(float);
        for (size_t k = 0; k < count; ++k) {
          state = state * 1664525u + 1013904223u;
          p[k] = static_cast<float>(state >> 8) / static_cast<float>(1u << 23) - 1.f;
        }
      }
      args.emplace_back(ins[i].name, &made->back());
    }
    return args;
  };
  const int64_t warmup = std::min<int64_t>(int_opt(a, "--warmup", 0, 0), static_cast<int64_t>(stream.size()));
  std::set<std::string> seen;
  std::vector<Value> made;
  for (int64_t i = 0; i < warmup; ++i) {
    s.Run(inputs_for(stream[static_cast<size_t>(i)], &made));
    seen.insert(stream[static_cast<size_t>(i)].key);
  }
  std::vector<double> ms;
  const Session::PlanCounts before = s.Plans();
  for (const ShapeRequest& r : stream) {
    const auto args = inputs_for(r, &made);
    seen.insert(r.key);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      s.Run(args);
    } catch (const Error& e) {
      throw Error(e.code(), "request '" + r.key.substr(0, r.key.size() - 1) + "': " + e.what());
    }
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const Session::PlanCounts after = s.Plans();
  const unsigned long long waited = after.waited - before.waited, generic = after.generic - before.generic,
                           built = after.built - before.built, bucket = after.bucket - before.bucket,
                           compiled = after.compiled - before.compiled,
                           from_cache = after.from_cache - before.from_cache;
  const double total_s = std::accumulate(ms.begin(), ms.end(), 0.0) / 1e3;  // in runs, not making inputs
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  auto pct = [&](double p) {
    return sorted[std::min(sorted.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(sorted.size())))];
  };
  const double mean = total_s * 1e3 / static_cast<double>(ms.size());
  const double peak_mib = proc_status_mib("VmHWM");
  if (a.json) {
    std::string each;  // every request's latency, in stream order
    for (size_t i = 0; i < ms.size(); ++i) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.4f", i ? ", " : "", ms[i]);
      each += buf;
    }
    std::printf(
        "{\"model\": \"%s\", \"requests\": %zu, \"distinct_shapes\": %zu, \"waited_for_a_plan\": %llu, "
        "\"ran_generic\": %llu, \"ran_on_a_bucket\": %llu, \"plans_built\": %llu, \"buckets_compiled\": %llu, "
        "\"buckets_from_cache\": %llu, \"p50_ms\": %.4f, \"p99_ms\": %.4f, \"max_ms\": %.4f, "
        "\"mean_ms\": %.4f, \"requests_per_s\": %.2f, \"threads\": %d, \"load_ms\": %.3f, "
        "\"plan_cache_arena_bytes\": %llu, \"plan_cache_engine_bytes\": %llu, \"rss_loaded_mib\": %.1f, "
        "\"rss_peak_mib\": %.1f, \"latency_ms\": [%s]}\n",
        a.positional[0].c_str(), ms.size(), seen.size(), waited, generic, bucket, built, compiled, from_cache, pct(50),
        pct(99), sorted.back(), mean, static_cast<double>(ms.size()) / total_s, s.Threads(), load_ms,
        static_cast<unsigned long long>(after.arena_bytes), static_cast<unsigned long long>(after.engine_bytes),
        loaded_mib, peak_mib, each.c_str());
  } else {
    std::printf(
        "%s: %zu requests over %zu shapes: p50 %.3f ms, p99 %.3f ms, max %.3f ms, mean %.3f ms, %.1f requests/s "
        "(%d threads, loaded in %.1f ms); %llu waited for a plan of their shape, %llu ran on the shape-generic "
        "plan, %llu on a bucket's engines, %llu plans built (%llu buckets made in the background, %llu of them read "
        "from the engine cache); "
        "the plans held %.1f MiB at the end (arenas %.1f, buckets' engines %.1f); resident %.1f MiB once loaded, "
        "%.1f MiB at most\n",
        a.positional[0].c_str(), ms.size(), seen.size(), pct(50), pct(99), sorted.back(), mean,
        static_cast<double>(ms.size()) / total_s, s.Threads(), load_ms, waited, generic, bucket, built, compiled,
        from_cache, static_cast<double>(after.arena_bytes + after.engine_bytes) / 1048576.0,
        static_cast<double>(after.arena_bytes) / 1048576.0, static_cast<double>(after.engine_bytes) / 1048576.0,
        loaded_mib, peak_mib);
  }
  return 0;
}

int cmd_bench(const Args& a) {
  if (a.positional.size() != 1) usage_error("bench: expected exactly one MODEL argument");
  const int64_t runs = int_opt(a, "--runs", 20, 1);
  const int64_t warmup = int_opt(a, "--warmup", 3, 0);
  const bool trace = a.opts.count("--trace") > 0;
  if (trace) check_trace_path(a.opts.at("--trace"));
  const Env env = make_env();
  SessionOptions opts = session_options(a, false);
  const bool stream = a.opts.count("--shapes-from") > 0;
  // Timed at one shape, a model with symbolic dims gets the bucket for that shape (engines compiled for it, as a
  // session serving the shape gets once its runs have paid for the compile) at the first run, and the warm-up waits
  // for it: the timed runs are on what the shape runs on once warm, not on the native plan that serves it meanwhile.
  // Nothing else runs meanwhile, so its compile measures the candidates as `compile` does.
  if (!stream) opts.BucketPaybackMs(0).MeasureBuckets(true);
  auto load_start = std::chrono::steady_clock::now();
  Session s(env, a.positional[0], &opts);
  double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - load_start).count();
  if (stream) {
    if (a.profile || trace || a.opts.count("--runs")) usage_error("bench: --shapes-from times its stream once; "
                                                                   "it takes no --runs, --profile or --trace");
    return bench_shape_stream(a, s, load_ms);
  }
  const std::vector<IoInfo> ins = s.Inputs();
  // Timed on the inputs given (--input-dir), else on random ones.
  const auto dir = a.opts.find("--input-dir");
  const bool random = dir == a.opts.end();
  if (random) warn_unsized(ins, a.shapes);
  const std::vector<Value> inputs = random ? s.RandomInputs(42) : read_inputs(dir->second, ins);
  const auto args = named(ins, inputs);
  const auto first_start = std::chrono::steady_clock::now();
  if (random)
    run_random(s, ins, args, nullptr);
  else
    s.Run(args);
  s.WaitBackground();
  const Session::PlanCounts warm = s.Plans();
  const bool bucket_made = warm.compiled > 0;  // for this shape (the only one run), compiled or read from the cache
  const double warm_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - first_start).count();
  if (bucket_made && !a.json) {  // before the times: their line stays the last
    std::printf(
        "the warm-up %s this shape's bucket (the model compiled for it) in the background: %.2f s with the "
        "first run\n",
        warm.from_cache > 0 ? "read" : "compiled", warm_s);
  }
  for (int64_t i = 0; i < warmup; ++i) s.Run(args);
  std::vector<double> ms;
  for (int64_t i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    s.Run(args);
    auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted.size() % 2 ? sorted[sorted.size() / 2]
                                    : 0.5 * (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]);
  double mean = 0;
  for (double v : ms) mean += v;
  mean /= static_cast<double>(ms.size());
  std::string profile_json_obj;
  if (a.profile || trace) {
    Profile profile;
    RunOptions ro;
    ro.SetProfile(&profile);
    for (int64_t i = 0; i < runs; ++i) s.Run(args, {}, &ro);
    if (a.profile) {
      if (a.json) profile_json_obj = profile.Summary(TESSERA_FORMAT_JSON);
      else std::fputs(profile.Summary(TESSERA_FORMAT_TEXT).c_str(), stdout);
    }
    if (trace) profile.WriteTrace("tessera bench " + a.positional[0], a.opts.at("--trace"), kMaxTraceRuns);
  }
  const size_t arena = s.ArenaBytes(inputs);
  // The shapes timed ("x=1,3,48,500 mask=1,500"); in the text line only where the model leaves some dim open.
  std::string shapes;
  bool open_dims = false;
  for (size_t i = 0; i < ins.size(); ++i) {
    shapes += (i ? " " : "") + ins[i].name + "=";
    const std::vector<int64_t> dims = inputs[i].Dims();
    for (size_t d = 0; d < dims.size(); ++d) shapes += (d ? "," : "") + std::to_string(dims[d]);
    open_dims = open_dims || std::count(ins[i].dims.begin(), ins[i].dims.end(), -1) > 0 || ins[i].rank < 0;
  }
  const size_t engines = s.EngineBackends().size();
  std::string backends = a.opts.count("--backends") ? a.opts.at("--backends") : "default";
  // Below fp32, the in-memory compile measured each output's error against fp32.
  std::string accuracy;
  for (char c : s.RenderReport(TESSERA_FORMAT_ACCURACY_LINE)) {
    if (a.json && (c == '"' || c == '\\')) accuracy += '\\';  // a JSON string
    accuracy += c;
  }
  // Fewer threads than asked for: the compile measured the model faster on them (ProgramMeta::threads_best).
  const int asked_threads = s.ThreadsAsked();
  const std::string threads_note =
      s.Threads() < asked_threads ? " of " + std::to_string(asked_threads) + " asked for: faster at compile" : "";
  if (a.json) {
    std::printf(
        "{\"model\": \"%s\", \"median_ms\": %.4f, \"min_ms\": %.4f, \"mean_ms\": %.4f, \"max_ms\": %.4f, "
        "\"runs\": %lld, \"warmup\": %lld, \"threads\": %d, \"threads_asked\": %d, \"backends\": \"%s\", "
        "\"arena_bytes\": %zu, \"engines\": %zu, \"load_ms\": %.3f, \"input_shapes\": \"%s\", "
        "\"bucket_in_warmup\": %s, \"bucket_from_cache\": %s, \"first_run_s\": %.3f%s%s%s%s%s}\n",
        a.positional[0].c_str(), median, sorted.front(), mean, sorted.back(), static_cast<long long>(runs),
        static_cast<long long>(warmup), s.Threads(), asked_threads, backends.c_str(), arena, engines, load_ms,
        shapes.c_str(), bucket_made ? "true" : "false", warm.from_cache > 0 ? "true" : "false", warm_s,
        accuracy.empty() ? "" : ", \"accuracy\": \"", accuracy.c_str(), accuracy.empty() ? "" : "\"",
        profile_json_obj.empty() ? "" : ", \"profile\": ", profile_json_obj.c_str());
  } else {
    std::printf(
        "%s: median %.3f ms, min %.3f ms, mean %.3f ms, max %.3f ms over %lld runs%s%s (%d threads%s, "
        "backends %s, arena %.2f MiB, %zu engines, loaded in %.1f ms)\n",
        a.positional[0].c_str(), median, sorted.front(), mean, sorted.back(), static_cast<long long>(runs),
        open_dims ? " at " : "", open_dims ? shapes.c_str() : "", s.Threads(), threads_note.c_str(), backends.c_str(),
        static_cast<double>(arena) / (1 << 20), engines, load_ms);
    if (!accuracy.empty()) std::printf("accuracy: %s\n", accuracy.c_str());
  }
  return 0;
}

int dispatch(const Args& a) {
  if (a.command == "run") return cmd_run(a);
  if (a.command == "check") return cmd_check(a);
  if (a.command == "bench") return cmd_bench(a);
  if (a.command == "compile") return cmd_compile(a);
  if (a.command == "partition") return cmd_partition(a);
  if (a.command == "inspect") return cmd_inspect(a);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
                    std::strcmp(argv[1], "help") == 0)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (argc >= 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("tessera %s\n", Version().c_str());
    return 0;
  }
  try {
    const Args args = parse_args(argc, argv);
    if (args.command == "--help") return 0;  // `tessera CMD --help` printed the command's help
    return dispatch(args);
  } catch (const std::exception&) {
    std::string msg;
    const int code = current_error(&msg);
    std::fprintf(stderr, "tessera: error: %s\n", msg.c_str());
    return code;
  }
}
