#include "api/profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "artifact/artifact.h"
#include "backends/backend.h"

namespace tessera::api {

namespace {

// The op type of a profiled region's time outside its steps.
constexpr const char* kOutsideSteps = "(engine call)";

std::string json_str(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string json_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", std::isfinite(v) ? v : 0.0);
  return buf;
}

std::string json_names(const std::vector<std::string>& names) {
  std::string s = "[";
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + json_str(names[i]);
  return s + "]";
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : "+") + x;
  return s;
}

// "region 3 (dnnl)" -> "region 3 (dnnl, 30 nodes)"; unchanged when the count is unknown.
std::string region_label(const std::string& region, int nodes) {
  if (nodes < 0 || region.empty() || region.back() != ')') return region;
  return region.substr(0, region.size() - 1) + ", " + std::to_string(nodes) + " node" + (nodes == 1 ? "" : "s") + ")";
}

// What a step's op type is when its nodes' op types are unknown (an
// artifact) or it covers none (a reorder): the backend and the first word
// of the engine's name for it ("dnnl:reorder", "dnnl:convolution").
std::string step_kind(const std::string& backend, const std::string& what) {
  std::string first = what.substr(0, what.find(' '));
  return backend + ":" + (first.empty() ? "step" : first);
}

}  // namespace

const char* item_kind_name(ProfileItem::Kind k) {
  switch (k) {
    case ProfileItem::Kind::kNode:
      return "node";
    case ProfileItem::Kind::kStep:
      return "step";
    case ProfileItem::Kind::kRegion:
      return "region";
    case ProfileItem::Kind::kOverhead:
      return "overhead";
  }
  return "node";
}

RegionNodes region_nodes_of(const PartitionReport& report) {
  RegionNodes nodes;
  for (const PlacedNode& n : report.placed) nodes.op_type[n.name] = n.op_type;
  for (const RegionInfo& r : report.regions) {
    if (r.engine >= 0) nodes.count[r.engine] = static_cast<int>(r.nodes.size());
  }
  return nodes;
}

std::vector<ProfileItem> profile_items(const InferenceSession& s, const RunProfile& p, const RegionNodes& nodes) {
  std::vector<ProfileItem> items;
  for (const RunProfile::Entry& e : p.entries) {
    const Engine* engine = e.engine >= 0 && static_cast<size_t>(e.engine) < s.engines().size()
                               ? s.engines()[static_cast<size_t>(e.engine)].get()
                               : nullptr;
    if (!engine) {
      ProfileItem it;
      it.name = e.node;
      it.nodes = {e.node};
      it.op_type = e.op_type;
      it.backend = "native";
      it.start_us = e.start_us;
      it.us = e.us;
      items.push_back(std::move(it));
      continue;
    }
    const std::string& backend = engine->backend().name();
    int count = -1;
    if (auto it = nodes.count.find(e.engine); it != nodes.count.end()) count = it->second;
    if (!engine->backend().gives_profile()) {
      ProfileItem it;
      it.kind = ProfileItem::Kind::kRegion;
      it.region = region_label(engine->region(), count);
      it.region_nodes = count;
      it.name = it.region;
      it.op_type = e.op_type;
      it.backend = backend;
      it.engine = e.engine;
      it.start_us = e.start_us;
      it.us = e.us;
      items.push_back(std::move(it));
      continue;
    }
    if (count < 0) {  // an artifact: the nodes its steps name
      std::set<std::string> seen;
      for (const ProfileStep& st : e.steps) seen.insert(st.nodes.begin(), st.nodes.end());
      count = static_cast<int>(seen.size());
    }
    const std::string region = region_label(engine->region(), count);
    double inside = 0;
    for (const ProfileStep& st : e.steps) {
      ProfileItem it;
      it.kind = ProfileItem::Kind::kStep;
      it.nodes = st.nodes;
      it.what = st.what;
      it.name = st.nodes.empty() ? (st.what.empty() ? "step" : st.what) : joined(st.nodes);
      std::vector<std::string> ops;
      bool known = !st.nodes.empty();
      for (const auto& n : st.nodes) {
        auto op = nodes.op_type.find(n);
        if (op == nodes.op_type.end()) {
          known = false;
          break;
        }
        if (std::find(ops.begin(), ops.end(), op->second) == ops.end()) ops.push_back(op->second);
      }
      it.op_type = known ? joined(ops) : step_kind(backend, st.what);
      it.backend = backend;
      it.engine = e.engine;
      it.region = region;
      it.region_nodes = count;
      // Clamped into the region's slice: the engine's clock starts inside it.
      it.start_us = e.start_us + std::clamp(st.start_us, 0.0, e.us);
      it.us = std::clamp(st.duration_us, 0.0, std::max(0.0, e.start_us + e.us - it.start_us));
      inside += it.us;
      items.push_back(std::move(it));
    }
    ProfileItem it;
    it.kind = ProfileItem::Kind::kOverhead;
    it.name = region + ": outside its steps";
    it.op_type = kOutsideSteps;
    it.backend = backend;
    it.engine = e.engine;
    it.region = region;
    it.region_nodes = count;
    it.start_us = e.start_us;
    it.us = std::max(0.0, e.us - inside);
    items.push_back(std::move(it));
  }
  return items;
}

ProfileSummary summarize(const std::vector<std::vector<ProfileItem>>& runs) {
  ProfileSummary sum;
  sum.runs = static_cast<int>(runs.size());
  if (runs.empty()) return sum;
  sum.items = runs[0];
  // Per item, the median over the runs that have the same item at the same
  // place (a run's structure does not change, but nothing relies on it).
  for (size_t i = 0; i < sum.items.size(); ++i) {
    std::vector<double> v;
    for (const auto& r : runs) {
      if (i < r.size() && r[i].name == sum.items[i].name && r[i].kind == sum.items[i].kind) v.push_back(r[i].us);
    }
    std::sort(v.begin(), v.end());
    sum.items[i].us = v[v.size() / 2];
    sum.total_us += sum.items[i].us;
  }
  std::map<std::pair<std::string, std::string>, ProfileSummary::OpType> ops;
  std::map<std::pair<std::string, std::string>, std::set<std::string>> op_nodes;
  std::map<int, ProfileSummary::Region> regions;
  for (const ProfileItem& it : sum.items) {
    auto key = std::make_pair(it.op_type, it.backend);
    ProfileSummary::OpType& o = ops[key];
    o.op_type = it.op_type;
    o.backend = it.backend;
    o.us += it.us;
    o.items += 1;
    op_nodes[key].insert(it.nodes.begin(), it.nodes.end());
    if (it.engine < 0) continue;
    ProfileSummary::Region& r = regions[it.engine];
    r.engine = it.engine;
    r.backend = it.backend;
    r.name = it.region;
    r.nodes = it.region_nodes;
    r.us += it.us;
    if (it.kind == ProfileItem::Kind::kStep) {
      r.profiled = true;
      r.steps += 1;
    }
    if (it.kind == ProfileItem::Kind::kOverhead) {
      r.profiled = true;
      r.outside_us += it.us;
    }
  }
  for (auto& [key, o] : ops) {
    o.nodes = static_cast<int>(op_nodes[key].size());
    sum.op_types.push_back(o);
  }
  std::stable_sort(sum.op_types.begin(), sum.op_types.end(),
                   [](const ProfileSummary::OpType& a, const ProfileSummary::OpType& b) { return a.us > b.us; });
  for (const auto& [engine, r] : regions) sum.regions.push_back(r);
  return sum;
}

std::string profile_text(const ProfileSummary& p) {
  std::string out;
  auto printf = [&out](const char* fmt, auto... args) {
    const int n = std::snprintf(nullptr, 0, fmt, args...);
    if (n <= 0) return;
    const size_t at = out.size();
    out.resize(at + static_cast<size_t>(n) + 1);
    std::snprintf(out.data() + at, static_cast<size_t>(n) + 1, fmt, args...);
    out.resize(at + static_cast<size_t>(n));
  };
  const double total = p.total_us > 0 ? p.total_us : 1;
  printf("time per op type (median per node, summed; %.3f ms in kernels):\n", p.total_us / 1000);
  for (const auto& o : p.op_types) {
    const char* unit = o.nodes > 0 ? "node" : o.op_type == kOutsideSteps ? "region" : "step";
    const int n = o.nodes > 0 ? o.nodes : o.items;
    std::string count = std::to_string(n) + " " + unit + (n == 1 ? "" : "s");
    printf("  %-24s %9.3f ms  %5.1f%%  (%s, %s)\n", o.op_type.c_str(), o.us / 1000, 100 * o.us / total,
                count.c_str(), o.backend.c_str());
  }
  std::vector<size_t> order;
  for (size_t i = 0; i < p.items.size(); ++i) {
    if (p.items[i].kind != ProfileItem::Kind::kOverhead) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p.items[a].us > p.items[b].us; });
  printf("slowest nodes:\n");
  for (size_t k = 0; k < std::min<size_t>(10, order.size()); ++k) {
    const ProfileItem& it = p.items[order[k]];
    std::string where = it.backend;
    if (it.kind == ProfileItem::Kind::kStep && !it.what.empty() && !it.nodes.empty()) where += ": " + it.what;
    if (it.kind == ProfileItem::Kind::kRegion) where += ": no per-node profile";
    printf("  %-40s %-16s %9.3f ms  (%s)\n", it.name.c_str(), it.op_type.c_str(), it.us / 1000, where.c_str());
  }
  if (p.regions.empty()) return out;
  printf("engine regions:\n");
  for (const auto& r : p.regions) {
    if (r.profiled) {
      printf("  %s: %d steps, %.3f ms (%.3f ms outside its steps)\n", r.name.c_str(), r.steps, r.us / 1000,
                  r.outside_us / 1000);
    } else {
      printf("  %s: no per-node profile from this backend (%.3f ms)\n", r.name.c_str(), r.us / 1000);
    }
  }
  return out;
}

std::string profile_json(const ProfileSummary& p) {
  std::string s = "{\"runs\": " + std::to_string(p.runs) + ", \"total_ms\": " + json_num(p.total_us / 1000);
  s += ", \"op_types\": [";
  for (size_t i = 0; i < p.op_types.size(); ++i) {
    const auto& o = p.op_types[i];
    s += std::string(i ? ", " : "") + "{\"op_type\": " + json_str(o.op_type) + ", \"backend\": " + json_str(o.backend) +
         ", \"ms\": " + json_num(o.us / 1000) + ", \"nodes\": " + std::to_string(o.nodes) +
         ", \"items\": " + std::to_string(o.items) + "}";
  }
  s += "], \"items\": [";
  for (size_t i = 0; i < p.items.size(); ++i) {
    const ProfileItem& it = p.items[i];
    s += std::string(i ? ", " : "") + "{\"kind\": " + json_str(item_kind_name(it.kind)) +
         ", \"name\": " + json_str(it.name) + ", \"nodes\": " + json_names(it.nodes) +
         ", \"op_type\": " + json_str(it.op_type) + ", \"backend\": " + json_str(it.backend) +
         ", \"what\": " + json_str(it.what) + ", \"engine\": " + std::to_string(it.engine) +
         ", \"region\": " + json_str(it.region) + ", \"ms\": " + json_num(it.us / 1000) + "}";
  }
  s += "], \"regions\": [";
  for (size_t i = 0; i < p.regions.size(); ++i) {
    const auto& r = p.regions[i];
    s += std::string(i ? ", " : "") + "{\"engine\": " + std::to_string(r.engine) + ", \"name\": " + json_str(r.name) +
         ", \"backend\": " + json_str(r.backend) +
         ", \"nodes\": " + (r.nodes >= 0 ? std::to_string(r.nodes) : std::string("null")) +
         ", \"profiled\": " + (r.profiled ? "true" : "false") + ", \"steps\": " + std::to_string(r.steps) +
         ", \"ms\": " + json_num(r.us / 1000) + ", \"outside_steps_ms\": " + json_num(r.outside_us / 1000) + "}";
  }
  return s + "]}";
}

Status check_trace_path(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p(path);
  if (path.empty()) return InvalidInput("--trace needs a file name");
  if (std::filesystem::is_directory(p, ec)) return IoError("--trace: '" + path + "' is a directory");
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
  if (!std::filesystem::is_directory(dir, ec)) {
    return IoError("--trace: cannot write '" + path + "': directory '" + dir.string() + "' does not exist");
  }
  return Status::Ok();
}

Status write_trace(const std::string& path, const std::string& label, const std::vector<RunProfile>& runs,
                   const std::vector<std::vector<ProfileItem>>& items, const InferenceSession& s) {
  std::string out = "{\"traceEvents\": [\n";
  auto event = [&](const std::string& name, const std::string& cat, double ts, double dur, const std::string& args) {
    out += "{\"name\": " + json_str(name) + ", \"cat\": " + json_str(cat) + ", \"ph\": \"X\", \"ts\": " + json_num(ts) +
           ", \"dur\": " + json_num(std::max(0.0, dur)) + ", \"pid\": 1, \"tid\": 1, \"args\": {" + args + "}},\n";
  };
  out += "{\"name\": \"process_name\", \"ph\": \"M\", \"ts\": 0, \"pid\": 1, \"tid\": 1, \"args\": {\"name\": " +
         json_str(label) + "}},\n";
  out +=
      "{\"name\": \"thread_name\", \"ph\": \"M\", \"ts\": 0, \"pid\": 1, \"tid\": 1, \"args\": {\"name\": "
      "\"glue graph\"}},\n";
  const auto origin = runs.empty() ? std::chrono::steady_clock::time_point() : runs[0].started;
  for (size_t r = 0; r < runs.size(); ++r) {
    const RunProfile& p = runs[r];
    const double base = std::chrono::duration<double, std::micro>(p.started - origin).count();
    double end = 0;
    for (const auto& e : p.entries) end = std::max(end, e.start_us + e.us);
    event("run " + std::to_string(r), "run", base, end, "\"run\": " + std::to_string(r));
    for (const auto& e : p.entries) {
      std::string args = "\"op_type\": " + json_str(e.op_type);
      std::string cat = "node", name = e.node;
      if (e.engine >= 0 && static_cast<size_t>(e.engine) < s.engines().size()) {
        const Engine& eng = *s.engines()[static_cast<size_t>(e.engine)];
        cat = "region";
        name = eng.region();  // "region 3 (dnnl)"; the glue graph's node is in args
        args += ", \"backend\": " + json_str(eng.backend().name()) + ", \"engine\": " + std::to_string(e.engine) +
                ", \"region\": " + json_str(eng.region()) + ", \"node\": " + json_str(e.node) +
                ", \"profile\": " + json_str(eng.backend().gives_profile() ? "steps" : "none from this backend");
      } else {
        args += ", \"backend\": \"native\"";
      }
      event(name, cat, base + e.start_us, e.us, args);
    }
    if (r >= items.size()) continue;
    for (const ProfileItem& it : items[r]) {
      if (it.kind != ProfileItem::Kind::kStep) continue;
      event(it.name, "step", base + it.start_us, it.us,
            "\"nodes\": " + json_names(it.nodes) + ", \"op_type\": " + json_str(it.op_type) +
                ", \"backend\": " + json_str(it.backend) + ", \"what\": " + json_str(it.what) +
                ", \"engine\": " + std::to_string(it.engine));
    }
  }
  if (out.size() >= 2 && out[out.size() - 2] == ',') out.erase(out.size() - 2, 1);
  out += "], \"displayTimeUnit\": \"ms\"}\n";
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return IoError("--trace: cannot write '" + path + "'");
  f << out;
  f.close();
  if (!f) return IoError("--trace: cannot write '" + path + "'");
  return Status::Ok();
}

}  // namespace tessera::api
