// Signal family: DFT and STFT (opset 17), plus the window and mel filter bank
// generators of signal_windows.cc.
//
// DFT input: [..., n, ..., 1 | 2] (a real or complex signal, the last dim
// holding the real/imaginary parts); output: the same dims with the axis dim
// = dft_length (or dft_length/2+1 when onesided) and a last dim of 2. STFT
// input: [batch, length, 1 | 2]; output [batch, frames, bins, 2] with frames
// = 1 + (length - frame_length) / frame_step. Both load lines (axis rows,
// windowed frames) in double and transform them with signal_fft.h. onesided
// keeps bins [0, n/2] of the full transform whatever the input, as the ONNX
// reference does for complex and inverse transforms too.
#include <algorithm>
#include <memory>
#include <string>

#include "ops/signal_fft.h"
#include "ops/signal_ops.h"

namespace tessera {

namespace {

Status check_float_input(const InferContext& ctx, int i, const char* what) {
  const DType dt = ctx.in_dtype(i);
  if (dt != DType::kUndefined && !dtype_is_float(dt)) {
    return ctx.error(std::string(what) + " must be a float tensor, got " + dtype_name(dt));
  }
  return Status::Ok();
}

// Bins kept of an n-point transform.
int64_t output_bins(int64_t n, bool onesided) { return onesided ? n / 2 + 1 : n; }

// The prepared plan when it has the length asked for, else a new one.
const FftPlan& plan_for(int64_t n, const FftPlan* cached, std::unique_ptr<FftPlan>* local) {
  if (cached != nullptr && cached->size() == n) return *cached;
  *local = std::make_unique<FftPlan>(n);
  return **local;
}

// ---- DFT ----------------------------------------------------------------------

Status infer_dft(InferContext& ctx) {
  TSR_RETURN_IF_ERROR(check_float_input(ctx, 0, "input"));
  const DType dt = ctx.in_dtype(0);
  const bool onesided = ctx.node().attr_int("onesided", 0) != 0;
  const Shape& in = ctx.in_shape(0);
  if (!in.rank_known) {
    ctx.set_output(0, dt, Shape::Unranked());
    return Status::Ok();
  }
  const int r = in.rank();
  if (r < 2) return ctx.error("input needs a signal dim and a last dim of 1 or 2, got " + in.str());
  const int64_t axis_attr = ctx.node().attr_int("axis", 1);
  const int axis = normalize_axis(axis_attr, r);
  if (axis < 0 || axis == r - 1) {
    return ctx.error("axis " + std::to_string(axis_attr) + " is not a signal dim of " + in.str());
  }
  const Dim& comps = in[r - 1];
  if (comps.known() && comps.value != 1 && comps.value != 2) {
    return ctx.error("last dim must be 1 (real) or 2 (complex), got " + in.str());
  }
  Dim len = in[axis];
  if (ctx.has_input(1)) {
    int64_t v = 0;
    const int k = known_scalar_int(ctx, 1, &v);
    if (k < 0) return ctx.error("dft_length must be a scalar");
    if (k > 0 && v < 1) return ctx.error("dft_length must be positive, got " + std::to_string(v));
    len = k > 0 ? Dim(v) : Dim();
  }
  std::vector<Dim> dims = in.dims;
  dims[static_cast<size_t>(axis)] = len.known() ? Dim(output_bins(len.value, onesided)) : (onesided ? Dim() : len);
  dims[static_cast<size_t>(r - 1)] = Dim(2);
  ctx.set_output(0, dt, Shape(std::move(dims)));
  return Status::Ok();
}

Status run_dft(KernelContext& ctx, const FftPlan* cached) {
  const Tensor* x = ctx.input(0);
  Tensor* y = ctx.output(0);
  const int r = x->rank();
  const int axis = normalize_axis(ctx.node().attr_int("axis", 1), r);
  if (axis < 0 || axis == r - 1) return ctx.error("bad axis for input " + x->str());
  const int64_t comps = x->dim(r - 1);
  if (comps != 1 && comps != 2) return ctx.error("last dim must be 1 or 2, got " + x->str());
  const int64_t n_in = x->dim(axis);
  int64_t len = n_in;
  if (const Tensor* l = ctx.input(1)) {
    if (l->numel() != 1) return ctx.error("dft_length must be a scalar");
    len = l->as_int64(0);
  }
  if (len < 1) return ctx.error("DFT length must be positive, got " + std::to_string(len));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x->dim(d);
  for (int d = axis + 1; d < r - 1; ++d) inner *= x->dim(d);
  const int64_t n_out = y->dim(axis);
  if (n_out > len || y->dtype() != x->dtype()) return ctx.error("output " + y->str() + " does not match the DFT");
  if (outer * inner == 0) return Status::Ok();

  std::unique_ptr<FftPlan> local;
  const FftPlan& plan = plan_for(len, cached, &local);
  LineTransform lt;
  lt.num_lines = outer * inner;
  lt.n_out = n_out;
  lt.real_input = comps == 1;
  lt.inverse = ctx.node().attr_int("inverse", 0) != 0;
  const int64_t used = std::min(n_in, len);
  const bool ok = visit_float_dtype(x->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x->data<T>();
    T* yp = y->data<T>();
    const int64_t in_step = inner * comps;  // between consecutive signal samples
    const int64_t out_step = inner * 2;
    auto load = [&](int64_t l, double* re, double* im, ptrdiff_t stride) {
      const int64_t o = l / inner, i = l % inner;
      const T* src = xp + (o * n_in * inner + i) * comps;
      for (int64_t j = 0; j < used; ++j) {
        re[j * stride] = to_double(src[j * in_step]);
        if (im != nullptr) im[j * stride] = to_double(src[j * in_step + 1]);
      }
      for (int64_t j = used; j < len; ++j) {
        re[j * stride] = 0.0;
        if (im != nullptr) im[j * stride] = 0.0;
      }
    };
    auto store = [&](int64_t l, const cdouble* bins) {
      const int64_t o = l / inner, i = l % inner;
      T* dst = yp + (o * n_out * inner + i) * 2;
      for (int64_t k = 0; k < n_out; ++k) {
        dst[k * out_step] = from_double<T>(bins[k].real());
        dst[k * out_step + 1] = from_double<T>(bins[k].imag());
      }
    };
    transform_lines(plan, lt, ctx.pool(), load, store);
  });
  if (!ok) return ctx.error(std::string("unsupported dtype ") + dtype_name(x->dtype()));
  return Status::Ok();
}

// ---- STFT ---------------------------------------------------------------------

Status infer_stft(InferContext& ctx) {
  TSR_RETURN_IF_ERROR(check_float_input(ctx, 0, "signal"));
  const DType dt = ctx.in_dtype(0);
  const bool onesided = ctx.node().attr_int("onesided", 1) != 0;
  const Shape& in = ctx.in_shape(0);
  if (in.rank_known && in.rank() != 3) return ctx.error("signal must be [batch, length, 1 | 2], got " + in.str());
  if (in.rank_known && in[2].known() && in[2].value != 1 && in[2].value != 2) {
    return ctx.error("signal's last dim must be 1 (real) or 2 (complex), got " + in.str());
  }
  const Dim batch = in.rank_known ? in[0] : Dim();
  const int64_t length = in.rank_known && in[1].known() ? in[1].value : -1;

  int64_t step = -1;
  const int ks = known_scalar_int(ctx, 1, &step);
  if (ks < 0) return ctx.error("frame_step must be a scalar");
  if (ks > 0 && step < 1) return ctx.error("frame_step must be positive, got " + std::to_string(step));
  if (ks == 0) step = -1;

  int64_t window = -1;
  if (ctx.has_input(2)) {
    TSR_RETURN_IF_ERROR(check_float_input(ctx, 2, "window"));
    const Shape& w = ctx.in_shape(2);
    if (w.rank_known && w.rank() != 1) return ctx.error("window must be 1-D, got " + w.str());
    if (w.rank_known && w[0].known()) window = w[0].value;
  }
  int64_t frame_length = -1;
  if (ctx.has_input(3)) {
    const int kf = known_scalar_int(ctx, 3, &frame_length);
    if (kf < 0) return ctx.error("frame_length must be a scalar");
    if (kf == 0) frame_length = -1;
  } else if (ctx.has_input(2)) {
    frame_length = window;
  } else {
    frame_length = length;
  }
  if (frame_length == 0 || frame_length < -1) {
    return ctx.error("frame_length must be positive, got " + std::to_string(frame_length));
  }
  Dim frames;
  if (frame_length > 0 && length >= 0) {
    if (frame_length > length) {
      return ctx.error("frame_length " + std::to_string(frame_length) + " exceeds the signal length " +
                       std::to_string(length));
    }
    if (step > 0) frames = Dim(1 + (length - frame_length) / step);
  }
  const Dim bins = frame_length > 0 ? Dim(output_bins(frame_length, onesided)) : Dim();
  ctx.set_output(0, dt, Shape({batch, frames, bins, Dim(2)}));
  return Status::Ok();
}

Status run_stft(KernelContext& ctx, const FftPlan* cached) {
  const Tensor* x = ctx.input(0);
  const Tensor* w = ctx.input(2);
  Tensor* y = ctx.output(0);
  if (x->rank() != 3 || (x->dim(2) != 1 && x->dim(2) != 2)) {
    return ctx.error("signal must be [batch, length, 1 | 2], got " + x->str());
  }
  if (ctx.input(1)->numel() != 1) return ctx.error("frame_step must be a scalar");
  const int64_t batch = x->dim(0), length = x->dim(1), comps = x->dim(2);
  const int64_t step = ctx.input(1)->as_int64(0);
  if (w != nullptr && w->rank() != 1) return ctx.error("window must be 1-D, got " + w->str());
  int64_t frame_length = w != nullptr ? w->dim(0) : length;
  if (const Tensor* f = ctx.input(3)) {
    if (f->numel() != 1) return ctx.error("frame_length must be a scalar");
    frame_length = f->as_int64(0);
  }
  if (step < 1 || frame_length < 1 || frame_length > length) {
    return ctx.error("bad frame_step " + std::to_string(step) + " / frame_length " + std::to_string(frame_length) +
                     " for a signal of length " + std::to_string(length));
  }
  const int64_t frames = 1 + (length - frame_length) / step;
  const int64_t n_out = y->rank() == 4 ? y->dim(2) : -1;
  if (y->rank() != 4 || y->dim(0) != batch || y->dim(1) != frames || n_out > frame_length ||
      y->dtype() != x->dtype()) {
    return ctx.error("output " + y->str() + " does not match the STFT");
  }
  if (batch * frames == 0) return Status::Ok();

  // Window as double (ones without one); its length may differ from the DFT
  // size, frames are then cut or zero-padded to the DFT size.
  const int64_t taken = std::min(w != nullptr ? w->dim(0) : frame_length, frame_length);
  std::vector<double> win(static_cast<size_t>(taken), 1.0);
  if (w != nullptr) {
    for (int64_t j = 0; j < taken; ++j) win[static_cast<size_t>(j)] = w->as_double(j);
  }

  std::unique_ptr<FftPlan> local;
  const FftPlan& plan = plan_for(frame_length, cached, &local);
  LineTransform lt;
  lt.num_lines = batch * frames;
  lt.n_out = n_out;
  lt.real_input = comps == 1;
  const bool ok = visit_float_dtype(x->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x->data<T>();
    T* yp = y->data<T>();
    auto load = [&](int64_t l, double* re, double* im, ptrdiff_t stride) {
      const int64_t b = l / frames, f = l % frames;
      const int64_t start = f * step;
      const int64_t avail = std::min(taken, length - start);
      const T* src = xp + (b * length + start) * comps;
      for (int64_t j = 0; j < avail; ++j) {
        const double wj = win[static_cast<size_t>(j)];
        re[j * stride] = to_double(src[j * comps]) * wj;
        if (im != nullptr) im[j * stride] = to_double(src[j * comps + 1]) * wj;
      }
      for (int64_t j = avail; j < frame_length; ++j) {
        re[j * stride] = 0.0;
        if (im != nullptr) im[j * stride] = 0.0;
      }
    };
    auto store = [&](int64_t l, const cdouble* bins) {
      T* dst = yp + l * n_out * 2;
      for (int64_t k = 0; k < n_out; ++k) {
        dst[2 * k] = from_double<T>(bins[k].real());
        dst[2 * k + 1] = from_double<T>(bins[k].imag());
      }
    };
    transform_lines(plan, lt, ctx.pool(), load, store);
  });
  if (!ok) return ctx.error(std::string("unsupported dtype ") + dtype_name(x->dtype()));
  return Status::Ok();
}

// ---- kernels with a prepared plan --------------------------------------------------

// DFT and STFT kernels keep the FFT plan (twiddles, Bluestein chirp) made at
// creation when the transform length is known then; runs with another length
// make their own.
class SignalKernel final : public Kernel {
 public:
  using RunFn = Status (*)(KernelContext&, const FftPlan*);
  SignalKernel(RunFn fn, int64_t len) : fn_(fn) {
    // Longer plans are made by the run, once its output has passed the size and memory checks (a hostile constant
    // dft_length of 2^30 asked for 8 GB of twiddles here).
    if (len > 0 && len <= (int64_t{1} << 20)) plan_ = std::make_unique<FftPlan>(len);
  }
  Status run(KernelContext& ctx) const override { return fn_(ctx, plan_.get()); }

 private:
  RunFn fn_;
  std::unique_ptr<FftPlan> plan_;
};

// Known integer scalar at kernel creation (constant input), else -1.
int64_t const_scalar(const KernelInit& init, int i) {
  if (i >= static_cast<int>(init.const_inputs.size()) || init.const_inputs[static_cast<size_t>(i)] == nullptr) {
    return -1;
  }
  const Tensor* t = init.const_inputs[static_cast<size_t>(i)];
  return t->numel() == 1 ? t->as_int64(0) : -1;
}

// Known dim d of input i at kernel creation, else -1.
int64_t static_dim(const KernelInit& init, int i, int d) {
  if (i >= static_cast<int>(init.in_info.size())) return -1;
  const Shape& s = init.in_info[static_cast<size_t>(i)].shape;
  if (!s.rank_known) return -1;
  const int r = s.rank();
  const int a = normalize_axis(d, r);
  return a >= 0 && s[a].known() ? s[a].value : -1;
}

Expected<std::unique_ptr<Kernel>> create_dft(const KernelInit& init) {
  int64_t len = -1;
  if (init.node.has_input(1)) {
    len = const_scalar(init, 1);
  } else if (init.node.has_input(0) && !init.in_info.empty() && init.in_info[0].shape.rank_known) {
    const int axis = static_cast<int>(init.node.attr_int("axis", 1));
    len = static_dim(init, 0, axis);
  }
  return std::unique_ptr<Kernel>(std::make_unique<SignalKernel>(run_dft, len));
}

Expected<std::unique_ptr<Kernel>> create_stft(const KernelInit& init) {
  int64_t len = -1;
  if (init.node.has_input(3)) {
    len = const_scalar(init, 3);
  } else if (init.node.has_input(2)) {
    len = static_dim(init, 2, 0);
  } else {
    len = static_dim(init, 0, 1);
  }
  return std::unique_ptr<Kernel>(std::make_unique<SignalKernel>(run_stft, len));
}

}  // namespace

TSR_REGISTER_OPS(signal) {
  reg.add(OpSchema{"DFT", "", infer_dft, create_dft, nullptr, {1}});
  reg.add(OpSchema{"STFT", "", infer_stft, create_stft, nullptr, {1, 3}});
  register_signal_window_ops(reg);
}

}  // namespace tessera
