#include "dnnl_fusion.h"

#include <oneapi/dnnl/dnnl_types.h>

#include <algorithm>

#include "dnnl_lowering.h"
#include "dnnl_primitives.h"

namespace tessera_dnnl {

namespace {

bool can_take_post_ops(OpKind k) {
  return k == OpKind::kConv || k == OpKind::kDeconv || k == OpKind::kMatMul || k == OpKind::kBinary ||
         k == OpKind::kDynConv || k == OpKind::kDynMatMul;
}

bool commutative(int32_t alg) {
  return alg == dnnl_binary_add || alg == dnnl_binary_mul || alg == dnnl_binary_max || alg == dnnl_binary_min;
}

// Readers of every value: ops reading it as an operand or a post-op operand
// (an op counted once per use), and whether it leaves the region.
struct Uses {
  std::vector<std::vector<size_t>> readers;
  std::vector<bool> is_output;
};

Uses uses_of(const Program& p) {
  Uses u;
  u.readers.resize(p.values.size());
  u.is_output.assign(p.values.size(), false);
  for (size_t i = 0; i < p.ops.size(); ++i) {
    for (int32_t id : p.ops[i].in) {
      if (id >= 0) u.readers[static_cast<size_t>(id)].push_back(i);
    }
    for (const PostOp& po : p.ops[i].post) {
      if (po.operand >= 0) u.readers[static_cast<size_t>(po.operand)].push_back(i);
    }
  }
  for (int32_t id : p.outputs) u.is_output[static_cast<size_t>(id)] = true;
  return u;
}

// Appends to `nodes` those of `more` it does not hold yet (a node emitting several ops is named once).
void add_nodes(std::vector<std::string>& nodes, const std::vector<std::string>& more) {
  for (const std::string& n : more) {
    if (std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
  }
}

// The index of the op computing value v where its one reader may take it in (v is read once and is no output of the
// program); p.ops.size() otherwise.
size_t sole_producer(const Program& p, const Uses& u, int32_t v) {
  if (v < 0 || u.is_output[static_cast<size_t>(v)] || u.readers[static_cast<size_t>(v)].size() != 1)
    return p.ops.size();
  return static_cast<size_t>(std::find_if(p.ops.begin(), p.ops.end(), [&](const Op& o) { return o.out == v; }) -
                             p.ops.begin());
}

// `m` takes the place of op *i, having taken in op t's work: its nodes are t's, then its own; t goes, and *i follows
// the ops that move.
void replace_absorbing(Program& p, size_t t, size_t* i, Op m) {
  std::vector<std::string> nodes = p.ops[t].nodes;
  add_nodes(nodes, m.nodes);
  m.nodes = std::move(nodes);
  p.ops[*i] = std::move(m);
  p.ops.erase(p.ops.begin() + static_cast<std::ptrdiff_t>(t));
  if (t < *i) --*i;
}

// `producer` with reader `r` folded in as a post-op, or false.
bool fold(const Program& p, const Op& producer, const Op& r, Op* fused) {
  const int32_t x = producer.out;
  const Dims& xd = p.values[static_cast<size_t>(x)].dims;
  const Dims dd = dst_dims(producer, p.values);
  // A plane binary runs as the plugin's own loop, without post-ops, and is a post-op of a MatMul only
  // (plane_operand).
  if (plane_operand(producer, p.values) >= 0 || (plane_operand(r, p.values) >= 0 && producer.kind != OpKind::kMatMul)) {
    return false;
  }
  *fused = producer;
  fused->out = r.out;
  if (r.kind == OpKind::kEltwise) {
    // A dynamically quantized product and a binary op (exact themselves) keep ONNX Runtime's bits, which a
    // requantization after them needs: the Sigmoid, HardSwish and linear step (HardSigmoid) after them run as the
    // plugin's own loops (own_eltwise) with native's formulas, not as oneDNN's post-ops; so does the swish step of
    // absorb_swish, after any producer.
    if ((producer.kind == OpKind::kDynConv || producer.kind == OpKind::kDynMatMul || producer.kind == OpKind::kBinary ||
         r.alg == dnnl_eltwise_swish) &&
        own_eltwise(r)) {
      return false;
    }
    fused->post.push_back(PostOp{PostKind::kEltwise, r.alg, r.floats[0], r.floats[1], -1});
    return true;
  }
  if (r.kind != OpKind::kBinary) return false;
  const size_t k = r.in[0] == x ? 0 : 1;
  const int32_t other = r.in[1 - k];
  if (other == x) return false;  // x (op) x
  const Dims& od = p.values[static_cast<size_t>(other)].dims;
  const bool has_sum = std::any_of(producer.post.begin(), producer.post.end(),
                                   [](const PostOp& po) { return po.kind == PostKind::kSum; });
  if (r.alg == dnnl_binary_add && od == xd && xd == dd && !has_sum && producer.kind != OpKind::kBinary) {
    fused->post.push_back(PostOp{PostKind::kSum, 0, 0.f, 0.f, other});
    return true;
  }
  // A binary post-op's operand is read plain: worth it for a broadcast
  // operand (a bias, a per-channel scale) or next to a plain MatMul, not for
  // a same-shaped value that may flow in a blocked layout.
  Dims b, view;
  if (!broadcast(od, xd, &b) || b != xd || !post_operand_view(od, xd, dd, &view)) return false;
  if (od == xd && producer.kind != OpKind::kMatMul) return false;
  if (k != 0 && !commutative(r.alg)) return false;
  fused->post.push_back(PostOp{PostKind::kBinary, r.alg, 0.f, 0.f, other});
  return true;
}

// A Transpose read only by a MatMul (attention's Q, K and V heads) becomes
// that operand's strided view: the MatMul reads the Transpose's input in
// place, and the reorder goes. Kept only when oneDNN confirms a non-reference
// implementation for the strided operand.
void absorb_transposes(Program& p, const dnnl::engine& eng) {
  for (size_t i = 0; i < p.ops.size(); ++i) {
    if (p.ops[i].kind != OpKind::kMatMul) continue;
    bool absorbed = false;
    for (size_t k = 0; k < 2 && !absorbed; ++k) {
      const int32_t v = p.ops[i].in[k];
      const size_t t = sole_producer(p, uses_of(p), v);
      if (t >= p.ops.size() || p.ops[t].kind != OpKind::kTranspose || !p.ops[t].post.empty()) continue;
      MatMulOperands mo;
      if (!matmul_operands(p.ops[i], &mo)) continue;
      const auto r = static_cast<size_t>(p.ops[i].ints[0]);
      const Dims& src = p.values[static_cast<size_t>(p.ops[t].in[0])].dims;
      // Only an operand viewed at its own rank (no 1-D or broadcast padding).
      if (src.size() != r || p.values[static_cast<size_t>(v)].dims != mo.stored[k]) continue;
      Op m = p.ops[i];
      Dims perms[2] = {mo.perm[0], mo.perm[1]};
      for (size_t d = 0; d < r; ++d) perms[k][d] = p.ops[t].ints[static_cast<size_t>(mo.perm[k][d])];
      m.in[k] = p.ops[t].in[0];
      Dims ints = {static_cast<int64_t>(r), 0, 0};  // the transposes now live in the perms
      ints.insert(ints.end(), k == 0 ? src.begin() : mo.stored[0].begin(), k == 0 ? src.end() : mo.stored[0].end());
      ints.insert(ints.end(), k == 1 ? src.begin() : mo.stored[1].begin(), k == 1 ? src.end() : mo.stored[1].end());
      ints.insert(ints.end(), mo.bias.begin(), mo.bias.end());
      ints.insert(ints.end(), perms[0].begin(), perms[0].end());
      ints.insert(ints.end(), perms[1].begin(), perms[1].end());
      m.ints = ints;
      std::string impl;
      if (!check_op(m, p.values).empty() || !probe(m, p.values, eng, &impl).empty() ||
          impl.find("ref") != std::string::npos) {
        continue;
      }
      replace_absorbing(p, t, &i, std::move(m));
      absorbed = true;
    }
  }
}

// A Binary of same-shaped operands (with at most a relu after it) whose operands are computed by
// Dequantizes read by it alone becomes a DqBinary reading their 8-bit sources: the float tensors the
// Dequantizes wrote are never written.
void absorb_dequantizes(Program& p) {
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const Op& b = p.ops[i];
    const Dims& y = p.values[static_cast<size_t>(b.out)].dims;
    if (b.kind != OpKind::kBinary || b.post.size() > 1 || p.values[static_cast<size_t>(b.in[0])].dims != y ||
        p.values[static_cast<size_t>(b.in[1])].dims != y || b.in[0] == b.in[1]) {
      continue;
    }
    if (b.post.size() == 1 && (b.post[0].kind != PostKind::kEltwise || b.post[0].alg != dnnl_eltwise_relu ||
                               b.post[0].alpha != 0.f)) {
      continue;
    }
    const Uses u = uses_of(p);
    Op d = b;
    d.kind = OpKind::kDqBinary;
    d.floats = {0.f, 0.f, 0.f, 0.f};
    std::vector<size_t> absorbed;
    for (size_t k = 0; k < 2; ++k) {
      const size_t q = sole_producer(p, u, b.in[k]);
      if (q >= p.ops.size() || p.ops[q].kind != OpKind::kDequantize) continue;
      d.in[k] = p.ops[q].in[0];
      d.floats[2 * k] = p.ops[q].floats[0];
      d.floats[2 * k + 1] = p.ops[q].floats[1];
      absorbed.push_back(q);
    }
    if (absorbed.empty() || !check_op(d, p.values).empty()) continue;
    std::vector<std::string> nodes;
    for (size_t q : absorbed) nodes.insert(nodes.end(), p.ops[q].nodes.begin(), p.ops[q].nodes.end());
    add_nodes(nodes, b.nodes);
    d.nodes = nodes;
    p.ops[i] = std::move(d);
    std::sort(absorbed.rbegin(), absorbed.rend());
    for (size_t q : absorbed) {
      p.ops.erase(p.ops.begin() + static_cast<std::ptrdiff_t>(q));
      if (q < i) --i;
    }
  }
}

// A global average pool whose float source a Dequantize computes for it alone (a quantized classifier's head:
// DequantizeLinear -> GlobalAveragePool) averages the 8-bit source itself (kPool with floats, the plugin's own loop):
// the float tensor is never written. mobilenet_v2's QDQ head wrote 1280 x 7 x 7 floats in 30 us, its stores missing
// the cache, for a pool of 10 us.
void absorb_dequantizes_into_pools(Program& p) {
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const Op& pool = p.ops[i];
    if (pool.kind != OpKind::kPool || !pool.floats.empty() || !pool.post.empty() || pool.bf16 ||
        !global_average_pool(pool, p.values)) {
      continue;
    }
    const size_t q = sole_producer(p, uses_of(p), pool.in[0]);
    if (q >= p.ops.size() || p.ops[q].kind != OpKind::kDequantize || p.ops[q].in.size() != 1) continue;
    Op d = pool;
    d.in[0] = p.ops[q].in[0];
    d.floats = {p.ops[q].floats[0], p.ops[q].floats[1]};
    if (check_op(d, p.values).empty()) replace_absorbing(p, q, &i, std::move(d));
  }
}

// A quantized product (QLinearConv, QLinearMatMul) read only by a unary lookup whose table clamps (kLookup's floats
// {lo, hi}) computes the clamped result itself: a clip of its rounded result to [lo - zp, hi - zp] before its zero
// point is added. One pass over the tensor fewer, the same bytes (whole numbers throughout).
void absorb_lookups(Program& p, const dnnl::engine& eng) {
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const Op& q = p.ops[i];
    if ((q.kind != OpKind::kQConv && q.kind != OpKind::kQMatMul) || !q.post.empty()) continue;
    const Uses u = uses_of(p);
    const auto x = static_cast<size_t>(q.out);
    if (u.is_output[x] || u.readers[x].size() != 1) continue;
    const size_t j = u.readers[x][0];
    const Op& t = p.ops[j];
    if (j <= i || t.kind != OpKind::kLookup || t.in.size() != 2 || t.in[0] != q.out || t.floats.size() != 2) continue;
    Op fused = q;
    fused.out = t.out;
    const float zp = q.floats[1];
    fused.post = {PostOp{PostKind::kEltwise, dnnl_eltwise_clip, t.floats[0] - zp, t.floats[1] - zp, -1}};
    if (!check_op(fused, p.values).empty() || !probe(fused, p.values, eng).empty()) continue;
    add_nodes(fused.nodes, t.nodes);
    p.ops[j] = std::move(fused);
    p.ops.erase(p.ops.begin() + static_cast<std::ptrdiff_t>(i));
    --i;
  }
}

// A QLinearConv whose 8-bit result a is read only by a binary table of ONNX Runtime's QLinearAdd form (a residual
// Add between quantized tensors: y = saturate(round(a * r_a + b * r_b + fixed)), kLookup) computes y itself, with
// the intermediate rounding kept: post-ops round(v) (as before), a clip to a's type range less its zero point
// (intersected with a clamp already folded in), a linear step a * r_a + fixed with a's zero point inside, and a sum
// of r_b times the other operand b, which the destination holds when the step starts. The destination's conversion
// rounds and saturates y. One pass over the tensor fewer (resnet50's sixteen residual Adds). Float sums in another
// order than ONNX Runtime's may move a result that lies within a few units in the last place of a half by one
// step; the intermediate a is never written.
void absorb_qlinear_adds(Program& p, const dnnl::engine& eng) {
  for (size_t j = 0; j < p.ops.size(); ++j) {
    const Op& t = p.ops[j];
    if (t.kind != OpKind::kLookup || t.in.size() != 3 || t.floats.size() != 3 || !t.post.empty() ||
        t.in[0] == t.in[1]) {
      continue;
    }
    const Uses u = uses_of(p);
    for (size_t k = 0; k < 2; ++k) {
      const int32_t a = t.in[k];
      const size_t i = sole_producer(p, u, a);
      if (i >= j || p.ops[i].kind != OpKind::kQConv || p.ops[i].post.size() > 1) continue;
      const Op& q = p.ops[i];
      const float zp = q.floats[1];
      const bool s8 = p.values[static_cast<size_t>(a)].dtype == TESSERA_DTYPE_INT8;
      float lo = (s8 ? -128.f : 0.f) - zp, hi = (s8 ? 127.f : 255.f) - zp;
      if (q.post.size() == 1) {  // a clamp table folded in (absorb_lookups; check_dtypes allows nothing else)
        lo = std::max(lo, q.post[0].alpha);
        hi = std::min(hi, q.post[0].beta);
      }
      const float r_self = t.floats[k], r_other = t.floats[1 - k], fixed = t.floats[2];
      Op fused = q;
      fused.out = t.out;
      fused.post = {PostOp{PostKind::kEltwise, dnnl_eltwise_clip, lo, hi, -1},
                    PostOp{PostKind::kEltwise, dnnl_eltwise_linear, r_self, r_self * zp + fixed, -1},
                    PostOp{PostKind::kSum, 0, r_other, 0.f, t.in[1 - k]}};
      if (!check_op(fused, p.values).empty() || !probe(fused, p.values, eng).empty()) continue;
      add_nodes(fused.nodes, t.nodes);
      p.ops[j] = std::move(fused);
      p.ops.erase(p.ops.begin() + static_cast<std::ptrdiff_t>(i));
      --j;
      break;
    }
  }
}

// x * Sigmoid(x) after a float Conv, ConvTranspose or MatMul (SiLU as PyTorch exports it: YOLO, EfficientNet) becomes
// one own swish step with native's logistic (own_eltwise; fold() keeps it out of the product's post-ops, whose
// oneDNN swish was slower and gives other bits): x is read by the Sigmoid and the Mul alone, the Sigmoid by the Mul
// alone. `with_post`: also after a product that carries post-ops (run again once they are folded: a Conformer's
// feed-forward Linear, MatMul + bias Add, then SiLU).
void absorb_swish(Program& p, const dnnl::engine& eng, bool with_post) {
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const Op& prod = p.ops[i];
    if ((prod.kind != OpKind::kConv && prod.kind != OpKind::kDeconv && prod.kind != OpKind::kMatMul) ||
        (!with_post && !prod.post.empty()) || prod.bf16_dst ||
        p.values[static_cast<size_t>(prod.out)].dtype != TESSERA_DTYPE_FLOAT32) {
      continue;
    }
    const Uses u = uses_of(p);
    const auto x = static_cast<size_t>(prod.out);
    if (u.is_output[x] || u.readers[x].size() != 2) continue;
    size_t l = u.readers[x][0], m = u.readers[x][1];
    if (p.ops[l].kind == OpKind::kBinary) std::swap(l, m);
    const Op& sig = p.ops[l];
    const Op& mul = p.ops[m];
    if (l == m || sig.kind != OpKind::kEltwise || sig.alg != dnnl_eltwise_logistic || !sig.post.empty() ||
        mul.kind != OpKind::kBinary || mul.alg != dnnl_binary_mul || !mul.post.empty() || mul.in.size() != 2) {
      continue;
    }
    const auto s = static_cast<size_t>(sig.out);
    const bool operands =
        (mul.in[0] == prod.out && mul.in[1] == sig.out) || (mul.in[1] == prod.out && mul.in[0] == sig.out);
    if (!operands || u.is_output[s] || u.readers[s].size() != 1 || m < l ||
        p.values[s].dims != p.values[static_cast<size_t>(mul.out)].dims) {
      continue;
    }
    Op fused = sig;
    fused.out = mul.out;
    fused.alg = dnnl_eltwise_swish;
    fused.floats = {1.f, 0.f};
    if (!probe(fused, p.values, eng).empty()) continue;
    add_nodes(fused.nodes, mul.nodes);
    p.ops[m] = std::move(fused);
    p.ops.erase(p.ops.begin() + static_cast<std::ptrdiff_t>(l));
  }
}

}  // namespace

void fuse(Program& p, const dnnl::engine& eng) {
  absorb_lookups(p, eng);
  absorb_qlinear_adds(p, eng);
  absorb_transposes(p, eng);
  absorb_swish(p, eng, false);
  for (size_t i = 0; i < p.ops.size(); ++i) {
    while (can_take_post_ops(p.ops[i].kind) && p.ops[i].post.size() < 8) {
      const Uses u = uses_of(p);
      const auto x = static_cast<size_t>(p.ops[i].out);
      if (u.is_output[x] || u.readers[x].size() != 1) break;
      const size_t j = u.readers[x][0];
      Op fused;
      if (j <= i || !fold(p, p.ops[i], p.ops[j], &fused)) break;
      if (!probe(fused, p.values, eng).empty()) break;
      add_nodes(fused.nodes, p.ops[j].nodes);
      p.ops[j] = std::move(fused);
      p.ops.erase(p.ops.begin() + static_cast<std::ptrdiff_t>(i));
      i = j - 1;  // the fused op, at the reader's place; try to extend it
    }
  }
  absorb_swish(p, eng, true);
  absorb_dequantizes(p);
  absorb_dequantizes_into_pools(p);
}

std::vector<Composite> find_composites(const tessera_plugin::ModelView& m, const std::vector<bool>& supported) {
  static const char* kActivations[] = {"Relu", "LeakyRelu", "Sigmoid", "Tanh",     "Elu",  "Selu",  "Clip",
                                       "HardSigmoid", "HardSwish", "Gelu", "Mish", "Softplus", "Exp", "Abs",
                                       "Sqrt",  "Log",       "Neg",     "Round"};
  auto is_activation = [&](const std::string& op) {
    return std::any_of(std::begin(kActivations), std::end(kActivations), [&](const char* a) { return op == a; });
  };
  std::vector<Composite> out;
  for (int i = 0; i < m.num_nodes(); ++i) {
    const onnx::NodeProto& head = m.node(i);
    const std::string& op = head.op_type();
    if (!supported[static_cast<size_t>(i)] || !head.domain().empty() ||
        (op != "Conv" && op != "ConvTranspose" && op != "MatMul" && op != "Gemm")) {
      continue;
    }
    Composite c{op, {i}};
    const onnx::NodeProto* cur = &head;
    while (c.nodes.size() < 4 && cur->output_size() >= 1) {
      const std::string& v = cur->output(0);
      const std::vector<int>& readers = m.consumers(v);
      if (m.is_graph_output(v) || readers.size() != 1 || !supported[static_cast<size_t>(readers[0])]) break;
      const onnx::NodeProto& next = m.node(readers[0]);
      const std::string& nop = next.op_type();
      const bool binary = nop == "Add" || nop == "Mul" || ((nop == "Sub" || nop == "Div") && next.input(0) == v);
      const int uses = static_cast<int>(std::count(next.input().begin(), next.input().end(), v));
      if (!next.domain().empty() || uses != 1 || !(binary || is_activation(nop))) break;
      c.nodes.push_back(readers[0]);
      c.pattern += "+" + nop;
      cur = &next;
    }
    if (c.nodes.size() >= 2) out.push_back(std::move(c));
  }
  return out;
}

}  // namespace tessera_dnnl
