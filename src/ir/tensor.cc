#include "ir/tensor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <new>

namespace tessera {

namespace {

// Large blocks are the system's pages (mmap), so that a block the cache lets go goes back to the system at once: on
// the heap, glibc keeps a freed block under its moving mmap threshold (up to 32 MiB) for its own reuse, and the
// process stayed resident at its high mark whatever the cache kept (the detector stream under a 64 MiB limit: 148 MiB
// resident at most, 17.5 of them before it). Fresh pages are zero. Under AddressSanitizer they stay on the heap, in
// its redzones.
#if defined(__SANITIZE_ADDRESS__)
#define TESSERA_BLOCKS_ON_HEAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define TESSERA_BLOCKS_ON_HEAP 1
#endif
#endif

// `bytes` (a multiple of the page) aligned to `alignment` (a power of two); *zeroed: the block reads as zeros.
void* map_block(size_t bytes, size_t alignment, bool* zeroed) {
#ifdef TESSERA_BLOCKS_ON_HEAP
  *zeroed = false;
  return std::aligned_alloc(alignment, bytes);
#else
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t slack = alignment > page ? alignment : 0;
  void* raw = ::mmap(nullptr, bytes + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  *zeroed = true;
  if (slack == 0) return raw;
  // Over-asked by the alignment: the pages before the aligned start and after the block's end go back.
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw), aligned = (start + alignment - 1) & ~(alignment - 1);
  if (aligned > start) ::munmap(raw, aligned - start);
  if (const size_t tail = start + bytes + slack - (aligned + bytes); tail > 0)
    ::munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  return reinterpret_cast<void*>(aligned);
#endif
}

void unmap_block(void* p, size_t bytes) {
#ifdef TESSERA_BLOCKS_ON_HEAP
  (void)bytes;
  std::free(p);
#else
  ::munmap(p, bytes);
#endif
}

// Large blocks freed recently, by size class, for the next tensor of that
// class: a tensor made every run (a graph output, a measured region's result,
// every value of a shape-generic plan) otherwise goes to the kernel and back
// each time, mmap'd, page-faulted and unmapped, once glibc's moving mmap
// threshold sits just under its size (a 4 MiB output cost 2.7 ms per run that
// way, 0.3 ms reused). Sizes are rounded up to one of 8 classes per power of
// two (at most 12.5 % more), so tensors whose shapes change a little from one
// run to the next still find a block. Bounded in bytes (the most the
// process's blocks have held at once, at least 256 MiB, at most half the
// machine's memory: what a run at its largest shape needs comes back to it at
// the next); the oldest blocks go first.
class BlockCache {
 public:
  // From 64 KiB: glibc serves smaller blocks from its heap, but trims the heap's top and maps larger ones afresh, so
  // tensors of a few hundred KiB (a small input's activations) page-faulted on every run of a shape-generic plan.
  static constexpr size_t kMinBytes = 64 * 1024;
  static constexpr size_t kMinBoundBytes = 256ull << 20;
  static constexpr size_t kMaxBlocks = 512;  // bounds take()'s scan

  // The size of the class holding `bytes` (>= kMinBytes).
  static size_t class_bytes(size_t bytes) {
    int top = 63;
    while (!(bytes >> top)) --top;
    const size_t step = size_t{1} << (top - 3);
    return bytes > std::numeric_limits<size_t>::max() - step ? bytes : (bytes + step - 1) / step * step;
  }

  // A cached block for *bytes (a class size) aligned to *alignment: the smallest of at least that size and at most
  // twice it, aligned at least as asked (a block already touched is worth more than the memory it wastes for a
  // while: a new one page-faults). *bytes and *alignment become the block's own, to give it back with.
  void* take(size_t* bytes_io, size_t* alignment_io) {
    const size_t bytes = *bytes_io, alignment = *alignment_io;
    std::lock_guard<std::mutex> lock(mu_);
    auto best = blocks_.end();
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
      if (it->bytes >= bytes && it->bytes / 2 <= bytes && it->alignment % alignment == 0 &&
          (best == blocks_.end() || it->bytes < best->bytes)) {
        best = it;
        if (it->bytes == bytes) break;
      }
    }
    if (best == blocks_.end()) return nullptr;
    void* p = best->p;
    *bytes_io = best->bytes;
    *alignment_io = best->alignment;
    cached_ -= best->bytes;
    blocks_.erase(best);
    lent(*bytes_io);  // after the erase: lent() trims the cache
    return p;
  }

  // A block allocated afresh (not from the cache), now in use.
  void made(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    lent(bytes);
  }

  void give(void* p, size_t bytes, size_t alignment) {
    std::lock_guard<std::mutex> lock(mu_);
    in_use_ -= bytes;
    if (bytes > keep_locked()) {
      unmap_block(p, bytes);
      return;
    }
    blocks_.push_back({p, bytes, alignment});
    cached_ += bytes;
    trim_locked();
  }

  size_t cap() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cap_;
  }
  void reserve(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    reserved_ += bytes;
    trim_locked();
  }
  void unreserve(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    reserved_ -= std::min(reserved_, bytes);
  }

  // Bytes of blocks lent out or kept: those the process holds through this cache.
  size_t held() const {
    std::lock_guard<std::mutex> lock(mu_);
    return in_use_ + cached_;
  }

  // The cap set to `cap`, or to the least of it and the present one (`lower`).
  void set_cap(size_t cap, bool lower) {
    std::lock_guard<std::mutex> lock(mu_);
    cap_ = lower ? std::min(cap_, cap) : cap;
    trim_locked();
  }

 private:
  struct Block {
    void* p;
    size_t bytes, alignment;
  };
  // Counts a block handed out; the bound follows the most ever in use. (A run of BERT-base at 8x506 holds several
  // attention tensors of 98 MB: with the cache bound at 256 MiB, every run of the shape-generic plan mapped and
  // page-faulted them afresh, a quarter of its time.)
  void lent(size_t bytes) {
    in_use_ += bytes;
    static const size_t most = [] {
      const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
      return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) / 2 : kMinBoundBytes;
    }();
    bound_ = std::max(bound_, std::min(in_use_, std::max(most, kMinBoundBytes)));
    trim_locked();
  }

  // The most bytes of blocks kept now: within the bound, and with a cap (a session's memory limit), within what the
  // blocks in use leave of it. The cache gives way to the tensors that are live: a run at a large shape takes the
  // memory that an earlier run's freed blocks held, rather than adding to it.
  size_t keep_locked() const {
    const size_t held = in_use_ + reserved_;
    const size_t room = cap_ == std::numeric_limits<size_t>::max() ? cap_ : cap_ > held ? cap_ - held : 0;
    return std::min(bound_, room);
  }

  void trim_locked() {
    while (!blocks_.empty() && (cached_ > keep_locked() || blocks_.size() > kMaxBlocks)) {
      unmap_block(blocks_.front().p, blocks_.front().bytes);
      cached_ -= blocks_.front().bytes;
      blocks_.pop_front();
    }
  }

  mutable std::mutex mu_;
  std::deque<Block> blocks_;
  size_t cached_ = 0;
  size_t in_use_ = 0;  // bytes of blocks handed out and not given back
  size_t reserved_ = 0;  // TensorMemoryReservation: memory held outside tensors that the cap counts
  size_t bound_ = kMinBoundBytes;
  size_t cap_ = std::numeric_limits<size_t>::max();  // tensor_block_cache_cap()
};

constexpr size_t kHugePage = size_t{2} << 20;

BlockCache& block_cache() {
  static BlockCache* cache = new BlockCache();  // never destroyed: tensors may outlive static destruction
  return *cache;
}

}  // namespace

size_t tensor_block_cache_cap() { return block_cache().cap(); }
void set_tensor_block_cache_cap(size_t bytes) { block_cache().set_cap(bytes, /*lower=*/false); }
void lower_tensor_block_cache_cap(size_t bytes) { block_cache().set_cap(bytes, /*lower=*/true); }

void lower_tensor_block_cache_cap_within_process(size_t limit) {
  // Resident pages: the second field of /proc/self/statm.
  size_t resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    unsigned long long size_pages = 0, resident_pages = 0;
    if (std::fscanf(f, "%llu %llu", &size_pages, &resident_pages) == 2)
      resident = static_cast<size_t>(resident_pages) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
    std::fclose(f);
  }
  if (resident == 0) {  // no /proc: the cap alone
    lower_tensor_block_cache_cap(limit);
    return;
  }
  const size_t held = block_cache().held();
  // At most half the limit comes off: in a process that holds much more than the session's limit outside it (a large
  // application embedding a session), the limit cannot hold the process anyway, and a cache of nothing would make
  // every run map and page-fault its tensors afresh.
  const size_t outside = std::min(resident > held ? resident - held : 0, limit / 2);
  lower_tensor_block_cache_cap(limit - outside);
}

TensorMemoryReservation::TensorMemoryReservation(size_t bytes) : bytes_(bytes) { block_cache().reserve(bytes); }
TensorMemoryReservation::~TensorMemoryReservation() { block_cache().unreserve(bytes_); }

std::shared_ptr<void> aligned_alloc_shared(size_t bytes, size_t alignment, bool zero) {
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  if (rounded == 0) rounded = alignment;
  const bool large = rounded >= BlockCache::kMinBytes;
  size_t block = large ? BlockCache::class_bytes(rounded) : rounded;
  // Blocks of several huge pages start on one and ask for them (transparent huge pages, where the kernel gives
  // them on request): a first touch page-faults once per 2 MiB rather than once per 4 KiB. On a virtual machine here
  // that made the first touch of 256 MiB 24-38 ms instead of 1.4 s, and a new plan's first run pays exactly that.
  const bool huge = block >= 2 * kHugePage;
  if (huge) alignment = std::max(alignment, kHugePage);
  void* p = large ? block_cache().take(&block, &alignment) : nullptr;
  bool zeroed = false;
  if (!p && large) {
    p = map_block(block, alignment, &zeroed);
    if (p && huge) (void)::madvise(p, block / kHugePage * kHugePage, MADV_HUGEPAGE);  // advice: failure is harmless
    if (p) block_cache().made(block);
  } else if (!p) {
    p = std::aligned_alloc(alignment, block);
  }
  if (!p) throw std::bad_alloc();
  if (zero && !zeroed) std::memset(p, 0, rounded);
  if (!large) return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  return std::shared_ptr<void>(p, [block, alignment](void* q) { block_cache().give(q, block, alignment); });
}

Tensor::Tensor(DType dtype, Dims dims) : dtype_(dtype), dims_(std::move(dims)) { allocate(/*zero=*/true); }

void Tensor::allocate(bool zero) {
  // Shapes are checked where they enter (import, shape inference, run inputs); this is the last guard against a
  // wrapped size.
  if (!tensor_size_problem(dims_, dtype_size(dtype_)).empty()) throw std::bad_alloc();
  numel_ = ::tessera::numel(dims_);
  storage_ = aligned_alloc_shared(nbytes(), 64, zero);
  data_ = storage_.get();
}

Tensor Tensor::Uninitialized(DType dtype, Dims dims) {
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.allocate(/*zero=*/false);
  return t;
}

Tensor Tensor::View(DType dtype, Dims dims, void* data) {
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.numel_ = ::tessera::numel(t.dims_);
  t.data_ = data;
  return t;
}

Tensor Tensor::Shared(DType dtype, Dims dims, void* data, std::shared_ptr<void> keep_alive) {
  Tensor t = View(dtype, std::move(dims), data);
  t.storage_ = std::move(keep_alive);
  return t;
}

Tensor Tensor::reshaped(Dims dims) const {
  Tensor t = *this;
  t.dims_ = std::move(dims);
  t.numel_ = ::tessera::numel(t.dims_);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t(dtype_, dims_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

double Tensor::as_double(int64_t i) const {
  return visit_dtype(dtype_, [&](auto tag) -> double {
    using T = decltype(tag);
    return static_cast<double>(static_cast<const T*>(data_)[i]);
  });
}

int64_t Tensor::as_int64(int64_t i) const {
  return visit_dtype(dtype_, [&](auto tag) -> int64_t {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16> || std::is_floating_point_v<T>) {
      // A float where an integer is expected (a model's own choice): saturating, NaN as 0, never undefined.
      double d = 0;
      if constexpr (std::is_floating_point_v<T>) {
        d = static_cast<double>(static_cast<const T*>(data_)[i]);
      } else {
        d = static_cast<double>(static_cast<float>(static_cast<const T*>(data_)[i]));
      }
      if (std::isnan(d)) return 0;
      if (d >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
      if (d <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
      return static_cast<int64_t>(d);
    } else {
      return static_cast<int64_t>(static_cast<const T*>(data_)[i]);
    }
  });
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  std::vector<int64_t> v(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) v[static_cast<size_t>(i)] = as_int64(i);
  return v;
}

std::string Tensor::str() const { return std::string(dtype_name(dtype_)) + dims_str(dims_); }

bool same_tensor(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.dims() != b.dims()) return false;
  return a.raw() == b.raw() || a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace tessera
