#include "ir/graph.h"

#include <sstream>
#include <unordered_set>

namespace tessera {

int Node::num_inputs() const {
  int n = static_cast<int>(inputs.size());
  while (n > 0 && inputs[static_cast<size_t>(n - 1)].empty()) --n;
  return n;
}

const Attribute* Node::attr(const std::string& n) const {
  auto it = attrs.find(n);
  return it == attrs.end() ? nullptr : &it->second;
}

int64_t Node::attr_int(const std::string& n, int64_t def) const {
  const Attribute* a = attr(n);
  return a ? a->i : def;
}

float Node::attr_float(const std::string& n, float def) const {
  const Attribute* a = attr(n);
  if (!a) return def;
  return a->kind == Attribute::Kind::kInt ? static_cast<float>(a->i) : a->f;
}

std::string Node::attr_string(const std::string& n, const std::string& def) const {
  const Attribute* a = attr(n);
  return a ? a->s : def;
}

std::vector<int64_t> Node::attr_ints(const std::string& n, std::vector<int64_t> def) const {
  const Attribute* a = attr(n);
  return a ? a->ints : def;
}

std::vector<float> Node::attr_floats(const std::string& n, std::vector<float> def) const {
  const Attribute* a = attr(n);
  return a ? a->floats : def;
}

const Tensor* Node::attr_tensor(const std::string& n) const {
  const Attribute* a = attr(n);
  return a && a->kind == Attribute::Kind::kTensor ? &a->t : nullptr;
}

std::shared_ptr<Graph> Node::attr_graph(const std::string& n) const {
  const Attribute* a = attr(n);
  return a && a->kind == Attribute::Kind::kGraph ? a->g : nullptr;
}

std::string Node::describe() const {
  return "node '" + name + "' (" + (domain.empty() ? "" : domain + ".") + op_type + ")";
}

std::string Graph::unique_name(const std::string& base) {
  for (;;) {
    std::string n = base + "__" + std::to_string(name_counter_++);
    if (!values.count(n) && !constants.count(n)) {
      bool used = false;
      for (const Node& node : nodes) {
        if (node.name == n) used = true;
        for (const auto& o : node.outputs) used = used || o == n;
      }
      if (!used) return n;
    }
  }
}

namespace {

// Values a nested graph may reference: everything visible at its parent node.
void collect_defined(const Graph& g, std::unordered_set<std::string>* defined) {
  for (const auto& i : g.inputs) defined->insert(i);
  for (const auto& kv : g.constants) defined->insert(kv.first);
}

Status verify_impl(const Graph& g, std::unordered_set<std::string> defined) {
  collect_defined(g, &defined);
  std::unordered_set<std::string> produced;
  for (const Node& n : g.nodes) {
    for (const auto& in : n.inputs) {
      if (!in.empty() && !defined.count(in)) {
        return InvalidModel(n.describe() + ": input '" + in +
                            "' is not produced by an earlier node, a graph input or an initializer");
      }
    }
    for (const auto& kv : n.attrs) {
      const Attribute& a = kv.second;
      std::vector<std::shared_ptr<Graph>> subs = a.graphs;
      if (a.g) subs.push_back(a.g);
      for (const auto& sub : subs) {
        Status st = verify_impl(*sub, defined);
        if (!st.ok()) return st.with_context(n.describe() + " attribute '" + kv.first + "': ");
      }
    }
    for (const auto& out : n.outputs) {
      if (out.empty()) continue;
      if (produced.count(out) || g.constants.count(out)) {
        return InvalidModel(n.describe() + ": output '" + out + "' is produced more than once");
      }
      produced.insert(out);
      defined.insert(out);
    }
  }
  for (const auto& o : g.outputs) {
    if (!defined.count(o)) return InvalidModel("graph output '" + o + "' is never produced");
  }
  return Status::Ok();
}

std::string value_str(const Graph& g, const std::string& v) {
  if (v.empty()) return "<none>";
  const ValueInfo* vi = g.info(v);
  std::string s = "%" + v;
  if (vi && vi->dtype != DType::kUndefined) s += ":" + std::string(dtype_name(vi->dtype)) + vi->shape.str();
  return s;
}

void print_impl(const Graph& g, int indent, std::ostringstream& os) {
  std::string pad(static_cast<size_t>(indent), ' ');
  os << pad << "graph " << g.name << " (opset " << g.opset << ")\n";
  for (const auto& i : g.inputs) os << pad << "  input  " << value_str(g, i) << "\n";
  for (const auto& kv : g.constants) {
    os << pad << "  const  %" << kv.first << ":" << kv.second.str() << "\n";
  }
  for (const Node& n : g.nodes) {
    os << pad << "  ";
    for (size_t i = 0; i < n.outputs.size(); ++i) os << (i ? ", " : "") << value_str(g, n.outputs[i]);
    os << " = " << (n.domain.empty() ? "" : n.domain + ".") << n.op_type << "(";
    for (size_t i = 0; i < n.inputs.size(); ++i) os << (i ? ", " : "") << (n.inputs[i].empty() ? "<none>" : "%" + n.inputs[i]);
    os << ")";
    bool first = true;
    for (const auto& kv : n.attrs) {
      const Attribute& a = kv.second;
      os << (first ? " {" : ", ") << kv.first << "=";
      first = false;
      switch (a.kind) {
        case Attribute::Kind::kFloat: os << a.f; break;
        case Attribute::Kind::kInt: os << a.i; break;
        case Attribute::Kind::kString: os << '"' << a.s << '"'; break;
        case Attribute::Kind::kTensor: os << a.t.str(); break;
        case Attribute::Kind::kGraph: os << "<graph>"; break;
        case Attribute::Kind::kInts: {
          os << "[";
          for (size_t i = 0; i < a.ints.size(); ++i) os << (i ? "," : "") << a.ints[i];
          os << "]";
          break;
        }
        case Attribute::Kind::kFloats: {
          os << "[";
          for (size_t i = 0; i < a.floats.size(); ++i) os << (i ? "," : "") << a.floats[i];
          os << "]";
          break;
        }
        default: os << "<...>"; break;
      }
    }
    if (!first) os << "}";
    os << "   # " << n.name << "\n";
    for (const auto& kv : n.attrs) {
      if (kv.second.g) print_impl(*kv.second.g, indent + 4, os);
      for (const auto& sg : kv.second.graphs) print_impl(*sg, indent + 4, os);
    }
  }
  for (const auto& o : g.outputs) os << pad << "  output " << value_str(g, o) << "\n";
}

}  // namespace

Status verify_graph(const Graph& g, const std::vector<std::string>& outer) {
  return verify_impl(g, std::unordered_set<std::string>(outer.begin(), outer.end()));
}

std::string print_graph(const Graph& g) {
  std::ostringstream os;
  print_impl(g, 0, os);
  return os.str();
}

void unshare_nested_graphs(Graph& g) {
  for (Node& n : g.nodes) {
    for (auto& kv : n.attrs) {
      Attribute& a = kv.second;
      if (a.g) {
        a.g = std::make_shared<Graph>(*a.g);
        unshare_nested_graphs(*a.g);
      }
      for (auto& sg : a.graphs) {
        if (!sg) continue;
        sg = std::make_shared<Graph>(*sg);
        unshare_nested_graphs(*sg);
      }
    }
  }
}

void collect_graph_captures(const Graph& g, std::unordered_set<std::string>* out) {
  std::unordered_set<std::string> local(g.inputs.begin(), g.inputs.end());
  for (const auto& kv : g.constants) local.insert(kv.first);
  for (const Node& n : g.nodes) {
    for (const auto& i : n.inputs) {
      if (!i.empty() && !local.count(i)) out->insert(i);
    }
    for (const auto& kv : n.attrs) {
      std::unordered_set<std::string> inner;
      if (kv.second.g) collect_graph_captures(*kv.second.g, &inner);
      for (const auto& sg : kv.second.graphs) collect_graph_captures(*sg, &inner);
      for (const auto& v : inner) {
        if (!local.count(v)) out->insert(v);
      }
    }
    for (const auto& o : n.outputs) local.insert(o);
  }
  for (const auto& o : g.outputs) {
    if (!local.count(o)) out->insert(o);
  }
}


}  // namespace tessera
