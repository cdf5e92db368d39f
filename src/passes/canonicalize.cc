#include "passes/canonicalize.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "passes/dce.h"

namespace tessera {
namespace {

bool is_op(const Node& n, const char* op) {
  return n.op_type == op && (n.domain.empty() || n.domain == "ai.onnx");
}

bool is_conv(const Node& n) { return is_op(n, "Conv") || is_op(n, "ConvTranspose"); }

// Copies a 1-D per-channel parameter into doubles.
std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = t.as_double(i);
  return v;
}

Tensor from_doubles(DType dtype, const std::vector<double>& v) {
  Tensor t(dtype, {static_cast<int64_t>(v.size())});
  if (dtype == DType::kFloat64) {
    for (size_t i = 0; i < v.size(); ++i) t.data<double>()[i] = v[i];
  } else {
    for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = static_cast<float>(v[i]);
  }
  return t;
}

// Facts about a convolution with constant weights, enough to rescale its
// output channels.
struct ConvInfo {
  const Tensor* w = nullptr;
  const Tensor* b = nullptr;  // null when absent
  bool transpose = false;
  int64_t group = 1;
  int64_t out_channels = 0;
};

// Returns W with output channel o multiplied by s[o]. Conv weights are
// [M, C/group, k...]; ConvTranspose weights are [C, M/group, k...] where
// output channel o = (c / (C/group)) * (M/group) + j.
template <class T>
Tensor scale_output_channels_t(const ConvInfo& c, const std::vector<double>& s) {
  const Tensor& w = *c.w;
  Tensor out(w.dtype(), w.dims());
  const T* src = w.data<T>();
  T* dst = out.data<T>();
  int64_t inner = 1;
  for (int i = 2; i < w.rank(); ++i) inner *= w.dim(i);
  const int64_t d0 = w.dim(0), d1 = w.dim(1);
  const int64_t in_per_group = c.transpose ? d0 / c.group : 0;
  for (int64_t a = 0; a < d0; ++a) {
    for (int64_t j = 0; j < d1; ++j) {
      int64_t o = c.transpose ? (a / in_per_group) * d1 + j : a;
      const double f = s[static_cast<size_t>(o)];
      const int64_t base = (a * d1 + j) * inner;
      for (int64_t k = 0; k < inner; ++k) {
        dst[base + k] = static_cast<T>(static_cast<double>(src[base + k]) * f);
      }
    }
  }
  return out;
}

Tensor scale_output_channels(const ConvInfo& c, const std::vector<double>& s) {
  return c.w->dtype() == DType::kFloat64 ? scale_output_channels_t<double>(c, s)
                                         : scale_output_channels_t<float>(c, s);
}

class Canonicalizer {
 public:
  Canonicalizer(Graph& g, const GraphScope* parent, const CanonicalizeOptions& opts, CanonicalizeStats* stats)
      : g_(g), scope_(g, parent), opts_(opts), stats_(stats) {}

  void run() {
    for (Node& n : g_.nodes) {
      for (Graph* sg : nested_graphs(n)) Canonicalizer(*sg, &scope_, opts_, stats_).run();
    }
    if (opts_.inline_constant_if && inline_constant_ifs()) scope_ = GraphScope(g_, scope_.parent());
    removed_.assign(g_.nodes.size(), false);
    // One rewrite can enable another earlier in the list (a renamed producer),
    // so sweep until nothing changes.
    for (int sweep = 0; sweep < 8; ++sweep) {
      bool changed = false;
      rebuild_uses();
      for (size_t i = 0; i < g_.nodes.size(); ++i) {
        if (removed_[i]) continue;
        if (rewrite(i)) {
          changed = true;
          rebuild_uses();
        }
      }
      if (!changed) break;
    }
    // Nodes to insert after node i (a rewrite that adds a node runs once the sweeps are done, so that indices hold).
    std::unordered_map<size_t, Node> after;
    if (opts_.fuse_decompositions) {
      rebuild_uses();
      for (size_t i = 0; i < g_.nodes.size(); ++i) {
        if (!removed_[i] && is_op(g_.nodes[i], "MatMul")) fold_matmul_scales(i, &after);
      }
    }
    std::vector<Node> kept;
    kept.reserve(g_.nodes.size() + after.size());
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (!removed_[i]) kept.push_back(std::move(g_.nodes[i]));
      if (auto it = after.find(i); it != after.end()) kept.push_back(std::move(it->second));
    }
    g_.nodes = std::move(kept);
  }

 private:
  // ---- use/def bookkeeping ----------------------------------------------

  void rebuild_uses() {
    readers_.clear();
    nested_.clear();
    producer_.clear();
    outputs_ = std::unordered_set<std::string>(g_.outputs.begin(), g_.outputs.end());
    inputs_ = std::unordered_set<std::string>(g_.inputs.begin(), g_.inputs.end());
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (removed_[i]) continue;
      const Node& n = g_.nodes[i];
      for (const auto& in : n.inputs) {
        if (!in.empty()) readers_[in].push_back(i);
      }
      if (!n.attrs.empty()) {
        for (auto& v : nested_reads(n)) nested_.insert(v);
      }
      for (const auto& o : n.outputs) {
        if (!o.empty()) producer_[o] = i;
      }
    }
  }

  int reads(const std::string& v) const {
    auto it = readers_.find(v);
    return it == readers_.end() ? 0 : static_cast<int>(it->second.size());
  }
  bool unused(const std::string& v) const {
    return v.empty() || (reads(v) == 0 && !nested_.count(v) && !outputs_.count(v));
  }
  // Read by exactly one node input slot and nothing else.
  bool single_use(const std::string& v) const {
    return reads(v) == 1 && !nested_.count(v) && !outputs_.count(v) && !inputs_.count(v);
  }
  // The live nodes reading `v` (a node reading it twice is listed twice), when only nodes of this graph read it and
  // it is no graph output; empty otherwise.
  std::vector<size_t> readers(const std::string& v) const {
    auto it = readers_.find(v);
    if (it == readers_.end() || nested_.count(v) || outputs_.count(v) || inputs_.count(v)) return {};
    return it->second;
  }
  // The one node reading `v`, as single_use asks, or null.
  Node* sole_reader(const std::string& v) { return single_use(v) ? &g_.nodes[readers_.at(v)[0]] : nullptr; }
  // The live node producing `v` in this graph, or null.
  Node* producer(const std::string& v) {
    auto it = producer_.find(v);
    return it == producer_.end() ? nullptr : &g_.nodes[it->second];
  }
  const Tensor* constant(const std::string& v) const { return v.empty() ? nullptr : scope_.constant(v); }
  const ValueInfo* info(const std::string& v) const { return scope_.info(v); }

  std::string add_constant(const std::string& base, Tensor t) {
    std::string name = g_.unique_name(base);
    while (scope_.visible(name)) name = g_.unique_name(base);
    g_.values[name] = ValueInfo{t.dtype(), Shape::FromDims(t.dims())};
    g_.constants[name] = std::move(t);
    return name;
  }

  void remove_node(size_t i) {
    removed_[i] = true;
  }

  // ---- If with a constant condition -----------------------------------------

  static bool defined_anywhere(const Graph& g, const std::string& name) {
    if (defines(g, name)) return true;
    for (const Node& n : g.nodes) {
      for (const Graph* sg : nested_graphs(n)) {
        if (defined_anywhere(*sg, name)) return true;
      }
    }
    return false;
  }

  // Replaces every If whose condition is a constant by the nodes of the branch
  // it takes. Branch-local names get fresh names in this graph; the If's
  // output names survive (renaming the branch value that produced them, or
  // through an Identity for a value from outside the branch).
  bool inline_constant_ifs() {
    bool any = false;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      if (!is_op(n, "If") || !n.has_input(0)) continue;
      const Tensor* cond = constant(n.inputs[0]);
      if (!cond || cond->numel() != 1) continue;
      std::shared_ptr<Graph> taken = n.attr_graph(cond->as_double(0) != 0.0 ? "then_branch" : "else_branch");
      if (!taken || !taken->inputs.empty() || taken->outputs.size() != n.outputs.size()) continue;
      std::vector<Node> replacement;
      if (!inline_branch(*taken, n, &replacement)) continue;
      const size_t count = replacement.size();
      g_.nodes.erase(g_.nodes.begin() + static_cast<std::ptrdiff_t>(i));
      g_.nodes.insert(g_.nodes.begin() + static_cast<std::ptrdiff_t>(i), std::make_move_iterator(replacement.begin()),
                      std::make_move_iterator(replacement.end()));
      i = i + count - 1;  // the inlined nodes were canonicalised with the branch (size_t wraps back for 0)
      ++stats_->inlined_ifs;
      any = true;
    }
    return any;
  }

  bool inline_branch(const Graph& branch, const Node& if_node, std::vector<Node>* out) {
    Graph b = branch;  // the If goes away; nested graphs below stay shared with it
    // 1. Fresh names for everything the branch defines.
    std::vector<std::pair<std::string, std::string>> renames;
    std::unordered_set<std::string> locals, taken;
    for (const auto& kv : b.constants) locals.insert(kv.first);
    for (const Node& bn : b.nodes) {
      for (const auto& o : bn.outputs) {
        if (!o.empty()) locals.insert(o);
      }
    }
    for (const auto& old : locals) {
      std::string name = g_.unique_name(old);
      while (scope_.visible(name) || locals.count(name) || taken.count(name)) name = g_.unique_name(old);
      for (const Node& bn : b.nodes) {
        for (const Graph* sg : nested_graphs(bn)) {
          if (defined_anywhere(*sg, name)) return false;
        }
      }
      taken.insert(name);
      renames.emplace_back(old, name);
    }
    for (const auto& [old, name] : renames) {
      if (!replace_reads(b, old, name)) return false;  // checked above; cannot happen
      for (Node& bn : b.nodes) {
        for (auto& o : bn.outputs) {
          if (o == old) o = name;
        }
      }
      for (auto& o : b.outputs) {
        if (o == old) o = name;
      }
      auto c = b.constants.find(old);
      if (c != b.constants.end()) {
        Tensor t = c->second;
        b.constants.erase(c);
        b.constants[name] = t;
      }
      auto v = b.values.find(old);
      if (v != b.values.end()) {
        ValueInfo vi = v->second;
        b.values.erase(v);
        b.values[name] = vi;
      }
    }
    // 2. The If's outputs.
    std::vector<Node> copies;
    std::unordered_set<std::string> claimed;
    for (size_t k = 0; k < if_node.outputs.size(); ++k) {
      const std::string& o = if_node.outputs[k];
      if (o.empty()) continue;
      const std::string bo = b.outputs[k];
      bool produced = false;
      for (const Node& bn : b.nodes) {
        for (const auto& x : bn.outputs) produced = produced || x == bo;
      }
      if (produced && !claimed.count(bo) && replace_reads(b, bo, o)) {
        for (Node& bn : b.nodes) {
          for (auto& x : bn.outputs) {
            if (x == bo) x = o;
          }
        }
        for (auto& x : b.outputs) {
          if (x == bo) x = o;
        }
        claimed.insert(o);
        continue;
      }
      if (const Tensor* t = b.constant(bo)) {
        g_.constants[o] = *t;
        g_.values[o] = ValueInfo{t->dtype(), Shape::FromDims(t->dims())};
        continue;
      }
      Node copy;
      copy.name = g_.unique_name(if_node.name + "_out");
      copy.op_type = "Identity";
      copy.inputs = {bo};
      copy.outputs = {o};
      copies.push_back(std::move(copy));
    }
    // 3. Move the branch's constants, types and nodes out.
    for (auto& kv : b.constants) g_.constants[kv.first] = kv.second;
    for (auto& kv : b.values) {
      if (!g_.values.count(kv.first)) g_.values[kv.first] = kv.second;
    }
    for (Node& bn : b.nodes) out->push_back(std::move(bn));
    for (Node& c : copies) out->push_back(std::move(c));
    return true;
  }

  // ---- rewrites ------------------------------------------------------------

  bool rewrite(size_t i) {
    const Node& n = g_.nodes[i];
    if (identity_like(n)) return remove_identity(i);
    if (is_op(n, "Transpose") && merge_transposes(i)) return true;
    if (is_op(n, "Reshape") && merge_reshape(i)) return true;
    if (opts_.fold_batchnorm && is_op(n, "BatchNormalization")) return fold_batchnorm(i);
    if (opts_.fuse_decompositions && is_op(n, "ReduceMean") && fuse_layernorm(i)) return true;
    if (opts_.fuse_decompositions && is_op(n, "Div") && fuse_gelu(i)) return true;
    if (is_op(n, "Add") || is_op(n, "Mul")) {
      if (opts_.fold_conv_bias && fold_conv_affine(i)) return true;
      if (opts_.matmul_add_to_gemm && is_op(n, "Add") && fuse_gemm(i)) return true;
    }
    return false;
  }

  bool same_static_shape(const std::string& a, const std::string& b) const {
    const ValueInfo* ia = info(a);
    const ValueInfo* ib = info(b);
    if (!ia || !ib || ia->dtype == DType::kUndefined || ia->dtype != ib->dtype) return false;
    if (!ia->shape.fully_known() || !ib->shape.fully_known()) return false;
    return ia->shape.concrete() == ib->shape.concrete();
  }

  // A node whose output 0 always equals its input 0.
  bool identity_like(const Node& n) const {
    if (!n.has_input(0) || !n.has_output(0)) return false;
    if (!n.domain.empty() && n.domain != "ai.onnx") return false;
    for (size_t k = 1; k < n.outputs.size(); ++k) {
      if (!unused(n.outputs[k])) return false;
    }
    const std::string& op = n.op_type;
    if (op == "Identity") return true;
    if (op == "Dropout") {
      // Inference mode unless training_mode (opset 12+) is given and not a
      // constant false.
      if (!n.has_input(2)) return true;
      const Tensor* mode = constant(n.inputs[2]);
      return mode && mode->numel() == 1 && mode->as_int64(0) == 0;
    }
    if (op == "Cast") {
      const ValueInfo* vi = info(n.inputs[0]);
      return vi && vi->dtype != DType::kUndefined && static_cast<int64_t>(vi->dtype) == n.attr_int("to", -1);
    }
    if (op == "Transpose") {
      const ValueInfo* vi = info(n.inputs[0]);
      if (!n.has_attr("perm")) return vi && vi->shape.rank_known && vi->shape.rank() <= 1;
      std::vector<int64_t> perm = n.attr_ints("perm");
      if (vi && vi->shape.rank_known && vi->shape.rank() != static_cast<int>(perm.size())) return false;
      for (size_t k = 0; k < perm.size(); ++k) {
        if (perm[k] != static_cast<int64_t>(k)) return false;
      }
      return true;
    }
    if (op == "Reshape" || op == "Expand" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
      return same_static_shape(n.inputs[0], n.outputs[0]);
    }
    return false;
  }

  bool remove_identity(size_t i) {
    Node& n = g_.nodes[i];
    const std::string x = n.inputs[0];
    const std::string y = n.outputs[0];
    if (x == y) return false;
    if (outputs_.count(y)) {
      // y must keep its name: rename x's producer instead, when x is a plain
      // intermediate of this graph.
      if (outputs_.count(x) || inputs_.count(x)) return false;
      Node* p = producer(x);
      if (!p) return false;  // a constant or an outer value: leave the copy
      if (!replace_reads(g_, x, y)) return false;
      for (auto& o : p->outputs) {
        if (o == x) o = y;
      }
      g_.values.erase(x);
    } else {
      if (!replace_reads(g_, y, x)) return false;
      g_.values.erase(y);
    }
    for (size_t k = 1; k < n.outputs.size(); ++k) {
      if (!n.outputs[k].empty()) g_.values.erase(n.outputs[k]);
    }
    remove_node(i);
    ++stats_->removed_identities;
    return true;
  }

  // The permutation of a Transpose node, or empty when it cannot be known
  // (no perm attribute and unknown rank).
  std::vector<int64_t> transpose_perm(const Node& t) const {
    if (t.has_attr("perm")) return t.attr_ints("perm");
    const ValueInfo* vi = info(t.inputs[0]);
    if (!vi || !vi->shape.rank_known) return {};
    std::vector<int64_t> perm(static_cast<size_t>(vi->shape.rank()));
    for (size_t k = 0; k < perm.size(); ++k) perm[k] = static_cast<int64_t>(perm.size() - 1 - k);
    return perm;
  }

  // Transpose(Transpose(x, p1), p2) = Transpose(x, q) with q[i] = p1[p2[i]].
  bool merge_transposes(size_t i) {
    Node& outer = g_.nodes[i];
    if (!outer.has_input(0) || !outer.has_output(0)) return false;
    const std::string t = outer.inputs[0];
    Node* inner = producer(t);
    if (!inner || !is_op(*inner, "Transpose") || !single_use(t) || !inner->has_input(0)) return false;
    std::vector<int64_t> p1 = transpose_perm(*inner), p2 = transpose_perm(outer);
    if (p1.empty() || p1.size() != p2.size()) return false;
    std::vector<int64_t> q(p2.size());
    for (size_t k = 0; k < p2.size(); ++k) {
      if (p2[k] < 0 || p2[k] >= static_cast<int64_t>(p1.size())) return false;
      q[k] = p1[static_cast<size_t>(p2[k])];
    }
    Attribute perm;
    perm.kind = Attribute::Kind::kInts;
    perm.ints = q;
    outer.attrs["perm"] = perm;
    outer.inputs[0] = inner->inputs[0];
    g_.values.erase(t);
    remove_node(producer_.at(t));
    ++stats_->merged_layout_ops;
    return true;
  }

  // Reshape(L(x), s) = Reshape(x, s) when L only relabels dims (Reshape,
  // Flatten, Squeeze, Unsqueeze) and s is a constant that does not copy
  // dims from its input (no 0 entries, or allowzero=1).
  bool merge_reshape(size_t i) {
    Node& outer = g_.nodes[i];
    if (!outer.has_input(0) || !outer.has_input(1) || !outer.has_output(0)) return false;
    const Tensor* shape = constant(outer.inputs[1]);
    if (!shape || !dtype_is_integer(shape->dtype())) return false;
    if (outer.attr_int("allowzero", 0) == 0) {
      for (int64_t k = 0; k < shape->numel(); ++k) {
        if (shape->as_int64(k) == 0) return false;
      }
    }
    const std::string t = outer.inputs[0];
    Node* inner = producer(t);
    if (!inner || !single_use(t) || !inner->has_input(0) || inner->outputs.size() != 1) return false;
    if (!is_op(*inner, "Reshape") && !is_op(*inner, "Flatten") && !is_op(*inner, "Squeeze") &&
        !is_op(*inner, "Unsqueeze")) {
      return false;
    }
    outer.inputs[0] = inner->inputs[0];
    g_.values.erase(t);
    remove_node(producer_.at(t));
    ++stats_->merged_layout_ops;
    return true;
  }

  // The convolution producing `v`, when `v` is its only output, nothing else
  // reads `v`, and its weights (and bias, if any) are float constants.
  bool conv_producing(const std::string& v, Node** conv, ConvInfo* ci) {
    Node* p = producer(v);
    if (!p || !is_conv(*p) || !single_use(v)) return false;
    if (p->outputs.size() != 1 || p->outputs[0] != v || !p->has_input(1)) return false;
    ci->w = constant(p->inputs[1]);
    if (!ci->w || (ci->w->dtype() != DType::kFloat32 && ci->w->dtype() != DType::kFloat64)) return false;
    if (ci->w->rank() < 3) return false;
    ci->b = nullptr;
    if (p->has_input(2)) {
      ci->b = constant(p->inputs[2]);
      if (!ci->b || ci->b->dtype() != ci->w->dtype()) return false;
    }
    ci->transpose = is_op(*p, "ConvTranspose");
    ci->group = p->attr_int("group", 1);
    if (ci->group < 1) return false;
    if (ci->transpose) {
      if (ci->w->dim(0) % ci->group != 0) return false;
      ci->out_channels = ci->w->dim(1) * ci->group;
    } else {
      ci->out_channels = ci->w->dim(0);
    }
    if (ci->b && (ci->b->rank() != 1 || ci->b->dim(0) != ci->out_channels)) return false;
    *conv = p;
    return true;
  }

  std::vector<double> conv_bias(const ConvInfo& ci) const {
    return ci.b ? to_doubles(*ci.b) : std::vector<double>(static_cast<size_t>(ci.out_channels), 0.0);
  }

  // Points the convolution at new weights/bias and makes it produce `out`,
  // the output of the node `i` it absorbed.
  void retarget_conv(Node& conv, const ConvInfo& ci, const Tensor* new_w, const std::vector<double>& bias,
                     size_t i) {
    const std::string old_out = conv.outputs[0];
    if (new_w) conv.inputs[1] = add_constant(conv.inputs[1] + "_folded", *new_w);
    std::string bias_base = conv.has_input(2) ? conv.inputs[2] : conv.inputs[1] + "_bias";
    if (conv.inputs.size() < 3) conv.inputs.resize(3);
    conv.inputs[2] = add_constant(bias_base + "_folded", from_doubles(ci.w->dtype(), bias));
    const Node& absorbed = g_.nodes[i];
    conv.outputs[0] = absorbed.outputs[0];
    for (const auto& o : absorbed.outputs) {
      if (!o.empty() && o != conv.outputs[0]) g_.values.erase(o);
    }
    g_.values.erase(old_out);
    remove_node(i);
  }

  bool fold_batchnorm(size_t i) {
    const Node& bn = g_.nodes[i];
    if (bn.attr_int("training_mode", 0) != 0 || bn.attr_int("spatial", 1) != 1) return false;
    if (!bn.has_output(0)) return false;
    for (size_t k = 1; k < bn.outputs.size(); ++k) {
      if (!unused(bn.outputs[k])) return false;
    }
    for (int k = 0; k < 5; ++k) {
      if (!bn.has_input(k)) return false;
    }
    Node* conv = nullptr;
    ConvInfo ci;
    if (!conv_producing(bn.inputs[0], &conv, &ci)) return false;
    const Tensor* params[4];
    for (int k = 0; k < 4; ++k) {
      params[k] = constant(bn.inputs[static_cast<size_t>(k + 1)]);
      if (!params[k] || params[k]->dtype() != ci.w->dtype() || params[k]->rank() != 1 ||
          params[k]->dim(0) != ci.out_channels) {
        return false;
      }
    }
    const double eps = bn.attr_float("epsilon", 1e-5f);
    std::vector<double> scale = to_doubles(*params[0]), shift = to_doubles(*params[1]),
                        mean = to_doubles(*params[2]), var = to_doubles(*params[3]);
    std::vector<double> bias = conv_bias(ci);
    std::vector<double> s(scale.size());
    for (size_t c = 0; c < s.size(); ++c) {
      s[c] = scale[c] / std::sqrt(var[c] + eps);
      bias[c] = (bias[c] - mean[c]) * s[c] + shift[c];
    }
    Tensor w = scale_output_channels(ci, s);
    retarget_conv(*conv, ci, &w, bias, i);
    ++stats_->folded_batchnorms;
    return true;
  }

  // Add/Mul of the convolution output with a constant that is constant along
  // every axis but the channel axis and cannot grow the output's shape.
  bool fold_conv_affine(size_t i) {
    const Node& n = g_.nodes[i];
    if (n.num_inputs() != 2 || !n.has_input(0) || !n.has_input(1) || !n.has_output(0)) return false;
    for (int side = 0; side < 2; ++side) {
      const std::string& v = n.inputs[static_cast<size_t>(side)];
      const Tensor* k = constant(n.inputs[static_cast<size_t>(1 - side)]);
      if (!k) continue;
      Node* conv = nullptr;
      ConvInfo ci;
      if (!conv_producing(v, &conv, &ci)) continue;
      if (k->dtype() != ci.w->dtype()) continue;
      const int r = ci.w->rank();  // the convolution output's rank
      if (k->rank() > r) continue;
      bool per_channel = false, ok = true;
      for (int a = 0; a < k->rank(); ++a) {
        int axis = r - k->rank() + a;
        int64_t d = k->dim(a);
        if (axis == 1 && d == ci.out_channels && d != 1) {
          per_channel = true;
        } else if (d != 1) {
          ok = false;
        }
      }
      if (!ok) continue;
      std::vector<double> f(static_cast<size_t>(ci.out_channels));
      for (int64_t c = 0; c < ci.out_channels; ++c) f[static_cast<size_t>(c)] = k->as_double(per_channel ? c : 0);
      std::vector<double> bias = conv_bias(ci);
      if (is_op(n, "Add")) {
        for (size_t c = 0; c < bias.size(); ++c) bias[c] += f[c];
        retarget_conv(*conv, ci, nullptr, bias, i);
      } else {
        for (size_t c = 0; c < bias.size(); ++c) bias[c] *= f[c];
        Tensor w = scale_output_channels(ci, f);
        retarget_conv(*conv, ci, &w, bias, i);
      }
      ++stats_->folded_conv_affines;
      return true;
    }
    return false;
  }

  // ---- decompositions ONNX Runtime fuses (level 'extended', part of its default 'all') -----------------------------
  //
  // An exporter writes LayerNorm before opset 17 and Gelu before opset 20 as chains of elementwise ops and
  // reductions. ONNX Runtime fuses the chains below into one kernel each; a quantized model requantizes what they
  // compute, so the same chains become the same ops here (whose kernels compute ONNX Runtime's arithmetic), and the
  // chains ONNX Runtime leaves alone stay as they are.

  // `v` is a float scalar constant (rank 0, as ONNX Runtime's check asks) within FLT_EPSILON of `want`.
  bool constant_near(const std::string& v, double want) const {
    const Tensor* t = constant(v);
    if (!t || t->rank() != 0 || !dtype_is_float(t->dtype())) return false;
    return std::fabs(t->as_double(0) - want) <= std::numeric_limits<float>::epsilon();
  }

  // The operand of binary `n` other than `v`, or "" when `v` is not exactly one of its two inputs.
  static std::string other_operand(const Node& n, const std::string& v) {
    if (n.inputs.size() != 2 || n.inputs[0] == n.inputs[1]) return "";
    if (n.inputs[0] == v) return n.inputs[1];
    return n.inputs[1] == v ? n.inputs[0] : "";
  }

  bool is_f32(const std::string& v) const {
    const ValueInfo* vi = info(v);
    return vi && vi->dtype == DType::kFloat32;
  }

  // ReduceMean over the last axis alone (a constant axes input, or the attribute before opset 18), keeping dims,
  // of an input of known rank.
  bool mean_over_last_axis(const Node& n) const {
    if (!is_op(n, "ReduceMean") || !n.has_input(0) || n.outputs.size() != 1 || !n.has_output(0)) return false;
    if (n.attr_int("keepdims", 1) != 1) return false;
    const ValueInfo* vi = info(n.inputs[0]);
    if (!vi || !vi->shape.rank_known || vi->shape.rank() < 1) return false;
    std::vector<int64_t> axes;
    if (n.has_input(1)) {
      const Tensor* a = constant(n.inputs[1]);
      if (!a || !dtype_is_integer(a->dtype())) return false;
      for (int64_t k = 0; k < a->numel(); ++k) axes.push_back(a->as_int64(k));
    } else {
      axes = n.attr_ints("axes");
    }
    const int64_t rank = vi->shape.rank();
    return axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1);
  }

  // A 1-D float32 tensor of `c` elements that is a constant or a graph input (what ONNX Runtime takes as a fused
  // LayerNorm's scale or bias).
  bool norm_parameter(const std::string& v, int64_t c) const {
    if (v.empty() || (!constant(v) && !inputs_.count(v)) || !is_f32(v)) return false;
    const ValueInfo* vi = info(v);
    return vi->shape.fully_known() && vi->shape.rank() == 1 && vi->shape[0].value == c;
  }

  //   mean = ReduceMean(X, last axis); d = Sub(X, mean) (once, or twice as older PyTorch exports write it);
  //   y = Div(d, Sqrt(Add(ReduceMean(Pow(d, 2)), eps))) * scale + bias
  // becomes LayerNormalization(X, scale, bias, axis = -1, epsilon = eps). Scale and bias are 1-D over the last axis,
  // constants or graph inputs.
  bool fuse_layernorm(size_t i) {
    const Node& rm = g_.nodes[i];
    if (!mean_over_last_axis(rm) || !is_f32(rm.inputs[0])) return false;
    const std::string x = rm.inputs[0];
    const Shape& xs = info(x)->shape;
    const Dim& last = xs[xs.rank() - 1];
    if (!last.known()) return false;
    std::vector<size_t> subs = readers(rm.outputs[0]);
    if (subs.empty() || subs.size() > 2) return false;
    std::vector<size_t> centered_readers;
    std::vector<std::string> centered;
    for (size_t s : subs) {
      const Node& sub = g_.nodes[s];
      if (!is_op(sub, "Sub") || sub.inputs.size() != 2 || sub.inputs[0] != x || sub.inputs[1] != rm.outputs[0] ||
          sub.outputs.size() != 1 || !sub.has_output(0)) {
        return false;
      }
      std::vector<size_t> r = readers(sub.outputs[0]);
      if (r.empty()) return false;
      centered_readers.insert(centered_readers.end(), r.begin(), r.end());
      centered.push_back(sub.outputs[0]);
    }
    if (centered_readers.size() != 2) return false;
    auto is_centered = [&](const std::string& v) {
      return std::find(centered.begin(), centered.end(), v) != centered.end();
    };
    Node* pow = nullptr;
    Node* div = nullptr;
    for (size_t k : centered_readers) {
      Node& n = g_.nodes[k];
      // The exponent of any shape with one element (paddle2onnx writes [1]); ONNX Runtime's fusion does not look.
      const Tensor* e = n.inputs.size() == 2 ? constant(n.inputs[1]) : nullptr;
      if (is_op(n, "Pow") && e && e->numel() == 1 && e->rank() <= xs.rank() && e->as_double(0) == 2.0 &&
          is_centered(n.inputs[0])) {
        pow = &n;
      } else if (is_op(n, "Div") && n.inputs.size() == 2 && is_centered(n.inputs[0])) {
        div = &n;
      }
    }
    if (!pow || !div || pow->outputs.size() != 1 || div->outputs.size() != 1) return false;
    Node* rm2 = sole_reader(pow->outputs[0]);
    if (!rm2 || !mean_over_last_axis(*rm2) || rm2->inputs[0] != pow->outputs[0]) return false;
    Node* add_eps = sole_reader(rm2->outputs[0]);
    if (!add_eps || !is_op(*add_eps, "Add") || add_eps->outputs.size() != 1) return false;
    const std::string eps = other_operand(*add_eps, rm2->outputs[0]);
    const Tensor* eps_t = constant(eps);
    // (A one-element constant of higher rank than X would broadcast the chain to more dims.)
    if (!eps_t || eps_t->numel() != 1 || eps_t->rank() > xs.rank() || eps_t->dtype() != DType::kFloat32) return false;
    Node* sqrt = sole_reader(add_eps->outputs[0]);
    if (!sqrt || !is_op(*sqrt, "Sqrt") || sqrt->outputs.size() != 1 || sole_reader(sqrt->outputs[0]) != div ||
        div->inputs[1] != sqrt->outputs[0]) {
      return false;
    }
    Node* mul = sole_reader(div->outputs[0]);
    if (!mul || !is_op(*mul, "Mul") || mul->outputs.size() != 1) return false;
    const std::string scale = other_operand(*mul, div->outputs[0]);
    Node* add = sole_reader(mul->outputs[0]);
    if (!add || !is_op(*add, "Add") || add->outputs.size() != 1 || !add->has_output(0)) return false;
    const std::string bias = other_operand(*add, mul->outputs[0]);
    if (!norm_parameter(scale, last.value) || !norm_parameter(bias, last.value)) return false;
    std::vector<Node*> chain = {pow, rm2, add_eps, sqrt, div, mul, add};
    for (size_t s : subs) chain.push_back(&g_.nodes[s]);
    const float epsilon = eps_t->data<float>()[0];
    if (!fuse_chain(i, chain, add, "LayerNormalization", "", {x, scale, bias})) return false;
    g_.nodes[i].attrs["axis"] = Attribute::Int(-1);
    g_.nodes[i].attrs["epsilon"] = Attribute::Float(epsilon);
    ++stats_->fused_layernorms;
    return true;
  }

  // Node i becomes `op` reading `inputs` and producing what `last` produced; the nodes of `chain` (all with float32
  // outputs, `last` among them) go. False, with nothing changed, when a chain output is not float32.
  bool fuse_chain(size_t i, const std::vector<Node*>& chain, const Node* last, const char* op, const char* domain,
                  std::vector<std::string> inputs) {
    for (Node* n : chain) {
      if (!is_f32(n->outputs[0])) return false;
    }
    const std::string y = last->outputs[0];
    Node& fused = g_.nodes[i];
    g_.values.erase(fused.outputs[0]);
    for (Node* n : chain) {
      if (n != last) g_.values.erase(n->outputs[0]);
      remove_node(static_cast<size_t>(n - g_.nodes.data()));
    }
    fused.op_type = op;
    fused.domain = domain;
    fused.inputs = std::move(inputs);
    fused.outputs = {y};
    fused.attrs.clear();
    return true;
  }

  bool same_rank(const std::string& a, const std::string& b) const {
    const ValueInfo* ia = info(a);
    const ValueInfo* ib = info(b);
    return ia && ib && ia->shape.rank_known && ib->shape.rank_known && ia->shape.rank() == ib->shape.rank();
  }

  // The float factor `v` applies when it is a float constant of one element (ONNX Runtime's MatMul scale fusion
  // takes a scalar or a [1] tensor).
  bool scale_factor(const std::string& v, float* f) const {
    const Tensor* t = constant(v);
    if (!t || t->numel() != 1 || !dtype_is_float(t->dtype())) return false;
    *f = static_cast<float>(t->as_double(0));
    return true;
  }

  // MatMul(Mul(A, a), Mul(B, b)), each factor optional and either operand through a Transpose read by the MatMul
  // alone, becomes Mul(MatMul(A, B), a * b) (a / c for a Div by c is a * (1 / c)); a Mul of the product by a scalar
  // joins the factor. ONNX Runtime fuses the factors into FusedMatMul's alpha (level 'all'), whose product is the
  // unscaled sum times alpha, so that is what is computed here; the native GEMM applies the factor in its store.
  // A scaling Mul with other readers stays for them.
  void fold_matmul_scales(size_t i, std::unordered_map<size_t, Node>* after) {
    Node& mm = g_.nodes[i];
    if (mm.inputs.size() != 2 || mm.outputs.size() != 1 || !mm.has_output(0) || !is_f32(mm.outputs[0])) return;
    float alpha = 1.f;
    bool scaled = false;
    for (size_t k = 0; k < 2; ++k) {
      Node* t = producer(mm.inputs[k]);
      const bool through = t && is_op(*t, "Transpose") && t->inputs.size() == 1 && single_use(mm.inputs[k]);
      const std::string v = through ? t->inputs[0] : mm.inputs[k];
      Node* p = producer(v);
      if (!p || p->inputs.size() != 2 || p->outputs.size() != 1 || !is_f32(v)) continue;
      float f = 0.f;
      std::string data;
      if (is_op(*p, "Mul")) {
        for (size_t side = 0; side < 2 && data.empty(); ++side) {
          if (!constant(p->inputs[side ^ 1]) && scale_factor(p->inputs[side], &f)) data = p->inputs[side ^ 1];
        }
      } else if (is_op(*p, "Div") && !constant(p->inputs[0]) && scale_factor(p->inputs[1], &f)) {
        f = 1.f / f;
        data = p->inputs[0];
      }
      // A factor of higher rank than the data would have broadcast it to more dims: not a plain scaling.
      if (data.empty() || !is_f32(data) || !same_rank(data, v)) continue;
      if (through) {
        t->inputs[0] = data;
      } else {
        mm.inputs[k] = data;
      }
      alpha *= f;
      scaled = true;
    }
    if (!scaled) return;
    ++stats_->folded_matmul_scales;
    Node* post = sole_reader(mm.outputs[0]);
    float f = 0.f;
    if (post && is_op(*post, "Mul") && post->outputs.size() == 1 && is_f32(post->outputs[0]) &&
        same_rank(post->outputs[0], mm.outputs[0]) && scale_factor(other_operand(*post, mm.outputs[0]), &f)) {
      post->inputs = {mm.outputs[0], add_constant(mm.outputs[0] + "_alpha", Tensor::Scalar<float>(alpha * f))};
      return;
    }
    const std::string y = mm.outputs[0];
    const std::string product = g_.unique_name(y + "_unscaled");
    g_.values[product] = g_.values[y];
    mm.outputs[0] = product;
    Node m;
    m.name = mm.name + "_alpha";
    m.op_type = "Mul";
    m.inputs = {product, add_constant(y + "_alpha", Tensor::Scalar<float>(alpha))};
    m.outputs = {y};
    (*after)[i] = std::move(m);
  }

  //   y = Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)   or   y = Mul(Mul(x, 0.5), Add(Erf(Div(x, sqrt 2)), 1))
  // (operands of each Mul and Add in either order) becomes Gelu(x). ONNX Runtime leaves x * (1 / sqrt 2) alone, and
  // the second form when x comes from a Mul; so does this.
  bool fuse_gelu(size_t i) {
    const Node& div = g_.nodes[i];
    if (div.inputs.size() != 2 || div.outputs.size() != 1 || !div.has_output(0)) return false;
    const std::string x = div.inputs[0];
    if (!is_f32(x) || !constant_near(div.inputs[1], static_cast<double>(static_cast<float>(M_SQRT2)))) return false;
    Node* erf = sole_reader(div.outputs[0]);
    if (!erf || !is_op(*erf, "Erf") || erf->outputs.size() != 1) return false;
    Node* add = sole_reader(erf->outputs[0]);
    if (!add || !is_op(*add, "Add") || add->outputs.size() != 1 ||
        !constant_near(other_operand(*add, erf->outputs[0]), 1.0)) {
      return false;
    }
    Node* mul = sole_reader(add->outputs[0]);
    if (!mul || !is_op(*mul, "Mul") || mul->outputs.size() != 1 || !mul->has_output(0)) return false;
    const std::string other = other_operand(*mul, add->outputs[0]);
    Node* half = nullptr;  // the Mul by 0.5
    Node* last = nullptr;  // the node whose output the Gelu takes over
    // As ONNX Runtime decides: when a Mul produces an operand of this Mul, only the form with the 0.5 first is tried
    // (so x * s fed into a GELU is left decomposed, as ONNX Runtime leaves it).
    Node* m2 = nullptr;
    for (const auto& in : mul->inputs) {
      if (Node* p = producer(in); p && is_op(*p, "Mul")) {
        m2 = p;
        break;
      }
    }
    if (m2) {
      if (m2->outputs.size() == 1 && m2->outputs[0] == other && single_use(other) &&
          constant_near(other_operand(*m2, x), 0.5)) {
        half = m2;
        last = mul;
      }
    } else if (other == x) {
      Node* m3 = sole_reader(mul->outputs[0]);
      if (m3 && is_op(*m3, "Mul") && m3->outputs.size() == 1 && m3->has_output(0) &&
          constant_near(other_operand(*m3, mul->outputs[0]), 0.5)) {
        half = m3;
        last = m3;
      }
    }
    if (!half) return false;
    // com.microsoft, as ONNX Runtime writes it: the default domain's Gelu needs opset 20.
    if (!fuse_chain(i, {erf, add, mul, half}, last, "Gelu", "com.microsoft", {x})) return false;
    ++stats_->fused_gelus;
    return true;
  }

  // MatMul(A[M,K], B[K,N]) + C  ->  Gemm(A, B, C) when C is a constant that
  // broadcasts unidirectionally to [M, N] (so the Add cannot grow the result).
  bool fuse_gemm(size_t i) {
    const Node& add = g_.nodes[i];
    if (add.num_inputs() != 2 || !add.has_input(0) || !add.has_input(1) || !add.has_output(0)) return false;
    for (int side = 0; side < 2; ++side) {
      const std::string& v = add.inputs[static_cast<size_t>(side)];
      const std::string& c_name = add.inputs[static_cast<size_t>(1 - side)];
      const Tensor* c = constant(c_name);
      if (!c) continue;
      Node* mm = producer(v);
      if (!mm || !is_op(*mm, "MatMul") || !single_use(v) || mm->outputs.size() != 1) continue;
      if (!mm->has_input(0) || !mm->has_input(1)) continue;
      const ValueInfo* ia = info(mm->inputs[0]);
      const ValueInfo* ib = info(mm->inputs[1]);
      if (!ia || !ib || !ia->shape.rank_known || !ib->shape.rank_known) continue;
      if (ia->shape.rank() != 2 || ib->shape.rank() != 2) continue;
      DType dt = ia->dtype;
      if (dt != DType::kFloat32 && dt != DType::kFloat64 && dt != DType::kFloat16) continue;
      if (ib->dtype != dt || c->dtype() != dt || c->rank() > 2) continue;
      const Dim& m = ia->shape[0];
      const Dim& nd = ib->shape[1];
      auto fits = [](int64_t d, const Dim& want) { return d == 1 || (want.known() && d == want.value); };
      if (c->rank() >= 1 && !fits(c->dim(c->rank() - 1), nd)) continue;
      if (c->rank() == 2 && !fits(c->dim(0), m)) continue;
      mm->op_type = "Gemm";
      mm->inputs = {mm->inputs[0], mm->inputs[1], c_name};
      mm->attrs.clear();
      mm->outputs[0] = add.outputs[0];
      g_.values.erase(v);
      remove_node(i);
      ++stats_->fused_gemms;
      return true;
    }
    return false;
  }

  Graph& g_;
  GraphScope scope_;
  const CanonicalizeOptions& opts_;
  CanonicalizeStats* stats_;
  std::vector<bool> removed_;
  std::unordered_map<std::string, std::vector<size_t>> readers_;  // live readers of each value, one per input slot
  std::unordered_set<std::string> nested_;
  std::unordered_set<std::string> outputs_;
  std::unordered_set<std::string> inputs_;
  std::unordered_map<std::string, size_t> producer_;
};

}  // namespace

Status canonicalize(Graph& g, CanonicalizeStats* stats, const CanonicalizeOptions& opts) {
  CanonicalizeStats local;
  Canonicalizer(g, nullptr, opts, stats ? stats : &local).run();
  return Status::Ok();
}

}  // namespace tessera
