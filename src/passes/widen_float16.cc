#include "passes/widen_float16.h"

#include <set>

namespace tessera {

namespace {

constexpr int64_t kOnnxFloat = 1, kOnnxFloat16 = 10;

Tensor to_float32(const Tensor& t) {
  Tensor w(DType::kFloat32, t.dims());
  const Float16* src = t.data<Float16>();
  float* dst = w.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) dst[i] = static_cast<float>(src[i]);
  return w;
}

// Whether attribute `key` of `n` names a tensor element type: Cast's `to`; the `dtype` of EyeLike, RandomNormal(Like),
// RandomUniform(Like), Bernoulli.
bool is_type_attr(const Node& n, const std::string& key) {
  if (key == "to") return n.op_type == "Cast";
  return key == "dtype" && (n.op_type == "EyeLike" || n.op_type.rfind("Random", 0) == 0 || n.op_type == "Bernoulli");
}

bool holds_float16(const Graph& g) {
  for (const auto& [name, vi] : g.values) {
    if (vi.dtype == DType::kFloat16) return true;
  }
  for (const auto& [name, t] : g.constants) {
    if (t.dtype() == DType::kFloat16) return true;
  }
  for (const Node& n : g.nodes) {
    for (const auto& [key, a] : n.attrs) {
      if (a.kind == Attribute::Kind::kTensor && a.t.dtype() == DType::kFloat16) return true;
      if (a.kind == Attribute::Kind::kInt && a.i == kOnnxFloat16 && is_type_attr(n, key)) return true;
      if (a.kind == Attribute::Kind::kGraph && a.g && holds_float16(*a.g)) return true;
      if (a.kind == Attribute::Kind::kGraphs) {
        for (const auto& sub : a.graphs) {
          if (sub && holds_float16(*sub)) return true;
        }
      }
    }
  }
  return false;
}

// Every read of `from` (in `g`'s nodes and, through outer-scope references, in its nested graphs) reads `to`.
void rename_reads(Graph& g, const std::string& from, const std::string& to) {
  for (Node& n : g.nodes) {
    for (std::string& in : n.inputs) {
      if (in == from) in = to;
    }
    for (auto& [key, a] : n.attrs) {
      if (a.kind == Attribute::Kind::kGraph && a.g) rename_reads(*a.g, from, to);
      for (auto& sub : a.graphs) {
        if (sub) rename_reads(*sub, from, to);
      }
    }
  }
  for (std::string& out : g.outputs) {
    if (out == from) out = to;
  }
}

// The float16 values, weights and type attributes of `g` (nested graphs too) made float32.
void widen_inside(Graph& g, WidenStats& st) {
  for (auto& [name, t] : g.constants) {
    if (t.dtype() == DType::kFloat16) t = to_float32(t), ++st.constants;
  }
  for (auto& [name, vi] : g.values) {
    if (vi.dtype == DType::kFloat16) vi.dtype = DType::kFloat32;
  }
  for (Node& n : g.nodes) {
    for (auto& [key, a] : n.attrs) {
      if (a.kind == Attribute::Kind::kTensor && a.t.dtype() == DType::kFloat16) a.t = to_float32(a.t), ++st.constants;
      if (a.kind == Attribute::Kind::kGraph && a.g) widen_inside(*a.g, st);
      for (auto& sub : a.graphs) {
        if (sub) widen_inside(*sub, st);
      }
      if (a.kind == Attribute::Kind::kInt && a.i == kOnnxFloat16 && is_type_attr(n, key)) a.i = kOnnxFloat;
    }
  }
}

Node cast_node(const std::string& name, const std::string& in, const std::string& out, int64_t to) {
  Node c;
  c.name = name;
  c.op_type = "Cast";
  c.inputs = {in};
  c.outputs = {out};
  c.attrs["to"] = Attribute::Int(to);
  return c;
}

}  // namespace

Status widen_float16(Graph& g, WidenStats* stats) {
  WidenStats local;
  WidenStats& st = stats ? *stats : local;
  if (!holds_float16(g)) return Status::Ok();
  const std::set<std::string> inputs(g.inputs.begin(), g.inputs.end());
  auto is_float16 = [&](const std::string& v) {
    const ValueInfo* vi = g.info(v);
    if (vi && vi->dtype == DType::kFloat16) return true;
    const Tensor* t = g.constant(v);
    return t && t->dtype() == DType::kFloat16;
  };
  // Outputs first (their definitions are renamed; an output that is a graph input stays as it is), then inputs.
  std::vector<Node> tail;
  std::set<std::string> done;
  for (const std::string& y : std::vector<std::string>(g.outputs)) {
    if (!is_float16(y) || inputs.count(y) || !done.insert(y).second) continue;
    const std::string wide = g.unique_name(y + "_float32");
    for (Node& n : g.nodes) {
      for (std::string& o : n.outputs) {
        if (o == y) o = wide;
      }
    }
    if (auto c = g.constants.find(y); c != g.constants.end()) {
      g.constants[wide] = c->second;
      g.constants.erase(c);
    }
    rename_reads(g, y, wide);
    ValueInfo vi = g.values.count(y) ? g.values[y] : ValueInfo{DType::kFloat16, {}};
    vi.dtype = DType::kFloat16;
    g.values[wide] = vi;
    tail.push_back(cast_node(g.unique_name(y + "_to_float16"), wide, y, kOnnxFloat16));
  }
  // Restores the graph's output names, which rename_reads turned into the widened values.
  for (std::string& out : g.outputs) {
    for (const Node& c : tail) {
      if (out == c.inputs[0]) out = c.outputs[0];
    }
  }
  std::vector<Node> head;
  for (const std::string& x : g.inputs) {
    if (!is_float16(x)) continue;
    const std::string wide = g.unique_name(x + "_float32");
    rename_reads(g, x, wide);
    g.values[wide] = g.values[x];
    head.push_back(cast_node(g.unique_name(x + "_to_float32"), x, wide, kOnnxFloat));
  }
  // Graph outputs that are inputs were renamed with the reads: give them back.
  for (std::string& out : g.outputs) {
    for (const Node& c : head) {
      if (out == c.outputs[0]) out = c.inputs[0];
    }
  }
  // Everything inside is float32 from here; the interface values keep float16.
  std::map<std::string, ValueInfo> interface;
  for (const std::string& x : g.inputs) interface[x] = g.values[x];
  for (const Node& c : tail) interface[c.outputs[0]] = g.values[c.inputs[0]];
  widen_inside(g, st);
  for (auto& [name, vi] : interface) g.values[name] = vi;
  for (const Node& c : tail) g.values[c.inputs[0]].dtype = DType::kFloat32;
  st.casts += static_cast<int>(head.size() + tail.size());
  g.nodes.insert(g.nodes.begin(), head.begin(), head.end());
  g.nodes.insert(g.nodes.end(), tail.begin(), tail.end());
  return Status::Ok();
}

}  // namespace tessera
