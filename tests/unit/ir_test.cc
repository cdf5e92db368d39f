#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "ir/dtype.h"
#include "ir/graph.h"
#include "ir/shape.h"
#include "ir/tensor.h"

namespace tessera {
namespace {

TEST(DType, HalfRoundTripsExactValues) {
  for (float f : {0.f, 1.f, -2.5f, 65504.f, 6.103515625e-05f, 5.960464477539063e-08f}) {
    EXPECT_EQ(half_to_float(float_to_half(f)), f) << f;
  }
}

TEST(DType, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(1.0f)), 1.0f);
  EXPECT_NEAR(bfloat16_to_float(float_to_bfloat16(3.14159f)), 3.140625f, 1e-6);
}

TEST(Shape, BroadcastKeepsSymbolsAndRejectsMismatch) {
  Shape a({Dim::Symbol("batch"), Dim(1), Dim(4)});
  Shape b({Dim(3), Dim(4)});
  Shape out;
  ASSERT_TRUE(broadcast_shapes(a, b, &out));
  EXPECT_EQ(out.str(), "[batch,3,4]");
  EXPECT_FALSE(broadcast_shapes(Shape::FromDims({2, 3}), Shape::FromDims({4, 3}), &out));
}

TEST(Tensor, ReshapedSharesStorage) {
  Tensor t(DType::kFloat32, {2, 3});
  t.data<float>()[5] = 7.f;
  Tensor r = t.reshaped({6});
  EXPECT_EQ(r.data<float>()[5], 7.f);
  EXPECT_EQ(r.numel(), 6);
}

// Large blocks come back to the next run that asks for their sizes, also when a run holds more than the cache's
// initial 256 MiB at once (BERT-base at 8x506: several 98 MB attention tensors). Each block of the first run is marked
// in its first bytes; one the system maps afresh (these sizes are always mmap'd) reads 0 there. Only the first page of
// a block is touched.
TEST(Tensor, LargeBlocksComeBackEvenBeyondTheInitialCacheBound) {
  constexpr size_t kBlock = 96ull << 20;  // a class size: 3 x 32 MiB
  constexpr int kBlocks = 5;              // 480 MiB at once
  {
    std::vector<std::shared_ptr<void>> run;
    for (int i = 0; i < kBlocks; ++i) {
      run.push_back(aligned_alloc_shared(kBlock, 64, /*zero=*/false));
      *static_cast<uint64_t*>(run.back().get()) = 0x7e55e7a000000000ull + static_cast<uint64_t>(i);
    }
  }
  std::vector<std::shared_ptr<void>> again;
  for (int i = 0; i < kBlocks; ++i) {
    again.push_back(aligned_alloc_shared(kBlock, 64, /*zero=*/false));
    EXPECT_EQ(*static_cast<const uint64_t*>(again.back().get()) >> 32, 0x7e55e7a0ull) << "block " << i;
  }
}

// A cap on the block cache (a session's memory limit sets it): freed blocks beyond it are not kept. Three 768 KiB
// blocks freed under a cap of 1 MiB: at most one comes back; without the cap all three did (the test above).
TEST(Tensor, TheBlockCacheKeepsWithinItsCap) {
  // Above glibc's largest mmap threshold (32 MiB), so that a block the cache does not keep goes back to the system
  // and cannot come back with its contents from malloc's free lists (as a 768 KiB one could, once earlier tests had
  // raised the threshold).
  constexpr size_t kBlock = size_t{33} << 20;
  const size_t before = tensor_block_cache_cap();
  lower_tensor_block_cache_cap(size_t{40} << 20);
  lower_tensor_block_cache_cap(size_t{80} << 20);  // a larger limit later leaves the smaller one
  EXPECT_EQ(tensor_block_cache_cap(), size_t{40} << 20);
  {
    std::vector<std::shared_ptr<void>> run;
    for (int i = 0; i < 3; ++i) {
      run.push_back(aligned_alloc_shared(kBlock, 64, /*zero=*/false));
      *static_cast<uint64_t*>(run.back().get()) = 0x0cab0c0de0000000ull + static_cast<uint64_t>(i);
    }
  }
  std::vector<std::shared_ptr<void>> again;
  int back = 0;
  for (int i = 0; i < 3; ++i) {
    again.push_back(aligned_alloc_shared(kBlock, 64, /*zero=*/false));
    back += *static_cast<const uint64_t*>(again.back().get()) >> 32 == 0x0cab0c0dull;
  }
  EXPECT_LE(back, 1);
  set_tensor_block_cache_cap(before);
}

// Under a cap, freed blocks are kept only in the room that the blocks in use and the reservations (engines held
// outside tensors) leave of it: a run at a larger shape takes the memory that an earlier run's freed blocks held.
TEST(Tensor, TheBlockCacheGivesWayToTensorsInUseAndToReservations) {
  constexpr size_t kBlock = size_t{33} << 20, kLarge = size_t{48} << 20;  // kLarge: a class no kBlock block serves
  const size_t before = tensor_block_cache_cap();
  lower_tensor_block_cache_cap(size_t{80} << 20);
  // Two marked blocks freed (66 MiB cached, within the cap), then `hold` while they are cached; how many come back.
  auto marked_back_after = [&](const std::function<void()>& hold) {
    {
      std::vector<std::shared_ptr<void>> run;
      for (int i = 0; i < 2; ++i) {
        run.push_back(aligned_alloc_shared(kBlock, 64, /*zero=*/false));
        *static_cast<uint64_t*>(run.back().get()) = 0x0cab0c0de0000000ull + static_cast<uint64_t>(i);
      }
    }
    hold();
    std::vector<std::shared_ptr<void>> again;
    int back = 0;
    for (int i = 0; i < 2; ++i) {
      again.push_back(aligned_alloc_shared(kBlock, 64, /*zero=*/false));
      back += *static_cast<const uint64_t*>(again.back().get()) >> 32 == 0x0cab0c0dull;
      *static_cast<uint64_t*>(again.back().get()) = 0;
    }
    return back;
  };
  EXPECT_EQ(marked_back_after([] {}), 2);  // nothing in use: both kept
  std::shared_ptr<void> live;
  EXPECT_EQ(marked_back_after([&] { live = aligned_alloc_shared(kLarge, 64, /*zero=*/false); }), 0);
  live.reset();
  std::unique_ptr<TensorMemoryReservation> engines;
  EXPECT_EQ(marked_back_after([&] { engines = std::make_unique<TensorMemoryReservation>(kLarge); }), 0);
  engines.reset();
  EXPECT_EQ(marked_back_after([] {}), 2);  // the reservation gone, the room is back
  set_tensor_block_cache_cap(before);
}

// Under a session's memory limit the cache keeps what the rest of the process leaves of it, not the limit itself:
// memory resident outside its blocks (here 64 MiB on the heap, touched) comes off the cap, up to half the limit.
// Without that the cache filled up to the limit on top of the process (the detector stream under 128M: 133 MiB resident
// at most).
TEST(Tensor, TheBlockCacheLeavesRoomForTheRestOfTheProcess) {
  constexpr size_t kOutside = size_t{64} << 20, kLimit = size_t{4} << 30;
  const size_t before = tensor_block_cache_cap();
  // The blocks earlier tests left cached go (some were never touched past their first page, yet count whole).
  set_tensor_block_cache_cap(0);
  set_tensor_block_cache_cap(before);
  std::vector<char> heap(kOutside);
  std::memset(heap.data(), 1, heap.size());
  lower_tensor_block_cache_cap_within_process(kLimit);
  EXPECT_LE(tensor_block_cache_cap(), kLimit - kOutside);
  EXPECT_GE(tensor_block_cache_cap(), kLimit / 2);
  // A limit the rest of the process already exceeds: the cache keeps half of it, not nothing.
  set_tensor_block_cache_cap(before);
  lower_tensor_block_cache_cap_within_process(kOutside / 2);
  EXPECT_EQ(tensor_block_cache_cap(), kOutside / 4);
  EXPECT_EQ(heap[kOutside / 2], 1);
  set_tensor_block_cache_cap(before);
}

TEST(Graph, VerifierRejectsUseBeforeDefinition) {
  Graph g;
  g.inputs = {"x"};
  Node a;
  a.name = "a";
  a.op_type = "Relu";
  a.inputs = {"y"};
  a.outputs = {"z"};
  g.nodes.push_back(a);
  g.outputs = {"z"};
  Status st = verify_graph(g);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'y'"), std::string::npos);
}

}  // namespace
}  // namespace tessera
