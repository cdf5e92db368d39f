// Pricing a region on THIS GPU (estimate_region, estimate_cost): the lowered
// program's steps against the device measured once per process
// (DeviceFigures, cuda_device.h), plus the region's boundary values moved
// across PCIe. Fails with TESSERA_ERROR_UNSUPPORTED without a device or when
// the region does not lower.
#pragma once

#include <cstddef>

namespace tessera_cuda {

double estimate_region_us(const void* model, size_t size);

}  // namespace tessera_cuda
