// `tessera inspect`: what a validated artifact holds, as text or JSON.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "artifact/artifact.h"
#include "artifact/artifact_format.h"
#include "artifact/artifact_meta.h"
#include "util/human_bytes.h"

namespace tessera {

namespace {

using artifact::json;

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

ValueInfo info_of(const Graph& g, const std::string& name) {
  const ValueInfo* vi = g.info(name);
  return vi ? *vi : ValueInfo{};
}

uint64_t constants_section_size(const artifact::Container& c) {
  for (const auto& s : c.sections) {
    if (s.kind == static_cast<uint32_t>(artifact::SectionKind::kConstants)) return s.size;
  }
  return 0;
}

std::string describe_json(const artifact::LoadedArtifact& a) {
  const artifact::Container& c = a.container;
  const Program& p = a.program;
  json j = json::object();
  j["path"] = c.path;
  j["format_version"] = c.version;
  j["file_size"] = c.file_size;
  json sections = json::array();
  for (size_t i = 0; i < c.sections.size(); ++i) {
    const auto& s = c.sections[i];
    json e = json::object();
    e["index"] = i;
    e["kind"] = artifact::section_kind_name(s.kind);
    e["offset"] = s.offset;
    e["size"] = s.size;
    e["crc32c"] = hex32(s.crc);
    e["alignment"] = s.alignment;
    sections.push_back(std::move(e));
  }
  j["sections"] = std::move(sections);
  artifact::add_program_meta(p.meta, &j);
  json engines = json::array();
  for (const auto& e : p.engines) {
    json x = json::object();
    x["region"] = e.region;
    x["backend"] = e.backend;
    x["backend_version"] = e.backend_version;
    x["options"] = e.options;
    x["blob_bytes"] = e.blob.size;
    x["inputs"] = e.inputs;
    x["outputs"] = e.outputs;
    x["constants"] = e.constants.size();
    engines.push_back(std::move(x));
  }
  j["engines"] = std::move(engines);
  json consts = json::object();
  consts["count"] = p.constants.size();
  consts["stored_bytes"] = constants_section_size(c);
  consts["glue_graph"] = p.graph.constants.size();
  j["constants"] = std::move(consts);
  json graph = json::object();
  graph["nodes"] = p.graph.nodes.size();
  graph["engines"] = engines_used(p.graph);
  j["graph"] = std::move(graph);
  json buckets = json::array();
  for (const ProgramBucket& b : p.buckets) {
    json x = json::object();
    x["inputs"] = b.inputs;
    if (!b.lower.empty()) x["lower"] = b.lower;  // a masked bucket: every dims from these to `inputs`
    x["nodes"] = b.graph.nodes.size();
    x["engines"] = engines_used(b.graph);
    buckets.push_back(std::move(x));
  }
  j["buckets"] = std::move(buckets);
  json inputs = json::array(), outputs = json::array();
  for (const auto& n : p.graph.inputs) inputs.push_back(artifact::signature_json(n, info_of(p.graph, n)));
  for (const auto& n : p.graph.outputs) outputs.push_back(artifact::signature_json(n, info_of(p.graph, n)));
  j["inputs"] = std::move(inputs);
  j["outputs"] = std::move(outputs);
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string describe_text(const artifact::LoadedArtifact& a) {
  const artifact::Container& c = a.container;
  const Program& p = a.program;
  std::ostringstream o;
  o << "artifact '" << c.path << "': Tessera artifact format " << c.version << ", " << c.file_size << " bytes ("
    << human_bytes(c.file_size) << "), " << c.sections.size() << " sections\n";
  o << "producer: " << p.meta.producer << " " << p.meta.producer_version;
  if (!p.meta.source_model.empty()) o << ", compiled from '" << p.meta.source_model << "'";
  o << "\n";
  if (!p.meta.backends.empty()) {
    std::vector<std::string> b;
    for (const auto& r : p.meta.backends) {
      b.push_back(r.name + (r.version.empty() ? "" : " " + r.version) +
                  (r.options.empty() ? "" : " [" + r.options + "]"));
    }
    o << "backends: " << join(b) << "\n";
  }
  if (!p.meta.shape_overrides.empty()) o << "shape overrides: " << join(p.meta.shape_overrides) << "\n";
  if (p.meta.threads_best > 0) {
    o << "threads: runs on " << p.meta.threads_best << " when asked for " << p.meta.threads_measured
      << " (measured faster at compile)\n";
  }
  o << "sections:\n";
  for (size_t i = 0; i < c.sections.size(); ++i) {
    const auto& s = c.sections[i];
    char line[160];
    std::snprintf(line, sizeof line, "  %2zu %-9s offset %10llu  size %10llu  crc32c %s  align %u\n", i,
                  artifact::section_kind_name(s.kind), static_cast<unsigned long long>(s.offset),
                  static_cast<unsigned long long>(s.size), hex32(s.crc).c_str(), s.alignment);
    o << line;
  }
  o << "engines: " << p.engines.size() << "\n";
  for (const auto& e : p.engines) {
    o << "  " << e.region << ": " << e.backend << (e.backend_version.empty() ? "" : " " + e.backend_version)
      << ", blob " << e.blob.size << " bytes, " << e.constants.size() << " constants, inputs [" << join(e.inputs)
      << "], outputs [" << join(e.outputs) << "]";
    if (!e.options.empty()) o << ", options '" << e.options << "'";
    o << "\n";
  }
  const uint64_t stored = constants_section_size(c);
  o << "constants: " << p.constants.size() << ", " << stored << " bytes stored (" << human_bytes(stored)
    << "); glue graph uses " << p.graph.constants.size() << "\n";
  // Which engines serve which input dims: the main graph every shape in the compiled ranges, a bucket its exact dims.
  auto engine_list = [&](const Graph& g) {
    std::vector<std::string> names;
    for (int64_t e : engines_used(g)) {
      if (e >= 0 && e < static_cast<int64_t>(p.engines.size())) {
        names.push_back(p.engines[static_cast<size_t>(e)].region + " (" + p.engines[static_cast<size_t>(e)].backend + ")");
      }
    }
    return names.empty() ? std::string("none") : join(names);
  };
  o << "glue graph: " << p.graph.nodes.size() << " nodes; engines " << engine_list(p.graph) << "\n";
  if (!p.buckets.empty()) {
    const auto masked =
        std::count_if(p.buckets.begin(), p.buckets.end(), [](const ProgramBucket& b) { return !b.lower.empty(); });
    o << "buckets: " << p.buckets.size() << " (input dims with engines of their own; other dims run the glue graph)";
    if (masked) o << "; " << masked << " masked: each serves a range of dims, padded to its largest";
    o << "\n";
    for (const ProgramBucket& b : p.buckets) {
      o << "  " << bucket_str(b.inputs, b.lower) << ": " << b.graph.nodes.size() << " nodes; engines "
        << engine_list(b.graph) << "\n";
    }
  }
  o << "inputs:\n";
  for (const auto& n : p.graph.inputs) o << "  " << n << ": " << artifact::signature_str(info_of(p.graph, n)) << "\n";
  o << "outputs:\n";
  for (const auto& n : p.graph.outputs) o << "  " << n << ": " << artifact::signature_str(info_of(p.graph, n)) << "\n";
  return o.str();
}

}  // namespace

Expected<std::string> describe_artifact(const std::string& path, bool json_output) {
  auto a = artifact::load_artifact(path);
  if (!a.ok()) return a.status();
  return json_output ? describe_json(a.value()) : describe_text(a.value());
}

bool is_artifact_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  uint8_t magic[sizeof artifact::kMagic];
  ssize_t n = ::read(fd, magic, sizeof magic);
  ::close(fd);
  return n == static_cast<ssize_t>(sizeof magic) && std::memcmp(magic, artifact::kMagic, sizeof magic) == 0;
}

bool is_artifact_bytes(const std::string& bytes) {
  return bytes.size() >= sizeof artifact::kMagic && std::memcmp(bytes.data(), artifact::kMagic, sizeof artifact::kMagic) == 0;
}

}  // namespace tessera
