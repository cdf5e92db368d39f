// Pieces of the tessera command line shared by its commands: argument
// parsing, and turning the flags into the library's session options. The
// command line uses only the public C++ API (tessera/tessera.hpp) over
// libtessera.so; every failure is a tessera::Error, which main() prints on
// one line with exit code 2 for bad input and 1 for a failed run.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/tessera.hpp"

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
  bool no_background_buckets = false;  // --no-background-buckets
};

// A usage mistake: thrown as an INVALID_ARGUMENT error (exit code 2).
[[noreturn]] void usage_error(const std::string& msg);

// Parses argv; prints a command's help and returns command "--help" for `tessera CMD --help`.
Args parse_args(int argc, char** argv);
int64_t int_opt(const Args& a, const std::string& key, int64_t def, int64_t min_value);
double float_opt(const Args& a, const std::string& key, double def);

// The environment every command uses: warnings printed as "tessera: warning: ...".
Env make_env();

// The session options of the command line's flags (--backends, --shape, --place, --placement, --tune/--no-tune,
// --tune-budget, --tune-cache, --min-region-nodes, --backend-options, --threads); with `progress`, compile progress
// is shown on a terminal.
SessionOptions session_options(const Args& a, bool progress);
// Clears the progress line session_options(a, true) may have drawn.
void end_progress();
// Calls end_progress() when it goes out of scope (a compile done or failed).
struct ProgressLine {
  ProgressLine() = default;
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  ~ProgressLine() { end_progress(); }
};

int cmd_compile(const Args& a);
int cmd_partition(const Args& a);
int cmd_inspect(const Args& a);

}  // namespace tessera::cli
