#include "passes/qdq_fusion.h"

#include <cmath>
#include <cstring>
#include <unordered_map>
#include <vector>

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
  }

  int run() {
    int fused = 0;
    std::vector<bool> drop(g_.nodes.size(), false);
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      Node& q = g_.nodes[i];
      if (q.op_type != "QuantizeLinear" || !q.domain.empty() || q.has_attr("block_size") || q.has_attr("saturate") ||
          q.has_attr("output_dtype") || q.num_inputs() < 3) {
        continue;
      }
      auto p = producer_.find(q.inputs[0]);
      if (p == producer_.end() || readers_[q.inputs[0]] != 1) continue;
      Node& op = g_.nodes[p->second];
      if (!op.domain.empty() || (op.op_type != "Conv" && op.op_type != "MatMul")) continue;
      const Tensor* ys = g_.constant(q.inputs[1]);
      const Tensor* yz = g_.constant(q.inputs[2]);
      if (!ys || !yz || ys->numel() != 1 || yz->numel() != 1 || !is_8bit(yz->dtype()) || floats_of(ys).empty()) continue;
      Node fusedop;
      if (!rewrite(op, q, &fusedop)) continue;
      drop[p->second] = true;
      q = std::move(fusedop);  // in the QuantizeLinear's place: after everything it reads
      ++fused;
    }
    if (fused == 0) return 0;
    std::vector<Node> kept;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (!drop[i]) kept.push_back(std::move(g_.nodes[i]));
    }
    g_.nodes = std::move(kept);
    return fused;
  }

 private:
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

  bool rewrite(const Node& op, const Node& q, Node* out) {
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
    std::string wz = w.zero;
    if (wz.empty()) {  // the QLinear ops take the weights' zero point as an input: zeros of their type
      wz = g_.unique_name(w.q + "_zero_point");
      Tensor z(wq->dtype(), ws->numel() == 1 ? Dims{} : Dims{ws->numel()});
      std::memset(z.raw(), 0, z.nbytes());
      g_.constants[wz] = z;
      g_.values[wz] = ValueInfo{wq->dtype(), Shape::FromDims(z.dims())};
    }
    Node n;
    n.name = op.name;
    n.domain = "";
    n.outputs = {q.outputs[0]};
    if (conv) {
      n.op_type = "QLinearConv";
      n.attrs = op.attrs;
      n.inputs = {x.q, x.scale, x.zero, w.q, w.scale, wz, q.inputs[1], q.inputs[2]};
      if (op.has_input(2)) {
        // A bias stored as int32 at scale x_scale * w_scale with zero point 0: QLinearConv's own B.
        Dq b;
        if (!dq_of(op.inputs[2], true, &b)) return false;
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
        n.inputs.push_back(b.q);
      }
    } else {
      n.op_type = "QLinearMatMul";
      n.inputs = {x.q, x.scale, x.zero, w.q, w.scale, wz, q.inputs[1], q.inputs[2]};
    }
    *out = std::move(n);
    return true;
  }

  Graph& g_;
  std::unordered_map<std::string, size_t> producer_;
  std::unordered_map<std::string, int> readers_;
};

}  // namespace

Expected<int> fuse_qdq(Graph& g) { return Fuser(g).run(); }

}  // namespace tessera
