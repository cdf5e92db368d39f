// Device measurements and region prices (see cuda_cost.h).
//
// Per step: max(flops / measured GEMM flops, bytes / measured bandwidth) +
// one launch; cuDNN's convolutions are priced at the GEMM's rate. The
// region's graph inputs cross host -> device and its outputs device -> host
// at the measured PCIe rates: the host keeps values on the device between
// regions of this backend, but an estimate of one region cannot know its
// neighbours, and a boundary that is really crossed must be charged.
#include "cuda_cost.h"

#include <chrono>
#include <cstdlib>
#include <vector>

#include "cuda_device.h"
#include "cuda_engine.h"
#include "cuda_lower.h"

namespace tessera_cuda {

using tessera_plugin::fail;
using tessera_plugin::Failure;

namespace {

// Milliseconds of `reps` calls of fn() on the stream, timed with events after one warm-up call.
template <class Fn>
double time_ms(ThreadContext& ctx, int reps, Fn&& fn) {
  cudaEvent_t a = nullptr, b = nullptr;
  check_cuda(cudaEventCreate(&a), "measure: cudaEventCreate");
  float ms = 0;
  try {
    check_cuda(cudaEventCreate(&b), "measure: cudaEventCreate");
    fn();
    check_cuda(cudaEventRecord(a, ctx.stream()), "measure: cudaEventRecord");
    for (int i = 0; i < reps; ++i) fn();
    check_cuda(cudaEventRecord(b, ctx.stream()), "measure: cudaEventRecord");
    check_cuda(cudaEventSynchronize(b), "measure: cudaEventSynchronize");
    check_cuda(cudaEventElapsedTime(&ms, a, b), "measure: cudaEventElapsedTime");
  } catch (...) {
    cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    throw;
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return static_cast<double>(ms) / reps;
}

DeviceFigures measure() {
  ThreadContext& ctx = thread_context();
  DeviceFigures f;
  const int64_t n = 1024;
  const size_t mat = static_cast<size_t>(n * n) * 4, big = size_t{64} << 20, pcie = size_t{16} << 20;
  std::vector<void*> bufs;
  auto alloc = [&](size_t bytes) {
    bufs.push_back(device_malloc(bytes, "measure"));
    check_cuda(cudaMemset(bufs.back(), 0, bytes), "measure: cudaMemset");
    return bufs.back();
  };
  try {
    float* a = static_cast<float*>(alloc(mat));
    float* b = static_cast<float*>(alloc(mat));
    float* d = static_cast<float*>(alloc(mat));
    GemmParams g;
    g.m = g.n = g.k = n;
    GemmPlan plan(g, nullptr, ctx, "measure");
    double gemm_ms = time_ms(ctx, 10, [&] { plan.run(ctx, a, b, d, "measure"); });
    f.flops_per_us = 2.0 * n * n * n / (gemm_ms * 1e3);
    void* x = alloc(big);
    void* y = alloc(big);
    double copy_ms = time_ms(ctx, 5, [&] {
      check_cuda(cudaMemcpyAsync(y, x, big, cudaMemcpyDeviceToDevice, ctx.stream()), "measure: cudaMemcpyAsync");
    });
    f.bytes_per_us = 2.0 * static_cast<double>(big) / (copy_ms * 1e3);
    double launch_ms = time_ms(ctx, 100, [&] {
      check_cuda(launch_fill(static_cast<float*>(x), 1, 0.0f, ctx.stream()), "measure: launch_fill");
    });
    f.launch_us = launch_ms * 1e3;
    // Pageable host memory, as the host's own buffers are.
    std::vector<char> host(pcie, 1);
    using Clock = std::chrono::steady_clock;
    check_cuda(cudaMemcpy(x, host.data(), pcie, cudaMemcpyHostToDevice), "measure: cudaMemcpy");
    Clock::time_point t0 = Clock::now();
    check_cuda(cudaMemcpy(x, host.data(), pcie, cudaMemcpyHostToDevice), "measure: cudaMemcpy");
    Clock::time_point t1 = Clock::now();
    check_cuda(cudaMemcpy(host.data(), x, pcie, cudaMemcpyDeviceToHost), "measure: cudaMemcpy");
    Clock::time_point t2 = Clock::now();
    f.h2d_bytes_per_us =
        static_cast<double>(pcie) / std::max(1e-3, std::chrono::duration<double, std::micro>(t1 - t0).count());
    f.d2h_bytes_per_us =
        static_cast<double>(pcie) / std::max(1e-3, std::chrono::duration<double, std::micro>(t2 - t1).count());
  } catch (...) {
    for (void* p : bufs) (void)cudaFree(p);
    throw;
  }
  for (void* p : bufs) (void)cudaFree(p);
  return f;
}

}  // namespace

const DeviceFigures& device_figures() {
  require_device();
  static const DeviceFigures figures = measure();  // a throw leaves it unset: the next call measures again
  return figures;
}

double estimate_region_us(const void* model, size_t size) {
  tessera_plugin::ModelView m(model, size);
  require_device();
  Program p;
  try {
    p = Lowering(m).lower();
  } catch (const Failure& f) {
    fail(TESSERA_ERROR_UNSUPPORTED, "no estimate: " + f.message);
  }
  const DeviceFigures& f = device_figures();
  double us = 0;
  for (const Step& s : p.steps) {
    us += std::max(s.flops / f.flops_per_us, s.bytes / f.bytes_per_us) + f.launch_us;
  }
  for (int v : p.inputs) us += static_cast<double>(p.values[static_cast<size_t>(v)].bytes()) / f.h2d_bytes_per_us;
  for (int v : p.outputs) us += static_cast<double>(p.values[static_cast<size_t>(v)].bytes()) / f.d2h_bytes_per_us;
  return us;
}

}  // namespace tessera_cuda
