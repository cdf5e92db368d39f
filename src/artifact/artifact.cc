// Program <-> .tsr file.
//
// Input (write): a Program. Output: a container (artifact_format.h) holding
// META (JSON: provenance, signatures, the constants index, engines), GRAPH (the
// glue graph as an ONNX ModelProto whose top-level constants are turned into
// trailing graph inputs, so the proto carries no weight bytes), CONSTANTS
// (every stored constant once, 64-byte aligned) and one ENGINE section per
// blob.
// Input (read): a path. Output: the Program, its constants and blobs pointing
// into the mapped file. The container is validated first (bounds, order,
// checksums); then every META field is type-checked and every cross-reference
// (constant ranges and sizes, engine sections, value names, constant keys) is
// checked before anything is built from it.
#include "artifact/artifact.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <set>
#include <unordered_set>

#include "artifact/artifact_format.h"
#include "artifact/artifact_meta.h"
#include "onnx/onnx_export.h"
#include "onnx/onnx_import.h"

namespace tessera {

namespace {

using artifact::corrupt;
using artifact::json;
using artifact::MetaReader;
using artifact::OutSection;
using artifact::SectionKind;

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Value names a glue graph makes visible to engines: what survives the ONNX
// round trip (the `values` map may hold stale entries, so it is not used).
// Nested bodies count too: a Region node inside an If branch exchanges the
// branch's values.
void collect_value_names(const Graph& g, std::unordered_set<std::string>* names) {
  names->insert(g.inputs.begin(), g.inputs.end());
  names->insert(g.outputs.begin(), g.outputs.end());
  for (const auto& kv : g.constants) names->insert(kv.first);
  for (const Node& n : g.nodes) {
    names->insert(n.inputs.begin(), n.inputs.end());
    names->insert(n.outputs.begin(), n.outputs.end());
    for (const auto& kv : n.attrs) {
      if (kv.second.g) collect_value_names(*kv.second.g, names);
      for (const auto& sg : kv.second.graphs) collect_value_names(*sg, names);
    }
  }
}

// Over the glue graph and every bucket's: an engine may serve any of them.
std::unordered_set<std::string> glue_value_names(const Graph& g, const std::vector<ProgramBucket>& buckets) {
  std::unordered_set<std::string> names;
  collect_value_names(g, &names);
  for (const ProgramBucket& b : buckets) collect_value_names(b.graph, &names);
  names.erase("");
  return names;
}

// The type a value has after export + import: export writes no type for an
// undefined dtype.
ValueInfo exported_info(const Graph& g, const std::string& name) {
  const ValueInfo* vi = g.info(name);
  return vi && vi->dtype != DType::kUndefined ? *vi : ValueInfo{};
}

// Constants laid out in the CONSTANTS section. A tensor whose storage was
// already laid out (two keys sharing storage) reuses its bytes.
struct ConstantStore {
  struct Entry {
    std::string key;
    Tensor t;
    uint64_t offset = 0;
    bool owner = false;  // these bytes are written at `offset`
  };
  std::vector<Entry> entries;
  std::map<std::string, size_t> by_key;
  std::map<const void*, size_t> by_storage;
  uint64_t size = 0;

  void add(const std::string& key, const Tensor& t) {
    Entry e{key, t, 0, false};
    auto it = t.nbytes() ? by_storage.find(t.raw()) : by_storage.end();
    if (it != by_storage.end() && entries[it->second].t.nbytes() >= t.nbytes()) {
      e.offset = entries[it->second].offset;
    } else {
      e.offset = align_up(size, artifact::kConstantAlignment);
      e.owner = true;
      size = e.offset + t.nbytes();
      if (t.nbytes()) by_storage[t.raw()] = entries.size();
    }
    by_key[key] = entries.size();
    entries.push_back(std::move(e));
  }

  // The key under which glue constant `name` is stored: its own name when
  // the program stores it under that name, the key of a constant sharing its
  // storage, or else a new entry (a Program whose graph.constants is not a
  // subset of Program::constants still writes every byte it needs).
  std::string key_for_glue(const std::string& name, const Tensor& t) {
    auto k = by_key.find(name);
    if (k != by_key.end() && same_tensor(entries[k->second].t, t)) return name;
    auto s = t.nbytes() ? by_storage.find(t.raw()) : by_storage.end();
    if (s != by_storage.end()) {
      const Entry& e = entries[s->second];
      if (e.t.dtype() == t.dtype() && e.t.dims() == t.dims()) return e.key;
    }
    std::string key = name;
    for (int i = 1; by_key.count(key); ++i) key = name + "#glue" + std::to_string(i);
    add(key, t);
    return key;
  }
};

Status check_tensor(const std::string& path, const std::string& what, const Tensor& t) {
  if (!dtype_is_supported(t.dtype()) || (t.nbytes() && !t.raw())) {
    return InvalidModel("artifact '" + path + "': cannot write " + what + ": " + t.str() + " has no storable data");
  }
  return Status::Ok();
}

}  // namespace

namespace {

// A glue graph's section: the graph travels without constant data; each top-level constant becomes a trailing graph
// input with the constant's type, and `gj` (META's "graph", or a bucket's) says which stored constant it is.
Status glue_section(const Graph& graph, const std::string& path, ConstantStore& store, json* gj, std::string* bytes) {
  Graph g = graph;
  std::set<std::string> glue_names;
  for (const auto& kv : graph.constants) glue_names.insert(kv.first);
  json glue = json::array();
  for (const std::string& name : glue_names) {
    const Tensor& t = graph.constants.at(name);
    TSR_RETURN_IF_ERROR(check_tensor(path, "glue constant '" + name + "'", t));
    for (const auto& in : graph.inputs) {
      if (in == name) return InvalidModel("artifact '" + path + "': cannot write: graph input '" + name + "' is also a constant");
    }
    json e = json::object();
    e["name"] = name;
    e["key"] = store.key_for_glue(name, t);
    glue.push_back(std::move(e));
    g.inputs.push_back(name);
    g.values[name] = ValueInfo{t.dtype(), Shape::FromDims(t.dims())};
  }
  g.constants.clear();
  *gj = json::object();
  (*gj)["name"] = graph.name;
  (*gj)["ir_version"] = graph.ir_version;
  (*gj)["producer_name"] = graph.producer_name;
  (*gj)["num_inputs"] = graph.inputs.size();
  (*gj)["constants"] = std::move(glue);
  TSR_ASSIGN_OR_RETURN(*bytes, export_onnx_bytes(g));
  return Status::Ok();
}

// Lays out `program`'s artifact and hands its sections to `sink` while the
// bytes they point at (metadata, serialized graph) are alive; `path` names it
// in messages.
Status with_artifact_sections(const Program& program, const std::string& path,
                              const std::function<Status(const std::vector<artifact::OutSection>&)>& sink) {
  const Graph& graph = program.graph;
  auto fail = [&](const std::string& what) { return InvalidModel("artifact '" + path + "': cannot write: " + what); };

  ConstantStore store;
  for (const auto& kv : program.constants) {
    TSR_RETURN_IF_ERROR(check_tensor(path, "constant '" + kv.first + "'", kv.second));
    store.add(kv.first, kv.second);
  }

  std::string graph_bytes;
  json gj;
  TSR_RETURN_IF_ERROR(glue_section(graph, path, store, &gj, &graph_bytes));
  // Buckets: glue graphs of their own, sharing the engine table and the constants.
  std::vector<std::string> bucket_bytes(program.buckets.size());
  json buckets = json::array();
  for (size_t i = 0; i < program.buckets.size(); ++i) {
    const ProgramBucket& b = program.buckets[i];
    if (b.inputs.size() != graph.inputs.size() || b.graph.inputs != graph.inputs) {
      return fail("bucket " + std::to_string(i) + ": its inputs are not the graph's");
    }
    json bj = json::object();
    json bg;
    TSR_RETURN_IF_ERROR(glue_section(b.graph, path, store, &bg, &bucket_bytes[i]));
    bj["section"] = 3 + program.engines.size() + i;  // after the engines
    bj["inputs"] = b.inputs;
    if (!b.lower.empty()) bj["lower"] = b.lower;
    bj["graph"] = std::move(bg);
    buckets.push_back(std::move(bj));
  }

  const auto names = glue_value_names(graph, program.buckets);
  json engines = json::array();
  for (size_t i = 0; i < program.engines.size(); ++i) {
    const EngineSpec& e = program.engines[i];
    const std::string where = "engine '" + e.region + "'";
    for (const auto* list : {&e.inputs, &e.outputs}) {
      for (const auto& v : *list) {
        if (!names.count(v)) return fail(where + ": value '" + v + "' is not in the glue graph");
      }
    }
    json consts = json::array();
    for (const ConstantRef& c : e.constants) {
      if (!store.by_key.count(c.key))
        return fail(where + ": constant key '" + c.key + "' is not in the program's constants");
      json r = json::object();
      r["key"] = c.key;
      r["name"] = c.name;
      consts.push_back(std::move(r));
    }
    json j = json::object();
    j["region"] = e.region;
    j["backend"] = e.backend;
    j["backend_version"] = e.backend_version;
    j["options"] = e.options;
    j["section"] = 3 + i;  // META, GRAPH, CONSTANTS, then the engines in order
    j["inputs"] = e.inputs;
    j["outputs"] = e.outputs;
    j["constants"] = std::move(consts);
    engines.push_back(std::move(j));
  }

  json meta = json::object();
  artifact::add_program_meta(program.meta, &meta);
  meta["graph"] = std::move(gj);
  json inputs = json::array(), outputs = json::array();
  // As the reader sees them: a glue constant is typed by its tensor.
  auto signature = [&](const std::string& n) {
    auto c = graph.constants.find(n);
    return artifact::signature_json(
        n, c != graph.constants.end() ? ValueInfo{c->second.dtype(), Shape::FromDims(c->second.dims())}
                                      : exported_info(graph, n));
  };
  for (const auto& n : graph.inputs) inputs.push_back(signature(n));
  for (const auto& n : graph.outputs) outputs.push_back(signature(n));
  meta["inputs"] = std::move(inputs);
  meta["outputs"] = std::move(outputs);
  json index = json::array();
  for (const auto& e : store.entries) {
    json c = json::object();
    c["key"] = e.key;
    c["dtype"] = dtype_name(e.t.dtype());
    c["dims"] = e.t.dims();
    c["offset"] = e.offset;
    c["size"] = e.t.nbytes();
    index.push_back(std::move(c));
  }
  meta["constants"] = std::move(index);
  meta["engines"] = std::move(engines);
  if (!program.buckets.empty()) meta["buckets"] = std::move(buckets);  // absent: what older readers wrote
  // Invalid UTF-8 in a name is replaced rather than thrown; the reader then
  // reports the name mismatch.
  const std::string meta_text = meta.dump(1, ' ', false, json::error_handler_t::replace);

  std::vector<OutSection> sections(3);
  sections[0].kind = SectionKind::kMeta;
  sections[0].size = meta_text.size();
  sections[0].pieces.push_back({0, meta_text.data(), meta_text.size()});
  sections[1].kind = SectionKind::kGraph;
  sections[1].size = graph_bytes.size();
  sections[1].pieces.push_back({0, graph_bytes.data(), graph_bytes.size()});
  sections[2].kind = SectionKind::kConstants;
  sections[2].alignment = artifact::kConstantsAlignment;
  sections[2].size = store.size;
  for (const auto& e : store.entries) {
    if (e.owner && e.t.nbytes()) sections[2].pieces.push_back({e.offset, e.t.raw(), e.t.nbytes()});
  }
  for (const EngineSpec& e : program.engines) {
    if (e.blob.size && !e.blob.data) return fail("engine '" + e.region + "': blob has a size but no data");
    OutSection s;
    s.kind = SectionKind::kEngine;
    s.size = e.blob.size;
    if (e.blob.size) s.pieces.push_back({0, e.blob.data, e.blob.size});
    sections.push_back(std::move(s));
  }
  for (const std::string& bytes : bucket_bytes) {
    OutSection s;
    s.kind = SectionKind::kBucket;
    s.size = bytes.size();
    s.pieces.push_back({0, bytes.data(), bytes.size()});
    sections.push_back(std::move(s));
  }
  return sink(sections);
}

}  // namespace

namespace {
// Format 3 where a bucket is masked (its META "lower" must not be ignored), else what the sections need.
uint32_t format_for(const Program& program) {
  const bool masked = std::any_of(program.buckets.begin(), program.buckets.end(),
                                  [](const ProgramBucket& b) { return !b.lower.empty(); });
  return masked ? 3 : 1;
}
}  // namespace

Status write_artifact(const Program& program, const std::string& path) {
  return with_artifact_sections(program, path, [&](const std::vector<artifact::OutSection>& sections) {
    return artifact::write_container(path, sections, format_for(program));
  });
}

Expected<std::string> write_artifact_bytes(const Program& program) {
  std::string bytes;
  auto keep = [&](const std::vector<artifact::OutSection>& sections) {
    auto b = artifact::write_container_bytes(sections, format_for(program));
    if (!b.ok()) return b.status();
    bytes = std::move(*b);
    return Status::Ok();
  };
  TSR_RETURN_IF_ERROR(with_artifact_sections(program, "<memory>", keep));
  return bytes;
}

namespace artifact {

namespace {

const SectionInfo* the_section(const Container& c, SectionKind kind, Status* st) {
  const SectionInfo* found = nullptr;
  for (const auto& s : c.sections) {
    if (s.kind != static_cast<uint32_t>(kind)) continue;
    if (found) {
      *st = corrupt(c.path, "section table", std::string("more than one ") + section_kind_name(s.kind) + " section");
      return nullptr;
    }
    found = &s;
  }
  if (!found)
    *st = corrupt(c.path, "section table",
                  std::string("no ") + section_kind_name(static_cast<uint32_t>(kind)) + " section");
  return found;
}

Status read_constants(const Container& c, const MetaReader& r, const json& meta, const SectionInfo& sec,
                      std::map<std::string, Tensor>* out) {
  const json* index = nullptr;
  TSR_RETURN_IF_ERROR(r.array(meta, "constants", "", &index));
  for (size_t i = 0; i < index->size(); ++i) {
    const json& e = (*index)[i];
    const std::string at = "constants[" + std::to_string(i) + "].";
    std::string key, dt;
    uint64_t offset = 0, size = 0;
    Dims dims;
    int64_t numel = 0;
    DType dtype = DType::kUndefined;
    TSR_RETURN_IF_ERROR(r.string(e, "key", at, &key));
    TSR_RETURN_IF_ERROR(r.string(e, "dtype", at, &dt));
    if (!dtype_from_name(dt, &dtype) || !dtype_is_supported(dtype)) {
      return r.fail("constant '" + key + "': unsupported dtype '" + dt + "'");
    }
    TSR_RETURN_IF_ERROR(r.concrete_dims(e, "dims", at, &dims, &numel));
    TSR_RETURN_IF_ERROR(r.uint(e, "offset", at, &offset));
    TSR_RETURN_IF_ERROR(r.uint(e, "size", at, &size));
    const uint64_t esize = dtype_size(dtype);
    if (static_cast<uint64_t>(numel) > UINT64_MAX / esize || static_cast<uint64_t>(numel) * esize != size) {
      return r.fail("constant '" + key + "': size " + std::to_string(size) + " does not match " + dt + dims_str(dims));
    }
    if (offset % kConstantAlignment != 0) {
      return r.fail("constant '" + key + "': offset " + std::to_string(offset) + " is not 64-byte aligned");
    }
    if (offset > sec.size || size > sec.size - offset) {
      return r.fail("constant '" + key + "': bytes [" + std::to_string(offset) + ", +" + std::to_string(size) +
                    ") lie outside the CONSTANTS section (" + std::to_string(sec.size) + " bytes)");
    }
    if (out->count(key)) return r.fail("constant key '" + key + "' appears twice");
    void* data = const_cast<uint8_t*>(sec.data + offset);  // the mapping is private and writable
    (*out)[key] = Tensor::Shared(dtype, std::move(dims), data, c.mapping);
  }
  return Status::Ok();
}

// Rebuilds a glue graph from its section and its META object `gj` (at `at`: "graph." or "buckets[1].graph."): its
// trailing inputs become the stored constants.
Status read_glue(const Container& c, const MetaReader& r, const json& gj, const std::string& at_graph,
                 const std::string& section_name, const SectionInfo& sec,
                 const std::map<std::string, Tensor>& constants, Graph* out) {
  const json* glue = nullptr;
  std::string name, producer_name;
  int64_t ir_version = 0;
  uint64_t num_inputs = 0;
  TSR_RETURN_IF_ERROR(r.string(gj, "name", at_graph, &name));
  TSR_RETURN_IF_ERROR(r.int64(gj, "ir_version", at_graph, &ir_version));
  TSR_RETURN_IF_ERROR(r.string(gj, "producer_name", at_graph, &producer_name));
  TSR_RETURN_IF_ERROR(r.uint(gj, "num_inputs", at_graph, &num_inputs));
  TSR_RETURN_IF_ERROR(r.array(gj, "constants", at_graph, &glue));

  std::string bytes(reinterpret_cast<const char*>(sec.data), static_cast<size_t>(sec.size));
  Graph g;
  TSR_ASSIGN_OR_RETURN(g, import_onnx_bytes(bytes, "", "artifact '" + c.path + "': " + section_name));
  if (num_inputs > g.inputs.size() || g.inputs.size() - num_inputs != glue->size()) {
    return corrupt(c.path, section_name,
                   "has " + std::to_string(g.inputs.size()) + " inputs; META expects " + std::to_string(num_inputs) +
                       " runtime inputs and " + std::to_string(glue->size()) + " constants");
  }
  std::unordered_set<std::string> runtime(g.inputs.begin(), g.inputs.begin() + static_cast<ptrdiff_t>(num_inputs));
  for (size_t i = 0; i < glue->size(); ++i) {
    const std::string at = at_graph + "constants[" + std::to_string(i) + "].";
    std::string cname, key;
    TSR_RETURN_IF_ERROR(r.string((*glue)[i], "name", at, &cname));
    TSR_RETURN_IF_ERROR(r.string((*glue)[i], "key", at, &key));
    const std::string& input = g.inputs[static_cast<size_t>(num_inputs) + i];
    if (input != cname) {
      return corrupt(c.path, section_name,
                     "input " + std::to_string(num_inputs + i) + " is '" + input + "' but META names glue constant '" +
                         cname + "'");
    }
    if (runtime.count(cname) || g.constants.count(cname)) {
      return corrupt(c.path, section_name, "glue constant '" + cname + "' is also a runtime input or listed twice");
    }
    auto it = constants.find(key);
    if (it == constants.end()) return r.fail("field '" + at + "key': '" + key + "' is not in the constants index");
    const Tensor& t = it->second;
    if (!same_value_info(exported_info(g, cname), ValueInfo{t.dtype(), Shape::FromDims(t.dims())})) {
      return corrupt(c.path, section_name,
                     "glue constant '" + cname + "' is declared " + signature_str(exported_info(g, cname)) +
                         " but stored as " + t.str());
    }
    g.constants[cname] = t;
  }
  g.inputs.resize(static_cast<size_t>(num_inputs));
  g.name = name;
  g.ir_version = ir_version;
  g.producer_name = producer_name;
  *out = std::move(g);
  return Status::Ok();
}

// The main glue graph, checked against the signature in META.
Status read_graph(const Container& c, const MetaReader& r, const json& meta, const SectionInfo& sec,
                  const std::map<std::string, Tensor>& constants, Graph* out) {
  const json* gj = nullptr;
  TSR_RETURN_IF_ERROR(r.object(meta, "graph", "", &gj));
  Graph g;
  TSR_RETURN_IF_ERROR(read_glue(c, r, *gj, "graph.", "GRAPH", sec, constants, &g));
  // The signature in META (what `inspect` shows) must be the graph's.
  for (const char* key : {"inputs", "outputs"}) {
    const json* sig = nullptr;
    TSR_RETURN_IF_ERROR(r.array(meta, key, "", &sig));
    const auto& names = std::string(key) == "inputs" ? g.inputs : g.outputs;
    if (sig->size() != names.size()) {
      return r.fail(std::string(key) + ": " + std::to_string(sig->size()) + " entries, the graph has " +
                    std::to_string(names.size()));
    }
    for (size_t i = 0; i < names.size(); ++i) {
      std::string n;
      ValueInfo vi;
      TSR_RETURN_IF_ERROR(r.signature((*sig)[i], std::string(key) + "[" + std::to_string(i) + "].", &n, &vi));
      if (n != names[i] || !same_value_info(vi, exported_info(g, n))) {
        return r.fail(std::string(key) + "[" + std::to_string(i) + "]: '" + n + "' " + signature_str(vi) +
                      " does not match the graph's '" + names[i] + "' " + signature_str(exported_info(g, names[i])));
      }
    }
  }
  *out = std::move(g);
  return Status::Ok();
}

// The buckets (META "buckets", absent when there are none), each a glue graph for exact dims of every input.
// Their sections are marked in `used`.
Status read_buckets(const Container& c, const MetaReader& r, const json& meta, Program* p, std::vector<bool>* used) {
  if (!meta.contains("buckets")) return Status::Ok();
  const json* buckets = nullptr;
  TSR_RETURN_IF_ERROR(r.array(meta, "buckets", "", &buckets));
  for (size_t i = 0; i < buckets->size(); ++i) {
    const json& j = (*buckets)[i];
    const std::string at = "buckets[" + std::to_string(i) + "].";
    uint64_t section = 0;
    TSR_RETURN_IF_ERROR(r.uint(j, "section", at, &section));
    if (section >= c.sections.size() || c.sections[section].kind != static_cast<uint32_t>(SectionKind::kBucket)) {
      return r.fail(at + "section: " + std::to_string(section) + " is not a BUCKET section");
    }
    if ((*used)[section]) return r.fail(at + "section: " + std::to_string(section) + " belongs to two buckets");
    (*used)[section] = true;
    ProgramBucket b;
    const json* inputs = nullptr;
    TSR_RETURN_IF_ERROR(r.array(j, "inputs", at, &inputs));
    for (size_t k = 0; k < inputs->size(); ++k) {
      const json& d = (*inputs)[k];
      Dims dims;
      bool ok = d.is_array() && d.size() <= 1024;
      for (size_t x = 0; ok && x < d.size(); ++x) {
        ok = d[x].is_number_integer() && d[x].get<int64_t>() >= 0;
        if (ok) dims.push_back(d[x].get<int64_t>());
      }
      if (!ok || !tensor_size_problem(dims, 1).empty()) {
        return r.fail("field '" + at + "inputs[" + std::to_string(k) + "]' is not a list of sizes of a tensor");
      }
      b.inputs.push_back(std::move(dims));
    }
    if (j.contains("lower")) {  // a masked bucket: the least dims it serves, each at most the bucket's own
      if (c.version < 3)
        return r.fail(at + "lower: a masked bucket in a format " + std::to_string(c.version) + " artifact");
      const json* lower = nullptr;
      TSR_RETURN_IF_ERROR(r.array(j, "lower", at, &lower));
      bool ok = lower->size() == b.inputs.size();
      for (size_t k = 0; ok && k < lower->size(); ++k) {
        const json& d = (*lower)[k];
        ok = d.is_array() && d.size() == b.inputs[k].size();
        Dims dims;
        for (size_t x = 0; ok && x < d.size(); ++x) {
          ok = d[x].is_number_integer() && d[x].get<int64_t>() >= 0 && d[x].get<int64_t>() <= b.inputs[k][x];
          if (ok) dims.push_back(d[x].get<int64_t>());
        }
        if (ok) b.lower.push_back(std::move(dims));
      }
      if (!ok) return r.fail("field '" + at + "lower' is not, per input, sizes at most the bucket's inputs");
    }
    const json* gj = nullptr;
    TSR_RETURN_IF_ERROR(r.object(j, "graph", at, &gj));
    const std::string where = "section " + std::to_string(section) + " (BUCKET)";
    TSR_RETURN_IF_ERROR(read_glue(c, r, *gj, at + "graph.", where, c.sections[section], p->constants, &b.graph));
    if (b.graph.inputs != p->graph.inputs || b.graph.outputs != p->graph.outputs ||
        b.inputs.size() != p->graph.inputs.size()) {
      return corrupt(c.path, where, "its inputs and outputs are not the GRAPH's");
    }
    for (size_t k = 0; k < b.inputs.size(); ++k) {
      const ValueInfo* vi = p->graph.info(p->graph.inputs[k]);
      if (vi && vi->shape.rank_known && vi->shape.rank() != static_cast<int>(b.inputs[k].size())) {
        return r.fail(at + "inputs[" + std::to_string(k) + "]: " + dims_str(b.inputs[k]) + " does not fit input '" +
                      p->graph.inputs[k] + "' " + vi->shape.str());
      }
    }
    p->buckets.push_back(std::move(b));
  }
  return Status::Ok();
}

Status read_engines(const Container& c, const MetaReader& r, const json& meta, Program* p, std::vector<bool> used) {
  const json* engines = nullptr;
  TSR_RETURN_IF_ERROR(r.array(meta, "engines", "", &engines));
  const auto names = glue_value_names(p->graph, p->buckets);
  for (size_t i = 0; i < engines->size(); ++i) {
    const json& j = (*engines)[i];
    const std::string at = "engines[" + std::to_string(i) + "].";
    EngineSpec e;
    uint64_t section = 0;
    TSR_RETURN_IF_ERROR(r.string(j, "region", at, &e.region));
    TSR_RETURN_IF_ERROR(r.string(j, "backend", at, &e.backend));
    TSR_RETURN_IF_ERROR(r.string(j, "backend_version", at, &e.backend_version));
    TSR_RETURN_IF_ERROR(r.string(j, "options", at, &e.options));
    TSR_RETURN_IF_ERROR(r.uint(j, "section", at, &section));
    TSR_RETURN_IF_ERROR(r.string_list(j, "inputs", at, &e.inputs));
    TSR_RETURN_IF_ERROR(r.string_list(j, "outputs", at, &e.outputs));
    const std::string where = "engine '" + e.region + "'";
    if (section >= c.sections.size() || c.sections[section].kind != static_cast<uint32_t>(SectionKind::kEngine)) {
      return r.fail(where + ": section " + std::to_string(section) + " is not an ENGINE section");
    }
    if (used[section]) return r.fail(where + ": section " + std::to_string(section) + " belongs to two engines");
    used[section] = true;
    for (const auto* list : {&e.inputs, &e.outputs}) {
      for (const auto& v : *list) {
        if (!names.count(v)) return r.fail(where + ": value '" + v + "' is not in the glue graph");
      }
    }
    const json* consts = nullptr;
    TSR_RETURN_IF_ERROR(r.array(j, "constants", at, &consts));
    for (size_t k = 0; k < consts->size(); ++k) {
      ConstantRef ref;
      const std::string cat = at + "constants[" + std::to_string(k) + "].";
      TSR_RETURN_IF_ERROR(r.string((*consts)[k], "key", cat, &ref.key));
      TSR_RETURN_IF_ERROR(r.string((*consts)[k], "name", cat, &ref.name));
      if (!p->constants.count(ref.key)) return r.fail(where + ": constant key '" + ref.key + "' is not in the index");
      e.constants.push_back(std::move(ref));
    }
    const SectionInfo& s = c.sections[section];
    e.blob.data = s.data;
    e.blob.size = static_cast<size_t>(s.size);
    e.blob.keep = c.mapping;
    p->engines.push_back(std::move(e));
  }
  for (size_t i = 0; i < c.sections.size(); ++i) {
    if (c.sections[i].kind == static_cast<uint32_t>(SectionKind::kEngine) && !used[i]) {
      return corrupt(c.path, "section " + std::to_string(i) + " (ENGINE)", "belongs to no engine in META");
    }
    if (c.sections[i].kind == static_cast<uint32_t>(SectionKind::kBucket) && !used[i]) {
      return corrupt(c.path, "section " + std::to_string(i) + " (BUCKET)", "belongs to no bucket in META");
    }
  }
  return Status::Ok();
}

Status read_provenance(const MetaReader& r, const json& meta, ProgramMeta* out) {
  TSR_RETURN_IF_ERROR(r.string(meta, "producer", "", &out->producer));
  TSR_RETURN_IF_ERROR(r.string(meta, "producer_version", "", &out->producer_version));
  TSR_RETURN_IF_ERROR(r.string(meta, "source_model", "", &out->source_model));
  TSR_RETURN_IF_ERROR(r.string_list(meta, "shape_overrides", "", &out->shape_overrides));
  if (meta.contains("threads")) {  // written since the seventeenth session, when the check chose fewer threads
    const json* t = nullptr;
    TSR_RETURN_IF_ERROR(r.object(meta, "threads", "", &t));
    int64_t measured = 0, best = 0;
    TSR_RETURN_IF_ERROR(r.int64(*t, "measured", "threads.", &measured));
    TSR_RETURN_IF_ERROR(r.int64(*t, "best", "threads.", &best));
    if (best < 1 || measured <= best || measured > 4096) {
      return r.fail("threads: best " + std::to_string(best) + " of " + std::to_string(measured) +
                    " is not a thread count below the measured one");
    }
    out->threads_measured = static_cast<int>(measured);
    out->threads_best = static_cast<int>(best);
  }
  const json* backends = nullptr;
  TSR_RETURN_IF_ERROR(r.array(meta, "backends", "", &backends));
  for (size_t i = 0; i < backends->size(); ++i) {
    const std::string at = "backends[" + std::to_string(i) + "].";
    BackendRecord b;
    TSR_RETURN_IF_ERROR(r.string((*backends)[i], "name", at, &b.name));
    TSR_RETURN_IF_ERROR(r.string((*backends)[i], "version", at, &b.version));
    TSR_RETURN_IF_ERROR(r.string((*backends)[i], "options", at, &b.options));
    if ((*backends)[i].contains("threading")) {  // written since ABI minor revision 1
      TSR_RETURN_IF_ERROR(r.string((*backends)[i], "threading", at, &b.threading));
    }
    out->backends.push_back(std::move(b));
  }
  return Status::Ok();
}

Expected<LoadedArtifact> load_unguarded(Container container) {
  LoadedArtifact a;
  a.container = std::move(container);
  const Container& c = a.container;
  const std::string& path = c.path;
  Status st;
  const SectionInfo* meta_sec = the_section(c, SectionKind::kMeta, &st);
  const SectionInfo* graph_sec = meta_sec ? the_section(c, SectionKind::kGraph, &st) : nullptr;
  const SectionInfo* const_sec = graph_sec ? the_section(c, SectionKind::kConstants, &st) : nullptr;
  if (!const_sec) return st;

  const char* text = reinterpret_cast<const char*>(meta_sec->data);
  json meta = json::parse(text, text + meta_sec->size, nullptr, /*allow_exceptions=*/false);
  MetaReader r(path);
  if (meta.is_discarded()) return r.fail("not valid JSON");
  if (!meta.is_object()) return r.fail("not a JSON object");

  Program& p = a.program;
  TSR_RETURN_IF_ERROR(read_provenance(r, meta, &p.meta));
  TSR_RETURN_IF_ERROR(read_constants(c, r, meta, *const_sec, &p.constants));
  TSR_RETURN_IF_ERROR(read_graph(c, r, meta, *graph_sec, p.constants, &p.graph));
  std::vector<bool> used(c.sections.size(), false);
  TSR_RETURN_IF_ERROR(read_buckets(c, r, meta, &p, &used));
  TSR_RETURN_IF_ERROR(read_engines(c, r, meta, &p, std::move(used)));
  return a;
}

// Opens the container (`open`), then reads the program from it. Every field is
// type-checked, so nothing here should throw; a throw that slips through
// (allocation failure) still becomes a status, never a crash.
template <class Open>
Expected<LoadedArtifact> load_guarded(const std::string& name, Open&& open) {
  try {
    Container c;
    TSR_ASSIGN_OR_RETURN(c, open());
    return load_unguarded(std::move(c));
  } catch (const std::exception& e) {
    return InvalidModel("artifact '" + name + "': cannot read: " + e.what());
  }
}

}  // namespace

Expected<LoadedArtifact> load_artifact(const std::string& path) {
  return load_guarded(path, [&] { return open_container(path); });
}

Expected<LoadedArtifact> load_artifact_bytes(const std::string& name, const void* data, size_t size) {
  return load_guarded(name, [&] { return container_from_bytes(name, data, size); });
}

}  // namespace artifact

Expected<Program> read_artifact(const std::string& path) {
  auto a = artifact::load_artifact(path);
  if (!a.ok()) return a.status();
  return std::move(a.value().program);
}

Expected<Program> read_artifact_bytes(const std::string& name, const void* data, size_t size) {
  auto a = artifact::load_artifact_bytes(name, data, size);
  if (!a.ok()) return a.status();
  return std::move(a.value().program);
}

}  // namespace tessera
