#include "ops/matmul_util.h"

namespace tessera {

Status infer_matmul_output(InferContext& ctx, int a_index, int b_index, DType out_dtype) {
  const Shape& a = ctx.in_shape(a_index);
  const Shape& b = ctx.in_shape(b_index);
  if (!a.rank_known || !b.rank_known) {
    ctx.set_output(0, out_dtype, Shape::Unranked());
    return Status::Ok();
  }
  if (a.rank() == 0 || b.rank() == 0) return ctx.error("matrix-product inputs must have rank >= 1");
  std::vector<Dim> ad = a.dims, bd = b.dims;
  const bool a1 = ad.size() == 1, b1 = bd.size() == 1;
  if (a1) ad.insert(ad.begin(), Dim(1));
  if (b1) bd.push_back(Dim(1));
  const Dim& ka = ad[ad.size() - 1];
  const Dim& kb = bd[bd.size() - 2];
  if (ka.known() && kb.known() && ka.value != kb.value) {
    return ctx.error("inner dimensions differ: " + a.str() + " x " + b.str());
  }
  Shape batch;
  if (!broadcast_shapes(Shape(std::vector<Dim>(ad.begin(), ad.end() - 2)),
                        Shape(std::vector<Dim>(bd.begin(), bd.end() - 2)), &batch)) {
    return ctx.error("batch dimensions of " + a.str() + " and " + b.str() + " cannot be broadcast");
  }
  std::vector<Dim> out = batch.dims;
  if (!a1) out.push_back(ad[ad.size() - 2]);
  if (!b1) out.push_back(bd[bd.size() - 1]);
  ctx.set_output(0, out_dtype, Shape(out));
  return Status::Ok();
}

}  // namespace tessera
