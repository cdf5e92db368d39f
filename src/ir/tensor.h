// A dense tensor: dtype, concrete dims, and a pointer into storage that is
// either owned (shared, 64-byte aligned) or borrowed (a view into an arena,
// an mmap'd file, a caller's buffer). Copying a Tensor shares its storage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ir/dtype.h"
#include "ir/shape.h"

namespace tessera {

class Tensor {
 public:
  Tensor() = default;
  // Allocates zero-initialised, 64-byte aligned storage.
  Tensor(DType dtype, Dims dims);
  // 64-byte aligned storage left as it is (a recycled block holds old bytes): for an output its producer writes whole.
  static Tensor Uninitialized(DType dtype, Dims dims);
  // Borrows `data`; the caller keeps it alive.
  static Tensor View(DType dtype, Dims dims, void* data);
  // Shares ownership of `keep_alive` while pointing at `data`.
  static Tensor Shared(DType dtype, Dims dims, void* data, std::shared_ptr<void> keep_alive);
  template <class T>
  static Tensor Scalar(T v) {
    Tensor t(dtype_of<T>(), {});
    *t.data<T>() = v;
    return t;
  }
  template <class T>
  static Tensor FromVector(const std::vector<T>& v, Dims dims) {
    Tensor t(dtype_of<T>(), std::move(dims));
    for (size_t i = 0; i < v.size() && static_cast<int64_t>(i) < t.numel(); ++i) t.data<T>()[i] = v[i];
    return t;
  }

  bool defined() const { return dtype_ != DType::kUndefined; }
  DType dtype() const { return dtype_; }
  const Dims& dims() const { return dims_; }
  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <class T> T* data() { return static_cast<T*>(data_); }
  template <class T> const T* data() const { return static_cast<const T*>(data_); }

  // Same storage, new dims (numel must match).
  Tensor reshaped(Dims dims) const;
  // Deep copy into fresh owned storage.
  Tensor clone() const;
  // Element i converted to double / int64 (for small shape-like tensors).
  double as_double(int64_t i) const;
  int64_t as_int64(int64_t i) const;
  // Reads a 0-D or 1-D integer tensor into a vector.
  std::vector<int64_t> to_int64_vector() const;

  std::string str() const;  // "float32[1,3]"

 private:
  void allocate(bool zero);  // storage for dims_ and dtype_

  DType dtype_ = DType::kUndefined;
  Dims dims_;
  int64_t numel_ = 0;
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
};

// Same dtype, dims and bytes (a tensor is the same as itself without reading it).
bool same_tensor(const Tensor& a, const Tensor& b);

// Aligned allocation helper shared by tensors and arenas; zeroed unless `zero` is false.
std::shared_ptr<void> aligned_alloc_shared(size_t bytes, size_t alignment = 64, bool zero = true);

// The most bytes of freed tensor blocks the process keeps for reuse (the block cache behind aligned_alloc_shared),
// beside its own bound. Unlimited unless set; a session with a memory limit lowers it to that limit (lower_: the
// smallest limit of the process's sessions wins, however they race), so that the blocks its shape-generic plan frees
// stay within it too. Setting or lowering it trims the cache at once; set_ also raises it (a test restoring it).
// With a cap, the cache keeps only what the blocks in use and the reservations below leave of it.
size_t tensor_block_cache_cap();
void set_tensor_block_cache_cap(size_t bytes);
void lower_tensor_block_cache_cap(size_t bytes);
// lower_tensor_block_cache_cap to what the process's resident memory outside the cache's blocks (libraries, threads'
// stacks, small tensors and plans on the heap), as it stands now, leaves of `limit`, but to half the limit at least:
// so that the cache does not take the whole process past a memory limit. Called again as that memory grows (a new
// plan, a bucket's engines).
void lower_tensor_block_cache_cap_within_process(size_t limit);

// Memory held outside tensors that counts against the block cache's cap for as long as this lives (the engines of a
// shape bucket compiled at run time): the cache keeps that much less.
class TensorMemoryReservation {
 public:
  explicit TensorMemoryReservation(size_t bytes);
  ~TensorMemoryReservation();
  TensorMemoryReservation(const TensorMemoryReservation&) = delete;
  TensorMemoryReservation& operator=(const TensorMemoryReservation&) = delete;

 private:
  size_t bytes_;
};

}  // namespace tessera
