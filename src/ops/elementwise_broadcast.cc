// Broadcast plans (see elementwise_common.h for the method) and the dtype
// checks shared by the elementwise family.
#include <string>

#include "ops/elementwise_common.h"

namespace tessera::ew {

namespace {

std::string dtype_set_str(uint32_t set) {
  std::string s;
  for (int i = 0; i < 32; ++i) {
    if ((set & (1u << i)) == 0) continue;
    if (!s.empty()) s += ", ";
    s += dtype_name(static_cast<DType>(i));
  }
  return s;
}

}  // namespace

Status check_input_dtype(const InferContext& ctx, int i, uint32_t set) {
  if (!ctx.has_input(i)) return Status::Ok();
  DType t = ctx.in_dtype(i);
  if (t == DType::kUndefined || dtype_in(t, set)) return Status::Ok();
  return Unsupported(ctx.node().describe() + ": input " + std::to_string(i) + " has dtype " + dtype_name(t) +
                     "; supported: " + dtype_set_str(set));
}

Status check_tensor_dtype(const KernelContext& ctx, const Tensor& t, uint32_t set) {
  if (dtype_in(t.dtype(), set)) return Status::Ok();
  return Unsupported(ctx.node().describe() + ": dtype " + dtype_name(t.dtype()) +
                     " is not supported; supported: " + dtype_set_str(set));
}

BroadcastPlan make_broadcast_plan(const Dims& out, const std::vector<const Dims*>& ins) {
  const size_t n = ins.size();
  const size_t r = out.size();
  BroadcastPlan p;
  p.numel = numel(out);
  p.strides.resize(n);

  // Per kept output dim: its size and which inputs broadcast along it.
  std::vector<int64_t> sizes;
  std::vector<std::vector<bool>> bcast;
  for (size_t d = 0; d < r; ++d) {
    if (out[d] == 1) continue;
    std::vector<bool> b(n);
    for (size_t k = 0; k < n; ++k) {
      const Dims& in = *ins[k];
      size_t off = r - in.size();
      b[k] = d < off || in[d - off] == 1;
    }
    if (!sizes.empty() && bcast.back() == b) {
      sizes.back() *= out[d];
    } else {
      sizes.push_back(out[d]);
      bcast.push_back(std::move(b));
    }
  }
  if (sizes.empty()) {
    p.dims = {1};
    for (size_t k = 0; k < n; ++k) p.strides[k] = {0};
    return p;
  }
  p.dims = sizes;
  for (size_t k = 0; k < n; ++k) {
    Dims& s = p.strides[k];
    s.assign(sizes.size(), 0);
    int64_t acc = 1;
    for (size_t j = sizes.size(); j-- > 0;) {
      if (bcast[j][k]) continue;
      s[j] = acc;
      acc *= sizes[j];
    }
  }
  return p;
}

}  // namespace tessera::ew
