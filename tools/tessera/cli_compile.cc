// tessera compile / partition / inspect.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "artifact/artifact.h"
#include "cli.h"

namespace fs = std::filesystem;

namespace tessera::cli {

namespace {

Status write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return IoError("cannot write '" + path + "'");
  f << text;
  if (!f.good()) return IoError("cannot write '" + path + "'");
  return Status::Ok();
}

// Renders DOT to SVG with Graphviz's `dot`.
Status write_svg(const std::string& path, const std::string& dot) {
  std::string tmp = path + ".dot.tmp";
  TSR_RETURN_IF_ERROR(write_text(tmp, dot));
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
    return IoError("Graphviz 'dot' could not draw '" + path + "' (is graphviz installed?)" +
                   (out.empty() ? "" : ": " + out));
  }
  return Status::Ok();
}

}  // namespace

int cmd_compile(const Args& a) {
  if (a.positional.size() != 1) return usage_error("compile: expected exactly one MODEL.onnx argument");
  auto out = a.opts.find("-o");
  if (out == a.opts.end()) return usage_error("compile: -o OUT.tsr is required");
  auto t0 = std::chrono::steady_clock::now();
  auto g = load_graph(a.positional[0], a);
  if (!g.ok()) return fail(g.status());
  PartitionReport report;
  auto program = compile_graph(std::move(*g), a.positional[0], a, &report, true);
  if (!program.ok()) return fail(program.status());
  Status st = write_artifact(*program, out->second);
  if (!st.ok()) return fail(st);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::error_code ec;
  auto size = fs::file_size(out->second, ec);
  std::map<std::string, int> per_backend;
  for (const auto& r : report.regions) per_backend[r.backend]++;
  std::string regions;
  for (const auto& [b, c] : per_backend) regions += (regions.empty() ? "" : ", ") + std::to_string(c) + " " + b;
  std::string placement = "placement " + report.policy;
  if (report.policy == "cost") {
    char buf[96];
    std::snprintf(buf, sizeof(buf), ", estimated %.3f ms", report.estimated_us / 1000);
    placement += buf;
  }
  if (report.measured > 0 || report.cache_hits > 0) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "; measured %d candidates now (%.2f s%s), reused %d measurements from the tune cache",
                  report.measured, report.measure_seconds, report.budget_exhausted ? ", budget reached" : "",
                  report.cache_hits);
    placement += buf;
  }
  if (!report.plan_timings.empty()) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "; end-to-end check of %zu plans (%.2f s)", report.plan_timings.size(),
                  report.check_seconds);
    placement += buf;
  }
  std::printf("compiled %s -> %s: %zu regions (%s), %zu engines, %.2f MiB, %.2f s; %s\n", a.positional[0].c_str(),
              out->second.c_str(), report.regions.size(), regions.c_str(), program->engines.size(),
              static_cast<double>(size) / (1 << 20), secs, placement.c_str());
  return 0;
}

int cmd_partition(const Args& a) {
  if (a.positional.size() != 1) return usage_error("partition: expected exactly one MODEL argument");
  auto g = load_graph(a.positional[0], a);
  if (!g.ok()) return fail(g.status());
  PartitionReport report;
  auto program = compile_graph(std::move(*g), a.positional[0], a, &report, true);
  if (!program.ok()) return fail(program.status());
  if (auto it = a.opts.find("--dot"); it != a.opts.end()) {
    Status st = write_text(it->second, report_dot(report));
    if (!st.ok()) return fail(st);
  }
  if (auto it = a.opts.find("--svg"); it != a.opts.end()) {
    Status st = write_svg(it->second, report_dot(report));
    if (!st.ok()) return fail(st);
  }
  std::fputs((a.json ? report_json(report) : report_text(report)).c_str(), stdout);
  return 0;
}

int cmd_inspect(const Args& a) {
  if (a.positional.size() != 1) return usage_error("inspect: expected exactly one OUT.tsr argument");
  const std::string& path = a.positional[0];
  if (!fs::exists(path)) return fail(IoError("artifact '" + path + "' does not exist"));
  auto text = describe_artifact(path, a.json);
  if (!text.ok()) return fail(text.status());
  std::fputs(text->c_str(), stdout);
  return 0;
}

}  // namespace tessera::cli
