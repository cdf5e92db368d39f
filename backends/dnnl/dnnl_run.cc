// Running a loaded engine.
//
// The plan (primitives, memory descriptors, arena offsets) is immutable after
// load and shared by every run. What a run mutates lives in a RunContext: a
// stream, the arena, the scratchpad every primitive shares (they are created
// with scratchpad_mode::user, so a primitive keeps no state of its own), and
// the dnnl::memory objects, whose data handles are pointed at the host's
// buffers before each run. An engine keeps idle contexts in a pool; a run
// takes one (or builds one) and gives it back, so concurrent runs on one
// engine never share mutable state: the table sets
// TESSERA_BACKEND_FLAG_CONCURRENT_RUN.
//
// Threads: oneDNN runs on OpenMP here. omp_set_num_threads() sets the
// calling thread's team size, so each run sets it to the session's count
// before executing (and load did before generating kernels). A region whose
// whole run is a few microseconds of work (kTinyWorkUs on one thread) runs
// on the calling thread alone: waking OpenMP's worker costs more than it
// saves, and once that worker has gone to sleep between runs the wake-up
// alone took a 9 us MLP to 1 ms per run in some processes.
//
// A profiled run (run_profiled) executes the same primitives but waits for
// each before starting the next, so each one's wall time is its own, and
// reports it with the nodes it covers and oneDNN's implementation name; the
// plain run never waits between primitives.
// First: it brings <immintrin.h> with GCC 12's false uninitialized warnings of the AVX-512 intrinsics silenced.
#include "ops/kernels/softmax_row.h"  // header-only, shared with native

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "dnnl_cost.h"
#include "dnnl_engine.h"
#include "ops/dynamic_quantize_math.h"  // header-only, shared with native
#include "ops/elementwise_avx512.h"     // header-only: the logistic native and ONNX Runtime compute, on 16 lanes
#include "ops/elementwise_math.h"  // header-only: the logistic native and ONNX Runtime compute
#include "ops/qlinear_add_math.h"  // header-only, shared with native

namespace tessera_dnnl {

namespace {
constexpr double kTinyWorkUs = 30.0;
constexpr size_t kLookupChunk = size_t{1} << 16;  // elements per task of a step the plugin runs itself

// y[i] = table[x[i] ^ flip] for i < n, 64 bytes at a time with AVX-512 VBMI: the 256-byte table is four registers;
// vpermi2b looks up 128 entries at once by the low 7 bits, the top bit picks which half. Returns how many bytes it
// did (a multiple of 64); the caller does the rest. In a namespace named avx512* (scripts/isa_check.py): called only
// where has_vbmi() says the CPU runs it.
namespace avx512_vbmi {
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) size_t lookup_vbmi(const uint8_t* x, uint8_t* y, size_t n,
                                                                           const uint8_t* table, uint8_t flip) {
  const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
  const __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
  const __m512i f = _mm512_set1_epi8(static_cast<char>(flip));
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512i idx = _mm512_xor_si512(_mm512_loadu_si512(x + i), f);
    const __m512i lo = _mm512_permutex2var_epi8(t0, idx, t1), hi = _mm512_permutex2var_epi8(t2, idx, t3);
    _mm512_storeu_si512(y + i, _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), lo, hi));
  }
  return i;
}

// Interleaves c (1 to 4) byte runs q[ch * stride ..] into y[i * c + ch] for positions i < n, 16 positions (16 * c
// bytes) per permute; returns the positions done (a multiple of 16); the caller does the rest.
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) size_t interleave_vbmi(const uint8_t* q, int64_t stride,
                                                                              int64_t c, size_t n, uint8_t* y) {
  alignas(64) uint8_t idx[64] = {};
  for (int64_t j = 0; j < 16 * c; ++j) idx[j] = static_cast<uint8_t>(j % c * 16 + j / c);
  const __m512i perm = _mm512_load_si512(idx);
  const __mmask64 out = c == 4 ? ~__mmask64{0} : (__mmask64{1} << (16 * c)) - 1;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i v = _mm512_setzero_si512();
    for (int64_t ch = 0; ch < c; ++ch) {
      const __m512i run =
          _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + ch * stride + i)));
      v = _mm512_mask_mov_epi32(v, static_cast<__mmask16>(0xF << (4 * ch)), _mm512_shuffle_i32x4(run, run, 0));
    }
    _mm512_mask_storeu_epi8(y + i * static_cast<size_t>(c), out, _mm512_permutexvar_epi8(perm, v));
  }
  return i;
}
}  // namespace avx512_vbmi

// AVX-512 F, BW, DQ and VL, as Tessera's cpu::avx512(): the softmax rows of ops/kernels/softmax_row.h. TESSERA_ISA=avx2
// (Tessera's dispatch switch) keeps to the portable loops, so that tests reach them on any CPU.
bool has_avx512() {
  static const bool yes = [] {
    const char* isa = std::getenv("TESSERA_ISA");
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           !(isa && std::string(isa) == "avx2");
  }();
  return yes;
}

// DequantizeLinear's (x - zp) * scale, 16 elements at a time (the same two roundings as the scalar loop, this file
// being compiled without contraction). Returns how many it did (a multiple of 16); the caller does the rest. Called
// only where has_avx512() says the CPU runs it.
namespace avx512 {
template <bool kSigned>
__attribute__((target("avx512f,avx512bw,avx512vl"))) size_t dequantize(const uint8_t* x, size_t n, float scale,
                                                                       float zp, float* y) {
  const __m512 s = _mm512_set1_ps(scale), z = _mm512_set1_ps(zp);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    const __m512i w = kSigned ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(w), z), s));
  }
  return i;
}

// The Sigmoid, HardSwish and linear steps the plugin runs itself (own_eltwise), 16 elements at a time with the scalar
// loop's bits (ops/elementwise_avx512.h; linear: the product and the sum rounded apart, this file being compiled
// without contraction). All n elements, the last ones masked.
__attribute__((target("avx512f"))) void own_eltwise(int32_t alg, const float* x, float* y, size_t n, float a, float b) {
  namespace fa = tessera::fastmath::avx512;
  const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
    const __m512 r = alg == dnnl_eltwise_logistic    ? fa::logistic16(v)
                     : alg == dnnl_eltwise_swish     ? _mm512_mul_ps(v, fa::logistic16(v))
                     : alg == dnnl_eltwise_hardswish ? fa::hard_swish16(v)
                                                     : _mm512_add_ps(_mm512_mul_ps(va, v), vb);
    _mm512_mask_storeu_ps(y + i, k, r);
  }
}
}  // namespace avx512

// The byte lookups' VBMI permutes, on top of has_avx512().
bool has_vbmi() {
  static const bool yes = has_avx512() && __builtin_cpu_supports("avx512vbmi");
  return yes;
}

// Softmax or log-softmax over rows of step.inner floats, the rows shared by the run's OpenMP team.
void run_softmax(const Step& step, std::unordered_map<int, dnnl::memory>& args) {
  const dnnl::memory& xm = args.at(DNNL_ARG_SRC_0);
  const auto* x = static_cast<const float*>(xm.get_data_handle());
  auto* y = static_cast<float*>(args.at(DNNL_ARG_DST).get_data_handle());
  const int64_t n = step.inner, rows = static_cast<int64_t>(xm.get_desc().get_size() / sizeof(float)) / n;
  const bool log = step.alg == dnnl_softmax_log;
#pragma omp parallel if (rows * n > 16384)
  {
    const tessera::rowk::FlushDenormals flush;  // masked scores' exponentials; once per thread
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) tessera::rowk::avx512::softmax_row(x + r * n, y + r * n, n, log);
  }
}

// An attention by chunks of query rows (AttentionChunks): per chunk, the scores Q x K into the workspace, the
// softmax of each of its rows in place (as run_softmax computes them), then P x V into the chunk's rows of Y. Each
// primitive is waited for before the next reads its result.
void run_attention(const AttentionChunks& a, std::unordered_map<int, dnnl::memory>& args, dnnl::stream& stream) {
  const dnnl::engine eng = stream.get_engine();
  auto* q = static_cast<float*>(args.at(DNNL_ARG_SRC_0).get_data_handle());
  void* k = args.at(DNNL_ARG_SRC_1).get_data_handle();
  void* v = args.at(DNNL_ARG_SRC_2).get_data_handle();
  auto* s = static_cast<float*>(args.at(DNNL_ARG_WORKSPACE).get_data_handle());
  auto* y = static_cast<float*>(args.at(DNNL_ARG_DST).get_data_handle());
  void* scratch = args.count(DNNL_ARG_SCRATCHPAD) ? args.at(DNNL_ARG_SCRATCHPAD).get_data_handle() : nullptr;
  const dnnl::memory km(a.k, eng, k), vm(a.v, eng, v);
  for (int64_t r0 = 0; r0 < a.rows; r0 += a.chunk) {
    const AttentionChunks::Part& p = a.parts[r0 + a.chunk <= a.rows ? 0 : 1];
    const dnnl::memory qm(p.q, eng, q + r0 * a.q_row), sm(p.s, eng, s), ym(p.y, eng, y + r0 * a.y_row);
    std::unordered_map<int, dnnl::memory> sa{{DNNL_ARG_SRC, qm}, {DNNL_ARG_WEIGHTS, km}, {DNNL_ARG_DST, sm}};
    for (size_t j = 0; j < a.mask_post.size(); ++j) {  // the chunk's rows of each mask
      auto* m = static_cast<float*>(args.at(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(j)).get_data_handle());
      sa.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(a.mask_post[j]) | DNNL_ARG_SRC_1,
                 dnnl::memory(p.masks[j], eng, m + r0 * a.mask_row[j]));
    }
    if (p.scratch_scores.get_size() > 0) sa.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p.scratch_scores, eng, scratch));
    p.scores.execute(stream, sa);
    stream.wait();
    const int64_t rows = a.heads * p.rows, n = a.row_len;
#pragma omp parallel
    {
      const tessera::rowk::FlushDenormals flush;  // masked scores' exponentials; once per thread
#pragma omp for schedule(static)
      for (int64_t i = 0; i < rows; ++i) tessera::rowk::avx512::softmax_row(s + i * n, s + i * n, n, false);
    }
    std::unordered_map<int, dnnl::memory> va{{DNNL_ARG_SRC, sm}, {DNNL_ARG_WEIGHTS, vm}, {DNNL_ARG_DST, ym}};
    if (p.scratch_values.get_size() > 0) va.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p.scratch_values, eng, scratch));
    p.values.execute(stream, va);
    stream.wait();
  }
}

// An element as float: dequantized, (x - zp) * scale (8-bit), or as it is (float32). DequantizeLinear and the
// operands of a DqBinary.
template <class T>
inline float operand_value(T x, float scale, float zp) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    return (static_cast<float>(x) - zp) * scale;
  }
}

template <class T>
void dequantize_elements(const T* x, size_t n, float scale, float zp, float* y) {
  for (size_t i = 0; i < n; ++i) y[i] = operand_value(x[i], scale, zp);
}

// y = [relu](op(dq(a), dq(b))), rounding each step as the unfused ops do (this file is compiled without
// floating-point contraction, so no multiply-add is fused).
template <class TA, class TB, class F>
void dq_binary(const TA* a, float sa, float za, const TB* b, float sb, float zb, size_t n, bool relu, float* y, F f) {
  for (size_t i = 0; i < n; ++i) {
    const float r = f(operand_value(a[i], sa, za), operand_value(b[i], sb, zb));
    y[i] = relu ? std::max(r, 0.f) : r;
  }
}

template <class TA, class TB>
void dq_binary_alg(const TA* a, const TB* b, const Step& s, size_t n, float* y) {
  const float sa = s.scale, za = s.zero_point, sb = s.scale2, zb = s.zero_point2;
  switch (s.alg) {
    case dnnl_binary_add: dq_binary(a, sa, za, b, sb, zb, n, s.relu, y, [](float u, float v) { return u + v; }); break;
    case dnnl_binary_sub: dq_binary(a, sa, za, b, sb, zb, n, s.relu, y, [](float u, float v) { return u - v; }); break;
    case dnnl_binary_mul: dq_binary(a, sa, za, b, sb, zb, n, s.relu, y, [](float u, float v) { return u * v; }); break;
    case dnnl_binary_div: dq_binary(a, sa, za, b, sb, zb, n, s.relu, y, [](float u, float v) { return u / v; }); break;
    case dnnl_binary_max:
      dq_binary(a, sa, za, b, sb, zb, n, s.relu, y, [](float u, float v) { return std::max(u, v); });
      break;
    default: dq_binary(a, sa, za, b, sb, zb, n, s.relu, y, [](float u, float v) { return std::min(u, v); }); break;
  }
}

// Elements [begin, begin + n) of a DqBinary: dispatch on the operands' types (uint8, int8 or float32 each).
void run_dq_binary(const Step& s, const void* a, const void* b, size_t begin, size_t n, float* y) {
  auto with_b = [&](const auto* ap) {
    if (s.scale2 == 0.f) dq_binary_alg(ap, static_cast<const float*>(b) + begin, s, n, y);
    else if (s.int8_2) dq_binary_alg(ap, static_cast<const int8_t*>(b) + begin, s, n, y);
    else dq_binary_alg(ap, static_cast<const uint8_t*>(b) + begin, s, n, y);
  };
  if (s.scale == 0.f) with_b(static_cast<const float*>(a) + begin);
  else if (s.int8) with_b(static_cast<const int8_t*>(a) + begin);
  else with_b(static_cast<const uint8_t*>(a) + begin);
}

// DynamicQuantizeLinear's scale and zero point (ONNX's function body, in float32, as Tessera's native kernel and
// ONNX Runtime compute them): scale = (max - min) / 255, zero point = round half to even of clip(0 - min / scale,
// 0, 255); an all-zero input has scale 0 and zero point 0.
void quant_params(const float* x, size_t n, float* params) {
  const auto chunks = static_cast<int64_t>((n + kLookupChunk - 1) / kLookupChunk);
  std::vector<float> mins(static_cast<size_t>(chunks)), maxs(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t begin = static_cast<size_t>(c) * kLookupChunk;
    tessera::dynq::min_max_with_zero(x + begin, std::min(n, begin + kLookupChunk) - begin,
                                     &mins[static_cast<size_t>(c)], &maxs[static_cast<size_t>(c)]);
  }
  float mn = 0.f, mx = 0.f;
  for (int64_t c = 0; c < chunks; ++c) {
    mn = mins[static_cast<size_t>(c)] < mn ? mins[static_cast<size_t>(c)] : mn;
    mx = maxs[static_cast<size_t>(c)] > mx ? maxs[static_cast<size_t>(c)] : mx;
  }
  const tessera::dynq::Params p = tessera::dynq::params_from_range(mn, mx);
  params[0] = p.scale;
  params[1] = p.zero_point;
}

// A zero point as an integer: whole and within 8 bits where a quantization reads it (check_op, or kQuantParams
// writing P); anything else (a damaged blob can point a step at another value) reads as 0 rather than reaching an
// undefined float-to-int conversion.
int32_t run_time_zero_point(float z) { return z >= -128.f && z <= 255.f ? static_cast<int32_t>(z) : 0; }

// After a convolution (matmul) of uint8 weights (Step::w_offsets): acc holds [positions, M + 1] int32, channel
// (column) M the window (row) sum S; y[p, m] = float(acc[p, m] + (128 - w_zp[m]) * S[p]) * (scale * w_scale[m]), the
// exact integer sum cast and multiplied as the model's Cast and Mul do; then bias[m] added and a relu, where the
// step has them (each rounded as the model's Add). `n` counts acc's elements.
void run_dyn_u8(const Step& step, const float* params, const int32_t* acc, size_t n, const float* bias, float* y) {
  const size_t m = step.w_offsets.size(), positions = n / (m + 1);
  std::vector<float> scale(m);
  for (size_t j = 0; j < m; ++j) scale[j] = params[0] * step.w_scales[j];
  const int32_t* off = step.w_offsets.data();
  const float* sc = scale.data();
  const auto chunks = static_cast<int64_t>((positions * m + kLookupChunk - 1) / kLookupChunk);
  const size_t per = (positions + static_cast<size_t>(chunks) - 1) / static_cast<size_t>(chunks);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t end = std::min(positions, (static_cast<size_t>(c) + 1) * per);
    for (size_t p = static_cast<size_t>(c) * per; p < end; ++p) {
      const int32_t* a = acc + p * (m + 1);
      const int32_t sum = a[m];
      float* out = y + p * m;
      for (size_t j = 0; j < m; ++j) out[j] = static_cast<float>(a[j] + off[j] * sum) * sc[j];
      if (bias) {
        for (size_t j = 0; j < m; ++j) out[j] += bias[j];
      }
      if (step.relu) {
        for (size_t j = 0; j < m; ++j) out[j] = std::max(out[j], 0.f);
      }
    }
  }
}

// A plane binary (plane_operand): y = x * p or x + p, P [Np, 1, spatial...] (Np 1 or N) broadcast over X's channels,
// X and Y in one layout (Step::inner: 0 plain, 1 channels-last, B channels blocked by B, whole blocks). In place, a
// multiply visits only the positions whose plane value is not 1 (x * 1 is x): a padding mask of ones but for a few
// columns costs those columns. One rounding per element, as native's Mul and Add.
void run_plane_binary(const Step& step, std::unordered_map<int, dnnl::memory>& args) {
  const dnnl::memory& xm = args.at(DNNL_ARG_SRC_0);
  const dnnl::memory::desc xmd = xm.get_desc(), pmd = args.at(DNNL_ARG_SRC_1).get_desc();
  const float* x = static_cast<const float*>(xm.get_data_handle());
  const float* p = static_cast<const float*>(args.at(DNNL_ARG_SRC_1).get_data_handle());
  float* y = static_cast<float*>(args.at(DNNL_ARG_DST).get_data_handle());
  const int64_t n = xmd.data.dims[0], c = xmd.data.dims[1], np = pmd.data.dims[0];
  int64_t size = 1;
  for (int d = 2; d < xmd.data.ndims; ++d) size *= xmd.data.dims[d];
  const bool mul = step.alg == dnnl_binary_mul;
  // Per plane, the runs of positions [begin, end) to compute.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> runs(static_cast<size_t>(np));
  for (int64_t b = 0; b < np; ++b) {
    auto& r = runs[static_cast<size_t>(b)];
    if (!(mul && x == y)) {
      r.emplace_back(0, size);
      continue;
    }
    const float* pb = p + b * size;
    for (int64_t s = 0; s < size;) {
      while (s < size && pb[s] == 1.f) ++s;
      const int64_t begin = s;
      while (s < size && pb[s] != 1.f) ++s;
      if (s > begin) r.emplace_back(begin, s);
    }
  }
  const int64_t layout = step.inner, block = layout > 1 ? layout : 1;
  // Work items: (batch entry, channel or block of channels) for plain and blocked X; (batch entry, run) for
  // channels-last.
  const int64_t units = layout == 1 ? 0 : c / block;
  std::vector<std::pair<int64_t, size_t>> cl_items;
  if (layout == 1) {
    for (int64_t b = 0; b < n; ++b) {
      for (size_t i = 0; i < runs[static_cast<size_t>(np == 1 ? 0 : b)].size(); ++i) cl_items.emplace_back(b, i);
    }
  }
  const int64_t items = layout == 1 ? static_cast<int64_t>(cl_items.size()) : n * units;
#pragma omp parallel for schedule(static) if (items > 1 && n * c * size >= (int64_t{1} << 14))
  for (int64_t it = 0; it < items; ++it) {
    if (layout == 1) {
      const int64_t b = cl_items[static_cast<size_t>(it)].first;
      const auto [begin, end] = runs[static_cast<size_t>(np == 1 ? 0 : b)][cl_items[static_cast<size_t>(it)].second];
      const float* pb = p + (np == 1 ? 0 : b) * size;
      for (int64_t s = begin; s < end; ++s) {
        const float v = pb[s];
        const float* xs = x + (b * size + s) * c;
        float* ys = y + (b * size + s) * c;
        for (int64_t k = 0; k < c; ++k) ys[k] = mul ? xs[k] * v : xs[k] + v;
      }
      continue;
    }
    const int64_t b = it / units;
    const float* pb = p + (np == 1 ? 0 : b) * size;
    const float* xu = x + it * size * block;  // this channel (plain) or block of channels
    float* yu = y + it * size * block;
    for (const auto& [begin, end] : runs[static_cast<size_t>(np == 1 ? 0 : b)]) {
      if (block == 1) {
        for (int64_t s = begin; s < end; ++s) yu[s] = mul ? xu[s] * pb[s] : xu[s] + pb[s];
        continue;
      }
      for (int64_t s = begin; s < end; ++s) {
        const float v = pb[s];
        for (int64_t k = 0; k < block; ++k) {
          yu[s * block + k] = mul ? xu[s * block + k] * v : xu[s * block + k] + v;
        }
      }
    }
  }
}

// BatchNormalization as native computes it (ONNX Runtime's rounding order; this file is compiled without
// floating-point contraction): a = (1 / sqrt(var + eps)) * scale, b = bias - mean * a, y = x * a + b, channel c of
// element i being (i / inner) % C (Step::inner: 1 channels-last, else the spatial size of a plain X).
void run_batch_norm(const Step& step, std::unordered_map<int, dnnl::memory>& args) {
  auto data = [&](int arg) { return static_cast<const float*>(args.at(arg).get_data_handle()); };
  const float *scale = data(DNNL_ARG_SCALE), *bias = data(DNNL_ARG_SHIFT), *mean = data(DNNL_ARG_MEAN),
              *var = data(DNNL_ARG_VARIANCE);
  const dnnl::memory::desc xmd = args.at(DNNL_ARG_SRC_0).get_desc();
  const auto c = static_cast<size_t>(xmd.data.dims[1]);
  std::vector<float> a(c), b(c);
  for (size_t k = 0; k < c; ++k) {
    const float inv_std = 1.0f / std::sqrt(var[k] + step.scale);
    a[k] = inv_std * scale[k];
    b[k] = bias[k] - mean[k] * a[k];
  }
  const float* x = data(DNNL_ARG_SRC_0);
  float* y = static_cast<float*>(args.at(DNNL_ARG_DST).get_data_handle());
  const size_t n = xmd.get_size() / sizeof(float), inner = static_cast<size_t>(step.inner);
  const auto chunks = static_cast<int64_t>((n + kLookupChunk - 1) / kLookupChunk);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const size_t begin = static_cast<size_t>(ch) * kLookupChunk, end = std::min(n, begin + kLookupChunk);
    // In runs of one pixel's channels (channels-last) or of one channel's plane (plain), each a loop the compiler
    // vectorizes: no division per element.
    size_t i = begin;
    if (inner == 1) {
      for (size_t k = i % c; i < end; k = 0) {
        const size_t run = std::min(end - i, c - k);
        for (size_t j = 0; j < run; ++j) y[i + j] = x[i + j] * a[k + j] + b[k + j];
        i += run;
      }
    } else {
      for (size_t at = i % inner, k = (i / inner) % c; i < end; at = 0, k = k + 1 == c ? 0 : k + 1) {
        const size_t run = std::min(end - i, inner - at);
        const float ak = a[k], bk = b[k];
        for (size_t j = 0; j < run; ++j) y[i + j] = x[i + j] * ak + bk;
        i += run;
      }
    }
  }
}

// A dequantizing global average pool (kPool with floats): per image and channel, the exact sum of the 8-bit source
// less the zero point at every position, times the scale over the positions, rounded once. Channels-last (inner 1):
// blocks of channels summed down the positions, each block a task; plain: each channel's positions in a row.
template <typename T>
void dequantizing_pool(const Step& step, const T* x, int64_t images, int64_t c, int64_t positions, float* y) {
  const double k = static_cast<double>(step.scale) / static_cast<double>(positions);
  const int64_t offset = positions * static_cast<int64_t>(step.zero_point);
  auto finish = [&](int64_t sum) { return static_cast<float>(static_cast<double>(sum - offset) * k); };
  const bool parallel = images * c * positions > static_cast<int64_t>(kLookupChunk);
  if (step.inner == 1) {
    constexpr int64_t kBlock = 256;
    const int64_t blocks = (c + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t t = 0; t < images * blocks; ++t) {
      const int64_t b = t / blocks, c0 = t % blocks * kBlock, cn = std::min(kBlock, c - c0);
      int64_t sums[kBlock] = {};
      // int32 partial sums over at most 2^23 positions (255 * 2^23 < 2^31), vectorized, added up in int64.
      for (int64_t p0 = 0; p0 < positions; p0 += int64_t{1} << 23) {
        int32_t part[kBlock] = {};
        const int64_t p1 = std::min(positions, p0 + (int64_t{1} << 23));
        for (int64_t p = p0; p < p1; ++p) {
          const T* row = x + (b * positions + p) * c + c0;
          for (int64_t j = 0; j < cn; ++j) part[j] += row[j];
        }
        for (int64_t j = 0; j < cn; ++j) sums[j] += part[j];
      }
      for (int64_t j = 0; j < cn; ++j) y[b * c + c0 + j] = finish(sums[j]);
    }
  } else {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t t = 0; t < images * c; ++t) {
      const T* row = x + t * positions;
      int64_t sum = 0;
      for (int64_t p = 0; p < positions; ++p) sum += row[p];
      y[t] = finish(sum);
    }
  }
}

void run_dequantizing_pool(const Step& step, std::unordered_map<int, dnnl::memory>& args) {
  const dnnl::memory& xm = args.at(DNNL_ARG_SRC_0);
  const dnnl::memory::desc xmd = xm.get_desc();
  int64_t positions = 1;
  for (int d = 2; d < xmd.data.ndims; ++d) positions *= xmd.data.dims[d];
  const int64_t images = xmd.data.dims[0], c = xmd.data.dims[1];
  auto* y = static_cast<float*>(args.at(DNNL_ARG_DST).get_data_handle());
  if (step.int8) {
    dequantizing_pool(step, static_cast<const int8_t*>(xm.get_data_handle()), images, c, positions, y);
  } else {
    dequantizing_pool(step, static_cast<const uint8_t*>(xm.get_data_handle()), images, c, positions, y);
  }
}

// A Concat of plain operands (DNNL_ARG_MULTIPLE_SRC + k) along `axis` into a plain destination: per outer index
// (the dims before the axis), each operand's block in turn.
void run_concat_plain(std::unordered_map<int, dnnl::memory>& args, int axis) {
  std::vector<std::pair<const char*, size_t>> blocks;  // source, bytes per outer index
  const dnnl::memory& dm = args.at(DNNL_ARG_DST);
  const dnnl::memory::desc dmd = dm.get_desc();
  const auto outer = static_cast<size_t>(numel(Dims(dmd.data.dims, dmd.data.dims + axis)));
  for (int k = 0; args.count(DNNL_ARG_MULTIPLE_SRC + k); ++k) {
    const dnnl::memory& m = args.at(DNNL_ARG_MULTIPLE_SRC + k);
    blocks.emplace_back(static_cast<const char*>(m.get_data_handle()), m.get_desc().get_size() / outer);
  }
  const size_t row = dmd.get_size() / outer;
  char* dst = static_cast<char*>(dm.get_data_handle());
  // Each (outer index, operand) block is a task: the copies of an image's few large blocks spread over the team.
  const auto tasks = static_cast<int64_t>(outer * blocks.size());
#pragma omp parallel for schedule(static) if (dmd.get_size() > 4 * kLookupChunk)
  for (int64_t t = 0; t < tasks; ++t) {
    const size_t o = static_cast<size_t>(t) / blocks.size(), k = static_cast<size_t>(t) % blocks.size();
    size_t at = 0;
    for (size_t j = 0; j < k; ++j) at += blocks[j].second;
    std::memcpy(dst + o * row + at, blocks[k].first + o * blocks[k].second, blocks[k].second);
  }
}

// A Concat along the channels into a channels-last destination of operands (DNNL_ARG_MULTIPLE_SRC + k) held
// channels-last (a run of channels per position, copied whole) or plain (channels a plane apart, gathered): per
// position, each operand's channels in turn.
void run_concat_channels_last(std::unordered_map<int, dnnl::memory>& args) {
  struct Run {
    const char* src;
    size_t bytes;            // per position
    size_t channels = 0;     // a plain operand: its channels, their stride, and the image's size (bytes)
    size_t plane = 0, image = 0;
  };
  std::vector<Run> runs;
  size_t elem = 1;
  for (int k = 0; args.count(DNNL_ARG_MULTIPLE_SRC + k); ++k) {
    const dnnl::memory& m = args.at(DNNL_ARG_MULTIPLE_SRC + k);
    const dnnl::memory::desc md = m.get_desc();
    const auto c = static_cast<size_t>(md.data.dims[1]);
    const auto positions = static_cast<size_t>(numel(Dims(md.data.dims, md.data.dims + md.data.ndims))) / c;
    Run r{static_cast<const char*>(m.get_data_handle()), md.get_size() / positions};
    elem = r.bytes / c;
    if (md.data.format_desc.blocking.strides[1] != 1 || c == 1) {  // plain: [N, C, spatial...]
      r.channels = c;
      r.plane = positions / static_cast<size_t>(md.data.dims[0]) * elem;
      r.image = r.plane * c;
    }
    runs.push_back(r);
  }
  const dnnl::memory& dm = args.at(DNNL_ARG_DST);
  const dnnl::memory::desc dmd = dm.get_desc();
  const auto positions = static_cast<size_t>(numel(Dims(dmd.data.dims, dmd.data.dims + dmd.data.ndims)) / dmd.data.dims[1]);
  const size_t row = dmd.get_size() / positions;
  char* dst = static_cast<char*>(dm.get_data_handle());
  const auto chunks = static_cast<int64_t>((dmd.get_size() + 4 * kLookupChunk - 1) / (4 * kLookupChunk));
  const size_t per = (positions + static_cast<size_t>(chunks) - 1) / static_cast<size_t>(chunks);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t end = std::min(positions, (static_cast<size_t>(c) + 1) * per);
    for (size_t p = static_cast<size_t>(c) * per; p < end; ++p) {
      char* out = dst + p * row;
      for (const Run& r : runs) {
        if (r.channels == 0) {
          std::memcpy(out, r.src + p * r.bytes, r.bytes);
        } else {  // position p of image n is byte (p % (plane / elem)) * elem of each channel's plane
          const size_t per_image = r.plane / elem, n = p / per_image;
          const char* s = r.src + n * r.image + (p - n * per_image) * elem;
          if (elem == 4) {
            for (size_t ch = 0; ch < r.channels; ++ch) std::memcpy(out + ch * 4, s + ch * r.plane, 4);
          } else {
            for (size_t ch = 0; ch < r.channels; ++ch) std::memcpy(out + ch * elem, s + ch * r.plane, elem);
          }
        }
        out += r.bytes;
      }
    }
  }
}

// A nearest Resize (Step::resize_index) of X held as [outer][spatial...][run of step.inner elements] into a result
// of the same layout: each output position copies the run of the input position its index tables pick. Rows of the
// output (an outer index and all spatial indices but the last) are shared by the run's OpenMP team.
void run_resize(const Step& step, std::unordered_map<int, dnnl::memory>& args) {
  const dnnl::memory& xm = args.at(DNNL_ARG_SRC_0);
  const dnnl::memory& ym = args.at(DNNL_ARG_DST);
  const dnnl::memory::desc xmd = xm.get_desc(), ymd = ym.get_desc();
  const auto r = static_cast<size_t>(xmd.data.ndims);
  const Dims xd(xmd.data.dims, xmd.data.dims + r), yd(ymd.data.dims, ymd.data.dims + r);
  const auto run = static_cast<size_t>(step.inner);
  const auto padded = static_cast<size_t>(numel(Dims(xmd.data.padded_dims, xmd.data.padded_dims + r)));
  const size_t bytes = run * (xmd.get_size() / padded);  // a run's bytes, channel padding included
  // Each axis's index table (kResize in dnnl_program.h).
  const int64_t* idx[8] = {};
  size_t at = 1;
  for (size_t d = 0; d < r; ++d) {
    idx[d] = step.resize_index.data() + at;
    at += static_cast<size_t>(yd[d]);
  }
  int64_t in_plane = 1, out_plane = 1;
  for (size_t d = 2; d < r; ++d) in_plane *= xd[d], out_plane *= yd[d];
  const int64_t outer = static_cast<int64_t>(padded / run) / in_plane;
  const int64_t last = yd[r - 1], rows = out_plane / last;
  const char* src = static_cast<const char*>(xm.get_data_handle());
  char* dst = static_cast<char*>(ym.get_data_handle());
#pragma omp parallel for schedule(static) if (outer * out_plane * static_cast <int64_t>(bytes) > \
                                              4 * static_cast <int64_t>(kLookupChunk))
  for (int64_t t = 0; t < outer * rows; ++t) {
    // The input row this output row reads: the picked index along every spatial dim but the last.
    int64_t pos[8] = {}, rest = t % rows;
    for (size_t d = r - 1; d-- > 2;) {
      pos[d] = rest % yd[d];
      rest /= yd[d];
    }
    int64_t in_row = t / rows;
    for (size_t d = 2; d + 1 < r; ++d) in_row = in_row * xd[d] + idx[d][pos[d]];
    const char* in = src + static_cast<size_t>(in_row * xd[r - 1]) * bytes;
    char* out = dst + static_cast<size_t>(t * last) * bytes;
    const int64_t* col = idx[r - 1];
    if (bytes == 4) {
      for (int64_t j = 0; j < last; ++j) std::memcpy(out + j * 4, in + col[j] * 4, 4);
    } else {
      for (int64_t j = 0; j < last; ++j) {
        std::memcpy(out + static_cast<size_t>(j) * bytes, in + static_cast<size_t>(col[j]) * bytes, bytes);
      }
    }
  }
}

// A bilinear Resize (Step::resize_index and resize_weights) of a 4-D float X held as [outer][H][W][run of
// step.inner elements] (plain: a run of 1; channels-last: all channels; blocked: a channel block) into a result of
// the same layout, or plain (Step::plain_dst), as native's kernel computes it (ops/resize.cc, ONNX Runtime's
// arithmetic): per output position the four neighbours weighted by d2x d2y, d1x d2y, d2x d1y, d1x d1y, each weight
// product and term rounded and summed in that order (this file is built with -ffp-contract=off). Rows of the output
// are shared by the run's OpenMP team.
void run_resize_bilinear(const Step& step, std::unordered_map<int, dnnl::memory>& args) {
  const dnnl::memory& xm = args.at(DNNL_ARG_SRC_0);
  const dnnl::memory& ym = args.at(DNNL_ARG_DST);
  const dnnl::memory::desc xmd = xm.get_desc(), ymd = ym.get_desc();
  const Dims xd(xmd.data.dims, xmd.data.dims + 4), yd(ymd.data.dims, ymd.data.dims + 4);
  const int64_t ih = xd[2], iw = xd[3], oh = yd[2], ow = yd[3], channels = xd[1];
  const int64_t run = step.inner;
  const auto padded = numel(Dims(xmd.data.padded_dims, xmd.data.padded_dims + 4));
  const int64_t outer = padded / run / (ih * iw), blocks = outer / xd[0];  // runs of channels per image
  // H's then W's neighbours (i1 then i2) and weights (d1 then d2), each table the output dim long.
  const int64_t* hi1 = step.resize_index.data() + 1;
  const int64_t *hi2 = hi1 + oh, *wi1 = hi2 + oh, *wi2 = wi1 + ow;
  const float* hd1 = step.resize_weights.data();
  const float *hd2 = hd1 + oh, *wd1 = hd2 + oh, *wd2 = wd1 + ow;
  const float* src = static_cast<const float*>(xm.get_data_handle());
  float* dst = static_cast<float*>(ym.get_data_handle());
#pragma omp parallel for schedule(static) if (outer * oh * ow * run > 4 * static_cast <int64_t>(kLookupChunk))
  for (int64_t t = 0; t < outer * oh; ++t) {
    const int64_t o = t / oh, oy = t % oh;
    const float* row1 = src + (o * ih + hi1[oy]) * iw * run;
    const float* row2 = src + (o * ih + hi2[oy]) * iw * run;
    const float dy1 = hd1[oy], dy2 = hd2[oy];
    // The row in the input's layout (into a buffer of the thread's when the result is plain), then, plain, each
    // channel of the run copied out to its row of the result.
    thread_local std::vector<float> buffer;
    if (step.plain_dst) buffer.resize(static_cast<size_t>(ow * run));
    float* out = step.plain_dst ? buffer.data() : dst + t * ow * run;
    for (int64_t ox = 0; ox < ow; ++ox, out += run) {
      const float w11 = wd2[ox] * dy2, w12 = wd1[ox] * dy2, w21 = wd2[ox] * dy1, w22 = wd1[ox] * dy1;
      const float* a = row1 + wi1[ox] * run;
      const float* b = row1 + wi2[ox] * run;
      const float* c = row2 + wi1[ox] * run;
      const float* d = row2 + wi2[ox] * run;
      for (int64_t k = 0; k < run; ++k) out[k] = w11 * a[k] + w12 * b[k] + w21 * c[k] + w22 * d[k];
    }
    if (!step.plain_dst) continue;
    const int64_t c0 = (o % blocks) * run, n = o / blocks;
    for (int64_t k = 0; k < std::min(run, channels - c0); ++k) {
      float* row = dst + ((n * channels + c0 + k) * oh + oy) * ow;
      for (int64_t ox = 0; ox < ow; ++ox) row[ox] = buffer[static_cast<size_t>(ox * run + k)];
    }
  }
}

// A Quantize of X plain [N, C, spatial...] into Y channels-last [N, spatial..., C] (Step::to_channels_last): each
// channel's run of positions quantized as the plain loop quantizes it (the same bytes), then interleaved.
void quantize_to_channels_last(const Step& step, const dnnl::memory::desc& xmd, const float* x, float scale, int32_t zp,
                               void* yv) {
  const int64_t nb = xmd.data.dims[0], c = xmd.data.dims[1];
  int64_t s = 1;
  for (int d = 2; d < xmd.data.ndims; ++d) s *= xmd.data.dims[d];
  constexpr int64_t kRun = 2048;
  const int64_t runs = (s + kRun - 1) / kRun, tasks = nb * runs;
  auto* y = static_cast<uint8_t*>(yv);
#pragma omp parallel for schedule(static) if (tasks > 1)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t n = t / runs, p0 = t % runs * kRun, len = std::min(kRun, s - p0);
    thread_local std::vector<uint8_t> q;
    q.resize(static_cast<size_t>(c * kRun));
    for (int64_t ch = 0; ch < c; ++ch) {
      const float* xr = x + (n * c + ch) * s + p0;
      if (step.int8)
        tessera::dynq::quantize_run(xr, len, scale, zp, reinterpret_cast<int8_t*>(q.data()) + ch * kRun);
      else
        tessera::dynq::quantize_run(xr, len, scale, zp, q.data() + ch * kRun);
    }
    uint8_t* yr = y + (n * s + p0) * c;
    const auto done = static_cast<int64_t>(
        has_vbmi() ? avx512_vbmi::interleave_vbmi(q.data(), kRun, c, static_cast<size_t>(len), yr) : 0);
    for (int64_t i = done; i < len; ++i) {
      for (int64_t ch = 0; ch < c; ++ch) yr[i * c + ch] = q[static_cast<size_t>(ch * kRun + i)];
    }
  }
}

// A step the plugin runs itself (Step::own), over the elements of its operands in chunks across the run's OpenMP
// team: a lookup y[i] = table[x[i] ^ flip0] or table[(x[i] ^ flip0) << 8 | (x2[i] ^ flip1)], a quantization (its
// scale and zero point in `params` when computed at run time) or a dequantization, or DynamicQuantizeLinear's
// parameters.
void run_own(const Step& step, const void* table, const float* params, std::unordered_map<int, dnnl::memory>& args) {
  if (step.kind == OpKind::kQConv) {  // an int8 depthwise convolution, channels-last
    const dnnl::memory& x = args.at(DNNL_ARG_SRC_0);
    run_dw_int8(*step.dw, x.get_data_handle(), args.at(DNNL_ARG_DST).get_data_handle(), x.get_desc().data.dims[0]);
    return;
  }
  if (step.kind == OpKind::kBatchNorm) {
    run_batch_norm(step, args);
    return;
  }
  if (step.kind == OpKind::kPool) {
    run_dequantizing_pool(step, args);
    return;
  }
  if (step.kind == OpKind::kBinary) {
    run_plane_binary(step, args);
    return;
  }
  if (step.kind == OpKind::kResize) {
    if (step.resize_weights.empty())
      run_resize(step, args);
    else
      run_resize_bilinear(step, args);
    return;
  }
  if (step.kind == OpKind::kSoftmax) {
    run_softmax(step, args);
    return;
  }
  if (step.kind == OpKind::kConcat) {
    if (step.concat_axis >= 0) run_concat_plain(args, step.concat_axis);
    else run_concat_channels_last(args);
    return;
  }
  const dnnl::memory& xm = args.at(DNNL_ARG_SRC_0);
  const void* xv = xm.get_data_handle();
  void* yv = args.at(DNNL_ARG_DST).get_data_handle();
  const dnnl::memory::desc xmd = xm.get_desc();
  const size_t n = static_cast<size_t>(numel(Dims(xmd.data.dims, xmd.data.dims + xmd.data.ndims)));
  if (step.kind == OpKind::kQuantParams) {
    quant_params(static_cast<const float*>(xv), n, static_cast<float*>(yv));
    return;
  }
  if (step.kind == OpKind::kDynConv || step.kind == OpKind::kDynMatMul) {
    const float* bias = args.count(DNNL_ARG_SRC_1) ? static_cast<const float*>(args.at(DNNL_ARG_SRC_1).get_data_handle()) : nullptr;
    run_dyn_u8(step, params, static_cast<const int32_t*>(xv), n, bias, static_cast<float*>(yv));
    return;
  }
  const float scale = params ? params[0] : step.scale;
  // (Step::zero_point is another number for the steps that do not quantize: a linear's beta, NaN included.)
  const int32_t zp = run_time_zero_point(params ? params[1] : step.zero_point);
  if (params && scale == 0.f) {  // an all-zero input: zero point 0, every element 0
    std::memset(yv, 0, n);
    return;
  }
  if (step.kind == OpKind::kQuantize && step.to_channels_last) {
    quantize_to_channels_last(step, xmd, static_cast<const float*>(xv), scale, zp, yv);
    return;
  }
  const void* x2v = args.count(DNNL_ARG_SRC_1) ? args.at(DNNL_ARG_SRC_1).get_data_handle() : nullptr;
  const auto* x2 = static_cast<const uint8_t*>(x2v);
  const auto chunks = static_cast<int64_t>((n + kLookupChunk - 1) / kLookupChunk);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t begin = static_cast<size_t>(c) * kLookupChunk, count = std::min(n, begin + kLookupChunk) - begin;
    switch (step.kind) {
      case OpKind::kQuantize: {
        const float* x = static_cast<const float*>(xv) + begin;
        // QuantizeLinear's arithmetic, native's (and ONNX Runtime's): dynamic_quantize_math.h.
        const auto len = static_cast<int64_t>(count);
        if (step.int8)
          tessera::dynq::quantize_run(x, len, scale, zp, static_cast<int8_t*>(yv) + begin);
        else
          tessera::dynq::quantize_run(x, len, scale, zp, static_cast<uint8_t*>(yv) + begin);
        break;
      }
      case OpKind::kDqBinary:
        run_dq_binary(step, xv, x2v, begin, count, static_cast<float*>(yv) + begin);
        break;
      case OpKind::kDequantize: {
        float* y = static_cast<float*>(yv) + begin;
        const auto* xb = static_cast<const uint8_t*>(xv) + begin;
        const size_t done = !has_avx512() ? 0
                            : step.int8   ? avx512::dequantize<true>(xb, count, step.scale, step.zero_point, y)
                                          : avx512::dequantize<false>(xb, count, step.scale, step.zero_point, y);
        if (step.int8) {
          dequantize_elements(reinterpret_cast<const int8_t*>(xb) + done, count - done, step.scale, step.zero_point,
                              y + done);
        } else {
          dequantize_elements(xb + done, count - done, step.scale, step.zero_point, y + done);
        }
        break;
      }
      case OpKind::kEltwise: {  // own_eltwise; linear: alpha * x + beta in Step::scale, zero_point
        const float* x = static_cast<const float*>(xv) + begin;
        float* y = static_cast<float*>(yv) + begin;
        namespace fm = tessera::fastmath;
        if (has_avx512()) {
          avx512::own_eltwise(step.alg, x, y, count, step.scale, step.zero_point);
        } else if (step.alg == dnnl_eltwise_logistic) {
          for (size_t i = 0; i < count; ++i) y[i] = fm::logistic(x[i]);
        } else if (step.alg == dnnl_eltwise_swish) {
          for (size_t i = 0; i < count; ++i) y[i] = x[i] * fm::logistic(x[i]);
        } else if (step.alg == dnnl_eltwise_hardswish) {
          for (size_t i = 0; i < count; ++i) y[i] = fm::hard_swish(x[i]);
        } else {
          const float a = step.scale, b = step.zero_point;
          for (size_t i = 0; i < count; ++i) y[i] = a * x[i] + b;
        }
        break;
      }
      default: {  // kLookup
        const auto* x = static_cast<const uint8_t*>(xv) + begin;
        auto* y = static_cast<uint8_t*>(yv) + begin;
        const auto* tb = static_cast<const uint8_t*>(table);
        const uint8_t f0 = step.flip0, f1 = step.flip1;
        if (x2 && step.qadd) {
          tessera::qadd::run(step.qform, step.int8, x, x2 + begin, y, count);
        } else if (x2) {
          const uint8_t* b = x2 + begin;
          for (size_t i = 0; i < count; ++i) y[i] = tb[static_cast<size_t>(x[i] ^ f0) << 8 | (b[i] ^ f1)];
        } else {
          const size_t done = has_vbmi() ? avx512_vbmi::lookup_vbmi(x, y, count, tb, f0) : 0;
          for (size_t i = done; i < count; ++i) y[i] = tb[x[i] ^ f0];
        }
      }
    }
  }
}

}  // namespace

bool own_avx512_loops() { return has_avx512(); }

// The own int8 depthwise kernel's VNNI, on top of has_avx512().
bool dw_int8_cpu() {
  static const bool yes = has_avx512() && __builtin_cpu_supports("avx512vnni");
  return yes;
}

using dnnl::memory;
using tessera_plugin::fail;

// The arenas and scratchpads of runs: the process's, not each engine's. A run takes the smallest free buffer that is
// large enough (or a new one) and gives it back at its end; at most kKept free buffers stay, the largest. An engine
// per masked shape bucket (64 for a ranged CRNN) each keeping its own arena, touched, held 763 MB over a stream
// that native alone ran in 58 MB.
class BufferPool {
 public:
  static BufferPool& instance() {
    static BufferPool* pool = new BufferPool();  // never destroyed: engines may run during exit
    return *pool;
  }
  AlignedBuffer take(size_t bytes) {
    if (bytes == 0) return AlignedBuffer();
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.lower_bound(bytes);
      if (it != free_.end()) {
        AlignedBuffer b = std::move(it->second);
        free_.erase(it);
        return b;
      }
    }
    return AlignedBuffer(bytes);
  }
  void give(AlignedBuffer b) {
    if (!b.p) return;
    std::lock_guard<std::mutex> lock(mu_);
    free_.emplace(b.n, std::move(b));
    while (free_.size() > kKept) free_.erase(free_.begin());
  }

 private:
  static constexpr size_t kKept = 8;
  std::mutex mu_;
  std::multimap<size_t, AlignedBuffer> free_;
};

// One run's arena and scratchpad, taken from the pool and given back when the run ends.
struct RunBuffers {
  explicit RunBuffers(const Plan& plan)
      : arena(BufferPool::instance().take(plan.arena_bytes)),
        scratch(BufferPool::instance().take(plan.scratch_bytes)) {}
  ~RunBuffers() {
    BufferPool::instance().give(std::move(arena));
    BufferPool::instance().give(std::move(scratch));
  }
  RunBuffers(const RunBuffers&) = delete;
  RunBuffers& operator=(const RunBuffers&) = delete;
  AlignedBuffer arena, scratch;
};

class RunContext {
 public:
  RunContext(const Plan& plan, const dnnl::engine& eng) : stream_(eng) {
    mems_.reserve(plan.mems.size());
    for (size_t i = 0; i < plan.mems.size(); ++i) {
      const Mem& m = plan.mems[i];
      void* ptr = nullptr;
      switch (m.storage) {
        case Storage::kArena:  // bound to the run's arena (bind_buffers)
          arena_mems_.emplace_back(i, plan.buffers[static_cast<size_t>(m.index)].offset + m.offset);
          break;
        case Storage::kFixed:
          ptr = static_cast<char*>(plan.fixed[static_cast<size_t>(m.index)]) + m.offset;
          break;
        case Storage::kInput:
        case Storage::kOutput:  // bound per run
          io_.push_back(i);
          break;
      }
      mems_.emplace_back(m.md, eng, ptr);
    }
    args_.resize(plan.steps.size());
    dyn_.resize(plan.steps.size());
    for (size_t s = 0; s < plan.steps.size(); ++s) {
      const Step& step = plan.steps[s];
      for (const auto& [arg, m] : step.args) args_[s].emplace(arg, mems_[static_cast<size_t>(m)]);
      if (step.scratchpad.get_size() > 0) {
        scratch_mems_.emplace_back(step.scratchpad, eng, nullptr);
        args_[s].emplace(DNNL_ARG_SCRATCHPAD, scratch_mems_.back());
      }
      if (step.params >= 0 && !step.own) {  // a dynamically quantized convolution: its run-time zero point, scale
        dyn_[s].zero_point = memory(memory::desc({1}, memory::data_type::s32, memory::format_tag::a), eng);
        args_[s].emplace(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, dyn_[s].zero_point);
        if (step.scale_md.get_size() > 0) {
          dyn_[s].scale = memory(step.scale_md, eng);
          args_[s].emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, dyn_[s].scale);
        }
      }
    }
    // The slices of chained steps: a memory of its own for each operand a slice reads or writes in part (its handle
    // follows the whole operand's, `offset` bytes in), the whole operand's memory for the others; a stream and a
    // scratchpad per thread.
    slices_.resize(plan.steps.size());
    size_t threads = 0;
    for (size_t s = 0; s < plan.steps.size(); ++s) {
      const Step& step = plan.steps[s];
      if (!step.chained) continue;
      threads = std::max(threads, step.slices.size());
      for (size_t t = 0; t < step.slices.size(); ++t) {
        const Slice& sl = step.slices[t];
        SliceMems sm;
        for (const Slice::Arg& a : sl.args) {
          const auto m = static_cast<size_t>(a.mem);
          if (a.offset == 0 && a.md == plan.mems[m].md) {
            sm.args.emplace(a.arg, mems_[m]);
            continue;
          }
          memory part(a.md, eng, nullptr);
          sm.args.emplace(a.arg, part);
          sm.moved.push_back(SliceMems::Moved{part, m, a.offset, nullptr});
        }
        if (sl.scratchpad.get_size() > 0) {
          memory scratch(sl.scratchpad, eng, nullptr);
          sm.args.emplace(DNNL_ARG_SCRATCHPAD, scratch);
          slice_scratch_.emplace_back(scratch, t);
        }
        slices_[s].push_back(std::move(sm));
      }
    }
    for (size_t t = 0; t < threads; ++t) streams_.emplace_back(eng);
    slice_scratch_bytes_ = plan.slice_scratch;
  }

  // Points the arena's and scratchpad's memories into `arena` and `scratch` (a run's buffers from the pool), where
  // they point elsewhere.
  void bind_buffers(void* arena, void* scratch) {
    if (arena != bound_arena_) {
      for (const auto& [i, offset] : arena_mems_) mems_[i].set_data_handle(static_cast<char*>(arena) + offset);
      bound_arena_ = arena;
    }
    if (scratch != bound_scratch_) {
      for (dnnl::memory& m : scratch_mems_) m.set_data_handle(scratch);
      for (auto& [m, t] : slice_scratch_) m.set_data_handle(static_cast<char*>(scratch) + t * slice_scratch_bytes_);
      bound_scratch_ = scratch;
    }
  }

  void run(const Plan& plan, const tessera_tensor_t* inputs, tessera_tensor_t* outputs) {
    bind_io(plan, inputs, outputs);
    for (size_t s = 0; s < plan.steps.size();) {
      const size_t chain = plan.steps[s].chain;
      if (chain > 0) {
        run_chain(plan, s, chain);
        s += chain;
      } else {
        execute(plan, s++);
      }
    }
    stream_.wait();
  }

  // run(), waiting for each primitive and reporting it to `sink`; the steps
  // that do no work (views, concatenations in place) are reported where they
  // fall, with no duration. Times are from `start`.
  void run_profiled(const Plan& plan, const tessera_tensor_t* inputs, tessera_tensor_t* outputs,
                    const tessera_profile_sink_t& sink, std::chrono::steady_clock::time_point start) {
    using clock = std::chrono::steady_clock;
    auto us = [&](clock::time_point t) { return std::chrono::duration<double, std::micro>(t - start).count(); };
    std::vector<const char*> names;
    auto report = [&](const std::vector<std::string>& nodes, const std::string& what, double at, double dur) {
      names.clear();
      for (const std::string& n : nodes) names.push_back(n.c_str());
      sink.step(sink.ctx, names.data(), static_cast<int32_t>(names.size()), what.c_str(), at, dur);
    };
    size_t free_at = 0;
    auto report_free = [&](size_t before) {
      for (; free_at < plan.free_steps.size() && plan.free_steps[free_at].before <= before; ++free_at) {
        const FreeStep& f = plan.free_steps[free_at];
        report(f.nodes, f.impl, us(clock::now()), 0.0);
      }
    };
    bind_io(plan, inputs, outputs);
    for (size_t s = 0; s < plan.steps.size(); ++s) {
      report_free(s);
      const clock::time_point t0 = clock::now();
      if (plan.steps[s].chained) {
        run_chain(plan, s, 1);
      } else {
        execute(plan, s);
      }
      stream_.wait();
      const clock::time_point t1 = clock::now();
      report(plan.steps[s].nodes, plan.steps[s].impl, us(t0),
             std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    report_free(plan.steps.size());
  }

 private:
  // Steps [first, first + count) of a chain, in one parallel region: each thread runs its slice of each step (its
  // slices, where the team has fewer threads than the steps have slices), waiting for the others where a step asks.
  void run_chain(const Plan& plan, size_t first, size_t count) {
    stream_.wait();
    const auto parts = static_cast<int>(plan.steps[first].slices.size());
    std::exception_ptr error;
    std::mutex error_mu;
#pragma omp parallel num_threads(parts)
    {
      const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
      for (size_t s = first; s < first + count; ++s) {
        if (s > first && plan.steps[s].barrier) {
#pragma omp barrier
        }
        for (int t = tid; t < parts; t += nt) {
          try {
            run_slice(plan, s, static_cast<size_t>(t));
          } catch (...) {
            std::lock_guard<std::mutex> lock(error_mu);
            if (!error) error = std::current_exception();
          }
        }
      }
    }
    if (error) std::rethrow_exception(error);
  }

  void run_slice(const Plan& plan, size_t s, size_t t) {
    const Step& step = plan.steps[s];
    const Slice& sl = step.slices[t];
    SliceMems& sm = slices_[s][t];
    if (step.own) {  // the own depthwise kernel: the whole operands, and the images and rows
      const memory& x = args_[s].at(DNNL_ARG_SRC_0);
      run_dw_int8_part(*step.dw, x.get_data_handle(), args_[s].at(DNNL_ARG_DST).get_data_handle(), sl.n0, sl.n1, sl.r0,
                       sl.r1);
      return;
    }
    for (SliceMems::Moved& mv : sm.moved) {
      void* at = static_cast<char*>(mems_[mv.base].get_data_handle()) + mv.offset;
      if (at != mv.at) {
        mv.part.set_data_handle(at);
        mv.at = at;
      }
    }
    sl.prim.execute(streams_[t], sm.args);
  }

  // Step s: its primitive, or a table lookup (the CPU stream runs primitives in order as they are submitted, so the
  // lookup's operands are ready).
  void execute(const Plan& plan, size_t s) {
    const Step& step = plan.steps[s];
    const float* params =
        step.params >= 0 ? static_cast<const float*>(mems_[static_cast<size_t>(step.params)].get_data_handle()) : nullptr;
    if (step.attention) {
      stream_.wait();
      run_attention(*step.attention, args_[s], stream_);
      return;
    }
    if (!step.own) {
      if (params) {  // P was written by an own step, which has finished
        if (step.scale_md.get_size() > 0) {
          auto* scale = static_cast<float*>(dyn_[s].scale.get_data_handle());
          for (size_t m = 0; m < step.w_scales.size(); ++m) scale[m] = params[0] * step.w_scales[m];
        }
        *static_cast<int32_t*>(dyn_[s].zero_point.get_data_handle()) = run_time_zero_point(params[1]);
      }
      step.prim.execute(stream_, args_[s]);
      return;
    }
    stream_.wait();
    run_own(step, step.table >= 0 ? plan.fixed[static_cast<size_t>(step.table)] : nullptr, params, args_[s]);
  }

  void bind_io(const Plan& plan, const tessera_tensor_t* inputs, tessera_tensor_t* outputs) {
    for (size_t i : io_) {
      const Mem& m = plan.mems[i];
      void* p = m.storage == Storage::kInput ? inputs[m.index].data : outputs[m.index].data;
      mems_[i].set_data_handle(static_cast<char*>(p) + m.offset);
    }
  }

  dnnl::stream stream_;
  std::vector<std::pair<size_t, size_t>> arena_mems_;  // (mems_ index, bytes into the arena)
  std::vector<dnnl::memory> scratch_mems_;
  void* bound_arena_ = nullptr;
  void* bound_scratch_ = nullptr;
  std::vector<memory> mems_;
  std::vector<size_t> io_;  // Mems over the host's buffers
  std::vector<std::unordered_map<int, memory>> args_;
  struct DynArgs {
    memory scale, zero_point;  // owned by the memory objects
  };
  std::vector<DynArgs> dyn_;  // per step
  struct SliceMems {
    std::unordered_map<int, memory> args;
    struct Moved {  // a memory over part of Mem `base`, `offset` bytes into it (`at`: where it points now)
      memory part;
      size_t base;
      size_t offset;
      void* at;
    };
    std::vector<Moved> moved;
  };
  std::vector<std::vector<SliceMems>> slices_;            // per step, per slice (chained steps)
  std::vector<std::pair<memory, size_t>> slice_scratch_;  // a slice's scratchpad, its thread
  size_t slice_scratch_bytes_ = 0;
  std::vector<dnnl::stream> streams_;  // per thread of a chain
};

namespace {

std::vector<tessera_plugin::ValueType> types_of(const Program& p, const std::vector<int32_t>& ids) {
  std::vector<tessera_plugin::ValueType> t;
  for (int32_t id : ids) {
    const Value& v = p.values[static_cast<size_t>(id)];
    tessera_plugin::ValueType vt;
    vt.dtype = v.dtype;
    vt.ranked = true;
    vt.dims = v.dims;
    t.push_back(std::move(vt));
  }
  return t;
}

}  // namespace

std::unique_ptr<tessera_engine> make_engine(Program p, const tessera_named_tensor_t* constants, size_t count,
                                            int num_threads, uint64_t max_memory) {
  auto e = std::make_unique<tessera_engine>();
  e->program = std::move(p);
  e->num_threads = std::max(1, num_threads);
  if (e->num_threads > 1) {
    tessera_plugin::MachineFigures one = tessera_plugin::MachineFigures::Nominal(1);
    one.launch_us = 0;
    if (region_cost_us(e->program, nullptr, one) < kTinyWorkUs) e->num_threads = 1;
  }
  e->input_types = types_of(e->program, e->program.inputs);
  e->output_types = types_of(e->program, e->program.outputs);
  std::map<std::string, const tessera_tensor_t*> by_name;
  for (size_t i = 0; i < count; ++i) {
    if (constants && constants[i].name) by_name[constants[i].name] = &constants[i].tensor;
  }
  e->eng = dnnl::engine(dnnl::engine::kind::cpu, 0);
  e->plan = build_plan(e->program, e->eng, &by_name, e->num_threads);
  const uint64_t need = uint64_t{e->plan.arena_bytes} + e->plan.scratch_bytes;
  if (max_memory && need > max_memory) {
    fail(TESSERA_ERROR_OUT_OF_MEMORY, "one run needs " + std::to_string(need) + " bytes of buffers, over the limit of " +
                                          std::to_string(max_memory));
  }
  // One context now, so the first run allocates nothing.
  e->idle.push_back(std::make_unique<RunContext>(e->plan, e->eng));
  return e;
}

uint64_t engine_bytes(const tessera_engine& e) {
  uint64_t owned = 0;
  for (const AlignedBuffer& b : e.plan.owned) owned += b.n;
  for (const auto& b : e.plan.shared) owned += b->n;  // counted whole, though other engines may hold them too
  // A run's arena and scratchpad come from the process's pool (BufferPool), which keeps a few, whatever the number
  // of engines: counted once, as what a run of this engine needs.
  return owned + uint64_t{e.plan.arena_bytes} + e.plan.scratch_bytes;
}

namespace {

// Checks the descriptors, takes a run context, runs `body` on it and gives it back.
template <class Body>
void with_context(tessera_engine& e, const tessera_tensor_t* inputs, size_t num_inputs, const tessera_tensor_t* outputs,
                  size_t num_outputs, Body&& body) {
  if ((num_inputs && !inputs) || (num_outputs && !outputs)) fail(TESSERA_ERROR_INVALID_ARGUMENT, "NULL descriptors");
  tessera_plugin::check_descriptors(inputs, num_inputs, e.input_types, "input");
  tessera_plugin::check_descriptors(outputs, num_outputs, e.output_types, "output");
  std::unique_ptr<RunContext> ctx;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    if (!e.idle.empty()) {
      ctx = std::move(e.idle.back());
      e.idle.pop_back();
    }
  }
  if (!ctx) ctx = std::make_unique<RunContext>(e.plan, e.eng);
  omp_set_num_threads(e.num_threads);
  {
    const RunBuffers buffers(e.plan);  // back to the pool however the run ends
    ctx->bind_buffers(buffers.arena.p, buffers.scratch.p);
    try {
      body(*ctx);
    } catch (const dnnl::error& err) {
      fail(TESSERA_ERROR_RUNTIME, std::string("oneDNN: ") + err.what());
    }
  }
  std::lock_guard<std::mutex> lock(e.mu);
  e.idle.push_back(std::move(ctx));
}

}  // namespace

void run_engine(tessera_engine& e, const tessera_tensor_t* inputs, size_t num_inputs, tessera_tensor_t* outputs,
                size_t num_outputs) {
  with_context(e, inputs, num_inputs, outputs, num_outputs, [&](RunContext& ctx) { ctx.run(e.plan, inputs, outputs); });
}

void run_engine_profiled(tessera_engine& e, const tessera_tensor_t* inputs, size_t num_inputs,
                         tessera_tensor_t* outputs, size_t num_outputs, const tessera_profile_sink_t& sink) {
  const auto start = std::chrono::steady_clock::now();
  if (!sink.step) fail(TESSERA_ERROR_INVALID_ARGUMENT, "profile sink has no step callback");
  with_context(e, inputs, num_inputs, outputs, num_outputs,
               [&](RunContext& ctx) { ctx.run_profiled(e.plan, inputs, outputs, sink, start); });
}

}  // namespace tessera_dnnl

tessera_engine::~tessera_engine() = default;
