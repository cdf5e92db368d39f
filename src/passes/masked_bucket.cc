#include "passes/masked_bucket.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "ops/masked_bucket.h"
#include "passes/shape_inference.h"

namespace tessera {
namespace {

using masked::Extent;

// A tensor at the bucket's dims: its valid size per varying axis, whether the positions past them hold zeros, and
// whether no element is negative (then zeros past the valid sizes are as good as a max pool's -inf padding: every
// window of a valid output holds a valid element, which is at least 0).
struct Masked {
  std::map<int64_t, Extent> ext;
  bool clean = false;
  bool nonneg = false;
};

// Pointwise ops that map finite values to finite values (a mask multiplies what they leave past the valid sizes by
// 0, which a non-finite value would turn into NaN); those that keep zeros zero keep a clean tensor clean.
const std::set<std::string> kPointwise = {
    "Relu",    "LeakyRelu", "Sigmoid", "Tanh",     "Clip", "HardSigmoid", "HardSwish", "Elu",   "Selu", "Identity",
    "Dropout", "Abs",       "Neg",     "Softsign", "Erf",  "Floor",       "Ceil",      "Round", "Sign"};
const std::set<std::string> kKeepsZero = {"Relu", "Identity", "Dropout", "Abs", "Neg", "LeakyRelu"};
// Pointwise ops whose results are never negative, and those that keep a tensor's sign.
const std::set<std::string> kNonNegative = {"Relu", "Sigmoid", "HardSigmoid", "Abs"};
const std::set<std::string> kKeepsSign = {"Identity", "Dropout"};
const std::set<std::string> kBinary = {"Add", "Sub", "Mul", "Max", "Min"};

struct Window {
  int64_t begin = 0, end = 0, extent = 1, stride = 1, dilation = 1;  // pads, dilated kernel extent, stride, dilation
};

// The window of a Conv or pool along spatial axis `axis` (>= 2) of its input, or nothing where the node's padding
// depends on the size (auto_pad SAME_*) or its attributes do not say.
std::optional<Window> window_of(const Graph& g, const Node& n, int64_t rank, int64_t axis) {
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID") return std::nullopt;
  const auto nsp = static_cast<size_t>(rank - 2), i = static_cast<size_t>(axis - 2);
  std::vector<int64_t> kernel = n.attr_ints("kernel_shape");
  if (kernel.empty() && n.op_type == "Conv" && n.inputs.size() > 1) {
    const ValueInfo* wi = g.info(n.inputs[1]);
    const Tensor* wc = g.constant(n.inputs[1]);
    if (wc)
      kernel.assign(wc->dims().begin() + 2, wc->dims().end());
    else if (wi && wi->shape.fully_known() && wi->shape.rank() == rank) {
      const Dims wd = wi->shape.concrete();
      kernel.assign(wd.begin() + 2, wd.end());
    }
  }
  const std::vector<int64_t> strides = n.attr_ints("strides", std::vector<int64_t>(nsp, 1));
  const std::vector<int64_t> dil = n.attr_ints("dilations", std::vector<int64_t>(nsp, 1));
  std::vector<int64_t> pads = n.attr_ints("pads", std::vector<int64_t>(2 * nsp, 0));
  if (auto_pad == "VALID") pads.assign(2 * nsp, 0);
  if (kernel.size() != nsp || strides.size() != nsp || dil.size() != nsp || pads.size() != 2 * nsp) return std::nullopt;
  Window w;
  w.begin = pads[i];
  w.end = pads[i + nsp];
  w.extent = dil[i] * (kernel[i] - 1) + 1;
  w.stride = strides[i];
  w.dilation = dil[i];
  if (w.stride <= 0 || w.extent <= 0 || w.begin < 0 || w.end < 0) return std::nullopt;
  return w;
}

int64_t rank_of(const Graph& g, const std::string& v) {
  const ValueInfo* vi = g.info(v);
  return vi && vi->shape.rank_known ? vi->shape.rank() : -1;
}

// Whether constant or static value v, broadcast to rank `rank` (numpy: aligned at the end), is 1 along every axis
// in `axes` (it does not vary along them).
bool flat_along(const Graph& g, const std::string& v, int64_t rank, const std::map<int64_t, Extent>& axes) {
  const ValueInfo* vi = g.info(v);
  if (!g.is_constant(v) && !(vi && vi->shape.fully_known())) return false;
  const Dims d = g.is_constant(v) ? g.constant(v)->dims() : vi->shape.concrete();
  if (static_cast<int64_t>(d.size()) > rank) return false;
  const int64_t lead = rank - static_cast<int64_t>(d.size());
  for (const auto& [axis, e] : axes) {
    if (axis >= lead && d[static_cast<size_t>(axis - lead)] != 1) return false;
  }
  return true;
}

// Whether Clip node n's bounds (attributes `min`, `max` before opset 11, else constant inputs 1 and 2) are both at
// least 0, the upper one where given (a bound below the lower one is what the result takes).
bool clip_nonneg(const Graph& g, const Node& n) {
  // Bound k: `absent` where none is given, NaN (never >= 0) where it is not a constant scalar.
  auto bound = [&](size_t k, const char* attr, double absent) {
    if (n.inputs.size() > k && !n.inputs[k].empty()) {
      const Tensor* t = g.constant(n.inputs[k]);
      return t && t->numel() == 1 ? t->as_double(0) : std::nan("");
    }
    return n.attrs.count(attr) ? static_cast<double>(n.attr_float(attr, 0.f)) : absent;
  };
  const double inf = std::numeric_limits<double>::infinity();
  return bound(1, "min", -inf) >= 0.0 && bound(2, "max", inf) >= 0.0;
}

struct Decision {
  bool ok = false;
  std::vector<bool> needs_clean;  // per input: the positions past its valid sizes must read as zeros
  Masked out;
};

// What node n does with the masked tensors among its inputs (`in[k]`, null where input k is not masked).
Decision decide(const Graph& g, const Node& n, const std::vector<const Masked*>& in) {
  Decision d;
  d.needs_clean.assign(n.inputs.size(), false);
  if (!n.domain.empty() && n.domain != "ai.onnx") return d;
  const int outputs = static_cast<int>(
      std::count_if(n.outputs.begin(), n.outputs.end(), [](const std::string& o) { return !o.empty(); }));
  if (outputs != 1 || n.outputs.empty() || n.outputs[0].empty()) return d;
  const Masked* x = in.empty() ? nullptr : in[0];
  const std::string& op = n.op_type;
  if (op == "Conv" || op == "MaxPool" || op == "AveragePool" || op == "LpPool") {
    // Only X varies; the weights and bias are constants.
    for (size_t k = 1; k < in.size(); ++k) {
      if (in[k]) return d;
    }
    if (!x) return d;
    const int64_t rank = rank_of(g, n.inputs[0]);
    if (rank < 3 || rank > 5 || (op != "Conv" && n.attr_int("ceil_mode", 0) != 0)) return d;
    d.out.ext = x->ext;
    for (auto& [axis, e] : d.out.ext) {
      if (axis < 2) return d;
      const auto w = window_of(g, n, rank, axis);
      if (!w) return d;
      // A pool's end padding is -inf (max) or left out of the count (average, unless count_include_pad): zeros
      // stand for it only in a max pool of a tensor without negative elements, or an average that counts the pads.
      // (A max pool's windows must each hold an input element, as contiguous windows with pads below their
      // extent do: ONNX's maximum of a window of padding alone is -inf, not the zeros'.)
      const bool max_pads_read_as_zeros =
          op == "MaxPool" && x->nonneg && w->dilation == 1 && w->begin < w->extent && w->end < w->extent;
      if (op != "Conv" && w->end > 0 && !max_pads_read_as_zeros &&
          !(op == "AveragePool" && n.attr_int("count_include_pad", 0) != 0)) {
        return d;
      }
      if (w->end > 0) d.needs_clean[0] = true;
      // v -> floor((v + a) / s) + 1; with s = 1, v + a + 1, which a = -1 leaves as it is, and which the step before,
      // also of stride 1, can take in (so that tensors of one size have one extent, and share a mask).
      const int64_t a = w->begin + w->end - w->extent;
      if (w->stride == 1 && a == -1) continue;
      if (w->stride == 1 && !e.steps.empty() && e.steps.back().second == 1) {
        e.steps.back().first += a + 1;
        if (e.steps.back().first == -1) e.steps.pop_back();
        continue;
      }
      e.steps.emplace_back(a, w->stride);
    }
    d.out.nonneg = op != "Conv" && op != "LpPool" && x->nonneg;
    return d.ok = true, d;
  }
  if (kPointwise.count(op) || op == "BatchNormalization" || op == "PRelu") {
    if (!x) return d;
    const int64_t rank = rank_of(g, n.inputs[0]);
    // BatchNormalization's parameters are per channel; the others' operands broadcast (numpy).
    const bool per_channel = op == "BatchNormalization";
    for (size_t k = 1; k < n.inputs.size(); ++k) {
      if (in[k] || (!n.inputs[k].empty() && !per_channel && !flat_along(g, n.inputs[k], rank, x->ext))) return d;
    }
    d.out.ext = x->ext;
    d.out.clean = x->clean && kKeepsZero.count(op);
    d.out.nonneg = kNonNegative.count(op) || (kKeepsSign.count(op) && x->nonneg) || (op == "Clip" && clip_nonneg(g, n));
    return d.ok = true, d;
  }
  // Ops that move axes: the masked ones follow. Squeeze and Unsqueeze (axes from the attribute or a constant input),
  // Transpose; a MatMul by a constant [K, N] (a per-position classifier), a Softmax over another axis.
  if (op == "Squeeze" || op == "Unsqueeze" || op == "Transpose" || op == "MatMul" || op == "Softmax" ||
      op == "LogSoftmax") {
    if (!x) return d;
    for (size_t k = 1; k < in.size(); ++k) {
      if (in[k]) return d;
    }
    const int64_t rank = rank_of(g, n.inputs[0]), out_rank = rank_of(g, n.outputs[0]);
    if (rank < 0 || out_rank < 0) return d;
    std::map<int64_t, int64_t> to;  // input axis -> output axis
    if (op == "Squeeze" || op == "Unsqueeze") {
      std::vector<int64_t> axes = n.attr_ints("axes");
      if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
        const Tensor* a = g.constant(n.inputs[1]);
        if (!a || a->dtype() != DType::kInt64) return d;
        axes.assign(a->data<int64_t>(), a->data<int64_t>() + a->numel());
      }
      if (axes.empty()) return d;  // Squeeze of every 1: which ones depends on the sizes
      const int64_t r = op == "Squeeze" ? rank : out_rank;
      std::set<int64_t> set;
      for (int64_t a : axes) set.insert(a < 0 ? a + r : a);
      for (int64_t i = 0, j = 0; i < rank; ++i) {
        if (op == "Squeeze") {
          if (set.count(i)) continue;
          to[i] = j++;
        } else {
          while (set.count(j)) ++j;
          to[i] = j++;
        }
      }
    } else if (op == "Transpose") {
      std::vector<int64_t> perm = n.attr_ints("perm");
      if (perm.empty()) {
        for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
      }
      for (size_t j = 0; j < perm.size(); ++j) to[perm[j]] = static_cast<int64_t>(j);
    } else if (op == "MatMul") {
      const Tensor* b = n.inputs.size() > 1 ? g.constant(n.inputs[1]) : nullptr;
      if (!b || b->rank() != 2 || rank < 2 || x->ext.count(rank - 1)) return d;  // not along K
      for (int64_t i = 0; i < rank; ++i) to[i] = i;
    } else {
      int64_t axis = n.attr_int("axis", g.opset >= 13 ? -1 : 1);
      if (axis < 0) axis += rank;
      if (g.opset < 13) return d;  // before 13 it flattens from `axis` on
      if (x->ext.count(axis)) return d;
      for (int64_t i = 0; i < rank; ++i) to[i] = i;
    }
    for (const auto& [axis, e] : x->ext) {
      auto it = to.find(axis);
      if (it == to.end()) return d;
      d.out.ext[it->second] = e;
    }
    return d.ok = true, d;
  }
  if (kBinary.count(op) || op == "Concat") {
    const Masked* first = nullptr;
    for (const Masked* m : in) {
      if (m && !first) first = m;
    }
    if (!first) return d;
    const int64_t rank = rank_of(g, n.outputs[0]);
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (in[k]) {
        if (in[k]->ext != first->ext || rank_of(g, n.inputs[k]) != rank) return d;
      } else if (op == "Concat" || !flat_along(g, n.inputs[k], rank, first->ext)) {
        return d;
      }
    }
    if (op == "Concat") {
      int64_t axis = n.attr_int("axis", 0);
      if (axis < 0) axis += rank;
      if (first->ext.count(axis)) return d;
    }
    d.out.ext = first->ext;
    // Sums, maxima, products and concatenations of tensors without negative elements have none (constants count as
    // possibly negative).
    d.out.nonneg =
        op != "Sub" && op != "Min" && std::all_of(in.begin(), in.end(), [](const Masked* m) { return m && m->nonneg; });
    return d.ok = true, d;
  }
  return d;
}

}  // namespace

Expected<Graph> masked_bucket_graph(const Graph& g, const std::vector<Dims>& upper) {
  if (upper.size() != g.inputs.size()) return InvalidInput("masked bucket: one dims per input needed");
  int varying = -1;
  std::vector<int64_t> axes;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const ValueInfo* vi = g.info(g.inputs[i]);
    if (!vi || !vi->shape.rank_known || vi->shape.rank() != static_cast<int>(upper[i].size())) {
      return InvalidInput("masked bucket: input '" + g.inputs[i] + "' has no rank matching " + dims_str(upper[i]));
    }
    for (int k = 0; k < vi->shape.rank(); ++k) {
      if (vi->shape[k].known()) {
        if (vi->shape[k].value != upper[i][static_cast<size_t>(k)]) {
          return InvalidInput("masked bucket: input '" + g.inputs[i] + "' is " + vi->shape.str() + ", not " +
                              dims_str(upper[i]));
        }
        continue;
      }
      if (varying >= 0 && varying != static_cast<int>(i)) {
        return InvalidInput("masked bucket: inputs '" + g.inputs[static_cast<size_t>(varying)] + "' and '" +
                            g.inputs[i] + "' both vary");
      }
      varying = static_cast<int>(i);
      axes.push_back(k);
    }
  }
  if (varying < 0) return InvalidInput("masked bucket: no input varies");
  const std::string x = g.inputs[static_cast<size_t>(varying)];
  const ValueInfo xi = *g.info(x);
  if (xi.shape.rank() < 3 || xi.shape.rank() > 5 || axes.front() < 2) {
    return InvalidInput("masked bucket: input '" + x + "' " + xi.shape.str() +
                        " varies outside the spatial dims of a 3-D to 5-D tensor");
  }

  Graph out = g;
  out.nodes.clear();
  const std::string xp = out.unique_name(x + "_padded");
  {
    Node pad;
    pad.name = out.unique_name("pad_" + x);
    pad.op_type = "PadTo";
    pad.domain = masked::kDomain;
    pad.inputs = {x};
    pad.outputs = {xp};
    pad.attrs["dims"] = Attribute::Ints(upper[static_cast<size_t>(varying)]);
    out.nodes.push_back(std::move(pad));
  }
  std::map<std::string, Masked> info;
  Masked m0;
  for (int64_t a : axes) m0.ext[a] = Extent{a, {}};
  m0.clean = true;
  info[xp] = m0;
  // Every masked tensor's dims at the bucket's size, from shape inference over g pinned at `upper`.
  Graph pinned = g;
  for (const Node& n : pinned.nodes) {
    for (const std::string& o : n.outputs) pinned.values.erase(o);
  }
  for (size_t i = 0; i < g.inputs.size(); ++i) pinned.values[g.inputs[i]].shape = Shape::FromDims(upper[i]);
  TSR_RETURN_IF_ERROR(infer_shapes(pinned));
  pinned.values[xp] = pinned.values.at(x);
  auto bucket_dims = [&](const std::string& v) -> Expected<Dims> {
    const ValueInfo* vi = pinned.info(v);
    if (!vi || !vi->shape.fully_known()) return InvalidInput("masked bucket: no static dims for '" + v + "'");
    return vi->shape.concrete();
  };
  std::map<std::string, std::string> clean_of, sliced_of;
  std::map<std::pair<Dims, std::vector<std::pair<int64_t, Extent>>>, std::string> masks;  // one per dims and extents
  auto ext_list = [](const Masked& m) { return std::vector<std::pair<int64_t, Extent>>(m.ext.begin(), m.ext.end()); };
  // t with the positions past its valid sizes multiplied by 0.
  auto cleaned = [&](const std::string& t) -> Expected<std::string> {
    if (auto it = clean_of.find(t); it != clean_of.end()) return it->second;
    Dims td;
    TSR_ASSIGN_OR_RETURN(td, bucket_dims(t));
    Dims md(td.size(), 1);
    std::copy(td.begin() + 2, td.end(), md.begin() + 2);
    std::string& m = masks[{md, ext_list(info.at(t))}];
    if (m.empty()) {
      Node mask;
      mask.name = out.unique_name("mask_" + t);
      mask.op_type = "ValidMask";
      mask.domain = masked::kDomain;
      mask.inputs = {x};
      mask.outputs = {out.unique_name(t + "_mask")};
      mask.attrs["dims"] = Attribute::Ints(md);
      masked::set_extent_attrs(mask, ext_list(info.at(t)));
      m = mask.outputs[0];
      out.nodes.push_back(std::move(mask));
    }
    Node mul;
    mul.name = out.unique_name("masked_" + t);
    mul.op_type = "Mul";
    mul.inputs = {t, m};
    mul.outputs = {out.unique_name(t + "_masked")};
    Masked c = info.at(t);
    c.clean = true;
    info[mul.outputs[0]] = c;
    clean_of[t] = mul.outputs[0];
    out.nodes.push_back(std::move(mul));
    return clean_of[t];
  };
  // t at its valid sizes (the padded input: the input itself).
  auto sliced = [&](const std::string& t) -> std::string {
    if (t == xp) return x;
    if (auto it = sliced_of.find(t); it != sliced_of.end()) return it->second;
    Node s;
    s.name = out.unique_name("slice_" + t);
    s.op_type = "SliceValid";
    s.domain = masked::kDomain;
    s.inputs = {t, x};
    s.outputs = {out.unique_name(t + "_valid")};
    masked::set_extent_attrs(s, ext_list(info.at(t)));
    sliced_of[t] = s.outputs[0];
    out.nodes.push_back(std::move(s));
    return sliced_of[t];
  };
  int convs = 0;
  for (const Node& n0 : g.nodes) {
    Node n = n0;
    std::vector<const Masked*> in(n.inputs.size(), nullptr);
    bool any = false;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (n.inputs[k] == x) n.inputs[k] = xp;
      if (auto it = info.find(n.inputs[k]); it != info.end()) in[k] = &it->second, any = true;
    }
    if (!any) {
      out.nodes.push_back(std::move(n));
      continue;
    }
    Decision d = decide(pinned, n, in);
    if (d.ok) {
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        if (d.needs_clean[k] && in[k] && !in[k]->clean) {
          TSR_ASSIGN_OR_RETURN(n.inputs[k], cleaned(n.inputs[k]));
        }
      }
      convs += n.op_type == "Conv";
      info[n.outputs[0]] = std::move(d.out);
    } else {
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        if (in[k]) n.inputs[k] = sliced(n.inputs[k]);
      }
    }
    out.nodes.push_back(std::move(n));
  }
  if (convs == 0) return InvalidInput("masked bucket: no convolution reads input '" + x + "' along its varying dims");
  // Graph outputs computed at the bucket's dims: their producer writes NAME_bucket, sliced into NAME.
  for (const std::string& o : g.outputs) {
    if (!info.count(o)) continue;
    const std::string full = out.unique_name(o + "_bucket");
    for (Node& n : out.nodes) {
      for (std::string& v : n.inputs) {
        if (v == o) v = full;
      }
      for (std::string& v : n.outputs) {
        if (v == o) v = full;
      }
    }
    info[full] = info.at(o);
    Node s;
    s.name = out.unique_name("slice_" + o);
    s.op_type = "SliceValid";
    s.domain = masked::kDomain;
    s.inputs = {full, x};
    s.outputs = {o};
    masked::set_extent_attrs(s, ext_list(info.at(full)));
    out.nodes.push_back(std::move(s));
  }
  // Types afresh: the masked part at the bucket's dims, the rest as the slices give it.
  for (const Node& n : out.nodes) {
    for (const std::string& o : n.outputs) out.values.erase(o);
  }
  TSR_RETURN_IF_ERROR(infer_shapes(out));
  TSR_RETURN_IF_ERROR(verify_graph(out));
  return out;
}

}  // namespace tessera
