// Registration entry points of the files that make up the detection family;
// all are called from TSR_REGISTER_OPS(detection) in detection.cc.
#pragma once

#include <vector>

#include "ops/op_registry.h"

namespace tessera {

void register_max_roi_pool(OpRegistry& reg);  // detection_roi_pool.cc: MaxRoiPool

// Reads a float-typed tensor (float16/bfloat16/float32/float64) as float32:
// returns the tensor's own data for float32, else converts into `storage`.
const float* detection_float_data(const Tensor& t, std::vector<float>* storage);

}  // namespace tessera
