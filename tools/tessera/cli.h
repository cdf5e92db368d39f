// Pieces of the tessera command line shared by its commands: argument
// parsing, loading a model (ONNX or artifact) into a session, compiling a
// model through the partitioner.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "api/profile.h"
#include "api/session_setup.h"
#include "artifact/program.h"
#include "partition/partition.h"
#include "runtime/session.h"
#include "util/status.h"

namespace tessera::cli {

extern const char* kUsage;

struct Args {
  std::string command;
  std::vector<std::string> positional;
  std::map<std::string, std::string> opts;
  std::vector<std::string> shapes;  // --shape, repeatable
  std::vector<std::string> places;  // --place, repeatable
  bool json = false;
  bool profile = false;
  bool tune = false;
  bool no_tune = false;
};

// Prints "tessera: error: <message>" on one line; returns the exit code.
int fail(const Status& st);
int usage_error(const std::string& msg);

Expected<Args> parse_args(int argc, char** argv);
Expected<int64_t> int_opt(const Args& a, const std::string& key, int64_t def, int64_t min_value);
Expected<double> float_opt(const Args& a, const std::string& key, double def);

// Imports an ONNX model, applies --shape, and optimises it.
Expected<Graph> load_graph(const std::string& path, const Args& a);

// What placement measures: --tune (everything), --no-tune or TESSERA_TUNE=0
// (nothing), else the default (what matters, within --tune-budget).
MeasureMode measure_mode(const Args& a);

// Partitions and compiles an optimised graph for --backends (default: every
// available backend), with --place / --min-region-nodes / --backend-options.
// Shows progress on a terminal when `progress` is set.
Expected<Program> compile_graph(Graph g, const std::string& source, const Args& a, PartitionReport* report,
                                bool progress);

// A session for MODEL: an artifact is loaded as compiled; an ONNX model runs
// natively, or is compiled in memory when --backends names external backends.
// `report` (optional) receives the placement report when one is made.
Expected<std::unique_ptr<InferenceSession>> open_session(const std::string& path, const Args& a,
                                                         PartitionReport* report = nullptr);

// open_session(), keeping what the placement report says about the nodes of
// engine regions when the model is compiled here.
Expected<std::unique_ptr<InferenceSession>> open_profiled_session(const std::string& path, const Args& a,
                                                                  api::RegionNodes* nodes);

// The library's compile options from the command line's flags.
Expected<api::CompileOptions> compile_options(const Args& a, bool progress);

using api::random_inputs;
using api::RegionNodes;
using api::ProfileItem;
using api::ProfileSummary;
using api::check_trace_path;
using api::print_profile_text;
using api::profile_items;
using api::profile_json;
using api::summarize;
using api::write_trace;

int cmd_compile(const Args& a);
int cmd_partition(const Args& a);
int cmd_inspect(const Args& a);

}  // namespace tessera::cli
