// tessera compile / partition / inspect.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli.h"

namespace fs = std::filesystem;

namespace tessera::cli {

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (f) f << text;
  if (!f || !f.good()) throw Error(TESSERA_CODE_IO, "cannot write '" + path + "'");
}

// Renders DOT to SVG with Graphviz's `dot`.
void write_svg(const std::string& path, const std::string& dot) {
  std::string tmp = path + ".dot.tmp";
  write_text(tmp, dot);
  std::string cmd = "dot -Tsvg -o '" + path + "' '" + tmp + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  if (p) {
    char buf[256];
    while (fgets(buf, sizeof buf, p)) out += buf;
  }
  int rc = p ? pclose(p) : -1;
  std::error_code ec;
  fs::remove(tmp, ec);
  if (rc != 0) {
    throw Error(TESSERA_CODE_IO, "Graphviz 'dot' could not draw '" + path + "' (is graphviz installed?)" +
                                     (out.empty() ? "" : ": " + out));
  }
}

}  // namespace

int cmd_compile(const Args& a) {
  if (a.positional.size() != 1) usage_error("compile: expected exactly one MODEL.onnx argument");
  auto out = a.opts.find("-o");
  if (out == a.opts.end()) usage_error("compile: -o OUT.tsr is required");
  const auto t0 = std::chrono::steady_clock::now();
  const Env env = make_env();
  const SessionOptions opts = session_options(a, true);
  const Report report = [&] {
    ProgressLine line;
    return CompileWithReport(env, a.positional[0], out->second, &opts);
  }();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::error_code ec;
  const auto size = fs::file_size(out->second, ec);
  std::printf("compiled %s -> %s: %s, %.2f MiB, %.2f s; %s\n", a.positional[0].c_str(), out->second.c_str(),
              report.Render(TESSERA_FORMAT_REGIONS_LINE).c_str(), static_cast<double>(size) / (1 << 20), secs,
              report.Render(TESSERA_FORMAT_PLACEMENT_LINE).c_str());
  if (const std::string acc = report.Render(TESSERA_FORMAT_ACCURACY_LINE); !acc.empty()) {
    std::printf("accuracy: %s\n", acc.c_str());
  }
  return 0;
}

int cmd_partition(const Args& a) {
  if (a.positional.size() != 1) usage_error("partition: expected exactly one MODEL argument");
  const Env env = make_env();
  const SessionOptions opts = session_options(a, true);
  const Report report = [&] {
    ProgressLine line;
    return CompileWithReport(env, a.positional[0], "", &opts);
  }();
  if (auto it = a.opts.find("--dot"); it != a.opts.end()) write_text(it->second, report.Render(TESSERA_FORMAT_DOT));
  if (auto it = a.opts.find("--svg"); it != a.opts.end()) write_svg(it->second, report.Render(TESSERA_FORMAT_DOT));
  std::fputs(report.Render(a.json ? TESSERA_FORMAT_JSON : TESSERA_FORMAT_TEXT).c_str(), stdout);
  return 0;
}

int cmd_inspect(const Args& a) {
  if (a.positional.size() != 1) usage_error("inspect: expected exactly one OUT.tsr argument");
  std::fputs(Inspect(a.positional[0], a.json ? TESSERA_FORMAT_JSON : TESSERA_FORMAT_TEXT).c_str(), stdout);
  return 0;
}

}  // namespace tessera::cli
