// The IR: a Graph is a topologically ordered list of Nodes that name their
// input and output values by string (as ONNX does). Each value may carry type
// information (ValueInfo) and, when its content is known at compile time, a
// constant Tensor. Control-flow nodes own nested Graphs through attributes;
// a nested graph may read values of enclosing graphs by name.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/dtype.h"
#include "ir/shape.h"
#include "ir/tensor.h"
#include "util/status.h"

namespace tessera {

struct Graph;

struct Attribute {
  enum class Kind { kFloat, kInt, kString, kTensor, kGraph, kFloats, kInts, kStrings, kTensors, kGraphs };
  Kind kind = Kind::kInt;
  float f = 0.f;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Graph>> graphs;

  static Attribute Int(int64_t v) {
    Attribute a;
    a.kind = Kind::kInt;
    a.i = v;
    return a;
  }
  static Attribute Ints(std::vector<int64_t> v) {
    Attribute a;
    a.kind = Kind::kInts;
    a.ints = std::move(v);
    return a;
  }
  static Attribute Float(float v) {
    Attribute a;
    a.kind = Kind::kFloat;
    a.f = v;
    return a;
  }
  static Attribute Floats(std::vector<float> v) {
    Attribute a;
    a.kind = Kind::kFloats;
    a.floats = std::move(v);
    return a;
  }
  static Attribute String(std::string v) {
    Attribute a;
    a.kind = Kind::kString;
    a.s = std::move(v);
    return a;
  }
};

struct ValueInfo {
  DType dtype = DType::kUndefined;
  Shape shape;  // unranked when unknown
};

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;  // "" is the default ONNX domain
  std::vector<std::string> inputs;   // "" marks an absent optional input
  std::vector<std::string> outputs;  // "" marks an unused optional output
  std::map<std::string, Attribute> attrs;

  // Number of inputs up to the last present one.
  int num_inputs() const;
  bool has_input(int i) const {
    return i >= 0 && i < static_cast<int>(inputs.size()) && !inputs[static_cast<size_t>(i)].empty();
  }
  bool has_output(int i) const {
    return i >= 0 && i < static_cast<int>(outputs.size()) && !outputs[static_cast<size_t>(i)].empty();
  }

  bool has_attr(const std::string& n) const { return attrs.count(n) != 0; }
  const Attribute* attr(const std::string& n) const;
  int64_t attr_int(const std::string& n, int64_t def) const;
  float attr_float(const std::string& n, float def) const;
  std::string attr_string(const std::string& n, const std::string& def) const;
  std::vector<int64_t> attr_ints(const std::string& n, std::vector<int64_t> def = {}) const;
  std::vector<float> attr_floats(const std::string& n, std::vector<float> def = {}) const;
  const Tensor* attr_tensor(const std::string& n) const;
  std::shared_ptr<Graph> attr_graph(const std::string& n) const;

  // "node 'conv1' (Conv)" for error messages.
  std::string describe() const;
};

struct Graph {
  std::string name;
  std::vector<std::string> inputs;   // runtime inputs, in order (not initializers)
  std::vector<std::string> outputs;  // in order
  std::vector<Node> nodes;           // topological order
  std::unordered_map<std::string, ValueInfo> values;     // type info per value name
  std::unordered_map<std::string, Tensor> constants;     // initializers and folded constants
  // Opset of the default domain (and of nested graphs, inherited).
  int64_t opset = 17;
  // Model-level metadata carried through export.
  int64_t ir_version = 8;
  std::string producer_name;

  bool is_constant(const std::string& v) const { return constants.count(v) != 0; }
  const Tensor* constant(const std::string& v) const {
    auto it = constants.find(v);
    return it == constants.end() ? nullptr : &it->second;
  }
  const ValueInfo* info(const std::string& v) const {
    auto it = values.find(v);
    return it == values.end() ? nullptr : &it->second;
  }
  // Generates a value or node name not used in this graph.
  std::string unique_name(const std::string& base);

 private:
  int64_t name_counter_ = 0;
};

// Copying a Graph shares its nested graphs (attributes hold shared_ptrs).
// Gives `g` its own deep copies of every nested graph, so rewriting or
// re-typing them leaves other copies untouched.
void unshare_nested_graphs(Graph& g);

// Checks structural invariants: every input of every node is produced earlier,
// is a graph input, a constant, or (for nested graphs) an outer-scope value;
// no value is produced twice; graph outputs exist. `outer` lists values
// visible from enclosing graphs.
Status verify_graph(const Graph& g, const std::vector<std::string>& outer = {});

// Adds to `out` the names `g` (a nested graph) reads from enclosing scopes:
// used but neither produced inside it, nor its inputs or constants.
void collect_graph_captures(const Graph& g, std::unordered_set<std::string>* out);

// Human-readable dump (one line per node, types where known); nested graphs
// are indented.
std::string print_graph(const Graph& g);

}  // namespace tessera
