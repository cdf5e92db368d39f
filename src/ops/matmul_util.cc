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

void MatMulDims::offsets(int64_t idx, int64_t* ai, int64_t* bi) const {
  int64_t a = 0, b = 0;
  for (size_t i = batch.size(); i-- > 0;) {
    const int64_t c = idx % batch[i];
    idx /= batch[i];
    a += c * a_stride[i];
    b += c * b_stride[i];
  }
  *ai = a;
  *bi = b;
}

Expected<MatMulDims> matmul_dims(const Node& node, const Dims& a_in, const Dims& b_in) {
  Dims a = a_in, b = b_in;
  if (a.empty() || b.empty()) return InvalidInput(node.describe() + ": matrix-product inputs must have rank >= 1");
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  MatMulDims d;
  d.m = a[a.size() - 2];
  d.k = a[a.size() - 1];
  d.n = b[b.size() - 1];
  if (b[b.size() - 2] != d.k) {
    return InvalidInput(node.describe() + ": inner dimensions differ: " + dims_str(a_in) + " x " + dims_str(b_in));
  }
  Dims ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  if (!broadcast_dims(ab, bb, &d.batch)) {
    return InvalidInput(node.describe() + ": batch dimensions cannot be broadcast");
  }
  d.a_stride = broadcast_strides(ab, d.batch);
  d.b_stride = broadcast_strides(bb, d.batch);
  d.batch_count = numel(d.batch);
  d.a_matrices = numel(ab);
  d.b_matrices = numel(bb);
  return d;
}

}  // namespace tessera
