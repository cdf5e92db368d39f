#include "passes/qdq_fusion.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ops/fused_elementwise.h"
#include "ops/node_runner.h"
#include "ops/norm_util.h"
#include "ops/qlinear_add_math.h"
#include "ops/qlinear_lookup.h"
#include "passes/dce.h"

namespace tessera {

namespace {

bool is_8bit(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

// The float values of a constant float32 tensor, or empty.
std::vector<float> floats_of(const Tensor* t) {
  if (!t || t->dtype() != DType::kFloat32) return {};
  return std::vector<float>(t->data<float>(), t->data<float>() + t->numel());
}

struct Dq {
  const Node* node = nullptr;  // the DequantizeLinear
  std::string q, scale, zero;  // its inputs ("" for an absent zero point)
  int64_t axis = 1;
};

// Whether `n` computes every output element from the same element of its operands alone (broadcasting aside), the
// same way wherever the element sits: the float elementwise ops the native fusion chains, and a few it does not.
bool pointwise(const Node& n) {
  if (!n.domain.empty() || n.outputs.size() != 1) return false;
  static constexpr std::string_view kAlso[] = {"HardSwish", "Max",      "Min",  "Elu",   "Selu",           "Celu",
                                               "Softplus",  "Softsign", "Mish", "PRelu", "ThresholdedRelu"};
  return fused_elementwise_supports(n.op_type) ||
         std::find(std::begin(kAlso), std::end(kAlso), n.op_type) != std::end(kAlso);
}

// One op of a lookup sandwich: the node and where it reads the value coming from the DequantizeLinear side.
struct Step {
  size_t node = 0;
  int input = -1;
};

// DQ(x) -> p1 -> .. -> pk -> Q (unary) or p1(DQ(x), DQ(x2)) -> .. -> pk -> Q (binary).
struct Sandwich {
  std::vector<Step> steps;  // p1 .. pk in graph order
  Dq x, x2;                 // x2.node null: the unary form
  int x2_input = -1;        // where p1 reads DQ(x2)
};

class Fuser {
 public:
  explicit Fuser(Graph& g) : g_(g) {
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      for (const std::string& o : g.nodes[i].outputs) {
        if (!o.empty()) producer_[o] = i;
      }
      for (const std::string& in : g.nodes[i].inputs) {
        if (!in.empty()) ++readers_[in];
      }
    }
    for (const std::string& o : g.outputs) ++readers_[o];
    // A nested graph reading a value of this one by name is a reader too.
    for (const Node& n : g.nodes) {
      for (const Graph* sg : nested_graphs(n)) {
        std::unordered_set<std::string> captured;
        collect_graph_captures(*sg, &captured);
        for (const std::string& c : captured) ++readers_[c];
      }
    }
  }

  int run() {
    int fused = 0;
    std::vector<bool> drop(g_.nodes.size(), false);
    std::vector<std::vector<Node>> before(g_.nodes.size());  // nodes of a fusion that go ahead of its last
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      Node& q = g_.nodes[i];
      if (q.op_type != "QuantizeLinear" || !q.domain.empty() || q.has_attr("block_size") || q.num_inputs() < 2) {
        continue;
      }
      std::vector<Node> fusedops;
      std::vector<size_t> replaced;
      if (!fuse_linear(q, &fusedops, &replaced) && !fuse_passthrough(q, &fusedops, &replaced) &&
          !fuse_lookup(q, &fusedops, &replaced) && !fuse_softmax(q, &fusedops, &replaced) &&
          !fuse_average_pool(q, &fusedops, &replaced)) {
        continue;
      }
      for (size_t r : replaced) drop[r] = true;
      // In the QuantizeLinear's place (after everything it reads), in order.
      q = std::move(fusedops.back());
      fusedops.pop_back();
      before[i] = std::move(fusedops);
      ++fused;
    }
    if (fused == 0) return 0;
    std::vector<Node> kept;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      for (Node& b : before[i]) kept.push_back(std::move(b));
      if (!drop[i]) kept.push_back(std::move(g_.nodes[i]));
    }
    g_.nodes = std::move(kept);
    return fused;
  }

 private:
  int readers(const std::string& v) const {
    auto it = readers_.find(v);
    return it == readers_.end() ? 0 : it->second;
  }

  // Q(Conv(DQ, DQ[, DQ])), Q(MatMul(DQ, DQ)) or Q(Gemm(DQ, DQ[, DQ])) as QLinearConv / QLinearMatMul.
  bool fuse_linear(const Node& q, std::vector<Node>* out, std::vector<size_t>* replaced) {
    if (q.has_attr("saturate") || q.has_attr("output_dtype") || q.num_inputs() < 3) return false;
    auto p = producer_.find(q.inputs[0]);
    if (p == producer_.end() || readers(q.inputs[0]) != 1) return false;
    const Node& op = g_.nodes[p->second];
    if (!op.domain.empty() || (op.op_type != "Conv" && op.op_type != "MatMul" && op.op_type != "Gemm")) return false;
    const Tensor* ys = g_.constant(q.inputs[1]);
    const Tensor* yz = g_.constant(q.inputs[2]);
    if (!ys || !yz || ys->numel() != 1 || yz->numel() != 1 || !is_8bit(yz->dtype()) || floats_of(ys).empty()) {
      return false;
    }
    const bool done = op.op_type == "Gemm"
                          ? rewrite_gemm(op, q, out)
                          : rewrite(op, q, out) || (op.op_type == "MatMul" && rewrite_activation_matmul(op, q, out));
    if (!done) return false;
    replaced->push_back(p->second);
    return true;
  }

  // Q(MatMul(DQ(a), DQ(b))) with b computed at run time (attention in a QDQ transformer), per tensor with zero points
  // given, as QLinearMatMul: ONNX Runtime's level 'all' fuses it so, and its integer product is exact where the float
  // MatMul of dequantized values rounds at every add (a probe: 1 of 9216 elements a step off).
  bool rewrite_activation_matmul(const Node& op, const Node& q, std::vector<Node>* out) const {
    if (op.num_inputs() != 2) return false;
    Dq a, b;
    if (!per_tensor_dq_of(op.inputs[0], &a) || !per_tensor_dq_of(op.inputs[1], &b)) return false;
    if (a.zero.empty() || b.zero.empty()) return false;
    for (const Dq* d : {&a, &b}) {
      const ValueInfo* vi = g_.info(d->q);
      if (!vi || !vi->shape.rank_known || vi->shape.rank() < 2) return false;
    }
    Node n;
    n.name = op.name;
    n.op_type = "QLinearMatMul";
    n.inputs = {a.q, a.scale, a.zero, b.q, b.scale, b.zero, q.inputs[1], q.inputs[2]};
    n.outputs = {q.outputs[0]};
    out->push_back(std::move(n));
    return true;
  }

  // A pointwise sandwich ending in `q` as one QLinearLookup whose table is the sandwich run on every input.
  bool fuse_lookup(const Node& q, std::vector<Node>* out, std::vector<size_t>* replaced) {
    const Tensor* ys = g_.constant(q.inputs[1]);
    const Tensor* yz = q.has_input(2) ? g_.constant(q.inputs[2]) : nullptr;
    if (!ys || ys->numel() != 1 || (q.has_input(2) && (!yz || yz->numel() != 1))) return false;
    Sandwich s;
    if (!find_sandwich(q, &s)) return false;
    Tensor table;
    std::optional<qadd::Form> form;
    if (!lookup_table(s, q, &table, &form)) return false;
    Node n;
    n.name = q.name;
    n.op_type = "QLinearLookup";
    n.domain = "ai.tessera";
    if (form) n.attrs[form->mul ? "qlinear_mul" : "qlinear_add"] = Attribute::Floats(qadd::form_floats(*form));
    n.inputs = {s.x.q};
    if (s.x2.node) n.inputs.push_back(s.x2.q);
    n.inputs.push_back(add_constant(q.outputs[0] + "_table", std::move(table)));
    n.outputs = {q.outputs[0]};
    out->push_back(std::move(n));
    for (const Step& st : s.steps) replaced->push_back(st.node);
    return true;
  }

  // Q(op(DQ(x))) for an op that only moves or selects values (MaxPool without indices, Reshape, Flatten, Transpose,
  // Squeeze, Unsqueeze, nearest Resize; any other inputs constant), with Q's scale and zero point DQ's: the op on x.
  // Dequantizing is increasing and Q(DQ(v)) = v, so the bytes are the sandwich's (a max pool's padding never wins
  // either way); ONNX Runtime's default level drops such pairs too, and the op then moves bytes instead of floats.
  bool fuse_passthrough(const Node& q, std::vector<Node>* out, std::vector<size_t>* replaced) {
    static constexpr std::string_view kOps[] = {"MaxPool", "Reshape",   "Flatten", "Transpose",
                                                "Squeeze", "Unsqueeze", "Resize"};
    if (q.has_attr("saturate") || q.has_attr("output_dtype") || !q.has_input(2)) return false;
    auto p = producer_.find(q.inputs[0]);
    if (p == producer_.end() || readers(q.inputs[0]) != 1) return false;
    const Node& op = g_.nodes[p->second];
    if (!op.domain.empty() || op.outputs.size() != 1 ||
        std::find(std::begin(kOps), std::end(kOps), op.op_type) == std::end(kOps)) {
      return false;
    }
    for (size_t i = 1; i < op.inputs.size(); ++i) {
      if (!op.inputs[i].empty() && !g_.constant(op.inputs[i])) return false;
    }
    // A Resize copies input values only in nearest mode, and not where tf_crop_and_resize extrapolates.
    if (op.op_type == "Resize" && (op.attr_string("mode", "nearest") != "nearest" ||
                                   op.attr_string("coordinate_transformation_mode", "") == "tf_crop_and_resize")) {
      return false;
    }
    Dq x;
    if (!per_tensor_dq_of(op.inputs[0], &x) || x.zero.empty()) return false;
    const Tensor* ys = g_.constant(q.inputs[1]);
    const Tensor* yz = g_.constant(q.inputs[2]);
    const Tensor* xz = g_.constant(x.zero);
    if (!ys || !yz || ys->numel() != 1 || yz->numel() != 1 || yz->dtype() != xz->dtype() ||
        floats_of(ys) != floats_of(g_.constant(x.scale)) || yz->as_double(0) != xz->as_double(0)) {
      return false;
    }
    Node n = op;
    n.inputs[0] = x.q;
    n.outputs = {q.outputs[0]};
    out->push_back(std::move(n));
    replaced->push_back(p->second);
    return true;
  }

  // Q(op(DQ(x))) for a one-input `op_type`, x and y of one 8-bit type, per tensor: the op's node (null if not), its
  // DequantizeLinear in `x`.
  const Node* dq_op_q(const Node& q, const char* op_type, Dq* x, size_t* op_index) const {
    if (q.has_attr("saturate") || q.has_attr("output_dtype")) return nullptr;
    const Tensor* ys = g_.constant(q.inputs[1]);
    const Tensor* yz = q.has_input(2) ? g_.constant(q.inputs[2]) : nullptr;
    if (!ys || ys->numel() != 1 || floats_of(ys).empty() || (q.has_input(2) && (!yz || yz->numel() != 1))) {
      return nullptr;
    }
    auto p = producer_.find(q.inputs[0]);
    if (p == producer_.end() || readers(q.inputs[0]) != 1) return nullptr;
    const Node& op = g_.nodes[p->second];
    if (op.op_type != op_type || !op.domain.empty() || op.num_inputs() != 1 || op.outputs.size() != 1) return nullptr;
    if (!per_tensor_dq_of(op.inputs[0], x) || dtype_of(*x) != (yz ? yz->dtype() : DType::kUInt8)) return nullptr;
    *op_index = p->second;
    return &op;
  }

  // The com.microsoft QLinear op `op_type` for Q(op(DQ(x))) (dq_op_q): X, its scale and zero point, Y's.
  static Node qlinear_node(const Node& op, const Dq& x, const Node& q, const char* op_type) {
    Node n;
    n.name = op.name;
    n.op_type = op_type;
    n.domain = "com.microsoft";
    n.inputs = {x.q, x.scale, x.zero, q.inputs[1], q.has_input(2) ? q.inputs[2] : ""};
    n.outputs = {q.outputs[0]};
    return n;
  }

  // Q(Softmax(DQ(x))) as com.microsoft QLinearSoftmax: ONNX Runtime's default level fuses it so, and that kernel's
  // arithmetic is not dequantize, softmax, quantize (ops/softmax.cc).
  bool fuse_softmax(const Node& q, std::vector<Node>* out, std::vector<size_t>* replaced) {
    Dq x;
    size_t at = 0;
    const Node* sm = dq_op_q(q, "Softmax", &x, &at);
    if (!sm) return false;
    Node n = qlinear_node(*sm, x, q, "QLinearSoftmax");
    n.attrs["axis"] = Attribute::Int(sm->attr_int("axis", g_.opset < 13 ? 1 : -1));
    n.attrs["opset"] = Attribute::Int(g_.opset);
    out->push_back(std::move(n));
    replaced->push_back(at);
    return true;
  }

  // Q(AveragePool(DQ(x))) without dilations as com.microsoft QLinearAveragePool, for the same reason (ops/pool.cc).
  bool fuse_average_pool(const Node& q, std::vector<Node>* out, std::vector<size_t>* replaced) {
    Dq x;
    size_t at = 0;
    const Node* pool = dq_op_q(q, "AveragePool", &x, &at);
    if (!pool) return false;
    for (int64_t d : pool->attr_ints("dilations")) {
      if (d != 1) return false;
    }
    Node n = qlinear_node(*pool, x, q, "QLinearAveragePool");
    for (const char* a : {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"}) {
      if (pool->has_attr(a)) n.attrs[a] = pool->attrs.at(a);
    }
    out->push_back(std::move(n));
    replaced->push_back(at);
    return true;
  }

  // A DequantizeLinear of 8-bit data that is not a constant, with a constant per-tensor scale and zero point.
  bool per_tensor_dq_of(const std::string& v, Dq* out) const {
    if (!dq_of(v, /*constant_data=*/false, out) || g_.constant(out->scale)->numel() != 1) return false;
    if (!out->zero.empty() && g_.constant(out->zero)->numel() != 1) return false;
    return is_8bit(dtype_of(*out));
  }

  // Walks from `q` up through pointwise ops, each read by the next alone, to the DequantizeLinear(s); every other
  // operand on the way must be a constant with one element, of a rank that does not widen x's.
  bool find_sandwich(const Node& q, Sandwich* s) const {
    std::string v = q.inputs[0];
    std::vector<Step> back;
    for (;;) {
      if (readers(v) != 1) return false;  // read elsewhere too, or a graph output
      auto p = producer_.find(v);
      if (p == producer_.end()) return false;
      const Node& n = g_.nodes[p->second];
      if (!pointwise(n)) return false;
      std::vector<int> live;
      for (int i = 0; i < static_cast<int>(n.inputs.size()); ++i) {
        if (n.inputs[static_cast<size_t>(i)].empty()) continue;
        const Tensor* c = g_.constant(n.inputs[static_cast<size_t>(i)]);
        if (c && c->numel() != 1) return false;
        if (!c) live.push_back(i);
      }
      if (live.empty() || live.size() > 2) return false;
      back.push_back(Step{p->second, live[0]});
      const std::string& in = n.inputs[static_cast<size_t>(live[0])];
      if (live.size() == 2) {  // the binary head: both operands dequantized, of one static shape
        const std::string& in2 = n.inputs[static_cast<size_t>(live[1])];
        if (!per_tensor_dq_of(in, &s->x) || !per_tensor_dq_of(in2, &s->x2)) return false;
        const ValueInfo* a = g_.info(s->x.q);
        const ValueInfo* b = g_.info(s->x2.q);
        if (!a || !b || !a->shape.fully_known() || !b->shape.fully_known() ||
            a->shape.concrete() != b->shape.concrete()) {
          return false;
        }
        s->x2_input = live[1];
        break;
      }
      if (per_tensor_dq_of(in, &s->x)) break;
      v = in;
    }
    s->steps.assign(back.rbegin(), back.rend());
    // A one-element operand of a higher rank than x would broadcast the result to that rank.
    const ValueInfo* xi = g_.info(s->x.q);
    const int rank = xi && xi->shape.rank_known ? xi->shape.rank() : 0;
    for (const Step& st : s->steps) {
      for (const std::string& in : g_.nodes[st.node].inputs) {
        const Tensor* c = in.empty() ? nullptr : g_.constant(in);
        if (c && c->rank() > rank) return false;
      }
    }
    return true;
  }

  // Runs `n` with the kernel the unfused graph would run, on its constants and the tensors `bound` gives by position.
  Expected<Tensor> run_node(const Node& n, const std::vector<std::pair<int, Tensor>>& bound) const {
    std::vector<Tensor> in(n.inputs.size());
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const Tensor* c = n.inputs[i].empty() ? nullptr : g_.constant(n.inputs[i]);
      if (c) in[i] = *c;
    }
    for (const auto& [pos, t] : bound) in[static_cast<size_t>(pos)] = t;
    std::vector<Tensor> out;
    TSR_ASSIGN_OR_RETURN(out, run_node_once(n, g_.opset, in));
    if (out.empty() || !out[0].defined()) return InternalError(n.describe() + ": no output");
    return std::move(out[0]);
  }

  // The sandwich's result for every input (pair), in the order of QLinearLookup's table: each node run by its own
  // kernel on a tensor holding all 256 values of x (all 65536 pairs with x2), so the table holds exactly what the
  // unfused graph computes — except where ONNX Runtime's default level computes another arithmetic for the same
  // nodes (qlinear_binary_table). False when a node cannot run here or the result is not one 8-bit value per input.
  bool lookup_table(const Sandwich& s, const Node& q, Tensor* table, std::optional<qadd::Form>* form) const {
    qadd::Form f;
    if (qlinear_binary_table(s, q, table, &f)) {
      *form = f;
      return true;
    }
    const bool binary = s.x2.node != nullptr;
    const int64_t n = binary ? kLookupBinaryEntries : kLookupUnaryEntries;
    auto probe = [&](DType t, int shift) {
      Tensor p(t, {n});
      auto* b = static_cast<uint8_t*>(p.raw());
      for (int64_t k = 0; k < n; ++k) b[k] = lookup_byte_of_index(t, static_cast<int>((k >> shift) & 255));
      return p;
    };
    auto x = run_node(*s.x.node, {{0, probe(dtype_of(s.x), binary ? 8 : 0)}});
    if (!x.ok()) return false;
    std::vector<std::pair<int, Tensor>> bound = {{s.steps[0].input, *x}};
    if (binary) {
      auto x2 = run_node(*s.x2.node, {{0, probe(dtype_of(s.x2), 0)}});
      if (!x2.ok()) return false;
      bound.emplace_back(s.x2_input, *x2);
    }
    Tensor v;
    for (const Step& st : s.steps) {
      if (v.defined()) bound = {{st.input, v}};
      auto r = run_node(g_.nodes[st.node], bound);
      if (!r.ok()) return false;
      v = *r;
    }
    auto y = run_node(q, {{0, v}});
    if (!y.ok() || !is_8bit(y->dtype()) || y->numel() != n) return false;
    *table = y->reshaped({n});
    return true;
  }

  // DQ(a) + DQ(b) -> Q or DQ(a) * DQ(b) -> Q, all three of one 8-bit type, per tensor: ONNX Runtime's default level
  // (QDQ fusion) runs them as com.microsoft QLinearAdd / QLinearMul, whose arithmetic (qlinear_add_math.h) differs
  // from dequantize, add or multiply, quantize by a step at some pairs (a Mul at 247 of 65536 at scales 0.03, 0.05 ->
  // 0.04). A Relu between the Add and a Q whose zero point is its type's minimum is dropped by ONNX Runtime first (it
  // changes nothing there), so that form too. The table holds the form at every pair; *form is it, for kernels that
  // compute it instead.
  bool qlinear_binary_table(const Sandwich& s, const Node& q, Tensor* table, qadd::Form* form) const {
    if (!s.x2.node || s.steps.empty() || s.steps.size() > 2) return false;
    const Node& op = g_.nodes[s.steps[0].node];
    const bool mul = op.op_type == "Mul";
    if ((op.op_type != "Add" && !mul) || op.num_inputs() != 2 || !q.has_input(2)) return false;
    const Tensor* yz = g_.constant(q.inputs[2]);
    const DType t = yz->dtype();
    if (!is_8bit(t) || dtype_of(s.x) != t || dtype_of(s.x2) != t || s.x.zero.empty() || s.x2.zero.empty()) return false;
    const int zy = static_cast<int>(yz->as_double(0));
    if (s.steps.size() == 2 &&
        (mul || g_.nodes[s.steps[1].node].op_type != "Relu" || zy != (t == DType::kInt8 ? -128 : 0))) {
      return false;
    }
    const float sa = floats_of(g_.constant(s.x.scale))[0], sb = floats_of(g_.constant(s.x2.scale))[0];
    const std::vector<float> sy = floats_of(g_.constant(q.inputs[1]));
    if (sy.size() != 1) return false;
    const int za = static_cast<int>(g_.constant(s.x.zero)->as_double(0));
    const int zb = static_cast<int>(g_.constant(s.x2.zero)->as_double(0));
    // x is the op's first input (A), x2 its second (B): find_sandwich takes the live operands in order.
    qadd::Form f;
    if (mul) {
      f.mul = true;
      f.ra = normk::mul_unfused(sa, sb) / sy[0];  // MLAS: ScaleA * ScaleB / ScaleC, in float
      f.za = static_cast<float>(za);
      f.zb = static_cast<float>(zb);
      f.fixed = static_cast<float>(zy);
    } else {
      f.ra = sa / sy[0];
      f.rb = sb / sy[0];
      f.fixed = static_cast<float>(zy) -
                std::fma(f.ra, static_cast<float>(za), normk::mul_unfused(f.rb, static_cast<float>(zb)));
    }
    if (!qadd::usable(f)) return false;
    Tensor out(t, {kLookupBinaryEntries});
    qadd::fill_table(f, t == DType::kInt8, static_cast<uint8_t*>(out.raw()));
    *table = std::move(out);
    *form = f;
    return true;
  }

  // The DequantizeLinear producing `v` with constant scale and zero point (the data may be anything), or none.
  bool dq_of(const std::string& v, bool constant_data, Dq* out) const {
    auto p = producer_.find(v);
    if (p == producer_.end()) return false;
    const Node& n = g_.nodes[p->second];
    if (n.op_type != "DequantizeLinear" || !n.domain.empty() || n.has_attr("block_size") || n.num_inputs() < 2) {
      return false;
    }
    const Tensor* data = g_.constant(n.inputs[0]);
    if (constant_data != (data != nullptr)) return false;
    if (!g_.constant(n.inputs[1]) || floats_of(g_.constant(n.inputs[1])).empty()) return false;
    if (n.has_input(2) && !g_.constant(n.inputs[2])) return false;
    out->node = &n;
    out->q = n.inputs[0];
    out->scale = n.inputs[1];
    out->zero = n.has_input(2) ? n.inputs[2] : "";
    out->axis = n.attr_int("axis", 1);
    return true;
  }

  // The dtype of a quantized value: its constant's, its zero point's, else its type info.
  DType dtype_of(const Dq& d) const {
    if (const Tensor* t = g_.constant(d.q)) return t->dtype();
    if (!d.zero.empty()) return g_.constant(d.zero)->dtype();
    const ValueInfo* vi = g_.info(d.q);
    return vi ? vi->dtype : DType::kUndefined;
  }

  // A bias given as DQ(int32 constant) at scale x_scale * w_scale (per tensor or per channel) with zero point 0, of
  // `channels` elements: QLinearConv's own B, its name in *bias (a 1-D copy where the constant has another rank).
  bool int32_bias(const std::string& v, const Tensor* xs, const Tensor* ws, int64_t channels, std::string* bias) {
    Dq b;
    if (!dq_of(v, true, &b)) return false;
    const Tensor* bq = g_.constant(b.q);
    const std::vector<float> bs = floats_of(g_.constant(b.scale)), wsv = floats_of(ws);
    if (bq->dtype() != DType::kInt32 || bq->numel() != channels) return false;
    if (!b.zero.empty()) {
      const Tensor* bz = g_.constant(b.zero);
      for (int64_t k = 0; k < bz->numel(); ++k) {
        if (bz->as_double(k) != 0) return false;
      }
    }
    if (bs.size() != 1 && static_cast<int64_t>(bs.size()) != channels) return false;
    const float xsv = floats_of(xs)[0];
    for (int64_t c = 0; c < channels; ++c) {
      const double want = static_cast<double>(xsv) * wsv[wsv.size() == 1 ? 0 : static_cast<size_t>(c)];
      const double got = bs[bs.size() == 1 ? 0 : static_cast<size_t>(c)];
      if (!(std::fabs(got - want) <= 1e-6 * std::fabs(want))) return false;
    }
    *bias = b.q;
    if (bq->rank() != 1) *bias = add_constant(b.q + "_1d", bq->reshaped({channels}));
    return true;
  }

  // The weights' zero point, given or made: the QLinear ops take it as an input, zeros of the weights' type (one per
  // scale) where the DequantizeLinear has none.
  std::string weight_zero_point(const Dq& w) {
    if (!w.zero.empty()) return w.zero;
    const int64_t n = g_.constant(w.scale)->numel();
    Tensor z(g_.constant(w.q)->dtype(), n == 1 ? Dims{} : Dims{n});
    std::memset(z.raw(), 0, z.nbytes());
    return add_constant(w.q + "_zero_point", std::move(z));
  }

  std::string add_constant(const std::string& base, Tensor t) {
    const std::string name = g_.unique_name(base);
    g_.values[name] = ValueInfo{t.dtype(), Shape::FromDims(t.dims())};
    g_.constants[name] = std::move(t);
    return name;
  }

  // Q(Gemm(DQ(x), DQ(w)[, DQ(bias)])) with x [N, K], alpha 1, beta 1, no transA, as QLinearConv 1x1 over x
  // reshaped to [N, K, 1, 1] and its result reshaped back: the same integer sum plus bias, requantized once, as ONNX
  // Runtime's QGemm computes it (its default level fuses such a Gemm so).
  bool rewrite_gemm(const Node& op, const Node& q, std::vector<Node>* out) {
    if (op.num_inputs() < 2 || op.attr_int("transA", 0) != 0 || op.attr_float("alpha", 1.f) != 1.f ||
        (op.has_input(2) && op.attr_float("beta", 1.f) != 1.f)) {
      return false;
    }
    const bool trans_b = op.attr_int("transB", 0) != 0;
    Dq x, w;
    if (!per_tensor_dq_of(op.inputs[0], &x) || x.zero.empty() || !dq_of(op.inputs[1], /*constant_data=*/true, &w)) {
      return false;
    }
    const ValueInfo* xi = g_.info(x.q);
    const Tensor* wq = g_.constant(w.q);
    const Tensor* ws = g_.constant(w.scale);
    if (!xi || !xi->shape.fully_known() || xi->shape.rank() != 2 || !is_8bit(wq->dtype()) || wq->rank() != 2) {
      return false;
    }
    const Dims xd = xi->shape.concrete();
    const int64_t k = trans_b ? wq->dim(1) : wq->dim(0), m = trans_b ? wq->dim(0) : wq->dim(1);
    if (xd[1] != k) return false;
    if (ws->numel() != 1) {  // per output channel: the weights' M axis
      const int64_t axis = w.axis < 0 ? w.axis + 2 : w.axis;
      if (ws->numel() != m || ws->rank() != 1 || axis != (trans_b ? 0 : 1)) return false;
    }
    if (!w.zero.empty() && g_.constant(w.zero)->numel() != ws->numel()) return false;
    std::string bias;
    if (op.has_input(2) && !int32_bias(op.inputs[2], g_.constant(x.scale), ws, m, &bias)) return false;
    // The weights as [M, K, 1, 1].
    Tensor w4(wq->dtype(), {m, k, 1, 1});
    const auto* src = static_cast<const uint8_t*>(wq->raw());
    auto* dst = static_cast<uint8_t*>(w4.raw());
    for (int64_t o = 0; o < m; ++o) {
      for (int64_t i = 0; i < k; ++i) dst[o * k + i] = src[trans_b ? o * k + i : i * m + o];
    }
    const std::string wz = weight_zero_point(w);
    const std::string wname = add_constant(w.q + "_1x1", std::move(w4));
    auto shape_of = [&](const std::string& base, const Dims& d) {
      Tensor t(DType::kInt64, {static_cast<int64_t>(d.size())});
      for (size_t i = 0; i < d.size(); ++i) t.data<int64_t>()[i] = d[i];
      return add_constant(base, std::move(t));
    };
    const ValueInfo* yi = g_.info(q.outputs[0]);
    const DType yt = yi ? yi->dtype : g_.constant(q.inputs[2])->dtype();
    const std::string x4 = g_.unique_name(x.q + "_nchw"), y4 = g_.unique_name(q.outputs[0] + "_nchw");
    g_.values[x4] = ValueInfo{dtype_of(x), Shape::FromDims({xd[0], k, 1, 1})};
    g_.values[y4] = ValueInfo{yt, Shape::FromDims({xd[0], m, 1, 1})};
    Node in;
    in.name = g_.unique_name(op.name + "_to_nchw");
    in.op_type = "Reshape";
    in.inputs = {x.q, shape_of(x4 + "_shape", {xd[0], k, 1, 1})};
    in.outputs = {x4};
    Node conv;
    conv.name = op.name;
    conv.op_type = "QLinearConv";
    conv.inputs = {x4, x.scale, x.zero, wname, w.scale, wz, q.inputs[1], q.inputs[2]};
    if (!bias.empty()) conv.inputs.push_back(bias);
    conv.outputs = {y4};
    Node back;
    back.name = g_.unique_name(op.name + "_from_nchw");
    back.op_type = "Reshape";
    back.inputs = {y4, shape_of(y4 + "_shape", {xd[0], m})};
    back.outputs = {q.outputs[0]};
    out->push_back(std::move(in));
    out->push_back(std::move(conv));
    out->push_back(std::move(back));
    return true;
  }

  bool rewrite(const Node& op, const Node& q, std::vector<Node>* out) {
    const bool conv = op.op_type == "Conv";
    if (op.num_inputs() < 2 || (!conv && op.num_inputs() != 2)) return false;
    Dq x, w;
    if (!dq_of(op.inputs[0], /*constant_data=*/false, &x) || !dq_of(op.inputs[1], /*constant_data=*/true, &w)) {
      return false;
    }
    // The activation: per tensor, with its zero point given (QLinear ops need it).
    const Tensor* xs = g_.constant(x.scale);
    if (xs->numel() != 1 || x.zero.empty() || g_.constant(x.zero)->numel() != 1 || !is_8bit(dtype_of(x))) return false;
    // The weights: 8-bit, per tensor or per output channel (Conv: axis 0; MatMul: the last axis of a 2-D B).
    const Tensor* wq = g_.constant(w.q);
    const Tensor* ws = g_.constant(w.scale);
    if (!is_8bit(wq->dtype()) || wq->rank() < 2) return false;
    const int64_t channels = conv ? wq->dim(0) : wq->dim(wq->rank() - 1);
    if (ws->numel() != 1) {
      const int64_t axis = w.axis < 0 ? w.axis + wq->rank() : w.axis;
      if (ws->numel() != channels || ws->rank() != 1 || (conv ? axis != 0 : (wq->rank() != 2 || axis != 1))) {
        return false;
      }
    }
    if (!w.zero.empty() && g_.constant(w.zero)->numel() != ws->numel()) return false;
    const std::string wz = weight_zero_point(w);
    Node n;
    n.name = op.name;
    n.domain = "";
    n.outputs = {q.outputs[0]};
    if (conv) {
      n.op_type = "QLinearConv";
      n.attrs = op.attrs;
      n.inputs = {x.q, x.scale, x.zero, w.q, w.scale, wz, q.inputs[1], q.inputs[2]};
      if (op.has_input(2)) {
        std::string bias;
        if (!int32_bias(op.inputs[2], xs, ws, channels, &bias)) return false;
        n.inputs.push_back(bias);
      }
    } else {
      n.op_type = "QLinearMatMul";
      n.inputs = {x.q, x.scale, x.zero, w.q, w.scale, wz, q.inputs[1], q.inputs[2]};
    }
    out->push_back(std::move(n));
    return true;
  }

  Graph& g_;
  std::unordered_map<std::string, size_t> producer_;
  std::unordered_map<std::string, int> readers_;
};

}  // namespace

Expected<int> fuse_qdq(Graph& g) { return Fuser(g).run(); }

}  // namespace tessera
