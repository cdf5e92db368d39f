// ai.tessera.QLinearLookup (ops/qlinear_lookup.h): int8 values index the table at v + 128, uint8 at v, the binary
// form at u(X) * 256 + u(X2) with each input's own type; every element follows that on one thread and on a pool, on
// the vector path and the portable one (TESSERA_ISA=avx2); a table, type or shape the contract does not allow is an
// error naming the node, never a crash.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "ops/node_runner.h"
#include "ops/qlinear_add_math.h"
#include "ops/qlinear_lookup.h"
#include "util/thread_pool.h"

namespace tessera {
namespace {

Node lookup_node(bool binary) {
  Node n;
  n.name = "lut";
  n.op_type = "QLinearLookup";
  n.domain = "ai.tessera";
  n.inputs = binary ? std::vector<std::string>{"x", "x2", "table"} : std::vector<std::string>{"x", "table"};
  n.outputs = {"y"};
  return n;
}

Tensor bytes(DType t, Dims dims, const std::vector<int>& v) {
  Tensor x(t, std::move(dims));
  for (size_t i = 0; i < v.size(); ++i) static_cast<uint8_t*>(x.raw())[i] = static_cast<uint8_t>(v[i]);
  return x;
}

// table[k] = (k * mul + add) mod 256, as `t`.
Tensor table(DType t, int64_t n, int mul, int add) {
  Tensor x(t, {n});
  for (int64_t k = 0; k < n; ++k) static_cast<uint8_t*>(x.raw())[k] = static_cast<uint8_t>(k * mul + add);
  return x;
}

uint8_t byte_at(const Tensor& t, int64_t i) { return static_cast<const uint8_t*>(t.raw())[i]; }

TEST(QLinearLookup, Int8IndexesTheTableAtValuePlus128AndUint8AtValue) {
  const Tensor tab = table(DType::kInt8, 256, 3, 1);
  auto y = run_node_once(lookup_node(false), 13, {bytes(DType::kInt8, {2, 2}, {-128, -1, 0, 127}), tab});
  ASSERT_TRUE(y.ok()) << y.status().message();
  ASSERT_EQ((*y)[0].dtype(), DType::kInt8);
  ASSERT_EQ((*y)[0].dims(), (Dims{2, 2}));
  const int want_int8[] = {0, 127, 128, 255};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(byte_at((*y)[0], i), byte_at(tab, want_int8[i])) << i;
  auto z = run_node_once(lookup_node(false), 13, {bytes(DType::kUInt8, {3}, {0, 128, 255}), tab});
  ASSERT_TRUE(z.ok()) << z.status().message();
  const int want_uint8[] = {0, 128, 255};
  for (int i = 0; i < 3; ++i) EXPECT_EQ(byte_at((*z)[0], i), byte_at(tab, want_uint8[i])) << i;
}

TEST(QLinearLookup, BinaryIndexesByBothInputsEachWithItsOwnType) {
  const Tensor tab = table(DType::kUInt8, 65536, 7, 11);
  const Tensor x = bytes(DType::kUInt8, {3}, {0, 5, 255});
  const Tensor x2 = bytes(DType::kInt8, {3}, {-128, 0, 127});
  auto y = run_node_once(lookup_node(true), 13, {x, x2, tab});
  ASSERT_TRUE(y.ok()) << y.status().message();
  ASSERT_EQ((*y)[0].dtype(), DType::kUInt8);
  const int want[] = {0 * 256 + 0, 5 * 256 + 128, 255 * 256 + 255};
  for (int i = 0; i < 3; ++i) EXPECT_EQ(byte_at((*y)[0], i), byte_at(tab, want[i])) << i;
}

// Every element against the contract, on one thread and on a pool, at lengths with and without a ragged end for the
// vector path (64 bytes a step) and the chunks.
TEST(QLinearLookup, EveryElementMatchesTheContractSeriallyAndOnAPool) {
  ThreadPool pool(2);
  for (int64_t n : {int64_t{1}, int64_t{63}, int64_t{64}, int64_t{1000003}}) {
    for (DType tx : {DType::kUInt8, DType::kInt8}) {
      Tensor x(tx, {n}), x2(DType::kInt8, {n});
      for (int64_t i = 0; i < n; ++i) {
        static_cast<uint8_t*>(x.raw())[i] = static_cast<uint8_t>(i * 31 + 7);
        static_cast<uint8_t*>(x2.raw())[i] = static_cast<uint8_t>(i * 17 + 3);
      }
      const unsigned fx = tx == DType::kInt8 ? 0x80 : 0;
      for (bool binary : {false, true}) {
        const Tensor tab = table(DType::kUInt8, binary ? 65536 : 256, 5, 9);
        std::vector<Tensor> in = binary ? std::vector<Tensor>{x, x2, tab} : std::vector<Tensor>{x, tab};
        for (Parallel* p : {static_cast<Parallel*>(nullptr), static_cast<Parallel*>(&pool)}) {
          auto y = run_node_once(lookup_node(binary), 13, in, p);
          ASSERT_TRUE(y.ok()) << y.status().message();
          int64_t wrong = 0;
          for (int64_t i = 0; i < n; ++i) {
            const unsigned u = byte_at(x, i) ^ fx;
            const unsigned k = binary ? (u << 8) | (byte_at(x2, i) ^ 0x80u) : u;
            wrong += byte_at((*y)[0], i) != byte_at(tab, k);
          }
          EXPECT_EQ(wrong, 0) << "n " << n << " " << dtype_name(tx) << (binary ? " binary" : " unary")
                              << (p ? " pool" : " serial");
        }
      }
    }
  }
}

// A binary table that names ONNX Runtime's QLinearAdd form (qlinear_add) or QLinearMul form (qlinear_mul) is
// computed, not looked up (16 lanes at a time, on the vector path): every operand pair, at a length with a ragged
// end, gives the table's byte, for uint8 and int8, serially and on a pool. A form the table does not hold (one entry
// changed) is ignored: the table wins.
TEST(QLinearLookup, AQLinearAddFormGivesTheTablesBytesAndATableThatDisagreesWins) {
  ThreadPool pool(2);
  const qadd::Form forms[] = {{0.75f, 1.3f, 12.345f},
                              {0.5f, 0.5f, -0.5f},
                              {2.1f, 0.9f, -37.5f},
                              {0.0123f, 0.f, 3.f, true, 0.f, 7.f},  // QLinearMul: ratio, -, z_y; z_a, z_b
                              {0.5f, 0.f, 0.f, true, 0.f, 0.f},     // ties: p / 2 rounds to even
                              {0.00917f, 0.f, -20.f, true, -5.f, 100.f}};
  const int64_t n = 65536 + 13;
  for (DType t : {DType::kUInt8, DType::kInt8}) {
    for (const qadd::Form& f : forms) {
      Tensor tab(t, {65536});
      qadd::fill_table(f, t == DType::kInt8, static_cast<uint8_t*>(tab.raw()));
      Tensor x(t, {n}), x2(t, {n});
      if (f.mul && t == DType::kUInt8 && (f.za < 0 || f.fixed < 0)) continue;  // zero points of the other type
      for (int64_t i = 0; i < n; ++i) {
        static_cast<uint8_t*>(x.raw())[i] = static_cast<uint8_t>(i >> 8);
        static_cast<uint8_t*>(x2.raw())[i] = static_cast<uint8_t>(i * 7 + 3);
      }
      const unsigned flip = t == DType::kInt8 ? 0x80 : 0;
      // The entry the second run changes: a pair the inputs hold (element 300).
      const unsigned changed = ((byte_at(x, 300) ^ flip) << 8) | (byte_at(x2, 300) ^ flip);
      for (bool disagree : {false, true}) {
        Tensor tb = tab;
        if (disagree) {
          tb = Tensor(t, {65536});
          std::memcpy(tb.raw(), tab.raw(), 65536);
          static_cast<uint8_t*>(tb.raw())[changed] ^= 1;
        }
        Node node = lookup_node(true);
        node.attrs[f.mul ? "qlinear_mul" : "qlinear_add"] = Attribute::Floats(qadd::form_floats(f));
        for (Parallel* p : {static_cast<Parallel*>(nullptr), static_cast<Parallel*>(&pool)}) {
          auto y = run_node_once(node, 13, {x, x2, tb}, p);
          ASSERT_TRUE(y.ok()) << y.status().message();
          int64_t wrong = 0;
          for (int64_t i = 0; i < n; ++i) {
            const unsigned k = ((byte_at(x, i) ^ flip) << 8) | (byte_at(x2, i) ^ flip);
            wrong += byte_at((*y)[0], i) != byte_at(tb, k);
          }
          EXPECT_EQ(wrong, 0) << dtype_name(t) << (f.mul ? " mul" : " add") << " form " << f.ra << "," << f.rb << ","
                              << f.fixed << (disagree ? " (table changed)" : "") << (p ? " pool" : " serial");
        }
      }
    }
  }
}

TEST(QLinearLookup, RejectsATableOfTheWrongLength) {
  const Tensor x = bytes(DType::kUInt8, {2}, {1, 2});
  auto y = run_node_once(lookup_node(false), 13, {x, table(DType::kUInt8, 255, 1, 0)});
  ASSERT_FALSE(y.ok());
  EXPECT_NE(y.status().message().find("'lut'"), std::string::npos) << y.status().message();
  EXPECT_NE(y.status().message().find("256"), std::string::npos) << y.status().message();
  // A unary-sized table on the binary form.
  auto z = run_node_once(lookup_node(true), 13, {x, x, table(DType::kUInt8, 256, 1, 0)});
  ASSERT_FALSE(z.ok());
  EXPECT_NE(z.status().message().find("65536"), std::string::npos) << z.status().message();
}

TEST(QLinearLookup, RejectsAWideTypeOrX2OfAnotherShape) {
  const Tensor tab = table(DType::kUInt8, 65536, 1, 0);
  Tensor f(DType::kFloat32, {2});
  auto y = run_node_once(lookup_node(false), 13, {f, table(DType::kUInt8, 256, 1, 0)});
  ASSERT_FALSE(y.ok());
  EXPECT_NE(y.status().message().find("float32"), std::string::npos) << y.status().message();
  Tensor wide(DType::kInt32, {65536});
  auto w = run_node_once(lookup_node(true), 13,
                         {bytes(DType::kUInt8, {2}, {1, 2}), bytes(DType::kUInt8, {2}, {1, 2}), wide});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("Table"), std::string::npos) << w.status().message();
  auto z =
      run_node_once(lookup_node(true), 13, {bytes(DType::kUInt8, {2}, {1, 2}), bytes(DType::kUInt8, {1}, {1}), tab});
  ASSERT_FALSE(z.ok());
  EXPECT_NE(z.status().message().find("same shape"), std::string::npos) << z.status().message();
}

}  // namespace
}  // namespace tessera
