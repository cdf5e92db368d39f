// libFuzzer harness: the placement cache reader (the per-machine tune cache, JSON). Each input is written as the
// cache file and opened; a measurement is added and saved, which merges it with what the file holds (or replaces a
// file that is not a cache), and the file is opened again: the measurement must be there.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "backends/backend.h"
#include "backends/native/native_backend.h"
#include "partition/tune.h"

namespace {

std::string cache_path() {
  static const std::string path = [] {
    // In memory where the machine has it: every input writes, locks, renames and reads the file.
    char shm[] = "/dev/shm/tessera-fuzz-XXXXXX", tmp[] = "/tmp/tessera-fuzz-XXXXXX";
    const char* dir = mkdtemp(shm);
    if (!dir) dir = mkdtemp(tmp);
    if (!dir) std::abort();
    return std::string(dir) + "/tune.json";
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tessera::install_native_backend();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tessera::partition::TuneCache;
  static auto native = tessera::find_backend("native");
  if (!native.ok()) std::abort();
  const std::string path = cache_path();
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  std::string warning;
  TuneCache cache = TuneCache::Open(path, &warning);
  (void)cache.get("region", **native, "machine");
  (void)cache.machine("machine");
  (void)cache.verdict("model");
  cache.put("fuzz-region", **native, "fuzz-machine", 12.5, 3);
  cache.put_verdict("fuzz-model", "native");
  if (!cache.save().ok()) return 0;
  TuneCache again = TuneCache::Open(path, &warning);
  auto hit = again.get("fuzz-region", **native, "fuzz-machine");
  if (!hit || hit->us != 12.5 || again.verdict("fuzz-model") != std::optional<std::string>("native")) {
    std::fprintf(stderr, "a saved measurement was lost: %s\n", warning.c_str());
    std::abort();
  }
  return 0;
}
