// TfIdfVectorizer (opset 9).
//
// Input: int32/int64 token ids, [C] or [N, C]. Output: float32 [max(ngram_indexes)+1]
// or [N, that]: for every n-gram of the pool, its count in the row (TF), the
// pool weight when it occurs (IDF) or the count times the weight (TFIDF).
//
// The pool (`pool_int64s`) lists all 1-grams, then all 2-grams, ...; entry k
// of `ngram_counts` is the offset of the (k+1)-grams. N-grams are numbered in
// pool order and `ngram_indexes` maps that number to an output column.
// Counting, as the ONNX reference does: unigrams once per position; for
// lengths 2..max_gram_length, every skip s in [0, max_skip_count] counts the
// n-grams whose consecutive items are s+1 positions apart. String pools are
// not supported (the IR has no string tensors).
#include <algorithm>
#include <map>
#include <vector>

#include "ops/misc_ops.h"

namespace tessera {
namespace {

enum class TfIdfMode { kTF, kIDF, kTFIDF };

struct TfIdfConfig {
  TfIdfMode mode = TfIdfMode::kTF;
  int64_t min_gram = 1, max_gram = 1, max_skip = 0;
  int64_t out_size = 0;
  std::map<std::vector<int64_t>, int64_t> columns;  // n-gram -> output column
  std::vector<float> weights;                       // per n-gram number, may be empty
  std::map<std::vector<int64_t>, int64_t> number;   // n-gram -> n-gram number (for weights)
};

Expected<TfIdfConfig> parse_config(const Node& node) {
  TfIdfConfig c;
  std::string mode = node.attr_string("mode", "TF");
  if (mode == "TF") c.mode = TfIdfMode::kTF;
  else if (mode == "IDF") c.mode = TfIdfMode::kIDF;
  else if (mode == "TFIDF") c.mode = TfIdfMode::kTFIDF;
  else return InvalidModel(node.describe() + ": unknown mode '" + mode + "'");
  c.min_gram = node.attr_int("min_gram_length", 1);
  c.max_gram = node.attr_int("max_gram_length", 1);
  c.max_skip = node.attr_int("max_skip_count", 0);
  if (c.min_gram < 1 || c.max_gram < c.min_gram || c.max_skip < 0) {
    return InvalidModel(node.describe() + ": invalid gram lengths or skip count");
  }
  if (node.has_attr("pool_strings")) return Unsupported(node.describe() + ": string pools are not supported");
  const std::vector<int64_t> pool = node.attr_ints("pool_int64s");
  const std::vector<int64_t> counts = node.attr_ints("ngram_counts");
  const std::vector<int64_t> indexes = node.attr_ints("ngram_indexes");
  c.weights = node.attr_floats("weights");
  for (int64_t i : indexes) c.out_size = std::max(c.out_size, i + 1);
  int64_t ordinal = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    const int64_t len = static_cast<int64_t>(k) + 1;
    const int64_t begin = counts[k];
    const int64_t end = k + 1 < counts.size() ? counts[k + 1] : static_cast<int64_t>(pool.size());
    if (begin < 0 || end > static_cast<int64_t>(pool.size()) || end < begin || (end - begin) % len != 0) {
      return InvalidModel(node.describe() + ": ngram_counts do not partition pool_int64s");
    }
    for (int64_t p = begin; p < end; p += len, ++ordinal) {
      if (ordinal >= static_cast<int64_t>(indexes.size())) {
        return InvalidModel(node.describe() + ": fewer ngram_indexes than n-grams in the pool");
      }
      std::vector<int64_t> gram(pool.begin() + p, pool.begin() + p + len);
      c.columns[gram] = indexes[static_cast<size_t>(ordinal)];
      c.number[gram] = ordinal;
    }
  }
  return c;
}

Status tfidf_infer(InferContext& ctx) {
  TfIdfConfig c;
  TSR_ASSIGN_OR_RETURN(c, parse_config(ctx.node()));
  const Shape& x = ctx.in_shape(0);
  DType t = ctx.in_dtype(0);
  if (t != DType::kUndefined && t != DType::kInt32 && t != DType::kInt64) {
    return ctx.error(std::string("unsupported input type ") + dtype_name(t));
  }
  if (!x.rank_known) {
    ctx.set_output(0, DType::kFloat32, Shape::Unranked());
    return Status::Ok();
  }
  if (x.rank() == 1) {
    ctx.set_output(0, DType::kFloat32, Shape(std::vector<Dim>{Dim(c.out_size)}));
  } else if (x.rank() == 2) {
    ctx.set_output(0, DType::kFloat32, Shape(std::vector<Dim>{x[0], Dim(c.out_size)}));
  } else {
    return ctx.error("input must be 1-D or 2-D, got " + x.str());
  }
  return Status::Ok();
}

class TfIdfKernel final : public Kernel {
 public:
  explicit TfIdfKernel(TfIdfConfig c) : c_(std::move(c)) {}

  Status run(KernelContext& ctx) const override {
    const Tensor* x = ctx.input(0);
    if (!x) return ctx.error("missing input");
    std::vector<int64_t> ids(static_cast<size_t>(x->numel()));
    for (int64_t i = 0; i < x->numel(); ++i) ids[static_cast<size_t>(i)] = x->as_int64(i);
    const int64_t rows = x->rank() == 2 ? x->dim(0) : 1;
    const int64_t len = x->rank() == 2 ? x->dim(1) : x->numel();
    float* out = ctx.output(0)->data<float>();
    std::fill_n(out, ctx.output(0)->numel(), 0.0f);
    std::vector<int64_t> gram;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t* row = ids.data() + r * len;
      float* orow = out + r * c_.out_size;
      std::vector<float> counts(static_cast<size_t>(c_.out_size), 0.0f);
      auto count = [&](const std::vector<int64_t>& g) {
        auto it = c_.columns.find(g);
        if (it != c_.columns.end()) counts[static_cast<size_t>(it->second)] += 1.0f;
      };
      if (c_.min_gram == 1) {
        for (int64_t i = 0; i < len; ++i) count({row[i]});
      }
      // Only n-grams that fit in the row: n <= len, and (n - 1) * (s + 1) < len (attributes may be near 2^63).
      for (int64_t n = std::max<int64_t>(2, c_.min_gram); n <= std::min(c_.max_gram, len); ++n) {
        const int64_t max_skip = std::min(c_.max_skip, (len - 1) / (n - 1) - 1);
        for (int64_t s = 0; s <= max_skip; ++s) {
          const int64_t step = s + 1;
          for (int64_t i = 0; i + (n - 1) * step < len; ++i) {
            gram.clear();
            for (int64_t k = 0; k < n; ++k) gram.push_back(row[i + k * step]);
            count(gram);
          }
        }
      }
      // Weights are per n-gram number; map them onto columns.
      std::vector<float> col_weight(static_cast<size_t>(c_.out_size), 1.0f);
      if (!c_.weights.empty()) {
        for (const auto& [g, col] : c_.columns) {
          const int64_t num = c_.number.at(g);
          if (num < static_cast<int64_t>(c_.weights.size())) col_weight[static_cast<size_t>(col)] = c_.weights[static_cast<size_t>(num)];
        }
      }
      for (int64_t j = 0; j < c_.out_size; ++j) {
        const float cnt = counts[static_cast<size_t>(j)], w = col_weight[static_cast<size_t>(j)];
        switch (c_.mode) {
          case TfIdfMode::kTF: orow[j] = cnt; break;
          case TfIdfMode::kIDF: orow[j] = cnt > 0 ? w : 0.0f; break;
          case TfIdfMode::kTFIDF: orow[j] = cnt * w; break;
        }
      }
    }
    return Status::Ok();
  }

 private:
  TfIdfConfig c_;
};

Expected<std::unique_ptr<Kernel>> create_tfidf(const KernelInit& init) {
  TfIdfConfig c;
  TSR_ASSIGN_OR_RETURN(c, parse_config(init.node));
  return std::unique_ptr<Kernel>(std::make_unique<TfIdfKernel>(std::move(c)));
}

}  // namespace

void register_tfidf(OpRegistry& reg) {
  reg.add(OpSchema{"TfIdfVectorizer", "", tfidf_infer, create_tfidf, nullptr, {}});
}

}  // namespace tessera
