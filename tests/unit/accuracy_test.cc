// Reduced precision's bookkeeping (api/accuracy.h): parsing --precision and
// --accuracy-budget, the refusal on CPUs without the instructions, and the
// error figures of outputs against float32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "api/accuracy.h"
#include "util/cpu_isa.h"

namespace tessera::api {
namespace {

Tensor floats(const std::vector<float>& v) { return Tensor::FromVector<float>(v, {static_cast<int64_t>(v.size())}); }

TEST(Precision, ParsesTheThreeNamesAndRefusesOthers) {
  EXPECT_EQ(parse_precision("fp32").value(), Precision::kFp32);
  EXPECT_EQ(parse_precision("").value(), Precision::kFp32);
  EXPECT_EQ(parse_precision("bf16").value(), Precision::kBf16);
  EXPECT_EQ(parse_precision("fp16").value(), Precision::kFp16);
  auto bad = parse_precision("int8");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'int8'"), std::string::npos);
}

// What this CPU has decides: bf16 is available exactly when the BF16 dot products are, fp16 when AVX512-FP16 is
// (and the dispatch switch TESSERA_ISA=avx2 turns them off: the unit_avx2 run of this binary covers the refusal on
// any CPU).
TEST(Precision, ReducedPrecisionIsRefusedWithAReasonWhereTheCpuLacksTheInstructions) {
  EXPECT_EQ(precision_unavailable(Precision::kFp32), "");
  const std::string why = precision_unavailable(Precision::kBf16);
  if (cpu::avx512_bf16()) {
    EXPECT_EQ(why, "");
  } else {
    EXPECT_NE(why.find("BF16"), std::string::npos) << why;
  }
  const char* isa = std::getenv("TESSERA_ISA");
  if (isa && std::string(isa) == "avx2") {
    EXPECT_NE(why.find("TESSERA_ISA"), std::string::npos) << why;
  }
  const std::string why16 = precision_unavailable(Precision::kFp16);
  if (cpu::avx512_fp16()) {
    EXPECT_EQ(why16, "");
  } else {
    EXPECT_NE(why16.find("AVX512-FP16"), std::string::npos) << why16;
  }
  if (isa && std::string(isa) == "avx2") {
    EXPECT_NE(why16.find("TESSERA_ISA"), std::string::npos) << why16;
  }
}

TEST(AccuracyBudget, ParsesAnySubsetAndRefusesNonsense) {
  auto b = parse_accuracy_budget("cos=0.999,abs=0.05");
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_DOUBLE_EQ(b->min_cosine, 0.999);
  EXPECT_DOUBLE_EQ(b->max_abs, 0.05);
  EXPECT_LT(b->max_rel, 0);
  EXPECT_DOUBLE_EQ(parse_accuracy_budget("rel=1e-3").value().max_rel, 1e-3);
  for (const char* text : {"", "cos", "cos=2", "abs=-1", "abs=x", "snr=3", "cos=0.9,", "abs=nan"}) {
    SCOPED_TRACE(text);
    auto bad = parse_accuracy_budget(text);
    if (std::string(text) == "cos=0.9,") {
      EXPECT_TRUE(bad.ok());  // a trailing comma is harmless
      continue;
    }
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("--accuracy-budget"), std::string::npos);
  }
}

TEST(Accuracy, ComparesEveryOutputByMaxAbsMaxRelAndCosine) {
  // got = want + a known error: max abs 0.5 at the element of magnitude 4, so max rel 0.5 / 4.
  auto acc = compare_outputs({"a", "b"}, {floats({1, -2, 4.5f}), floats({0, 0})},
                             {floats({1, -2, 4}), floats({0, 0})});
  ASSERT_TRUE(acc.ok()) << acc.status().message();
  ASSERT_EQ(acc->size(), 2u);
  const OutputAccuracy& a = (*acc)[0];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.elements, 3);
  EXPECT_DOUBLE_EQ(a.max_abs, 0.5);
  EXPECT_DOUBLE_EQ(a.max_rel, 0.125);
  const double dot = 1 + 4 + 18, gg = 1 + 4 + 20.25, ww = 1 + 4 + 16;
  EXPECT_NEAR(a.cosine, dot / std::sqrt(gg * ww), 1e-12);
  // Two zero tensors agree perfectly.
  EXPECT_EQ((*acc)[1].max_abs, 0);
  EXPECT_EQ((*acc)[1].cosine, 1);
}

TEST(Accuracy, ANanOnOneSideIsAnInfiniteError) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto acc = compare_outputs({"y"}, {floats({nan, 1})}, {floats({0, 1})});
  ASSERT_TRUE(acc.ok());
  EXPECT_TRUE(std::isinf((*acc)[0].max_abs));
  // NaN where fp32 gives NaN too is no error.
  acc = compare_outputs({"y"}, {floats({nan, 1})}, {floats({nan, 1})});
  EXPECT_EQ((*acc)[0].max_abs, 0);
}

TEST(Accuracy, OutputsOfAnotherShapeAreAnError) {
  auto acc = compare_outputs({"y"}, {floats({1, 2})}, {floats({1, 2, 3})});
  ASSERT_FALSE(acc.ok());
  EXPECT_NE(acc.status().message().find("'y'"), std::string::npos);
}

TEST(Accuracy, TheBudgetNamesTheFirstOutputPastIt) {
  std::vector<OutputAccuracy> acc(2);
  acc[0] = {"boxes", 10, 0.01, 0.001, 0.99999, true};
  acc[1] = {"scores", 10, 0.2, 0.05, 0.998, true};
  AccuracyBudget cos;
  cos.min_cosine = 0.999;
  const std::string why = budget_violation(acc, cos, "bf16");
  EXPECT_NE(why.find("'scores'"), std::string::npos) << why;
  EXPECT_NE(why.find("bf16"), std::string::npos) << why;
  EXPECT_NE(why.find("0.998"), std::string::npos) << why;
  AccuracyBudget abs;
  abs.max_abs = 0.005;
  EXPECT_NE(budget_violation(acc, abs, "bf16").find("'boxes'"), std::string::npos);
  AccuracyBudget loose;
  loose.min_cosine = 0.99;
  loose.max_rel = 0.1;
  EXPECT_EQ(budget_violation(acc, loose, "bf16"), "");
}

}  // namespace
}  // namespace tessera::api
