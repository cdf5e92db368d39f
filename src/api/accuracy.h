// What reduced precision costs in accuracy, measured rather than assumed:
// `--precision bf16` compiles are run beside the float32 model (native) on the
// same inputs, and every output is compared. `--accuracy-budget` refuses a
// compile whose error exceeds it, naming the output.
#pragma once

#include <string>
#include <vector>

#include "ir/tensor.h"
#include "partition/partition.h"
#include "util/status.h"

namespace tessera::api {

// The precision matrix work computes in (`--precision`): fp32 (the default), bf16 or fp16.
enum class Precision { kFp32, kBf16, kFp16 };
Expected<Precision> parse_precision(const std::string& text);
const char* precision_name(Precision p);
// "" when this CPU can compute at `p` (as the dispatch switch TESSERA_ISA allows), else why not.
std::string precision_unavailable(Precision p);

// Limits on OutputAccuracy, any subset: "cos=0.999,abs=0.05,rel=0.01". Unset limits are < 0.
struct AccuracyBudget {
  double min_cosine = -1, max_abs = -1, max_rel = -1;
  bool empty() const { return min_cosine < 0 && max_abs < 0 && max_rel < 0; }
};
Expected<AccuracyBudget> parse_accuracy_budget(const std::string& text);

// got[i] against want[i] (same dtype and dims, else an error naming the output).
Expected<std::vector<OutputAccuracy>> compare_outputs(const std::vector<std::string>& names,
                                                      const std::vector<Tensor>& got,
                                                      const std::vector<Tensor>& want);

// "" when every output is within `budget`, else a one-line error naming the first output past it.
std::string budget_violation(const std::vector<OutputAccuracy>& acc, const AccuracyBudget& budget,
                             const std::string& precision);

// "y: max abs 0.0012, max rel 0.00031, cosine 0.999998" per output, joined by "; ".
std::string accuracy_line(const std::vector<OutputAccuracy>& acc);

}  // namespace tessera::api
