// ai.tessera.QLinearLookup (contract in qlinear_lookup.h). The table is
// checked and copied when the kernel is made. The int8 offset (u(v) = v + 128)
// is a flip of the top bit: the unary kernel keeps its table indexed by the
// stored byte for either type, the binary one flips the bits in its index.
// Unary, on AVX-512 VBMI: 64 elements per step, two 128-entry byte permutes
// (vpermi2b) and a blend on each index's top bit; elsewhere, and for the
// binary form's 64 KiB table, one load per element (a byte gather does not
// vectorise). Chunks run in parallel on the session's pool, as the float
// elementwise kernels do.
#include "util/cpu_isa.h"

#include "ops/qlinear_lookup.h"

#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "ops/op_registry.h"
#include "ops/qlinear_add_math.h"

namespace tessera {
namespace {

// Elements per parallel chunk: a byte in and a byte out each, at a cycle or
// less, so a chunk is worth handing to another thread.
constexpr int64_t kGrain = 1 << 16;

using Table256 = std::array<uint8_t, 256>;

void lookup256(const uint8_t* __restrict x, uint8_t* __restrict y, int64_t n, const uint8_t* __restrict t) {
  for (int64_t i = 0; i < n; ++i) y[i] = t[x[i]];
}

// f, f2: the flips of the index bytes (0x80 for int8).
void lookup65536(const uint8_t* __restrict x, const uint8_t* __restrict x2, uint8_t* __restrict y, int64_t n,
                 const uint8_t* __restrict t, unsigned f, unsigned f2) {
  for (int64_t i = 0; i < n; ++i) y[i] = t[((x[i] ^ f) << 8) | (x2[i] ^ f2)];
}

}  // namespace

TSR_AVX512_VBMI_BEGIN
namespace avx512_vbmi {
namespace {

void lookup256(const uint8_t* x, uint8_t* y, int64_t n, const uint8_t* t) {
  const __m512i t0 = _mm512_loadu_si512(t), t1 = _mm512_loadu_si512(t + 64);
  const __m512i t2 = _mm512_loadu_si512(t + 128), t3 = _mm512_loadu_si512(t + 192);
  auto step = [&](__m512i v) {
    const __m512i lo = _mm512_permutex2var_epi8(t0, v, t1);  // index bits 0-6
    const __m512i hi = _mm512_permutex2var_epi8(t2, v, t3);
    return _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi);
  };
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) _mm512_storeu_si512(y + i, step(_mm512_loadu_si512(x + i)));
  if (i < n) {
    const __mmask64 m = (uint64_t{1} << (n - i)) - 1;
    _mm512_mask_storeu_epi8(y + i, m, step(_mm512_maskz_loadu_epi8(m, x + i)));
  }
}

}  // namespace
}  // namespace avx512_vbmi
TSR_AVX512_END

namespace {

bool is_8bit(DType t) { return t == DType::kUInt8 || t == DType::kInt8; }

// The byte XORed onto a stored value to give its table index.
uint8_t index_flip(DType t) { return t == DType::kInt8 ? 0x80 : 0x00; }

// Unary: inputs (X, Table); binary: (X, X2, Table).
Status check_arity(const Node& node, int num_inputs) {
  if (num_inputs != 2 && num_inputs != 3) {
    return InvalidModel(node.describe() + ": takes X, optionally X2, and Table; got " + std::to_string(num_inputs) +
                        " inputs");
  }
  for (int i = 0; i < num_inputs; ++i) {
    if (!node.has_input(i)) return InvalidModel(node.describe() + ": input " + std::to_string(i) + " is absent");
  }
  return Status::Ok();
}

int64_t entries_for(int num_inputs) { return num_inputs == 3 ? kLookupBinaryEntries : kLookupUnaryEntries; }

Status infer_qlinear_lookup(InferContext& ctx) {
  TSR_RETURN_IF_ERROR(check_arity(ctx.node(), ctx.node().num_inputs()));
  const int table = ctx.node().num_inputs() - 1;
  for (int i = 0; i <= table; ++i) {
    const DType t = ctx.in_dtype(i);
    if (t != DType::kUndefined && !is_8bit(t)) {
      return ctx.error(std::string(i == table ? "Table"
                                   : i == 0   ? "X"
                                              : "X2") +
                       " must be uint8 or int8, got " + dtype_name(t));
    }
  }
  const Shape& ts = ctx.in_shape(table);
  const int64_t want = entries_for(table + 1);
  if (ts.rank_known && (ts.rank() != 1 || (ts[0].known() && ts[0].value != want))) {
    return ctx.error("Table must be 1-D with " + std::to_string(want) + " entries, got " + ts.str());
  }
  const Shape& xs = ctx.in_shape(0);
  if (table == 2) {
    const Shape& x2 = ctx.in_shape(1);
    bool differ = xs.rank_known && x2.rank_known && xs.rank() != x2.rank();
    for (int d = 0; !differ && xs.rank_known && x2.rank_known && d < xs.rank(); ++d) {
      differ = xs[d].known() && x2[d].known() && xs[d].value != x2[d].value;
    }
    if (differ) return ctx.error("X " + xs.str() + " and X2 " + x2.str() + " must have the same shape");
  }
  ctx.set_output(0, ctx.in_dtype(table), xs);
  return Status::Ok();
}

class QLinearLookupKernel final : public Kernel {
 public:
  static Expected<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    const Node& node = init.node;
    const int n = node.num_inputs();
    TSR_RETURN_IF_ERROR(check_arity(node, n));
    const Tensor* t = static_cast<size_t>(n) <= init.const_inputs.size() ? init.const_inputs[n - 1] : nullptr;
    if (!t || !t->defined()) {
      return InvalidModel(node.describe() + ": Table '" + node.inputs[n - 1] + "' must be a constant");
    }
    const int64_t want = entries_for(n);
    if (!is_8bit(t->dtype()) || t->rank() != 1 || t->numel() != want) {
      return InvalidModel(node.describe() + ": Table '" + node.inputs[n - 1] + "' must be 1-D uint8 or int8 with " +
                          std::to_string(want) + " entries, got " + dtype_name(t->dtype()) + " " + dims_str(t->dims()));
    }
    auto k = std::make_unique<QLinearLookupKernel>();
    k->dtype_ = t->dtype();
    k->binary_ = want == kLookupBinaryEntries;
    const auto* bytes = static_cast<const uint8_t*>(t->raw());
    if (k->binary_) {
      k->table_.assign(bytes, bytes + want);
      // The table may say it holds ONNX Runtime's QLinearAdd or QLinearMul: computed 16 lanes at a time then, not
      // looked up.
      k->add_ = qadd::checked_form(node.attr_floats("qlinear_add"), node.attr_floats("qlinear_mul"),
                                   k->dtype_ == DType::kInt8, bytes);
    } else {
      for (int b = 0; b < 256; ++b) {
        k->by_byte_[0][static_cast<size_t>(b)] = bytes[b];
        k->by_byte_[1][static_cast<size_t>(b)] = bytes[b ^ 0x80];
      }
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }

  Status run(KernelContext& ctx) const override {
    const bool binary = binary_;
    const Tensor* x = ctx.input(0);
    const Tensor* x2 = binary ? ctx.input(1) : nullptr;
    Tensor* y = ctx.output(0);
    if (!x || (binary && !x2)) return ctx.error(std::string(x ? "X2" : "X") + " is absent");
    if (!is_8bit(x->dtype())) return ctx.error(std::string("X must be uint8 or int8, got ") + dtype_name(x->dtype()));
    if (binary && !is_8bit(x2->dtype())) {
      return ctx.error(std::string("X2 must be uint8 or int8, got ") + dtype_name(x2->dtype()));
    }
    if (binary && x2->dims() != x->dims()) {
      return ctx.error("X " + dims_str(x->dims()) + " and X2 " + dims_str(x2->dims()) + " must have the same shape");
    }
    if (!y || y->dtype() != dtype_ || y->dims() != x->dims()) {
      return ctx.error("output must be " + std::string(dtype_name(dtype_)) + " " + dims_str(x->dims()));
    }
    const auto* px = static_cast<const uint8_t*>(x->raw());
    auto* py = static_cast<uint8_t*>(y->raw());
    if (!binary) {
      const uint8_t* t = by_byte_[x->dtype() == DType::kInt8 ? 1 : 0].data();
      const bool vbmi = cpu::avx512_vbmi();
      ctx.pool().parallel_for(x->numel(), kGrain, [=](int64_t b, int64_t e) {
        if (vbmi) {
          avx512_vbmi::lookup256(px + b, py + b, e - b, t);
        } else {
          lookup256(px + b, py + b, e - b, t);
        }
      });
      return Status::Ok();
    }
    const auto* px2 = static_cast<const uint8_t*>(x2->raw());
    if (add_ && x->dtype() == dtype_ && x2->dtype() == dtype_ && cpu::avx512()) {
      const qadd::Form form = *add_;
      const bool int8 = dtype_ == DType::kInt8;
      ctx.pool().parallel_for(x->numel(), kGrain, [=](int64_t b, int64_t e) {
        qadd::run(form, int8, px + b, px2 + b, py + b, static_cast<size_t>(e - b));
      });
      return Status::Ok();
    }
    const unsigned f = index_flip(x->dtype()), f2 = index_flip(x2->dtype());
    const uint8_t* t = table_.data();
    ctx.pool().parallel_for(x->numel(), kGrain,
                            [=](int64_t b, int64_t e) { lookup65536(px + b, px2 + b, py + b, e - b, t, f, f2); });
    return Status::Ok();
  }

 private:
  DType dtype_ = DType::kUInt8;
  bool binary_ = false;
  std::vector<uint8_t> table_;         // binary: as given
  std::optional<qadd::Form> add_;      // binary: the QLinearAdd / QLinearMul form the table holds, when it says so
  std::array<Table256, 2> by_byte_{};  // unary: indexed by the stored byte of a uint8 [0] or int8 [1] X
};

}  // namespace

TSR_REGISTER_OPS(qlinear_lookup) {
  reg.add(OpSchema{"QLinearLookup", "ai.tessera", infer_qlinear_lookup, QLinearLookupKernel::Create, nullptr, {}});
}

}  // namespace tessera
