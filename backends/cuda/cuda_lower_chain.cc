// Elementwise runs as one launch_chain kernel, and the memory plan of a
// lowered region (see cuda_lower.h).
//
// A chain starts from its first node's input 0 (operand 0) and applies each
// node of the run to the running value, reading the other input of a binary
// node as an operand. Every operand is read through its own strides in the
// index space of the run's LAST output: each intermediate's shape broadcasts
// to it (broadcasting only grows shapes), so element i of the result is the
// run computed on the broadcast elements of its operands.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cuda_lower.h"

namespace tessera_cuda {

void broadcast_strides(const std::vector<int64_t>& vd, const std::vector<int64_t>& od, int64_t* out) {
  if (vd.size() > od.size()) refuse("operand " + dims_str(vd) + " does not broadcast to " + dims_str(od));
  std::vector<int64_t> vs = contiguous_strides(vd);
  size_t lead = od.size() - vd.size();
  for (size_t k = 0; k < od.size(); ++k) {
    if (k < lead) {
      out[k] = 0;
      continue;
    }
    int64_t v = vd[k - lead];
    if (v == od[k] && v != 1)
      out[k] = vs[k - lead];
    else if (v == 1)
      out[k] = 0;
    else
      refuse("operand " + dims_str(vd) + " does not broadcast to " + dims_str(od));
  }
}

void Lowering::chain_node(int i, int running_input, Step& s, std::vector<int>& operands) {
  const onnx::NodeProto& n = m_.node(i);
  const std::string& op = n.op_type();
  Chain& c = s.chain;
  if (n.output_size() < 1) refuse("no output");
  value(n.output(0));  // checks its type
  auto add_operand = [&](const std::string& name) {
    int v = value(name);
    for (size_t k = 1; k < operands.size(); ++k) {
      if (operands[k] == v) return static_cast<int32_t>(k);
    }
    if (operands.size() >= static_cast<size_t>(kMaxOperands)) refuse("more than 8 operands in one chain");
    operands.push_back(v);
    return static_cast<int32_t>(operands.size() - 1);
  };
  auto push = [&](int32_t code, int32_t operand = -1, int32_t swap = 0, float alpha = 0, float beta = 0) {
    if (c.num_ops >= kMaxChainOps) refuse("more than 16 ops in one chain");
    ChainOp& o = c.ops[c.num_ops++];
    o.code = code;
    o.operand = operand;
    o.swap = swap;
    o.alpha = alpha;
    o.beta = beta;
  };
  if (running_input < 0) {
    if (n.input_size() < 1) refuse("no input");
    operands.push_back(value(n.input(0)));
    running_input = 0;
  }
  int32_t bin = binary_op_code(op);
  if (bin >= 0) {
    if (n.input_size() != 2) refuse(op + " with " + std::to_string(n.input_size()) + " inputs");
    if (op == "PRelu" && running_input != 0) refuse("PRelu slope as the running value");
    int32_t k = add_operand(n.input(1 - running_input));
    push(bin, k, running_input == 1 ? 1 : 0);
    return;
  }
  if (n.input_size() > 1 && op != "Clip" && op != "BatchNormalization") refuse(op + " with extra inputs");
  if (op == "Gelu") {
    std::string approx = attr_string(n, "approximate", "none");
    if (approx == "none")
      push(kGeluErf);
    else if (approx == "tanh")
      push(kGeluTanh);
    else
      refuse("Gelu approximate=" + approx);
  } else if (op == "LeakyRelu") {
    push(kLeakyRelu, -1, 0, attr_float(n, "alpha", 0.01f));
  } else if (op == "HardSigmoid") {
    push(kHardSigmoid, -1, 0, attr_float(n, "alpha", 0.2f), attr_float(n, "beta", 0.5f));
  } else if (op == "Elu") {
    push(kElu, -1, 0, attr_float(n, "alpha", 1.0f));
  } else if (op == "Selu") {
    push(kSelu, -1, 0, attr_float(n, "alpha", 1.67326319217681884765625f),
         attr_float(n, "gamma", 1.05070102214813232421875f));
  } else if (op == "Clip") {
    float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
    if (m_.opset() < 11) {
      lo = attr_float(n, "min", lo);
      hi = attr_float(n, "max", hi);
    } else {
      if (n.input_size() >= 2 && !n.input(1).empty()) {
        std::vector<float> v = const_floats(n.input(1), "Clip min");
        if (v.size() != 1) refuse("Clip min is not a scalar");
        lo = v[0];
      }
      if (n.input_size() >= 3 && !n.input(2).empty()) {
        std::vector<float> v = const_floats(n.input(2), "Clip max");
        if (v.size() != 1) refuse("Clip max is not a scalar");
        hi = v[0];
      }
    }
    push(kClip, -1, 0, lo, hi);
  } else if (op == "BatchNormalization") {
    if (n.input_size() != 5) refuse("BatchNormalization needs 5 inputs");
    if (attr_int(n, "training_mode", 0) != 0) refuse("training_mode");
    for (int k = 1; k < n.output_size(); ++k) {
      if (!n.output(k).empty()) refuse("BatchNormalization training outputs");
    }
    if (running_input != 0) refuse("BatchNormalization parameters as the running value");
    const std::vector<int64_t> xd = m_.type(n.input(0)).dims;
    if (xd.size() < 2) refuse("BatchNormalization of rank < 2");
    int64_t ch = xd[1];
    for (int k = 1; k < 5; ++k) {
      if (!m_.is_initializer(n.input(k))) refuse("BatchNormalization parameters not constant");
      if (numel(m_.type(n.input(k)).dims) != ch) refuse("BatchNormalization parameter length");
    }
    std::vector<int64_t> pd(xd.size() - 1, 1);  // [C, 1, ...]: broadcasts along axis 1
    pd[0] = ch;
    DeviceConst scale;
    scale.kind = DeviceConst::kBnScale;
    scale.node = i;
    DeviceConst shift = scale;
    shift.kind = DeviceConst::kBnShift;
    if (operands.size() + 2 > static_cast<size_t>(kMaxOperands)) refuse("more than 8 operands in one chain");
    operands.push_back(add_const(scale, pd, "bn_scale:" + n.name() + ":" + n.output(0)));
    push(kMul, static_cast<int32_t>(operands.size() - 1));
    operands.push_back(add_const(shift, pd, "bn_shift:" + n.name() + ":" + n.output(0)));
    push(kAdd, static_cast<int32_t>(operands.size() - 1));
  } else {
    int32_t it = unary_op_code(op);
    if (it < 0) refuse("op " + op + " not supported");
    push(it);
  }
}

void Lowering::lower_chain(const std::vector<int>& nodes) {
  Step& s = new_step(StepKind::kChain, nodes, nodes.size() > 1 ? "fused chain" : "chain");
  std::vector<int> operands;
  std::string running;
  for (size_t k = 0; k < nodes.size(); ++k) {
    const onnx::NodeProto& n = m_.node(nodes[k]);
    int in = -1;
    if (k > 0) {
      for (int j = 0; j < n.input_size(); ++j) {
        if (n.input(j) == running) in = j;
      }
      if (in < 0) refuse("broken chain");
    }
    // p_.steps may not grow inside chain_node (no new steps), so `s` stays valid.
    chain_node(nodes[k], in, s, operands);
    running = n.output(0);
  }
  int out = value(running);
  const std::vector<int64_t> od = p_.values[out].dims;
  Chain& c = s.chain;
  c.rank = static_cast<int32_t>(od.size());
  for (int k = 0; k < c.rank; ++k) c.dims[k] = od[k];
  c.num_operands = static_cast<int32_t>(operands.size());
  for (size_t k = 0; k < operands.size(); ++k) {
    s.chain_operands[k] = operands[k];
    broadcast_strides(p_.values[operands[k]].dims, od, c.strides[k]);
  }
  s.out = out;
  s.flops = static_cast<double>(numel(od)) * c.num_ops;
  s.bytes = 4.0 * numel(od);
  for (int v : operands) s.bytes += static_cast<double>(p_.values[v].bytes());
}

// ---- memory plan --------------------------------------------------------------------

void step_io(const Step& s, std::vector<int>& reads, std::vector<int>& writes) {
  reads.clear();
  writes.clear();
  auto r = [&](int v) {
    if (v >= 0) reads.push_back(v);
  };
  auto w = [&](int v) {
    if (v >= 0) writes.push_back(v);
  };
  switch (s.kind) {
    case StepKind::kGemm:
      r(s.gemm.a), r(s.gemm.b), r(s.gemm.bias), r(s.gemm.c), w(s.gemm.d);
      break;
    case StepKind::kConv:
      r(s.conv.x), r(s.conv.w_value), r(s.conv.bias), r(s.conv.z), w(s.conv.y);
      break;
    case StepKind::kChain:
      for (int k = 0; k < s.chain.num_operands; ++k) r(s.chain_operands[k]);
      w(s.out);
      break;
    case StepKind::kStrided:
      for (const CopyPiece& p : s.pieces) r(p.src), w(p.dst);
      if (s.fill) w(s.out);
      break;
    default:
      r(s.in), r(s.aux), r(s.aux2), w(s.out);
      break;
  }
}

// Temporaries in one scratch block: each lives from the step that first
// writes it to the last step that reads it (an alias keeps its root alive),
// placed first fit among the blocks live at that time, 256-byte aligned.
void Lowering::plan_memory() {
  const size_t nv = p_.values.size();
  auto root = [&](int v) {
    for (int guard = 0; p_.values[v].home == Home::kAlias && guard < 1 << 20; ++guard) v = p_.values[v].index;
    return v;
  };
  std::vector<int> first(nv, -1), last(nv, -1);
  std::vector<int> reads, writes;
  for (size_t t = 0; t < p_.steps.size(); ++t) {
    step_io(p_.steps[t], reads, writes);
    reads.insert(reads.end(), writes.begin(), writes.end());
    for (int v : reads) {
      int r = root(v);
      if (p_.values[r].home != Home::kTemp) continue;
      if (first[r] < 0) first[r] = static_cast<int>(t);
      last[r] = std::max(last[r], static_cast<int>(t));
    }
  }
  // Aliases used after their root's last step keep it alive: a read of an alias counts for the root above.
  struct Block {
    int64_t offset, size;
    int value;
  };
  std::vector<Block> live;
  int64_t top = 0;
  for (size_t t = 0; t < p_.steps.size(); ++t) {
    live.erase(
        std::remove_if(live.begin(), live.end(), [&](const Block& b) { return last[b.value] < static_cast<int>(t); }),
        live.end());
    for (size_t v = 0; v < nv; ++v) {
      if (first[v] != static_cast<int>(t)) continue;
      int64_t size = (p_.values[v].bytes() + 255) / 256 * 256;
      std::sort(live.begin(), live.end(), [](const Block& a, const Block& b) { return a.offset < b.offset; });
      int64_t at = 0;
      for (const Block& b : live) {
        if (b.offset - at >= size) break;
        at = std::max(at, b.offset + b.size);
      }
      p_.values[v].offset = at;
      live.push_back(Block{at, size, static_cast<int>(v)});
      top = std::max(top, at + size);
    }
  }
  p_.scratch_bytes = top;
}

}  // namespace tessera_cuda
