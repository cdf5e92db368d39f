// Detection family: NonMaxSuppression (opsets 10, 11) here, MaxRoiPool in
// detection_roi_pool.cc.
//
// NonMaxSuppression: boxes [B,N,4], scores [B,C,N] and optional scalar inputs
// max_output_boxes_per_class (default 0 = select nothing), iou_threshold
// (default 0) and score_threshold (default: no filtering) -> int64
// [num_selected, 3] rows (batch, class, box). For every (batch, class) pair,
// in that order, the boxes whose score is > score_threshold are visited by
// descending score (ties by ascending box index, as onnxruntime's priority
// queue orders them); a box is kept unless its IoU with a box already kept
// for the same pair is > iou_threshold, until max_output_boxes_per_class are
// kept. The IoU arithmetic follows onnxruntime's SuppressByIOU step for step
// so borderline overlaps decide the same way.
//
// The row count depends on the data, so inference leaves it unknown (except
// when nothing can be selected) and the kernel allocates the output itself
// once the selection is made; the pairs are independent and run in parallel.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "ops/detection_ops.h"
#include "util/cpu_isa.h"

namespace tessera {

const float* detection_float_data(const Tensor& t, std::vector<float>* storage) {
  if (t.dtype() == DType::kFloat32) return t.data<float>();
  storage->resize(static_cast<size_t>(t.numel()));
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) (*storage)[static_cast<size_t>(i)] = static_cast<float>(p[i]);
  });
  return storage->data();
}

namespace {

// A box as the extents onnxruntime derives from it, plus its area.
struct NmsBox {
  float xmin, xmax, ymin, ymax, area;
};

// onnxruntime's MaxMin: ordered pair of two coordinates (NaN lands in `lo`
// when it is the first operand).
inline void min_max(float a, float b, float* lo, float* hi) {
  if (a >= b) {
    *lo = b;
    *hi = a;
  } else {
    *lo = a;
    *hi = b;
  }
}

inline NmsBox make_box(const float* b, bool center_point) {
  NmsBox r;
  if (!center_point) {  // [y1, x1, y2, x2], corners in either order
    min_max(b[1], b[3], &r.xmin, &r.xmax);
    min_max(b[0], b[2], &r.ymin, &r.ymax);
  } else {  // [x_center, y_center, width, height]
    const float half_w = b[2] / 2;
    const float half_h = b[3] / 2;
    r.xmin = b[0] - half_w;
    r.xmax = b[0] + half_w;
    r.ymin = b[1] - half_h;
    r.ymax = b[1] + half_h;
  }
  r.area = (r.xmax - r.xmin) * (r.ymax - r.ymin);
  return r;
}

// The boxes kept so far for one (batch, class) pair, by coordinate, so the
// overlap test against all of them vectorizes.
struct KeptBoxes {
  std::vector<float> xmin, xmax, ymin, ymax, area;
  size_t size() const { return xmin.size(); }
  void clear() {
    xmin.clear();
    xmax.clear();
    ymin.clear();
    ymax.clear();
    area.clear();
  }
  void push(const NmsBox& b) {
    xmin.push_back(b.xmin);
    xmax.push_back(b.xmax);
    ymin.push_back(b.ymin);
    ymax.push_back(b.ymax);
    area.push_back(b.area);
  }
};

// True when `c` overlaps some kept box with IoU > thr. Per pair this is
// onnxruntime's SuppressByIOU(kept, c) without its early returns: each of
// them returns "keep", and so does a NaN anywhere in the chain, since it
// reaches either the intersection or the union and the final comparison is
// then false.
bool suppressed(const KeptBoxes& kept, const NmsBox& c, float thr) {
  constexpr size_t kBlock = 32;
  const size_t n = kept.size();
  const float* kx0 = kept.xmin.data();
  const float* kx1 = kept.xmax.data();
  const float* ky0 = kept.ymin.data();
  const float* ky1 = kept.ymax.data();
  const float* ka = kept.area.data();
  for (size_t j = 0; j < n; j += kBlock) {
    const size_t e = std::min(n, j + kBlock);
    int any = 0;
    for (size_t k = j; k < e; ++k) {
      const float ix0 = std::max(kx0[k], c.xmin);
      const float ix1 = std::min(kx1[k], c.xmax);
      const float iy0 = std::max(ky0[k], c.ymin);
      const float iy1 = std::min(ky1[k], c.ymax);
      const float inter = (ix1 - ix0) * (iy1 - iy0);
      const float uni = ka[k] + c.area - inter;
      const bool hit = (ix1 > ix0) & (iy1 > iy0) & (inter > 0.0f) & (ka[k] > 0.0f) & (c.area > 0.0f) &
                       (uni > 0.0f) & (inter / uni > thr);
      any |= static_cast<int>(hit);
    }
    if (any) return true;
  }
  return false;
}

// A candidate as one integer that orders like (score, -index): the top 32
// bits map the score's float order onto unsigned order, the low 32 bits hold
// the complement of the box index, so the largest key is the highest score
// and, among equal scores, the lowest index (onnxruntime's tie order). NaN
// scores (possible only without a threshold) rank with -inf instead of
// breaking the order; -0 ties with +0.
inline uint64_t candidate_key(float score, uint32_t index) {
  score = std::isnan(score) ? -std::numeric_limits<float>::infinity() : score + 0.0f;
  uint32_t bits;
  std::memcpy(&bits, &score, sizeof bits);
  bits ^= static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31) | 0x80000000u;
  return (static_cast<uint64_t>(bits) << 32) | (0xFFFFFFFFu - index);
}

inline int64_t candidate_index(uint64_t key) { return 0xFFFFFFFFu - static_cast<uint32_t>(key); }

TSR_AVX512_BEGIN
namespace avx512 {

// gather_candidates over the first n - n % 16 boxes.
size_t gather_candidates(const float* scores, int64_t n, bool has_threshold, float threshold, uint64_t* keys) {
  size_t count = 0;
  int64_t i = 0;
  const __m512 thr = _mm512_set1_ps(threshold);
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512i sign = _mm512_set1_epi32(static_cast<int32_t>(0x80000000u));
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (; i + 16 <= n; i += 16) {
    __m512 s = _mm512_loadu_ps(scores + i);
    const __mmask16 pass = has_threshold ? _mm512_cmp_ps_mask(s, thr, _CMP_GT_OQ) : __mmask16{0xFFFF};
    if (!pass) continue;  // the common case for detector outputs
    s = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(s, s, _CMP_UNORD_Q), _mm512_add_ps(s, _mm512_setzero_ps()),
                             neg_inf);
    __m512i bits = _mm512_castps_si512(s);
    bits = _mm512_xor_si512(bits, _mm512_or_si512(_mm512_srai_epi32(bits, 31), sign));
    const __m512i low = _mm512_sub_epi32(_mm512_set1_epi32(-1),
                                         _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(i)), lane));
    for (int half = 0; half < 2; ++half) {
      const __m256i hb = half ? _mm512_extracti64x4_epi64(bits, 1) : _mm512_castsi512_si256(bits);
      const __m256i hl = half ? _mm512_extracti64x4_epi64(low, 1) : _mm512_castsi512_si256(low);
      const __m512i key = _mm512_or_si512(_mm512_slli_epi64(_mm512_cvtepu32_epi64(hb), 32), _mm512_cvtepu32_epi64(hl));
      const auto m = static_cast<__mmask8>(half ? pass >> 8 : pass);
      // Compress in a register and store all 8 lanes (the buffer has slack):
      // a compressing store to memory is slow on some cores.
      _mm512_storeu_si512(keys + count, _mm512_maskz_compress_epi64(m, key));
      count += static_cast<size_t>(__builtin_popcount(m));
    }
  }
  return count;
}

}  // namespace avx512
TSR_AVX512_END

// Writes the keys of the boxes whose score passes (every box without a
// threshold) to `keys`, which has room for n + 8; returns their count.
size_t gather_candidates(const float* scores, int64_t n, bool has_threshold, float threshold, uint64_t* keys) {
  size_t count = 0;
  int64_t i = 0;
  if (cpu::avx512()) {
    count = avx512::gather_candidates(scores, n, has_threshold, threshold, keys);
    i = n - n % 16;
  }
  for (; i < n; ++i) {
    keys[count] = candidate_key(scores[i], static_cast<uint32_t>(i));
    count += (!has_threshold || scores[i] > threshold) ? 1 : 0;
  }
  return count;
}

struct NmsParams {
  int64_t max_per_class = 0;
  float iou_threshold = 0.0f;
  bool has_score_threshold = false;
  float score_threshold = 0.0f;
  bool center_point = false;
};

// Scratch reused across the pairs one task handles; `keys` has room for
// num_boxes + 8 (left uninitialised: every pair overwrites what it reads).
struct PairScratch {
  std::unique_ptr<uint64_t[]> keys;
  KeptBoxes kept;
};

// Greedy selection for one (batch, class) pair; appends the kept box indices.
// Candidates are ordered a chunk at a time (the top of the rest selected
// with nth_element, then sorted), so a small max_output_boxes_per_class
// costs about one pass over the scores while heavy suppression costs one
// sort.
void select_pair(const NmsBox* boxes, const float* scores, int64_t num_boxes, const NmsParams& p,
                 PairScratch* scratch, std::vector<int64_t>* out) {
  uint64_t* keys = scratch->keys.get();
  const size_t count = gather_candidates(scores, num_boxes, p.has_score_threshold, p.score_threshold, keys);
  KeptBoxes& kept = scratch->kept;
  kept.clear();
  const size_t max_kept = static_cast<size_t>(std::min<int64_t>(p.max_per_class, num_boxes));
  size_t chunk = std::max<size_t>(64, 2 * max_kept);
  const auto later = std::greater<uint64_t>();
  for (size_t done = 0; done < count && kept.size() < max_kept; chunk *= 4) {
    const size_t end = count - done > chunk ? done + chunk : count;
    if (end < count) std::nth_element(keys + done, keys + end, keys + count, later);
    std::sort(keys + done, keys + end, later);
    for (; done < end && kept.size() < max_kept; ++done) {
      const int64_t idx = candidate_index(keys[done]);
      const NmsBox& b = boxes[idx];
      if (suppressed(kept, b, p.iou_threshold)) continue;
      kept.push(b);
      out->push_back(idx);
    }
  }
}

Status read_nms_params(const KernelContext& ctx, NmsParams* p) {
  const Tensor* max_out = ctx.input(2);
  const Tensor* iou = ctx.input(3);
  const Tensor* score = ctx.input(4);
  p->center_point = ctx.node().attr_int("center_point_box", 0) != 0;
  if (max_out && max_out->numel() > 0) p->max_per_class = std::max<int64_t>(max_out->as_int64(0), 0);
  if (iou && iou->numel() > 0) {
    p->iou_threshold = static_cast<float>(iou->as_double(0));
    if (!(p->iou_threshold >= 0.0f && p->iou_threshold <= 1.0f)) {
      return ctx.error("iou_threshold must be in [0, 1], got " + std::to_string(p->iou_threshold));
    }
  }
  if (score && score->numel() > 0) {
    p->has_score_threshold = true;
    p->score_threshold = static_cast<float>(score->as_double(0));
  }
  return Status::Ok();
}

Status infer_nms(InferContext& ctx) {
  const int64_t cpb = ctx.node().attr_int("center_point_box", 0);
  if (cpb != 0 && cpb != 1) return ctx.error("center_point_box must be 0 or 1, got " + std::to_string(cpb));
  for (int i = 0; i < 2; ++i) {
    const DType t = ctx.in_dtype(i);
    if (t != DType::kUndefined && !dtype_is_float(t)) {
      return ctx.error(std::string(i == 0 ? "boxes" : "scores") + " must be a float tensor");
    }
  }
  const Shape& boxes = ctx.in_shape(0);
  const Shape& scores = ctx.in_shape(1);
  if (boxes.rank_known && boxes.rank() != 3) {
    return ctx.error("boxes must be 3-D [batch, boxes, 4], got " + boxes.str());
  }
  if (scores.rank_known && scores.rank() != 3) {
    return ctx.error("scores must be 3-D [batch, classes, boxes], got " + scores.str());
  }
  if (boxes.rank_known && boxes[2].known() && boxes[2].value != 4) {
    return ctx.error("boxes must have 4 coordinates in its last dim, got " + boxes.str());
  }
  if (boxes.rank_known && scores.rank_known) {
    auto differ = [](const Dim& a, const Dim& b) { return a.known() && b.known() && a.value != b.value; };
    if (differ(boxes[0], scores[0]) || differ(boxes[1], scores[2])) {
      return ctx.error("boxes " + boxes.str() + " and scores " + scores.str() +
                       " disagree on the batch or box count");
    }
  }
  // Nothing is selected without max_output_boxes_per_class or with a limit
  // of zero or less; otherwise the count depends on the data.
  Dim rows;
  if (!ctx.has_input(2)) {
    rows = Dim(0);
  } else if (const Tensor* m = ctx.in_value(2); m && m->numel() > 0 && m->as_int64(0) <= 0) {
    rows = Dim(0);
  }
  ctx.set_output(0, DType::kInt64, Shape({rows, Dim(3)}));
  return Status::Ok();
}

Status run_nms(KernelContext& ctx) {
  const Tensor* boxes_t = ctx.input(0);
  const Tensor* scores_t = ctx.input(1);
  if (!boxes_t || !scores_t) return ctx.error("boxes and scores are required");
  if (boxes_t->rank() != 3 || boxes_t->dim(2) != 4 || scores_t->rank() != 3 ||
      boxes_t->dim(0) != scores_t->dim(0) || boxes_t->dim(1) != scores_t->dim(2)) {
    return ctx.error("boxes " + dims_str(boxes_t->dims()) + " and scores " + dims_str(scores_t->dims()) +
                     " must be [batch, boxes, 4] and [batch, classes, boxes]");
  }
  NmsParams p;
  TSR_RETURN_IF_ERROR(read_nms_params(ctx, &p));
  const int64_t batches = boxes_t->dim(0);
  const int64_t num_boxes = boxes_t->dim(1);
  const int64_t classes = scores_t->dim(1);
  // Candidate keys hold box indices in 32 bits.
  if (num_boxes > int64_t{0xFFFFFFFF}) return ctx.error("more than 2^32 - 1 boxes per batch are not supported");
  const int64_t pairs = p.max_per_class > 0 && num_boxes > 0 ? batches * classes : 0;

  std::vector<std::vector<int64_t>> kept(static_cast<size_t>(pairs));
  if (pairs > 0) {
    std::vector<float> box_store, score_store;
    const float* box_data = detection_float_data(*boxes_t, &box_store);
    const float* score_data = detection_float_data(*scores_t, &score_store);
    std::vector<NmsBox> boxes(static_cast<size_t>(batches * num_boxes));
    ctx.pool().parallel_for(batches * num_boxes, 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) boxes[static_cast<size_t>(i)] = make_box(box_data + 4 * i, p.center_point);
    });
    // Pairs cost about the same, so one pair per task is balanced enough.
    ctx.pool().parallel_for(pairs, 1, [&](int64_t b, int64_t e) {
      PairScratch scratch;
      scratch.keys.reset(new uint64_t[static_cast<size_t>(num_boxes) + 8]);
      for (int64_t pr = b; pr < e; ++pr) {
        const int64_t batch = pr / classes;
        select_pair(boxes.data() + batch * num_boxes, score_data + pr * num_boxes, num_boxes, p, &scratch,
                    &kept[static_cast<size_t>(pr)]);
      }
    });
  }

  int64_t rows = 0;
  for (const auto& k : kept) rows += static_cast<int64_t>(k.size());
  Tensor* out = nullptr;
  TSR_ASSIGN_OR_RETURN(out, ctx.allocate_output(0, DType::kInt64, {rows, 3}));
  if (!out) return Status::Ok();
  int64_t* o = out->data<int64_t>();
  for (int64_t pr = 0; pr < pairs; ++pr) {
    for (int64_t idx : kept[static_cast<size_t>(pr)]) {
      *o++ = pr / classes;
      *o++ = pr % classes;
      *o++ = idx;
    }
  }
  return Status::Ok();
}

}  // namespace

TSR_REGISTER_OPS(detection) {
  reg.add(OpSchema{"NonMaxSuppression", "", infer_nms, nullptr, run_nms, {}});
  register_max_roi_pool(reg);
}

}  // namespace tessera
