#include "ir/shape.h"

#include <limits>

#include <algorithm>

namespace tessera {

std::string Dim::str() const {
  if (known()) return std::to_string(value);
  return symbol.empty() ? "?" : symbol;
}

Shape Shape::FromDims(const Dims& d) {
  Shape s;
  s.rank_known = true;
  s.dims.reserve(d.size());
  for (int64_t v : d) s.dims.emplace_back(v);
  return s;
}

bool Shape::fully_known() const {
  if (!rank_known) return false;
  return std::all_of(dims.begin(), dims.end(), [](const Dim& d) { return d.known(); });
}

Dims Shape::concrete() const {
  Dims d;
  d.reserve(dims.size());
  for (const Dim& x : dims) d.push_back(x.value);
  return d;
}

int64_t Shape::numel_or(int64_t unknown) const {
  if (!fully_known()) return unknown;
  int64_t n = 1;
  for (const Dim& d : dims) n *= d.value;
  return n;
}

std::string Shape::str() const {
  if (!rank_known) return "<unranked>";
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    s += dims[i].str();
  }
  return s + "]";
}

bool checked_numel(const Dims& d, int64_t* out) {
  int64_t n = 1;
  for (int64_t v : d) {
    if (v < 0 || __builtin_mul_overflow(n, v, &n)) return false;
  }
  *out = n;
  return true;
}

int64_t numel(const Dims& d) {
  int64_t n = 0;
  return checked_numel(d, &n) ? n : std::numeric_limits<int64_t>::max();
}

std::string tensor_size_problem(const Dims& d, size_t elem_size) {
  int64_t n = 0;
  if (!checked_numel(d, &n)) return "has more elements than a 64-bit count holds";
  if (elem_size > 0 && n > kMaxTensorBytes / static_cast<int64_t>(elem_size)) return "needs more than 2^62 bytes";
  return "";
}

std::string dims_str(const Dims& d) { return Shape::FromDims(d).str(); }

int normalize_axis(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) return -1;
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out) {
  if (!a.rank_known || !b.rank_known) {
    *out = Shape::Unranked();
    return true;
  }
  int r = std::max(a.rank(), b.rank());
  std::vector<Dim> dims(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) {
    int ia = a.rank() - r + i, ib = b.rank() - r + i;
    Dim da = ia >= 0 ? a[ia] : Dim(1);
    Dim db = ib >= 0 ? b[ib] : Dim(1);
    Dim& o = dims[static_cast<size_t>(i)];
    if (da.known() && db.known()) {
      if (da.value == db.value || db.value == 1) o = da;
      else if (da.value == 1) o = db;
      else return false;
    } else if (da.known()) {
      o = da.value == 1 ? db : da;
    } else if (db.known()) {
      o = db.value == 1 ? da : db;
    } else {
      o = da == db ? da : Dim();
    }
  }
  *out = Shape(std::move(dims));
  return true;
}

bool broadcast_dims(const Dims& a, const Dims& b, Dims* out) {
  size_t r = std::max(a.size(), b.size());
  Dims d(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i + a.size() >= r ? a[i + a.size() - r] : 1;
    int64_t db = i + b.size() >= r ? b[i + b.size() - r] : 1;
    if (da == db || db == 1) d[i] = da;
    else if (da == 1) d[i] = db;
    else return false;
  }
  *out = std::move(d);
  return true;
}

}  // namespace tessera
