// Runtime support. Transposes: input one 4-D tensor, output the same values
// in the other layout; method: 32x32 tiles of (channels x pixels) per image,
// spread over the thread pool. Constants: input the region's initializers as
// load() received them, output what XNNPACK reads (see Transform in
// program.h), built once per engine.
#include "runtime_support.h"

#include <xnnpack.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace tessera_xnn {

using tessera_plugin::fail;

void ensure_xnnpack_initialized() {
  static std::once_flag once;
  static xnn_status status = xnn_status_uninitialized;
  std::call_once(once, [] { status = xnn_initialize(nullptr); });
  if (status != xnn_status_success) {
    fail(TESSERA_ERROR_INTERNAL, "XNNPACK failed to initialize (status " + std::to_string(status) +
                                     "; the CPU may lack the instructions it needs)");
  }
}

std::shared_ptr<pthreadpool> shared_pool(int threads) {
  if (threads <= 1) return nullptr;
  static std::mutex mu;
  static std::map<int, std::weak_ptr<pthreadpool>> pools;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<pthreadpool> pool = pools[threads].lock();
  if (!pool) {
    pthreadpool_t p = pthreadpool_create(static_cast<size_t>(threads));
    if (!p) fail(TESSERA_ERROR_OUT_OF_MEMORY, "cannot create a pool of " + std::to_string(threads) + " threads");
    pool.reset(p, pthreadpool_destroy);
    pools[threads] = pool;
  }
  return pool;
}

// ---- buffers -------------------------------------------------------------------

void PaddedBuffer::Free::operator()(void* p) const { std::free(p); }

PaddedBuffer::PaddedBuffer(size_t bytes) : bytes_(bytes) {
  size_t padded = (bytes + XNN_EXTRA_BYTES + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, padded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, padded);
  data_.reset(p);
}

void flip_bytes(void* data, size_t n) {
  auto* b = static_cast<uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) b[i] ^= 0x80;
}

// ---- transposes -------------------------------------------------------------------

namespace {

constexpr size_t kTile = 32;

struct TransposeJob {
  const void* src;
  void* dst;
  size_t rows, cols;  // per image: src is rows x cols, dst cols x rows
  size_t row_tiles, col_tiles;
};

// One tile of one image: dst[c][r] = src[r][c].
template <class T>
void transpose_tile(void* ctx, size_t index) {
  const auto& j = *static_cast<const TransposeJob*>(ctx);
  const size_t per_image = j.row_tiles * j.col_tiles;
  const size_t image = index / per_image, tile = index % per_image;
  const size_t r0 = tile / j.col_tiles * kTile, c0 = tile % j.col_tiles * kTile;
  const size_t r1 = std::min(r0 + kTile, j.rows), c1 = std::min(c0 + kTile, j.cols);
  const T* s = static_cast<const T*>(j.src) + image * j.rows * j.cols;
  T* d = static_cast<T*>(j.dst) + image * j.rows * j.cols;
  for (size_t r = r0; r < r1; ++r) {
    for (size_t c = c0; c < c1; ++c) d[c * j.rows + r] = s[r * j.cols + c];
  }
}

void transpose_images(const void* src, void* dst, size_t images, size_t rows, size_t cols, size_t elem,
                      pthreadpool_t pool, uint32_t flags) {
  if (rows == 1 || cols == 1) {
    std::memcpy(dst, src, images * rows * cols * elem);
    return;
  }
  TransposeJob j{src, dst, rows, cols, (rows + kTile - 1) / kTile, (cols + kTile - 1) / kTile};
  pthreadpool_parallelize_1d(pool, elem == 1 ? transpose_tile<uint8_t> : transpose_tile<float>, &j,
                             images * j.row_tiles * j.col_tiles, flags);
}

}  // namespace

// Per image: channels x pixels <-> pixels x channels.
void nchw_to_nhwc(const void* src, void* dst, const Dims& d, size_t elem, pthreadpool_t pool, uint32_t flags) {
  const size_t pixels = static_cast<size_t>(numel(Dims(d.begin() + 2, d.end())));
  transpose_images(src, dst, static_cast<size_t>(d[0]), static_cast<size_t>(d[1]), pixels, elem, pool, flags);
}

void nhwc_to_nchw(const void* src, void* dst, const Dims& d, size_t elem, pthreadpool_t pool, uint32_t flags) {
  const size_t pixels = static_cast<size_t>(numel(Dims(d.begin() + 2, d.end())));
  transpose_images(src, dst, static_cast<size_t>(d[0]), pixels, static_cast<size_t>(d[1]), elem, pool, flags);
}

// ---- constants ------------------------------------------------------------------

namespace {

// A depthwise filter [M,1,kh,kw] read as one image of M channels and kh*kw pixels, whose channels-last form is the
// [1,kh,kw,M] XNNPACK reads (`dims`, the latter).
Dims depthwise_as_image(const Dims& dims) { return {1, dims[3], dims[1] * dims[2]}; }

// The 8-bit and int32 constants: bytes moved as the float transforms move floats (a uint8 source flipped into the
// int8 domain), the int32 bias copied, a QLinearLookup table re-indexed and re-valued in the int8 domain.
void build_integer_constant(const ConstantDef& c, const Dims& dims, DType dtype, const SourceTensor& src, void* out) {
  const size_t n = static_cast<size_t>(numel(dims));
  if (dtype == DType::kQC32) {
    std::memcpy(out, src.data, n * sizeof(int32_t));
    return;
  }
  const auto* in = static_cast<const uint8_t*>(src.data);
  auto* o = static_cast<uint8_t*>(out);
  const uint8_t flip = src.dtype == TESSERA_DTYPE_UINT8 ? 0x80 : 0x00;
  switch (c.transform) {
    case Transform::kCopy:
      std::memcpy(o, in, n);
      break;
    case Transform::kFilter:
      nchw_to_nhwc(in, o, filter_dims_2d(src.dims), 1, nullptr);
      break;
    case Transform::kDepthwise:
      nchw_to_nhwc(in, o, depthwise_as_image(dims), 1, nullptr);
      break;
    case Transform::kLookup:
      // Entry i of the engine's table serves the int8-domain byte i, which is the table's index i ^ 0x80 for
      // either operand type (qlinear_lookup.h indexes by the unsigned value); binary: both index bytes.
      if (n == 256) {
        for (size_t i = 0; i < 256; ++i) o[i] = static_cast<uint8_t>(in[i ^ 0x80] ^ flip);
      } else {
        for (size_t i = 0; i < 65536; ++i) o[i] = static_cast<uint8_t>(in[i ^ 0x8080] ^ flip);
      }
      return;
    default:
      fail(TESSERA_ERROR_INTERNAL, "no integer form of this constant transform");
  }
  if (flip) flip_bytes(o, n);
}

}  // namespace

void build_constant(const ConstantDef& c, const Dims& dims, DType dtype, const std::vector<SourceTensor>& sources,
                    void* raw) {
  if (dtype != DType::kF32) return build_integer_constant(c, dims, dtype, sources[0], raw);
  // Float sources (checked at load).
  struct FloatSource {
    const float* data;
    const Dims& dims;
  };
  std::vector<FloatSource> src;
  for (const SourceTensor& t : sources) src.push_back(FloatSource{static_cast<const float*>(t.data), t.dims});
  auto* out = static_cast<float*>(raw);
  const float scale = c.floats[0];
  const size_t n = static_cast<size_t>(numel(dims));
  switch (c.transform) {
    case Transform::kCopy:
      std::memcpy(out, src[0].data, n * sizeof(float));
      break;
    case Transform::kToNhwc: {
      Dims p(dims.size() - src[0].dims.size(), 1);
      p.insert(p.end(), src[0].dims.begin(), src[0].dims.end());
      nchw_to_nhwc(src[0].data, out, p, 4, nullptr);
      break;
    }
    case Transform::kFilter:  // [O,I,kh,kw] -> [O,kh,kw,I]: per output channel, I x (kh*kw) transposed
      nchw_to_nhwc(src[0].data, out, filter_dims_2d(src[0].dims), 4, nullptr);
      break;
    case Transform::kDepthwise:  // [M,1,kh,kw] -> [1,kh,kw,M]
      nchw_to_nhwc(src[0].data, out, depthwise_as_image(dims), 4, nullptr);
      break;
    case Transform::kDeconv: {  // [C, Mg, kh, kw] -> [g*Mg, kh, kw, C/g]
      const Dims s = filter_dims_2d(src[0].dims);
      const size_t groups = static_cast<size_t>(c.ints[0]), cg = static_cast<size_t>(s[0]) / groups;
      const size_t mg = static_cast<size_t>(s[1]), hw = static_cast<size_t>(s[2] * s[3]);
      for (size_t g = 0; g < groups; ++g) {
        for (size_t ic = 0; ic < cg; ++ic) {
          for (size_t oc = 0; oc < mg; ++oc) {
            const float* from = src[0].data + ((g * cg + ic) * mg + oc) * hw;
            for (size_t k = 0; k < hw; ++k) out[((g * mg + oc) * hw + k) * cg + ic] = from[k];
          }
        }
      }
      break;
    }
    case Transform::kBroadcastRow:
      for (size_t i = 0; i < n; ++i) out[i] = src[0].data[numel(src[0].dims) == 1 ? 0 : i];
      break;
    case Transform::kBnScale:
    case Transform::kBnShift: {
      const float eps = c.floats[1];
      for (size_t i = 0; i < n; ++i) {
        const float* var = c.transform == Transform::kBnScale ? src[1].data : src[3].data;
        const float* gamma = c.transform == Transform::kBnScale ? src[0].data : src[2].data;
        float s = gamma[i] / std::sqrt(var[i] + eps);
        out[i] = c.transform == Transform::kBnScale ? s : src[0].data[i] - src[1].data[i] * s;
      }
      break;
    }
    case Transform::kLiteral:
      std::memcpy(out, c.floats.data() + 1, n * sizeof(float));
      return;  // literals are not scaled
    default:
      fail(TESSERA_ERROR_INTERNAL, "unknown constant transform");
  }
  if (scale != 1.f) {
    for (size_t i = 0; i < n; ++i) out[i] *= scale;
  }
}

}  // namespace tessera_xnn
