#include "api/session_setup.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <tuple>

#include "api/plan_check.h"
#include "artifact/artifact.h"
#include "artifact/crc32c.h"
#include "backends/backend.h"
#include "backends/native/native_backend.h"
#include "onnx/onnx_import.h"
#include "partition/machine.h"
#include "partition/tune.h"
#include "passes/masked_bucket.h"
#include "passes/pipeline.h"
#include "util/env.h"
#include "util/human_bytes.h"
#include "util/thread_pool.h"

namespace fs = std::filesystem;

namespace tessera::api {

namespace {

Status check_model_path(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return IoError("model '" + path + "' does not exist");
  if (fs::is_directory(path, ec)) return InvalidInput("model '" + path + "' is a directory, not a file");
  return Status::Ok();
}

// The ONNX model as a graph, with its input shapes pinned (not optimised).
Expected<Graph> import_model(const ModelSource& m, const std::vector<std::string>& shapes) {
  Graph g;
  if (m.path.empty()) {
    TSR_ASSIGN_OR_RETURN(g, import_onnx_bytes(m.bytes, "."));
  } else {
    TSR_ASSIGN_OR_RETURN(g, import_onnx_file(m.path));
  }
  TSR_RETURN_IF_ERROR(apply_shapes(g, shapes));
  return g;
}

}  // namespace

MeasureMode default_measure() {
  const char* env = std::getenv("TESSERA_TUNE");
  return env && std::string(env) == "0" ? MeasureMode::kOff : MeasureMode::kDefault;
}

Expected<bool> is_artifact(const ModelSource& m) {
  if (m.path.empty()) return is_artifact_bytes(m.bytes);
  TSR_RETURN_IF_ERROR(check_model_path(m.path));
  return is_artifact_file(m.path);
}

namespace {

// "32..2048" or "48" as a range; false when malformed.
bool parse_dim_range(const std::string& tok, DimRange* r) {
  auto number = [](const std::string& t, int64_t* v) {
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(t.c_str(), &end, 10);
    if (t.empty() || !std::isdigit(static_cast<unsigned char>(t[0])) || *end != '\0' || errno == ERANGE) return false;
    *v = x;
    return true;
  };
  const size_t dots = tok.find("..");
  if (dots == std::string::npos) {
    if (!number(tok, &r->lo)) return false;
    r->hi = r->lo;
    return true;
  }
  return number(tok.substr(0, dots), &r->lo) && number(tok.substr(dots + 2), &r->hi) && r->lo <= r->hi;
}

}  // namespace

Expected<InputRanges> parse_shapes(const std::vector<std::string>& shapes) {
  InputRanges out;
  for (const auto& spec : shapes) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidInput("--shape expects NAME=D0,D1,.. (each dim a size or MIN..MAX), got '" + spec + "'");
    }
    const std::string name = spec.substr(0, eq), rest = spec.substr(eq + 1);
    std::vector<DimRange> dims;  // none for "NAME=": a scalar
    for (size_t p = 0; !rest.empty() && p <= rest.size();) {
      const size_t c = std::min(rest.find(',', p), rest.size());
      const std::string tok = rest.substr(p, c - p);
      DimRange r;
      if (!parse_dim_range(tok, &r)) {
        return InvalidInput("--shape " + spec + ": bad dimension '" + tok + "' (a size, or MIN..MAX with MIN <= MAX)");
      }
      dims.push_back(r);
      p = c + 1;
    }
    auto [it, fresh] = out.emplace(name, dims);
    if (fresh) continue;
    if (it->second.size() != dims.size()) {
      return InvalidInput("--shape: input '" + name + "' is given with " + std::to_string(it->second.size()) +
                          " dims and with " + std::to_string(dims.size()));
    }
    for (size_t d = 0; d < dims.size(); ++d) {  // several specs of one input: their span
      it->second[d].lo = std::min(it->second[d].lo, dims[d].lo);
      it->second[d].hi = std::max(it->second[d].hi, dims[d].hi);
    }
  }
  return out;
}

std::string shape_spec(const std::string& name, const Dims& dims) {
  std::string spec = name + "=";
  for (size_t d = 0; d < dims.size(); ++d) spec += (d ? "," : "") + std::to_string(dims[d]);
  return spec;
}

Status apply_shapes(Graph& g, const std::vector<std::string>& shapes) {
  InputRanges ranges;
  TSR_ASSIGN_OR_RETURN(ranges, parse_shapes(shapes));
  for (const auto& [name, dims] : ranges) {
    if (std::find(g.inputs.begin(), g.inputs.end(), name) == g.inputs.end()) {
      return InvalidInput("--shape: the model has no input named '" + name + "'");
    }
    ValueInfo& vi = g.values[name];
    const Shape declared = vi.shape;
    std::vector<Dim> pinned;
    Dims largest;
    for (size_t d = 0; d < dims.size(); ++d) {
      largest.push_back(dims[d].hi);
      if (dims[d].exact()) {
        pinned.emplace_back(dims[d].lo);
        continue;
      }
      const bool named = declared.rank_known && declared.rank() == static_cast<int>(dims.size()) &&
                         !declared[static_cast<int>(d)].known() && !declared[static_cast<int>(d)].symbol.empty();
      pinned.push_back(Dim::Symbol(named ? declared[static_cast<int>(d)].symbol : name + "_dim" + std::to_string(d)));
    }
    if (vi.dtype != DType::kUndefined) {
      const std::string problem = tensor_size_problem(largest, dtype_size(vi.dtype));
      if (!problem.empty()) return InvalidInput("--shape: input '" + name + "': shape " + dims_str(largest) + " " + problem);
    }
    vi.shape = Shape(std::move(pinned));
  }
  return Status::Ok();
}

Expected<Graph> load_graph(const ModelSource& m, const std::vector<std::string>& shapes, const std::string& what) {
  bool artifact = false;
  TSR_ASSIGN_OR_RETURN(artifact, is_artifact(m));
  if (artifact) return InvalidInput("'" + m.name() + "' is a compiled artifact; " + what + " needs an ONNX model");
  Graph g;
  TSR_ASSIGN_OR_RETURN(g, import_model(m, shapes));
  OptimizeOptions opt;
  TSR_RETURN_IF_ERROR(optimize_graph(g, opt));
  return g;
}

namespace {

// Says which input dims are symbolic (or ranges) and what placement did about them: engines are compiled for static
// shapes, so the nodes whose shapes depend on such a dim run on native.
std::string symbolic_dims_note(const Graph& g, const PartitionReport& r) {
  std::string dims;
  for (const std::string& name : g.inputs) {
    const ValueInfo* vi = g.info(name);
    if (!vi || !vi->shape.rank_known) {
      dims += std::string(dims.empty() ? "" : "; ") + "'" + name + "' (unknown rank)";
      continue;
    }
    std::string mine;
    for (int d = 0; d < vi->shape.rank(); ++d) {
      if (vi->shape[d].known()) continue;
      const std::string& sym = vi->shape[d].symbol;
      mine += std::string(mine.empty() ? "" : ", ") + std::to_string(d) + (sym.empty() ? "" : " ('" + sym + "')");
    }
    if (!mine.empty()) dims += std::string(dims.empty() ? "" : "; ") + "'" + name + "' dim " + mine;
  }
  if (dims.empty()) return "";
  std::set<std::string> native;
  for (const Refusal& x : r.refusals) {
    if (x.reason.find("symbolic dim") != std::string::npos) native.insert(x.node);
  }
  if (native.empty()) return "";
  return "symbolic input dims: " + dims + ". " + std::to_string(native.size()) +
         " node(s) whose shapes depend on them run on native, as engines are compiled for static shapes; give "
         "--shape NAME=D0,D1,.. with sizes to compile engines for one shape (a session compiles engines in the "
         "background for a shape it sees twice)";
}

// --backend-options with "precision=P" added for a precision below fp32; refused where this CPU lacks the
// instructions or the options name another precision.
Expected<std::string> options_with_precision(const std::string& options, Precision p) {
  if (std::string why = precision_unavailable(p); !why.empty()) return Unsupported(why);
  const std::string given = backend_option(options, "precision");
  if (!given.empty() && given != precision_name(p)) {
    return InvalidInput("--backend-options precision=" + given + " contradicts --precision " + precision_name(p));
  }
  if (p == Precision::kFp32 || !given.empty()) return options;
  return with_backend_option(options, "precision", precision_name(p));
}

// Runs the program compiled at reduced precision and `reference` (the optimised float32 graph, natively) on the
// same inputs, and puts every output's error into the report.
Status check_accuracy(const Program& program, Graph reference, const CompileOptions& o, PartitionReport* report) {
  SessionOptions so;
  so.num_threads = o.threads;
  so.max_memory = o.max_memory;
  so.plan_in_background = false;
  TSR_ASSIGN_OR_RETURN(so.input_ranges, parse_shapes(o.shapes));
  std::unique_ptr<InferenceSession> want_s, got_s;
  TSR_ASSIGN_OR_RETURN(want_s, InferenceSession::Create(std::move(reference), so));
  TSR_ASSIGN_OR_RETURN(got_s, InferenceSession::Create(program, so));
  std::vector<Tensor> inputs;
  if (o.accuracy_inputs.empty()) {
    TSR_ASSIGN_OR_RETURN(inputs, random_inputs(*want_s, 1));
  } else {
    for (size_t i = 0; i < want_s->inputs().size(); ++i) {
      const std::string path = o.accuracy_inputs + "/input_" + std::to_string(i) + ".pb";
      Tensor t;
      TSR_ASSIGN_OR_RETURN(t, read_tensor_file(path));
      inputs.push_back(std::move(t));
    }
  }
  std::vector<Tensor> want, got;
  TSR_ASSIGN_OR_RETURN(want, want_s->run(inputs));
  TSR_ASSIGN_OR_RETURN(got, got_s->run(inputs));
  std::vector<std::string> names;
  for (const auto& out : got_s->outputs()) names.push_back(out.name);
  report->precision = precision_name(o.precision);
  report->accuracy_inputs = o.accuracy_inputs.empty() ? "random" : o.accuracy_inputs;
  TSR_ASSIGN_OR_RETURN(report->accuracy, compare_outputs(names, got, want));
  return Status::Ok();
}

}  // namespace

Expected<Program> compile_graph(Graph g, const std::string& source, const CompileOptions& o, PartitionReport* report) {
  install_native_backend();
  PartitionReport local_report;
  if (!report) report = &local_report;
  auto warn = [&](const std::string& w) {
    if (o.warn) o.warn(w);
  };
  PartitionOptions po;
  po.policy = o.policy;
  // --tune measures engines one at a time; the cost model adds the
  // passive-wait penalty of mixed sets.
  TSR_ASSIGN_OR_RETURN(po.backends, resolve_backends(o.backends, o.measure != MeasureMode::kOff || o.openmp_spins));
  po.openmp_spins = o.openmp_spins;
  for (const auto& p : o.places) {
    PlaceRule r;
    TSR_ASSIGN_OR_RETURN(r, parse_place_rule(p));
    po.place.push_back(r);
  }
  if (o.min_region_nodes >= 0) po.min_region_nodes = o.min_region_nodes;
  TSR_ASSIGN_OR_RETURN(po.backend_options, options_with_precision(o.backend_options, o.precision));
  po.num_threads = threads_asked_for(o.threads);
  // What is measured: by default the nodes and regions that matter, within
  // a budget; --tune every candidate region; --no-tune or TESSERA_TUNE=0
  // nothing (estimates, and measurements already in the cache).
  const bool full = o.measure == MeasureMode::kFull;
  if (full && po.policy != PlacementPolicy::kCost) return InvalidInput("--tune needs --placement cost");
  po.measure = o.measure;
  partition::MeasureBudget budget;
  if (o.tune_budget_s >= 0) budget.limit_us = o.tune_budget_s * 1e6;
  po.budget = &budget;
  // Measurements from earlier compiles replace estimates; this one adds more.
  const std::string cache_path = o.tune_cache ? *o.tune_cache : partition::default_tune_cache_path();
  if (full && cache_path.empty()) return InvalidInput("--tune needs a cache file: set --tune-cache FILE or HOME");
  if (std::error_code ec;
      po.measure != MeasureMode::kOff && fs::exists(cache_path, ec) && !fs::is_regular_file(cache_path, ec)) {
    if (full) return InvalidInput("--tune: tune cache '" + cache_path + "' is not a file");  // before measuring
  }
  std::string warning;
  partition::TuneCache cache = partition::TuneCache::Open(cache_path, &warning);
  if (!warning.empty()) warn(warning);
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
  if (o.progress) po.progress = o.progress;
  const Graph source_graph = g;  // for the end-to-end check's alternatives (tensors are shared)
  auto program = partition_and_compile(std::move(g), po, report);
  if (!program.ok()) return program.status();
  program->meta.shape_overrides = o.shapes;
  if (const std::string note = symbolic_dims_note(source_graph, *report); !note.empty()) warn(note);
  {
    if (o.progress) o.progress(0, 0, "checking the plan end to end");
    const double left = full ? 5e6 : std::max(1e6, budget.limit_us - budget.spent_us);
    auto checked = check_plan(std::move(*program), source_graph, po, report, left);
    if (!checked.ok()) return checked.status();
    program = std::move(checked);
  }
  was_busy = was_busy || busy();
  if (was_busy && report->measured > 0) {
    warn(
        "other processes were running on this machine's cores while it measured; the measurements served this "
        "compile only and were not cached");
  } else if (Status st = cache.save(); !st.ok()) {
    if (full) return st;
    // Measuring by default must not fail a compile over a read-only cache.
    warn(st.message());
  }
  program->meta.source_model = fs::path(source).filename().string();
  program->meta.shape_overrides = o.shapes;
  return program;
}

Expected<std::vector<std::vector<std::string>>> bucket_shapes(const std::vector<std::string>& shapes) {
  InputRanges spans;
  TSR_ASSIGN_OR_RETURN(spans, parse_shapes(shapes));
  auto all_exact = [](const std::vector<DimRange>& dims) {
    return std::all_of(dims.begin(), dims.end(), [](const DimRange& r) { return r.exact(); });
  };
  // Per input, in the order first named: its exact specs, verbatim.
  std::vector<std::pair<std::string, std::vector<std::string>>> exact;
  for (const std::string& spec : shapes) {
    const std::string name = spec.substr(0, spec.find('='));
    InputRanges one;
    TSR_ASSIGN_OR_RETURN(one, parse_shapes({spec}));
    const bool is_exact = all_exact(one.begin()->second);
    auto it = std::find_if(exact.begin(), exact.end(), [&](const auto& e) { return e.first == name; });
    if (it == exact.end()) it = exact.insert(exact.end(), {name, {}});
    if (is_exact && std::find(it->second.begin(), it->second.end(), spec) == it->second.end()) it->second.push_back(spec);
  }
  auto ranged = [&](const std::string& name) { return !all_exact(spans.at(name)); };
  size_t count = 0;
  std::string counted;
  for (const auto& [name, specs] : exact) {
    if (!ranged(name) || specs.empty()) continue;
    if (count && specs.size() != count) {
      return InvalidInput("--shape: input '" + counted + "' names " + std::to_string(count) +
                          " exact shape(s) beside its range and '" + name + "' names " + std::to_string(specs.size()) +
                          "; each bucket takes the k-th exact shape of every ranged input");
    }
    count = specs.size();
    counted = name;
  }
  std::vector<std::vector<std::string>> out(count);
  for (size_t k = 0; k < count; ++k) {
    for (const auto& [name, specs] : exact) {
      if (!ranged(name)) {
        out[k].push_back(specs.front());  // the one shape it has
      } else if (specs.empty()) {
        return InvalidInput("--shape: input '" + name + "' has a range but no exact shape for bucket " +
                            std::to_string(k + 1) + " (" + counted + " names " + std::to_string(count) + ")");
      } else {
        out[k].push_back(specs[k]);
      }
    }
  }
  return out;
}

namespace {

constexpr size_t kMaxMaskedBuckets = 64;

// The sizes one ranged dim's masked buckets go up to: every multiple of `step` from the first one at or above
// lo, then hi.
std::vector<int64_t> bucket_uppers(const DimRange& r, int64_t step) {
  std::vector<int64_t> out;
  for (int64_t u = (r.lo + step - 1) / step * step; u < r.hi; u += step) out.push_back(u);
  out.push_back(r.hi);
  return out;
}

// Adds masked buckets (passes/masked_bucket.h) to `program` for the ranges o.shapes gives one input along its
// spatial dims. The largest bucket is compiled as the model is (placed, measured, checked); if it has engines, every
// other bucket is compiled with those engines' backends first (priority placement, no measuring) and added. Where
// the model has no masked buckets, a warning says why (ranges over one input's spatial dims only are tried).
Status add_masked_buckets(const ModelSource& m, const CompileOptions& o, Program& program, PartitionReport* report) {
  if (o.bucket_step <= 0) return Status::Ok();
  InputRanges spans;
  TSR_ASSIGN_OR_RETURN(spans, parse_shapes(o.shapes));
  bool ranged = false;
  for (const auto& [name, dims] : spans) {
    for (const DimRange& r : dims) ranged = ranged || !r.exact();
  }
  if (!ranged) return Status::Ok();
  auto note = [&](std::string why) {
    const std::string prefix = "masked bucket: ";
    if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
    if (o.warn) o.warn("no masked buckets: " + why);
    return Status::Ok();
  };
  Graph g;
  TSR_ASSIGN_OR_RETURN(g, load_graph(m, o.shapes, "compile"));
  // Each input's dims as a range per dim: its --shape span, else its known size.
  std::vector<std::vector<DimRange>> dims;
  for (const std::string& name : g.inputs) {
    const ValueInfo* vi = g.info(name);
    if (!vi || !vi->shape.rank_known) return note("input '" + name + "' has no rank");
    const auto span = spans.find(name);
    const bool spanned = span != spans.end() && static_cast<int>(span->second.size()) == vi->shape.rank();
    std::vector<DimRange> d;
    for (int k = 0; k < vi->shape.rank(); ++k) {
      if (spanned) {
        d.push_back(span->second[static_cast<size_t>(k)]);
      } else if (vi->shape[k].known()) {
        d.push_back(DimRange{vi->shape[k].value, vi->shape[k].value});
      } else {
        return note("input '" + name + "' dim " + std::to_string(k) + " has no size or range");
      }
    }
    dims.push_back(std::move(d));
  }
  // The largest bucket: whether the model has masked buckets at all, before they are counted.
  std::vector<Dims> hi;
  for (const auto& d : dims) {
    hi.emplace_back();
    for (const DimRange& r : d) hi.back().push_back(r.hi);
  }
  Graph largest_graph;
  {
    auto r = masked_bucket_graph(g, hi);
    if (!r.ok()) return note(r.status().message());
    largest_graph = std::move(*r);
  }
  // Every bucket's dims, the product of each ranged dim's steps (masked_bucket_graph allows one varying input).
  std::vector<std::vector<Dims>> uppers{hi}, lowers{hi};
  for (size_t i = 0; i < dims.size(); ++i) {
    for (size_t k = 0; k < dims[i].size(); ++k) {
      const DimRange& r = dims[i][k];
      if (r.exact()) continue;
      const std::vector<int64_t> steps = bucket_uppers(r, o.bucket_step);
      if (uppers.size() * steps.size() > kMaxMaskedBuckets) {
        return note("more than " + std::to_string(kMaxMaskedBuckets) + " buckets of " + std::to_string(o.bucket_step) +
                    " would be needed (give a larger --bucket-step)");
      }
      std::vector<std::vector<Dims>> nu, nl;
      for (size_t b = 0; b < uppers.size(); ++b) {
        int64_t from = r.lo;
        for (int64_t u : steps) {
          nu.push_back(uppers[b]), nu.back()[i][k] = u;
          nl.push_back(lowers[b]), nl.back()[i][k] = from;
          from = u + 1;
        }
      }
      uppers = std::move(nu), lowers = std::move(nl);
    }
  }
  // The largest bucket (the last) is placed as the model is; the others take its engines' backends first.
  const size_t largest = uppers.size() - 1;
  std::vector<Program> programs(uppers.size());
  std::vector<PartitionReport> reports(uppers.size());
  CompileOptions bo = o;
  bo.warn = nullptr;
  if (o.progress) o.progress(0, 0, "compiling masked bucket " + bucket_str(uppers[largest], lowers[largest]));
  TSR_ASSIGN_OR_RETURN(programs[largest], compile_graph(std::move(largest_graph), m.name(), bo, &reports[largest]));
  if (programs[largest].engines.empty()) {
    return note("the largest bucket " + bucket_str(uppers[largest]) + " runs on native alone");
  }
  std::vector<std::string> engine_backends;
  for (const EngineSpec& e : programs[largest].engines) {
    if (std::find(engine_backends.begin(), engine_backends.end(), e.backend) == engine_backends.end()) {
      engine_backends.push_back(e.backend);
    }
  }
  bo.backends.clear();
  for (const std::string& b : engine_backends) bo.backends += b + ",";
  bo.backends += "native";
  bo.policy = PlacementPolicy::kPriority;
  bo.measure = MeasureMode::kOff;
  for (size_t b = 0; b < largest; ++b) {
    if (o.progress) {
      o.progress(static_cast<int>(b + 1), static_cast<int>(uppers.size()),
                 "compiling masked bucket " + bucket_str(uppers[b], lowers[b]));
    }
    Graph bg;
    TSR_ASSIGN_OR_RETURN(bg, masked_bucket_graph(g, uppers[b]));
    TSR_ASSIGN_OR_RETURN(programs[b], compile_graph(std::move(bg), m.name(), bo, &reports[b]));
  }
  // In order of size; the session serves a request from the bucket whose range holds it.
  for (size_t b = 0; b < programs.size(); ++b) {
    const auto offset = static_cast<int>(program.engines.size());
    TSR_RETURN_IF_ERROR(add_bucket(program, std::move(programs[b]), uppers[b], lowers[b]));
    if (report) {
      BucketReport r{bucket_str(uppers[b], lowers[b]), std::move(reports[b].regions), reports[b].estimated_us};
      for (RegionInfo& region : r.regions) {
        if (region.engine >= 0) region.engine += offset;
      }
      report->buckets.push_back(std::move(r));
    }
  }
  return Status::Ok();
}

}  // namespace

Expected<Program> compile_model(const ModelSource& m, Graph g, const CompileOptions& o, PartitionReport* report) {
  std::vector<std::vector<std::string>> buckets;
  TSR_ASSIGN_OR_RETURN(buckets, bucket_shapes(o.shapes));
  Program program;
  PartitionReport local;
  if (!report) report = &local;
  Graph reference;  // the float32 model for the accuracy check below fp32 (tensors are shared)
  if (o.precision != Precision::kFp32) reference = g;
  TSR_ASSIGN_OR_RETURN(program, compile_graph(std::move(g), m.name(), o, report));
  if (o.precision != Precision::kFp32) {
    const kernels::Products asked = kernels::products_named(precision_name(o.precision));
    const bool native = std::any_of(report->regions.begin(), report->regions.end(),
                                    [](const RegionInfo& r) { return r.backend == "native"; });
    if (native && kernels::products_worth(asked) != asked && o.warn) {
      o.warn(std::string("--precision ") + precision_name(o.precision) + ": native products stay float32: its " +
             precision_name(o.precision) + " products measured no faster than float32 ones on this CPU");
    }
    if (o.progress) o.progress(0, 0, "measuring the accuracy against fp32");
    // A model that cannot run on the inputs made for it (symbolic dims without --shape) still compiles, unless a
    // budget needs the figures.
    if (Status st = check_accuracy(program, std::move(reference), o, report); !st.ok()) {
      if (!o.accuracy_budget.empty()) return st.with_context("--accuracy-budget: measuring the accuracy: ");
      if (o.warn) o.warn("accuracy against fp32 not measured: " + st.message() + " (give --shape or --input-dir)");
    }
    const std::string why = budget_violation(report->accuracy, o.accuracy_budget, precision_name(o.precision));
    if (!why.empty()) return InvalidInput(why);
  }
  for (size_t k = 0; k < buckets.size(); ++k) {
    std::string spec;
    for (const auto& s : buckets[k]) spec += (spec.empty() ? "" : " ") + s;
    const std::string what = "bucket " + std::to_string(k + 1) + " (" + spec + ")";
    if (o.progress) o.progress(0, 0, "compiling " + what);
    Graph bg;
    TSR_ASSIGN_OR_RETURN(bg, load_graph(m, buckets[k], "compile"));
    std::vector<Dims> dims;
    for (const std::string& name : bg.inputs) {
      const ValueInfo* vi = bg.info(name);
      if (!vi || !vi->shape.fully_known()) {
        return InvalidInput("--shape: " + what + " leaves input '" + name + "' " +
                            (vi ? vi->shape.str() : std::string("untyped")) +
                            " not fully known; name its exact shape beside every range");
      }
      dims.push_back(vi->shape.concrete());
    }
    CompileOptions bo = o;
    bo.shapes = buckets[k];
    bo.warn = nullptr;  // the main compile has said what there is to say about this model
    PartitionReport br;
    Program bp;
    TSR_ASSIGN_OR_RETURN(bp, compile_graph(std::move(bg), m.name(), bo, &br));
    const auto offset = static_cast<int>(program.engines.size());
    TSR_RETURN_IF_ERROR(add_bucket(program, std::move(bp), dims));
    if (report) {
      BucketReport b{spec, std::move(br.regions), br.estimated_us};
      for (RegionInfo& r : b.regions) {
        if (r.engine >= 0) r.engine += offset;
      }
      report->buckets.push_back(std::move(b));
    }
  }
  TSR_RETURN_IF_ERROR(add_masked_buckets(m, o, program, report));
  return program;
}

std::string engine_cache_dir(const CompileOptions& o) {
  const std::string tune = o.tune_cache ? *o.tune_cache : partition::default_tune_cache_path();
  if (tune.empty()) return "";
  return (fs::path(tune).parent_path() / "engines").string();
}

namespace {

// The model's identity for the engine cache: CRC-32C and size of its bytes (read in pieces; a model may be large).
Expected<std::string> source_digest(const ModelSource& m) {
  uint32_t crc = 0;
  uint64_t size = 0;
  if (m.path.empty()) {
    crc = crc32c(m.bytes.data(), m.bytes.size());
    size = m.bytes.size();
  } else {
    std::ifstream f(m.path, std::ios::binary);
    if (!f) return IoError("model '" + m.path + "': cannot read it again for the engine cache key");
    std::vector<char> buf(1 << 20);
    while (f) {
      f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      const auto got = static_cast<size_t>(f.gcount());
      crc = crc32c(buf.data(), got, crc);
      size += got;
    }
  }
  char out[48];
  std::snprintf(out, sizeof out, "%08x-%llu", crc, static_cast<unsigned long long>(size));
  return std::string(out);
}

// What a bucket compiled in the background needs: the graph to compile (the optimised model, or a ranged artifact's
// glue graph, which is that model wherever a ranged dim reaches), the options, and the part of the engine cache key
// that every bucket of the session shares (made on first use, on the planner's thread).
struct BucketSource {
  Graph graph;
  ModelSource model;
  CompileOptions options;
  std::string key;
};

// The session's part of an engine cache key: the model's bytes, the backends with their versions, the compile
// options and the machine.
Expected<std::string> engine_cache_key(const ModelSource& m, const CompileOptions& o) {
  std::string digest;
  TSR_ASSIGN_OR_RETURN(digest, source_digest(m));
  std::vector<std::shared_ptr<const Backend>> backends;
  TSR_ASSIGN_OR_RETURN(backends, resolve_backends(o.backends, o.openmp_spins));
  std::string key = std::string("tessera ") + TESSERA_VERSION + "\nmodel " + digest + "\nmachine " +
                    partition::identify_machine(o.threads > 0 ? o.threads : 0).key() + "\npolicy " +
                    std::to_string(static_cast<int>(o.policy)) + "\nmin_region_nodes " +
                    std::to_string(o.min_region_nodes) + "\noptions " + o.backend_options + "\nthreads " +
                    std::to_string(o.threads) + "\nmax_memory " + std::to_string(o.max_memory) + "\n" +
                    (o.measure_buckets && o.measure != MeasureMode::kOff ? "measured\n" : "") +
                    (o.openmp_spins ? "openmp_spins\n" : "");
  for (const auto& b : backends) key += "backend " + b->name() + " " + b->version() + "\n";
  for (const auto& p : o.places) key += "place " + p + "\n";
  return key;
}

// The engine cache's bound (CompileOptions::engine_cache_max_bytes): past it, the entries used longest ago go (a
// session that reads an entry marks it used); `keep`, the one just written, stays whatever its size. Each entry holds
// its model's weights: a BERT-base bucket is 440 MB, and every shape a stream or `bench` compiles adds one.
void prune_engine_cache(const fs::path& dir, const fs::path& keep, uint64_t max_bytes) {
  if (max_bytes == 0) {
    uint64_t mb = 4096;
    if (const char* v = std::getenv("TESSERA_ENGINE_CACHE_MAX_MB"); v && *v) {
      char* end = nullptr;
      const unsigned long long n = std::strtoull(v, &end, 10);
      if (end && *end == 0) mb = n;
    }
    max_bytes = mb << 20;
  }
  std::vector<std::tuple<fs::file_time_type, uintmax_t, fs::path>> entries;
  uintmax_t total = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".tsr" || !e.is_regular_file(ec)) continue;
    const uintmax_t size = e.file_size(ec);
    if (ec) continue;
    const fs::file_time_type used = e.last_write_time(ec);
    if (ec) continue;
    entries.emplace_back(used, size, e.path());
    total += size;
  }
  std::sort(entries.begin(), entries.end());  // used longest ago first
  for (const auto& [used, size, path] : entries) {
    if (total <= max_bytes) break;
    if (path != keep && fs::remove(path, ec)) total -= size;
  }
}

Expected<Program> compile_bucket_at(BucketSource& src, const std::vector<Dims>& dims, bool cached_only) {
  const Graph& g0 = src.graph;
  if (dims.size() != g0.inputs.size()) return InvalidInput("bucket " + bucket_str(dims) + ": wrong input count");
  std::vector<std::string> specs;
  for (size_t i = 0; i < dims.size(); ++i) specs.push_back(shape_spec(g0.inputs[i], dims[i]));
  CompileOptions o = src.options;
  o.shapes = specs;
  if (!o.measure_buckets) o.measure = MeasureMode::kOff;  // estimates and cached measurements (see measure_buckets)
  o.progress = nullptr;
  o.warn = nullptr;
  // The engine cache: one .tsr per model, dims, backends (with versions), options and machine.
  std::string path;
  if (const std::string dir = engine_cache_dir(src.options); !dir.empty()) {
    if (src.key.empty()) {
      TSR_ASSIGN_OR_RETURN(src.key, engine_cache_key(src.model, src.options));
    }
    const std::string key = src.key + "dims " + bucket_str(dims) + "\n";
    char name[40];
    std::snprintf(name, sizeof name, "%08x%08x.tsr", crc32c(key.data(), key.size()),
                  crc32c(key.data(), key.size(), 0x9e3779b9u));
    path = (fs::path(dir) / name).string();
    std::error_code ec;
    if (fs::exists(path, ec)) {
      auto cached = read_artifact(path);
      std::string problem = cached.ok() ? "" : cached.status().message();
      if (cached.ok()) {
        bool same = cached->buckets.empty() && cached->graph.inputs == g0.inputs;
        for (size_t i = 0; same && i < dims.size(); ++i) {
          const ValueInfo* vi = cached->graph.info(cached->graph.inputs[i]);
          same = vi && vi->shape.fully_known() && vi->shape.concrete() == dims[i];
        }
        if (same) {
          fs::last_write_time(path, fs::file_time_type::clock::now(), ec);  // used now: the bound evicts it last
          return cached;
        }
        problem = "it was compiled for other inputs";
      }
      if (src.options.warn) src.options.warn("engine cache entry '" + path + "' is unusable (" + problem + "); recompiling it");
      fs::remove(path, ec);
    }
  }
  if (cached_only) return IoError("bucket " + bucket_str(dims) + " is not in the engine cache");
  Graph g = g0;  // tensors shared
  TSR_RETURN_IF_ERROR(apply_shapes(g, specs));
  TSR_RETURN_IF_ERROR(optimize_graph(g, OptimizeOptions{}));
  Program program;
  TSR_ASSIGN_OR_RETURN(program, compile_graph(std::move(g), src.model.name(), o, nullptr));
  if (!path.empty()) {
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    if (Status st = write_artifact(program, path); !st.ok() && src.options.warn) {
      src.options.warn("engine cache: " + st.message());
    }
    prune_engine_cache(fs::path(path).parent_path(), path, src.options.engine_cache_max_bytes);
  }
  return program;
}

// --shape specs that give every input dim the graph leaves symbolic the size it has in DIR/input_<i>.pb (graph input
// order): the inputs a run will take, so that engines are compiled for them. An input --shape names (`given`), or
// one without a file, with another rank or with a known dim that differs, is left as it is (the run names the
// problem).
Expected<std::vector<std::string>> shapes_of_inputs(const Graph& g, const std::string& dir, const InputRanges& given) {
  std::vector<std::string> specs;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const ValueInfo* vi = g.info(g.inputs[i]);
    if ((vi && vi->shape.fully_known()) || given.count(g.inputs[i])) continue;
    const std::string path = dir + "/input_" + std::to_string(i) + ".pb";
    std::error_code ec;
    if (!fs::exists(path, ec)) continue;
    Dims dims;  // the run reads the whole file; its dims are all a compile needs
    TSR_ASSIGN_OR_RETURN(dims, read_tensor_dims(path));
    const auto rank = static_cast<int>(dims.size());
    bool fits = !vi || !vi->shape.rank_known || vi->shape.rank() == rank;
    for (int d = 0; fits && vi && vi->shape.rank_known && d < rank; ++d) {
      fits = !vi->shape[d].known() || vi->shape[d].value == dims[static_cast<size_t>(d)];
    }
    if (fits) specs.push_back(shape_spec(g.inputs[i], dims));
  }
  return specs;
}

// SessionOptions::compile_bucket for a model compiled with engines and some input dims left to run time; none when
// every input is static or nothing but native runs.
void give_bucket_compiler(const Graph& g, const ModelSource& m, const CompileOptions& o, bool engines_possible,
                          SessionOptions* so) {
  if (!so->plan_in_background || !engines_possible || !engines_used(g).empty()) return;
  const bool symbolic = std::any_of(g.inputs.begin(), g.inputs.end(), [&](const std::string& name) {
    const ValueInfo* vi = g.info(name);
    return !vi || !vi->shape.fully_known();
  });
  if (!symbolic) return;
  CompileOptions bo = o;
  // A bucket runs in this process beside the others: see CompileOptions::openmp_spins. (Before, the artifact's
  // backends, given as a list, made the first bucket compile set OpenMP to wait passively for the whole process:
  // every oneDNN primitive of a keyword spotter's bucket at batch 5 then woke a sleeping worker, 1.20 ms against 0.99
  // for its static compile.)
  bo.openmp_spins = true;
  auto src = std::make_shared<BucketSource>(BucketSource{g, m, bo, ""});  // the key is made on first use
  so->compile_bucket = [src](const std::vector<Dims>& dims, bool cached_only) {
    return compile_bucket_at(*src, dims, cached_only);
  };
}

}  // namespace

Expected<std::unique_ptr<InferenceSession>> open_session(const ModelSource& m, const CompileOptions& o,
                                                         const SessionOptions& so, PartitionReport* report) {
  install_native_backend();
  bool artifact = false;
  TSR_ASSIGN_OR_RETURN(artifact, is_artifact(m));
  SessionOptions with_ranges = so;  // the sizes compiled for, unless the caller gave its own
  if (artifact) {
    // Its shapes are compiled in: --shape names the exact dims its random inputs take, within its ranges.
    InputRanges given;
    TSR_ASSIGN_OR_RETURN(given, parse_shapes(o.shapes));
    for (const auto& [name, ranges] : given) {
      Dims dims;
      for (const DimRange& r : ranges) {
        if (!r.exact()) {
          return InvalidInput("--shape " + name + "=..," + r.str() + ",..: an artifact's ranges are compiled in; " +
                              "--shape on one gives the exact dims of its inputs");
        }
        dims.push_back(r.lo);
      }
      with_ranges.sample_dims[name] = std::move(dims);
    }
    auto program =
        m.path.empty() ? read_artifact_bytes(m.name(), m.bytes.data(), m.bytes.size()) : read_artifact(m.path);
    if (!program.ok()) return program.status();
    // Its precision was chosen at compile time: asking for another one is a mistake, not a silent fp32.
    if (o.precision != Precision::kFp32) {
      const std::string recorded = program->meta.precision();
      if (recorded != precision_name(o.precision)) {
        return InvalidInput("--precision " + std::string(precision_name(o.precision)) + ": '" + m.name() +
                            "' was compiled at " + (recorded.empty() ? "fp32" : recorded) +
                            "; compile the ONNX model with --precision to change it");
      }
    }
    if (with_ranges.input_ranges.empty()) {
      auto ranges = parse_shapes(program->meta.shape_overrides);
      if (!ranges.ok()) return InvalidModel("'" + m.name() + "': its shape overrides: " + ranges.status().message());
      with_ranges.input_ranges = std::move(*ranges);
    }
    if (o.background_buckets) {
      // Buckets for new shapes come from the backends the artifact was compiled with.
      CompileOptions bo = o;
      bo.backends.clear();
      for (const BackendRecord& r : program->meta.backends) bo.backends += (bo.backends.empty() ? "" : ",") + r.name;
      bo.shapes = program->meta.shape_overrides;
      give_bucket_compiler(program->graph, m, bo, program->meta.backends.size() > 1, &with_ranges);
    }
    return InferenceSession::Create(std::move(*program), with_ranges);
  }
  std::vector<std::shared_ptr<const Backend>> backends;
  TSR_ASSIGN_OR_RETURN(backends, resolve_backends(o.backends));
  Graph g;
  TSR_ASSIGN_OR_RETURN(g, import_model(m, o.shapes));
  CompileOptions co = o;
  if (!o.shapes_from_inputs.empty()) {
    InputRanges given;
    TSR_ASSIGN_OR_RETURN(given, parse_shapes(o.shapes));
    std::vector<std::string> pins;
    TSR_ASSIGN_OR_RETURN(pins, shapes_of_inputs(g, o.shapes_from_inputs, given));
    TSR_RETURN_IF_ERROR(apply_shapes(g, pins));
    co.shapes.insert(co.shapes.end(), pins.begin(), pins.end());
  }
  if (with_ranges.input_ranges.empty()) {
    TSR_ASSIGN_OR_RETURN(with_ranges.input_ranges, parse_shapes(co.shapes));
  }
  if (backends.size() == 1 && co.places.empty()) {
    // Native alone: its products at the precision asked for.
    with_ranges.products = kernels::products_named(precision_name(co.precision));
    return InferenceSession::Create(std::move(g), with_ranges);
  }
  OptimizeOptions opt;
  TSR_RETURN_IF_ERROR(optimize_graph(g, opt));
  if (co.background_buckets) give_bucket_compiler(g, m, co, /*engines_possible=*/true, &with_ranges);
  Program p;
  TSR_ASSIGN_OR_RETURN(p, compile_model(m, std::move(g), co, report));
  return InferenceSession::Create(std::move(p), with_ranges);
}

Expected<std::vector<Tensor>> random_inputs(const InferenceSession& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uf(-1.f, 1.f);
  std::vector<Tensor> inputs;
  for (const auto& in : s.inputs()) {
    if (!in.shape.rank_known) return InvalidInput("input '" + in.name + "' has an unknown rank; give --shape");
    // The dims given for it (--shape on an artifact), else: a symbolic dim takes the low end of its compiled range,
    // else 1.
    Dims d = in.sample;
    for (size_t i = 0; in.sample.empty() && i < in.shape.dims.size(); ++i) {
      const Dim& x = in.shape.dims[i];
      d.push_back(x.known() ? x.value : i < in.ranges.size() ? in.ranges[i].lo : 1);
    }
    DType dt = in.dtype == DType::kUndefined ? DType::kFloat32 : in.dtype;
    // Declared shapes are the model's to choose: one too large to make is an error, not an allocation attempt.
    std::string too_large = tensor_size_problem(d, dtype_size(dt));
    if (too_large.empty() && s.max_memory() > 0 && static_cast<size_t>(numel(d)) * dtype_size(dt) > s.max_memory()) {
      too_large = "more than the memory limit of " + human_bytes(s.max_memory());
    }
    if (!too_large.empty()) {
      return InvalidInput("input '" + in.name + "' " + dtype_name(dt) + dims_str(d) + ": " + too_large);
    }
    Tensor t;
    try {
      t = Tensor(dt, d);
    } catch (const std::bad_alloc&) {
      return InvalidInput("input '" + in.name + "' " + dtype_name(dt) + dims_str(d) +
                          ": out of memory making random values (give --shape or --max-memory)");
    }
    visit_dtype(dt, [&](auto tag) {
      using T = decltype(tag);
      T* p = t.data<T>();
      for (int64_t i = 0; i < t.numel(); ++i) {
        if constexpr (std::is_same_v<T, bool>)
          p[i] = (rng() & 1) != 0;
        else if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>)
          p[i] = static_cast<T>(uf(rng));
        else
          p[i] = static_cast<T>(rng() & 1);
      }
    });
    inputs.push_back(std::move(t));
  }
  return inputs;
}

}  // namespace tessera::api
