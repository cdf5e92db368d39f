#include "dnnl_patterns.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace tessera_dnnl {

using tessera_plugin::attr_int;
using tessera_plugin::attr_ints;
using tessera_plugin::ModelView;

namespace {

class Matcher {
 public:
  explicit Matcher(const ModelView& m) : m_(m) {
    for (int i = 0; i < m.num_nodes(); ++i) {
      for (const auto& o : m.node(i).output()) producer_[o] = i;
    }
  }

  std::vector<Pattern> run() {
    std::vector<Pattern> out;
    std::set<int> taken;
    for (int i = 0; i < m_.num_nodes(); ++i) {
      Pattern p;
      const bool hit = (is(i, "Erf") && gelu(i, &p)) || (is(i, "ReduceMean") && layer_norm(i, &p)) ||
                       ((is(i, "ConvInteger") || is(i, "MatMulInteger")) && dyn_product(i, &p));
      if (!hit) continue;
      std::sort(p.nodes.begin(), p.nodes.end());
      if (std::any_of(p.nodes.begin(), p.nodes.end(), [&](int n) { return taken.count(n); })) continue;
      taken.insert(p.nodes.begin(), p.nodes.end());
      out.push_back(std::move(p));
    }
    std::sort(out.begin(), out.end(), [](const Pattern& a, const Pattern& b) { return a.nodes.back() < b.nodes.back(); });
    return out;
  }

 private:
  bool is(int i, const char* op) const {
    const auto& n = m_.node(i);
    return n.op_type() == op && (n.domain().empty() || n.domain() == "ai.onnx");
  }

  // The only node reading `v` (which must not leave the region), or -1.
  int sole_reader(const std::string& v) const {
    if (m_.is_graph_output(v)) return -1;
    std::set<int> readers(m_.consumers(v).begin(), m_.consumers(v).end());
    return readers.size() == 1 ? *readers.begin() : -1;
  }

  bool scalar(const std::string& name, float* v) const {
    const onnx::TensorProto* t = m_.initializer(name);
    if (!t) return false;
    try {
      std::vector<float> f = tessera_plugin::initializer_floats(*t);
      if (f.size() != 1) return false;
      *v = f[0];
      return true;
    } catch (const tessera_plugin::Failure&) {
      return false;
    }
  }

  static bool near(float a, double b) { return std::fabs(a - b) <= 1e-6 * std::fabs(b); }

  // Binary node `i` of op `op` with `v` as one operand: the other one, or "".
  std::string other(int i, const char* op, const std::string& v, bool commutes) const {
    if (i < 0 || !is(i, op) || m_.node(i).input_size() != 2) return "";
    const auto& n = m_.node(i);
    if (n.input(0) == v) return n.input(1);
    return commutes && n.input(1) == v ? n.input(0) : "";
  }

  // x * 0.5 * (1 + Erf(x / sqrt(2))), anchored at the Erf.
  bool gelu(int erf, Pattern* p) const {
    const auto& e = m_.node(erf);
    if (e.input_size() != 1 || e.output_size() != 1) return false;
    auto pit = producer_.find(e.input(0));
    if (pit == producer_.end() || sole_reader(e.input(0)) != erf) return false;
    const int d = pit->second;
    const auto& dn = m_.node(d);
    float c;
    std::string x;
    if (is(d, "Div") && scalar(dn.input(1), &c) && near(c, std::sqrt(2.0))) {
      x = dn.input(0);
    } else if (is(d, "Mul") && dn.input_size() == 2) {
      for (int k = 0; k < 2 && x.empty(); ++k) {
        if (scalar(dn.input(1 - k), &c) && near(c, std::sqrt(0.5))) x = dn.input(k);
      }
    }
    if (x.empty()) return false;
    const int add = sole_reader(e.output(0));
    float one;
    if (!scalar(other(add, "Add", e.output(0), true), &one) || one != 1.f) return false;
    const std::string& a = m_.node(add).output(0);
    const int m1 = sole_reader(a);
    const std::string f = other(m1, "Mul", a, true);
    if (f.empty()) return false;
    float half;
    if (f == x) {  // (x * (1 + erf)) * 0.5
      const int m2 = sole_reader(m_.node(m1).output(0));
      if (!scalar(other(m2, "Mul", m_.node(m1).output(0), true), &half) || half != 0.5f) return false;
      p->nodes = {d, erf, add, m1, m2};
      p->y = m_.node(m2).output(0);
    } else {  // (x * 0.5) * (1 + erf)
      auto hit = producer_.find(f);
      if (hit == producer_.end() || sole_reader(f) != m1) return false;
      if (!scalar(other(hit->second, "Mul", x, true), &half) || half != 0.5f) return false;
      p->nodes = {hit->second, d, erf, add, m1};
      p->y = m_.node(m1).output(0);
    }
    p->kind = Pattern::Kind::kGelu;
    p->x = x;
    return float_value(x);
  }

  bool float_value(const std::string& v) const {
    const tessera_plugin::ValueType& t = m_.type(v);
    return t.dtype == 1 && t.is_static() && t.numel() > 0 && !m_.is_initializer(v);
  }

  // Trailing axes a ReduceMean with keepdims averages over (0 if not trailing).
  int64_t trailing_axes(int r, size_t rank) const {
    const auto& n = m_.node(r);
    if (attr_int(n, "keepdims", 1) != 1) return 0;
    std::vector<int64_t> axes = attr_ints(n, "axes");
    if (n.input_size() > 1 && !n.input(1).empty()) {
      const onnx::TensorProto* t = m_.initializer(n.input(1));
      if (!t) return 0;
      try {
        axes = tessera_plugin::initializer_ints(*t);
      } catch (const tessera_plugin::Failure&) {
        return 0;
      }
    }
    std::set<int64_t> s;
    for (int64_t a : axes) s.insert(a < 0 ? a + static_cast<int64_t>(rank) : a);
    if (s.empty() || *s.begin() < 0) return 0;
    const auto k = static_cast<int64_t>(s.size());
    return *s.begin() == static_cast<int64_t>(rank) - k && *s.rbegin() == static_cast<int64_t>(rank) - 1 ? k : 0;
  }

  // A constant of `cols` values spanning the normalized axes, or false.
  bool affine(const std::string& name, int64_t cols) const {
    const onnx::TensorProto* t = m_.initializer(name);
    if (!t || t->data_type() != 1) return false;
    int64_t n = 1;
    for (int64_t d : t->dims()) n *= d;
    return n == cols;
  }

  bool layer_norm(int r1, Pattern* p) const {
    const auto& mean = m_.node(r1);
    const std::string x = mean.input(0);
    if (!float_value(x)) return false;
    const tessera_plugin::ValueType& xt = m_.type(x);
    const int64_t k = trailing_axes(r1, xt.dims.size());
    if (k == 0) return false;
    const int64_t cols = tessera_plugin::ValueType{1, true, {xt.dims.end() - k, xt.dims.end()}, ""}.numel();
    const int sub = sole_reader(mean.output(0));
    if (sub < 0 || !is(sub, "Sub") || m_.node(sub).input(0) != x || m_.node(sub).input(1) != mean.output(0)) {
      return false;
    }
    const std::string d = m_.node(sub).output(0);
    std::set<int> readers(m_.consumers(d).begin(), m_.consumers(d).end());
    if (readers.size() != 2 || m_.is_graph_output(d)) return false;
    int sq = -1, div = -1;
    for (int i : readers) {
      float two;
      const auto& n = m_.node(i);
      if ((is(i, "Pow") && n.input(0) == d && scalar(n.input(1), &two) && two == 2.f) ||
          (is(i, "Mul") && n.input_size() == 2 && n.input(0) == d && n.input(1) == d)) {
        sq = i;
      } else if (is(i, "Div") && n.input(0) == d) {
        div = i;
      }
    }
    if (sq < 0 || div < 0) return false;
    const int r2 = sole_reader(m_.node(sq).output(0));
    if (r2 < 0 || !is(r2, "ReduceMean") || trailing_axes(r2, xt.dims.size()) != k) return false;
    const int add = sole_reader(m_.node(r2).output(0));
    float eps;
    if (!scalar(other(add, "Add", m_.node(r2).output(0), true), &eps) || !(eps >= 0.f)) return false;
    const int sqrt = sole_reader(m_.node(add).output(0));
    if (sqrt < 0 || !is(sqrt, "Sqrt") || sole_reader(m_.node(sqrt).output(0)) != div ||
        m_.node(div).input(1) != m_.node(sqrt).output(0)) {
      return false;
    }
    p->nodes = {r1, sub, sq, r2, add, sqrt, div};
    p->y = m_.node(div).output(0);
    const int mul = sole_reader(p->y);
    const std::string gamma = other(mul, "Mul", p->y, true);
    if (!gamma.empty() && affine(gamma, cols)) {
      p->gamma = gamma;
      p->nodes.push_back(mul);
      p->y = m_.node(mul).output(0);
      const int add2 = sole_reader(p->y);
      const std::string beta = other(add2, "Add", p->y, true);
      if (!beta.empty() && affine(beta, cols)) {
        p->beta = beta;
        p->nodes.push_back(add2);
        p->y = m_.node(add2).output(0);
      }
    }
    p->kind = Pattern::Kind::kLayerNorm;
    p->x = x;
    p->axes = k;
    p->epsilon = eps;
    return true;
  }

  // Mul(Cast(ConvInteger(q.y, W, q.zero_point)), Mul(q.scale, w_scale)), anchored at the ConvInteger (or
  // MatMulInteger); q a DynamicQuantizeLinear. The operands' types and constancy are the lowering's to check (it
  // names what is wrong).
  bool dyn_product(int c, Pattern* p) const {
    const auto& conv = m_.node(c);
    if (conv.input_size() < 3 || conv.output_size() != 1) return false;
    auto qit = producer_.find(conv.input(0));
    if (qit == producer_.end() || !is(qit->second, "DynamicQuantizeLinear")) return false;
    const auto& q = m_.node(qit->second);
    if (q.output_size() != 3 || q.output(0) != conv.input(0) || q.output(2) != conv.input(2)) return false;
    const int cast = sole_reader(conv.output(0));
    if (cast < 0 || !is(cast, "Cast") || attr_int(m_.node(cast), "to", 0) != 1) return false;
    const std::string& f = m_.node(cast).output(0);
    const int mul = sole_reader(f);
    const std::string s = other(mul, "Mul", f, true);
    auto sit = producer_.find(s);
    if (s.empty() || sit == producer_.end() || sole_reader(s) != mul) return false;
    const std::string w_scale = other(sit->second, "Mul", q.output(1), true);
    if (w_scale.empty() || !m_.is_initializer(w_scale)) return false;
    p->kind = is(c, "ConvInteger") ? Pattern::Kind::kDynConv : Pattern::Kind::kDynMatMul;
    p->nodes = {sit->second, c, cast, mul};
    p->conv = c;
    p->x = conv.input(0);
    p->y = m_.node(mul).output(0);
    p->w_scale = w_scale;
    return true;
  }

  const ModelView& m_;
  std::map<std::string, int> producer_;
};

}  // namespace

std::vector<Pattern> find_patterns(const ModelView& m) { return Matcher(m).run(); }

}  // namespace tessera_dnnl
