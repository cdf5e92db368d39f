// Generators of the signal family (opset 17): HannWindow, HammingWindow,
// BlackmanWindow and MelWeightMatrix. Inputs are scalars whose values give the
// output shapes; outputs have the dtype of the output_datatype attribute.
//
// Windows: w[n] = a0 - a1 cos(2 pi n/N) + a2 cos(4 pi n/N) for n < size, with
// N = size (periodic) or size - 1 (symmetric). MelWeightMatrix follows the
// ONNX reference: num_mel_bins + 2 points evenly spaced on the mel scale
// mel(f) = 2595 log10(1 + f/700) between the edge frequencies, mapped to
// spectrogram bins floor((dft_length + 1) f / sample_rate), and one triangle
// of peak 1 per mel bin over [point i, point i + 2].
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "ops/signal_ops.h"

namespace tessera {

namespace {

// The output_datatype attribute as a dtype, undefined when not allowed.
DType output_datatype(const Node& node, bool allow_integers) {
  const DType t = dtype_from_onnx(static_cast<int32_t>(node.attr_int("output_datatype", 1)));
  if (dtype_is_float(t)) return t;
  if (allow_integers && dtype_is_integer(t)) return t;
  return DType::kUndefined;
}

// Fills `out` (of any numeric dtype) from doubles.
void store_doubles(Tensor* out, const std::vector<double>& v) {
  visit_dtype(out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = out->data<T>();
    for (size_t i = 0; i < v.size(); ++i) o[i] = from_double<T>(v[i]);
  });
}

// ---- windows ------------------------------------------------------------------

struct CosineWindow {
  double a0, a1, a2;
};

constexpr CosineWindow kHann{0.5, 0.5, 0.0};
constexpr CosineWindow kHamming{25.0 / 46.0, 21.0 / 46.0, 0.0};
constexpr CosineWindow kBlackman{0.42, 0.5, 0.08};

Status infer_window(InferContext& ctx) {
  const DType dt = output_datatype(ctx.node(), true);
  if (dt == DType::kUndefined) {
    return ctx.error("output_datatype " + std::to_string(ctx.node().attr_int("output_datatype", 1)) +
                     " is not a numeric type");
  }
  const Shape& s = ctx.in_shape(0);
  if (s.rank_known && s.numel_or(1) != 1) return ctx.error("size must be a scalar, got " + s.str());
  int64_t size = 0;
  const int k = known_scalar_int(ctx, 0, &size);
  if (k < 0) return ctx.error("size must be a scalar");
  if (k > 0 && size < 0) return ctx.error("negative window size " + std::to_string(size));
  ctx.set_output(0, dt, k > 0 ? Shape::FromDims({size}) : Shape::Unknown(1));
  return Status::Ok();
}

template <const CosineWindow& W>
Status run_window(KernelContext& ctx) {
  Tensor* out = ctx.output(0);
  const int64_t size = out->numel();
  const bool periodic = ctx.node().attr_int("periodic", 1) != 0;
  const int64_t period = periodic ? size : size - 1;
  std::vector<double> v(static_cast<size_t>(size), 1.0);  // a one-point symmetric window is 1
  if (period > 0) {
    const double step = 2.0 * std::numbers::pi / static_cast<double>(period);
    for (int64_t n = 0; n < size; ++n) {
      const double a = step * static_cast<double>(n);
      v[static_cast<size_t>(n)] = W.a0 - W.a1 * std::cos(a) + W.a2 * std::cos(2.0 * a);
    }
  }
  store_doubles(out, v);
  return Status::Ok();
}

// ---- MelWeightMatrix ----------------------------------------------------------

// Python's float floor division (what the reference's `//` computes), which
// stays exact where floor(a / b) would round a quotient up to an integer.
double floor_div(double a, double b) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0.0 && ((b < 0) != (mod < 0))) div -= 1.0;
  if (div == 0.0) return std::copysign(0.0, a / b);
  double fl = std::floor(div);
  if (div - fl > 0.5) fl += 1.0;
  return fl;
}

Status infer_mel(InferContext& ctx) {
  const DType dt = output_datatype(ctx.node(), true);
  if (dt == DType::kUndefined) return ctx.error("output_datatype is not a numeric type");
  int64_t mel_bins = 0, dft_length = 0;
  const int km = known_scalar_int(ctx, 0, &mel_bins);
  const int kd = known_scalar_int(ctx, 1, &dft_length);
  if (km < 0 || kd < 0) return ctx.error("num_mel_bins and dft_length must be scalars");
  if (km > 0 && mel_bins < 0) return ctx.error("negative num_mel_bins " + std::to_string(mel_bins));
  if (kd > 0 && dft_length < 1) return ctx.error("dft_length must be positive, got " + std::to_string(dft_length));
  ctx.set_output(0, dt, Shape({kd > 0 ? Dim(dft_length / 2 + 1) : Dim(), km > 0 ? Dim(mel_bins) : Dim()}));
  return Status::Ok();
}

Status run_mel(KernelContext& ctx) {
  for (int i = 0; i < 5; ++i) {
    if (ctx.input(i) == nullptr || ctx.input(i)->numel() != 1) return ctx.error("inputs must be scalars");
  }
  const int64_t mel_bins = ctx.input(0)->as_int64(0);
  const int64_t dft_length = ctx.input(1)->as_int64(0);
  const int64_t sample_rate = ctx.input(2)->as_int64(0);
  const double lower_hz = ctx.input(3)->as_double(0);
  const double upper_hz = ctx.input(4)->as_double(0);
  if (dft_length < 1) return ctx.error("dft_length must be positive, got " + std::to_string(dft_length));
  if (sample_rate < 1) return ctx.error("sample_rate must be positive, got " + std::to_string(sample_rate));
  Tensor* out = ctx.output(0);
  const int64_t spec_bins = dft_length / 2 + 1;
  if (out->rank() != 2 || out->dim(0) != spec_bins || out->dim(1) != mel_bins) {
    return ctx.error("output " + out->str() + " does not match the mel matrix");
  }

  auto hz_to_mel = [](double f) { return 2595.0 * std::log10(1.0 + f / 700.0); };
  const double low_mel = hz_to_mel(lower_hz);
  const double mel_step = (hz_to_mel(upper_hz) - low_mel) / static_cast<double>(mel_bins + 2);
  std::vector<int64_t> points(static_cast<size_t>(mel_bins + 2));
  for (int64_t i = 0; i < mel_bins + 2; ++i) {
    const double hz = 700.0 * (std::pow(10.0, (static_cast<double>(i) * mel_step + low_mel) / 2595.0) - 1.0);
    const double bin = floor_div(static_cast<double>(dft_length + 1) * hz, static_cast<double>(sample_rate));
    if (!(std::abs(bin) < 1e15)) return ctx.error("edge frequencies give no finite spectrogram bins");
    points[static_cast<size_t>(i)] = static_cast<int64_t>(bin);
  }

  std::vector<double> m(static_cast<size_t>(spec_bins * mel_bins), 0.0);
  auto set = [&](int64_t bin, int64_t mel, double v) {
    if (bin >= 0 && bin < spec_bins) m[static_cast<size_t>(bin * mel_bins + mel)] = v;
  };
  // Triangles may reach past the spectrogram (upper edge above Nyquist): only
  // the bins inside are visited.
  auto first = [&](int64_t j) { return std::max<int64_t>(j, 0); };
  auto last = [&](int64_t j) { return std::min<int64_t>(j, spec_bins); };  // exclusive
  for (int64_t i = 0; i < mel_bins; ++i) {
    const int64_t left = points[static_cast<size_t>(i)];
    const int64_t center = points[static_cast<size_t>(i + 1)];
    const int64_t right = points[static_cast<size_t>(i + 2)];
    if (center == left) {
      set(center, i, 1.0);
    } else {
      for (int64_t j = first(left); j < last(center + 1); ++j) {
        set(j, i, static_cast<double>(j - left) / static_cast<double>(center - left));
      }
    }
    if (right > center) {
      for (int64_t j = first(center); j < last(right); ++j) {
        set(j, i, static_cast<double>(right - j) / static_cast<double>(right - center));
      }
    }
  }
  store_doubles(out, m);
  return Status::Ok();
}

}  // namespace

void register_signal_window_ops(OpRegistry& reg) {
  reg.add(OpSchema{"HannWindow", "", infer_window, nullptr, run_window<kHann>, {0}});
  reg.add(OpSchema{"HammingWindow", "", infer_window, nullptr, run_window<kHamming>, {0}});
  reg.add(OpSchema{"BlackmanWindow", "", infer_window, nullptr, run_window<kBlackman>, {0}});
  reg.add(OpSchema{"MelWeightMatrix", "", infer_mel, nullptr, run_mel, {0, 1}});
}

}  // namespace tessera
