// Dead-code elimination: plain liveness from the graph outputs. ONNX ops have
// no side effects, so a node is live only when one of its outputs is read by
// a live node, by a nested graph of a live node, or is a graph output.
// Constants that nothing live reads are dropped too. Nested graphs (If/Loop/
// Scan bodies) of live nodes are cleaned the same way, rooted at their own
// outputs; their formal inputs are never removed.
//
// The header also holds the use/def analysis the other passes share (nested
// graph enumeration, free variables, scope-aware renaming).
#pragma once

#include <string>
#include <unordered_set>
#include <vector>

#include "ir/graph.h"
#include "util/status.h"

namespace tessera {

struct DceStats {
  int removed_nodes = 0;
  int removed_constants = 0;
  bool changed() const { return removed_nodes + removed_constants > 0; }
  DceStats& operator+=(const DceStats& o) {
    removed_nodes += o.removed_nodes;
    removed_constants += o.removed_constants;
    return *this;
  }
};

// Removes dead nodes and unread constants from `g` and its nested graphs.
// Graph inputs and outputs are never touched.
Status dce(Graph& g, DceStats* stats = nullptr);

// ---- use/def analysis shared by the passes ---------------------------------

// Nested graphs held by a node's attributes (Attribute::g and ::graphs).
std::vector<Graph*> nested_graphs(Node& n);
std::vector<const Graph*> nested_graphs(const Node& n);

// Names a graph reads but does not define (inputs, constants, node outputs):
// the values it takes from enclosing scopes, including those read only by
// graphs nested deeper.
std::unordered_set<std::string> free_variables(const Graph& g);

// Names that the nested graphs of `n` read from the scope around `n`.
std::unordered_set<std::string> nested_reads(const Node& n);

// Whether `name` is defined inside `g` itself (input, constant or output of
// one of its nodes; not counting deeper nested graphs).
bool defines(const Graph& g, const std::string& name);

// Replaces every read of `from` by `to`: inputs of g's nodes, and reads inside
// nested graphs that see g's `from` (not shadowed there), including nested
// graph outputs (which are positional). g.outputs and producers are left
// alone. Returns false and changes nothing when a nested graph that reads
// `from` defines `to` itself, where the rename would be captured.
bool replace_reads(Graph& g, const std::string& from, const std::string& to);

// Looks up constants and value types through the chain of enclosing graphs:
// a name defined in a graph (input or node output) hides constants of the
// same name further out. Build one per graph while walking nested graphs.
class GraphScope {
 public:
  GraphScope(Graph& g, const GraphScope* parent);
  Graph& graph() const { return *g_; }
  const GraphScope* parent() const { return parent_; }
  // The constant visible under `name`, or null.
  const Tensor* constant(const std::string& name) const;
  // The type info visible under `name`, or null.
  const ValueInfo* info(const std::string& name) const;
  // Records that a node output of this graph became a constant.
  void now_constant(const std::string& name) { runtime_.erase(name); }
  // Whether `name` is visible from this scope at all.
  bool visible(const std::string& name) const;

 private:
  Graph* g_;
  const GraphScope* parent_;
  std::unordered_set<std::string> runtime_;  // inputs and node outputs of g_
};

}  // namespace tessera
