#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "artifact/artifact.h"
#include "backends/backend.h"
#include "cli.h"
#include "api/profile.h"
#include "api/session_setup.h"
#include "onnx/onnx_import.h"
#include "partition/machine.h"
#include "partition/tune.h"
#include "passes/pipeline.h"
#include "util/env.h"

namespace fs = std::filesystem;

namespace tessera::cli {

const char* kUsage =
    "usage: tessera <command> [options]\n"
    "commands:\n"
    "  compile MODEL.onnx -o OUT.tsr [--backends LIST] [--shape NAME=D0,D1,..] [--place OP_OR_NODE=BACKEND]\n"
    "          [--min-region-nodes N] [--backend-options K=V;..] [--placement cost|priority] [--tune | --no-tune]\n"
    "          [--tune-budget SECONDS] [--tune-cache FILE] [--threads N]\n"
    "      partitions the model, compiles every engine ahead of time and writes one artifact; measures the nodes\n"
    "      and regions that matter on this machine (within --tune-budget, default 3 s) and keeps the times in the\n"
    "      tune cache for later compiles; --tune measures every candidate region, --no-tune (or TESSERA_TUNE=0)\n"
    "      nothing\n"
    "  run MODEL(.onnx|.tsr) [--input-dir DIR] [--output-dir DIR] [--backends LIST] [--threads N] [--shape ..]\n"
    "          [--trace FILE]\n"
    "      reads input_<i>.pb (ONNX TensorProto, graph input order) from DIR, or makes random inputs;\n"
    "      writes output_<i>.pb (graph output order) to --output-dir, else prints a summary; --trace writes the\n"
    "      run as a Chrome trace (chrome://tracing, Perfetto), with the steps inside engine regions\n"
    "  check CASE_DIR [--backends LIST] [--threads N] [--rtol R] [--atol A] [--model FILE]\n"
    "      runs an ONNX backend test case (model.onnx + test_data_set_*/) against its expected outputs;\n"
    "      --model runs another file (e.g. the case's model compiled to a .tsr) on the case's data\n"
    "  bench MODEL [--backends LIST] [--threads N] [--runs R] [--warmup W] [--shape NAME=D0,..] [--json] [--profile]\n"
    "          [--trace FILE]\n"
    "      times inference and prints the median; --profile adds time per op type and the slowest nodes, inside\n"
    "      engine regions too (under \"profile\" with --json); --trace writes the profiled runs (at most 20) as a\n"
    "      Chrome trace (docs/profiling.md)\n"
    "  partition MODEL [--backends LIST] [--shape ..] [--place ..] [--min-region-nodes N] [--placement ..]\n"
    "          [--tune | --no-tune] [--json] [--dot F] [--svg F]\n"
    "      placement report: one line per region with the backends considered and their costs, refusals grouped\n"
    "      by backend and reason, every measurement with the estimate made before it; Graphviz drawing\n"
    "  inspect OUT.tsr [--json]\n"
    "      what an artifact holds: sections, engines, sizes, versions, signature\n"
    "--backends lists the backends to use, such as dnnl,xnnpack,native (native always last; default: every backend\n"
    "found on TESSERA_BACKEND_PATH and in <tessera>/../lib/tessera). --placement cost (default) gives each region\n"
    "the backend with the least estimated or measured time, boundary copies included, and keeps the cheapest\n"
    "subset of the list; --placement priority takes the first backend in list order that runs a node. The tune\n"
    "cache is --tune-cache, else $TESSERA_TUNE_CACHE, else ~/.cache/tessera/tune.json (--tune-cache= for none).\n"
    "For a .tsr, the placement is the compiled one.\n";

int fail(const Status& st) {
  std::string msg = st.message();
  std::replace(msg.begin(), msg.end(), '\n', ' ');
  std::fprintf(stderr, "tessera: error: %s\n", msg.c_str());
  return st.exit_code();
}

int usage_error(const std::string& msg) { return fail(InvalidInput(msg)); }

namespace {

const std::vector<std::string> kCompileFlags = {"--backends",  "--shape",     "--place",      "--min-region-nodes",
                                                "--backend-options", "--threads", "--placement", "--tune-cache",
                                                "--tune-budget"};

// Flags that take a value, per command; `json` / `profile`: boolean flags.
struct CommandFlags {
  std::vector<std::string> values;
  bool json = false, profile = false, tune = false;  // --tune: compile and partition only
};

const std::map<std::string, CommandFlags>& command_flags() {
  static const std::map<std::string, CommandFlags> kFlags = [] {
    std::map<std::string, CommandFlags> m;
    m["run"] = {{"--input-dir", "--output-dir", "--trace"}, false, false};
    m["check"] = {{"--rtol", "--atol", "--model"}, false, false};
    m["bench"] = {{"--runs", "--warmup", "--trace"}, true, true};
    m["compile"] = {{"-o", "--output"}, false, false, true};
    m["partition"] = {{"--dot", "--svg"}, true, false, true};
    m["inspect"] = {{}, true, false};
    for (const char* c : {"run", "check", "bench", "compile", "partition"}) {
      auto& v = m[c].values;
      v.insert(v.end(), kCompileFlags.begin(), kCompileFlags.end());
    }
    return m;
  }();
  return kFlags;
}

}  // namespace

Expected<Args> parse_args(int argc, char** argv) {
  Args a;
  if (argc < 2) return InvalidInput("no command given\n" + std::string(kUsage));
  a.command = argv[1];
  auto it = command_flags().find(a.command);
  if (it == command_flags().end()) {
    return InvalidInput("unknown command '" + a.command + "' (commands: compile, run, check, bench, partition, inspect)");
  }
  const CommandFlags& flags = it->second;
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--json" && flags.json) {
      a.json = true;
    } else if (s == "--profile" && flags.profile) {
      a.profile = true;
    } else if (s == "--tune" && flags.tune) {
      a.tune = true;
    } else if (s == "--no-tune" && a.command != "inspect") {
      a.no_tune = true;
    } else if (s.rfind("-", 0) == 0 && s.size() > 1) {
      std::string key = s, value;
      bool inline_value = false;
      if (auto eq = s.find('='); eq != std::string::npos && s.rfind("--", 0) == 0) {
        key = s.substr(0, eq);
        value = s.substr(eq + 1);
        inline_value = true;
      }
      if (std::find(flags.values.begin(), flags.values.end(), key) == flags.values.end()) {
        return InvalidInput("unknown option '" + key + "' for '" + a.command + "'");
      }
      if (!inline_value) {
        if (i + 1 >= argc) return InvalidInput("option '" + key + "' needs a value");
        value = argv[++i];
      }
      if (key == "--output") key = "-o";
      if (key == "--shape") a.shapes.push_back(value);
      else if (key == "--place") a.places.push_back(value);
      else a.opts[key] = value;
    } else {
      a.positional.push_back(s);
    }
  }
  return a;
}

Expected<int64_t> int_opt(const Args& a, const std::string& key, int64_t def, int64_t min_value) {
  auto it = a.opts.find(key);
  if (it == a.opts.end()) return def;
  char* end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || v < min_value) {
    return InvalidInput("option " + key + " expects an integer >= " + std::to_string(min_value) + ", got '" +
                        it->second + "'");
  }
  return static_cast<int64_t>(v);
}

Expected<double> float_opt(const Args& a, const std::string& key, double def) {
  auto it = a.opts.find(key);
  if (it == a.opts.end()) return def;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0' || !(v >= 0)) {
    return InvalidInput("option " + key + " expects a non-negative number, got '" + it->second + "'");
  }
  return v;
}

Expected<Graph> load_graph(const std::string& path, const Args& a) {
  return api::load_graph(api::ModelSource{path, {}}, a.shapes, "this command");
}

MeasureMode measure_mode(const Args& a) {
  if (a.tune) return MeasureMode::kFull;
  if (a.no_tune) return MeasureMode::kOff;
  return api::default_measure();
}

Expected<api::CompileOptions> compile_options(const Args& a, bool progress) {
  api::CompileOptions o;
  o.backends = a.opts.count("--backends") ? a.opts.at("--backends") : "";
  o.shapes = a.shapes;
  o.places = a.places;
  if (auto it = a.opts.find("--placement"); it != a.opts.end()) {
    if (it->second == "priority") o.policy = PlacementPolicy::kPriority;
    else if (it->second != "cost") return InvalidInput("--placement expects cost or priority, got '" + it->second + "'");
  }
  if (a.tune && a.no_tune) return InvalidInput("--tune and --no-tune contradict each other");
  o.measure = measure_mode(a);
  int64_t min_nodes;
  TSR_ASSIGN_OR_RETURN(min_nodes, int_opt(a, "--min-region-nodes", -1, 0));
  o.min_region_nodes = static_cast<int>(min_nodes);
  if (a.opts.count("--backend-options")) o.backend_options = a.opts.at("--backend-options");
  int64_t threads;
  TSR_ASSIGN_OR_RETURN(threads, int_opt(a, "--threads", 0, 1));
  o.threads = static_cast<int>(threads);
  TSR_ASSIGN_OR_RETURN(o.tune_budget_s, float_opt(a, "--tune-budget", -1));
  if (a.opts.count("--tune-cache")) o.tune_cache = a.opts.at("--tune-cache");
  o.warn = [](const std::string& w) { std::fprintf(stderr, "tessera: warning: %s\n", w.c_str()); };
  if (progress && isatty(fileno(stderr))) {
    o.progress = [](int done, int total, const std::string& what) {
      if (total > 0) std::fprintf(stderr, "\r\033[K[%d/%d] %s", done, total, what.c_str());
      else std::fprintf(stderr, "\r\033[K[%d] %s", done, what.c_str());
      std::fflush(stderr);
    };
  }
  return o;
}

Expected<Program> compile_graph(Graph g, const std::string& source, const Args& a, PartitionReport* report,
                                bool progress) {
  api::CompileOptions o;
  TSR_ASSIGN_OR_RETURN(o, compile_options(a, progress));
  auto program = api::compile_graph(std::move(g), source, o, report);
  if (o.progress) std::fprintf(stderr, "\r\033[K");
  return program;
}

Expected<std::unique_ptr<InferenceSession>> open_session(const std::string& path, const Args& a,
                                                         PartitionReport* report) {
  api::CompileOptions o;
  TSR_ASSIGN_OR_RETURN(o, compile_options(a, false));
  SessionOptions so;
  so.num_threads = o.threads;
  return api::open_session(api::ModelSource{path, {}}, o, so, report);
}

Expected<std::unique_ptr<InferenceSession>> open_profiled_session(const std::string& path, const Args& a,
                                                                  api::RegionNodes* nodes) {
  PartitionReport report;
  std::unique_ptr<InferenceSession> s;
  TSR_ASSIGN_OR_RETURN(s, open_session(path, a, &report));
  *nodes = api::region_nodes_of(report);
  return s;
}

}  // namespace tessera::cli
