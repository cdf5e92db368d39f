// Helpers shared by the data-movement ops (tensor and gather_scatter
// families): a strided copy engine that moves elements by size only, so one
// code path serves every dtype, plus small inference helpers for reading
// shape-like input values and merging dims.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/op_registry.h"

namespace tessera {

// ---- copy engine ----------------------------------------------------------

// Copies the elements of a strided view of `src` into a strided view of
// `dst`: for every index i of `dims`, dst[sum i_k*dst_strides_k] =
// src[sum i_k*src_strides_k]. Strides count elements of `esize` bytes (1, 2,
// 4 or 8) and may be negative (src) or zero (src, broadcasting). The engine
// drops unit dims, merges contiguous dims, uses memcpy for contiguous runs,
// cache-blocked tiles when the source's contiguous dim is not the
// destination's, and the pool for large copies.
void strided_copy(void* dst, const void* src, const Dims& dims, const std::vector<int64_t>& dst_strides,
                  const std::vector<int64_t>& src_strides, size_t esize, Parallel* pool);

// dst (contiguous, dims permuted) = transpose(src, perm).
void transpose_copy(void* dst, const void* src, const Dims& in_dims, const std::vector<int64_t>& perm,
                    size_t esize, Parallel* pool);

// memcpy of `bytes`, split across the pool when large.
void parallel_memcpy(void* dst, const void* src, size_t bytes, Parallel* pool);

// Copies input 0 into output 0 byte for byte (Reshape, Squeeze, Identity...).
Status run_copy_input0(KernelContext& ctx);

// Error unless the dtype can be moved by size (everything but string).
Status check_movable(const KernelContext& ctx, DType t);

// ---- inference helpers ----------------------------------------------------

// Values of input i as int64 when known (constant at compile time, or at run
// time); false when unknown or absent.
bool known_ints(const InferContext& ctx, int i, std::vector<int64_t>* out);

// The output shape of an op whose rank is the length of a 1-D shape input (Reshape, Expand, ConstantOfShape,
// MaxUnpool), given that input's shape: as many unknown dims when its length is known and at most 1024, else
// unranked (a declared length of 2^40 must not become 2^40 dims here; the run, which has the values, decides).
Shape rank_from_shape_input(const Shape& shape_input);

// Reads an integer list either from attribute `attr` (older opsets) or from
// input `input` (newer opsets). Returns: 1 = values known, 0 = not given
// at all, -1 = given as an input whose values are unknown.
int attr_or_input_ints(const InferContext& ctx, const char* attr, int input, std::vector<int64_t>* out);

// Product of dims when all are known; a single symbolic dim (times known 1s)
// is kept; otherwise an unknown dim.
Dim product_dim(const std::vector<Dim>& dims);

// Merges two dims that must be equal (known wins over symbolic, symbolic over
// unknown). Returns false when both are known and differ.
bool merge_dim(const Dim& a, const Dim& b, Dim* out);

// The dims a node's `axes` attribute names, normalised for `rank`, in the order given (every dim in order when the
// attribute is absent or empty); false, with *err naming the axis, when one is out of range or repeated.
bool attr_axes(const Node& node, int rank, std::vector<int>* axes, std::string* err);

// Kernel-side: integer values of an optional input (empty when absent).
std::vector<int64_t> input_ints(const KernelContext& ctx, int i);

// Registration of the ops living in tensor_*.cc / gather_*.cc, called from
// the family registrations in tensor.cc / gather_scatter.cc.
void register_tensor_layout_ops(OpRegistry& reg);   // tensor_layout.cc
void register_tensor_slice_ops(OpRegistry& reg);    // tensor_slice.cc
void register_tensor_create_ops(OpRegistry& reg);   // tensor_create.cc
void register_gather_select_ops(OpRegistry& reg);   // gather_select.cc

}  // namespace tessera
