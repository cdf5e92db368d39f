// A loaded engine: the program, its constants and buffers, one XNNPACK
// runtime per segment. Everything is built in load(); run() converts layouts
// at the boundary and invokes the runtimes. A runtime is not safe for
// concurrent invokes, so the plugin leaves TESSERA_BACKEND_FLAG_CONCURRENT_RUN
// off and the host serializes run() per engine.
#pragma once

#include <xnnpack.h>

#include <memory>
#include <vector>

#include "program.h"
#include "runtime_support.h"

namespace tessera_xnn {

class Engine {
 public:
  // Fails with TESSERA_ERROR_INCOMPATIBLE_BLOB (bad blob),
  // TESSERA_ERROR_INVALID_ARGUMENT (a missing or mismatched constant) or
  // TESSERA_ERROR_COMPILE_FAILED (XNNPACK refused the subgraph).
  Engine(Program program, const tessera_named_tensor_t* constants, size_t num_constants, int num_threads);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void run(const tessera_tensor_t* inputs, size_t num_inputs, tessera_tensor_t* outputs, size_t num_outputs);
  const Program& program() const { return program_; }
  // Host memory the engine holds of its own, estimated: its buffers and converted constants (exact), the packed
  // copies XNNPACK makes of the constants (taken as their size) and XNNPACK's workspace for the values inside its
  // segments (taken as their sum, an upper bound: XNNPACK 2022 says neither). The ABI's engine_bytes.
  uint64_t bytes() const { return bytes_; }

 private:
  struct Segment {
    xnn_runtime_t runtime = nullptr;
    std::vector<xnn_external_value> externals;
    std::vector<std::pair<size_t, int32_t>> host_outputs;  // (index in externals, region output)
    bool set_up = false;
  };
  void build_constants(const tessera_named_tensor_t* constants, size_t num_constants);
  void build_segment(const Step& step, bool yield);
  void run_step(const Step& step, uint32_t flags);  // a conversion or an own loop
  pthreadpool_t pool() const { return pool_.get(); }

  Program program_;
  std::shared_ptr<pthreadpool> pool_;  // before segments_: runtimes go first
  std::vector<PaddedBuffer> data_;     // per tensor: constant data or buffer (empty otherwise)
  std::vector<const void*> static_;    // per constant tensor: what XNNPACK reads (data_, or the host's data)
  std::vector<Segment> segments_;      // per kSegment step, in order
  // The last parallel work of a run lets the pool's threads sleep instead of
  // spinning through the host's next (native) region: the last NHWC export,
  // else the last step. -1: none of that kind.
  int yield_export_ = -1, yield_step_ = -1;
  uint64_t bytes_ = 0;
};

}  // namespace tessera_xnn
