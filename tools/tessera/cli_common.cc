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
#include "plan_check.h"
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

Status apply_shapes(Graph& g, const std::vector<std::string>& shapes) {
  for (const auto& spec : shapes) {
    auto eq = spec.find('=');
    if (eq == std::string::npos) return InvalidInput("--shape expects NAME=D0,D1,..., got '" + spec + "'");
    std::string name = spec.substr(0, eq);
    if (std::find(g.inputs.begin(), g.inputs.end(), name) == g.inputs.end()) {
      return InvalidInput("--shape: the model has no input named '" + name + "'");
    }
    std::vector<Dim> dims;
    std::string rest = spec.substr(eq + 1);
    size_t p = 0;
    while (p < rest.size()) {
      size_t c = rest.find(',', p);
      std::string tok = rest.substr(p, c == std::string::npos ? std::string::npos : c - p);
      char* end = nullptr;
      long long v = std::strtoll(tok.c_str(), &end, 10);
      if (tok.empty() || *end != '\0' || v < 0) return InvalidInput("--shape: bad dimension '" + tok + "'");
      dims.emplace_back(v);
      if (c == std::string::npos) break;
      p = c + 1;
    }
    g.values[name].shape = Shape(std::move(dims));
  }
  return Status::Ok();
}

Status check_model_path(const std::string& path) {
  if (!fs::exists(path)) return IoError("model '" + path + "' does not exist");
  if (fs::is_directory(path)) return InvalidInput("model '" + path + "' is a directory, not a file");
  return Status::Ok();
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
  TSR_RETURN_IF_ERROR(check_model_path(path));
  if (is_artifact_file(path)) {
    return InvalidInput("'" + path + "' is a compiled artifact; this command needs an ONNX model");
  }
  Graph g;
  TSR_ASSIGN_OR_RETURN(g, import_onnx_file(path));
  TSR_RETURN_IF_ERROR(apply_shapes(g, a.shapes));
  OptimizeOptions o;
  TSR_RETURN_IF_ERROR(optimize_graph(g, o));
  return g;
}

MeasureMode measure_mode(const Args& a) {
  if (a.tune) return MeasureMode::kFull;
  if (a.no_tune) return MeasureMode::kOff;
  const char* env = std::getenv("TESSERA_TUNE");
  if (env && std::string(env) == "0") return MeasureMode::kOff;
  return MeasureMode::kDefault;
}

Expected<Program> compile_graph(Graph g, const std::string& source, const Args& a, PartitionReport* report,
                                bool progress) {
  PartitionReport local_report;
  if (!report) report = &local_report;
  std::string list = a.opts.count("--backends") ? a.opts.at("--backends") : "";
  PartitionOptions po;
  if (auto it = a.opts.find("--placement"); it != a.opts.end()) {
    if (it->second == "priority") po.policy = PlacementPolicy::kPriority;
    else if (it->second != "cost") return InvalidInput("--placement expects cost or priority, got '" + it->second + "'");
  }
  // --tune measures engines one at a time; the cost model adds the
  // passive-wait penalty of mixed sets.
  TSR_ASSIGN_OR_RETURN(po.backends, resolve_backends(list, measure_mode(a) != MeasureMode::kOff));
  for (const auto& p : a.places) {
    PlaceRule r;
    TSR_ASSIGN_OR_RETURN(r, parse_place_rule(p));
    po.place.push_back(r);
  }
  int64_t min_nodes;
  TSR_ASSIGN_OR_RETURN(min_nodes, int_opt(a, "--min-region-nodes", po.min_region_nodes, 0));
  po.min_region_nodes = static_cast<int>(min_nodes);
  if (a.opts.count("--backend-options")) po.backend_options = a.opts.at("--backend-options");
  int64_t threads;
  TSR_ASSIGN_OR_RETURN(threads, int_opt(a, "--threads", 0, 1));
  po.num_threads = threads > 0 ? static_cast<int>(threads)
                                : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  // What is measured: by default the nodes and regions that matter, within
  // a budget; --tune every candidate region; --no-tune or TESSERA_TUNE=0
  // nothing (estimates, and measurements already in the cache).
  if (a.tune && a.no_tune) return InvalidInput("--tune and --no-tune contradict each other");
  if (a.tune && po.policy != PlacementPolicy::kCost) return InvalidInput("--tune needs --placement cost");
  po.measure = measure_mode(a);
  partition::MeasureBudget budget;
  double budget_s;
  TSR_ASSIGN_OR_RETURN(budget_s, float_opt(a, "--tune-budget", budget.limit_us / 1e6));
  budget.limit_us = budget_s * 1e6;
  po.budget = &budget;
  // Measurements from earlier compiles replace estimates; this one adds more.
  std::string cache_path = a.opts.count("--tune-cache") ? a.opts.at("--tune-cache") : partition::default_tune_cache_path();
  if (a.tune && cache_path.empty()) return InvalidInput("--tune needs a cache file: set --tune-cache FILE or HOME");
  if (std::error_code ec; po.measure != MeasureMode::kOff && fs::exists(cache_path, ec) &&
                          !fs::is_regular_file(cache_path, ec)) {
    if (a.tune) return InvalidInput("--tune: tune cache '" + cache_path + "' is not a file");  // before measuring
  }
  std::string warning;
  partition::TuneCache cache = partition::TuneCache::Open(cache_path, &warning);
  if (!warning.empty()) std::fprintf(stderr, "tessera: warning: %s\n", warning.c_str());
  // Without a cache file, measurements still serve this compile.
  if (po.policy == PlacementPolicy::kCost) po.tune_cache = &cache;
  // This machine's figures: calibrated once and cached; nominal when
  // measuring is off and none are cached.
  partition::MachineProfile machine = partition::identify_machine(po.num_threads);
  if (auto known = cache.machine(machine.key())) machine = *known;
  // Measurements taken while other processes hold the cores they need say
  // more about those processes than about the engines: they serve this
  // compile only, --tune's as well (every later compile on this machine would
  // trust them: an op sweep run beside another job cached 24 ms for a 0.06 ms
  // convolution).
  // TESSERA_TUNE_CACHE_BUSY=1 caches them anyway (a machine whose run queue
  // always holds unrelated threads; the CLI tests, run beside other tests).
  const bool keep_busy = env_flag("TESSERA_TUNE_CACHE_BUSY");
  auto busy = [&] {
    return po.measure != MeasureMode::kOff && !keep_busy &&
           partition::other_runnable_threads() >= std::max(0, machine.cores - po.num_threads) + 0.75;
  };
  bool was_busy = busy();
  if (po.policy == PlacementPolicy::kCost && po.measure != MeasureMode::kOff) {
    if (partition::calibrate_machine(&machine, po.backends)) cache.put_machine(machine);
  }
  po.machine = &machine;
  bool tty = progress && isatty(fileno(stderr));
  if (tty) {
    po.progress = [](int done, int total, const std::string& what) {
      if (total > 0) std::fprintf(stderr, "\r\033[K[%d/%d] %s", done, total, what.c_str());
      else std::fprintf(stderr, "\r\033[K[%d] %s", done, what.c_str());
      std::fflush(stderr);
    };
  }
  const Graph source_graph = g;  // for the end-to-end check's alternatives (tensors are shared)
  auto program = partition_and_compile(std::move(g), po, report);
  if (tty) std::fprintf(stderr, "\r\033[K");
  if (!program.ok()) return program.status();
  {
    if (tty) std::fprintf(stderr, "\r\033[Kchecking the plan end to end");
    const double left = po.measure == MeasureMode::kFull ? 5e6 : std::max(1e6, budget.limit_us - budget.spent_us);
    auto checked = check_plan(std::move(*program), source_graph, po, report, left);
    if (tty) std::fprintf(stderr, "\r\033[K");
    if (!checked.ok()) return checked.status();
    program = std::move(checked);
  }
  was_busy = was_busy || busy();
  if (was_busy && report->measured > 0) {
    std::fprintf(stderr,
                 "tessera: warning: other processes were running on this machine's cores while it measured; the "
                 "measurements served this compile only and were not cached\n");
  } else if (Status st = cache.save(); !st.ok()) {
    if (a.tune) return st;
    // Measuring by default must not fail a compile over a read-only cache.
    std::fprintf(stderr, "tessera: warning: %s\n", st.message().c_str());
  }
  program->meta.source_model = fs::path(source).filename().string();
  program->meta.shape_overrides = a.shapes;
  return program;
}

// Random inputs for models run without data: symbolic dims become 1, floats
// are uniform in [-1, 1), integers are 0 or 1 (valid ids and mask values).
Expected<std::vector<Tensor>> random_inputs(const InferenceSession& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uf(-1.f, 1.f);
  std::vector<Tensor> inputs;
  for (const auto& in : s.inputs()) {
    if (!in.shape.rank_known) return InvalidInput("input '" + in.name + "' has an unknown rank; give --shape");
    Dims d;
    for (const Dim& x : in.shape.dims) d.push_back(x.known() ? x.value : 1);
    DType dt = in.dtype == DType::kUndefined ? DType::kFloat32 : in.dtype;
    Tensor t(dt, d);
    visit_dtype(dt, [&](auto tag) {
      using T = decltype(tag);
      T* p = t.data<T>();
      for (int64_t i = 0; i < t.numel(); ++i) {
        if constexpr (std::is_same_v<T, bool>) p[i] = (rng() & 1) != 0;
        else if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>)
          p[i] = static_cast<T>(uf(rng));
        else p[i] = static_cast<T>(rng() & 1);
      }
    });
    inputs.push_back(std::move(t));
  }
  return inputs;
}

Expected<std::unique_ptr<InferenceSession>> open_session(const std::string& path, const Args& a,
                                                         PartitionReport* report) {
  int64_t threads;
  TSR_ASSIGN_OR_RETURN(threads, int_opt(a, "--threads", 0, 1));
  TSR_RETURN_IF_ERROR(check_model_path(path));
  SessionOptions opts;
  opts.num_threads = static_cast<int>(threads);
  if (is_artifact_file(path)) {
    if (!a.shapes.empty()) return InvalidInput("--shape applies to ONNX models; an artifact's shapes are compiled in");
    return InferenceSession::Load(path, opts);
  }
  std::string list = a.opts.count("--backends") ? a.opts.at("--backends") : "";
  std::vector<std::shared_ptr<const Backend>> backends;
  TSR_ASSIGN_OR_RETURN(backends, resolve_backends(list));
  Graph g;
  TSR_ASSIGN_OR_RETURN(g, import_onnx_file(path));
  TSR_RETURN_IF_ERROR(apply_shapes(g, a.shapes));
  if (backends.size() == 1 && a.places.empty()) return InferenceSession::Create(std::move(g), opts);
  OptimizeOptions o;
  TSR_RETURN_IF_ERROR(optimize_graph(g, o));
  Program p;
  TSR_ASSIGN_OR_RETURN(p, compile_graph(std::move(g), path, a, report, false));
  return InferenceSession::Create(std::move(p), opts);
}

}  // namespace tessera::cli
