#include "artifact/program.h"

#include <algorithm>
#include <cstring>

#include "ops/region_attrs.h"

namespace tessera {

std::string backend_option(const std::string& options, const std::string& key) {
  for (size_t at = 0; at <= options.size();) {
    const size_t end = std::min(options.find(';', at), options.size());
    if (options.compare(at, key.size() + 1, key + "=") == 0) {
      return options.substr(at + key.size() + 1, end - at - key.size() - 1);
    }
    at = end + 1;
  }
  return "";
}

std::string with_backend_option(const std::string& options, const std::string& key, const std::string& value) {
  return options + (options.empty() || options.back() == ';' ? "" : ";") + key + "=" + value;
}

Blob Blob::Copy(const void* data, size_t size) {
  Blob b;
  b.size = size;
  if (size == 0) return b;
  std::shared_ptr<void> storage = aligned_alloc_shared(size, 64);
  std::memcpy(storage.get(), data, size);
  b.data = static_cast<const uint8_t*>(storage.get());
  b.keep = std::move(storage);
  return b;
}

namespace {

// Adds `offset` to the engine index of every Region node, bodies included (copied first: they may be shared).
void renumber_regions(Graph& g, int64_t offset) {
  for (Node& n : g.nodes) {
    if (is_region_node(n)) {
      if (auto it = n.attrs.find("engine"); it != n.attrs.end()) it->second.i += offset;
    }
    for (auto& [name, a] : n.attrs) {
      if (a.g) {
        a.g = std::make_shared<Graph>(*a.g);
        renumber_regions(*a.g, offset);
      }
      for (auto& sg : a.graphs) {
        sg = std::make_shared<Graph>(*sg);
        renumber_regions(*sg, offset);
      }
    }
  }
}

}  // namespace

Status add_bucket(Program& main, Program bucket, std::vector<Dims> inputs, std::vector<Dims> lower) {
  if (inputs.size() != main.graph.inputs.size() || bucket.graph.inputs != main.graph.inputs ||
      (!lower.empty() && lower.size() != inputs.size())) {
    return InvalidModel("bucket " + bucket_str(inputs, lower) + ": its inputs are not the program's");
  }
  const std::string prefix = "bucket" + std::to_string(main.buckets.size() + 1) + "/";
  std::map<std::string, std::string> renamed;
  for (auto& [key, t] : bucket.constants) {
    auto it = main.constants.find(key);
    if (it == main.constants.end()) {
      main.constants.emplace(key, t);
    } else if (!same_tensor(it->second, t)) {  // shape arithmetic folded for this bucket's dims
      std::string k = prefix + key;
      for (int i = 1; main.constants.count(k); ++i) k = prefix + key + "#" + std::to_string(i);
      main.constants.emplace(k, t);
      renamed[key] = k;
    }
  }
  const auto offset = static_cast<int64_t>(main.engines.size());
  for (EngineSpec& e : bucket.engines) {
    e.region = prefix + e.region;
    for (ConstantRef& c : e.constants) {
      if (auto r = renamed.find(c.key); r != renamed.end()) c.key = r->second;
    }
    main.engines.push_back(std::move(e));
  }
  renumber_regions(bucket.graph, offset);
  main.buckets.push_back(ProgramBucket{std::move(inputs), std::move(bucket.graph), std::move(lower)});
  return Status::Ok();
}

namespace {
void collect_engines(const Graph& g, std::vector<int64_t>* out) {
  for (const Node& n : g.nodes) {
    if (is_region_node(n)) {
      const int64_t e = n.attr_int("engine", -1);
      if (std::find(out->begin(), out->end(), e) == out->end()) out->push_back(e);
    }
    for (const auto& [name, a] : n.attrs) {
      if (a.g) collect_engines(*a.g, out);
      for (const auto& sg : a.graphs) collect_engines(*sg, out);
    }
  }
}
}  // namespace

std::vector<int64_t> engines_used(const Graph& g) {
  std::vector<int64_t> out;
  collect_engines(g, &out);
  return out;
}

std::string bucket_str(const std::vector<Dims>& inputs, const std::vector<Dims>& lower) {
  std::string s;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i < lower.size() && lower[i] != inputs[i] && lower[i].size() == inputs[i].size()) {
      s += i ? ", [" : "[";
      for (size_t k = 0; k < inputs[i].size(); ++k) {
        s += (k ? "," : "") + (lower[i][k] == inputs[i][k] ? "" : std::to_string(lower[i][k]) + "..") +
             std::to_string(inputs[i][k]);
      }
      s += "]";
    } else {
      s += (i ? ", " : "") + dims_str(inputs[i]);
    }
  }
  return s;
}

}  // namespace tessera
