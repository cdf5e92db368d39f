// libFuzzer harness: ONNX import through the whole compile path. Each input is a serialized ModelProto; it is
// imported and optimised, offered to every installed plugin (their capability queries), and, when it loads, run once
// on random inputs, so that run-time bugs show too. One input in eight (chosen by its bytes, so reruns agree) is
// also placed across every backend, its engines compiled and loaded, and run through them: that path costs ten
// times more per input. Models with a Loop or Scan are compiled but not run: their trip counts are the model's to
// choose.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "api/session_setup.h"
#include "backends/backend.h"
#include "backends/native/native_backend.h"
#include "onnx/onnx_export.h"
#include "onnx_mutator.h"

namespace {

using namespace tessera;

// A status a user's input may cause is fine; kInternal is a bug by definition: stop like a crash.
template <class T>
bool ok(const Expected<T>& e) {
  if (e.ok()) return true;
  if (e.status().code() == ErrorCode::kInternal) {
    std::fprintf(stderr, "internal error: %s\n", e.status().message().c_str());
    std::abort();
  }
  return false;
}

const std::vector<std::shared_ptr<const Backend>>& plugins() {
  static const std::vector<std::shared_ptr<const Backend>> p = [] {
    std::vector<std::shared_ptr<const Backend>> found;
    for (const char* name : {"dnnl", "xnnpack", "example"}) {
      auto b = find_backend(name);
      if (!b.ok()) {
        std::fprintf(stderr, "%s\n", b.status().message().c_str());
        std::abort();
      }
      found.push_back(*b);
    }
    return found;
  }();
  return p;
}

void run_once(InferenceSession& s) {
  auto inputs = api::random_inputs(s, 7);
  if (!ok(inputs)) return;
  (void)ok(s.run(*inputs));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // A fuzzed model may name external data: it is looked up relative to the working directory, an empty one.
  char dir[] = "/tmp/tessera-fuzz-XXXXXX";
  if (!mkdtemp(dir) || chdir(dir) != 0) std::abort();
  install_native_backend();
  plugins();
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  return tessera_fuzz::mutate_onnx_model(data, size, max_size, seed);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const api::ModelSource model{"", std::string(reinterpret_cast<const char*>(data), size)};
  auto graph = api::load_graph(model, {}, "fuzzing");
  if (!ok(graph)) return 0;
  auto exported = export_onnx_bytes(*graph);
  if (!ok(exported)) return 0;
  for (const auto& b : plugins()) (void)b->capability(*exported, static_cast<int>(graph->nodes.size()));
  const bool run = !tessera_fuzz::onnx_model_has_loops(data, size);
  api::CompileOptions o;
  o.policy = PlacementPolicy::kPriority;
  o.measure = MeasureMode::kOff;
  o.tune_cache = "";
  o.threads = 1;
  o.max_memory = 16u << 20;
  SessionOptions so;
  so.num_threads = 1;
  so.max_memory = o.max_memory;
  const bool everywhere = std::hash<std::string>()(model.bytes) % 8 == 0;
  for (const char* backends : {"native", "dnnl,xnnpack,example,native"}) {
    if (backends[0] != 'n' && !everywhere) break;
    o.backends = backends;
    auto session = api::open_session(model, o, so);
    if (ok(session) && run) run_once(**session);
  }
  return 0;
}
