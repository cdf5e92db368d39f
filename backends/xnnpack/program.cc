// The program's invariants. Input: a Program (from the lowering, or decoded
// from a blob). Output: "" / nothing when it is consistent, else a reason or
// a TESSERA_ERROR_INCOMPATIBLE_BLOB failure. Method: one shape rule per op
// that recomputes the output dims XNNPACK will derive from the input dims and
// the parameters (check_node), then a walk over the steps in execution order
// that tracks which tensors have been written (validate).
#include <cmath>
#include <limits>

#include "program.h"

namespace tessera_xnn {

using tessera_plugin::fail;

const OpInfo& op_info(Op op) {
  static const OpInfo kInfo[] = {
#define XNN_OP(name, min_in, max_in, n_ints, n_floats) {#name, min_in, max_in, n_ints, n_floats},
#include "ops.inc"
#undef XNN_OP
  };
  static const OpInfo kUnknown = {"unknown", 0, 0, 0, 0};
  return op < Op::kCount ? kInfo[static_cast<size_t>(op)] : kUnknown;
}

size_t dtype_bytes(DType t) {
  switch (t) {
    case DType::kQS8:
    case DType::kQC8:
      return 1;
    default:
      return 4;
  }
}

Dims to_nhwc(const Dims& d) {
  Dims r{d[0]};
  r.insert(r.end(), d.begin() + 2, d.end());
  r.push_back(d[1]);
  return r;
}

Dims to_nchw(const Dims& d) {
  Dims r{d[0], d.back()};
  r.insert(r.end(), d.begin() + 1, d.end() - 1);
  return r;
}

Dims xnn_dims(const Dims& onnx, bool nhwc) {
  if (onnx.empty()) return {1};
  return nhwc ? to_nhwc(onnx) : onnx;
}

Dims filter_dims_2d(const Dims& d) { return d.size() == 3 ? Dims{d[0], d[1], 1, d[2]} : d; }

bool layout_change_is_view(const Dims& d) {
  return has_channels_last(d.size()) && (d[1] == 1 || numel(Dims(d.begin() + 2, d.end())) == 1);
}

namespace {

// Numpy broadcasting; false when the shapes do not broadcast.
bool broadcast(const Dims& a, const Dims& b, Dims* out) {
  size_t r = std::max(a.size(), b.size());
  out->assign(r, 1);
  for (size_t i = 0; i < r; ++i) {
    int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (x != y && x != 1 && y != 1) return false;
    (*out)[i] = x == 1 ? y : x;
  }
  return true;
}

constexpr int64_t kMaxParam = int64_t{1} << 20;  // pads, kernels, strides: far above any real model

bool in_range(int64_t v, int64_t lo, int64_t hi = kMaxParam) { return v >= lo && v <= hi; }

// Output extent of a strided window: (in + pads - effective kernel) / stride + 1.
int64_t window_out(int64_t in, int64_t pad_a, int64_t pad_b, int64_t k, int64_t stride, int64_t dilation) {
  int64_t eff = (k - 1) * dilation + 1;
  int64_t span = in + pad_a + pad_b - eff;
  return span < 0 ? -1 : span / stride + 1;
}

std::string check_window(const NodeDef& n, const Dims& x, const Dims& y, size_t base, bool dilation, int64_t channels) {
  const auto& p = n.ints;
  for (size_t i = 0; i < 4; ++i) {
    if (!in_range(p[i], 0)) return "bad padding";
  }
  for (size_t i = 4; i < base + (dilation ? 6 : 4); ++i) {
    if (!in_range(p[i], 1)) return "bad window parameter";
  }
  int64_t sh = p[base + 2], sw = p[base + 3];
  int64_t dh = dilation ? p[base + 4] : 1, dw = dilation ? p[base + 5] : 1;
  int64_t oh = window_out(x[1], p[0], p[2], p[base], sh, dh);
  int64_t ow = window_out(x[2], p[3], p[1], p[base + 1], sw, dw);
  Dims want{x[0], oh, ow, channels};
  return y == want ? "" : "output " + dims_str(y) + ", expected " + dims_str(want);
}

std::string check_min_max(const NodeDef& n) {
  float lo = n.floats[0], hi = n.floats[1];
  if (std::isnan(lo) || std::isnan(hi) || !(lo < hi)) return "bad output range";
  return "";
}

// The element types a node may have: float32 throughout, or (the quantized
// products, Reshape, Convert) the int8 forms listed in ops.inc.
std::string check_dtypes(const NodeDef& n, const std::vector<TensorDef>& t) {
  auto dt = [&](size_t k) { return t[static_cast<size_t>(n.inputs[k])].dtype; };
  const DType y = t[static_cast<size_t>(n.output)].dtype;
  bool all_f32 = y == DType::kF32;
  for (size_t k = 0; k < n.inputs.size(); ++k) all_f32 = all_f32 && dt(k) == DType::kF32;
  const bool bias = n.inputs.size() == 3;
  switch (n.op) {
    case Op::kConv2d:
    case Op::kDepthwiseConv2d:
      if (all_f32 ||
          (dt(0) == DType::kQS8 && dt(1) == DType::kQC8 && (!bias || dt(2) == DType::kQC32) && y == DType::kQS8)) {
        return "";
      }
      break;
    case Op::kFullyConnected:
      if (all_f32 || (dt(0) == DType::kQS8 && dt(1) == DType::kQS8 && !bias && y == DType::kQS8)) return "";
      break;
    case Op::kReshape:
      if (dt(0) == y && (y == DType::kF32 || y == DType::kQS8)) return "";
      break;
    case Op::kConvert:
      if (dt(0) == DType::kQS8 && y == DType::kF32) return "";
      break;
    default:
      if (all_f32) return "";
      break;
  }
  return "element types";
}

}  // namespace

std::string check_node(const NodeDef& n, const std::vector<TensorDef>& t) {
  if (n.op >= Op::kCount) return "unknown op";
  const OpInfo& info = op_info(n.op);
  const std::string op = info.name;
  if (static_cast<int>(n.inputs.size()) < info.min_inputs || static_cast<int>(n.inputs.size()) > info.max_inputs) {
    return op + ": wrong input count";
  }
  if ((info.num_ints >= 0 && static_cast<int>(n.ints.size()) != info.num_ints) ||
      static_cast<int>(n.floats.size()) != info.num_floats) {
    return op + ": wrong parameter count";
  }
  for (int32_t i : n.inputs) {
    if (i < 0 || static_cast<size_t>(i) >= t.size()) return op + ": input out of range";
    if (t[static_cast<size_t>(i)].kind == TensorKind::kOutput) return op + ": reads a tensor written to the host";
  }
  if (n.output < 0 || static_cast<size_t>(n.output) >= t.size()) return op + ": output out of range";
  if (t[static_cast<size_t>(n.output)].kind == TensorKind::kConstant) return op + ": writes a constant";
  for (float f : n.floats) {
    if (std::isnan(f)) return op + ": NaN parameter";
  }
  std::string why;
  why = check_dtypes(n, t);
  if (!why.empty()) return op + ": " + why;
  auto dims = [&](size_t k) -> const Dims& { return t[static_cast<size_t>(n.inputs[k])].dims; };
  auto is_const = [&](size_t k) { return t[static_cast<size_t>(n.inputs[k])].kind == TensorKind::kConstant; };
  const Dims& x = dims(0);
  const Dims& y = t[static_cast<size_t>(n.output)].dims;
  const auto& p = n.ints;
  switch (n.op) {
    case Op::kConv2d:
    case Op::kDepthwiseConv2d: {
      bool dw = n.op == Op::kDepthwiseConv2d;
      bool bias = n.inputs.size() == 3;
      if (x.size() != 4 || !is_const(1) || (bias && !is_const(2))) {
        return op + ": needs a 4-D input and constant filter and bias";
      }
      if (!in_range(p[10], 1) || !in_range(p[11], 1) || (!dw && !in_range(p[12], 1))) return op + ": bad channels";
      int64_t oc = dw ? p[10] * p[11] : p[10] * p[12];
      int64_t ic = dw ? p[11] : p[10] * p[11];
      Dims filter = dw ? Dims{1, p[4], p[5], oc} : Dims{oc, p[4], p[5], p[11]};
      if (x[3] != ic || dims(1) != filter || (bias && dims(2) != Dims{oc})) return op + ": filter or bias shape";
      why = check_window(n, x, y, 4, true, oc);
      break;
    }
    case Op::kDeconv2d: {
      if (x.size() != 4 || !is_const(1) || (n.inputs.size() == 3 && !is_const(2))) {
        return op + ": needs a 4-D input and constant filter and bias";
      }
      for (size_t i = 0; i < 4; ++i) {
        if (!in_range(p[i], 0)) return op + ": bad padding";
      }
      for (size_t i = 6; i < 15; ++i) {
        if (!in_range(p[i], 1)) return op + ": bad parameter";
      }
      if (!in_range(p[4], 0, p[8] - 1) || !in_range(p[5], 0, p[9] - 1)) return op + ": adjustment not below the stride";
      int64_t oc = p[12] * p[14];
      if (x[3] != p[12] * p[13] || dims(1) != Dims{oc, p[6], p[7], p[13]} ||
          (n.inputs.size() == 3 && dims(2) != Dims{oc})) {
        return op + ": filter or bias shape";
      }
      int64_t oh = p[8] * (x[1] - 1) + p[4] + (p[6] - 1) * p[10] + 1 - p[0] - p[2];
      int64_t ow = p[9] * (x[2] - 1) + p[5] + (p[7] - 1) * p[11] + 1 - p[3] - p[1];
      Dims want{x[0], oh, ow, oc};
      if (y != want) why = "output " + dims_str(y) + ", expected " + dims_str(want);
      break;
    }
    case Op::kFullyConnected: {
      const Dims& w = dims(1);
      if (!is_const(1) || w.size() != 2 || (n.inputs.size() == 3 && !is_const(2))) return op + ": constant 2-D filter";
      if (p[0] != 0 && p[0] != 1) return op + ": bad flag";
      int64_t k = p[0] ? w[0] : w[1], o = p[0] ? w[1] : w[0];
      if (x.back() != k || (n.inputs.size() == 3 && dims(2) != Dims{o})) return op + ": filter or bias shape";
      Dims want(x.begin(), x.end() - 1);
      want.push_back(o);
      if (y != want) why = "output " + dims_str(y) + ", expected " + dims_str(want);
      break;
    }
    case Op::kMaxPool2d:
    case Op::kAvgPool2d: {
      if (x.size() != 4) return op + ": needs a 4-D input";
      why = check_window(n, x, y, 4, n.op == Op::kMaxPool2d, x[3]);  // checks the ranges first
      if (why.empty() && p[4] * p[5] < 2) return op + ": 1x1 pooling";
      break;
    }
    case Op::kGlobalAvgPool2d:
      if (x.size() != 4 || y != Dims{x[0], 1, 1, x[3]}) why = "shape";
      break;
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
    case Op::kMax:
    case Op::kMin:
    case Op::kSquaredDifference: {
      Dims r;
      if (!broadcast(x, dims(1), &r) || r != y) why = "shapes do not broadcast to the output";
      break;
    }
    case Op::kPRelu:
      if (x.size() != 4 || !is_const(1) || dims(1) != Dims{x[3]} || y != x)
        why = "needs NHWC input, constant [C] slope";
      break;
    case Op::kResizeBilinear:
      if (x.size() != 4 || !in_range(p[0], 1) || !in_range(p[1], 1) || y != Dims{x[0], p[0], p[1], x[3]}) {
        why = "shape";
      } else if (p[2] != 0 && p[2] != 4 && p[2] != 8) {
        why = "bad flags";
      }
      break;
    case Op::kDepthToSpace:
      if (x.size() != 4 || !in_range(p[0], 2, 1 << 12) || x[3] % (p[0] * p[0]) != 0 ||
          y != Dims{x[0], x[1] * p[0], x[2] * p[0], x[3] / (p[0] * p[0])}) {
        why = "shape";
      }
      break;
    case Op::kConstantPad: {
      if (p.size() != 2 * x.size() || y.size() != x.size()) return op + ": wrong parameter count";
      for (size_t i = 0; i < x.size() && why.empty(); ++i) {
        if (!in_range(p[i], 0) || !in_range(p[x.size() + i], 0) || y[i] != x[i] + p[i] + p[x.size() + i]) {
          why = "shape";
        }
      }
      break;
    }
    case Op::kReshape:
      if (numel(x) != numel(y)) why = "element count changes";
      break;
    case Op::kClamp:
      why = check_min_max(n);
      [[fallthrough]];
    default:  // elementwise unary ops, Softmax
      if (why.empty() && y != x) why = "output shape differs from the input's";
      break;
  }
  if (why.empty() && info.num_floats == 2 && n.op != Op::kClamp) why = check_min_max(n);
  return why.empty() ? "" : op + ": " + why;
}

// ---- the whole program ----------------------------------------------------

namespace {

[[noreturn]] void corrupt(const std::string& what) { fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "blob: " + what); }

// A float32 boundary value is a float tensor; an 8-bit one an int8 tensor.
bool boundary_dtype_ok(int32_t boundary, DType tensor) {
  if (boundary == TESSERA_DTYPE_FLOAT32) return tensor == DType::kF32;
  return (boundary == TESSERA_DTYPE_UINT8 || boundary == TESSERA_DTYPE_INT8) && tensor == DType::kQS8;
}

// Dims from a blob: every dim in [1, kMaxElements] and so is their product
// (checked as it grows, so it never overflows).
void check_dims(const Dims& d, size_t max_rank, const char* what) {
  if (d.size() > max_rank) corrupt(std::string(what) + " rank");
  int64_t n = 1;
  for (int64_t x : d) {
    if (x < 1 || x > kMaxElements) corrupt(std::string(what) + " dims");
    if (x > kMaxElements / n) corrupt(std::string(what) + " too large");
    n *= x;
  }
}

void check_tensor(const TensorDef& t, const Program& p) {
  if (t.dims.empty()) corrupt("tensor rank");
  check_dims(t.dims, kMaxRank, "tensor");
  auto positive = [](float f) { return std::isfinite(f) && f > 0; };
  bool quant_ok = true;
  switch (t.dtype) {
    case DType::kF32:
      quant_ok = t.scales.empty() && t.zero_point == 0 && t.channel_dim == 0;
      break;
    case DType::kQS8:
      quant_ok = t.scales.size() == 1 && positive(t.scales[0]) && t.zero_point >= -128 && t.zero_point <= 127 &&
                 t.channel_dim == 0;
      break;
    case DType::kQC8:
    case DType::kQC32:
      quant_ok = t.channel_dim >= 0 && static_cast<size_t>(t.channel_dim) < t.dims.size() &&
                 static_cast<int64_t>(t.scales.size()) == t.dims[static_cast<size_t>(t.channel_dim)] &&
                 t.zero_point == 0;
      for (float f : t.scales) quant_ok = quant_ok && positive(f);
      break;
    default:
      corrupt("tensor element type");
  }
  if (!quant_ok) corrupt("tensor quantization");
  switch (t.kind) {
    case TensorKind::kInternal:
    case TensorKind::kBuffer:
      if (t.ref != -1) corrupt("tensor reference");
      break;
    case TensorKind::kConstant:
      if (t.ref < 0 || static_cast<size_t>(t.ref) >= p.constants.size()) corrupt("constant reference");
      break;
    case TensorKind::kOutput:
      if (t.ref < 0 || static_cast<size_t>(t.ref) >= p.outputs.size() ||
          numel(t.dims) != p.outputs[static_cast<size_t>(t.ref)].numel()) {
        corrupt("output reference");
      }
      break;
    default:
      corrupt("tensor kind");
  }
}

bool is_8bit(int32_t dtype) { return dtype == TESSERA_DTYPE_UINT8 || dtype == TESSERA_DTYPE_INT8; }

void check_constant(const ConstantDef& c, const Dims& dims, DType dtype) {
  if (c.sources.size() != c.source_dims.size() || c.sources.size() != c.source_dtypes.size() || c.floats.empty() ||
      !std::isfinite(c.floats[0])) {
    corrupt("constant definition");
  }
  for (const Dims& d : c.source_dims) check_dims(d, 8, "constant source");
  // Float constants come from float32 sources; 8-bit ones from 8-bit sources by the byte-moving transforms, the
  // int32 bias by a copy, a table by kLookup. None of these scales.
  const bool byte_transform =
      c.transform == Transform::kCopy || c.transform == Transform::kFilter || c.transform == Transform::kDepthwise;
  for (int32_t st : c.source_dtypes) {
    bool ok = false;
    switch (dtype) {
      case DType::kF32:
        ok = st == TESSERA_DTYPE_FLOAT32 && c.transform != Transform::kLookup;
        break;
      case DType::kQS8:
        ok = is_8bit(st) && (byte_transform || c.transform == Transform::kLookup);
        break;
      case DType::kQC8:
        ok = is_8bit(st) && byte_transform;
        break;
      case DType::kQC32:
        ok = st == TESSERA_DTYPE_INT32 && c.transform == Transform::kCopy;
        break;
      default:
        break;
    }
    if (!ok) corrupt("constant element type");
  }
  if (dtype != DType::kF32 && c.floats[0] != 1.f) corrupt("scaled integer constant");
  auto want_sources = [&](size_t n) {
    if (c.sources.size() != n) corrupt("constant source count");
  };
  const int64_t n = numel(dims);
  switch (c.transform) {
    case Transform::kCopy:
      want_sources(1);
      if (numel(c.source_dims[0]) != n) corrupt("constant size");
      break;
    case Transform::kToNhwc: {
      want_sources(1);
      const Dims& s = c.source_dims[0];  // padded with leading 1s to the rank of `dims`
      if (!has_channels_last(dims.size()) || s.size() > dims.size()) corrupt("constant rank");
      Dims padded(dims.size() - s.size(), 1);
      padded.insert(padded.end(), s.begin(), s.end());
      if (dims != to_nhwc(padded)) corrupt("constant layout");
      break;
    }
    case Transform::kFilter: {
      want_sources(1);
      const Dims s = filter_dims_2d(c.source_dims[0]);
      if (s.size() != 4 || dims != Dims{s[0], s[2], s[3], s[1]}) corrupt("filter");
      break;
    }
    case Transform::kDepthwise: {
      want_sources(1);
      const Dims s = filter_dims_2d(c.source_dims[0]);
      if (s.size() != 4 || s[1] != 1 || dims != Dims{1, s[2], s[3], s[0]}) corrupt("depthwise filter");
      break;
    }
    case Transform::kDeconv: {
      want_sources(1);
      const Dims s = filter_dims_2d(c.source_dims[0]);
      if (c.ints.size() != 1 || s.size() != 4 || c.ints[0] < 1 || s[0] % c.ints[0] != 0 ||
          dims != Dims{s[1] * c.ints[0], s[2], s[3], s[0] / c.ints[0]}) {
        corrupt("deconvolution filter");
      }
      break;
    }
    case Transform::kBroadcastRow:
      want_sources(1);
      if (dims.size() != 1 || (numel(c.source_dims[0]) != 1 && numel(c.source_dims[0]) != n)) corrupt("bias row");
      break;
    case Transform::kBnScale:
    case Transform::kBnShift:
      want_sources(c.transform == Transform::kBnScale ? 2 : 4);
      if (c.floats.size() != 2 || !std::isfinite(c.floats[1])) corrupt("batch norm epsilon");
      for (const Dims& d : c.source_dims) {
        if (numel(d) != n) corrupt("batch norm parameter size");
      }
      break;
    case Transform::kLiteral:
      want_sources(0);
      if (dtype != DType::kF32 || static_cast<int64_t>(c.floats.size()) != n + 1) corrupt("literal size");
      break;
    case Transform::kLookup:
      want_sources(1);
      if (dims.size() != 1 || (n != 256 && n != 65536) || numel(c.source_dims[0]) != n) corrupt("table size");
      break;
    default:
      corrupt("constant transform");
  }
}

}  // namespace

void validate(const Program& p) {
  const size_t nt = p.tensors.size();
  if (p.inputs.size() != p.input_names.size() || p.outputs.size() != p.output_names.size()) corrupt("boundary names");
  for (const auto* list : {&p.inputs, &p.outputs}) {
    for (const ValueType& v : *list) {
      if (!v.is_static() || tessera_plugin::dtype_size(v.dtype) == 0) corrupt("boundary type");
      check_dims(v.dims, 8, "boundary");
    }
  }
  for (const TensorDef& t : p.tensors) check_tensor(t, p);
  std::vector<int> const_uses(p.constants.size(), 0);
  for (const TensorDef& t : p.tensors) {
    if (t.kind != TensorKind::kConstant) continue;
    if (const_uses[static_cast<size_t>(t.ref)]++) corrupt("constant used by two tensors");
    check_constant(p.constants[static_cast<size_t>(t.ref)], t.dims, t.dtype);
  }

  // Execution order: imports, steps, exports. `written` tracks every tensor;
  // `segment_of` which segment wrote an internal one (it must not escape it).
  std::vector<char> written(nt, 0);
  std::vector<int> segment_of(nt, -1);
  auto write = [&](int32_t i, const char* what) {
    if (i < 0 || static_cast<size_t>(i) >= nt) corrupt(std::string(what) + " out of range");
    if (written[static_cast<size_t>(i)]) corrupt(std::string(what) + " writes a tensor twice");
    written[static_cast<size_t>(i)] = 1;
  };
  auto is_buffer = [&](int32_t i) {
    return i >= 0 && static_cast<size_t>(i) < nt && p.tensors[static_cast<size_t>(i)].kind == TensorKind::kBuffer;
  };
  for (size_t i = 0; i < nt; ++i) {
    if (p.tensors[i].kind == TensorKind::kConstant) written[i] = 1;
  }
  for (const Import& im : p.imports) {
    if (im.input < 0 || static_cast<size_t>(im.input) >= p.inputs.size() || !is_buffer(im.tensor)) corrupt("import");
    const ValueType& v = p.inputs[static_cast<size_t>(im.input)];
    const Dims& d = p.tensors[static_cast<size_t>(im.tensor)].dims;
    if (!boundary_dtype_ok(v.dtype, p.tensors[static_cast<size_t>(im.tensor)].dtype)) corrupt("import dtype");
    if (im.transfer == Transfer::kCopy) {
      if (d != xnn_dims(v.dims, false)) corrupt("import shape");
    } else if (im.transfer == Transfer::kNhwc) {
      if (!has_channels_last(v.dims.size()) || d != to_nhwc(v.dims)) corrupt("import layout");
    } else {
      corrupt("import transfer");
    }
    write(im.tensor, "import");
  }
  size_t next_node = 0;
  int segment = 0;
  for (const Step& s : p.steps) {
    if (s.kind != StepKind::kLookup && (s.table != -1 || s.x2 != -1)) corrupt("step operands");
    if (s.kind == StepKind::kSegment) {
      if (s.a < 0 || static_cast<size_t>(s.a) != next_node || s.b <= s.a || static_cast<size_t>(s.b) > p.nodes.size()) {
        corrupt("segment range");
      }
      for (int32_t k = s.a; k < s.b; ++k) {
        const NodeDef& n = p.nodes[static_cast<size_t>(k)];
        std::string why = check_node(n, p.tensors);
        if (!why.empty()) corrupt(why);
        for (int32_t in : n.inputs) {
          size_t i = static_cast<size_t>(in);
          if (!written[i]) corrupt("node reads a tensor before it is written");
          if (p.tensors[i].kind == TensorKind::kInternal && segment_of[i] != segment)
            corrupt("internal tensor crosses a segment");
        }
        write(n.output, "node");
        segment_of[static_cast<size_t>(n.output)] = segment;
      }
      next_node = static_cast<size_t>(s.b);
      ++segment;
    } else if (s.kind == StepKind::kToNhwc || s.kind == StepKind::kToPlain) {
      if (!is_buffer(s.a) || !is_buffer(s.b) || !written[static_cast<size_t>(s.a)]) corrupt("conversion operands");
      const Dims& a = p.tensors[static_cast<size_t>(s.a)].dims;
      const Dims& b = p.tensors[static_cast<size_t>(s.b)].dims;
      if (!has_channels_last(a.size()) || b != (s.kind == StepKind::kToNhwc ? to_nhwc(a) : to_nchw(a))) {
        corrupt("conversion shape");
      }
      if (p.tensors[static_cast<size_t>(s.a)].dtype != p.tensors[static_cast<size_t>(s.b)].dtype)
        corrupt("conversion element type");
      write(s.b, "conversion");
    } else if (s.kind == StepKind::kQuantize || s.kind == StepKind::kLookup) {
      const bool lookup = s.kind == StepKind::kLookup;
      if (!is_buffer(s.a) || !is_buffer(s.b) || !written[static_cast<size_t>(s.a)] ||
          (lookup && s.x2 >= 0 && (!is_buffer(s.x2) || !written[static_cast<size_t>(s.x2)]))) {
        corrupt("step operands");
      }
      const TensorDef& a = p.tensors[static_cast<size_t>(s.a)];
      const TensorDef& b = p.tensors[static_cast<size_t>(s.b)];
      bool ok = a.dims == b.dims && b.dtype == DType::kQS8 && a.dtype == (lookup ? DType::kQS8 : DType::kF32);
      if (lookup) {
        const bool binary = s.x2 >= 0;
        ok = ok && s.table >= 0 && static_cast<size_t>(s.table) < nt;
        if (ok) {
          const TensorDef& t = p.tensors[static_cast<size_t>(s.table)];
          ok = t.kind == TensorKind::kConstant && t.dtype == DType::kQS8 &&
               p.constants[static_cast<size_t>(t.ref)].transform == Transform::kLookup &&
               t.dims == Dims{binary ? 65536 : 256};
        }
        if (ok && binary) {
          const TensorDef& x2 = p.tensors[static_cast<size_t>(s.x2)];
          ok = x2.dims == a.dims && x2.dtype == DType::kQS8;
        }
      } else {
        ok = ok && s.table == -1 && s.x2 == -1;
      }
      if (!ok) corrupt("step shape or element type");
      write(s.b, "step");
    } else {
      corrupt("step kind");
    }
  }
  if (next_node != p.nodes.size()) corrupt("nodes outside every segment");
  if (p.exports.size() != p.outputs.size()) corrupt("export count");
  for (size_t o = 0; o < p.exports.size(); ++o) {
    const Export& e = p.exports[o];
    if (e.tensor < 0 || static_cast<size_t>(e.tensor) >= nt || !written[static_cast<size_t>(e.tensor)])
      corrupt("export");
    const TensorDef& t = p.tensors[static_cast<size_t>(e.tensor)];
    const ValueType& v = p.outputs[o];
    if (!boundary_dtype_ok(v.dtype, t.dtype)) corrupt("export dtype");
    bool ok = false;
    switch (e.transfer) {
      case Transfer::kCopy:
        ok = t.kind == TensorKind::kBuffer && t.dims == xnn_dims(v.dims, false);
        break;
      case Transfer::kNhwc:
        ok = t.kind == TensorKind::kBuffer && has_channels_last(v.dims.size()) && t.dims == to_nhwc(v.dims);
        break;
      case Transfer::kDirect:  // a uint8 output is flipped on the way out, so never written in place
        ok = t.kind == TensorKind::kOutput && t.ref == static_cast<int32_t>(o) && t.dims == xnn_dims(v.dims, false) &&
             v.dtype != TESSERA_DTYPE_UINT8;
        break;
      default:
        break;
    }
    if (!ok) corrupt("export shape or transfer");
  }
  // XNNPACK leaves an internal value that no node reads unallocated (and then
  // asserts when a node writes it): every written internal tensor is read.
  std::vector<char> read(nt, 0);
  for (const NodeDef& n : p.nodes) {
    for (int32_t i : n.inputs) read[static_cast<size_t>(i)] = 1;
  }
  for (size_t i = 0; i < nt; ++i) {
    if (p.tensors[i].kind == TensorKind::kInternal && written[i] && !read[i]) corrupt("internal tensor never read");
    if (p.tensors[i].kind == TensorKind::kBuffer && !written[i]) corrupt("buffer never written");
  }
  // A kOutput tensor belongs to exactly the output that exports it.
  for (size_t i = 0; i < nt; ++i) {
    const TensorDef& t = p.tensors[i];
    if (t.kind == TensorKind::kOutput && p.exports[static_cast<size_t>(t.ref)].tensor != static_cast<int32_t>(i)) {
      corrupt("output tensor not exported");
    }
  }
}

}  // namespace tessera_xnn
