// The tessera command line. Contract (see the README and the design):
//   tessera compile MODEL.onnx -o OUT.tsr [--backends L] [--shape N=D,..] [--place K=B] ...
//   tessera run MODEL(.onnx|.tsr) [--input-dir DIR --output-dir DIR] [--backends L] [--threads N] [--trace F]
//   tessera check CASE_DIR [--backends L] [--rtol R] [--atol A]
//   tessera bench MODEL [--backends L] [--threads N] [--runs R] [--warmup W] [--json] [--profile] [--trace F]
//   tessera partition MODEL [--backends L] [--json] [--dot F] [--svg F]
//   tessera inspect OUT.tsr [--json]
// Exit codes: 0 success, 1 a run or check failed, 2 bad input (with a
// one-line message on stderr).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "cli.h"
#include "api/profile.h"
#include "onnx/onnx_import.h"
#include "runtime/session.h"

namespace fs = std::filesystem;
using namespace tessera;
using namespace tessera::cli;

namespace {

Expected<std::vector<Tensor>> read_inputs(const std::string& dir, const InferenceSession& s) {
  if (!fs::is_directory(dir)) return IoError("input directory '" + dir + "' does not exist");
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < s.inputs().size(); ++i) {
    std::string path = dir + "/input_" + std::to_string(i) + ".pb";
    if (!fs::exists(path)) {
      return InvalidInput("input '" + s.inputs()[i].name + "' is missing: no file '" + path + "'");
    }
    Tensor t;
    TSR_ASSIGN_OR_RETURN(t, read_tensor_file(path));
    inputs.push_back(std::move(t));
  }
  std::string extra = dir + "/input_" + std::to_string(s.inputs().size()) + ".pb";
  if (fs::exists(extra)) {
    return InvalidInput("'" + extra + "': the model has only " + std::to_string(s.inputs().size()) + " inputs");
  }
  return inputs;
}

void print_summary(const std::string& name, const Tensor& t) {
  std::printf("  %s: %s", name.c_str(), t.str().c_str());
  int64_t n = std::min<int64_t>(t.numel(), 8);
  if (t.dtype() != DType::kUndefined) {
    std::printf(" [");
    for (int64_t i = 0; i < n; ++i) std::printf("%s%.6g", i ? ", " : "", t.as_double(i));
    std::printf("%s]", t.numel() > n ? ", ..." : "");
  }
  std::printf("\n");
}

int cmd_run(const Args& a) {
  if (a.positional.size() != 1) return usage_error("run: expected exactly one MODEL argument");
  // Random inputs are for trying a model out; results written to files must
  // come from real inputs.
  if (a.opts.count("--output-dir") && !a.opts.count("--input-dir")) {
    return usage_error("run: --output-dir needs --input-dir (without both, run prints outputs for random inputs)");
  }
  // --trace profiles the run: engines report their steps (and wait for each).
  const bool trace = a.opts.count("--trace") > 0;
  if (trace) {
    if (Status st = check_trace_path(a.opts.at("--trace")); !st.ok()) return fail(st);
  }
  RegionNodes region_nodes;
  auto session = trace ? open_profiled_session(a.positional[0], a, &region_nodes) : open_session(a.positional[0], a);
  if (!session.ok()) return fail(session.status());
  const InferenceSession& s = **session;
  std::vector<Tensor> inputs;
  if (auto it = a.opts.find("--input-dir"); it != a.opts.end()) {
    auto r = read_inputs(it->second, s);
    if (!r.ok()) return fail(r.status());
    inputs = std::move(r).value();
  } else {
    auto r = random_inputs(s, 42);
    if (!r.ok()) return fail(r.status());
    inputs = std::move(r).value();
  }
  std::vector<RunProfile> profile(trace ? 1 : 0);
  auto t0 = std::chrono::steady_clock::now();
  auto out = s.run(inputs, trace ? &profile[0] : nullptr);
  auto t1 = std::chrono::steady_clock::now();
  if (!out.ok()) return fail(out.status());
  if (trace) {
    Status st = write_trace(a.opts.at("--trace"), "tessera run " + a.positional[0], profile,
                            {profile_items(s, profile[0], region_nodes)}, s);
    if (!st.ok()) return fail(st);
  }
  if (auto it = a.opts.find("--output-dir"); it != a.opts.end()) {
    std::error_code ec;
    fs::create_directories(it->second, ec);
    for (size_t i = 0; i < out->size(); ++i) {
      Status st = write_tensor_file(it->second + "/output_" + std::to_string(i) + ".pb", (*out)[i], s.outputs()[i].name);
      if (!st.ok()) return fail(st);
    }
  } else {
    std::printf("outputs (%.3f ms):\n", std::chrono::duration<double, std::milli>(t1 - t0).count());
    for (size_t i = 0; i < out->size(); ++i) print_summary(s.outputs()[i].name, (*out)[i]);
  }
  return 0;
}

// ONNX backend-test comparison: |actual - expected| <= atol + rtol * |expected|,
// NaN matches NaN, infinities must match exactly, integers exactly.
std::string compare(const Tensor& expected, const Tensor& actual, double rtol, double atol) {
  if (expected.dtype() != actual.dtype()) {
    return std::string("dtype ") + dtype_name(actual.dtype()) + ", expected " + dtype_name(expected.dtype());
  }
  if (expected.dims() != actual.dims()) return "shape " + dims_str(actual.dims()) + ", expected " + dims_str(expected.dims());
  bool is_float = dtype_is_float(expected.dtype());
  int64_t bad = 0, first_bad = -1;
  double worst = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    double e = expected.as_double(i), v = actual.as_double(i);
    bool ok;
    if (!is_float) ok = expected.as_int64(i) == actual.as_int64(i) && e == v;
    else if (std::isnan(e)) ok = std::isnan(v);
    else if (std::isinf(e)) ok = e == v;
    else ok = std::fabs(v - e) <= atol + rtol * std::fabs(e);
    if (!ok) {
      if (first_bad < 0) first_bad = i;
      ++bad;
      if (!std::isnan(v)) worst = std::max(worst, std::fabs(v - e));
      else worst = INFINITY;
    }
  }
  if (bad == 0) return "";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%lld of %lld values differ (max abs diff %.3g; first at %lld: got %.9g, expected %.9g)",
                static_cast<long long>(bad), static_cast<long long>(expected.numel()), worst,
                static_cast<long long>(first_bad), actual.as_double(first_bad), expected.as_double(first_bad));
  return buf;
}

// ONNX's test data (numpy has no bfloat16) stores bfloat16 tensors as uint16
// bit patterns; read them back as the bfloat16 the model declares.
Tensor as_bfloat16_if_stored_as_uint16(const Tensor& t, DType declared) {
  if (declared != DType::kBFloat16 || t.dtype() != DType::kUInt16) return t;
  Tensor bf(DType::kBFloat16, t.dims());
  std::memcpy(bf.raw(), t.raw(), t.nbytes());
  return bf;
}

int cmd_check(const Args& a) {
  if (a.positional.size() != 1) return usage_error("check: expected exactly one CASE_DIR argument");
  std::string dir = a.positional[0];
  auto rtol = float_opt(a, "--rtol", 1e-3);
  auto atol = float_opt(a, "--atol", 1e-7);
  if (!rtol.ok()) return fail(rtol.status());
  if (!atol.ok()) return fail(atol.status());
  if (!fs::is_directory(dir)) return fail(IoError("case directory '" + dir + "' does not exist"));
  std::string model = a.opts.count("--model") ? a.opts.at("--model") : dir + "/model.onnx";
  auto session = open_session(model, a);
  if (!session.ok()) return fail(session.status());
  const InferenceSession& s = **session;
  // Which external engines share the work (the conformance runner counts them per backend).
  if (!s.engines().empty()) {
    std::map<std::string, int> per_backend;
    for (const auto& e : s.engines()) per_backend[e->backend().name()]++;
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
  if (sets.empty()) return fail(InvalidInput("case '" + dir + "' has no test_data_set_* directory"));
  int failures = 0;
  for (const auto& set : sets) {
    auto inputs = read_inputs(set, s);
    if (!inputs.ok()) return fail(inputs.status());
    for (size_t i = 0; i < inputs->size(); ++i) {
      (*inputs)[i] = as_bfloat16_if_stored_as_uint16((*inputs)[i], s.inputs()[i].dtype);
    }
    auto out = s.run(*inputs);
    if (!out.ok()) {
      std::fprintf(stderr, "tessera: error: %s: %s\n", set.c_str(), out.status().message().c_str());
      return out.status().exit_code() == 2 ? 2 : 1;
    }
    for (size_t i = 0; i < out->size(); ++i) {
      std::string path = set + "/output_" + std::to_string(i) + ".pb";
      auto expected = read_tensor_file(path);
      if (!expected.ok()) return fail(expected.status());
      std::string diff =
          compare(as_bfloat16_if_stored_as_uint16(*expected, (*out)[i].dtype()), (*out)[i], *rtol, *atol);
      if (!diff.empty()) {
        std::printf("FAIL %s output %zu '%s': %s\n", fs::path(set).filename().c_str(), i, s.outputs()[i].name.c_str(),
                    diff.c_str());
        ++failures;
      }
    }
  }
  if (failures) return 1;
  std::printf("PASS %s (%zu data sets)\n", dir.c_str(), sets.size());
  return 0;
}

// Bench's profiled runs, after the timed ones so that the median is a plain
// run's: --profile summarises them (medians per node), --trace writes the
// first kMaxTraceRuns of them.
constexpr int kMaxTraceRuns = 20;

int cmd_bench(const Args& a) {
  if (a.positional.size() != 1) return usage_error("bench: expected exactly one MODEL argument");
  auto runs = int_opt(a, "--runs", 20, 1);
  auto warmup = int_opt(a, "--warmup", 3, 0);
  if (!runs.ok()) return fail(runs.status());
  if (!warmup.ok()) return fail(warmup.status());
  const bool trace = a.opts.count("--trace") > 0;
  if (trace) {
    if (Status st = check_trace_path(a.opts.at("--trace")); !st.ok()) return fail(st);
  }
  RegionNodes region_nodes;  // op types of the nodes inside engine regions, for the profile
  auto load_start = std::chrono::steady_clock::now();
  auto session = a.profile || trace ? open_profiled_session(a.positional[0], a, &region_nodes)
                                    : open_session(a.positional[0], a);
  if (!session.ok()) return fail(session.status());
  double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - load_start).count();
  const InferenceSession& s = **session;
  auto inputs = random_inputs(s, 42);
  if (!inputs.ok()) return fail(inputs.status());
  for (int64_t i = 0; i < *warmup; ++i) {
    auto out = s.run(*inputs);
    if (!out.ok()) return fail(out.status());
  }
  std::vector<double> ms;
  for (int64_t i = 0; i < *runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto out = s.run(*inputs);
    auto t1 = std::chrono::steady_clock::now();
    if (!out.ok()) return fail(out.status());
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
    std::vector<RunProfile> profiles(static_cast<size_t>(*runs));
    std::vector<std::vector<ProfileItem>> items;
    for (auto& p : profiles) {
      auto out = s.run(*inputs, &p);
      if (!out.ok()) return fail(out.status());
      items.push_back(profile_items(s, p, region_nodes));
    }
    if (a.profile) {
      ProfileSummary summary = summarize(items);
      if (a.json) profile_json_obj = profile_json(summary);
      else print_profile_text(summary);
    }
    if (trace) {
      const size_t n = std::min<size_t>(profiles.size(), kMaxTraceRuns);
      profiles.resize(n);
      items.resize(n);
      Status st = write_trace(a.opts.at("--trace"), "tessera bench " + a.positional[0], profiles, items, s);
      if (!st.ok()) return fail(st);
    }
  }
  std::vector<Dims> dims;
  for (const auto& t : *inputs) dims.push_back(t.dims());
  auto stats = s.stats(dims);
  size_t arena = stats.ok() ? stats->arena_bytes : 0;
  std::string backends = a.opts.count("--backends") ? a.opts.at("--backends") : "default";
  if (a.json) {
    std::printf(
        "{\"model\": \"%s\", \"median_ms\": %.4f, \"min_ms\": %.4f, \"mean_ms\": %.4f, \"max_ms\": %.4f, "
        "\"runs\": %lld, \"warmup\": %lld, \"threads\": %d, \"backends\": \"%s\", \"arena_bytes\": %zu, "
        "\"engines\": %zu, \"load_ms\": %.3f%s%s}\n",
        a.positional[0].c_str(), median, sorted.front(), mean, sorted.back(), static_cast<long long>(*runs),
        static_cast<long long>(*warmup), s.num_threads(), backends.c_str(), arena, s.engines().size(), load_ms,
        profile_json_obj.empty() ? "" : ", \"profile\": ", profile_json_obj.c_str());
  } else {
    std::printf("%s: median %.3f ms, min %.3f ms, mean %.3f ms, max %.3f ms over %lld runs (%d threads, backends %s, "
                "arena %.2f MiB, %zu engines, loaded in %.1f ms)\n",
                a.positional[0].c_str(), median, sorted.front(), mean, sorted.back(), static_cast<long long>(*runs),
                s.num_threads(), backends.c_str(), static_cast<double>(arena) / (1 << 20), s.engines().size(), load_ms);
  }
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
    std::printf("tessera %s\n", TESSERA_VERSION);
    return 0;
  }
  auto args = parse_args(argc, argv);
  if (!args.ok()) return fail(args.status());
  if (args->command == "--help") return 0;  // `tessera CMD --help` printed the command's help
  try {
    if (args->command == "run") return cmd_run(*args);
    if (args->command == "check") return cmd_check(*args);
    if (args->command == "bench") return cmd_bench(*args);
    if (args->command == "compile") return cmd_compile(*args);
    if (args->command == "partition") return cmd_partition(*args);
    if (args->command == "inspect") return cmd_inspect(*args);
  } catch (const std::bad_alloc&) {
    return fail(InvalidInput("out of memory (is a dimension in the model or input absurdly large?)"));
  } catch (const std::exception& e) {
    return fail(InternalError(e.what()));
  }
  return 0;
}
