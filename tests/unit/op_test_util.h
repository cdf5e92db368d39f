// Helpers shared by the single-operator unit tests (tests/unit/ops_*_test.cc):
// setting node attributes and comparing a tensor against reference values.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace tessera::testutil {

inline Attribute int_attr(int64_t v) { return Attribute::Int(v); }
inline Attribute ints_attr(std::vector<int64_t> v) { return Attribute::Ints(std::move(v)); }
inline Attribute str_attr(std::string s) { return Attribute::String(std::move(s)); }

// Chainable attribute setters for a single-node test builder. Derived has a
// public `Node n`; e.g. struct NodeBuilder : AttrSetters<NodeBuilder> { Node n; ... }.
template <typename Derived>
struct AttrSetters {
  Derived& i(const std::string& name, int64_t v) { return set(name, int_attr(v)); }
  Derived& ints(const std::string& name, std::vector<int64_t> v) { return set(name, ints_attr(std::move(v))); }
  Derived& f(const std::string& name, float v) {
    Attribute a;
    a.kind = Attribute::Kind::kFloat;
    a.f = v;
    return set(name, std::move(a));
  }
  Derived& fs(const std::string& name, std::vector<float> v) {
    Attribute a;
    a.kind = Attribute::Kind::kFloats;
    a.floats = std::move(v);
    return set(name, std::move(a));
  }
  Derived& s(const std::string& name, const std::string& v) { return set(name, str_attr(v)); }
  Derived& ss(const std::string& name, std::vector<std::string> v) {
    Attribute a;
    a.kind = Attribute::Kind::kStrings;
    a.strings = std::move(v);
    return set(name, std::move(a));
  }
  Derived& t(const std::string& name, Tensor v) {
    Attribute a;
    a.kind = Attribute::Kind::kTensor;
    a.t = std::move(v);
    return set(name, std::move(a));
  }

 private:
  Derived& set(const std::string& name, Attribute a) {
    auto& self = static_cast<Derived&>(*this);
    self.n.attrs[name] = std::move(a);
    return self;
  }
};

inline void set_int(Node& n, const std::string& name, int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::kInt;
  a.i = v;
  n.attrs[name] = a;
}

inline void set_ints(Node& n, const std::string& name, std::vector<int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::kInts;
  a.ints = std::move(v);
  n.attrs[name] = a;
}

inline void set_float(Node& n, const std::string& name, float v) {
  Attribute a;
  a.kind = Attribute::Kind::kFloat;
  a.f = v;
  n.attrs[name] = a;
}

inline void set_string(Node& n, const std::string& name, const std::string& v) {
  Attribute a;
  a.kind = Attribute::Kind::kString;
  a.s = v;
  n.attrs[name] = a;
}

// A node named "<op>_<first output>" (the control-flow tests build graphs of them).
inline Node graph_node(std::string op, std::vector<std::string> in, std::vector<std::string> out) {
  Node n;
  n.name = op + "_" + out[0];
  n.op_type = std::move(op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

inline void set_graph(Node& n, const std::string& name, Graph g) {
  Attribute a;
  a.kind = Attribute::Kind::kGraph;
  a.g = std::make_shared<Graph>(std::move(g));
  n.attrs[name] = a;
}

// Tensor construction shorthands and value extraction.
inline Tensor f32(std::vector<float> v, Dims d) { return Tensor::FromVector(v, std::move(d)); }
inline Tensor i64(std::vector<int64_t> v) {
  Dims d{static_cast<int64_t>(v.size())};
  return Tensor::FromVector(v, d);
}
inline Tensor iota_f32(Dims d) {
  std::vector<float> v(static_cast<size_t>(numel(d)));
  std::iota(v.begin(), v.end(), 0.f);
  return f32(v, std::move(d));
}
inline std::vector<double> values(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.as_double(i));
  return v;
}

// n floats drawn uniformly from [-2, 2) with a fixed seed.
inline std::vector<float> random_vec(size_t n, unsigned seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Element i of t must be within tol + 1e-5 * |ref[i]| of ref[i].
inline void expect_close(const Tensor& t, const std::vector<double>& ref, double tol) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(ref.size()));
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_NEAR(t.as_double(static_cast<int64_t>(i)), ref[i], tol + 1e-5 * std::abs(ref[i])) << "at " << i;
  }
}

}  // namespace tessera::testutil
