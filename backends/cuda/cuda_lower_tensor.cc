// Lowering of the ops that move data (Reshape and its kind as aliases,
// Concat, Transpose, Slice, Split, Gather, Expand, Tile, Pad as strided
// copies), windows (pools, Resize) and normalisations (Softmax,
// LayerNormalization, reductions). See cuda_lower.h.
#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "cuda_lower.h"

namespace tessera_cuda {

namespace {

int64_t norm_axis(int64_t axis, size_t rank, const char* what) {
  int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) refuse(std::string(what) + " " + std::to_string(axis) + " out of range");
  return axis < 0 ? axis + r : axis;
}

int64_t prod(const std::vector<int64_t>& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t k = from; k < to && k < d.size(); ++k) p *= d[k];
  return p;
}

// The code `table` gives `name`; refuses "<what> <name>" when it has none.
int32_t code_of(const std::string& name, std::initializer_list<std::pair<const char*, int32_t>> table,
                const char* what) {
  for (const auto& [key, code] : table) {
    if (name == key) return code;
  }
  refuse(std::string(what) + " " + name);
}

void set_rank(StridedCopy& c, size_t rank) {
  if (rank > static_cast<size_t>(kMaxRank)) refuse("copy of rank > 8");
  c.rank = static_cast<int32_t>(rank);
}

}  // namespace

CopyPiece copy_piece(int src, int dst, const std::vector<int64_t>& dims, const std::vector<int64_t>& src_strides,
                     const std::vector<int64_t>& dst_strides) {
  CopyPiece p;
  p.src = src;
  p.dst = dst;
  set_rank(p.copy, dims.size());
  for (size_t k = 0; k < dims.size(); ++k) {
    p.copy.dims[k] = dims[k];
    p.copy.src_strides[k] = src_strides[k];
    p.copy.dst_strides[k] = dst_strides[k];
  }
  return p;
}

void Lowering::lower_alias(int i) {
  const onnx::NodeProto& n = m_.node(i);
  if (n.input_size() < 1 || n.output_size() < 1) refuse("no input or output");
  if (n.op_type() == "Dropout") {
    for (int k = 1; k < n.output_size(); ++k) {
      if (!n.output(k).empty()) refuse("Dropout mask output");
    }
    if (n.input_size() >= 3 && !n.input(2).empty()) {
      for (int64_t v : const_ints(n.input(2), "Dropout training_mode")) {
        if (v != 0) refuse("Dropout training_mode");
      }
    }
  }
  int x = value(n.input(0));
  int y = value(n.output(0));
  if (numel(p_.values[x].dims) != numel(p_.values[y].dims)) refuse("element count changes");
  if (p_.values[y].home == Home::kOutput) {
    Step& s = new_step(StepKind::kMemcpy, {i}, "copy");
    s.in = x;
    s.out = y;
    s.bytes = 2.0 * static_cast<double>(p_.values[y].bytes());
    return;
  }
  p_.values[y].home = Home::kAlias;
  p_.values[y].index = x;
}

void Lowering::lower_softmax(int i) {
  const onnx::NodeProto& n = m_.node(i);
  int x = value(n.input(0)), y = value(n.output(0));
  std::vector<int64_t> d = p_.values[x].dims;
  int64_t axis = norm_axis(attr_int(n, "axis", m_.opset() < 13 ? 1 : -1), d.size(), "axis");
  Step& s = new_step(StepKind::kSoftmax, {i}, n.op_type() == "Softmax" ? "softmax" : "log softmax");
  s.in = x;
  s.out = y;
  s.outer = prod(d, 0, static_cast<size_t>(axis));
  if (m_.opset() < 13) {  // the input coerced to 2-D at `axis`
    s.len = prod(d, static_cast<size_t>(axis), d.size());
    s.inner = 1;
  } else {
    s.len = d[static_cast<size_t>(axis)];
    s.inner = prod(d, static_cast<size_t>(axis) + 1, d.size());
  }
  s.code = n.op_type() == "LogSoftmax" ? 1 : 0;
  s.flops = 5.0 * numel(d);
  s.bytes = 8.0 * numel(d);
}

void Lowering::lower_layernorm(int i) {
  const onnx::NodeProto& n = m_.node(i);
  for (int k = 1; k < n.output_size(); ++k) {
    if (!n.output(k).empty()) refuse("LayerNormalization Mean/InvStdDev outputs");
  }
  if (n.input_size() < 2) refuse("LayerNormalization needs a scale");
  int x = value(n.input(0)), y = value(n.output(0));
  std::vector<int64_t> d = p_.values[x].dims;
  int64_t axis = norm_axis(attr_int(n, "axis", -1), d.size(), "axis");
  size_t at = new_step_index(StepKind::kLayerNorm, {i}, "layernorm");
  int64_t rows = prod(d, 0, static_cast<size_t>(axis)), cols = prod(d, static_cast<size_t>(axis), d.size());
  int gamma = value(n.input(1));
  if (numel(p_.values[gamma].dims) != cols) refuse("LayerNormalization scale " + dims_str(p_.values[gamma].dims));
  int beta = -1;
  if (n.input_size() >= 3 && !n.input(2).empty()) {
    beta = value(n.input(2));
    if (numel(p_.values[beta].dims) != cols) refuse("LayerNormalization bias " + dims_str(p_.values[beta].dims));
  }
  Step& s = p_.steps[at];
  s.in = x;
  s.out = y;
  s.aux = gamma;
  s.aux2 = beta;
  s.outer = rows;
  s.len = cols;
  s.eps = attr_float(n, "epsilon", 1e-5f);
  s.flops = 8.0 * numel(d);
  s.bytes = 8.0 * numel(d);
}

void Lowering::lower_reduce(int i) {
  const onnx::NodeProto& n = m_.node(i);
  const std::string& op = n.op_type();
  int x = value(n.input(0)), y = value(n.output(0));
  std::vector<int64_t> d = p_.values[x].dims;
  bool axes_input = m_.opset() >= 18 || (op == "ReduceSum" && m_.opset() >= 13);
  std::vector<int64_t> axes;
  if (axes_input) {
    if (n.input_size() >= 2 && !n.input(1).empty()) axes = const_ints(n.input(1), "axes");
  } else {
    axes = attr_ints(n, "axes", {});
  }
  if (axes.empty()) {
    if (axes_input && attr_int(n, "noop_with_empty_axes", 0) != 0) {
      Step& s = new_step(StepKind::kMemcpy, {i}, "copy");
      s.in = x;
      s.out = y;
      s.bytes = 8.0 * numel(d);
      return;
    }
    for (size_t k = 0; k < d.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  }
  for (int64_t& a : axes) a = norm_axis(a, d.size(), "axis");
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  if (axes.back() - axes.front() + 1 != static_cast<int64_t>(axes.size())) refuse("reduction over non-adjacent axes");
  static const std::map<std::string, int32_t> kCodes = {
      {"ReduceSum", kReduceSum}, {"ReduceMean", kReduceMean},           {"ReduceMax", kReduceMax},
      {"ReduceMin", kReduceMin}, {"ReduceSumSquare", kReduceSumSquare}, {"ReduceL2", kReduceL2}};
  Step& s = new_step(StepKind::kReduce, {i}, "reduce");
  s.in = x;
  s.out = y;
  s.code = kCodes.at(op);
  s.outer = prod(d, 0, static_cast<size_t>(axes.front()));
  s.len = prod(d, static_cast<size_t>(axes.front()), static_cast<size_t>(axes.back()) + 1);
  s.inner = prod(d, static_cast<size_t>(axes.back()) + 1, d.size());
  if (numel(p_.values[y].dims) != s.outer * s.inner) refuse("reduction output shape " + dims_str(p_.values[y].dims));
  s.flops = static_cast<double>(numel(d));
  s.bytes = 4.0 * (numel(d) + s.outer * s.inner);
}

void Lowering::lower_global_pool(int i) {
  const onnx::NodeProto& n = m_.node(i);
  int x = value(n.input(0)), y = value(n.output(0));
  std::vector<int64_t> d = p_.values[x].dims;
  if (d.size() < 3) refuse("global pool of rank < 3");
  Step& s = new_step(StepKind::kReduce, {i}, "global pool");
  s.in = x;
  s.out = y;
  s.code = n.op_type() == "GlobalMaxPool" ? kReduceMax : kReduceMean;
  s.outer = d[0] * d[1];
  s.len = prod(d, 2, d.size());
  s.inner = 1;
  s.flops = static_cast<double>(numel(d));
  s.bytes = 4.0 * (numel(d) + s.outer);
}

void Lowering::lower_pool(int i) {
  const onnx::NodeProto& n = m_.node(i);
  for (int k = 1; k < n.output_size(); ++k) {
    if (!n.output(k).empty()) refuse("MaxPool Indices output");
  }
  int x = value(n.input(0)), y = value(n.output(0));
  std::vector<int64_t> d = p_.values[x].dims, od = p_.values[y].dims;
  if (d.size() != 4) refuse("only 2-D pooling");
  std::vector<int64_t> ks = attr_ints(n, "kernel_shape", {});
  std::vector<int64_t> st = attr_ints(n, "strides", {1, 1}), dl = attr_ints(n, "dilations", {1, 1});
  if (ks.size() != 2 || st.size() != 2 || dl.size() != 2) refuse("kernel_shape/strides/dilations of rank != 2");
  std::string ap = attr_string(n, "auto_pad", "NOTSET");
  std::vector<int64_t> pads{0, 0, 0, 0};
  if (ap == "NOTSET") {
    pads = attr_ints(n, "pads", {0, 0, 0, 0});
    if (pads.size() != 4) refuse("pads of rank != 2");
  } else if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
    for (int a = 0; a < 2; ++a) {
      int64_t total = std::max<int64_t>(0, (od[2 + a] - 1) * st[a] + (ks[a] - 1) * dl[a] + 1 - d[2 + a]);
      pads[a] = ap == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[a + 2] = total - pads[a];
    }
  } else if (ap != "VALID") {
    refuse("auto_pad " + ap);
  }
  Pool2d& p = new_step(StepKind::kPool, {i}, "pool").pool;
  Step& s = p_.steps.back();
  s.in = x;
  s.out = y;
  set_nchw(p, d, od);
  p.kh = static_cast<int32_t>(ks[0]);
  p.kw = static_cast<int32_t>(ks[1]);
  p.stride_h = static_cast<int32_t>(st[0]);
  p.stride_w = static_cast<int32_t>(st[1]);
  p.pad_top = static_cast<int32_t>(pads[0]);
  p.pad_left = static_cast<int32_t>(pads[1]);
  p.dil_h = static_cast<int32_t>(dl[0]);
  p.dil_w = static_cast<int32_t>(dl[1]);
  if (n.op_type() == "MaxPool") {
    if (attr_int(n, "storage_order", 0) != 0) refuse("storage_order 1");
    p.code = kPoolMax;
  } else {
    p.code = attr_int(n, "count_include_pad", 0) != 0 ? kPoolAvgIncludePad : kPoolAvgExcludePad;
  }
  if (od[0] != d[0] || od[1] != d[1]) refuse("pool output shape " + dims_str(od));
  s.flops = static_cast<double>(numel(od)) * ks[0] * ks[1];
  s.bytes = 4.0 * (numel(d) + numel(od));
}

void Lowering::lower_resize(int i) {
  const onnx::NodeProto& n = m_.node(i);
  int x = value(n.input(0)), y = value(n.output(0));
  std::vector<int64_t> d = p_.values[x].dims, od = p_.values[y].dims;
  if (d.size() != 4) refuse("Resize of rank " + std::to_string(d.size()) + " (4-D only)");
  if (od[0] != d[0] || od[1] != d[1]) refuse("Resize of N or C");
  Resize2d r;
  r.mode =
      code_of(attr_string(n, "mode", "nearest"),
              {{"nearest", kResizeNearest}, {"linear", kResizeLinear}, {"bilinear", kResizeLinear}}, "Resize mode");
  std::vector<float> scales;
  bool legacy = n.op_type() == "Upsample" || m_.opset() < 11;  // asymmetric coordinates, floor for nearest
  if (legacy) {
    if (n.op_type() == "Upsample" && m_.opset() < 9) {  // scales as an attribute
      for (const auto& at : n.attribute()) {
        if (at.name() == "scales") scales.assign(at.floats().begin(), at.floats().end());
      }
    } else {
      if (n.input_size() < 2) refuse("Resize without scales");
      scales = const_floats(n.input(1), "scales");
    }
    r.coord = kCoordAsymmetric;
    r.nearest = kNearestFloor;
  } else {
    if (attr_int(n, "exclude_outside", 0) != 0) refuse("exclude_outside");
    if (attr_int(n, "antialias", 0) != 0) refuse("antialias");
    if (has_attr(n, "axes")) refuse("axes attribute");
    if (attr_string(n, "keep_aspect_ratio_policy", "stretch") != "stretch") refuse("keep_aspect_ratio_policy");
    r.coord = code_of(attr_string(n, "coordinate_transformation_mode", "half_pixel"),
                      {{"half_pixel", kCoordHalfPixel},
                       {"asymmetric", kCoordAsymmetric},
                       {"align_corners", kCoordAlignCorners},
                       {"pytorch_half_pixel", kCoordPytorchHalfPixel}},
                      "coordinate_transformation_mode");
    r.nearest = code_of(attr_string(n, "nearest_mode", "round_prefer_floor"),
                        {{"round_prefer_floor", kNearestRoundPreferFloor},
                         {"round_prefer_ceil", kNearestRoundPreferCeil},
                         {"floor", kNearestFloor},
                         {"ceil", kNearestCeil}},
                        "nearest_mode");
    if (n.input_size() >= 3 && !n.input(2).empty()) {
      const onnx::TensorProto* t = m_.initializer(n.input(2));
      if (!t) refuse("scales not constant");
      if (numel(std::vector<int64_t>(t->dims().begin(), t->dims().end())) > 0)
        scales = const_floats(n.input(2), "scales");
    }
    if (scales.empty()) {
      if (n.input_size() < 4 || n.input(3).empty()) refuse("Resize without scales or sizes");
      if (!m_.is_initializer(n.input(3))) refuse("sizes not constant");
    }
  }
  if (!scales.empty()) {
    if (scales.size() != 4) refuse("scales of " + std::to_string(scales.size()) + " values");
    if (scales[0] != 1.0f || scales[1] != 1.0f) refuse("Resize of N or C");
    r.scale_h = scales[2];
    r.scale_w = scales[3];
  } else {
    r.scale_h = static_cast<float>(od[2]) / static_cast<float>(d[2]);
    r.scale_w = static_cast<float>(od[3]) / static_cast<float>(d[3]);
  }
  if (legacy && r.mode == kResizeNearest && (r.scale_h < 1.0f || r.scale_w < 1.0f)) refuse("legacy downsampling");
  set_nchw(r, d, od);
  Step& s = new_step(StepKind::kResize, {i}, "resize");
  s.resize = r;
  s.in = x;
  s.out = y;
  s.flops = 8.0 * numel(od);
  s.bytes = 4.0 * (numel(d) + numel(od));
}

void Lowering::lower_concat(int i) {
  const onnx::NodeProto& n = m_.node(i);
  int y = value(n.output(0));
  std::vector<int64_t> od = p_.values[y].dims;
  int64_t axis = norm_axis(attr_int(n, "axis", 0), od.size(), "axis");
  std::vector<int64_t> os = contiguous_strides(od);
  size_t at = new_step_index(StepKind::kStrided, {i}, "concat");
  std::vector<CopyPiece> pieces;
  int64_t offset = 0;
  double bytes = 0;
  for (const auto& in : n.input()) {
    int x = value(in);
    std::vector<int64_t> d = p_.values[x].dims;
    if (d.size() != od.size()) refuse("Concat inputs of different ranks");
    CopyPiece p = copy_piece(x, y, d, contiguous_strides(d), os);
    p.copy.dst_offset = offset * os[static_cast<size_t>(axis)];
    offset += d[static_cast<size_t>(axis)];
    bytes += 8.0 * numel(d);
    pieces.push_back(p);
  }
  if (offset != od[static_cast<size_t>(axis)]) refuse("Concat output shape " + dims_str(od));
  p_.steps[at].pieces = std::move(pieces);
  p_.steps[at].bytes = bytes;
}

void Lowering::lower_transpose(int i) {
  const onnx::NodeProto& n = m_.node(i);
  int x = value(n.input(0)), y = value(n.output(0));
  std::vector<int64_t> d = p_.values[x].dims, od = p_.values[y].dims;
  std::vector<int64_t> perm = attr_ints(n, "perm", {});
  if (perm.empty()) {
    for (size_t k = d.size(); k-- > 0;) perm.push_back(static_cast<int64_t>(k));
  }
  if (perm.size() != d.size()) refuse("perm of the wrong length");
  std::vector<int64_t> is = contiguous_strides(d), os = contiguous_strides(od);
  Step& s = new_step(StepKind::kStrided, {i}, "transpose");
  std::vector<int64_t> dims, ss, ds;
  for (size_t k = 0; k < d.size(); ++k) {
    int64_t a = norm_axis(perm[k], d.size(), "perm");
    if (od[k] != d[static_cast<size_t>(a)]) refuse("Transpose output shape");
    dims.push_back(od[k]);
    ss.push_back(is[static_cast<size_t>(a)]);
    ds.push_back(os[k]);
  }
  s.pieces.push_back(copy_piece(x, y, dims, ss, ds));
  s.bytes = 8.0 * numel(d);
}

void Lowering::lower_slice(int i) {
  const onnx::NodeProto& n = m_.node(i);
  int x = value(n.input(0)), y = value(n.output(0));
  std::vector<int64_t> d = p_.values[x].dims, od = p_.values[y].dims;
  std::vector<int64_t> starts, ends, axes, steps;
  if (m_.opset() < 10) {
    starts = attr_ints(n, "starts", {});
    ends = attr_ints(n, "ends", {});
    axes = attr_ints(n, "axes", {});
  } else {
    if (n.input_size() < 3) refuse("Slice needs starts and ends");
    starts = const_ints(n.input(1), "starts");
    ends = const_ints(n.input(2), "ends");
    if (n.input_size() >= 4 && !n.input(3).empty()) axes = const_ints(n.input(3), "axes");
    if (n.input_size() >= 5 && !n.input(4).empty()) steps = const_ints(n.input(4), "steps");
  }
  if (axes.empty()) {
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
    refuse("starts/ends/axes/steps of different lengths");
  }
  std::vector<int64_t> is = contiguous_strides(d), os = contiguous_strides(od);
  std::vector<int64_t> begin(d.size(), 0), step(d.size(), 1), count = d;
  for (size_t j = 0; j < axes.size(); ++j) {
    size_t a = static_cast<size_t>(norm_axis(axes[j], d.size(), "axis"));
    int64_t dim = d[a], s = starts[j], e = ends[j], st = steps[j];
    if (st == 0) refuse("Slice step 0");
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    if (st > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      count[a] = e > s ? (e - s + st - 1) / st : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      count[a] = s > e ? (s - e + (-st) - 1) / (-st) : 0;
    }
    begin[a] = s;
    step[a] = st;
  }
  if (count != od) refuse("Slice output shape " + dims_str(od) + ", expected " + dims_str(count));
  Step& s = new_step(StepKind::kStrided, {i}, "slice");
  std::vector<int64_t> ss(d.size());
  for (size_t k = 0; k < d.size(); ++k) ss[k] = step[k] * is[k];
  CopyPiece p = copy_piece(x, y, od, ss, os);
  for (size_t k = 0; k < d.size(); ++k) p.copy.src_offset += begin[k] * is[k];
  s.pieces.push_back(p);
  s.bytes = 8.0 * numel(od);
}

void Lowering::lower_split(int i) {
  const onnx::NodeProto& n = m_.node(i);
  int x = value(n.input(0));
  std::vector<int64_t> d = p_.values[x].dims;
  int64_t axis = norm_axis(attr_int(n, "axis", 0), d.size(), "axis");
  std::vector<int64_t> is = contiguous_strides(d);
  size_t at = new_step_index(StepKind::kStrided, {i}, "split");
  std::vector<CopyPiece> pieces;
  int64_t offset = 0;
  for (const auto& out : n.output()) {
    if (out.empty()) refuse("Split with an unnamed output");
    int y = value(out);
    std::vector<int64_t> od = p_.values[y].dims;
    CopyPiece p = copy_piece(x, y, od, is, contiguous_strides(od));
    p.copy.src_offset = offset * is[static_cast<size_t>(axis)];
    offset += od[static_cast<size_t>(axis)];
    pieces.push_back(p);
  }
  if (offset != d[static_cast<size_t>(axis)]) refuse("Split output shapes");
  p_.steps[at].pieces = std::move(pieces);
  p_.steps[at].bytes = 8.0 * numel(d);
}

void Lowering::lower_gather(int i) {
  const onnx::NodeProto& n = m_.node(i);
  if (n.input_size() != 2) refuse("Gather needs 2 inputs");
  int x = value(n.input(0));
  int idx = value(n.input(1), /*allow_int64=*/true);
  if (p_.values[idx].dtype != 7)
    refuse("indices of dtype " + std::string(tessera_plugin::dtype_name(p_.values[idx].dtype)));
  int y = value(n.output(0));
  std::vector<int64_t> d = p_.values[x].dims;
  int64_t axis = norm_axis(attr_int(n, "axis", 0), d.size(), "axis");
  Step& s = new_step(StepKind::kGather, {i}, "gather");
  s.in = x;
  s.aux = idx;
  s.out = y;
  s.outer = prod(d, 0, static_cast<size_t>(axis));
  s.len = d[static_cast<size_t>(axis)];
  s.inner = prod(d, static_cast<size_t>(axis) + 1, d.size());
  s.count = numel(p_.values[idx].dims);
  if (numel(p_.values[y].dims) != s.outer * s.count * s.inner) refuse("Gather output shape");
  s.bytes = 8.0 * numel(p_.values[y].dims);
}

void Lowering::lower_expand(int i) {
  const onnx::NodeProto& n = m_.node(i);
  int x = value(n.input(0)), y = value(n.output(0));
  std::vector<int64_t> d = p_.values[x].dims, od = p_.values[y].dims;
  Step& s = new_step(StepKind::kStrided, {i}, "expand");
  CopyPiece p;
  p.src = x;
  p.dst = y;
  set_rank(p.copy, od.size());
  broadcast_strides(d, od, p.copy.src_strides);
  std::vector<int64_t> os = contiguous_strides(od);
  for (size_t k = 0; k < od.size(); ++k) {
    p.copy.dims[k] = od[k];
    p.copy.dst_strides[k] = os[k];
  }
  s.pieces.push_back(p);
  s.bytes = 4.0 * (numel(d) + numel(od));
}

void Lowering::lower_tile(int i) {
  const onnx::NodeProto& n = m_.node(i);
  int x = value(n.input(0)), y = value(n.output(0));
  std::vector<int64_t> d = p_.values[x].dims, od = p_.values[y].dims;
  if (d.size() != od.size()) refuse("Tile output rank");
  std::vector<int64_t> is = contiguous_strides(d), os = contiguous_strides(od);
  // Output index t * d + j along an axis: the repeat t (source stride 0) and the element j, as two copy axes.
  std::vector<int64_t> dims, ss, ds;
  for (size_t k = 0; k < d.size(); ++k) {
    if (od[k] % d[k] != 0) refuse("Tile output shape");
    int64_t r = od[k] / d[k];
    if (r > 1) {
      dims.push_back(r);
      ss.push_back(0);
      ds.push_back(d[k] * os[k]);
    }
    dims.push_back(d[k]);
    ss.push_back(is[k]);
    ds.push_back(os[k]);
  }
  if (dims.size() > static_cast<size_t>(kMaxRank)) refuse("Tile needs more than 8 copy axes");
  Step& s = new_step(StepKind::kStrided, {i}, "tile");
  s.pieces.push_back(copy_piece(x, y, dims, ss, ds));
  s.bytes = 4.0 * (numel(d) + numel(od));
}

void Lowering::lower_pad(int i) {
  const onnx::NodeProto& n = m_.node(i);
  std::string mode = attr_string(n, "mode", "constant");
  if (mode != "constant") refuse("Pad mode " + mode);
  int x = value(n.input(0)), y = value(n.output(0));
  std::vector<int64_t> d = p_.values[x].dims, od = p_.values[y].dims;
  std::vector<int64_t> pads;
  float fill = 0;
  if (m_.opset() < 11) {
    pads = attr_ints(n, "pads", {});
    fill = attr_float(n, "value", 0.0f);
  } else {
    if (n.input_size() < 2) refuse("Pad without pads");
    pads = const_ints(n.input(1), "pads");
    if (n.input_size() >= 3 && !n.input(2).empty()) {
      std::vector<float> v = const_floats(n.input(2), "constant_value");
      if (v.size() != 1) refuse("constant_value is not a scalar");
      fill = v[0];
    }
    if (n.input_size() >= 4 && !n.input(3).empty()) refuse("Pad axes input");
  }
  size_t r = d.size();
  if (pads.size() != 2 * r) refuse("pads of " + std::to_string(pads.size()) + " values for rank " + std::to_string(r));
  std::vector<int64_t> is = contiguous_strides(d), os = contiguous_strides(od);
  Step& s = new_step(StepKind::kStrided, {i}, "pad");
  s.fill = true;
  s.fill_value = fill;
  s.out = y;
  CopyPiece p;
  p.src = x;
  p.dst = y;
  set_rank(p.copy, r);
  bool any = true;
  for (size_t k = 0; k < r; ++k) {
    int64_t b = pads[k], e = pads[k + r];
    if (d[k] + b + e != od[k]) refuse("Pad output shape " + dims_str(od));
    int64_t from = std::max<int64_t>(0, -b), to = std::max<int64_t>(0, b);
    int64_t cnt = d[k] - from - std::max<int64_t>(0, -e);
    if (cnt <= 0) any = false;
    p.copy.dims[k] = std::max<int64_t>(cnt, 0);
    p.copy.src_strides[k] = is[k];
    p.copy.dst_strides[k] = os[k];
    p.copy.src_offset += from * is[k];
    p.copy.dst_offset += to * os[k];
  }
  if (any) s.pieces.push_back(p);
  s.bytes = 4.0 * (numel(d) + 2 * numel(od));
}

}  // namespace tessera_cuda
