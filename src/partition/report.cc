// Renderings of a PartitionReport: text for people, JSON for scripts, and
// Graphviz DOT (nodes coloured by backend, regions drawn as clusters).
#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "partition/partition.h"
#include "util/human_bytes.h"

namespace tessera {

namespace {

std::string histogram_str(const std::map<std::string, int>& h) {
  std::vector<std::pair<std::string, int>> v(h.begin(), h.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string s;
  for (const auto& [op, c] : v) s += (s.empty() ? "" : " ") + op + "x" + std::to_string(c);
  return s;
}

std::string list_str(const std::vector<std::string>& v, size_t max_items) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < max_items; ++i) s += (i ? "," : "") + v[i];
  if (v.size() > max_items) s += ",... (+" + std::to_string(v.size() - max_items) + ")";
  return s.empty() ? "-" : s;
}

// Refusals grouped by backend, then by reason (in first-seen order).
struct Group {
  std::string reason;
  std::vector<std::string> nodes;
};
std::vector<std::pair<std::string, std::vector<Group>>> group_refusals(const PartitionReport& r) {
  std::vector<std::pair<std::string, std::vector<Group>>> out;
  for (const auto& ref : r.refusals) {
    auto bit = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == ref.backend; });
    if (bit == out.end()) {
      out.push_back({ref.backend, {}});
      bit = out.end() - 1;
    }
    auto git = std::find_if(bit->second.begin(), bit->second.end(),
                            [&](const Group& g) { return g.reason == ref.reason; });
    if (git == bit->second.end()) {
      bit->second.push_back({ref.reason, {}});
      git = bit->second.end() - 1;
    }
    std::string who = ref.node.empty() ? ref.op_type : ref.node;
    if (ref.graph != "main") who = ref.graph + ":" + who;
    git->nodes.push_back(who);
  }
  return out;
}

// The colour a backend declared (ABI minor revision 1), else one from a
// palette by its name.
std::string color_of(const PartitionReport& r, const std::string& backend) {
  auto it = r.colors.find(backend);
  if (it != r.colors.end() && !it->second.empty()) return it->second;
  static const char* kPalette[] = {"#fcbba1", "#dadaeb", "#c7e9c0", "#fee391", "#bcbddc", "#fdae6b"};
  size_t h = std::hash<std::string>{}(backend);
  return kPalette[h % (sizeof(kPalette) / sizeof(kPalette[0]))];
}

std::string us_str(double us) {
  char buf[32];
  if (us >= 1000) std::snprintf(buf, sizeof(buf), "%.2f ms", us / 1000);
  else std::snprintf(buf, sizeof(buf), "%.1f us", us);
  return buf;
}

std::string dot_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

void region_text(std::ostringstream& os, const RegionInfo& reg, const char* indent) {
  os << indent << "region " << reg.id << "  " << reg.backend << "  " << reg.nodes.size() << " nodes";
  if (reg.graph != "main") os << "  in " << reg.graph;
  if (reg.engine >= 0) os << "  engine " << reg.engine << " (" << reg.blob_bytes << " B)";
  os << "  ops " << histogram_str(reg.op_histogram) << "  in " << list_str(reg.inputs, 6) << "  out "
     << list_str(reg.outputs, 6);
  if (reg.crossing_bytes > 0)
    os << "  crosses " << human_bytes(static_cast<size_t>(reg.crossing_bytes)) << " host<->device per run";
  os << "\n";
  if (!reg.considered.empty()) {
    os << indent << "  considered";
    for (const auto& o : reg.considered) {
      os << "  " << o.backend << " " << us_str(o.us) << (o.measured ? " measured" : " est");
    }
    os << "  -> " << reg.backend << ": " << reg.decision << "\n";
  }
}

nlohmann::json region_json(const RegionInfo& reg) {
  nlohmann::json o;
  o["id"] = reg.id;
  o["graph"] = reg.graph;
  o["backend"] = reg.backend;
  o["engine"] = reg.engine;
  o["num_nodes"] = reg.nodes.size();
  o["nodes"] = reg.nodes;
  o["ops"] = reg.op_histogram;
  o["inputs"] = reg.inputs;
  o["outputs"] = reg.outputs;
  o["blob_bytes"] = reg.blob_bytes;
  o["crossing_bytes"] = reg.crossing_bytes;
  o["considered"] = nlohmann::json::array();
  for (const auto& c : reg.considered) {
    o["considered"].push_back({{"backend", c.backend}, {"us", c.us}, {"measured", c.measured}});
  }
  o["decision"] = reg.decision;
  return o;
}

// Bytes the regions move between host and device per run.
double crossing_bytes(const PartitionReport& r) {
  double bytes = 0;
  for (const auto& reg : r.regions) bytes += reg.crossing_bytes;
  return bytes;
}

}  // namespace

std::string report_text(const PartitionReport& r) {
  std::ostringstream os;
  std::map<std::string, int> per_backend;
  for (const auto& reg : r.regions) per_backend[reg.backend]++;
  std::string counts;
  for (const auto& b : r.backends) {
    if (per_backend.count(b)) counts += (counts.empty() ? "" : ", ") + std::to_string(per_backend[b]) + " " + b;
  }
  std::string backends;
  for (const auto& b : r.backends) backends += (backends.empty() ? "" : ",") + b;
  os << "backends " << backends << "  nodes " << r.num_nodes << "  regions " << r.regions.size() << " ("
     << counts << ")  placement " << (r.policy.empty() ? "priority" : r.policy);
  if (r.policy == "cost") os << "  estimated " << us_str(r.estimated_us);
  if (r.measured + r.cache_hits > 0) {
    os << "  measured " << r.measured << " now, " << r.cache_hits << " from the tune cache";
  }
  if (const double crossing = crossing_bytes(r); crossing > 0) {
    os << "  host<->device " << human_bytes(static_cast<size_t>(crossing)) << " per run";
  }
  os << "\n";
  if (!r.sets.empty()) {
    os << "backend sets";
    for (const auto& s : r.sets) {
      std::string names;
      for (const auto& b : s.backends) names += (names.empty() ? "" : ",") + b;
      os << "  " << names << (s.plan == "cost" ? "" : " " + s.plan) << " " << us_str(s.us) << (s.chosen ? " (chosen)" : "");
    }
    os << "\n";
  }
  for (const auto& reg : r.regions) region_text(os, reg, "");
  if (r.precision != "fp32") {
    os << "precision " << r.precision
       << ": Conv, ConvTranspose, MatMul and Gemm in engines that compute them so; the rest in float32\n";
    for (const auto& a : r.accuracy) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "  accuracy of '%s' against fp32 (%s inputs): max abs %.3g, max rel %.3g, cosine %.6f\n",
                    a.name.c_str(), r.accuracy_inputs.c_str(), a.max_abs, a.max_rel, a.cosine);
      os << buf;
    }
  }
  for (const auto& b : r.buckets) {
    size_t engines = 0;
    for (const auto& reg : b.regions) engines += reg.engine >= 0;
    os << "bucket " << b.shapes << "  regions " << b.regions.size() << " (" << engines << " with engines)";
    if (b.estimated_us > 0) os << "  estimated " << us_str(b.estimated_us);
    os << "\n";
    for (const auto& reg : b.regions) region_text(os, reg, "  ");
  }
  auto groups = group_refusals(r);
  if (!groups.empty()) os << "refusals\n";
  for (const auto& [backend, gs] : groups) {
    size_t total = 0;
    for (const auto& g : gs) total += g.nodes.size();
    os << "  " << backend << ": " << total << " node(s)\n";
    for (const auto& g : gs) {
      os << "    " << g.nodes.size() << "x " << g.reason << ": " << list_str(g.nodes, 5) << "\n";
    }
  }
  if (!r.events.empty()) os << "events\n";
  for (const auto& e : r.events) os << "  " << e << "\n";
  if (!r.measurements.empty()) {
    os << "measurements (estimate before measuring -> measured"
       << (r.measure_seconds > 0 ? ", " + us_str(r.measure_seconds * 1e6) + " spent measuring" : std::string())
       << (r.budget_exhausted ? ", budget reached" : "") << ")\n";
    for (const auto& m : r.measurements) {
      char ratio[32];
      std::snprintf(ratio, sizeof(ratio), "x%.2f", m.estimated_us > 0 ? m.measured_us / m.estimated_us : 0.0);
      os << "  " << m.backend << "  " << m.kind << "  " << us_str(m.estimated_us) << " -> " << us_str(m.measured_us)
         << " (" << ratio << (m.from_cache ? ", cached" : "") << (m.cut_short ? ", cut short" : "") << ")  "
         << (m.graph != "main" ? m.graph + ": " : "") << m.what << "\n";
    }
  }
  if (!r.plan_timings.empty()) {
    os << "end-to-end check (random inputs, lower quartile)";
    for (const auto& t : r.plan_timings) {
      os << "  " << t.plan << " " << us_str(t.ms * 1e3) << (t.kept ? " (kept)" : "");
    }
    os << "\n";
  }
  if (!r.machine.empty()) os << "machine  " << r.machine << "\n";
  return os.str();
}

std::string report_json(const PartitionReport& r) {
  nlohmann::json j;
  j["backends"] = r.backends;
  j["num_nodes"] = r.num_nodes;
  j["placement"] = r.policy.empty() ? "priority" : r.policy;
  j["estimated_us"] = r.estimated_us;
  j["crossing_bytes"] = crossing_bytes(r);
  j["measured"] = r.measured;
  j["cache_hits"] = r.cache_hits;
  j["backend_sets"] = nlohmann::json::array();
  for (const auto& s : r.sets) {
    j["backend_sets"].push_back({{"backends", s.backends}, {"us", s.us}, {"chosen", s.chosen}, {"plan", s.plan}});
  }
  j["regions"] = nlohmann::json::array();
  for (const auto& reg : r.regions) j["regions"].push_back(region_json(reg));
  j["precision"] = r.precision;
  if (!r.accuracy.empty()) {
    j["accuracy_inputs"] = r.accuracy_inputs;
    j["accuracy"] = nlohmann::json::array();
    for (const auto& a : r.accuracy) {
      j["accuracy"].push_back({{"output", a.name}, {"elements", a.elements}, {"max_abs", a.max_abs},
                               {"max_rel", a.max_rel}, {"cosine", a.cosine}});
    }
  }
  j["buckets"] = nlohmann::json::array();
  for (const auto& b : r.buckets) {
    nlohmann::json o;
    o["shapes"] = b.shapes;
    o["estimated_us"] = b.estimated_us;
    o["regions"] = nlohmann::json::array();
    for (const auto& reg : b.regions) o["regions"].push_back(region_json(reg));
    j["buckets"].push_back(o);
  }
  j["refusals"] = nlohmann::json::array();
  for (const auto& [backend, gs] : group_refusals(r)) {
    for (const auto& g : gs) {
      j["refusals"].push_back({{"backend", backend}, {"reason", g.reason}, {"nodes", g.nodes}});
    }
  }
  j["events"] = r.events;
  j["measurements"] = nlohmann::json::array();
  for (const auto& m : r.measurements) {
    j["measurements"].push_back({{"graph", m.graph},
                                 {"backend", m.backend},
                                 {"kind", m.kind},
                                 {"what", m.what},
                                 {"nodes", m.nodes},
                                 {"estimated_us", m.estimated_us},
                                 {"measured_us", m.measured_us},
                                 {"from_cache", m.from_cache},
                                 {"cut_short", m.cut_short}});
  }
  j["measure_seconds"] = r.measure_seconds;
  j["budget_exhausted"] = r.budget_exhausted;
  j["machine"] = r.machine;
  j["plan_timings"] = nlohmann::json::array();
  for (const auto& t : r.plan_timings) {
    j["plan_timings"].push_back({{"plan", t.plan}, {"ms", t.ms}, {"kept", t.kept}});
  }
  return j.dump(2) + "\n";
}

std::string report_dot(const PartitionReport& r) {
  std::ostringstream os;
  os << "digraph tessera {\n"
     << "  rankdir=TB;\n  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];\n"
     << "  edge [color=\"#555555\", arrowsize=0.6];\n";
  std::map<int, std::vector<size_t>> by_region;
  for (size_t i = 0; i < r.placed.size(); ++i) by_region[r.placed[i].region].push_back(i);
  for (const auto& reg : r.regions) {
    if (reg.graph != "main") continue;
    os << "  subgraph cluster_r" << reg.id << " {\n    label=\"region " << reg.id << ": " << dot_escape(reg.backend)
       << " (" << reg.nodes.size() << " nodes)\";\n    style=\"rounded,dashed\"; color=\"#444444\"; fontname=\"Helvetica\";\n";
    for (size_t i : by_region[reg.id]) {
      const PlacedNode& p = r.placed[i];
      os << "    n" << i << " [label=\"" << dot_escape(p.name) << "\\n" << dot_escape(p.op_type)
         << "\", fillcolor=\"" << color_of(r, p.backend) << "\"];\n";
    }
    os << "  }\n";
  }
  for (size_t i = 0; i < r.placed.size(); ++i) {
    for (int p : r.placed[i].preds) os << "  n" << p << " -> n" << i << ";\n";
  }
  // Legend: one swatch per backend.
  os << "  subgraph cluster_legend {\n    label=\"backends\"; style=\"rounded\"; color=\"#999999\";\n";
  for (size_t b = 0; b < r.backends.size(); ++b) {
    os << "    legend_" << b << " [label=\"" << dot_escape(r.backends[b]) << "\", fillcolor=\""
       << color_of(r, r.backends[b]) << "\"];\n";
  }
  os << "  }\n}\n";
  return os.str();
}

}  // namespace tessera
