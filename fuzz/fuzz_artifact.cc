// libFuzzer harness: the .tsr reader and loader. Each input is an artifact's bytes; it is validated, its program
// rebuilt, every engine loaded from its blob by its plugin, and the result run once on random inputs.
//
// Every byte of an artifact is checksummed, so a flipped byte stops at the first CRC check. The custom mutator
// therefore mutates and then, three times in four, recomputes the header's, the table's and every section's CRC-32C,
// so that mutated META, GRAPH, CONSTANTS and ENGINE bytes reach the code that parses them.
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>

#include "artifact/artifact_format.h"
#include "artifact/crc32c.h"
#include "fuzz_session.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

using namespace tessera::artifact;

// The section table, when the header's count and offset place it inside the input: {first entry, count}.
std::pair<uint8_t*, uint64_t> section_table(uint8_t* data, size_t size) {
  if (size < kHeaderSize) return {nullptr, 0};
  uint64_t count = get_u32(data + kOffSectionCount), table = get_u64(data + kOffTableOffset);
  if (count > kMaxSections || table > size || count * kEntrySize > size - table) return {nullptr, 0};
  return {data + table, count};
}

// An entry's section bytes, when they lie inside the input: {start, length}.
std::pair<uint8_t*, uint64_t> section_bytes(uint8_t* data, size_t size, const uint8_t* entry) {
  uint64_t off = get_u64(entry + kEntOffset), len = get_u64(entry + kEntSize);
  if (off > size || len > size - off) return {nullptr, 0};
  return {data + off, len};
}

// Recomputes what it can: each section whose bytes lie inside the input, the table, then the header.
void repair_checksums(uint8_t* data, size_t size) {
  if (size < kHeaderSize) return;
  auto [table, count] = section_table(data, size);
  if (table) {
    for (uint64_t i = 0; i < count; ++i) {
      uint8_t* e = table + i * kEntrySize;
      auto [bytes, len] = section_bytes(data, size, e);
      if (bytes) put_u32(e + kEntCrc, tessera::crc32c(bytes, len));
    }
    put_u32(data + kOffTableCrc, tessera::crc32c(table, count * kEntrySize));
  }
  put_u32(data + kOffHeaderCrc, tessera::crc32c(data, kOffHeaderCrc));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tessera_fuzz::env();
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  std::mt19937 rng(seed);
  // Mostly inside one section, so that the layout survives; sometimes anywhere.
  size_t n = size;
  auto [table, count] = section_table(data, size);
  if (rng() % 4 != 0 && count > 0) {
    auto [bytes, len] = section_bytes(data, size, table + (rng() % count) * kEntrySize);
    if (bytes && len > 0) LLVMFuzzerMutate(bytes, len, len);
  } else {
    n = LLVMFuzzerMutate(data, size, max_size);
  }
  if (rng() % 4 != 0) repair_checksums(data, n);
  return n;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tessera_session_options_t* opts = tessera_fuzz::options("dnnl,xnnpack,example,native", 16u << 20);
  tessera_session_t* s = nullptr;
  if (!tessera_fuzz::ok(tessera_session_create_from_buffer(tessera_fuzz::env(), data, size, opts, &s))) return 0;
  tessera_fuzz::run_on_random_inputs(s);
  tessera_session_release(s);
  return 0;
}
