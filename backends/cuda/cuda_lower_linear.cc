// GEMMs (MatMul, Gemm: cuBLASLt, with their fused bias / activation
// epilogues) and convolutions (Conv, ConvTranspose: cuDNN, with Conv's fused
// bias + residual + Relu) of a region. See cuda_lower.h.
#include <algorithm>

#include "cuda_lower.h"

namespace tessera_cuda {

// ---- GEMMs -----------------------------------------------------------------------

void Lowering::lower_matmul(int i, const GemmFusion& f) {
  const onnx::NodeProto& n = m_.node(i);
  if (n.input_size() != 2 || n.output_size() != 1) refuse("MatMul needs 2 inputs and 1 output");
  int a = value(n.input(0)), b = value(n.input(1));
  std::vector<int64_t> da = p_.values[a].dims, db = p_.values[b].dims;
  std::string out = f.act >= 0 ? m_.node(f.act).output(0) : f.add >= 0 ? m_.node(f.add).output(0) : n.output(0);
  int d = value(out);
  if (da.empty() || db.empty()) refuse("MatMul of a scalar");
  int64_t m = da.size() == 1 ? 1 : da[da.size() - 2], k = da.back();
  int64_t k2 = db.size() == 1 ? db[0] : db[db.size() - 2], nn = db.size() == 1 ? 1 : db.back();
  if (k != k2) refuse("MatMul inner dims " + dims_str(da) + " x " + dims_str(db));
  std::vector<int64_t> ba(da.begin(), da.end() - std::min<ptrdiff_t>(2, static_cast<ptrdiff_t>(da.size())));
  std::vector<int64_t> bb(db.begin(), db.end() - std::min<ptrdiff_t>(2, static_cast<ptrdiff_t>(db.size())));
  GemmParams g;
  g.k = k;
  g.n = nn;
  if (numel(bb) == 1) {
    g.m = numel(ba) * m;  // B shared by every batch: one GEMM over all rows of A
  } else {
    while (ba.size() < bb.size()) ba.insert(ba.begin(), 1);
    while (bb.size() < ba.size()) bb.insert(bb.begin(), 1);
    if (ba != bb) refuse("MatMul batch broadcast " + dims_str(da) + " x " + dims_str(db) + " not supported");
    g.m = m;
    g.batch = numel(ba);
    g.stride_a = m * k;
    g.stride_b = k * nn;
  }
  if (numel(p_.values[d].dims) != g.batch * g.m * g.n) refuse("MatMul output shape " + dims_str(p_.values[d].dims));
  g.a = a;
  g.b = b;
  g.d = d;
  g.epilogue = f.epilogue;
  if (f.add >= 0) {
    g.bias = value(f.bias);
    if (numel(p_.values[g.bias].dims) != g.n) refuse("bias length");
  }
  std::vector<int> nodes{i};
  for (int x : {f.add, f.act}) {
    if (x >= 0) nodes.push_back(x);
  }
  Step& s = new_step(StepKind::kGemm, nodes, "cublasLt matmul");
  s.gemm = g;
  s.flops = 2.0 * g.batch * g.m * g.n * g.k;
  s.bytes = 4.0 * (numel(da) + numel(db) + g.batch * g.m * g.n);
}

void Lowering::lower_gemm(int i, const GemmFusion& f) {
  const onnx::NodeProto& n = m_.node(i);
  if (n.input_size() < 2 || n.output_size() != 1) refuse("Gemm needs 2 or 3 inputs and 1 output");
  int a = value(n.input(0)), b = value(n.input(1));
  std::vector<int64_t> da = p_.values[a].dims, db = p_.values[b].dims;
  if (da.size() != 2 || db.size() != 2)
    refuse("Gemm of rank " + std::to_string(da.size()) + " and " + std::to_string(db.size()));
  int d = value(f.act >= 0 ? m_.node(f.act).output(0) : n.output(0));
  GemmParams g;
  g.trans_a = attr_int(n, "transA", 0) != 0;
  g.trans_b = attr_int(n, "transB", 0) != 0;
  g.alpha = attr_float(n, "alpha", 1.0f);
  float beta = attr_float(n, "beta", 1.0f);
  g.m = g.trans_a ? da[1] : da[0];
  g.k = g.trans_a ? da[0] : da[1];
  g.n = g.trans_b ? db[0] : db[1];
  if ((g.trans_b ? db[1] : db[0]) != g.k) refuse("Gemm inner dims " + dims_str(da) + " x " + dims_str(db));
  if (p_.values[d].dims != std::vector<int64_t>{g.m, g.n}) refuse("Gemm output shape");
  g.a = a;
  g.b = b;
  g.d = d;
  bool relu = f.act >= 0;
  g.epilogue = relu ? Epilogue::kRelu : Epilogue::kNone;
  if (n.input_size() >= 3 && !n.input(2).empty() && beta != 0.0f) {
    const std::string& cname = n.input(2);
    int c = value(cname);
    std::vector<int64_t> dc = p_.values[c].dims;
    bool vector = numel(dc) == g.n && !dc.empty() && dc.back() == g.n && dc.size() <= 2;
    if (m_.is_initializer(cname) && vector) {
      // C is a bias: the epilogue adds it (scaled by beta once, at load).
      DeviceConst dc_const;
      dc_const.kind = beta == 1.0f ? DeviceConst::kInitializer : DeviceConst::kScaled;
      dc_const.name = cname;
      dc_const.factor = beta;
      g.bias = beta == 1.0f ? c : add_const(dc_const, {g.n}, cname + "*" + std::to_string(beta));
      g.epilogue = relu ? Epilogue::kReluBias : Epilogue::kBias;
    } else {
      // C broadcast into D first; the GEMM accumulates beta * D.
      if (dc.size() > 2) refuse("Gemm C of rank " + std::to_string(dc.size()));
      while (dc.size() < 2) dc.insert(dc.begin(), 1);
      if ((dc[0] != 1 && dc[0] != g.m) || (dc[1] != 1 && dc[1] != g.n)) refuse("Gemm C does not broadcast");
      g.c = c;
      g.beta = beta;
      StridedCopy& cc = g.c_copy;
      cc.rank = 2;
      cc.dims[0] = g.m;
      cc.dims[1] = g.n;
      cc.src_strides[0] = dc[0] == 1 ? 0 : dc[1];
      cc.src_strides[1] = dc[1] == 1 ? 0 : 1;
      cc.dst_strides[0] = g.n;
      cc.dst_strides[1] = 1;
    }
  }
  std::vector<int> nodes{i};
  if (relu) nodes.push_back(f.act);
  Step& s = new_step(StepKind::kGemm, nodes, "cublasLt gemm");
  s.gemm = g;
  s.flops = 2.0 * g.m * g.n * g.k;
  s.bytes = 4.0 * (g.m * g.k + g.k * g.n + 2 * g.m * g.n);
}

// ---- convolutions ------------------------------------------------------------------

void Lowering::add_bias_chain(int y, int bias, const std::vector<int>& nodes) {
  Step& s = new_step(StepKind::kChain, nodes, "bias");
  const std::vector<int64_t>& od = p_.values[y].dims;
  Chain& c = s.chain;
  c.rank = static_cast<int32_t>(od.size());
  std::vector<int64_t> st = contiguous_strides(od);
  for (int k = 0; k < c.rank; ++k) {
    c.dims[k] = od[k];
    c.strides[0][k] = st[k];
    c.strides[1][k] = k == 1 ? 1 : 0;
  }
  c.num_operands = 2;
  s.chain_operands[0] = y;
  s.chain_operands[1] = bias;
  c.num_ops = 1;
  c.ops[0].code = kAdd;
  c.ops[0].operand = 1;
  s.out = y;
  s.bytes = 8.0 * numel(od);
  s.flops = static_cast<double>(numel(od));
}

namespace {

// n, c, h, w from the NCHW input, oh, ow from the output, kh, kw from the weights' last two dims.
void set_shapes(ConvParams& c, const std::vector<int64_t>& xd, const std::vector<int64_t>& wd,
                const std::vector<int64_t>& od) {
  set_nchw(c, xd, od);
  c.kh = wd[2];
  c.kw = wd[3];
}

// The begin pads of `pads` ([begin_h, begin_w, ...]), strides and dilations.
void set_window(ConvParams& c, const std::vector<int64_t>& pads, const std::vector<int64_t>& st,
                const std::vector<int64_t>& dl) {
  c.pad_h = pads[0];
  c.pad_w = pads[1];
  c.stride_h = st[0];
  c.stride_w = st[1];
  c.dil_h = dl[0];
  c.dil_w = dl[1];
}

// pads [begin_h, begin_w, end_h, end_w] from auto_pad and the output size.
std::vector<int64_t> conv_pads(const onnx::NodeProto& n, int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t kh,
                               int64_t kw, const std::vector<int64_t>& s, const std::vector<int64_t>& d) {
  std::string ap = attr_string(n, "auto_pad", "NOTSET");
  if (ap == "NOTSET") {
    std::vector<int64_t> p = attr_ints(n, "pads", {0, 0, 0, 0});
    if (p.size() != 4) refuse("pads of " + std::to_string(p.size()) + " values");
    return p;
  }
  if (ap == "VALID") return {0, 0, 0, 0};
  if (ap != "SAME_UPPER" && ap != "SAME_LOWER") refuse("auto_pad " + ap);
  int64_t th = std::max<int64_t>(0, (oh - 1) * s[0] + (kh - 1) * d[0] + 1 - h);
  int64_t tw = std::max<int64_t>(0, (ow - 1) * s[1] + (kw - 1) * d[1] + 1 - w);
  if (ap == "SAME_UPPER") return {th / 2, tw / 2, th - th / 2, tw - tw / 2};
  return {th - th / 2, tw - tw / 2, th / 2, tw / 2};
}

}  // namespace

void Lowering::lower_conv(int i, const ConvFusion& f) {
  const onnx::NodeProto& n = m_.node(i);
  if (n.input_size() < 2 || n.output_size() != 1) refuse("Conv needs 2 or 3 inputs and 1 output");
  int x = value(n.input(0)), w = value(n.input(1));
  std::vector<int64_t> xd = p_.values[x].dims, wd = p_.values[w].dims;
  if (xd.size() != 4 || wd.size() != 4) refuse("only 2-D convolutions");
  const ValueType& yt = m_.type(n.output(0));
  if (!yt.is_static() || yt.dims.size() != 4) refuse("output shape not static");
  std::vector<int64_t> od = yt.dims;
  std::string out = f.relu >= 0 ? m_.node(f.relu).output(0) : n.output(0);
  int y = value(out);
  ConvParams c;
  set_shapes(c, xd, wd, od);
  c.k = wd[0];
  c.group = attr_int(n, "group", 1);
  if (c.group < 1 || wd[1] * c.group != c.c || c.k % c.group != 0 || od[1] != c.k || od[0] != c.n) {
    refuse("Conv channels: input " + dims_str(xd) + ", weights " + dims_str(wd) + ", group " + std::to_string(c.group));
  }
  std::vector<int64_t> st = attr_ints(n, "strides", {1, 1}), dl = attr_ints(n, "dilations", {1, 1});
  if (st.size() != 2 || dl.size() != 2) refuse("strides/dilations of rank != 2");
  std::vector<int64_t> ks = attr_ints(n, "kernel_shape", {c.kh, c.kw});
  if (ks != std::vector<int64_t>{c.kh, c.kw}) refuse("kernel_shape differs from the weights");
  std::vector<int64_t> pads = conv_pads(n, c.h, c.w, c.oh, c.ow, c.kh, c.kw, st, dl);
  std::vector<int> nodes{i};
  for (int k : {f.add, f.relu}) {
    if (k >= 0) nodes.push_back(k);
  }
  if (pads[0] != pads[2] || pads[1] != pads[3]) {
    // cuDNN pads symmetrically: the input is padded into a temporary first, and convolved without padding.
    std::vector<int64_t> pd{c.n, c.c, c.h + pads[0] + pads[2], c.w + pads[1] + pads[3]};
    int xp = temp(pd, n.output(0) + ".padded_input");
    Step& s = new_step(StepKind::kStrided, nodes, "pad");
    s.fill = true;
    s.out = xp;
    std::vector<int64_t> ds = contiguous_strides(pd);
    CopyPiece piece = copy_piece(x, xp, xd, contiguous_strides(xd), ds);
    piece.copy.dst_offset = pads[0] * ds[2] + pads[1] * ds[3];
    s.pieces.push_back(piece);
    s.bytes = 4.0 * (numel(xd) + 2 * numel(pd));
    x = xp;
    c.h = pd[2];
    c.w = pd[3];
    pads = {0, 0, 0, 0};
  }
  set_window(c, pads, st, dl);
  if ((c.h + 2 * c.pad_h - ((c.kh - 1) * c.dil_h + 1)) / c.stride_h + 1 != c.oh ||
      (c.w + 2 * c.pad_w - ((c.kw - 1) * c.dil_w + 1)) / c.stride_w + 1 != c.ow) {
    refuse("Conv output shape " + dims_str(od) + " does not follow from its attributes");
  }
  c.x = x;
  c.w_value = w;
  c.y = y;
  int bias = -1;
  if (n.input_size() >= 3 && !n.input(2).empty()) {
    bias = value(n.input(2));
    if (numel(p_.values[bias].dims) != c.k) refuse("Conv bias length");
  }
  if (f.relu >= 0) {
    c.relu = true;
    if (bias < 0) {
      DeviceConst zeros;
      zeros.kind = DeviceConst::kZeros;
      zeros.count = c.k;
      bias = add_const(zeros, {c.k}, "zeros:" + std::to_string(c.k));
    }
    c.bias = bias;
    if (!f.z.empty()) c.z = value(f.z);
  }
  Step& s = new_step(StepKind::kConv, nodes, c.relu ? "cudnn conv+bias+relu" : "cudnn conv");
  s.conv = c;
  s.flops = 2.0 * c.n * c.k * c.oh * c.ow * (c.c / c.group) * c.kh * c.kw;
  s.bytes = 4.0 * (numel(xd) + numel(wd) + numel(od) * (c.z >= 0 ? 2 : 1));
  if (!c.relu && bias >= 0) add_bias_chain(y, bias, {i});
}

void Lowering::lower_conv_transpose(int i) {
  const onnx::NodeProto& n = m_.node(i);
  if (n.input_size() < 2 || n.output_size() != 1) refuse("ConvTranspose needs 2 or 3 inputs and 1 output");
  int x = value(n.input(0)), w = value(n.input(1));
  std::vector<int64_t> xd = p_.values[x].dims, wd = p_.values[w].dims;
  if (xd.size() != 4 || wd.size() != 4) refuse("only 2-D transposed convolutions");
  int y = value(n.output(0));
  std::vector<int64_t> od = p_.values[y].dims;
  std::string ap = attr_string(n, "auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "VALID") refuse("auto_pad " + ap + " not supported");
  if (has_attr(n, "output_shape")) refuse("output_shape not supported");
  ConvParams c;
  c.transpose = true;
  set_shapes(c, xd, wd, od);
  c.group = attr_int(n, "group", 1);
  c.k = wd[1] * c.group;
  if (c.group < 1 || wd[0] != c.c || c.c % c.group != 0 || od[1] != c.k || od[0] != c.n) {
    refuse("ConvTranspose channels: input " + dims_str(xd) + ", weights " + dims_str(wd));
  }
  std::vector<int64_t> st = attr_ints(n, "strides", {1, 1}), dl = attr_ints(n, "dilations", {1, 1});
  std::vector<int64_t> op = attr_ints(n, "output_padding", {0, 0});
  std::vector<int64_t> pads = ap == "VALID" ? std::vector<int64_t>{0, 0, 0, 0} : attr_ints(n, "pads", {0, 0, 0, 0});
  if (st.size() != 2 || dl.size() != 2 || op.size() != 2 || pads.size() != 4) refuse("attributes of rank != 2");
  for (int a = 0; a < 2; ++a) {
    int64_t in = a == 0 ? c.h : c.w, k = a == 0 ? c.kh : c.kw, out = a == 0 ? c.oh : c.ow;
    int64_t want = st[a] * (in - 1) + op[a] + (k - 1) * dl[a] + 1 - pads[a] - pads[a + 2];
    if (want != out) refuse("ConvTranspose output shape " + dims_str(od) + " does not follow from its attributes");
    // cuDNN's backward-data convolution pads by pads[a] at the start; the end follows from the output size,
    // which it accepts when op + begin - end is in [0, stride).
    int64_t slack = op[a] + pads[a] - pads[a + 2];
    if (slack < 0 || slack >= st[a]) refuse("ConvTranspose pads " + dims_str(pads) + " not supported by cuDNN");
  }
  set_window(c, pads, st, dl);
  c.x = x;
  c.w_value = w;
  c.y = y;
  Step& s = new_step(StepKind::kConv, {i}, "cudnn conv transpose");
  s.conv = c;
  s.flops = 2.0 * c.n * c.c * c.h * c.w * (c.k / c.group) * c.kh * c.kw;
  s.bytes = 4.0 * (numel(xd) + numel(wd) + numel(od));
  if (n.input_size() >= 3 && !n.input(2).empty()) {
    int bias = value(n.input(2));
    if (numel(p_.values[bias].dims) != c.k) refuse("ConvTranspose bias length");
    add_bias_chain(y, bias, {i});
  }
}

}  // namespace tessera_cuda
