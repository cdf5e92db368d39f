// Shared machinery of the elementwise family (elementwise*.cc): dtype sets,
// the compute type of each storage type, and numpy broadcasting reduced to
// contiguous runs so that inner loops are plain vectorizable loops.
//
// Broadcasting method: input shapes are aligned to the output rank, output
// dims of size 1 are dropped, and adjacent dims where every input is either
// broadcast in both or in neither are merged. What remains is a short list of
// dims whose innermost one is walked as a run in which each input advances
// by 1 or stays put (stride 0): [N,C]+[C] becomes runs of C with both
// inputs contiguous, [N,C,H,W]+[1,C,1,1] runs of H*W against a scalar.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "ir/dtype.h"
#include "ir/tensor.h"
#include "ops/op_registry.h"

namespace tessera {

class OpRegistry;

namespace ew {

// Elements per parallel_for chunk for cheap elementwise work.
constexpr int64_t kGrain = 16384;

// ---- dtype sets -----------------------------------------------------------

constexpr uint32_t dtype_bit(DType t) { return 1u << static_cast<int>(t); }
constexpr uint32_t kFloatTypes = dtype_bit(DType::kFloat32) | dtype_bit(DType::kFloat64) |
                                 dtype_bit(DType::kFloat16) | dtype_bit(DType::kBFloat16);
constexpr uint32_t kSignedIntTypes = dtype_bit(DType::kInt8) | dtype_bit(DType::kInt16) |
                                     dtype_bit(DType::kInt32) | dtype_bit(DType::kInt64);
constexpr uint32_t kUnsignedIntTypes = dtype_bit(DType::kUInt8) | dtype_bit(DType::kUInt16) |
                                       dtype_bit(DType::kUInt32) | dtype_bit(DType::kUInt64);
constexpr uint32_t kIntTypes = kSignedIntTypes | kUnsignedIntTypes;
constexpr uint32_t kSignedTypes = kFloatTypes | kSignedIntTypes;
constexpr uint32_t kNumericTypes = kFloatTypes | kIntTypes;
constexpr uint32_t kBoolType = dtype_bit(DType::kBool);
constexpr uint32_t kAllTypes = kNumericTypes | kBoolType;

inline bool dtype_in(DType t, uint32_t set) {
  return t != DType::kUndefined && static_cast<int>(t) < 32 && (dtype_bit(t) & set) != 0;
}

template <class T>
constexpr bool type_in(uint32_t set) {
  return (dtype_bit(dtype_of<T>()) & set) != 0;
}

// Fails (Unsupported) when input i's dtype is known and outside `set`.
Status check_input_dtype(const InferContext& ctx, int i, uint32_t set);
// Same check at run time.
Status check_tensor_dtype(const KernelContext& ctx, const Tensor& t, uint32_t set);

// ---- compute types --------------------------------------------------------

template <class T>
struct ComputeType {
  using type = T;
};
template <>
struct ComputeType<Float16> {
  using type = float;
};
template <>
struct ComputeType<BFloat16> {
  using type = float;
};
// Arithmetic on half types happens in float.
template <class T>
using compute_t = typename ComputeType<T>::type;

template <class T>
constexpr bool is_half_v = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

template <class T>
constexpr bool is_float_v = std::is_floating_point_v<T> || is_half_v<T>;

template <class T, class C>
inline T to_storage(C c) {
  if constexpr (is_half_v<T>) {
    return T(static_cast<float>(c));
  } else {
    return static_cast<T>(c);
  }
}

// ---- broadcasting ---------------------------------------------------------

struct BroadcastPlan {
  Dims dims;                  // collapsed output dims, rank >= 1
  std::vector<Dims> strides;  // per input, element strides per collapsed dim (0 = broadcast)
  int64_t numel = 0;
};

// `ins` must each broadcast to `out` (checked by inference).
BroadcastPlan make_broadcast_plan(const Dims& out, const std::vector<const Dims*>& ins);

// Calls fn(out_offset, in_offsets, count, inner_strides) for the contiguous
// runs of output elements [begin, end); each input advances by its inner
// stride (0 or 1) along a run.
template <int N, class Fn>
void for_each_run(const BroadcastPlan& p, int64_t begin, int64_t end, Fn&& fn) {
  if (begin >= end) return;
  const int r = static_cast<int>(p.dims.size());
  const int64_t inner = p.dims[static_cast<size_t>(r - 1)];
  std::array<int64_t, N> inner_stride{};
  for (int k = 0; k < N; ++k) inner_stride[k] = p.strides[static_cast<size_t>(k)][static_cast<size_t>(r - 1)];
  int64_t row = begin / inner;
  int64_t col = begin % inner;
  Dims idx(static_cast<size_t>(r), 0);
  std::array<int64_t, N> base{};
  for (int d = r - 2; d >= 0; --d) {
    const int64_t n = p.dims[static_cast<size_t>(d)];
    idx[static_cast<size_t>(d)] = row % n;
    row /= n;
    for (int k = 0; k < N; ++k) base[k] += idx[static_cast<size_t>(d)] * p.strides[static_cast<size_t>(k)][static_cast<size_t>(d)];
  }
  int64_t pos = begin;
  while (pos < end) {
    const int64_t count = std::min(inner - col, end - pos);
    std::array<int64_t, N> off;
    for (int k = 0; k < N; ++k) off[k] = base[k] + col * inner_stride[k];
    fn(pos, off, count, inner_stride);
    pos += count;
    col = 0;
    if (pos >= end) break;
    for (int d = r - 2; d >= 0; --d) {
      const size_t ud = static_cast<size_t>(d);
      ++idx[ud];
      for (int k = 0; k < N; ++k) base[k] += p.strides[static_cast<size_t>(k)][ud];
      if (idx[ud] < p.dims[ud]) break;
      for (int k = 0; k < N; ++k) base[k] -= p.strides[static_cast<size_t>(k)][ud] * p.dims[ud];
      idx[ud] = 0;
    }
  }
}

template <int N, class Fn>
void parallel_runs(Parallel& pool, const BroadcastPlan& p, int64_t grain, Fn&& fn) {
  pool.parallel_for(p.numel, grain, [&](int64_t b, int64_t e) { for_each_run<N>(p, b, e, fn); });
}

// out = f(a, b) elementwise with broadcasting; f maps storage values
// (TA, TB) to a TO. Specialised inner loops for the four stride patterns.
template <class TA, class TB, class TO, class F>
void binary_loop(Parallel& pool, const BroadcastPlan& p, const TA* a, const TB* b, TO* o, F f,
                 int64_t grain = kGrain) {
  parallel_runs<2>(pool, p, grain, [&](int64_t pos, const std::array<int64_t, 2>& off, int64_t n,
                                       const std::array<int64_t, 2>& st) {
    const TA* pa = a + off[0];
    const TB* pb = b + off[1];
    TO* po = o + pos;
    if (st[0] != 0 && st[1] != 0) {
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
    } else if (st[0] != 0) {
      const TB vb = pb[0];
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], vb);
    } else if (st[1] != 0) {
      const TA va = pa[0];
      for (int64_t i = 0; i < n; ++i) po[i] = f(va, pb[i]);
    } else {
      const TO v = f(pa[0], pb[0]);
      for (int64_t i = 0; i < n; ++i) po[i] = v;
    }
  });
}

// Reads the dims of the present inputs among `idx` for a plan.
inline std::vector<const Dims*> dims_of(std::initializer_list<const Tensor*> ts) {
  std::vector<const Dims*> v;
  for (const Tensor* t : ts) v.push_back(&t->dims());
  return v;
}

// Converts every element of `src` to dst's dtype (Cast semantics); dst must
// have src's element count.
Status convert_tensor(const Tensor& src, Tensor& dst, Parallel& pool);

// ---- registration of the family's parts -----------------------------------

void register_unary_ops(OpRegistry& reg);
void register_binary_ops(OpRegistry& reg);
void register_cast_ops(OpRegistry& reg);

}  // namespace ew
}  // namespace tessera
