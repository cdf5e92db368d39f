#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "cli.h"

namespace tessera::cli {

const char* kUsage =
    "usage: tessera <command> [options]\n"
    "commands:\n"
    "  compile MODEL.onnx -o OUT.tsr [--backends LIST] [--shape NAME=D0,D1,..] [--place OP_OR_NODE=BACKEND]\n"
    "          [--min-region-nodes N] [--backend-options K=V;..] [--placement cost|priority] [--tune | --no-tune]\n"
    "          [--tune-budget SECONDS] [--tune-cache FILE] [--threads N] [--precision fp32|bf16|fp16]\n"
    "          [--accuracy-budget cos=MIN,abs=MAX,rel=MAX] [--input-dir DIR]\n"
    "      partitions the model, compiles every engine ahead of time and writes one artifact; measures the nodes\n"
    "      and regions that matter on this machine (within --tune-budget, default 3 s) and keeps the times in the\n"
    "      tune cache for later compiles; --tune measures every candidate region, --no-tune (or TESSERA_TUNE=0)\n"
    "      nothing\n"
    "  run MODEL(.onnx|.tsr) [--input-dir DIR] [--output-dir DIR] [--backends LIST] [--threads N] [--shape ..]\n"
    "          [--trace FILE]\n"
    "      reads input_<i>.pb (ONNX TensorProto, graph input order) from DIR (an ONNX model's symbolic dims take\n"
    "      their sizes, so engines are compiled for them), or makes random inputs;\n"
    "      writes output_<i>.pb (graph output order) to --output-dir, else prints a summary; --trace writes the\n"
    "      run as a Chrome trace (chrome://tracing, Perfetto), with the steps inside engine regions\n"
    "  check CASE_DIR [--backends LIST] [--threads N] [--rtol R] [--atol A] [--model FILE]\n"
    "      runs an ONNX backend test case (model.onnx + test_data_set_*/) against its expected outputs;\n"
    "      --model runs another file (e.g. the case's model compiled to a .tsr) on the case's data\n"
    "  bench MODEL [--backends LIST] [--threads N] [--runs R] [--warmup W] [--shape NAME=D0,..] [--json] [--profile]\n"
    "          [--trace FILE] [--shapes-from FILE] [--input-dir DIR]\n"
    "      times inference and prints the median, on input_<i>.pb from --input-dir (as run) or random inputs;\n"
    "      a model with symbolic dims: the warm-up compiles the timed shape's bucket (or reads it from the engine\n"
    "      cache) and waits for it, so the runs timed are those of the shape once warm;\n"
    "      --profile adds time per op type and the slowest nodes, inside\n"
    "      engine regions too (under \"profile\" with --json); --trace writes the profiled runs (at most 20) as a\n"
    "      Chrome trace (docs/profiling.md); --shapes-from replays a stream of requests (a line each: NAME=D0,D1,..\n"
    "      per input named) and prints p50/p99 latency, the runs that waited for a plan of their shape and those\n"
    "      that ran on the shape-generic plan meanwhile or on a bucket's engines (--json: each request's latency too)\n"
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
    "For a .tsr, the placement is the compiled one. --max-memory SIZE (512M, 2G) limits the memory one run holds\n"
    "(arena, outputs, tensors shaped at run time): a run that needs more is refused, naming the need. What the\n"
    "session keeps between runs (freed tensors, idle plans' arenas, engines compiled at run time) gives way to\n"
    "the runs in flight, so that it and they together stay within SIZE too.\n"
    "--shape NAME=D0,D1,.. gives an input's dims: each a size, or MIN..MAX for a range (x=1,3,48,32..2048); an\n"
    "input named more than once spans them all. A compiled artifact runs any size in its ranges and refuses others\n"
    "naming the input, dim and range; random inputs take each range's low end, or the exact dims --shape gives\n"
    "for an artifact's input (x=1,3,48,640 within its range). Dims with a range stay symbolic:\n"
    "the nodes they shape run on native, except in buckets: an exact shape named beside a range (--shape\n"
    "x=1,3,48,32..2048 --shape x=1,3,48,320) is compiled with engines of its own, which requests of exactly\n"
    "those dims run on (with several ranged inputs, bucket k takes each one's k-th exact shape). A shape with no\n"
    "bucket runs at once on what is ready (seen twice, it gets a native plan of its own); once its runs in one\n"
    "session have taken as long as a compile, it is compiled as a bucket in the background and swapped in, and\n"
    "kept in the engine cache (\"engines\" beside the tune cache) for the next process; --no-background-buckets\n"
    "gives such shapes native plans only. A range along the spatial dims of one input also gets masked buckets,\n"
    "one every --bucket-step (32) along each ranged dim: compiled ahead with engines at the bucket's largest dims,\n"
    "each serves every size up to them exactly (the input padded, the padding masked where a convolution would\n"
    "read it, the results sliced back), where the model's convolutions and pools allow it.\n"
    "--precision bf16 computes Conv, ConvTranspose, MatMul and Gemm in bfloat16 with float32 accumulation in the\n"
    "engines that can (oneDNN); the rest stays float32. It is refused where the CPU lacks the instructions. compile\n"
    "and bench then run the model beside its float32 self on the same inputs (--input-dir, else random) and print\n"
    "each output's max absolute and relative error and cosine; --accuracy-budget fails a compile past its limits.\n";

void usage_error(const std::string& msg) { throw Error(TESSERA_CODE_INVALID_ARGUMENT, msg); }

namespace {

// One option of a command: its names ("-o,--output"), what it does, and
// whether it may be repeated (each value kept) or takes its last value.
struct OptionSpec {
  const char* names;
  const char* help;
  bool repeat = false;
};

const std::vector<OptionSpec>& compile_option_specs() {
  static const std::vector<OptionSpec> kSpecs = {
      {"--backends", "backends to use, in priority order, e.g. dnnl,xnnpack,native (default: every backend found)"},
      {"--shape", "an input's shape: NAME=D0,D1,.., each dim a size or MIN..MAX (repeatable)", true},
      {"--place", "pin a node or op type to a backend: OP_OR_NODE=BACKEND (repeatable)", true},
      {"--min-region-nodes", "external regions with fewer nodes fall back to native (default 2)"},
      {"--backend-options", "K=V;.. handed to every backend's compile"},
      {"--threads",
       "threads for the native pool and every engine (default: all hardware threads); a model the "
       "compile measured faster on one thread runs on one (`inspect` says so)"},
      {"--placement", "cost (default: least measured or estimated time) or priority (first backend that runs a node)"},
      {"--tune-cache",
       "the tune cache file (default $TESSERA_TUNE_CACHE, else ~/.cache/tessera/tune.json; empty: none)"},
      {"--tune-budget", "seconds of measuring for the default placement (default 3)"},
      {"--max-memory", "bytes one run may hold (arena, outputs, run-time-shaped tensors), e.g. 512M or 2G"},
      {"--precision",
       "fp32 (default), bf16 or fp16: what Conv/ConvTranspose/MatMul/Gemm compute in where an engine can"},
      {"--accuracy-budget", "below fp32: cos=MIN,abs=MAX,rel=MAX (any of them) against fp32; a compile past it fails"},
      {"--bucket-step",
       "masked buckets every N along a ranged spatial dim, compiled ahead with engines (default 32; 0: none)"},
  };
  return kSpecs;
}

// Each command: what it does, its positional arguments, its own options and flags.
struct CommandSpec {
  const char* name;
  const char* help;
  const char* positional;
  std::vector<OptionSpec> options;
  bool compile_options = true;  // takes compile_option_specs() and --no-tune
  bool json = false, profile = false, tune = false;
};

// One command per entry reads better than one field per line.
// clang-format off
const std::vector<CommandSpec>& command_specs() {
  static const std::vector<CommandSpec> kCommands = {
      {"compile", "partition a model, compile every engine ahead of time and write one artifact", "MODEL",
       {{"-o,--output", "the artifact to write (OUT.tsr)"},
        {"--input-dir", "input_<i>.pb files for the accuracy check below fp32 (else random inputs)"}},
       true, false, false, true},
      {"run", "run a model (.onnx or .tsr) once on input_<i>.pb files or random inputs", "MODEL",
       {{"--input-dir", "read input_<i>.pb (ONNX TensorProto, graph input order) from DIR; an ONNX model's symbolic "
                        "dims take their sizes"},
        {"--output-dir", "write output_<i>.pb to DIR (else print a summary)"},
        {"--trace", "write the run as a Chrome trace to FILE"}}},
      {"check", "run ONNX backend test cases against their expected outputs (several: one process, a line each)",
       "CASE_DIR..",
       {{"--rtol", "relative tolerance (default 1e-3)"},
        {"--atol", "absolute tolerance (default 1e-7)"},
        {"--model", "run another file (e.g. the case's model compiled to a .tsr) on the case's data"}}},
      {"bench", "time inference and print the median", "MODEL",
       {{"--runs", "timed runs"}, {"--warmup", "warm-up runs"}, {"--trace", "write profiled runs as a Chrome trace"},
        {"--shapes-from", "replay a stream of input shapes from FILE (one request per line: NAME=D0,D1,.. ..)"},
        {"--input-dir", "time input_<i>.pb files (an ONNX model's symbolic dims take their sizes) instead of random "
                        "inputs; also those of the accuracy check below fp32"}},
       true, true, true},
      {"partition", "placement report: regions, the costs considered, refusals, measurements", "MODEL",
       {{"--dot", "write the placement as Graphviz DOT to FILE"}, {"--svg", "draw it as SVG to FILE (Graphviz)"},
        {"--input-dir", "input_<i>.pb files for the accuracy check below fp32 (else random inputs)"}},
       true, true, false, true},
      {"inspect", "what an artifact holds: sections, engines, sizes, versions, signature", "ARTIFACT", {}, false, true},
  };
  return kCommands;
}
// clang-format on

std::string command_list() {
  std::string s;
  for (const auto& c : command_specs()) s += (s.empty() ? "" : ", ") + std::string(c.name);
  return s;
}

}  // namespace

Args parse_args(int argc, char** argv) {
  if (argc < 2) usage_error("no command given\n" + std::string(kUsage));
  const std::string command = argv[1];
  const auto& cmds = command_specs();
  const auto spec = std::find_if(cmds.begin(), cmds.end(), [&](const CommandSpec& c) { return command == c.name; });
  if (spec == cmds.end()) usage_error("unknown command '" + command + "' (commands: " + command_list() + ")");

  CLI::App app{std::string("tessera ") + spec->name + ": " + spec->help, std::string("tessera ") + spec->name};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.allow_extras(true);  // unknown options are reported below, in the CLI's own words
  Args a;
  a.command = command;
  app.add_option(spec->positional, a.positional, "the input")->expected(0, 1 << 20);
  // Values by option; copied into Args only when given.
  std::map<std::string, std::string> single;
  std::map<std::string, std::vector<std::string>> repeated;
  std::vector<std::pair<std::string, CLI::Option*>> given;
  auto add = [&](const OptionSpec& o) {
    const std::string names = o.names;
    const std::string key = names.substr(0, names.find(','));
    CLI::Option* opt = o.repeat ? app.add_option(names, repeated[key], o.help)->expected(1)->take_all()
                                : app.add_option(names, single[key], o.help);
    opt->allow_extra_args(false);
    given.emplace_back(key, opt);
  };
  for (const auto& o : spec->options) add(o);
  if (spec->compile_options) {
    for (const auto& o : compile_option_specs()) add(o);
    app.add_flag("--no-tune", a.no_tune, "measure nothing: estimates only (also TESSERA_TUNE=0)");
    app.add_flag("--no-background-buckets", a.no_background_buckets,
                 "give shapes without a bucket native plans, not engines compiled in the background");
  }
  if (spec->json) app.add_flag("--json", a.json, "print JSON");
  if (spec->profile) app.add_flag("--profile", a.profile, "add time per op type and the slowest nodes");
  if (spec->tune) app.add_flag("--tune", a.tune, "measure every candidate region");
  std::vector<std::string> rest;  // CLI11 takes them reversed
  for (int i = argc - 1; i >= 2; --i) {
    const std::string arg = argv[i];
    // `--tune-cache=` sets an empty value; CLI11 would take the next argument as the value instead.
    if (arg.size() > 3 && arg.rfind("--", 0) == 0 && arg.back() == '=' && arg.find('=') == arg.size() - 1) {
      rest.emplace_back("");
      rest.push_back(arg.substr(0, arg.size() - 1));
    } else {
      rest.push_back(arg);
    }
  }
  try {
    app.parse(rest);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return Args{"--help", {}, {}, {}, {}, false, false, false, false};
  } catch (const CLI::ArgumentMismatch& e) {  // "--rtol: 1 required TEXT missing"
    const std::string what = e.what();
    usage_error("option '" + what.substr(0, what.find(':')) + "' needs a value");
  } catch (const CLI::ParseError& e) {
    usage_error(std::string(spec->name) + ": " + e.what());
  }
  for (const std::string& r : app.remaining()) {
    if (r.size() > 1 && r[0] == '-') {
      usage_error("unknown option '" + r.substr(0, r.find('=')) + "' for '" + a.command + "'");
    }
    a.positional.push_back(r);
  }
  for (const auto& [key, opt] : given) {
    if (opt->count() == 0) continue;
    if (key == "--shape") a.shapes = repeated[key];
    else if (key == "--place") a.places = repeated[key];
    else a.opts[key] = single[key];  // "-o" for -o/--output: the first name
  }
  return a;
}

int64_t int_opt(const Args& a, const std::string& key, int64_t def, int64_t min_value) {
  auto it = a.opts.find(key);
  if (it == a.opts.end()) return def;
  char* end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || v < min_value) {
    usage_error("option " + key + " expects an integer >= " + std::to_string(min_value) + ", got '" + it->second +
                "'");
  }
  return static_cast<int64_t>(v);
}

double float_opt(const Args& a, const std::string& key, double def) {
  auto it = a.opts.find(key);
  if (it == a.opts.end()) return def;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0' || !(v >= 0)) {
    usage_error("option " + key + " expects a non-negative number, got '" + it->second + "'");
  }
  return v;
}

// "1048576", "512K", "64M", "2G" (powers of 1024) -> bytes.
uint64_t byte_size(const std::string& key, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  double unit = 1;
  std::string suffix = end ? end : "";
  if (suffix == "K" || suffix == "KiB") unit = 1024.0;
  else if (suffix == "M" || suffix == "MiB") unit = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "GiB") unit = 1024.0 * 1024 * 1024;
  else if (!suffix.empty()) unit = -1;
  if (text.empty() || end == text.c_str() || unit < 0 || !(v > 0) || v * unit > 1.8e19) {
    usage_error("option " + key + " expects a size in bytes such as 512M or 2G, got '" + text + "'");
  }
  return static_cast<uint64_t>(v * unit);
}

Env make_env() {
  Env env;
  env.SetLog([](void*, tessera_log_level_t, const char* msg) { std::fprintf(stderr, "tessera: warning: %s\n", msg); },
             nullptr);
  return env;
}

namespace {

bool g_progress_shown = false;

void show_progress(void*, int done, int total, const char* what) {
  if (total > 0) std::fprintf(stderr, "\r\033[K[%d/%d] %s", done, total, what);
  else std::fprintf(stderr, "\r\033[K[%d] %s", done, what);
  std::fflush(stderr);
  g_progress_shown = true;
}

}  // namespace

SessionOptions session_options(const Args& a, bool progress) {
  SessionOptions o;
  if (auto it = a.opts.find("--backends"); it != a.opts.end()) o.Backends(it->second);
  for (const std::string& s : a.shapes) o.AddShape(s);
  for (const std::string& p : a.places) o.Place(p);
  if (auto it = a.opts.find("--placement"); it != a.opts.end()) {
    if (it->second != "cost" && it->second != "priority") {
      usage_error("--placement expects cost or priority, got '" + it->second + "'");
    }
    o.Placement(it->second);
  }
  if (a.tune && a.no_tune) usage_error("--tune and --no-tune contradict each other");
  o.Tune(a.tune ? TESSERA_TUNE_FULL : a.no_tune ? TESSERA_TUNE_OFF : TESSERA_TUNE_DEFAULT);
  const int64_t min_nodes = int_opt(a, "--min-region-nodes", -1, 0);
  if (min_nodes >= 0) o.MinRegionNodes(static_cast<int>(min_nodes));
  if (auto it = a.opts.find("--backend-options"); it != a.opts.end()) o.BackendOptions(it->second);
  o.Threads(static_cast<int>(int_opt(a, "--threads", 0, 1)));
  const double budget = float_opt(a, "--tune-budget", -1);
  if (budget >= 0) o.TuneBudget(budget);
  if (auto it = a.opts.find("--tune-cache"); it != a.opts.end()) o.TuneCache(it->second);
  if (auto it = a.opts.find("--max-memory"); it != a.opts.end()) o.MaxMemory(byte_size(it->first, it->second));
  if (a.no_background_buckets) o.BackgroundBuckets(false);
  if (a.opts.count("--bucket-step")) o.BucketStep(int_opt(a, "--bucket-step", 32, 0));
  if (auto it = a.opts.find("--precision"); it != a.opts.end()) o.Precision(it->second);
  if (auto it = a.opts.find("--accuracy-budget"); it != a.opts.end()) o.AccuracyBudget(it->second);
  if (auto it = a.opts.find("--input-dir"); it != a.opts.end()) {
    o.AccuracyInputs(it->second);
    // run/bench on real inputs: an ONNX model's symbolic dims take their sizes (engines compiled for them).
    if (a.command == "run" || a.command == "bench") o.ShapesFromInputs(it->second);
  }
  if (progress && isatty(fileno(stderr))) o.Progress(&show_progress, nullptr);
  return o;
}

void end_progress() {
  if (g_progress_shown) std::fprintf(stderr, "\r\033[K");
  g_progress_shown = false;
}

}  // namespace tessera::cli
