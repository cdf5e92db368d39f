// Einsum.
//
// Input: an equation such as "bij,bjk->bik", "...ii->...i" or "i,i" (implicit
// output) and one tensor per term. Output: the contraction.
//
// Method: the equation is parsed against the input ranks into one label per
// input dimension (letters keep their ASCII order; the dimensions covered by
// "..." get labels after all letters, right-aligned across inputs so they
// broadcast) and the output labels (explicit, or for the implicit form the
// "..." labels followed by the letters used exactly once, in ASCII order).
// Two inputs without repeated or single-input summed labels are contracted as
// a batched matrix product: both are permuted to [batch, M, K] and
// [batch, K, N] and multiplied. Everything else (diagonals, traces, sums,
// broadcasting, three or more inputs) runs a generic loop: for every output
// element, the sum over the reduced labels of the product of the inputs,
// addressed through per-label strides (a label repeated within one input adds
// its strides, which walks the diagonal).
#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <vector>

#include "ops/misc_ops.h"
#include "ops/norm_util.h"

namespace tessera {
namespace {

constexpr int kLetters = 52;  // 'A'-'Z' then 'a'-'z'

struct EinsumPlan {
  std::vector<std::vector<int>> in_labels;  // one label per input dimension
  std::vector<int> out_labels;
  int num_labels = 0;  // kLetters + number of "..." dimensions
};

// A term as parsed from the text: letters as label ids, kEllipsis for "...".
constexpr int kEllipsis = -1;

Expected<std::vector<int>> parse_term(const std::string& term, const std::string& eq) {
  std::vector<int> out;
  bool seen_ellipsis = false;
  for (size_t i = 0; i < term.size(); ++i) {
    char ch = term[i];
    if (ch == '.') {
      if (seen_ellipsis || term.compare(i, 3, "...") != 0) {
        return InvalidModel("Einsum: malformed ellipsis in equation '" + eq + "'");
      }
      seen_ellipsis = true;
      out.push_back(kEllipsis);
      i += 2;
    } else if (ch >= 'A' && ch <= 'Z') {
      out.push_back(ch - 'A');
    } else if (ch >= 'a' && ch <= 'z') {
      out.push_back(26 + (ch - 'a'));
    } else {
      return InvalidModel(std::string("Einsum: invalid character '") + ch + "' in equation '" + eq + "'");
    }
  }
  return out;
}

// ranks[i] < 0 means unknown; then the result leaves that input's labels
// empty and `complete` false when the ellipsis width cannot be resolved.
Expected<EinsumPlan> parse_equation(const std::string& raw, const std::vector<int>& ranks, bool* complete) {
  *complete = true;
  std::string eq;
  for (char c : raw) {
    if (!std::isspace(static_cast<unsigned char>(c))) eq.push_back(c);
  }
  std::string lhs = eq, rhs;
  const size_t arrow = eq.find("->");
  const bool explicit_out = arrow != std::string::npos;
  if (explicit_out) {
    lhs = eq.substr(0, arrow);
    rhs = eq.substr(arrow + 2);
  }
  std::vector<std::vector<int>> terms;
  size_t start = 0;
  for (;;) {
    size_t comma = lhs.find(',', start);
    std::vector<int> t;
    TSR_ASSIGN_OR_RETURN(t, parse_term(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start), raw));
    terms.push_back(std::move(t));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != ranks.size()) {
    return InvalidModel("Einsum: equation '" + raw + "' has " + std::to_string(terms.size()) + " terms for " +
                        std::to_string(ranks.size()) + " inputs");
  }
  // Width of "..." per input, and overall.
  int ell = 0;
  std::vector<int> widths(terms.size(), 0);
  for (size_t i = 0; i < terms.size(); ++i) {
    const bool has_ell = std::count(terms[i].begin(), terms[i].end(), kEllipsis) > 0;
    const int letters = static_cast<int>(terms[i].size()) - (has_ell ? 1 : 0);
    if (ranks[i] < 0) {
      if (has_ell) *complete = false;
      continue;
    }
    if (has_ell) {
      if (ranks[i] < letters) return InvalidModel("Einsum: input " + std::to_string(i) + " has fewer dimensions than '" + raw + "' names");
      widths[i] = ranks[i] - letters;
      ell = std::max(ell, widths[i]);
    } else if (ranks[i] != letters) {
      return InvalidModel("Einsum: input " + std::to_string(i) + " has rank " + std::to_string(ranks[i]) +
                          " but equation '" + raw + "' gives it " + std::to_string(letters) + " labels");
    }
  }
  EinsumPlan plan;
  plan.num_labels = kLetters + ell;
  plan.in_labels.resize(terms.size());
  std::array<int, kLetters> count{};
  bool any_ellipsis = false;
  for (size_t i = 0; i < terms.size(); ++i) {
    for (int l : terms[i]) {
      if (l == kEllipsis) {
        any_ellipsis = true;
        for (int j = 0; j < widths[i]; ++j) plan.in_labels[i].push_back(kLetters + ell - widths[i] + j);
      } else {
        ++count[static_cast<size_t>(l)];
        plan.in_labels[i].push_back(l);
      }
    }
  }
  if (explicit_out) {
    std::vector<int> out;
    TSR_ASSIGN_OR_RETURN(out, parse_term(rhs, raw));
    for (int l : out) {
      if (l == kEllipsis) {
        for (int j = 0; j < ell; ++j) plan.out_labels.push_back(kLetters + j);
        continue;
      }
      if (count[static_cast<size_t>(l)] == 0) {
        return InvalidModel("Einsum: output label in '" + raw + "' does not appear in any input");
      }
      if (std::count(plan.out_labels.begin(), plan.out_labels.end(), l) > 0) {
        return InvalidModel("Einsum: output label repeated in '" + raw + "'");
      }
      plan.out_labels.push_back(l);
    }
  } else {
    if (any_ellipsis) {
      for (int j = 0; j < ell; ++j) plan.out_labels.push_back(kLetters + j);
    }
    for (int l = 0; l < kLetters; ++l) {
      if (count[static_cast<size_t>(l)] == 1) plan.out_labels.push_back(l);
    }
  }
  return plan;
}

Status einsum_infer(InferContext& ctx) {
  const std::string eq = ctx.node().attr_string("equation", "");
  std::vector<int> ranks;
  DType dt = DType::kUndefined;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Shape& s = ctx.in_shape(i);
    ranks.push_back(s.rank_known ? s.rank() : -1);
    if (dt == DType::kUndefined) dt = ctx.in_dtype(i);
  }
  if (dt == DType::kBool || dt == DType::kString) return ctx.error(std::string("unsupported type ") + dtype_name(dt));
  bool complete = true;
  EinsumPlan plan;
  auto parsed = parse_equation(eq, ranks, &complete);
  if (!parsed.ok()) return ctx.error(parsed.status().message());
  plan = std::move(parsed).value();
  if (!complete) {
    ctx.set_output(0, dt, Shape::Unranked());
    return Status::Ok();
  }
  // Size of each label: a known dim other than 1 wins; 1 if every
  // occurrence is a known 1; else unknown (a symbol is kept).
  std::vector<Dim> size(static_cast<size_t>(plan.num_labels));
  std::vector<bool> all_one(static_cast<size_t>(plan.num_labels), true);
  std::vector<bool> fixed(static_cast<size_t>(plan.num_labels), false);
  for (size_t i = 0; i < plan.in_labels.size(); ++i) {
    const Shape& s = ctx.in_shape(static_cast<int>(i));
    if (!s.rank_known) continue;
    for (size_t k = 0; k < plan.in_labels[i].size(); ++k) {
      const size_t l = static_cast<size_t>(plan.in_labels[i][k]);
      const Dim& d = s[static_cast<int>(k)];
      if (d.known() && d.value == 1) continue;
      all_one[l] = false;
      if (d.known()) {
        if (fixed[l] && size[l].value != d.value) {
          return ctx.error("label dimension mismatch: " + std::to_string(size[l].value) + " vs " + std::to_string(d.value));
        }
        size[l] = d;
        fixed[l] = true;
      } else if (!fixed[l] && size[l].symbol.empty()) {
        size[l] = d;
      }
    }
  }
  std::vector<Dim> out;
  for (int l : plan.out_labels) {
    const size_t li = static_cast<size_t>(l);
    out.push_back(all_one[li] ? Dim(1) : size[li]);
  }
  ctx.set_output(0, dt, Shape(out));
  return Status::Ok();
}

// Per-label strides of an input (0 where the label is absent or broadcast).
std::vector<int64_t> label_strides(const std::vector<int>& labels, const Dims& dims, int num_labels) {
  std::vector<int64_t> s(static_cast<size_t>(num_labels), 0);
  std::vector<int64_t> cs = contiguous_strides(dims);
  for (size_t k = 0; k < labels.size(); ++k) {
    if (dims[k] != 1) s[static_cast<size_t>(labels[k])] += cs[k];
  }
  return s;
}

template <class T>
using einsum_acc_t = std::conditional_t<std::is_integral_v<T>, T, normk::acc_t<T>>;

// Generic contraction loop.
template <class T>
void einsum_generic(const EinsumPlan& plan, const std::vector<const Tensor*>& in, const std::vector<int64_t>& size,
                    Tensor* out, Parallel& pool) {
  using A = einsum_acc_t<T>;
  const size_t nin = in.size();
  std::vector<bool> is_out(static_cast<size_t>(plan.num_labels), false);
  for (int l : plan.out_labels) is_out[static_cast<size_t>(l)] = true;
  std::vector<int> red;
  for (int l = 0; l < plan.num_labels; ++l) {
    if (!is_out[static_cast<size_t>(l)] && size[static_cast<size_t>(l)] > 0) {
      bool used = false;
      for (const auto& labels : plan.in_labels) used |= std::count(labels.begin(), labels.end(), l) > 0;
      if (used) red.push_back(l);
    }
  }
  std::vector<std::vector<int64_t>> strides(nin);
  for (size_t i = 0; i < nin; ++i) strides[i] = label_strides(plan.in_labels[i], in[i]->dims(), plan.num_labels);
  const size_t no = plan.out_labels.size(), nr = red.size();
  // Output and reduction strides per input, innermost label last.
  std::vector<int64_t> osz(no), rsz(nr);
  std::vector<std::vector<int64_t>> ost(nin, std::vector<int64_t>(no)), rst(nin, std::vector<int64_t>(nr));
  for (size_t k = 0; k < no; ++k) {
    osz[k] = size[static_cast<size_t>(plan.out_labels[k])];
    for (size_t i = 0; i < nin; ++i) ost[i][k] = strides[i][static_cast<size_t>(plan.out_labels[k])];
  }
  int64_t rtotal = 1;
  for (size_t k = 0; k < nr; ++k) {
    rsz[k] = size[static_cast<size_t>(red[k])];
    rtotal *= rsz[k];
    for (size_t i = 0; i < nin; ++i) rst[i][k] = strides[i][static_cast<size_t>(red[k])];
  }
  std::vector<const T*> ptr(nin);
  for (size_t i = 0; i < nin; ++i) ptr[i] = in[i]->data<T>();
  T* op = out->data<T>();
  pool.parallel_for(out->numel(), normk::row_grain(rtotal * static_cast<int64_t>(nin)), [&](int64_t e0, int64_t e1) {
    std::vector<int64_t> oidx(no), ridx(nr), base(nin), off(nin);
    // Start odometer at e0.
    int64_t rem = e0;
    for (size_t k = no; k-- > 0;) {
      oidx[k] = rem % osz[k];
      rem /= osz[k];
    }
    for (int64_t e = e0; e < e1; ++e) {
      for (size_t i = 0; i < nin; ++i) {
        base[i] = 0;
        for (size_t k = 0; k < no; ++k) base[i] += oidx[k] * ost[i][k];
      }
      A acc = A(0);
      std::fill(ridx.begin(), ridx.end(), 0);
      off = base;
      for (int64_t r = 0; r < rtotal; ++r) {
        A p = static_cast<A>(ptr[0][off[0]]);
        for (size_t i = 1; i < nin; ++i) p *= static_cast<A>(ptr[i][off[i]]);
        acc += p;
        for (size_t k = nr; k-- > 0;) {
          for (size_t i = 0; i < nin; ++i) off[i] += rst[i][k];
          if (++ridx[k] < rsz[k]) break;
          for (size_t i = 0; i < nin; ++i) off[i] -= rst[i][k] * rsz[k];
          ridx[k] = 0;
        }
      }
      op[e] = static_cast<T>(acc);
      for (size_t k = no; k-- > 0;) {
        if (++oidx[k] < osz[k]) break;
        oidx[k] = 0;
      }
    }
  });
}

// Copies `src` (dims, one label per dim) into `dst` ordered by `order`
// (labels), converting to A.
template <class T, class A>
void permute_to(const T* src, const std::vector<int>& labels, const Dims& dims, const std::vector<int>& order,
                std::vector<A>& dst) {
  const size_t r = order.size();
  std::vector<int64_t> cs = contiguous_strides(dims), st(r), sz(r);
  for (size_t k = 0; k < r; ++k) {
    size_t pos = static_cast<size_t>(std::find(labels.begin(), labels.end(), order[k]) - labels.begin());
    st[k] = cs[pos];
    sz[k] = dims[pos];
  }
  const int64_t total = numel(dims);
  dst.resize(static_cast<size_t>(total));
  std::vector<int64_t> idx(r, 0);
  int64_t off = 0;
  for (int64_t e = 0; e < total; ++e) {
    dst[static_cast<size_t>(e)] = static_cast<A>(src[off]);
    for (size_t k = r; k-- > 0;) {
      off += st[k];
      if (++idx[k] < sz[k]) break;
      off -= st[k] * sz[k];
      idx[k] = 0;
    }
  }
}

// Batched matrix product path; returns false when the plan does not fit it.
template <class T>
bool einsum_matmul(const EinsumPlan& plan, const Tensor& a, const Tensor& b, const std::vector<int64_t>& size,
                   Tensor* out, Parallel& pool) {
  using A = einsum_acc_t<T>;
  const auto& la = plan.in_labels[0];
  const auto& lb = plan.in_labels[1];
  auto in = [](const std::vector<int>& v, int l) { return std::find(v.begin(), v.end(), l) != v.end(); };
  for (const auto* labels : {&la, &lb}) {
    for (size_t k = 0; k < labels->size(); ++k) {
      if (std::count(labels->begin(), labels->end(), (*labels)[k]) > 1) return false;
    }
  }
  for (size_t k = 0; k < la.size(); ++k) {
    if (a.dim(static_cast<int>(k)) != size[static_cast<size_t>(la[k])]) return false;
  }
  for (size_t k = 0; k < lb.size(); ++k) {
    if (b.dim(static_cast<int>(k)) != size[static_cast<size_t>(lb[k])]) return false;
  }
  std::vector<int> batch, ml, nl, kl;
  for (int l : plan.out_labels) {
    const bool ia = in(la, l), ib = in(lb, l);
    (ia && ib ? batch : ia ? ml : nl).push_back(l);
  }
  for (int l : la) {
    if (in(plan.out_labels, l)) continue;
    if (!in(lb, l)) return false;  // summed over one input only
    kl.push_back(l);
  }
  for (int l : lb) {
    if (!in(plan.out_labels, l) && !in(la, l)) return false;
  }
  auto prod_of = [&](const std::vector<int>& ls) {
    int64_t p = 1;
    for (int l : ls) p *= size[static_cast<size_t>(l)];
    return p;
  };
  const int64_t nb = prod_of(batch), m = prod_of(ml), n = prod_of(nl), kk = prod_of(kl);
  std::vector<int> a_order = batch, b_order = batch, c_labels = batch;
  a_order.insert(a_order.end(), ml.begin(), ml.end());
  a_order.insert(a_order.end(), kl.begin(), kl.end());
  b_order.insert(b_order.end(), kl.begin(), kl.end());
  b_order.insert(b_order.end(), nl.begin(), nl.end());
  c_labels.insert(c_labels.end(), ml.begin(), ml.end());
  c_labels.insert(c_labels.end(), nl.begin(), nl.end());
  std::vector<A> ap, bp, cp(static_cast<size_t>(nb * m * n), A(0));
  permute_to<T, A>(a.data<T>(), la, a.dims(), a_order, ap);
  permute_to<T, A>(b.data<T>(), lb, b.dims(), b_order, bp);
  pool.parallel_for(nb * m, normk::row_grain(kk * n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t bi = r / std::max<int64_t>(1, m);
      const A* arow = ap.data() + r * kk;
      const A* bmat = bp.data() + bi * kk * n;
      A* crow = cp.data() + r * n;
      for (int64_t p = 0; p < kk; ++p) {
        const A av = arow[p];
        const A* brow = bmat + p * n;
        for (int64_t j = 0; j < n; ++j) crow[j] += av * brow[j];
      }
    }
  });
  Dims c_dims;
  for (int l : c_labels) c_dims.push_back(size[static_cast<size_t>(l)]);
  std::vector<T> res;
  permute_to<A, T>(cp.data(), c_labels, c_dims, plan.out_labels, res);
  std::copy(res.begin(), res.end(), out->data<T>());
  return true;
}

Status einsum_run(KernelContext& ctx) {
  std::vector<const Tensor*> in;
  std::vector<int> ranks;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.input(i)) return ctx.error("missing input " + std::to_string(i));
    in.push_back(ctx.input(i));
    ranks.push_back(ctx.input(i)->rank());
    if (ctx.input(i)->dtype() != in[0]->dtype()) return ctx.error("inputs must share one type");
  }
  if (in.empty()) return ctx.error("needs at least one input");
  bool complete = true;
  auto parsed = parse_equation(ctx.node().attr_string("equation", ""), ranks, &complete);
  if (!parsed.ok()) return ctx.error(parsed.status().message());
  const EinsumPlan& plan = parsed.value();
  std::vector<int64_t> size(static_cast<size_t>(plan.num_labels), 1);
  for (size_t i = 0; i < in.size(); ++i) {
    for (size_t k = 0; k < plan.in_labels[i].size(); ++k) {
      const size_t l = static_cast<size_t>(plan.in_labels[i][k]);
      const int64_t d = in[i]->dim(static_cast<int>(k));
      if (d == 1) continue;
      if (size[l] != 1 && size[l] != d) return ctx.error("label dimension mismatch");
      size[l] = d;
    }
  }
  // A label of size 0 somewhere in an input: the output (if any) is zeros.
  for (const Tensor* t : in) {
    if (t->numel() == 0) {
      std::fill_n(static_cast<char*>(ctx.output(0)->raw()), ctx.output(0)->nbytes(), 0);
      return Status::Ok();
    }
  }
  Tensor* out = ctx.output(0);
  DType dt = in[0]->dtype();
  if (dt == DType::kBool || dt == DType::kString) return ctx.error("unsupported type");
  visit_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      if (in.size() == 2 && einsum_matmul<T>(plan, *in[0], *in[1], size, out, ctx.pool())) return;
      einsum_generic<T>(plan, in, size, out, ctx.pool());
    }
  });
  return Status::Ok();
}

}  // namespace

void register_einsum(OpRegistry& reg) {
  reg.add(OpSchema{"Einsum", "", einsum_infer, nullptr, einsum_run, {}});
}

}  // namespace tessera
