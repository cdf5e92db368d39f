// libFuzzer harness: ONNX import through the whole compile path. Each input is a serialized ModelProto; it is
// imported, optimised, offered to every installed backend (their capability queries, and the compile and load of
// whatever they claim) and, when it loads, run once on random inputs so that run-time bugs show too. Models with a
// Loop or Scan are compiled but not run: their trip counts are the model's to choose.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_session.h"
#include "onnx_mutator.h"

namespace {

// A fuzzed model may name external data: it is looked up relative to the working directory, an empty one.
void enter_empty_directory() {
  char dir[] = "/tmp/tessera-fuzz-XXXXXX";
  if (mkdtemp(dir) && chdir(dir) == 0) return;
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  enter_empty_directory();
  tessera_fuzz::env();
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  return tessera_fuzz::mutate_onnx_model(data, size, max_size, seed);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tessera_session_options_t* opts = tessera_fuzz::options("dnnl,xnnpack,example,native", 16u << 20);
  tessera_session_t* s = nullptr;
  if (!tessera_fuzz::ok(tessera_session_create_from_buffer(tessera_fuzz::env(), data, size, opts, &s))) return 0;
  if (!tessera_fuzz::onnx_model_has_loops(data, size)) tessera_fuzz::run_on_random_inputs(s);
  tessera_session_release(s);
  return 0;
}
