// Random generators: RandomUniform, RandomNormal (shape attribute),
// RandomUniformLike, RandomNormalLike (shape of the input), Bernoulli
// (probabilities in, 0/1 out) and Multinomial (samples of class indices from
// rows of unnormalized log-probabilities).
//
// Method: a counter-based generator (Philox4x32-10, Salmon et al., SC'11).
// Element i's random words are a pure function of (key, i), so results do not
// depend on how the thread pool splits the work, and kernels hold no mutable
// state (thread-safe without locks). The key is derived from the `seed`
// attribute when present, so a seeded node gives the same tensor on every
// execution; without a seed every execution draws a fresh key from a
// process-wide entropy source and an atomic counter.
//
// Uniform floats use 24 random bits (53 for double); normals use the
// Box-Muller transform on two 53-bit uniforms; Bernoulli compares a 53-bit
// uniform with p; Multinomial inverts the row's cumulative softmax.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/op_registry.h"

namespace tessera {

namespace {

// ---- generator -------------------------------------------------------------------

using Words = std::array<uint32_t, 4>;

// Philox4x32 with 10 rounds: four 32-bit words for counter `block` under `key`.
Words philox(uint64_t key, uint64_t block) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  Words c = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0x243F6A88u, 0x85A308D3u};
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<uint32_t>(p0)};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Process-wide entropy for unseeded nodes, read once.
uint64_t entropy_base() {
  static const uint64_t base = [] {
    std::random_device rd;
    uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    v ^= static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    return splitmix64(v);
  }();
  return base;
}

// The key of one execution of `node`: from its seed attribute, else fresh.
uint64_t execution_key(const Node& node) {
  if (const Attribute* a = node.attr("seed")) {
    const float seed = a->kind == Attribute::Kind::kInt ? static_cast<float>(a->i) : a->f;
    uint32_t bits = 0;
    std::memcpy(&bits, &seed, sizeof bits);
    return splitmix64(0x5EED000000000000ull | bits);
  }
  static std::atomic<uint64_t> counter{0};
  return splitmix64(entropy_base() + counter.fetch_add(1, std::memory_order_relaxed) * 0xD1B54A32D192ED03ull);
}

// Uniform in [0, 1) from 53 bits of two words.
double uniform53(uint32_t hi, uint32_t lo) {
  return static_cast<double>((static_cast<uint64_t>(hi) << 21) ^ (lo >> 11)) * 0x1.0p-53;
}

// Uniform in [0, 1) from the top 24 bits of a word (exact in float).
double uniform24(uint32_t w) { return static_cast<double>(w >> 8) * 0x1.0p-24; }

template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0.0;
  } else {
    return static_cast<T>(v);
  }
}

bool is_generator_float(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 || t == DType::kBFloat16;
}

constexpr int64_t kBlockGrain = 4096;

// Fills out[0, n) with low + (high - low) u, u uniform in [0, 1). Float
// results that round up to `high` are pulled back below it.
template <class T>
void fill_uniform(T* out, int64_t n, uint64_t key, double low, double high, Parallel& pool) {
  constexpr bool kDouble = std::is_same_v<T, double>;
  constexpr int64_t kPerBlock = kDouble ? 2 : 4;
  const double range = high - low;
  const int64_t blocks = (n + kPerBlock - 1) / kPerBlock;
  pool.parallel_for(blocks, kBlockGrain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const Words w = philox(key, static_cast<uint64_t>(b));
      for (int64_t j = 0; j < kPerBlock; ++j) {
        const int64_t i = b * kPerBlock + j;
        if (i >= n) break;
        const double u = kDouble ? uniform53(w[static_cast<size_t>(2 * j)], w[static_cast<size_t>(2 * j + 1)])
                                 : uniform24(w[static_cast<size_t>(j)]);
        T v = from_double<T>(low + range * u);
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
          if (range > 0 && v >= static_cast<T>(high)) v = std::nextafter(static_cast<T>(high), static_cast<T>(low));
        }
        out[i] = v;
      }
    }
  });
}

// Fills out[0, n) with mean + scale z, z standard normal (Box-Muller: each
// block gives two normals from two 53-bit uniforms).
template <class T>
void fill_normal(T* out, int64_t n, uint64_t key, double mean, double scale, Parallel& pool) {
  const int64_t blocks = (n + 1) / 2;
  pool.parallel_for(blocks, kBlockGrain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const Words w = philox(key, static_cast<uint64_t>(b));
      const double u1 = 1.0 - uniform53(w[0], w[1]);  // (0, 1]: log is finite
      const double u2 = uniform53(w[2], w[3]);
      const double r = std::sqrt(-2.0 * std::log(u1));
      const double theta = 2.0 * std::numbers::pi * u2;
      out[2 * b] = from_double<T>(mean + scale * r * std::cos(theta));
      if (2 * b + 1 < n) out[2 * b + 1] = from_double<T>(mean + scale * r * std::sin(theta));
    }
  });
}

// ---- inference ----------------------------------------------------------------------

// The float dtype of a `dtype` attribute, or `fallback` when absent;
// undefined when the attribute names a non-float type.
DType float_dtype_attr(const Node& node, DType fallback) {
  if (!node.has_attr("dtype")) return fallback;
  const DType t = dtype_from_onnx(static_cast<int32_t>(node.attr_int("dtype", 1)));
  return is_generator_float(t) ? t : DType::kUndefined;
}

Status infer_random_shape_attr(InferContext& ctx) {
  const Node& node = ctx.node();
  const DType dt = float_dtype_attr(node, DType::kFloat32);
  if (dt == DType::kUndefined) {
    return ctx.error("dtype " + std::to_string(node.attr_int("dtype", 1)) + " is not a float type");
  }
  if (!node.has_attr("shape")) return ctx.error("missing required attribute 'shape'");
  const Dims shape = node.attr_ints("shape");
  for (int64_t d : shape) {
    if (d < 0) return ctx.error("shape " + dims_str(shape) + " has a negative dimension");
  }
  ctx.set_output(0, dt, shape);
  return Status::Ok();
}

Status infer_random_like(InferContext& ctx) {
  const Node& node = ctx.node();
  const DType in = ctx.in_dtype(0);
  DType dt = in;
  if (node.has_attr("dtype")) {
    dt = float_dtype_attr(node, in);
    if (dt == DType::kUndefined) {
      return ctx.error("dtype " + std::to_string(node.attr_int("dtype", 1)) + " is not a float type");
    }
  } else if (in != DType::kUndefined && !is_generator_float(in)) {
    return ctx.error(std::string("input is ") + dtype_name(in) + "; a float 'dtype' attribute is required");
  }
  ctx.set_output(0, dt, ctx.in_shape(0));
  return Status::Ok();
}

Status infer_bernoulli(InferContext& ctx) {
  const Node& node = ctx.node();
  const DType in = ctx.in_dtype(0);
  if (in != DType::kUndefined && !is_generator_float(in)) {
    return ctx.error(std::string("probabilities must be float, got ") + dtype_name(in));
  }
  DType dt = in;
  if (node.has_attr("dtype")) {
    dt = dtype_from_onnx(static_cast<int32_t>(node.attr_int("dtype", 1)));
    if (!dtype_is_supported(dt)) {
      return ctx.error("dtype " + std::to_string(node.attr_int("dtype", 1)) + " is not a numeric type");
    }
  }
  ctx.set_output(0, dt, ctx.in_shape(0));
  return Status::Ok();
}

Status infer_multinomial(InferContext& ctx) {
  const Node& node = ctx.node();
  const DType in = ctx.in_dtype(0);
  if (in != DType::kUndefined && !is_generator_float(in)) {
    return ctx.error(std::string("input must be float, got ") + dtype_name(in));
  }
  const int64_t dtype_attr = node.attr_int("dtype", 6);
  const DType dt = dtype_from_onnx(static_cast<int32_t>(dtype_attr));
  if (dt != DType::kInt32 && dt != DType::kInt64) {
    return ctx.error("dtype " + std::to_string(dtype_attr) + " must be int32 (6) or int64 (7)");
  }
  const int64_t samples = node.attr_int("sample_size", 1);
  if (samples < 0) return ctx.error("negative sample_size " + std::to_string(samples));
  const Shape& s = ctx.in_shape(0);
  if (s.rank_known && s.rank() != 2) return ctx.error("input must be [batch_size, class_size], got " + s.str());
  ctx.set_output(0, dt, Shape({s.rank_known ? s[0] : Dim(), Dim(samples)}));
  return Status::Ok();
}

// ---- kernels ----------------------------------------------------------------------

template <class Fill>
Status fill_float_output(KernelContext& ctx, Fill&& fill) {
  Tensor* out = ctx.output(0);
  if (!out || out->numel() == 0) return Status::Ok();
  if (!is_generator_float(out->dtype())) {
    return ctx.error(std::string("unsupported output dtype ") + dtype_name(out->dtype()));
  }
  const uint64_t key = execution_key(ctx.node());
  visit_dtype(out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Float16> ||
                  std::is_same_v<T, BFloat16>) {
      fill(out->data<T>(), out->numel(), key);
    }
  });
  return Status::Ok();
}

Status run_uniform(KernelContext& ctx) {
  const double low = ctx.node().attr_float("low", 0.f);
  const double high = ctx.node().attr_float("high", 1.f);
  return fill_float_output(ctx, [&](auto* out, int64_t n, uint64_t key) {
    fill_uniform(out, n, key, low, high, ctx.pool());
  });
}

Status run_normal(KernelContext& ctx) {
  const double mean = ctx.node().attr_float("mean", 0.f);
  const double scale = ctx.node().attr_float("scale", 1.f);
  return fill_float_output(ctx, [&](auto* out, int64_t n, uint64_t key) {
    fill_normal(out, n, key, mean, scale, ctx.pool());
  });
}

// y[i] = 1 with probability p[i] (u < p for u uniform in [0, 1)), else 0.
Status run_bernoulli(KernelContext& ctx) {
  const Tensor* p = ctx.input(0);
  Tensor* out = ctx.output(0);
  if (!out || out->numel() == 0) return Status::Ok();
  if (!is_generator_float(p->dtype())) return ctx.error(std::string("unsupported dtype ") + dtype_name(p->dtype()));
  if (!dtype_is_supported(out->dtype())) return ctx.error("unsupported output dtype");
  const uint64_t key = execution_key(ctx.node());
  const int64_t n = out->numel();
  visit_dtype(p->dtype(), [&](auto ptag) {
    using P = decltype(ptag);
    if constexpr (std::is_same_v<P, float> || std::is_same_v<P, double> || std::is_same_v<P, Float16> ||
                  std::is_same_v<P, BFloat16>) {
      const P* prob = p->data<P>();
      visit_dtype(out->dtype(), [&](auto otag) {
        using O = decltype(otag);
        O* y = out->data<O>();
        const O one = from_double<O>(1.0), zero = from_double<O>(0.0);
        const int64_t blocks = (n + 1) / 2;
        ctx.pool().parallel_for(blocks, kBlockGrain, [&](int64_t b0, int64_t b1) {
          for (int64_t b = b0; b < b1; ++b) {
            const Words w = philox(key, static_cast<uint64_t>(b));
            for (int64_t j = 0; j < 2 && 2 * b + j < n; ++j) {
              const int64_t i = 2 * b + j;
              const double u = uniform53(w[static_cast<size_t>(2 * j)], w[static_cast<size_t>(2 * j + 1)]);
              y[i] = u < static_cast<double>(prob[i]) ? one : zero;
            }
          }
        });
      });
    }
  });
  return Status::Ok();
}

// Each row of the input holds unnormalized log-probabilities; sample s of
// row b is the first class whose cumulative probability exceeds u * total.
Status run_multinomial(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  Tensor* out = ctx.output(0);
  if (!out || out->numel() == 0) return Status::Ok();
  if (x->rank() != 2) return ctx.error("input must be 2-D, got " + x->str());
  if (!is_generator_float(x->dtype())) return ctx.error(std::string("unsupported dtype ") + dtype_name(x->dtype()));
  const int64_t batch = x->dim(0), classes = x->dim(1);
  const int64_t samples = out->dim(1);
  if (classes == 0) return ctx.error("cannot sample from zero classes");
  const uint64_t key = execution_key(ctx.node());
  const bool out64 = out->dtype() == DType::kInt64;
  std::atomic<bool> failed{false};
  visit_dtype(x->dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Float16> ||
                  std::is_same_v<T, BFloat16>) {
      const T* logits = x->data<T>();
      const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, classes + samples));
      ctx.pool().parallel_for(batch, grain, [&](int64_t r0, int64_t r1) {
        std::vector<double> cdf(static_cast<size_t>(classes));
        for (int64_t r = r0; r < r1; ++r) {
          const T* row = logits + r * classes;
          double mx = -std::numeric_limits<double>::infinity();
          for (int64_t c = 0; c < classes; ++c) mx = std::max(mx, static_cast<double>(row[c]));
          double total = 0.0;
          for (int64_t c = 0; c < classes; ++c) {
            const double v = static_cast<double>(row[c]);
            // +inf logits share all the mass; softmax would give NaN.
            total += mx == std::numeric_limits<double>::infinity() ? (v == mx ? 1.0 : 0.0) : std::exp(v - mx);
            cdf[static_cast<size_t>(c)] = total;
          }
          if (!(total > 0.0) || !std::isfinite(total)) {  // NaN logits or every class -inf
            failed.store(true, std::memory_order_relaxed);
            continue;
          }
          // The last class with a nonzero probability, for rounding at the top.
          int64_t last = classes - 1;
          while (last > 0 && cdf[static_cast<size_t>(last)] == cdf[static_cast<size_t>(last - 1)]) --last;
          for (int64_t s = 0; s < samples; ++s) {
            const uint64_t i = static_cast<uint64_t>(r * samples + s);
            const Words w = philox(key, i);
            const double target = uniform53(w[0], w[1]) * total;
            auto it = std::upper_bound(cdf.begin(), cdf.end(), target);
            const int64_t cls = std::min<int64_t>(it - cdf.begin(), last);
            if (out64) {
              out->data<int64_t>()[i] = cls;
            } else {
              out->data<int32_t>()[i] = static_cast<int32_t>(cls);
            }
          }
        }
      });
    }
  });
  if (failed.load()) return ctx.error("a row of log-probabilities is NaN or all -inf");
  return Status::Ok();
}

}  // namespace

TSR_REGISTER_OPS(random) {
  reg.add(OpSchema{"RandomUniform", "", infer_random_shape_attr, nullptr, run_uniform, {}});
  reg.add(OpSchema{"RandomNormal", "", infer_random_shape_attr, nullptr, run_normal, {}});
  reg.add(OpSchema{"RandomUniformLike", "", infer_random_like, nullptr, run_uniform, {}});
  reg.add(OpSchema{"RandomNormalLike", "", infer_random_like, nullptr, run_normal, {}});
  reg.add(OpSchema{"Bernoulli", "", infer_bernoulli, nullptr, run_bernoulli, {}});
  reg.add(OpSchema{"Multinomial", "", infer_multinomial, nullptr, run_multinomial, {}});
}

}  // namespace tessera
