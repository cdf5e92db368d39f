#include "dnnl_primitives.h"

#include <malloc.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace tessera_dnnl {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using tag = memory::format_tag;
constexpr memory::data_type kF32 = memory::data_type::f32;

memory::data_type data_type_of(int32_t dtype) {
  switch (dtype) {
    case TESSERA_DTYPE_UINT8: return memory::data_type::u8;
    case TESSERA_DTYPE_INT8: return memory::data_type::s8;
    case TESSERA_DTYPE_INT32: return memory::data_type::s32;
    default: return kF32;
  }
}

memory::desc plain_md(const Dims& dims, memory::data_type dt) {
  const Dims d = dims.empty() ? Dims{1} : dims;
  return memory::desc(d, dt, row_major(d));
}

memory::desc channels_last_md(const Dims& dims, memory::data_type dt) {
  return memory::desc(dims, dt, dims.size() == 3 ? tag::nwc : dims.size() == 4 ? tag::nhwc : tag::ndhwc);
}

memory::desc strided_md(const Dims& dims, const Dims& strides, memory::data_type dt) {
  return memory::desc(dims, dt, strides);
}

Dims row_major(const Dims& dims) {
  Dims s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

bool is_row_major(const memory::desc& md) {
  if (md.data.format_kind != dnnl_blocked || md.data.ndims < 1 || md.data.format_desc.blocking.inner_nblks != 0) {
    return false;
  }
  const Dims d(md.data.dims, md.data.dims + md.data.ndims);
  const Dims s(md.data.format_desc.blocking.strides, md.data.format_desc.blocking.strides + md.data.ndims);
  return s == row_major(d) && md.data.offset0 == 0;
}

bool is_plain(const memory::desc& md) {
  if (md.data.format_kind != dnnl_blocked || md.data.ndims < 1) return false;
  return md == plain_md(Dims(md.data.dims, md.data.dims + md.data.ndims), md.data_type());
}

namespace {

struct Spatial {
  Dims kernel, strides, dil, pb, pe;  // dil in oneDNN's convention: 0 = dense
  int64_t group = 1;
};

Spatial spatial_of(const Op& op) {
  const auto r = static_cast<size_t>(op.ints[0]);
  const bool pool = op.kind == OpKind::kPool;
  auto block = [&](size_t b) { return Dims(op.ints.begin() + 1 + b * r, op.ints.begin() + 1 + (b + 1) * r); };
  Spatial s;
  size_t b = 0;
  if (pool) s.kernel = block(b++);
  s.strides = block(b++);
  s.dil = block(b++);
  for (int64_t& d : s.dil) d -= 1;
  s.pb = block(b++);
  s.pe = block(b++);
  if (!pool) s.group = op.ints.back();
  return s;
}

// A MatMul operand: stored row-major as `stored`, read with its dims
// permuted by `perm`.
memory::desc matmul_view(const Dims& stored, const Dims& perm) {
  const Dims rm = row_major(stored);
  Dims d, s;
  for (int64_t p : perm) {
    d.push_back(stored[static_cast<size_t>(p)]);
    s.push_back(rm[static_cast<size_t>(p)]);
  }
  return strided_md(d, s);
}

memory::desc any_md(const Dims& dims, memory::data_type dt = kF32) { return memory::desc(dims, dt, tag::any); }

// The data type an op computes its sources and weights in.
memory::data_type compute_type(const Op& op) { return op.bf16 ? memory::data_type::bf16 : kF32; }

memory::data_type type_of(const std::vector<Value>& v, int32_t id) { return data_type_of(v[static_cast<size_t>(id)].dtype); }

Dims dims_of(const memory::desc& md) { return Dims(md.data.dims, md.data.dims + md.data.ndims); }

// Conv weights [M, C/g, k...] as oneDNN's [g, M/g, C/g, k...] (g > 1);
// ConvTranspose weights [C, M/g, k...] as [g, M/g, C/g, k...] / [M, C, k...].
memory::desc weights_view(const Op& op, const Dims& w, int64_t g, memory::data_type dt) {
  const Dims k(w.begin() + 2, w.end());
  const int64_t kn = numel(k);
  Dims dims, strides;
  if (op.kind == OpKind::kConv || op.kind == OpKind::kQConv || op.kind == OpKind::kDynConv) {
    if (g == 1) return plain_md(w, dt);
    dims = {g, w[0] / g, w[1]};
    dims.insert(dims.end(), k.begin(), k.end());
    return plain_md(dims, dt);
  }
  const int64_t cg = w[0] / g, mg = w[1];
  Dims ks = row_major(k);
  if (g == 1) {
    dims = {mg, w[0]};
    strides = {kn, mg * kn};
  } else {
    dims = {g, mg, cg};
    strides = {cg * mg * kn, kn, mg * kn};
  }
  dims.insert(dims.end(), k.begin(), k.end());
  strides.insert(strides.end(), ks.begin(), ks.end());
  return strided_md(dims, strides);
}

}  // namespace

bool src_zero_point_in_bias(const Op& op) {
  if (op.kind != OpKind::kQConv || op.floats.empty() || op.floats[0] == 0) return false;
  const Spatial s = spatial_of(op);
  return std::all_of(s.pb.begin(), s.pb.end(), [](int64_t p) { return p == 0; }) &&
         std::all_of(s.pe.begin(), s.pe.end(), [](int64_t p) { return p <= 0; });
}

int plane_operand(const Op& op, const std::vector<Value>& v) {
  if (op.kind != OpKind::kBinary || op.in.size() != 2 || !op.post.empty() ||
      (op.alg != dnnl_binary_mul && op.alg != dnnl_binary_add)) {
    return -1;
  }
  const Dims& y = v[static_cast<size_t>(op.out)].dims;
  if (y.size() < 3 || y.size() > 5 || y[1] < 2) return -1;
  for (int k = 0; k < 2; ++k) {
    const Value& x = v[static_cast<size_t>(op.in[static_cast<size_t>(k)])];
    const Value& p = v[static_cast<size_t>(op.in[static_cast<size_t>(1 - k)])];
    if (x.dims != y || x.dtype != TESSERA_DTYPE_FLOAT32 || p.dtype != TESSERA_DTYPE_FLOAT32 ||
        v[static_cast<size_t>(op.out)].dtype != TESSERA_DTYPE_FLOAT32 || p.dims.size() != y.size()) {
      continue;
    }
    const Dims& pd = p.dims;
    const bool plane = (pd[0] == 1 || pd[0] == y[0]) && pd[1] == 1 &&
                       std::equal(pd.begin() + 2, pd.end(), y.begin() + 2) && numel(Dims(pd.begin() + 2, pd.end())) > 1;
    if (plane) return k == 0 ? 1 : 0;
  }
  return -1;
}

bool own_dw_int8(const Op& op, const std::vector<Value>& v) {
  if (op.kind != OpKind::kQConv || op.ints.empty() || op.ints[0] != 2 || !dw_int8_cpu()) return false;
  const Value& x = v[static_cast<size_t>(op.in[0])];
  const Value& w = v[static_cast<size_t>(op.in[1])];
  const Spatial s = spatial_of(op);
  const int64_t dil[2] = {s.dil[0] + 1, s.dil[1] + 1};
  if (x.dims.size() != 4 || w.dims.size() != 4 || w.dims[1] != 1 || s.group != x.dims[1] || w.dims[0] != x.dims[1] ||
      !dw_int8_geometry(w.dims[2], w.dims[3], dil) || w.kind != ValueKind::kConstant ||
      (op.in[2] >= 0 && v[static_cast<size_t>(op.in[2])].kind != ValueKind::kConstant)) {
    return false;
  }
  if (op.post.size() > 1 ||
      (op.post.size() == 1 && (op.post[0].kind != PostKind::kEltwise || op.post[0].alg != dnnl_eltwise_clip))) {
    return false;
  }
  return std::all_of(s.pb.begin(), s.pb.end(), [](int64_t p) { return p >= 0; }) &&
         std::all_of(s.pe.begin(), s.pe.end(), [](int64_t p) { return p >= 0; });
}

std::unique_ptr<DwInt8> own_dw_int8_kernel(const Op& op, const std::vector<Value>& v, const int8_t* w,
                                           const int32_t* b) {
  const Dims& xd = v[static_cast<size_t>(op.in[0])].dims;
  const Spatial s = spatial_of(op);
  const bool clip = !op.post.empty();
  return make_dw_int8(xd[1], xd[2], xd[3], v[static_cast<size_t>(op.in[1])].dims[2], s.strides.data(), s.pb.data(),
                      s.pe.data(), w, b, op.floats.data() + 2, op.floats.size() - 2, static_cast<int32_t>(op.floats[0]),
                      v[static_cast<size_t>(op.in[0])].dtype == TESSERA_DTYPE_INT8,
                      v[static_cast<size_t>(op.out)].dtype == TESSERA_DTYPE_INT8, static_cast<int32_t>(op.floats[1]),
                      clip ? op.post[0].alpha : -std::numeric_limits<float>::infinity(),
                      clip ? op.post[0].beta : std::numeric_limits<float>::infinity());
}

namespace {

// `binary_mds`, when given: the descriptors of op's binary post-ops' operands, in order (else post_operand_md's).
dnnl::primitive_attr attr_for(const Op& op, const std::vector<Value>& v,
                              const std::vector<memory::desc>* binary_mds = nullptr) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (op.kind == OpKind::kQConv || op.kind == OpKind::kQMatMul) {  // floats: {x_zero_point, y_zero_point, scale...}
    // Per output channel (convolution) or per column (matmul): dim 1 of the destination either way.
    const std::vector<float> scales(op.floats.begin() + 2, op.floats.end());
    attr.set_output_scales(scales.size() == 1 ? 0 : 1 << 1, scales);
    // A zero point no window of the source's padding reads is in the bias instead (src_zero_point_in_bias): with
    // it, oneDNN 2.6 leaves its AMX brgemm convolutions too.
    if (op.floats[0] != 0 && !src_zero_point_in_bias(op)) {
      attr.set_zero_points(DNNL_ARG_SRC, 0, {static_cast<int32_t>(op.floats[0])});
    }
    // Rounded first (half to even), the result is round(v) + zero point, as ONNX Runtime and the native kernel
    // compute it, not round(v + zero point), which the float sum's own rounding can move across a half.
    dnnl::post_ops po;
    po.append_eltwise(1.f, algorithm::eltwise_round, 0.f, 0.f);
    // A clamp table folded into the product (fusion): its clip on round(v), before the zero point is added. A
    // residual QLinearAdd folded in (absorb_qlinear_adds): that clip, its linear step (the zero point inside) and
    // the sum of the other operand, scaled.
    bool sum = false;
    for (const PostOp& p : op.post) {
      if (p.kind == PostKind::kSum) {
        po.append_sum(p.alpha);
        sum = true;
      } else {
        po.append_eltwise(1.f, static_cast<algorithm>(p.alg), p.alpha, p.beta);
      }
    }
    // The destination's zero point as a last post-op (round(v) + zero point is exact in float), not as oneDNN's
    // zero point attribute: with that attribute, oneDNN 2.6 leaves its AMX brgemm kernels for others 2-5x slower.
    if (op.floats[1] != 0 && !sum) po.append_eltwise(1.f, algorithm::eltwise_linear, 1.f, op.floats[1]);
    attr.set_post_ops(po);
    return attr;
  }
  dnnl::post_ops po;
  if (op.kind == OpKind::kDynConv || op.kind == OpKind::kDynMatMul) {
    // The source's zero point and the output scale are known at run time only. oneDNN 2.6's int8 convolutions take
    // no run-time output scale, so the scale is a binary multiply, post-op 0 (dyn_scale_md), which rounds the
    // product as the model's Mul does; the convolution's own scale stays 1 (int32 to float, exact).
    attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    po.append_binary(algorithm::binary_mul, dyn_scale_md(op, v));
  }
  if (po.len() == 0 && op.post.empty()) return attr;
  size_t binary = 0;
  for (const PostOp& p : op.post) {
    switch (p.kind) {
      case PostKind::kEltwise:
        po.append_eltwise(1.f, static_cast<algorithm>(p.alg), p.alpha, p.beta);
        break;
      case PostKind::kSum:
        po.append_sum(1.f);
        break;
      case PostKind::kBinary:
        po.append_binary(static_cast<algorithm>(p.alg),
                         binary_mds ? (*binary_mds)[binary++] : post_operand_md(op, p, v));
        break;
    }
  }
  attr.set_post_ops(po);
  return attr;
}

}  // namespace

memory::desc dyn_scale_md(const Op& op, const std::vector<Value>& v) {
  Dims d(dst_dims(op, v).size(), 1);
  d[op.kind == OpKind::kDynConv ? 1 : d.size() - 1] = static_cast<int64_t>(op.floats.size());
  return plain_md(d);
}

Dims dst_dims(const Op& op, const std::vector<Value>& v) {
  const Dims& y = v[static_cast<size_t>(op.out)].dims;
  switch (op.kind) {
    case OpKind::kMatMul: {
      const auto r = static_cast<size_t>(op.ints[0]);
      MatMulOperands mo;
      if (!matmul_operands(op, &mo)) return y;
      const Dims& a = mo.read[0];
      const Dims& b = mo.read[1];
      Dims d;
      broadcast(Dims(a.begin(), a.end() - 2), Dims(b.begin(), b.end() - 2), &d);
      d.push_back(a[r - 2]);
      d.push_back(b[r - 1]);
      return d;
    }
    case OpKind::kSoftmax:
      return Dims(op.ints.begin() + 1, op.ints.end() - 1);
    case OpKind::kLayerNorm:
      return {op.ints[0], op.ints[1]};
    case OpKind::kQMatMul:
    case OpKind::kDynMatMul:
      return {op.ints[0], op.ints[2]};
    case OpKind::kReduce:
      return op.ints.size() > 1 ? Dims(op.ints.begin() + 1, op.ints.end()) : Dims{1};
    default:
      return y.empty() ? Dims{1} : y;
  }
}

memory::desc post_operand_md(const Op& op, const PostOp& po, const std::vector<Value>& v) {
  const Dims d = dst_dims(op, v);
  const Dims& operand = v[static_cast<size_t>(po.operand)].dims;
  Dims view;
  // A view that does not fit makes the primitive descriptor fail, which refuses the op.
  if (!post_operand_view(operand, v[static_cast<size_t>(op.out)].dims, d, &view)) view = operand;
  return plain_md(view);
}

std::vector<OperandSpec> operand_specs(const Op& op, const std::vector<Value>& v) {
  std::vector<OperandSpec> specs(op.in.size());
  auto dims = [&](size_t k) -> const Dims& { return v[static_cast<size_t>(op.in[k])].dims; };
  auto set = [&](size_t k, Layout l, int arg, memory::desc md = {}, memory::desc view = {}) {
    if (op.in[k] < 0) return;
    if (l == Layout::kPlain && view.data.ndims == 0) view = md;
    specs[k] = OperandSpec{l, arg, md, view};
  };
  auto constant = [&](size_t k) { return op.in[k] >= 0 && v[static_cast<size_t>(op.in[k])].kind == ValueKind::kConstant; };
  const Dims out = dst_dims(op, v);
  switch (op.kind) {
    case OpKind::kConv:
    case OpKind::kDeconv: {
      const int64_t g = op.ints.back();
      memory::desc wv = weights_view(op, dims(1), g, kF32);
      set(0, Layout::kAny, DNNL_ARG_SRC, any_md(dims(0), compute_type(op)));
      set(1, Layout::kAny, DNNL_ARG_WEIGHTS, any_md(dims_of(wv), compute_type(op)), wv);
      if (op.in[2] >= 0) set(2, Layout::kPlain, DNNL_ARG_BIAS, plain_md(dims(2)));
      break;
    }
    case OpKind::kQConv: {
      memory::desc wv = weights_view(op, dims(1), op.ints.back(), memory::data_type::s8);
      set(0, Layout::kAny, DNNL_ARG_SRC, any_md(dims(0), type_of(v, op.in[0])));
      set(1, Layout::kAny, DNNL_ARG_WEIGHTS, any_md(dims_of(wv), memory::data_type::s8), wv);
      if (op.in[2] >= 0) set(2, Layout::kPlain, DNNL_ARG_BIAS, plain_md(dims(2), memory::data_type::s32));
      break;
    }
    case OpKind::kDynConv: {  // P (in[2]) is read by the run, not by the primitive
      memory::desc wv = weights_view(op, dims(1), op.ints.back(), memory::data_type::s8);
      set(0, Layout::kAny, DNNL_ARG_SRC, any_md(dims(0), type_of(v, op.in[0])));
      set(1, Layout::kAny, DNNL_ARG_WEIGHTS, any_md(dims_of(wv), memory::data_type::s8), wv);
      break;
    }
    case OpKind::kQuantize:
    case OpKind::kDequantize:
    case OpKind::kQuantParams:  // no primitive: the engine's own loop, in the source's layout
    case OpKind::kResize:
      set(0, Layout::kAsIs, DNNL_ARG_SRC_0);
      break;
    case OpKind::kDqBinary:
      set(0, Layout::kAsIs, DNNL_ARG_SRC_0);
      set(1, Layout::kSameAsFirst, DNNL_ARG_SRC_1);
      break;
    case OpKind::kQMatMul:
    case OpKind::kDynMatMul: {  // kDynMatMul's P (in[2]) is read by the run, not by the primitive
      const Dims a{op.ints[0], op.ints[1]}, b{op.ints[1], op.ints[2]};
      const memory::desc av = plain_md(a, type_of(v, op.in[0]));
      set(0, Layout::kPlain, DNNL_ARG_SRC, av, av);
      set(1, Layout::kAny, DNNL_ARG_WEIGHTS, any_md(b, memory::data_type::s8), plain_md(b, memory::data_type::s8));
      break;
    }
    case OpKind::kLookup: {  // no primitive: the engine's own loop over the bytes, in the source's layout
      set(0, Layout::kAsIs, DNNL_ARG_SRC_0);
      if (op.in.size() == 3) set(1, Layout::kSameAsFirst, DNNL_ARG_SRC_1);
      const size_t t = op.in.size() - 1;
      set(t, Layout::kPlain, DNNL_ARG_WEIGHTS, plain_md(dims(t), type_of(v, op.in[t])));
      break;
    }
    case OpKind::kPool:
    case OpKind::kLrn:
    case OpKind::kEltwise:
    case OpKind::kReduce:
      set(0, Layout::kAsIs, DNNL_ARG_SRC);
      break;
    case OpKind::kPRelu:
      set(0, Layout::kAsIs, DNNL_ARG_SRC);
      set(1, Layout::kPlain, DNNL_ARG_WEIGHTS, plain_md(pad_to_rank(dims(1), std::max<size_t>(dims(0).size(), 1))));
      break;
    case OpKind::kMatMul: {
      MatMulOperands mo;
      matmul_operands(op, &mo);  // checked by check_op
      memory::desc a = matmul_view(mo.stored[0], mo.perm[0]), b = matmul_view(mo.stored[1], mo.perm[1]);
      if (op.bf16) {  // the source converted by a step of every run into plain bf16 (a view, then a reorder)
        set(0, Layout::kAny, DNNL_ARG_SRC, plain_md(dims_of(a), memory::data_type::bf16), a);
      } else {
        set(0, Layout::kPlain, DNNL_ARG_SRC, a, a);
      }
      // A constant B is reordered once, at load, into the layout matmul prefers.
      if (constant(1)) {
        set(1, Layout::kAny, DNNL_ARG_WEIGHTS, any_md(dims_of(b), compute_type(op)), b);
      } else if (op.bf16) {
        set(1, Layout::kAny, DNNL_ARG_WEIGHTS, plain_md(dims_of(b), memory::data_type::bf16), b);
      } else {
        set(1, Layout::kPlain, DNNL_ARG_WEIGHTS, b, b);
      }
      set(2, Layout::kPlain, DNNL_ARG_BIAS, plain_md(mo.bias), plain_md(mo.bias));
      break;
    }
    case OpKind::kBatchNorm:
      set(0, Layout::kAsIs, DNNL_ARG_SRC);
      set(1, Layout::kPlain, DNNL_ARG_SCALE, plain_md(dims(1)));
      set(2, Layout::kPlain, DNNL_ARG_SHIFT, plain_md(dims(2)));
      set(3, Layout::kPlain, DNNL_ARG_MEAN, plain_md(dims(3)));
      set(4, Layout::kPlain, DNNL_ARG_VARIANCE, plain_md(dims(4)));
      break;
    case OpKind::kSoftmax:
      set(0, Layout::kPlain, DNNL_ARG_SRC, plain_md(out), plain_md(out));
      break;
    case OpKind::kLayerNorm: {
      const Dims c{op.ints[1]};
      set(0, Layout::kPlain, DNNL_ARG_SRC, plain_md(out), plain_md(out));
      set(1, Layout::kPlain, DNNL_ARG_SCALE, plain_md(c), plain_md(c));  // set() skips an absent one
      set(2, Layout::kPlain, DNNL_ARG_SHIFT, plain_md(c), plain_md(c));
      break;
    }
    case OpKind::kBinary:
      for (size_t k = 0; k < 2; ++k) {
        const int arg = k == 0 ? DNNL_ARG_SRC_0 : DNNL_ARG_SRC_1;
        if (dims(k) == out) {
          set(k, k == 0 || dims(0) != out ? Layout::kAsIs : Layout::kSameAsFirst, arg);
        } else {  // a broadcast operand: plain, with leading 1s up to the output's rank
          memory::desc md = plain_md(pad_to_rank(dims(k), out.size()));
          set(k, Layout::kPlain, arg, md, md);
        }
      }
      break;
    case OpKind::kSum:
    case OpKind::kConcat:
      for (size_t k = 0; k < op.in.size(); ++k) {
        set(k, k == 0 || op.kind == OpKind::kConcat ? Layout::kAsIs : Layout::kSameAsFirst,
            DNNL_ARG_MULTIPLE_SRC + static_cast<int>(k));
      }
      break;
    case OpKind::kView:  // (views, transposes and slices move 8-bit values too: each in its value's type)
      set(0, Layout::kPlain, DNNL_ARG_FROM, plain_md(dims(0), type_of(v, op.in[0])),
          plain_md(dims(0), type_of(v, op.in[0])));
      break;
    case OpKind::kTranspose: {
      // The input read in the output's dim order: out[d] = in[perm[d]].
      const Dims& x = dims(0);
      Dims xs = row_major(x), d, s;
      for (int64_t p : op.ints) {
        d.push_back(x[static_cast<size_t>(p)]);
        s.push_back(xs[static_cast<size_t>(p)]);
      }
      const memory::data_type t = type_of(v, op.in[0]);
      memory::desc md = x.empty() ? plain_md(x, t) : strided_md(d, s, t);
      set(0, Layout::kPlain, DNNL_ARG_FROM, md, md);
      break;
    }
    case OpKind::kSlice: {
      // The input read through a view of the box: its extent, the input's strides, an offset.
      memory::desc md = plain_md(dims(0), type_of(v, op.in[0])).submemory_desc(out, op.ints);
      set(0, Layout::kPlain, DNNL_ARG_FROM, md, md);
      break;
    }
  }
  return specs;
}

bool takes_dst_layout(const Op& op) {
  return op.kind == OpKind::kConv || op.kind == OpKind::kDeconv || (op.kind == OpKind::kPool && op.floats.empty()) ||
         op.kind == OpKind::kBinary || op.kind == OpKind::kDynConv;
}

int first_post_arg(const Op& op) { return op.kind == OpKind::kDynConv || op.kind == OpKind::kDynMatMul ? 1 : 0; }

namespace {

// `pd` moved on to the implementation named `want` (Op::impl) where oneDNN offers it for these descriptors, else
// left at oneDNN's first choice. With `all`, every implementation offered is listed there (and the first returned).
template <class Pd>
dnnl::primitive_desc_base with_impl(Pd pd, const std::string& want, std::vector<ImplOffer>* all) {
  if (all) {
    Pd first = pd;  // a copy keeps the current implementation; the iterator is shared
    do {
      all->push_back(ImplOffer{pd.impl_info_str(), pd.query_md(dnnl::query::exec_arg_md, DNNL_ARG_SRC),
                               pd.query_md(dnnl::query::exec_arg_md, DNNL_ARG_DST)});
    } while (pd.next_impl());
    return first;
  }
  if (want.empty() || want == pd.impl_info_str()) return pd;
  Pd first = pd;
  while (pd.next_impl()) {
    if (want == pd.impl_info_str()) return pd;
  }
  return first;
}

dnnl::primitive_desc_base create_pd_uncached(const Op& op, const std::vector<Value>& v,
                                             const std::vector<memory::desc>& in, const dnnl::engine& eng,
                                             const memory::desc* dst, std::vector<ImplOffer>* all = nullptr) {
  const dnnl::primitive_attr attr = attr_for(op, v);
  const memory::data_type dst_type = op.bf16_dst ? memory::data_type::bf16 : type_of(v, op.out);
  const memory::desc dst_any = dst ? *dst : any_md(dst_dims(op, v), dst_type);
  const prop_kind fwd = prop_kind::forward_inference;
  const auto alg = static_cast<algorithm>(op.alg);
  switch (op.kind) {
    case OpKind::kConv:
    case OpKind::kQConv:
    case OpKind::kDynConv: {
      Spatial s = spatial_of(op);
      const bool biased = (op.in[2] >= 0 && op.kind != OpKind::kDynConv) || src_zero_point_in_bias(op);
      const memory::desc bias = op.in[2] >= 0 ? in[2] : plain_md(Dims{dst_dims(op, v)[1]}, memory::data_type::s32);
      dnnl::convolution_forward::desc d =
          biased ? dnnl::convolution_forward::desc(fwd, algorithm::convolution_direct, in[0], in[1], bias, dst_any,
                                                   s.strides, s.dil, s.pb, s.pe)
                 : dnnl::convolution_forward::desc(fwd, algorithm::convolution_direct, in[0], in[1], dst_any, s.strides,
                                                   s.dil, s.pb, s.pe);
      return with_impl(dnnl::convolution_forward::primitive_desc(d, attr, eng), op.impl, all);
    }
    case OpKind::kDeconv: {
      Spatial s = spatial_of(op);
      dnnl::deconvolution_forward::desc d =
          op.in[2] >= 0 ? dnnl::deconvolution_forward::desc(fwd, algorithm::deconvolution_direct, in[0], in[1], in[2],
                                                            dst_any, s.strides, s.dil, s.pb, s.pe)
                        : dnnl::deconvolution_forward::desc(fwd, algorithm::deconvolution_direct, in[0], in[1],
                                                            dst_any, s.strides, s.dil, s.pb, s.pe);
      return with_impl(dnnl::deconvolution_forward::primitive_desc(d, attr, eng), op.impl, all);
    }
    case OpKind::kPool: {
      Spatial s = spatial_of(op);
      dnnl::pooling_v2_forward::desc d(fwd, alg, in[0], dst_any, s.strides, s.kernel, s.dil, s.pb, s.pe);
      return dnnl::pooling_v2_forward::primitive_desc(d, attr, eng);
    }
    case OpKind::kMatMul: {
      // The destination is plain: MatMul outputs usually feed views.
      const memory::desc dst = plain_md(dst_dims(op, v), op.bf16_dst ? memory::data_type::bf16 : kF32);
      dnnl::matmul::desc d = op.in[2] >= 0 ? dnnl::matmul::desc(in[0], in[1], in[2], dst)
                                           : dnnl::matmul::desc(in[0], in[1], dst);
      return with_impl(dnnl::matmul::primitive_desc(d, attr, eng), op.impl, all);
    }
    case OpKind::kQMatMul:
    case OpKind::kDynMatMul: {
      const dnnl::matmul::desc d(in[0], in[1], plain_md(dst_dims(op, v), type_of(v, op.out)));
      return with_impl(dnnl::matmul::primitive_desc(d, attr, eng), op.impl, all);
    }
    case OpKind::kBatchNorm: {
      using nf = dnnl::normalization_flags;
      dnnl::batch_normalization_forward::desc d(fwd, in[0], op.floats[0],
                                                nf::use_global_stats | nf::use_scale | nf::use_shift);
      return dnnl::batch_normalization_forward::primitive_desc(d, attr, eng);
    }
    case OpKind::kLrn: {
      dnnl::lrn_forward::desc d(fwd, algorithm::lrn_across_channels, in[0], op.ints[0], op.floats[0], op.floats[1],
                                op.floats[2]);
      return dnnl::lrn_forward::primitive_desc(d, attr, eng);
    }
    case OpKind::kSoftmax: {
      dnnl::softmax_v2_forward::desc d(fwd, alg, in[0], in[0], static_cast<int>(op.ints.back()));
      return dnnl::softmax_v2_forward::primitive_desc(d, attr, eng);
    }
    case OpKind::kLayerNorm: {
      using nf = dnnl::normalization_flags;
      nf flags = nf::none;
      if (op.in[1] >= 0) flags |= nf::use_scale;
      if (op.in[2] >= 0) flags |= nf::use_shift;
      dnnl::layer_normalization_forward::desc d(fwd, in[0], op.floats[0], flags);
      return dnnl::layer_normalization_forward::primitive_desc(d, attr, eng);
    }
    case OpKind::kEltwise: {
      dnnl::eltwise_forward::desc d(fwd, alg, in[0], op.floats[0], op.floats[1]);
      return dnnl::eltwise_forward::primitive_desc(d, attr, eng);
    }
    case OpKind::kBinary: {
      dnnl::binary::desc d(alg, in[0], in[1], dst_any);
      return dnnl::binary::primitive_desc(d, attr, eng);
    }
    case OpKind::kSum:
      return dnnl::sum::primitive_desc(std::vector<float>(in.size(), 1.f), in, eng, attr);
    case OpKind::kConcat:
      return dnnl::concat::primitive_desc(static_cast<int>(op.ints[0]), in, eng, attr);
    case OpKind::kTranspose:
    case OpKind::kSlice:
      return dnnl::reorder::primitive_desc(eng, in[0], eng, plain_md(dst_dims(op, v), type_of(v, op.out)), attr);
    case OpKind::kReduce: {
      // Plain result: reductions mostly feed elementwise ops and views.
      dnnl::reduction::desc d(alg, in[0], plain_md(dst_dims(op, v)), op.floats[0], op.floats[1]);
      return dnnl::reduction::primitive_desc(d, attr, eng);
    }
    case OpKind::kPRelu: {
      dnnl::prelu_forward::desc d(fwd, in[0], in[1]);
      return dnnl::prelu_forward::primitive_desc(d, attr, eng);
    }
    case OpKind::kView:
    case OpKind::kLookup:
    case OpKind::kQuantize:
    case OpKind::kDequantize:
    case OpKind::kDqBinary:
    case OpKind::kQuantParams:
    case OpKind::kResize:
      break;
  }
  throw dnnl::error(dnnl_invalid_arguments, "op kind without a primitive");
}

}  // namespace

bool dyn_u8(const Op& op, const std::vector<Value>& v) {
  return (op.kind == OpKind::kDynConv || op.kind == OpKind::kDynMatMul) &&
         v[static_cast<size_t>(op.in[1])].dtype == TESSERA_DTYPE_UINT8;
}

memory::desc dyn_u8_src_md(const Op& op, const std::vector<Value>& v) {
  if (op.kind == OpKind::kDynMatMul) return plain_md({op.ints[0], op.ints[1]}, memory::data_type::u8);
  return any_md(v[static_cast<size_t>(op.in[0])].dims, memory::data_type::u8);
}

dnnl::primitive_desc_base dyn_u8_pd(const Op& op, const std::vector<Value>& v, const memory::desc& src,
                                    const dnnl::engine& eng) {
  if (!dyn_u8_post_ops(op, v)) {  // the own loop after it applies these
    throw dnnl::error(dnnl_unimplemented, "post-ops other than a bias and a relu after a product of uint8 weights");
  }
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  if (op.kind == OpKind::kDynMatMul) {  // [rows, K] x [K, N + 1] -> [rows, N + 1] row-major
    const dnnl::matmul::desc d(src, any_md({op.ints[1], op.ints[2] + 1}, memory::data_type::s8),
                               plain_md({op.ints[0], op.ints[2] + 1}, memory::data_type::s32));
    return dnnl::matmul::primitive_desc(d, attr, eng);
  }
  Dims w = v[static_cast<size_t>(op.in[1])].dims, y = v[static_cast<size_t>(op.out)].dims;
  ++w[0];
  ++y[1];
  const Spatial s = spatial_of(op);  // the destination with channels innermost, the own loop's layout
  const dnnl::convolution_forward::desc d(prop_kind::forward_inference, algorithm::convolution_direct, src,
                                          any_md(w, memory::data_type::s8), channels_last_md(y, memory::data_type::s32),
                                          s.strides, s.dil, s.pb, s.pe);
  return dnnl::convolution_forward::primitive_desc(d, attr, eng);
}

const dnnl::engine& probe_engine() {
  static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

namespace {

// create_pd remembers what oneDNN answered. Placement prices many overlapping regions of one model, and each price
// builds its region's plan: the same primitive descriptors over and over (a HiFi-GAN vocoder's compile spent 20 s
// creating 6943 of them, 464 distinct). The key is everything create_pd_uncached reads: the op's fields, the dims and
// types of the values it names, the operands' descriptors, the destination's and the engine. An entry holds the
// descriptor (handed out as a clone, so no two plans share one) or oneDNN's refusal. A brgemm convolution's
// descriptor holds up to 38 MB, so the cache keeps the most recently used within kBudgetBytes, each entry costed by
// the heap its creation kept (mallinfo2's bytes in use before and after, mmapped chunks included; 0 where a sanitizer
// owns the heap), and at most kMaxEntries of them.
struct PdEntry {
  std::string key;
  std::vector<memory::desc> in;
  bool has_dst = false;
  memory::desc dst;
  std::optional<dnnl::primitive_desc_base> pd;
  dnnl_status_t status = dnnl_success;
  std::unique_ptr<std::string> message;  // dnnl::error keeps a pointer to its message
  size_t bytes = 0;
};

class PdCache {
 public:
  dnnl::primitive_desc_base get(const Op& op, const std::vector<Value>& v, const std::vector<memory::desc>& in,
                                const dnnl::engine& eng, const memory::desc* dst) {
    std::string key = key_of(op, v, eng);
    std::lock_guard<std::mutex> lock(mu_);
    auto found = map_.find(key);
    if (found != map_.end()) {
      for (std::list<PdEntry>::iterator e : found->second) {
        if (e->in == in && e->has_dst == (dst != nullptr) && (!dst || e->dst == *dst)) {
          lru_.splice(lru_.begin(), lru_, e);
          return answer(*e);
        }
      }
    }
    PdEntry& e = lru_.emplace_front();
    e.key = std::move(key);
    e.in = in;
    e.has_dst = dst != nullptr;
    if (dst) e.dst = *dst;
    const size_t before = heap_in_use();
    try {
      e.pd = create_pd_uncached(op, v, in, eng, dst);
    } catch (const dnnl::error& err) {
      e.status = err.status;
      e.message = std::make_unique<std::string>(err.what());
    } catch (...) {  // not oneDNN's answer (out of memory): nothing to remember
      lru_.pop_front();
      throw;
    }
    const size_t after = heap_in_use();
    e.bytes = after > before ? after - before : 0;
    bytes_ += e.bytes;
    map_[e.key].push_back(lru_.begin());
    dnnl::primitive_desc_base out = answer(e);
    while (lru_.size() > 1 && (bytes_ > kBudgetBytes || lru_.size() > kMaxEntries)) evict_oldest();
    return out;
  }

 private:
  static constexpr size_t kBudgetBytes = size_t{512} << 20;
  static constexpr size_t kMaxEntries = 4096;

  static size_t heap_in_use() {
    const struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;  // chunks in the arenas and chunks mmapped on their own
  }

  void evict_oldest() {
    const std::list<PdEntry>::iterator last = std::prev(lru_.end());
    auto bucket = map_.find(last->key);
    std::erase(bucket->second, last);
    if (bucket->second.empty()) map_.erase(bucket);
    bytes_ -= last->bytes;
    lru_.erase(last);
  }

  static dnnl::primitive_desc_base answer(const PdEntry& e) {
    if (!e.pd) throw dnnl::error(e.status, e.message->c_str());
    dnnl_primitive_desc_t clone = nullptr;
    dnnl::error::wrap_c_api(dnnl_primitive_desc_clone(&clone, e.pd->get()), "could not clone a primitive descriptor");
    return dnnl::primitive_desc_base(clone);
  }

  static void put(std::string& k, const void* p, size_t n) { k.append(static_cast<const char*>(p), n); }
  template <class T>
  static void put_all(std::string& k, const std::vector<T>& xs) {
    const size_t n = xs.size();
    put(k, &n, sizeof n);
    if (n) put(k, xs.data(), n * sizeof(T));
  }
  // A value by what it is, not by its id: one node priced in many regions has other ids in each.
  static void put_value(std::string& k, const std::vector<Value>& v, int32_t id) {
    const bool known = id >= 0 && static_cast<size_t>(id) < v.size();
    put(k, &known, sizeof known);
    if (!known) return;
    const Value& x = v[static_cast<size_t>(id)];
    put(k, &x.kind, sizeof x.kind);
    put(k, &x.dtype, sizeof x.dtype);
    put_all(k, x.dims);
  }

 public:
  static std::string key_of(const Op& op, const std::vector<Value>& v, const dnnl::engine& eng) {
    std::string k;
    const dnnl_engine_t e = eng.get();
    put(k, &e, sizeof e);
    put(k, &op.kind, sizeof op.kind);
    put(k, &op.alg, sizeof op.alg);
    put(k, &op.bf16, sizeof op.bf16);
    put(k, &op.bf16_dst, sizeof op.bf16_dst);
    put_all(k, std::vector<char>(op.impl.begin(), op.impl.end()));
    put_all(k, op.ints);
    put_all(k, op.floats);
    for (int32_t id : op.in) put_value(k, v, id);
    put_value(k, v, op.out);
    for (const PostOp& p : op.post) {
      put(k, &p.kind, sizeof p.kind);
      put(k, &p.alg, sizeof p.alg);
      put(k, &p.alpha, sizeof p.alpha);
      put(k, &p.beta, sizeof p.beta);
      put_value(k, v, p.operand);
    }
    return k;
  }

 private:
  std::mutex mu_;
  std::list<PdEntry> lru_;  // most recently used first
  std::unordered_map<std::string, std::vector<std::list<PdEntry>::iterator>> map_;
  size_t bytes_ = 0;
};

// The operands' descriptors probe() asks oneDNN about: plain where the op reads them as they are, else what
// operand_specs offers (any layout for a product's source and weights).
std::vector<memory::desc> probe_mds(const Op& op, const std::vector<Value>& v) {
  std::vector<OperandSpec> specs = operand_specs(op, v);
  std::vector<memory::desc> in;
  for (size_t k = 0; k < specs.size(); ++k) {
    const OperandSpec& s = specs[k];
    switch (s.layout) {
      case Layout::kAbsent:
        in.emplace_back();
        break;
      case Layout::kAsIs:
      case Layout::kSameAsFirst:
        in.push_back(plain_md(v[static_cast<size_t>(op.in[k])].dims, type_of(v, op.in[k])));
        break;
      case Layout::kPlain:
      case Layout::kAny:
        in.push_back(s.md);
        break;
    }
  }
  return in;
}

}  // namespace

dnnl::primitive_desc_base create_pd(const Op& op, const std::vector<Value>& v, const std::vector<memory::desc>& in,
                                    const dnnl::engine& eng, const memory::desc* dst) {
  static PdCache cache;
  if (op.impl.empty()) return cache.get(op, v, in, eng, dst);
  // op.impl was chosen (choose_impl) on probe()'s descriptors, where an operand of any layout takes the first
  // choice's; it is built only where the operands and destination are those (an operand held in another layout, or
  // a view at an offset, may take another path through the implementation: oneDNN 2.6's gemm:jit matmul read a view
  // of the first token at the wrong place).
  Op first = op;
  first.impl.clear();
  const std::vector<memory::desc> probe = probe_mds(op, v);
  const dnnl::primitive_desc_base ref = cache.get(first, v, probe, eng, nullptr);
  const std::vector<OperandSpec> specs = operand_specs(op, v);
  bool same = !dst || *dst == ref.query_md(dnnl::query::exec_arg_md, DNNL_ARG_DST);
  for (size_t k = 0; same && k < specs.size() && k < in.size(); ++k) {
    if (specs[k].layout == Layout::kAbsent || in[k] == probe[k]) continue;
    same = probe[k].data.format_kind == dnnl_format_kind_any &&
           in[k] == ref.query_md(dnnl::query::exec_arg_md, specs[k].arg);
  }
  return cache.get(same ? op : first, v, in, eng, dst);
}

RowSlice row_slice(const Op& op, const std::vector<Value>& v, int64_t r0, int64_t r1) {
  const Spatial s = spatial_of(op);
  const int64_t kh = v[static_cast<size_t>(op.in[1])].dims[2], h = v[static_cast<size_t>(op.in[0])].dims[2];
  const int64_t lo = r0 * s.strides[0] - s.pb[0],
                hi = (r1 - 1) * s.strides[0] - s.pb[0] + (kh - 1) * (s.dil[0] + 1) + 1;
  RowSlice r;
  r.in0 = std::max<int64_t>(0, lo);
  r.in1 = std::min(h, hi);
  r.pad_top = r.in0 - lo;
  r.pad_bottom = hi - r.in1;
  return r;
}

dnnl::primitive_desc_base create_row_slice_pd(const Op& op, const std::vector<Value>& v, int64_t images, int64_t r0,
                                              int64_t r1, const memory::desc& weights, const memory::desc& bias,
                                              const dnnl::engine& eng) {
  const RowSlice r = row_slice(op, v, r0, r1);
  Op o = op;
  o.impl.clear();
  const auto rank = static_cast<size_t>(op.ints[0]);
  o.ints[1 + 2 * rank] = r.pad_top;  // ints: rank, strides, dilations, pads begin, pads end, group
  o.ints[1 + 3 * rank] = r.pad_bottom;
  // The source's zero point taken where the whole op takes it (the bias its step binds, or the attribute).
  if (src_zero_point_in_bias(o) != src_zero_point_in_bias(op)) {
    throw dnnl::error(dnnl_unimplemented, "a slice would take the zero point elsewhere");
  }
  std::vector<Value> w = v;
  Value& x = w[static_cast<size_t>(op.in[0])];
  Value& y = w[static_cast<size_t>(op.out)];
  x.dims[0] = y.dims[0] = images;
  x.dims[2] = r.in1 - r.in0;
  y.dims[2] = r1 - r0;
  std::vector<memory::desc> in{channels_last_md(x.dims, data_type_of(x.dtype)), weights};
  if (op.in.size() > 2) in.push_back(bias);
  const memory::desc dst = channels_last_md(y.dims, data_type_of(y.dtype));
  // Kernels are generated for the one thread a slice runs on.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  try {
    dnnl::primitive_desc_base pd = create_pd_uncached(o, w, in, eng, &dst);
    omp_set_num_threads(threads);
    return pd;
  } catch (...) {
    omp_set_num_threads(threads);
    throw;
  }
}

dnnl::matmul::primitive_desc matmul_chunk_pd(const Op& op, const std::vector<Value>& v, const memory::desc& a,
                                             const memory::desc& b, const memory::desc& dst,
                                             const std::vector<memory::desc>& binary_mds, const dnnl::engine& eng) {
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, dst), attr_for(op, v, &binary_mds), eng);
}

std::string probe(const Op& op, const std::vector<Value>& v, const dnnl::engine& eng, std::string* impl) {
  if (op.kind == OpKind::kView || op.kind == OpKind::kResize || own_elementwise(op.kind)) return "";
  if (op.kind == OpKind::kPool && !op.floats.empty()) return "";  // a dequantizing pool: the own loop
  // oneDNN's int8 products without VNNI (AVX2, AVX-512 before Cascade Lake) multiply byte pairs into int16 sums
  // that saturate: results differ from ONNX Runtime's and native's (under ONEDNN_MAX_CPU_ISA=AVX2, every int8 test
  // here did). Where oneDNN runs no VNNI code, they stay native.
  if (op.kind == OpKind::kQConv || op.kind == OpKind::kQMatMul || op.kind == OpKind::kDynConv ||
      op.kind == OpKind::kDynMatMul) {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const bool vnni = (isa & dnnl_cpu_isa_avx512_core_vnni) == dnnl_cpu_isa_avx512_core_vnni ||
                      (isa & dnnl_cpu_isa_avx2_vnni) == dnnl_cpu_isa_avx2_vnni;
    if (!vnni) return "oneDNN's int8 kernels on this CPU have no VNNI (their int16 sums saturate)";
  }
  if (dyn_u8(op, v)) {
    try {
      auto pd = dyn_u8_pd(op, v, dyn_u8_src_md(op, v), eng);
      if (impl) *impl = pd.impl_info_str();
      return "";
    } catch (const dnnl::error& e) {
      return std::string("oneDNN has no implementation for this ") + op_kind_name(op.kind) + " of uint8 weights (" +
             e.what() + ")";
    }
  }
  try {
    dnnl::primitive_desc_base pd = create_pd(op, v, probe_mds(op, v), eng);
    if (impl) *impl = pd.impl_info_str();
    return "";
  } catch (const dnnl::error& e) {
    std::string what = op_kind_name(op.kind);
    if (!op.post.empty()) what += " with " + std::to_string(op.post.size()) + " post-ops";
    return "oneDNN has no implementation for this " + what + " (" + e.what() + ")";
  }
}

namespace {

// `bytes` bytes of values of type `dt` drawn from `seed`: floats in [-1, 1) (bf16: their upper halves), int32 in
// [-1024, 1024), any byte for 8-bit types.
void fill_values(void* p, size_t bytes, memory::data_type dt, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  auto next = [&] { return x = x * 1664525u + 1013904223u; };
  auto unit = [&] { return static_cast<float>(static_cast<int32_t>(next()) >> 8) * (1.f / 8388608.f); };
  switch (dt) {
    case memory::data_type::f32:
      for (size_t i = 0; i < bytes / 4; ++i) static_cast<float*>(p)[i] = unit();
      break;
    case memory::data_type::bf16:
      for (size_t i = 0; i < bytes / 2; ++i) {
        const float f = unit();
        uint32_t u;
        std::memcpy(&u, &f, 4);
        static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(u >> 16);
      }
      break;
    case memory::data_type::s32:
      for (size_t i = 0; i < bytes / 4; ++i) static_cast<int32_t*>(p)[i] = static_cast<int32_t>(next() >> 21) - 1024;
      break;
    default:
      for (size_t i = 0; i < bytes; ++i) static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(next() >> 24);
      break;
  }
}

// The least time of each candidate's runs, timed in rounds (each candidate once per round, in turn), so that a
// slow phase of a shared host falls on all of them alike: at least three rounds, and up to twenty while the rounds
// have taken under 2 ms per candidate. A candidate that is null gets infinity.
std::vector<double> best_seconds(const std::vector<std::function<void()>>& runs) {
  std::vector<double> best(runs.size(), std::numeric_limits<double>::infinity());
  double spent = 0;
  for (int r = 0; r < 20 && (r < 3 || spent < 2e-3 * static_cast<double>(runs.size())); ++r) {
    for (size_t i = 0; i < runs.size(); ++i) {
      if (!runs[i]) continue;
      const auto t0 = std::chrono::steady_clock::now();
      runs[i]();
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best[i] = std::min(best[i], dt);
      spent += dt;
    }
  }
  return best;
}

// `pd` set up to run alone on buffers of its own holding the same values for every implementation of one op (the
// weights drawn in plain layout and reordered into the implementation's): run once, its destination's bytes put in
// `out`; the returned function runs it again.
std::function<void()> prepare_alone(const dnnl::primitive_desc_base& pd, const Op& op, const dnnl::engine& eng,
                                    std::vector<char>* out) {
  std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD};
  // A binary post-op's operand (oneDNN 2.6 reads any post-op's entry as a binary one when asked for its operand).
  for (size_t i = 0; i < op.post.size(); ++i) {
    if (op.post[i].kind == PostKind::kBinary)
      args.push_back(DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1);
  }
  dnnl::stream stream(eng);
  std::unordered_map<int, memory> mems;
  for (int a : args) {
    const memory::desc md = pd.query_md(dnnl::query::exec_arg_md, a);
    if (md.get_size() == 0) continue;
    memory m(md, eng);
    if (a == DNNL_ARG_WEIGHTS) {  // in plain layout, then in the implementation's
      const memory::desc plain = plain_md(Dims(md.data.dims, md.data.dims + md.data.ndims), md.data_type());
      memory w(plain, eng);
      fill_values(w.get_data_handle(), plain.get_size(), plain.data_type(), static_cast<uint32_t>(a));
      dnnl::reorder(w, m).execute(stream, w, m);
      stream.wait();
    } else if (a != DNNL_ARG_SCRATCHPAD) {
      fill_values(m.get_data_handle(), md.get_size(), md.data_type(), static_cast<uint32_t>(a));
    }
    mems.emplace(a, m);
  }
  const dnnl::primitive prim(pd.get());
  prim.execute(stream, mems);
  stream.wait();
  const memory& dst = mems.at(DNNL_ARG_DST);
  const char* d = static_cast<const char*>(dst.get_data_handle());
  out->assign(d, d + dst.get_desc().get_size());
  return [prim, stream, mems]() mutable {
    prim.execute(stream, mems);
    stream.wait();
  };
}

// The plugin's own depthwise kernel (own_dw_int8) set up as prepare_alone sets up a primitive, on the values it gives
// the primitive's operands (source and destination channels-last, as oneDNN's int8 convolutions hold them); null
// where the kernel refuses the op.
std::function<void()> prepare_own_dw_alone(const Op& op, const std::vector<Value>& v, std::vector<char>* out) {
  const Dims& xd = v[static_cast<size_t>(op.in[0])].dims;
  const Dims& wd = v[static_cast<size_t>(op.in[1])].dims;
  std::vector<int8_t> w(static_cast<size_t>(numel(wd)));
  fill_values(w.data(), w.size(), memory::data_type::s8, static_cast<uint32_t>(DNNL_ARG_WEIGHTS));
  std::vector<int32_t> b(static_cast<size_t>(wd[0]));
  fill_values(b.data(), b.size() * 4, memory::data_type::s32, static_cast<uint32_t>(DNNL_ARG_BIAS));
  // Where the primitive takes the source's zero point in its bias, its random bias stands for that bias.
  Op o = op;
  if (src_zero_point_in_bias(op)) o.floats[0] = 0;
  const bool biased = op.in[2] >= 0 || src_zero_point_in_bias(op);
  std::shared_ptr<DwInt8> k = own_dw_int8_kernel(o, v, w.data(), biased ? b.data() : nullptr);
  if (!k) return nullptr;
  auto x = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(numel(xd)));
  fill_values(x->data(), x->size(), memory::data_type::u8, static_cast<uint32_t>(DNNL_ARG_SRC));
  out->assign(static_cast<size_t>(numel(v[static_cast<size_t>(op.out)].dims)), 0);
  run_dw_int8(*k, x->data(), out->data(), xd[0]);
  auto y = std::make_shared<std::vector<char>>(*out);
  const int64_t batch = xd[0];
  return [k, x, y, batch] { run_dw_int8(*k, x->data(), y->data(), batch); };
}

}  // namespace

std::string choose_impl(Op& op, const std::vector<Value>& v, const dnnl::engine& eng, int threads) {
  op.impl.clear();
  if (!impl_timed_kind(op.kind)) return "";
  threads = std::max(1, threads);
  static std::mutex mu;
  static std::unordered_map<std::string, std::string>* chosen = new std::unordered_map<std::string, std::string>();
  std::string key = PdCache::key_of(op, v, eng);
  key.append(reinterpret_cast<const char*>(&threads), sizeof threads);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = chosen->find(key); it != chosen->end()) return op.impl = it->second;
  }
  const std::vector<memory::desc> in = probe_mds(op, v);
  std::vector<ImplOffer> offers;
  try {
    create_pd_uncached(op, v, in, eng, nullptr, &offers);
  } catch (const dnnl::error&) {
    return "";  // nothing to choose from: building it fails as it would have
  }
  std::vector<std::string> names;  // oneDNN's first choice first
  for (const ImplOffer& o : offers) {
    const bool same_layouts = o.src == offers[0].src && o.dst == offers[0].dst;
    // Not the reference implementations, nor the gemm-based ones (gemm:jit read a view at the wrong place).
    if (o.name.rfind("ref", 0) == 0 || o.name.find("gemm") != std::string::npos || !same_layouts ||
        std::find(names.begin(), names.end(), o.name) != names.end()) {
      continue;
    }
    names.push_back(o.name);
  }
  // The own depthwise kernel competes where oneDNN's first choice reads and writes channels-last, so that the
  // layouts around the op stay the same.
  const bool own = !offers.empty() && own_dw_int8(op, v) &&
                   offers[0].src == channels_last_md(v[static_cast<size_t>(op.in[0])].dims,
                                                     data_type_of(v[static_cast<size_t>(op.in[0])].dtype)) &&
                   offers[0].dst == channels_last_md(v[static_cast<size_t>(op.out)].dims,
                                                     data_type_of(v[static_cast<size_t>(op.out)].dtype));
  std::string pick;
  if ((names.size() > 1 || own) && !names.empty() && names[0] == offers[0].name) {
    omp_set_num_threads(threads);
    // Every candidate set up first, then timed in turn (best_seconds).
    std::vector<std::function<void()>> runs;
    std::vector<char> first, got;
    for (const std::string& name : names) {
      Op o = op;
      o.impl = name;
      std::function<void()> run;
      try {
        run = prepare_alone(create_pd(o, v, in, eng), o, eng, runs.empty() ? &first : &got);
      } catch (const dnnl::error&) {
      }
      // Only an implementation that computes the first choice's bits is a choice: speed alone may change.
      if (!runs.empty() && got != first) run = nullptr;
      runs.push_back(std::move(run));
    }
    if (own) {
      std::function<void()> run = prepare_own_dw_alone(op, v, &got);
      runs.push_back(got == first ? std::move(run) : nullptr);
      names.emplace_back(kOwnDwInt8);
    }
    std::vector<double> secs = best_seconds(runs);
    if (own) {
      // The own kernel must beat every oneDNN implementation by 10 %: in a model it reads a source the previous
      // primitive spread over the threads' caches its own way (mobilenet_v2's 32-channel one at 112x112, even alone,
      // ran 0.051 ms there against oneDNN's 0.043).
      const double fastest = *std::min_element(secs.begin(), secs.end() - 1);
      if (!(secs.back() < 0.9 * fastest)) secs.back() = std::numeric_limits<double>::infinity();
    }
    const size_t best = static_cast<size_t>(std::min_element(secs.begin(), secs.end()) - secs.begin());
    if (best != 0 && secs[best] < 0.95 * secs[0]) pick = names[best];
  }
  std::lock_guard<std::mutex> lock(mu);
  chosen->emplace(std::move(key), pick);
  return op.impl = pick;
}

}  // namespace tessera_dnnl
