// Native operator fusion (see native_fusion.h). Three passes over the node
// list, each followed by a recount of uses:
//   1. Conv -> [Add(Z)] -> [activation]  => FusedConv
//      Conv -> [activation] -> MaxPool (2-D, no dilation or ceil mode) => FusedConvMaxPool
//   2. Gemm -> activation => FusedGemm;
//      MatMul(constant B) -> [Add(bias)] -> [activation] => FusedMatMul;
//      MatMul -> Mul(scalar) => FusedMatMul with alpha
//   3. elementwise chains, which may start with a Cast of int32 to float32
//                                         => FusedElementwise
// Conv and Gemm go first so their activations end in the GEMM epilogue
// rather than in an elementwise chain. Within a pass groups are disjoint
// (a node joins at most one group); a group is grown greedily from its
// first node in topological order, which makes the result deterministic.
#include "passes/native_fusion.h"

#include <limits>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ops/fused_elementwise.h"
#include "util/env.h"

namespace tessera {

namespace {

constexpr const char* kMsDomain = "com.microsoft";
constexpr const char* kTesseraDomain = "ai.tessera";

// Who reads each value in one graph.
class Uses {
 public:
  explicit Uses(const Graph& g) {
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      for (const auto& in : n.inputs) {
        if (in.empty()) continue;
        ++count_[in];
        consumer_[in] = static_cast<int>(i);
        readers_[in].push_back(static_cast<int>(i));
      }
      // A nested body reading a value by name is a consumer the node's input
      // list does not show.
      for (const auto& [name, a] : n.attrs) {
        std::unordered_set<std::string> caps;
        if (a.kind == Attribute::Kind::kGraph && a.g) collect_graph_captures(*a.g, &caps);
        if (a.kind == Attribute::Kind::kGraphs) {
          for (const auto& sg : a.graphs) {
            if (sg) collect_graph_captures(*sg, &caps);
          }
        }
        for (const auto& c : caps) {
          ++count_[c];
          consumer_[c] = -1;
          readers_[c].push_back(-1);
        }
      }
    }
    for (const auto& o : g.outputs) outputs_.insert(o);
  }

  // The only node reading `v` (once), or -1 when `v` has other readers, is
  // a graph output, or is read by a nested graph.
  int sole_consumer(const std::string& v) const {
    if (outputs_.count(v)) return -1;
    auto it = count_.find(v);
    if (it == count_.end() || it->second != 1) return -1;
    return consumer_.at(v);
  }

  // Every read of `v` (a node reading it twice counts twice; -1 for a nested graph); none for a graph output.
  std::vector<int> readers(const std::string& v) const {
    auto it = readers_.find(v);
    return outputs_.count(v) || it == readers_.end() ? std::vector<int>{} : it->second;
  }

 private:
  std::unordered_map<std::string, int> count_;
  std::unordered_map<std::string, int> consumer_;
  std::unordered_map<std::string, std::vector<int>> readers_;
  std::unordered_set<std::string> outputs_;
};

// Types and constants as seen from one graph: its own, then those of the
// enclosing graphs for names it reads from them (a body's captures).
class Scope {
 public:
  Scope(const Graph& g, const Scope* outer) : g_(g), outer_(outer) {
    for (const auto& in : g.inputs) local_.insert(in);
    for (const auto& n : g.nodes) {
      for (const auto& o : n.outputs) local_.insert(o);
    }
  }
  const Tensor* constant(const std::string& v) const {
    if (const Tensor* c = g_.constant(v)) return c;
    return local_.count(v) || !outer_ ? nullptr : outer_->constant(v);
  }
  const ValueInfo* info(const std::string& v) const {
    if (const ValueInfo* vi = g_.info(v)) return vi;
    return local_.count(v) || !outer_ ? nullptr : outer_->info(v);
  }

 private:
  const Graph& g_;
  const Scope* outer_;
  std::unordered_set<std::string> local_;
};

DType value_dtype(const Scope& g, const std::string& v) {
  if (const Tensor* c = g.constant(v)) return c->dtype();
  const ValueInfo* vi = g.info(v);
  return vi ? vi->dtype : DType::kUndefined;
}

bool is_f32(const Scope& g, const std::string& v) { return !v.empty() && value_dtype(g, v) == DType::kFloat32; }

// Concrete dims of `v` when known.
bool static_dims(const Scope& g, const std::string& v, Dims* d) {
  if (const Tensor* c = g.constant(v)) {
    *d = c->dims();
    return true;
  }
  const ValueInfo* vi = g.info(v);
  if (!vi || !vi->shape.fully_known()) return false;
  *d = vi->shape.concrete();
  return true;
}

// The shape of `v` when its rank is known and every dim is a size or a named symbol: two such shapes whose dims
// compare equal (Dim::operator==) are equal at run time whatever the symbols' sizes, so an elementwise chain is
// fused in a plan for shapes known only at run time too (the shape-generic plan).
bool named_shape(const Scope& g, const std::string& v, Shape* s) {
  if (const Tensor* c = g.constant(v)) {
    *s = Shape::FromDims(c->dims());
    return true;
  }
  const ValueInfo* vi = g.info(v);
  if (!vi || !vi->shape.rank_known) return false;
  for (const Dim& d : vi->shape.dims) {
    if (!d.known() && d.symbol.empty()) return false;
  }
  *s = vi->shape;
  return true;
}

bool same_shape(const Shape& a, const Shape& b) { return a.rank() == b.rank() && a.dims == b.dims; }

// The rank of `v`, or -1 when unknown.
int rank_of(const Scope& g, const std::string& v) {
  if (const Tensor* c = g.constant(v)) return c->rank();
  const ValueInfo* vi = g.info(v);
  return vi && vi->shape.rank_known ? vi->shape.rank() : -1;
}

// A constant float32 scalar (any rank, one element).
bool const_scalar(const Scope& g, const std::string& v, float* out) {
  const Tensor* c = v.empty() ? nullptr : g.constant(v);
  if (!c || c->dtype() != DType::kFloat32 || c->numel() != 1) return false;
  *out = c->data<float>()[0];
  return true;
}

// A single-output float32 node of the default domain.
bool plain_f32_node(const Scope& g, const Node& n) {
  // com.microsoft.Gelu is what canonicalisation (and ONNX Runtime) makes of a decomposed GELU.
  const bool domain = n.domain.empty() || n.domain == "ai.onnx" || (n.domain == kMsDomain && n.op_type == "Gelu");
  return domain && n.outputs.size() == 1 && is_f32(g, n.outputs[0]);
}

// Clip's bounds from constant inputs (opset >= 11) or attributes (< 11).
bool clip_bounds(const Scope& g, const Node& n, float* lo, float* hi) {
  *lo = -std::numeric_limits<float>::max();
  *hi = std::numeric_limits<float>::max();
  if (n.has_input(1) && !const_scalar(g, n.inputs[1], lo)) return false;
  if (n.has_input(2) && !const_scalar(g, n.inputs[2], hi)) return false;
  if (!n.has_input(1) && n.has_attr("min")) *lo = n.attr_float("min", *lo);
  if (!n.has_input(2) && n.has_attr("max")) *hi = n.attr_float("max", *hi);
  return true;
}

// An activation the GEMM epilogue runs (kernels/fused_activation.h), with
// its parameters in ONNX order.
bool epilogue_activation(const Scope& g, const Node& n, std::string* name, std::vector<float>* params) {
  if (!plain_f32_node(g, n) || !is_f32(g, n.inputs.empty() ? "" : n.inputs[0])) return false;
  const std::string& op = n.op_type;
  params->clear();
  if (op == "Relu" || op == "Sigmoid" || op == "Tanh") {
    if (n.num_inputs() != 1) return false;
  } else if (op == "LeakyRelu") {
    *params = {n.attr_float("alpha", 0.01f)};
  } else if (op == "HardSigmoid") {
    *params = {n.attr_float("alpha", 0.2f), n.attr_float("beta", 0.5f)};
  } else if (op == "HardSwish") {
    if (n.num_inputs() != 1) return false;
    *params = {1.f / 6.f, 0.5f};
  } else if (op == "Clip") {
    float lo, hi;
    if (!clip_bounds(g, n, &lo, &hi)) return false;
    *params = {lo, hi};
  } else {
    return false;
  }
  *name = op;
  return true;
}

// Nodes of `g` marked for removal, and replacements written in place.
struct Rewrite {
  explicit Rewrite(const Graph& g) : removed(g.nodes.size(), false), taken(g.nodes.size(), false) {}
  std::vector<bool> removed;  // absorbed into a fused node elsewhere
  std::vector<bool> taken;    // part of some group already

  // Node `head` and the nodes of `group` (in order, not empty) become `f`,
  // which takes the last one's place: there all its operands exist.
  void fuse(Graph& g, size_t head, const std::vector<int>& group, Node f) {
    taken[head] = removed[head] = true;
    for (int k : group) taken[static_cast<size_t>(k)] = removed[static_cast<size_t>(k)] = true;
    const size_t last = static_cast<size_t>(group.back());
    removed[last] = false;
    g.nodes[last] = std::move(f);
  }
};

// Drops removed nodes and the values only they produced.
int apply(Graph& g, const Rewrite& rw) {
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  int dropped = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (rw.removed[i]) {
      for (const auto& o : g.nodes[i].outputs) g.values.erase(o);
      ++dropped;
    } else {
      kept.push_back(std::move(g.nodes[i]));
    }
  }
  g.nodes = std::move(kept);
  return dropped;
}

// FusedConv-style activation attributes (FusedMatMul reads them the same way).
void set_conv_activation(Node& f, const std::string& act, const std::vector<float>& params) {
  if (act.empty()) return;
  f.attrs["activation"] = Attribute::String(act);
  f.attrs["activation_params"] = Attribute::Floats(params);
}

// What follows a producer's output `y` into its epilogue: an Add of
// `y` with another float32 value that `accept_addend` takes (a residual, a
// bias: only one with which the sum keeps y's shape), then an activation;
// each through a single consumer. `group` lists the absorbed nodes in order.
struct Epilogue {
  std::string addend, out, act;
  std::vector<float> params;
  std::vector<int> group;
};

// x times a gate of x after e->out, as one epilogue activation: x * HardSigmoid(x) (hard swish as PaddlePaddle and
// Keras export it) becomes HardSwish with that HardSigmoid's alpha and beta, x * Sigmoid(x) (SiLU as PyTorch exports
// it) Swish. e->out is read by exactly those two nodes, the gate's output by the Mul alone.
void times_its_gate(const Graph& g, const Scope& sc, const Uses& uses, const Rewrite& rw, Epilogue* e) {
  const std::vector<int> r = uses.readers(e->out);
  if (r.size() != 2 || r[0] == r[1]) return;
  int gate = -1, mul = -1;
  for (int k : r) {
    if (k < 0 || rw.taken[static_cast<size_t>(k)]) return;
    const Node& n = g.nodes[static_cast<size_t>(k)];
    if (!plain_f32_node(sc, n)) return;
    if ((n.op_type == "HardSigmoid" || n.op_type == "Sigmoid") && n.num_inputs() == 1) gate = k;
    if (n.op_type == "Mul" && n.num_inputs() == 2) mul = k;
  }
  if (gate < 0 || mul < 0) return;
  const Node& h = g.nodes[static_cast<size_t>(gate)];
  const Node& m = g.nodes[static_cast<size_t>(mul)];
  const bool pair =
      (m.inputs[0] == e->out && m.inputs[1] == h.outputs[0]) || (m.inputs[1] == e->out && m.inputs[0] == h.outputs[0]);
  if (!pair || uses.sole_consumer(h.outputs[0]) != mul) return;
  if (h.op_type == "HardSigmoid") {
    e->act = "HardSwish";
    e->params = {h.attr_float("alpha", 0.2f), h.attr_float("beta", 0.5f)};
  } else {
    e->act = "Swish";
    e->params.clear();
  }
  e->out = m.outputs[0];
  e->group.push_back(gate);
  e->group.push_back(mul);
}

template <class Accept>
Epilogue follow_epilogue(const Graph& g, const Scope& sc, const Uses& uses, const Rewrite& rw, const std::string& y,
                         Accept accept_addend) {
  Epilogue e;
  e.out = y;
  int c = uses.sole_consumer(e.out);
  if (c >= 0 && !rw.taken[static_cast<size_t>(c)]) {
    const Node& add = g.nodes[static_cast<size_t>(c)];
    if (add.op_type == "Add" && plain_f32_node(sc, add) && add.num_inputs() == 2 && add.inputs[0] != add.inputs[1]) {
      const std::string& other = add.inputs[0] == e.out ? add.inputs[1] : add.inputs[0];
      if (is_f32(sc, other) && accept_addend(other)) {
        e.addend = other;
        e.out = add.outputs[0];
        e.group.push_back(c);
        c = uses.sole_consumer(e.out);
      }
    }
  }
  if (c >= 0 && !rw.taken[static_cast<size_t>(c)] &&
      epilogue_activation(sc, g.nodes[static_cast<size_t>(c)], &e.act, &e.params)) {
    e.out = g.nodes[static_cast<size_t>(c)].outputs[0];
    e.group.push_back(c);
  } else if (c < 0) {
    times_its_gate(g, sc, uses, rw, &e);
  }
  return e;
}

// ---- 1. Conv -> [Add(Z)] -> [activation] [-> MaxPool] ---------------------

// A float 2-D MaxPool FusedConvMaxPool can take (ops/conv.cc: it pools a convolution's rows while they are in the
// cache): kernel_shape [kh, kw] up to 64 each, any strides, explicit pads below the kernel (or VALID), no dilation,
// ceil mode or Indices output, and not the identity (1x1, stride 1). Its window as pool_kernel, pool_strides and
// pool_pads.
bool fusable_max_pool(const Scope& sc, const Node& n, std::vector<int64_t>* k, std::vector<int64_t>* s,
                      std::vector<int64_t>* p) {
  if (n.op_type != "MaxPool" || !plain_f32_node(sc, n) || n.num_inputs() != 1 || rank_of(sc, n.inputs[0]) != 4) {
    return false;
  }
  *k = n.attr_ints("kernel_shape");
  *s = n.has_attr("strides") ? n.attr_ints("strides") : std::vector<int64_t>{1, 1};
  const std::string pad = n.attr_string("auto_pad", "NOTSET");
  *p = n.has_attr("pads") && pad == "NOTSET" ? n.attr_ints("pads") : std::vector<int64_t>(4, 0);
  if (k->size() != 2 || s->size() != 2 || p->size() != 4) return false;
  for (size_t i = 0; i < 4; ++i) {
    if (i < 2 && ((*k)[i] < 1 || (*k)[i] > 64 || (*s)[i] < 1)) return false;
    if ((*p)[i] < 0 || (*p)[i] >= (*k)[i % 2]) return false;
  }
  for (int64_t d : n.attr_ints("dilations")) {
    if (d != 1) return false;
  }
  const bool identity = (*k)[0] * (*k)[1] == 1 && (*s)[0] * (*s)[1] == 1;
  return (pad == "NOTSET" || pad == "VALID") && n.attr_int("ceil_mode", 0) == 0 && !identity;
}

// One group of 2-D weights known now: what FusedConvMaxPool takes.
bool one_group_2d(const Scope& sc, const Node& conv) {
  const Tensor* w = conv.num_inputs() > 1 ? sc.constant(conv.inputs[1]) : nullptr;
  return w && w->rank() == 4 && conv.attr_int("group", 1) == 1;
}

int fuse_conv(Graph& g, const Scope* outer, NativeFusionStats* st) {
  Uses uses(g);
  Rewrite rw(g);
  const Scope sc(g, outer);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& conv = g.nodes[i];
    if (rw.taken[i] || conv.op_type != "Conv" || !plain_f32_node(sc, conv)) continue;
    // Residual: Z is added before the activation, as FusedConv's kernel does; only where both shapes are equal at
    // every size their symbols take (named_shape).
    Shape ydims;
    const bool known = named_shape(sc, conv.outputs[0], &ydims);
    Epilogue ep = follow_epilogue(g, sc, uses, rw, conv.outputs[0], [&](const std::string& other) {
      Shape zd;
      return known && named_shape(sc, other, &zd) && same_shape(zd, ydims);
    });
    // A max pool after it, without a summand: its output only.
    std::vector<int64_t> pool_k, pool_s, pool_p;
    const int pool = ep.addend.empty() ? uses.sole_consumer(ep.out) : -1;
    const bool pooled = pool >= 0 && !rw.taken[static_cast<size_t>(pool)] && one_group_2d(sc, conv) &&
                        fusable_max_pool(sc, g.nodes[static_cast<size_t>(pool)], &pool_k, &pool_s, &pool_p);
    if (pooled) {
      ep.out = g.nodes[static_cast<size_t>(pool)].outputs[0];
      ep.group.push_back(pool);
    }
    const std::string& z = ep.addend;
    const std::string& out = ep.out;
    const std::string& act = ep.act;
    const std::vector<float>& params = ep.params;
    const std::vector<int>& group = ep.group;
    if (group.empty()) continue;
    Node f;
    f.name = conv.name;
    f.op_type = pooled ? "FusedConvMaxPool" : "FusedConv";
    f.domain = pooled ? kTesseraDomain : kMsDomain;
    f.attrs = conv.attrs;
    if (pooled) {
      f.attrs["pool_kernel"] = Attribute::Ints(pool_k);
      f.attrs["pool_strides"] = Attribute::Ints(pool_s);
      f.attrs["pool_pads"] = Attribute::Ints(pool_p);
    }
    f.inputs = conv.inputs;
    f.inputs.resize(3);
    if (!z.empty()) f.inputs.push_back(z);
    f.outputs = {out};
    set_conv_activation(f, act, params);
    rw.fuse(g, i, group, std::move(f));
    ++st->conv;
  }
  return apply(g, rw);
}

// ---- 2. Gemm -> activation, MatMul -> [Add(bias)] -> [activation] -------

// MatMul with a constant float32 [K, N] weight: a bias Add of N values
// ([N], or [1, ..., N]) and an activation go to the GEMM epilogue.
bool fuse_matmul_at(Graph& g, const Scope& sc, const Uses& uses, Rewrite& rw, size_t i) {
  const Node& mm = g.nodes[i];
  const Tensor* b = mm.num_inputs() == 2 ? sc.constant(mm.inputs[1]) : nullptr;
  // Ranks, not sizes: a shape-generic plan's dims are symbolic.
  const int yrank = rank_of(sc, mm.outputs[0]);
  if (!b || b->dtype() != DType::kFloat32 || b->rank() != 2 || !is_f32(sc, mm.inputs[0]) ||
      rank_of(sc, mm.inputs[0]) < 2 || yrank < 2) {
    return false;
  }
  // y is [.., N]: a bias of N values in its last dim, of y's rank at most, broadcasts without changing y's shape.
  const int64_t n = b->dim(1);
  Epilogue ep = follow_epilogue(g, sc, uses, rw, mm.outputs[0], [&](const std::string& other) {
    Dims bd;
    return static_dims(sc, other, &bd) && !bd.empty() && bd.back() == n && numel(bd) == n &&
           static_cast<int>(bd.size()) <= yrank;
  });
  const std::string& bias = ep.addend;
  const std::string& out = ep.out;
  const std::string& act = ep.act;
  const std::vector<float>& params = ep.params;
  const std::vector<int>& group = ep.group;
  if (group.empty()) return false;
  Node f;
  f.name = mm.name;
  f.op_type = "FusedMatMul";
  f.domain = kTesseraDomain;
  f.inputs = {mm.inputs[0], mm.inputs[1]};
  if (!bias.empty()) f.inputs.push_back(bias);
  f.outputs = {out};
  set_conv_activation(f, act, params);
  rw.fuse(g, i, group, std::move(f));
  return true;
}

// MatMul (any B) whose product only a Mul by a float32 scalar reads: the factor goes to the GEMM's store (alpha), the
// product rounded and then multiplied by it, as ONNX Runtime's FusedMatMul computes it (canonicalisation moves an
// operand's factor there).
bool fuse_matmul_scale_at(Graph& g, const Scope& sc, const Uses& uses, Rewrite& rw, size_t i) {
  const Node& mm = g.nodes[i];
  if (mm.num_inputs() != 2 || !is_f32(sc, mm.inputs[0]) || !is_f32(sc, mm.inputs[1])) return false;
  const int c = uses.sole_consumer(mm.outputs[0]);
  if (c < 0 || rw.taken[static_cast<size_t>(c)]) return false;
  const Node& mul = g.nodes[static_cast<size_t>(c)];
  if (mul.op_type != "Mul" || !plain_f32_node(sc, mul) || mul.num_inputs() != 2 || mul.inputs[0] == mul.inputs[1]) {
    return false;
  }
  // A factor of higher rank than the product would broadcast it to more dims.
  const std::string& factor = mul.inputs[0] == mm.outputs[0] ? mul.inputs[1] : mul.inputs[0];
  const int rank = rank_of(sc, mm.outputs[0]);
  float alpha = 0.f;
  if (!const_scalar(sc, factor, &alpha) || rank < 0 || rank_of(sc, factor) > rank) return false;
  Node f;
  f.name = mm.name;
  f.op_type = "FusedMatMul";
  f.domain = kTesseraDomain;
  f.inputs = {mm.inputs[0], mm.inputs[1]};
  f.outputs = {mul.outputs[0]};
  f.attrs["alpha"] = Attribute::Float(alpha);
  rw.fuse(g, i, {c}, std::move(f));
  return true;
}

int fuse_gemm(Graph& g, const Scope* outer, NativeFusionStats* st) {
  Uses uses(g);
  Rewrite rw(g);
  const Scope sc(g, outer);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& mm = g.nodes[i];
    if (rw.taken[i] || !plain_f32_node(sc, mm)) continue;
    if (mm.op_type == "MatMul") {
      if (fuse_matmul_at(g, sc, uses, rw, i) || fuse_matmul_scale_at(g, sc, uses, rw, i)) ++st->matmul;
      continue;
    }
    if (mm.op_type != "Gemm") continue;
    const int c = uses.sole_consumer(mm.outputs[0]);
    std::string act;
    std::vector<float> params;
    if (c < 0 || rw.taken[static_cast<size_t>(c)] ||
        !epilogue_activation(sc, g.nodes[static_cast<size_t>(c)], &act, &params)) {
      continue;
    }
    Node f;
    f.name = mm.name;
    f.op_type = "FusedGemm";
    f.domain = kMsDomain;
    f.attrs = mm.attrs;
    f.inputs = mm.inputs;
    f.outputs = {g.nodes[static_cast<size_t>(c)].outputs[0]};
    f.attrs["activation"] = Attribute::String(act);
    // FusedGemm's activation_alpha / activation_beta carry the parameters
    // (Clip's min and max included, see activation_from_gemm_attrs).
    for (size_t k = 0; k < params.size() && k < 2; ++k) {
      f.attrs[k == 0 ? "activation_alpha" : "activation_beta"] = Attribute::Float(params[k]);
    }
    rw.taken[i] = rw.removed[i] = true;
    rw.taken[static_cast<size_t>(c)] = true;
    g.nodes[static_cast<size_t>(c)] = std::move(f);
    ++st->gemm;
  }
  return apply(g, rw);
}

// ---- 3. elementwise chains -----------------------------------------------

// One node as a chain instruction.
struct EwOp {
  bool ok = false;
  bool binary = false;  // takes a side operand
  float p0 = 0.f, p1 = 0.f;
};

EwOp classify(const Scope& g, const Node& n) {
  EwOp e;
  if (!plain_f32_node(g, n) || !fused_elementwise_supports(n.op_type)) return e;
  const std::string& op = n.op_type;
  const int ni = n.num_inputs();
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    if (ni != 2) return e;
    e.binary = true;
  } else if (op == "Pow") {
    // Only a constant scalar exponent: the unfused kernel's shortcuts for
    // it are what the fused instruction reproduces.
    if (ni != 2 || !const_scalar(g, n.inputs[1], &e.p0)) return e;
  } else if (op == "Clip") {
    if (!clip_bounds(g, n, &e.p0, &e.p1)) return e;
  } else {
    if (ni != 1) return e;
    if (op == "LeakyRelu") e.p0 = n.attr_float("alpha", 0.01f);
    if (op == "HardSigmoid") {
      e.p0 = n.attr_float("alpha", 0.2f);
      e.p1 = n.attr_float("beta", 0.5f);
    }
    if (op == "Gelu") {
      const std::string a = n.attr_string("approximate", "none");
      if (a != "none" && a != "tanh") return e;
      e.p0 = a == "tanh" ? 1.f : 0.f;
    }
  }
  for (int k = 0; k < ni; ++k) {
    if (!is_f32(g, n.inputs[static_cast<size_t>(k)])) return e;
  }
  e.ok = true;
  return e;
}

// A side operand of a chain whose value has shape `out`: it meets block_broadcast at every size the symbols take.
// Its dims from the first to the last that is not a known 1 equal out's (so they match at run time, 1 or not), and
// the others are 1.
bool valid_side(const Scope& g, const std::string& v, const Shape& out) {
  Shape d;
  if (!is_f32(g, v) || !named_shape(g, v, &d) || d.rank() > out.rank()) return false;
  const int off = out.rank() - d.rank();
  int first = -1, last = -1;
  for (int i = 0; i < d.rank(); ++i) {
    if (d[i].known() && d[i].value == 1) continue;
    if (first < 0) first = i;
    last = i;
  }
  for (int i = first; first >= 0 && i <= last; ++i) {
    if (d[i] != out[off + i]) return false;
  }
  return true;
}

struct Chain {
  std::vector<std::string> inputs;  // [0] = head operand
  std::vector<std::string> ops;
  std::vector<int64_t> args, swap;
  std::vector<float> p0, p1;

  void add(const std::string& op, int arg, bool swapped, const EwOp& e) {
    ops.push_back(op);
    args.push_back(arg);
    swap.push_back(swapped ? 1 : 0);
    p0.push_back(e.p0);
    p1.push_back(e.p1);
  }
  int side_index(const std::string& v) {
    for (size_t k = 1; k < inputs.size(); ++k) {
      if (inputs[k] == v) return static_cast<int>(k);
    }
    inputs.push_back(v);
    return static_cast<int>(inputs.size() - 1);
  }
};

int fuse_elementwise(Graph& g, const Scope* outer, NativeFusionStats* st) {
  Uses uses(g);
  Rewrite rw(g);
  const Scope sc(g, outer);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (rw.taken[i]) continue;
    const Node& head = g.nodes[i];
    // A Cast of int32 to float32 may head a chain: the integer products of dynamically quantized models
    // (ConvInteger, MatMulInteger) meet their scale so.
    const bool cast = head.op_type == "Cast" && head.domain.empty() && head.num_inputs() == 1 &&
                      head.attr_int("to", -1) == static_cast<int64_t>(DType::kFloat32) &&
                      value_dtype(sc, head.inputs[0]) == DType::kInt32;
    const EwOp he = cast ? EwOp{true, false} : classify(sc, head);
    Shape out;
    if (!he.ok || !named_shape(sc, head.outputs[0], &out)) continue;
    // The head's operand with the output's shape starts the chain.
    Chain ch;
    Shape d0, d1;
    const bool full0 = named_shape(sc, head.inputs[0], &d0) && same_shape(d0, out);
    if (!he.binary) {
      if (!full0) continue;
      ch.inputs = {head.inputs[0]};
      ch.add(head.op_type, -1, false, he);
    } else if (full0 && valid_side(sc, head.inputs[1], out)) {
      ch.inputs = {head.inputs[0]};
      ch.add(head.op_type, ch.side_index(head.inputs[1]), false, he);
    } else if (named_shape(sc, head.inputs[1], &d1) && same_shape(d1, out) && valid_side(sc, head.inputs[0], out)) {
      ch.inputs = {head.inputs[1]};
      ch.add(head.op_type, ch.side_index(head.inputs[0]), true, he);
    } else {
      continue;
    }
    std::vector<size_t> group = {i};
    std::string v = head.outputs[0];
    for (;;) {
      const int c = uses.sole_consumer(v);
      if (c < 0 || rw.taken[static_cast<size_t>(c)]) break;
      const Node& n = g.nodes[static_cast<size_t>(c)];
      const EwOp e = classify(sc, n);
      Shape nd;
      if (!e.ok || !named_shape(sc, n.outputs[0], &nd) || !same_shape(nd, out)) break;
      if (!e.binary) {
        if (n.inputs[0] != v) break;  // Pow's exponent, or Clip's bound
        ch.add(n.op_type, -1, false, e);
      } else {
        const bool left = n.inputs[0] == v;
        const std::string& other = left ? n.inputs[1] : n.inputs[0];
        if (other == v || !valid_side(sc, other, out)) break;
        ch.add(n.op_type, ch.side_index(other), !left, e);
      }
      group.push_back(static_cast<size_t>(c));
      v = n.outputs[0];
    }
    if (group.size() < 2) continue;
    Node f;
    f.name = "fused_" + head.name;
    f.op_type = "FusedElementwise";
    f.domain = kTesseraDomain;
    f.inputs = ch.inputs;
    f.outputs = {v};
    Attribute ops;
    ops.kind = Attribute::Kind::kStrings;
    ops.strings = ch.ops;
    f.attrs["ops"] = ops;
    f.attrs["args"] = Attribute::Ints(ch.args);
    f.attrs["swap"] = Attribute::Ints(ch.swap);
    f.attrs["p0"] = Attribute::Floats(ch.p0);
    f.attrs["p1"] = Attribute::Floats(ch.p1);
    for (size_t k : group) rw.taken[k] = rw.removed[k] = true;
    rw.removed[group.back()] = false;
    g.nodes[group.back()] = std::move(f);
    ++st->elementwise_chains;
  }
  return apply(g, rw);
}

}  // namespace

bool native_fusion_disabled_by_env() { return env_flag("TESSERA_NO_FUSION"); }

namespace {

Status fuse_graph(Graph& g, const Scope* outer, NativeFusionStats& st) {
  {
    // Bodies first: they see this graph's types as it is now, before its
    // intermediates are renamed away (values a body reads are never fused).
    const Scope here(g, outer);
    for (Node& n : g.nodes) {
      for (auto& [name, a] : n.attrs) {
        if (a.kind == Attribute::Kind::kGraph && a.g) TSR_RETURN_IF_ERROR(fuse_graph(*a.g, &here, st));
        if (a.kind == Attribute::Kind::kGraphs) {
          for (auto& sg : a.graphs) {
            if (sg) TSR_RETURN_IF_ERROR(fuse_graph(*sg, &here, st));
          }
        }
      }
    }
  }
  st.nodes_removed += fuse_conv(g, outer, &st);
  st.nodes_removed += fuse_gemm(g, outer, &st);
  st.nodes_removed += fuse_elementwise(g, outer, &st);
  return Status::Ok();
}

}  // namespace

Status fuse_for_native(Graph& g, NativeFusionStats* stats) {
  NativeFusionStats local;
  return fuse_graph(g, nullptr, stats ? *stats : local);
}

}  // namespace tessera
