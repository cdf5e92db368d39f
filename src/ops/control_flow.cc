// Control flow: If (opsets 7-17), Loop (opsets 7-17) and Scan (opset 8 with
// a batch axis and sequence_lens; opsets 9-17 with per-input axes and
// directions).
//
// Bodies run through the executor's SubgraphRunner, which binds the body's
// formal inputs and resolves outer-scope names itself. Output shapes are only
// known after running (trip counts, data-dependent branch shapes), so these
// kernels allocate their outputs with allocate_output unless the executor
// already holds a buffer of the right type and dims.
//
// Inference reads the bodies' declared output types (Graph::values); dims it
// cannot derive stay unknown, so a static shape is claimed only where every
// possible execution produces it.
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/op_registry.h"

namespace tessera {
namespace {

// ---- helpers --------------------------------------------------------------

ValueInfo graph_output_info(const Graph& g, size_t i) {
  if (i >= g.outputs.size()) return {};
  const std::string& name = g.outputs[i];
  if (const ValueInfo* vi = g.info(name)) return *vi;
  if (const Tensor* c = g.constant(name)) return {c->dtype(), Shape::FromDims(c->dims())};
  return {};
}

// The most specific shape both `a` and `b` satisfy.
Shape merge_shapes(const Shape& a, const Shape& b) {
  if (!a.rank_known || !b.rank_known || a.rank() != b.rank()) return Shape::Unranked();
  std::vector<Dim> d(static_cast<size_t>(a.rank()));
  for (int i = 0; i < a.rank(); ++i) d[static_cast<size_t>(i)] = a[i] == b[i] ? a[i] : Dim();
  return Shape(std::move(d));
}

// Writes `src` into output i: into the executor's buffer when it already has
// the right dtype and dims, else into a freshly allocated one.
Status emit_output(KernelContext& ctx, int i, const Tensor& src) {
  Tensor* out = ctx.output(i);
  if (!out) return Status::Ok();
  if (!src.defined()) return ctx.error("output " + std::to_string(i) + " has no value");
  if (!(out->defined() && out->dtype() == src.dtype() && out->dims() == src.dims())) {
    TSR_ASSIGN_OR_RETURN(out, ctx.allocate_output(i, src.dtype(), src.dims()));
  }
  if (out->raw() != src.raw() && src.nbytes() > 0) std::memcpy(out->raw(), src.raw(), src.nbytes());
  return Status::Ok();
}

Status need_runner(KernelContext& ctx) {
  if (!ctx.subgraphs()) return ctx.error("no subgraph runner is available to execute the body");
  return Status::Ok();
}

std::shared_ptr<Graph> body_of(const Node& node, const char* attr) { return node.attr_graph(attr); }

// ---- If ---------------------------------------------------------------------

Status infer_if(InferContext& ctx) {
  const Node& node = ctx.node();
  auto then_g = body_of(node, "then_branch");
  auto else_g = body_of(node, "else_branch");
  if (!then_g || !else_g) return ctx.error("then_branch and else_branch are required");
  const int n = ctx.num_outputs();
  if (static_cast<int>(then_g->outputs.size()) != n || static_cast<int>(else_g->outputs.size()) != n) {
    return ctx.error("branches must produce " + std::to_string(n) + " outputs");
  }
  const Tensor* cond = ctx.in_value(0);
  for (int i = 0; i < n; ++i) {
    ValueInfo t = graph_output_info(*then_g, static_cast<size_t>(i));
    ValueInfo e = graph_output_info(*else_g, static_cast<size_t>(i));
    if (cond && cond->numel() == 1) {
      ctx.set_output(i, cond->as_int64(0) != 0 ? t.dtype : e.dtype, cond->as_int64(0) != 0 ? t.shape : e.shape);
      continue;
    }
    DType dt = t.dtype != DType::kUndefined ? t.dtype : e.dtype;
    if (t.dtype != DType::kUndefined && e.dtype != DType::kUndefined && t.dtype != e.dtype) {
      return ctx.error("branches disagree on the dtype of output " + std::to_string(i));
    }
    ctx.set_output(i, dt, merge_shapes(t.shape, e.shape));
  }
  return Status::Ok();
}

Status run_if(KernelContext& ctx) {
  TSR_RETURN_IF_ERROR(need_runner(ctx));
  const Node& node = ctx.node();
  const Tensor* cond = ctx.input(0);
  if (!cond || cond->numel() != 1) return ctx.error("cond must be a single value");
  auto g = body_of(node, cond->as_int64(0) != 0 ? "then_branch" : "else_branch");
  if (!g) return ctx.error("missing branch graph");
  std::vector<Tensor> outs;
  TSR_ASSIGN_OR_RETURN(outs, ctx.subgraphs()->run(*g, {}));
  if (outs.size() < static_cast<size_t>(ctx.num_outputs())) {
    return ctx.error("branch produced " + std::to_string(outs.size()) + " outputs, expected " +
                     std::to_string(ctx.num_outputs()));
  }
  for (int i = 0; i < ctx.num_outputs(); ++i) TSR_RETURN_IF_ERROR(emit_output(ctx, i, outs[static_cast<size_t>(i)]));
  return Status::Ok();
}

// ---- Loop -------------------------------------------------------------------

// Number of loop-carried values: node inputs after M and cond.
int loop_carried(const Node& node) { return std::max<int>(0, static_cast<int>(node.inputs.size()) - 2); }

Status infer_loop(InferContext& ctx) {
  const Node& node = ctx.node();
  auto body = body_of(node, "body");
  if (!body) return ctx.error("body is required");
  const int n = loop_carried(node);
  const int k = static_cast<int>(body->outputs.size()) - 1 - n;
  if (k < 0 || static_cast<int>(body->inputs.size()) != 2 + n) {
    return ctx.error("body must take 2 + " + std::to_string(n) + " inputs and return at least 1 + " +
                     std::to_string(n) + " outputs");
  }
  if (ctx.num_outputs() > n + k) return ctx.error("too many outputs for the body");
  for (int i = 0; i < n && i < ctx.num_outputs(); ++i) {
    ValueInfo b = graph_output_info(*body, static_cast<size_t>(1 + i));
    DType dt = ctx.in_dtype(2 + i) != DType::kUndefined ? ctx.in_dtype(2 + i) : b.dtype;
    // The value after the loop is either the initial value (no iteration)
    // or the body's output.
    ctx.set_output(i, dt, merge_shapes(ctx.in_shape(2 + i), b.shape));
  }
  // Trip count known only for a constant M without a condition input.
  Dim trips;
  const Tensor* m = ctx.has_input(0) ? ctx.in_value(0) : nullptr;
  if (m && m->numel() == 1 && !ctx.has_input(1)) trips = Dim(std::max<int64_t>(0, m->as_int64(0)));
  for (int j = 0; j < k && n + j < ctx.num_outputs(); ++j) {
    ValueInfo b = graph_output_info(*body, static_cast<size_t>(1 + n + j));
    if (!b.shape.rank_known) {
      ctx.set_output(n + j, b.dtype, Shape::Unranked());
      continue;
    }
    std::vector<Dim> d = {trips};
    d.insert(d.end(), b.shape.dims.begin(), b.shape.dims.end());
    ctx.set_output(n + j, b.dtype, Shape(std::move(d)));
  }
  return Status::Ok();
}

// Stacks equally shaped tensors along a new leading axis.
Expected<Tensor> stack(const std::vector<Tensor>& parts, const ValueInfo& declared, const Node& node) {
  if (parts.empty()) {
    Dims d = {0};
    if (declared.shape.rank_known) {
      for (const Dim& x : declared.shape.dims) d.push_back(x.known() ? x.value : 0);
    }
    return Tensor(declared.dtype == DType::kUndefined ? DType::kFloat32 : declared.dtype, d);
  }
  const Tensor& first = parts[0];
  Dims d = {static_cast<int64_t>(parts.size())};
  d.insert(d.end(), first.dims().begin(), first.dims().end());
  Tensor out(first.dtype(), d);
  const size_t bytes = first.nbytes();
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].dtype() != first.dtype() || parts[i].dims() != first.dims()) {
      return RuntimeError(node.describe() + ": scan output changes shape between iterations (" + parts[0].str() +
                          " then " + parts[i].str() + ")");
    }
    if (bytes) std::memcpy(static_cast<char*>(out.raw()) + i * bytes, parts[i].raw(), bytes);
  }
  return out;
}

Status run_loop(KernelContext& ctx) {
  TSR_RETURN_IF_ERROR(need_runner(ctx));
  const Node& node = ctx.node();
  auto body = body_of(node, "body");
  if (!body) return ctx.error("body is required");
  const int n = loop_carried(node);
  const int k = static_cast<int>(body->outputs.size()) - 1 - n;
  if (k < 0) return ctx.error("body returns too few outputs");
  const Tensor* m = ctx.input(0);
  const Tensor* cond_in = ctx.input(1);
  if (m && m->numel() != 1) return ctx.error("M must be a single value");
  if (cond_in && cond_in->numel() != 1) return ctx.error("cond must be a single value");
  const int64_t max_trips = m ? m->as_int64(0) : std::numeric_limits<int64_t>::max();
  bool cond = cond_in ? cond_in->as_int64(0) != 0 : true;
  // With M but no cond input the body's condition is ignored (a for loop);
  // with neither, the body's condition still ends the loop rather than
  // running forever.
  const bool use_body_cond = cond_in != nullptr || m == nullptr;

  std::vector<Tensor> carried(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const Tensor* t = ctx.input(2 + i);
    if (!t) return ctx.error("loop-carried input " + std::to_string(i) + " is missing");
    carried[static_cast<size_t>(i)] = *t;
  }
  std::vector<std::vector<Tensor>> scans(static_cast<size_t>(k));
  std::vector<Tensor> inputs(static_cast<size_t>(2 + n));
  for (int64_t it = 0; it < max_trips && cond; ++it) {
    inputs[0] = Tensor::Scalar<int64_t>(it);
    inputs[1] = Tensor::Scalar<bool>(cond);
    for (int i = 0; i < n; ++i) inputs[static_cast<size_t>(2 + i)] = carried[static_cast<size_t>(i)];
    std::vector<Tensor> outs;
    TSR_ASSIGN_OR_RETURN(outs, ctx.subgraphs()->run(*body, inputs));
    if (outs.size() != static_cast<size_t>(1 + n + k)) return ctx.error("body returned the wrong number of outputs");
    if (use_body_cond) {
      if (outs[0].numel() != 1) return ctx.error("body's condition output must be a single value");
      cond = outs[0].as_int64(0) != 0;
    }
    for (int i = 0; i < n; ++i) carried[static_cast<size_t>(i)] = std::move(outs[static_cast<size_t>(1 + i)]);
    for (int j = 0; j < k; ++j) scans[static_cast<size_t>(j)].push_back(std::move(outs[static_cast<size_t>(1 + n + j)]));
  }
  for (int i = 0; i < n && i < ctx.num_outputs(); ++i) {
    TSR_RETURN_IF_ERROR(emit_output(ctx, i, carried[static_cast<size_t>(i)]));
  }
  for (int j = 0; j < k && n + j < ctx.num_outputs(); ++j) {
    if (!ctx.output(n + j)) continue;
    Tensor stacked;
    TSR_ASSIGN_OR_RETURN(stacked, stack(scans[static_cast<size_t>(j)],
                                        graph_output_info(*body, static_cast<size_t>(1 + n + j)), node));
    TSR_RETURN_IF_ERROR(emit_output(ctx, n + j, stacked));
  }
  return Status::Ok();
}

// ---- Scan -------------------------------------------------------------------

struct ScanAttrs {
  int num_scan_inputs = 0;
  std::vector<int64_t> in_axes, in_dirs, out_axes, out_dirs;
};

Status parse_scan(const Node& node, int64_t opset, int num_states, int num_scan_outputs, ScanAttrs* a) {
  a->num_scan_inputs = static_cast<int>(node.attr_int("num_scan_inputs", -1));
  if (a->num_scan_inputs < 1) return InvalidModel(node.describe() + ": num_scan_inputs must be at least 1");
  const size_t m = static_cast<size_t>(a->num_scan_inputs);
  if (opset < 9) {
    a->in_axes.assign(m, 0);
    a->in_dirs = node.attr_ints("directions", std::vector<int64_t>(m, 0));
    a->out_axes.assign(static_cast<size_t>(num_scan_outputs), 0);
    a->out_dirs.assign(static_cast<size_t>(num_scan_outputs), 0);
  } else {
    a->in_axes = node.attr_ints("scan_input_axes", std::vector<int64_t>(m, 0));
    a->in_dirs = node.attr_ints("scan_input_directions", std::vector<int64_t>(m, 0));
    a->out_axes = node.attr_ints("scan_output_axes", std::vector<int64_t>(static_cast<size_t>(num_scan_outputs), 0));
    a->out_dirs =
        node.attr_ints("scan_output_directions", std::vector<int64_t>(static_cast<size_t>(num_scan_outputs), 0));
  }
  if (a->in_axes.size() != m || a->in_dirs.size() != m || a->out_axes.size() != static_cast<size_t>(num_scan_outputs) ||
      a->out_dirs.size() != static_cast<size_t>(num_scan_outputs)) {
    return InvalidModel(node.describe() + ": scan axes/directions attributes have the wrong length");
  }
  (void)num_states;
  return Status::Ok();
}

// Scan-8 has a leading sequence_lens input.
int scan_first_state(int64_t opset) { return opset < 9 ? 1 : 0; }

Status scan_counts(const Node& node, int64_t opset, const Graph& body, int* num_states, int* num_scan_out,
                   int* num_scan_in) {
  const int first = scan_first_state(opset);
  const int m = static_cast<int>(node.attr_int("num_scan_inputs", -1));
  const int total = static_cast<int>(node.inputs.size()) - first;
  if (m < 1 || m > total) return InvalidModel(node.describe() + ": bad num_scan_inputs");
  *num_scan_in = m;
  *num_states = total - m;
  *num_scan_out = static_cast<int>(body.outputs.size()) - *num_states;
  if (*num_scan_out < 0 || static_cast<int>(body.inputs.size()) != *num_states + m) {
    return InvalidModel(node.describe() + ": body inputs/outputs do not match the node's");
  }
  return Status::Ok();
}

Status infer_scan(InferContext& ctx) {
  const Node& node = ctx.node();
  auto body = body_of(node, "body");
  if (!body) return ctx.error("body is required");
  int ns = 0, nk = 0, nm = 0;
  TSR_RETURN_IF_ERROR(scan_counts(node, ctx.opset(), *body, &ns, &nk, &nm));
  ScanAttrs a;
  TSR_RETURN_IF_ERROR(parse_scan(node, ctx.opset(), ns, nk, &a));
  const int first = scan_first_state(ctx.opset());
  for (int i = 0; i < ns && i < ctx.num_outputs(); ++i) {
    ValueInfo b = graph_output_info(*body, static_cast<size_t>(i));
    DType dt = ctx.in_dtype(first + i) != DType::kUndefined ? ctx.in_dtype(first + i) : b.dtype;
    ctx.set_output(i, dt, ctx.in_shape(first + i));
  }
  // Sequence length from the first scan input.
  const Shape& s0 = ctx.in_shape(first + ns);
  Dim seq, batch;
  if (ctx.opset() < 9) {
    if (s0.rank_known && s0.rank() >= 2) {
      batch = s0[0];
      seq = s0[1];
    }
  } else if (s0.rank_known) {
    int ax = normalize_axis(a.in_axes[0], s0.rank());
    if (ax < 0) return ctx.error("scan_input_axes out of range");
    seq = s0[ax];
  }
  for (int j = 0; j < nk && ns + j < ctx.num_outputs(); ++j) {
    ValueInfo b = graph_output_info(*body, static_cast<size_t>(ns + j));
    if (!b.shape.rank_known) {
      ctx.set_output(ns + j, b.dtype, Shape::Unranked());
      continue;
    }
    std::vector<Dim> d = b.shape.dims;
    if (ctx.opset() < 9) {
      d.insert(d.begin(), seq);
      d.insert(d.begin(), batch);
    } else {
      int ax = normalize_axis(a.out_axes[static_cast<size_t>(j)], b.shape.rank() + 1);
      if (ax < 0) return ctx.error("scan_output_axes out of range");
      d.insert(d.begin() + ax, seq);
    }
    ctx.set_output(ns + j, b.dtype, Shape(std::move(d)));
  }
  return Status::Ok();
}

// Copies slice `index` of `src` along `axis` into `dst` (dims without axis),
// or the reverse when `to_src`.
void copy_slice(const Tensor& full, int axis, int64_t index, Tensor& part, bool into_full) {
  const Dims& d = full.dims();
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= d[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < d.size(); ++i) inner *= d[i];
  const size_t es = dtype_size(full.dtype());
  const size_t row = static_cast<size_t>(inner) * es;
  const int64_t len = d[static_cast<size_t>(axis)];
  char* f = static_cast<char*>(const_cast<void*>(full.raw()));
  char* p = static_cast<char*>(part.raw());
  for (int64_t o = 0; o < outer; ++o) {
    char* fp = f + static_cast<size_t>(o * len + index) * row;
    char* pp = p + static_cast<size_t>(o) * row;
    if (into_full) std::memcpy(fp, pp, row);
    else std::memcpy(pp, fp, row);
  }
}

Dims without_axis(const Dims& d, int axis) {
  Dims r = d;
  r.erase(r.begin() + axis);
  return r;
}

// Slice `pos` of `full` along `axis`: a view when it is contiguous (nothing
// outside the axis), else a copy. Views stay valid while the kernel runs.
Tensor slice_of(const Tensor& full, int axis, int64_t pos) {
  Dims d = without_axis(full.dims(), axis);
  int64_t outer = 1;
  for (int i = 0; i < axis; ++i) outer *= full.dim(i);
  if (outer == 1) {
    const size_t bytes = static_cast<size_t>(numel(d)) * dtype_size(full.dtype());
    return Tensor::View(full.dtype(), d,
                        static_cast<char*>(const_cast<void*>(full.raw())) + static_cast<size_t>(pos) * bytes);
  }
  Tensor part(full.dtype(), d);
  copy_slice(full, axis, pos, part, false);
  return part;
}

class ScanKernel final : public Kernel {
 public:
  explicit ScanKernel(int64_t opset) : opset_(opset) {}
  static Expected<std::unique_ptr<Kernel>> create(const KernelInit& init) {
    return std::unique_ptr<Kernel>(std::make_unique<ScanKernel>(init.opset));
  }
  Status run(KernelContext& ctx) const override;

 private:
  // One pass over a sequence: states in/out, scan inputs sliced at axis
  // positions, scan outputs written through `out_slot`.
  int64_t opset_;
};

Status ScanKernel::run(KernelContext& ctx) const {
  TSR_RETURN_IF_ERROR(need_runner(ctx));
  const Node& node = ctx.node();
  auto body = body_of(node, "body");
  if (!body) return ctx.error("body is required");
  int ns = 0, nk = 0, nm = 0;
  TSR_RETURN_IF_ERROR(scan_counts(node, opset_, *body, &ns, &nk, &nm));
  ScanAttrs a;
  TSR_RETURN_IF_ERROR(parse_scan(node, opset_, ns, nk, &a));
  const bool v8 = opset_ < 9;
  const int first = scan_first_state(opset_);

  std::vector<const Tensor*> states0(static_cast<size_t>(ns)), scan_in(static_cast<size_t>(nm));
  for (int i = 0; i < ns; ++i) {
    states0[static_cast<size_t>(i)] = ctx.input(first + i);
    if (!states0[static_cast<size_t>(i)]) return ctx.error("state input " + std::to_string(i) + " is missing");
  }
  std::vector<int> in_axis(static_cast<size_t>(nm));
  int64_t seq = -1;
  for (int j = 0; j < nm; ++j) {
    const Tensor* t = ctx.input(first + ns + j);
    if (!t) return ctx.error("scan input " + std::to_string(j) + " is missing");
    scan_in[static_cast<size_t>(j)] = t;
    int ax = v8 ? 1 : normalize_axis(a.in_axes[static_cast<size_t>(j)], t->rank());
    if (ax < 0 || ax >= t->rank()) return ctx.error("scan input axis out of range for " + t->str());
    in_axis[static_cast<size_t>(j)] = ax;
    if (seq >= 0 && t->dim(ax) != seq) return ctx.error("scan inputs disagree on the sequence length");
    seq = t->dim(ax);
  }
  // Scan-8 runs the body per batch entry (axis 0 of every input and output).
  const int64_t batches = v8 ? scan_in[0]->dim(0) : 1;
  const Tensor* lens_t = v8 ? ctx.input(0) : nullptr;
  if (v8) {
    for (int i = 0; i < ns; ++i)
      if (states0[static_cast<size_t>(i)]->rank() < 1 || states0[static_cast<size_t>(i)]->dim(0) != batches)
        return ctx.error("state inputs must have the batch size as first dim");
    for (int j = 0; j < nm; ++j)
      if (scan_in[static_cast<size_t>(j)]->dim(0) != batches) return ctx.error("scan inputs disagree on batch size");
    if (lens_t && lens_t->numel() != batches) return ctx.error("sequence_lens must have batch_size entries");
  }

  std::vector<Tensor> final_states(static_cast<size_t>(ns));
  std::vector<Tensor> scan_out(static_cast<size_t>(nk));  // allocated after the first step
  std::vector<int> out_axis(static_cast<size_t>(nk), 0);
  std::vector<Tensor> body_in(static_cast<size_t>(ns + nm));

  for (int64_t b = 0; b < batches; ++b) {
    const int64_t len = lens_t ? lens_t->as_int64(b) : seq;
    if (len < 0 || len > seq) return ctx.error("sequence length out of range");
    std::vector<Tensor> states(static_cast<size_t>(ns));
    for (int i = 0; i < ns; ++i) {
      const Tensor* s = states0[static_cast<size_t>(i)];
      if (v8) {
        Tensor part(s->dtype(), without_axis(s->dims(), 0));
        copy_slice(*s, 0, b, part, false);
        states[static_cast<size_t>(i)] = part;
      } else {
        states[static_cast<size_t>(i)] = *s;
      }
    }
    for (int64_t t = 0; t < len; ++t) {
      for (int i = 0; i < ns; ++i) body_in[static_cast<size_t>(i)] = states[static_cast<size_t>(i)];
      for (int j = 0; j < nm; ++j) {
        const Tensor* full = scan_in[static_cast<size_t>(j)];
        const int64_t pos = a.in_dirs[static_cast<size_t>(j)] != 0 ? len - 1 - t : t;
        if (v8) {
          // Entry (b, pos) of [B, L, ...] is row b*L + pos of [B*L, ...].
          Dims rows = without_axis(full->dims(), 0);
          rows[0] = batches * seq;
          body_in[static_cast<size_t>(ns + j)] = slice_of(full->reshaped(rows), 0, b * seq + pos);
        } else {
          body_in[static_cast<size_t>(ns + j)] = slice_of(*full, in_axis[static_cast<size_t>(j)], pos);
        }
      }
      std::vector<Tensor> outs;
      TSR_ASSIGN_OR_RETURN(outs, ctx.subgraphs()->run(*body, body_in));
      if (outs.size() != static_cast<size_t>(ns + nk)) return ctx.error("body returned the wrong number of outputs");
      for (int i = 0; i < ns; ++i) states[static_cast<size_t>(i)] = std::move(outs[static_cast<size_t>(i)]);
      for (int j = 0; j < nk; ++j) {
        const Tensor& o = outs[static_cast<size_t>(ns + j)];
        Tensor& full = scan_out[static_cast<size_t>(j)];
        if (!full.defined()) {
          Dims d = o.dims();
          if (v8) {
            d.insert(d.begin(), seq);
            d.insert(d.begin(), batches);
          } else {
            int ax = normalize_axis(a.out_axes[static_cast<size_t>(j)], o.rank() + 1);
            if (ax < 0) return ctx.error("scan_output_axes out of range");
            out_axis[static_cast<size_t>(j)] = ax;
            d.insert(d.begin() + ax, seq);
          }
          Tensor* dst = ctx.output(ns + j);
          if (dst && dst->defined() && dst->dtype() == o.dtype() && dst->dims() == d) {
            full = *dst;
            if (full.nbytes()) std::memset(full.raw(), 0, full.nbytes());
          } else if (dst) {
            Tensor* allocated = nullptr;
            TSR_ASSIGN_OR_RETURN(allocated, ctx.allocate_output(ns + j, o.dtype(), d));
            full = *allocated;
          } else {
            full = Tensor(o.dtype(), d);
          }
        }
        Dims expect = without_axis(full.dims(), v8 ? 1 : out_axis[static_cast<size_t>(j)]);
        if (v8) expect.erase(expect.begin());
        if (o.dtype() != full.dtype() || o.dims() != expect) {
          return ctx.error("scan output " + std::to_string(j) + " changes shape between iterations");
        }
        const int64_t pos = a.out_dirs[static_cast<size_t>(j)] != 0 ? len - 1 - t : t;
        Tensor src = o;
        if (v8) {
          // Write into the [L, ...] block of batch entry b.
          const size_t block = static_cast<size_t>(numel(without_axis(full.dims(), 0))) * dtype_size(full.dtype());
          Tensor view = Tensor::View(full.dtype(), without_axis(full.dims(), 0),
                                     static_cast<char*>(full.raw()) + static_cast<size_t>(b) * block);
          copy_slice(view, 0, pos, src, true);
        } else {
          copy_slice(full, out_axis[static_cast<size_t>(j)], pos, src, true);
        }
      }
    }
    for (int i = 0; i < ns; ++i) {
      if (!v8) {
        final_states[static_cast<size_t>(i)] = states[static_cast<size_t>(i)];
        continue;
      }
      Tensor& fs = final_states[static_cast<size_t>(i)];
      if (!fs.defined()) fs = Tensor(states0[static_cast<size_t>(i)]->dtype(), states0[static_cast<size_t>(i)]->dims());
      if (states[static_cast<size_t>(i)].dims() != without_axis(fs.dims(), 0)) {
        return ctx.error("state " + std::to_string(i) + " changes shape");
      }
      Tensor st = states[static_cast<size_t>(i)];
      copy_slice(fs, 0, b, st, true);
    }
  }
  if (batches == 0) {
    for (int i = 0; i < ns; ++i) final_states[static_cast<size_t>(i)] = *states0[static_cast<size_t>(i)];
  }
  for (int i = 0; i < ns && i < ctx.num_outputs(); ++i) {
    TSR_RETURN_IF_ERROR(emit_output(ctx, i, final_states[static_cast<size_t>(i)]));
  }
  for (int j = 0; j < nk && ns + j < ctx.num_outputs(); ++j) {
    Tensor& full = scan_out[static_cast<size_t>(j)];
    if (!full.defined()) {
      // No iteration ran: shape from the body's declaration with a zero-length sequence.
      ValueInfo decl = graph_output_info(*body, static_cast<size_t>(ns + j));
      Dims d;
      if (decl.shape.rank_known)
        for (const Dim& x : decl.shape.dims) d.push_back(x.known() ? x.value : 0);
      if (v8) {
        d.insert(d.begin(), seq < 0 ? 0 : seq);
        d.insert(d.begin(), batches);
      } else {
        int ax = normalize_axis(a.out_axes[static_cast<size_t>(j)], static_cast<int>(d.size()) + 1);
        d.insert(d.begin() + std::max(ax, 0), seq < 0 ? 0 : seq);
      }
      full = Tensor(decl.dtype == DType::kUndefined ? DType::kFloat32 : decl.dtype, d);
    }
    TSR_RETURN_IF_ERROR(emit_output(ctx, ns + j, full));
  }
  return Status::Ok();
}

}  // namespace

TSR_REGISTER_OPS(control_flow) {
  reg.add(OpSchema{"If", "", infer_if, nullptr, run_if, {}});
  reg.add(OpSchema{"Loop", "", infer_loop, nullptr, run_loop, {}});
  reg.add(OpSchema{"Scan", "", infer_scan, ScanKernel::create, nullptr, {}});
}

}  // namespace tessera
