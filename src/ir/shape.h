// Shapes. A Dim is either a known non-negative size or symbolic (a named
// dimension such as "batch", or anonymous when nothing is known). Concrete
// run-time shapes are plain `Dims`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

using Dims = std::vector<int64_t>;

struct Dim {
  int64_t value = -1;   // >= 0 when known
  std::string symbol;   // name of a symbolic dim; empty = unknown

  Dim() = default;
  Dim(int64_t v) : value(v) {}  // NOLINT: implicit from a number is intended
  static Dim Symbol(std::string s) {
    Dim d;
    d.symbol = std::move(s);
    return d;
  }
  bool known() const { return value >= 0; }
  bool operator==(const Dim& o) const {
    return known() ? value == o.value : (!o.known() && !symbol.empty() && symbol == o.symbol);
  }
  bool operator!=(const Dim& o) const { return !(*this == o); }
  std::string str() const;
};

// A possibly unranked shape.
struct Shape {
  bool rank_known = false;
  std::vector<Dim> dims;

  Shape() = default;
  explicit Shape(std::vector<Dim> d) : rank_known(true), dims(std::move(d)) {}
  static Shape FromDims(const Dims& d);
  static Shape Unranked() { return Shape(); }
  static Shape Unknown(int rank) { return Shape(std::vector<Dim>(static_cast<size_t>(rank))); }

  int rank() const { return static_cast<int>(dims.size()); }
  bool fully_known() const;          // ranked and every dim known
  Dims concrete() const;             // only valid when fully_known()
  int64_t numel_or(int64_t unknown) const;  // product of dims, `unknown` if any dim unknown
  const Dim& operator[](int i) const { return dims[static_cast<size_t>(i)]; }
  Dim& operator[](int i) { return dims[static_cast<size_t>(i)]; }
  std::string str() const;           // "[1,3,224,224]", "[batch,?,768]", "<unranked>"
};

// Product of the dims, INT64_MAX when it overflows 64 bits (so that no caller sees a wrapped count).
int64_t numel(const Dims& d);
// The product in *out; false when it overflows 64 bits or a dim is negative.
bool checked_numel(const Dims& d, int64_t* out);
// Largest tensor Tessera makes: 2^62 bytes. A shape beyond it is an error, never a wrapped size.
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 62;
// "" when dims of elements of `elem_size` bytes fit kMaxTensorBytes; else why not, for a message that says
// "shape [..] " before it ("has more elements than a 64-bit count holds", "needs more than 2^62 bytes").
std::string tensor_size_problem(const Dims& d, size_t elem_size);
std::string dims_str(const Dims& d);

// Normalises a possibly negative axis for the given rank; returns -1 if out of
// range.
int normalize_axis(int64_t axis, int rank);

// Numpy multidirectional broadcasting of two shapes. Returns false when the
// shapes are incompatible (known dims that differ and are not 1).
bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out);
bool broadcast_dims(const Dims& a, const Dims& b, Dims* out);

}  // namespace tessera
