// ai.tessera.FusedElementwise (contract in fused_elementwise.h): runs a chain
// of float32 elementwise instructions over the output in blocks of kBlock
// elements. Each block is loaded once into a stack buffer, every instruction
// is applied to it while it sits in L1, and it is stored once; blocks run in
// parallel on the session's pool. Each instruction uses exactly the
// arithmetic of the unfused kernel (elementwise.cc, elementwise_binary.cc),
// so fused and unfused results agree to the last bit wherever the compiler
// makes the same contraction choices.
#include "ops/fused_elementwise.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ops/elementwise_math.h"
#include "ops/op_registry.h"
#include "util/cpu_isa.h"

namespace tessera {
namespace {

namespace fm = fastmath;

// 4 KiB per buffer: the value and one gathered side operand stay in L1.
constexpr int64_t kBlock = 1024;
// Elements per parallel task: several blocks, so scheduling stays cheap.
constexpr int64_t kGrain = 8 * kBlock;

enum class Op : uint8_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kRelu,
  kLeakyRelu,
  kSigmoid,
  kHardSigmoid,
  kTanh,
  kErf,
  kExp,
  kLog,
  kSqrt,
  kNeg,
  kAbs,
  kReciprocal,
  kClip,
  kGelu,
  kSin,
  kCos,
};

struct OpName {
  const char* name;
  Op op;
  bool binary;
};

constexpr OpName kOps[] = {
    {"Add", Op::kAdd, true},
    {"Sub", Op::kSub, true},
    {"Mul", Op::kMul, true},
    {"Div", Op::kDiv, true},
    {"Pow", Op::kPow, false},
    {"Relu", Op::kRelu, false},
    {"LeakyRelu", Op::kLeakyRelu, false},
    {"Sigmoid", Op::kSigmoid, false},
    {"HardSigmoid", Op::kHardSigmoid, false},
    {"Tanh", Op::kTanh, false},
    {"Erf", Op::kErf, false},
    {"Exp", Op::kExp, false},
    {"Log", Op::kLog, false},
    {"Sqrt", Op::kSqrt, false},
    {"Neg", Op::kNeg, false},
    {"Abs", Op::kAbs, false},
    {"Reciprocal", Op::kReciprocal, false},
    {"Clip", Op::kClip, false},
    {"Gelu", Op::kGelu, false},
    {"Sin", Op::kSin, false},
    {"Cos", Op::kCos, false},
};

const OpName* find_op(const std::string& name) {
  for (const OpName& o : kOps) {
    if (name == o.name) return &o;
  }
  return nullptr;
}

struct Instr {
  Op op;
  int arg = -1;      // side input of a binary op
  bool swap = false; // side operand on the left
  float p0 = 0.f, p1 = 0.f;
};

}  // namespace

TSR_AVX512_BEGIN
namespace avx512 {
namespace {
#include "ops/fused_elementwise_impl.inc"
}  // namespace
}  // namespace avx512
TSR_AVX512_END

namespace avx2 {
namespace {
#include "ops/fused_elementwise_impl.inc"
}  // namespace
}  // namespace avx2

namespace {

// How a side operand maps onto the output (block_broadcast).
struct Side {
  const float* data = nullptr;
  int64_t numel = 0;
  int64_t inner = 1;
};

// Side values for output elements [b, b+n): a pointer into the operand when
// they are contiguous there, else gathered into `tmp`. *step = 0 for one value.
const float* side_values(const Side& sd, int64_t b, int64_t n, float* tmp, int* step) {
  *step = 1;
  if (sd.numel == 1) {
    *step = 0;
    return sd.data;
  }
  int64_t pos = b;
  const int64_t end = b + n;
  if (sd.inner == 1) {
    const int64_t j = pos % sd.numel;
    if (j + n <= sd.numel) return sd.data + j;  // same shape, or one run of a trailing vector
    while (pos < end) {
      const int64_t jj = pos % sd.numel;
      const int64_t len = std::min(sd.numel - jj, end - pos);
      std::memcpy(tmp + (pos - b), sd.data + jj, sizeof(float) * static_cast<size_t>(len));
      pos += len;
    }
    return tmp;
  }
  if ((b / sd.inner) == ((end - 1) / sd.inner)) {  // one value for the whole block
    *step = 0;
    return sd.data + (b / sd.inner) % sd.numel;
  }
  while (pos < end) {
    const int64_t len = std::min(sd.inner - pos % sd.inner, end - pos);
    const float x = sd.data[(pos / sd.inner) % sd.numel];
    for (int64_t i = 0; i < len; ++i) tmp[pos - b + i] = x;
    pos += len;
  }
  return tmp;
}

// The chain starts with a Cast of int32 input 0 to float32.
bool cast_head(const Node& node) {
  const Attribute* ops = node.attr("ops");
  return ops && !ops->strings.empty() && ops->strings[0] == "Cast";
}

Status infer_fused_elementwise(InferContext& ctx) {
  const bool cast = cast_head(ctx.node());
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const DType want = i == 0 && cast ? DType::kInt32 : DType::kFloat32;
    if (ctx.in_dtype(i) != DType::kUndefined && ctx.in_dtype(i) != want) {
      return ctx.error(std::string("inputs must be float32 (input 0 int32 under a head Cast), input ") +
                       std::to_string(i) + " is " + dtype_name(ctx.in_dtype(i)));
    }
  }
  return infer_broadcast(ctx, DType::kFloat32);
}

class FusedElementwiseKernel final : public Kernel {
 public:
  static Expected<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    const Node& node = init.node;
    const Attribute* ops = node.attr("ops");
    if (!ops || ops->strings.empty()) return InvalidModel(node.describe() + ": attribute 'ops' is missing or empty");
    const size_t n = ops->strings.size();
    std::vector<int64_t> args = node.attr_ints("args"), swap = node.attr_ints("swap");
    std::vector<float> p0 = node.attr_floats("p0"), p1 = node.attr_floats("p1");
    if (args.size() != n || swap.size() != n || p0.size() != n || p1.size() != n) {
      return InvalidModel(node.describe() + ": attributes args, swap, p0 and p1 need one entry per op");
    }
    auto k = std::make_unique<FusedElementwiseKernel>();
    const int num_inputs = node.num_inputs();
    k->cast_head_ = cast_head(node);
    if (k->cast_head_ && args[0] != -1) return InvalidModel(node.describe() + ": the head Cast has a side input");
    for (size_t i = k->cast_head_ ? 1 : 0; i < n; ++i) {
      const OpName* o = find_op(ops->strings[i]);
      if (!o) return InvalidModel(node.describe() + ": op '" + ops->strings[i] + "' cannot be fused");
      Instr in{o->op, static_cast<int>(args[i]), swap[i] != 0, p0[i], p1[i]};
      if (o->binary != (in.arg >= 0) || in.arg >= num_inputs || in.arg == 0 || (in.arg < 0 && in.arg != -1)) {
        return InvalidModel(node.describe() + ": op " + std::to_string(i) + " (" + o->name + ") has side input " +
                            std::to_string(in.arg));
      }
      k->prog_.push_back(in);
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }

  Status run(KernelContext& ctx) const override {
    Tensor& y = *ctx.output(0);
    const Dims& od = y.dims();
    std::vector<Side> sides(static_cast<size_t>(ctx.num_inputs()));
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor* t = ctx.input(i);
      if (!t) return ctx.error("input " + std::to_string(i) + " is absent");
      const DType want = i == 0 && cast_head_ ? DType::kInt32 : DType::kFloat32;
      if (t->dtype() != want) return ctx.error("input " + std::to_string(i) + " is not " + dtype_name(want));
      Side& sd = sides[static_cast<size_t>(i)];
      sd.data = want == DType::kFloat32 ? t->data<float>() : nullptr;
      sd.numel = t->numel();
      if (i == 0 ? t->dims() != od : !block_broadcast(t->dims(), od, &sd.inner)) {
        return ctx.error("input " + std::to_string(i) + " " + dims_str(t->dims()) +
                         (i == 0 ? " must have the output's shape " : " does not broadcast as a block onto ") +
                         dims_str(od));
      }
    }
    const float* x = sides[0].data;
    const int32_t* xi = cast_head_ ? ctx.input(0)->data<int32_t>() : nullptr;
    float* out = y.data<float>();
    const bool wide = cpu::avx512();
    ctx.pool().parallel_for(y.numel(), kGrain, [&](int64_t begin, int64_t end) {
      alignas(64) float v[kBlock];
      alignas(64) float tmp[kBlock];
      for (int64_t b = begin; b < end; b += kBlock) {
        const int64_t n = std::min(kBlock, end - b);
        if (xi) {
          for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(xi[b + i]);  // Cast's conversion
        } else {
          std::memcpy(v, x + b, sizeof(float) * static_cast<size_t>(n));
        }
        for (const Instr& in : prog_) {
          if (in.arg < 0) {
            if (wide) avx512::unary(in, v, n);
            else avx2::unary(in, v, n);
            continue;
          }
          int step = 1;
          const float* s = side_values(sides[static_cast<size_t>(in.arg)], b, n, tmp, &step);
          if (wide) {
            if (step == 0) avx512::binary<0>(in, v, s, n);
            else avx512::binary<1>(in, v, s, n);
          } else {
            if (step == 0) avx2::binary<0>(in, v, s, n);
            else avx2::binary<1>(in, v, s, n);
          }
        }
        std::memcpy(out + b, v, sizeof(float) * static_cast<size_t>(n));
      }
    });
    return Status::Ok();
  }

 private:
  std::vector<Instr> prog_;  // after the head Cast, if any
  bool cast_head_ = false;
};

}  // namespace

bool fused_elementwise_supports(const std::string& op_type) { return find_op(op_type) != nullptr; }

TSR_REGISTER_OPS(fused_elementwise) {
  reg.add(OpSchema{"FusedElementwise", "ai.tessera", infer_fused_elementwise, FusedElementwiseKernel::Create,
                   nullptr, {}});
}

}  // namespace tessera
