// One-line texts of the library that the command line prints through the C
// API: a value's summary, the difference between an expected and an actual
// value (ONNX's backend-test tolerance), and the two halves of the compile
// line.
#pragma once

#include <cstdint>
#include <string>

#include "ir/tensor.h"
#include "partition/partition.h"

namespace tessera::api {

// "float32[1,3] [0.5, -1, 2]": dtype, dims and the first max_elements values.
std::string describe_value(const Tensor& t, int64_t max_elements);

// "" when `actual` matches `expected`: floats within atol + rtol * |expected|
// (NaN matches NaN, infinities exactly), every other type exactly; else what
// differs, on one line.
std::string compare_values(const Tensor& expected, const Tensor& actual, double rtol, double atol);

// "3 regions (1 dnnl, 2 native), 1 engines"
std::string regions_line(const PartitionReport& report, size_t engines);
// "placement cost, estimated 1.234 ms; measured 3 candidates now (...), reused 2 measurements from the tune cache"
std::string placement_line(const PartitionReport& report);
// "bf16 against fp32 (random inputs): y: max abs .., max rel .., cosine ..; .." for a compile at reduced
// precision, "" at fp32.
std::string accuracy_report_line(const PartitionReport& report);

}  // namespace tessera::api
