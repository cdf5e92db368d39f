// Micro-benchmark of the native Conv kernel on typical CNN layers: prints
// GFLOP/s with 1 thread (wall and thread-CPU time, the latter unaffected by
// other processes on a shared machine) and with 2 threads (wall). PRODUCTS=bf16|fp16: the kernel's products in that
// precision where the CPU has it. Not built
// by CMake; after building build-<dir>/libtessera_core.a:
//   g++ -std=c++20 -O3 -march=native -DONNX_ML=1 -DONNX_NAMESPACE=onnx -Isrc bench/conv_bench.cc
//       -Wl,--start-group build/libtessera_*.a -Wl,--end-group -lonnx -lonnx_proto -lprotobuf -lpthread
//       -o /tmp/conv_bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ops/op_registry.h"
#include "util/thread_pool.h"

using namespace tessera;

namespace {

struct Layer {
  const char* name;
  int64_t n, c, h, w, m, k, stride, pad, group;
  int64_t wide = 0;  // width when it differs from h
  int64_t kwide = 0;  // kernel width when it differs from k
};

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Attribute ints(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::kInts;
  a.ints = std::move(v);
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  // Optional argument: run only layers whose name contains it.
  const std::string filter = argc > 1 ? argv[1] : "";
  const Layer layers[] = {
      {"resnet 3x3 256->64 @56", 1, 256, 56, 56, 64, 3, 1, 1, 1},
      {"resnet 3x3 64->64 @56", 1, 64, 56, 56, 64, 3, 1, 1, 1},
      {"resnet 1x1 256->64 @56", 1, 256, 56, 56, 64, 1, 1, 0, 1},
      {"resnet 1x1 64->256 @56", 1, 64, 56, 56, 256, 1, 1, 0, 1},
      {"resnet 3x3 256->256 @14", 1, 256, 14, 14, 256, 3, 1, 1, 1},
      {"resnet 3x3 128->128 @28", 1, 128, 28, 28, 128, 3, 1, 1, 1},
      {"resnet 3x3 512->512 @7", 1, 512, 7, 7, 512, 3, 1, 1, 1},
      {"resnet stem 7x7/2 3->64", 1, 3, 224, 224, 64, 7, 2, 3, 1},
      {"mobilenet dw 3x3 32 @112", 1, 32, 112, 112, 32, 3, 1, 1, 32},
      {"mobilenet dw 3x3/2 96 @112", 1, 96, 112, 112, 96, 3, 2, 1, 96},
      {"mobilenet dw 3x3 144 @56", 1, 144, 56, 56, 144, 3, 1, 1, 144},
      {"mobilenet 1x1 144->24 @56", 1, 144, 56, 56, 24, 1, 1, 0, 1},
      {"crnn 3x3 3->32 @48x1320", 1, 3, 48, 48, 32, 3, 1, 1, 1, 1320},
      {"crnn 3x3 32->64 @24x660", 1, 32, 24, 24, 64, 3, 1, 1, 1, 660},
      {"crnn 3x3 128->128 @12x330", 1, 128, 12, 12, 128, 3, 1, 1, 1, 330},
      {"crnn 3x3 128->256 @6x330", 1, 128, 6, 6, 256, 3, 1, 1, 1, 330},
      {"crnn 3x3 128->128 @12x20", 1, 128, 12, 12, 128, 3, 1, 1, 1, 20},
      {"crnn 3x1 256->256 @3x330", 1, 256, 3, 3, 256, 3, 1, 0, 1, 330, 1},
      {"crnn 3x3 3->32 @48x200", 1, 3, 48, 48, 32, 3, 1, 1, 1, 200},
      {"crnn 3x3 32->64 @24x100", 1, 32, 24, 24, 64, 3, 1, 1, 1, 100},
      {"crnn 3x3 64->128 @12x50", 1, 64, 12, 12, 128, 3, 1, 1, 1, 50},
      {"crnn 3x3 128->128 @12x50", 1, 128, 12, 12, 128, 3, 1, 1, 1, 50},
      {"crnn 3x3 128->256 @6x50", 1, 128, 6, 6, 256, 3, 1, 1, 1, 50},
      {"crnn 3x1 256->256 @3x50", 1, 256, 3, 3, 256, 3, 1, 0, 1, 50, 1},
      {"crnn 3x1 256->256 @3x96", 1, 256, 3, 3, 256, 3, 1, 0, 1, 96, 1},
      {"crnn 3x3 64->128 @12x96", 1, 64, 12, 12, 128, 3, 1, 1, 1, 96},
      {"crnn 3x3 128->128 @12x16", 1, 128, 12, 12, 128, 3, 1, 1, 1, 16},
      {"crnn 3x3 128->256 @6x16", 1, 128, 6, 6, 256, 3, 1, 1, 1, 16},
      {"crnn 3x3 32->64 @24x32", 1, 32, 24, 24, 64, 3, 1, 1, 1, 32},
      {"detector 3x3/2 3->16 @640", 1, 3, 640, 640, 16, 3, 2, 1, 1},
      {"detector 3x3/2 16->32 @320", 1, 16, 320, 320, 32, 3, 2, 1, 1},
      {"detector 3x3/2 3->16 @352x1280", 1, 3, 352, 352, 16, 3, 2, 1, 1, 1280},
      {"detector 3x3/2 3->16 @992x384", 1, 3, 992, 992, 16, 3, 2, 1, 1, 384},
      {"detector 3x3/2 16->32 @176x640", 1, 16, 176, 176, 32, 3, 2, 1, 1, 640},
      {"detector 3x3/2 16->32 @640x176", 1, 16, 640, 640, 32, 3, 2, 1, 1, 176},
      {"detector 3x3/2 32->64 @88x320", 1, 32, 88, 88, 64, 3, 2, 1, 1, 320},
      {"detector 3x3/2 32->64 @320x88", 1, 32, 320, 320, 64, 3, 2, 1, 1, 88},
      {"detector 3x3 64->64 @44x160", 1, 64, 44, 44, 64, 3, 1, 1, 1, 160},
      {"detector 3x3 64->64 @160x44", 1, 64, 160, 160, 64, 3, 1, 1, 1, 44},
      {"detector 3x3 64->64 @80", 1, 64, 80, 80, 64, 3, 1, 1, 1},
      {"detector 3x3/2 64->128 @80", 1, 64, 80, 80, 128, 3, 2, 1, 1},
      {"unet 3x3 3->16 @256", 1, 3, 256, 256, 16, 3, 1, 1, 1},
      {"unet 3x3 16->16 @256", 1, 16, 256, 256, 16, 3, 1, 1, 1},
      {"unet 3x3 16->32 @128", 1, 16, 128, 128, 32, 3, 1, 1, 1},
      {"unet 3x3 32->64 @64", 1, 32, 64, 64, 64, 3, 1, 1, 1},
      {"unet 3x3 32->16 @256", 1, 32, 256, 256, 16, 3, 1, 1, 1},
      {"unet 3x3 32->32 @128", 1, 32, 128, 128, 32, 3, 1, 1, 1},
      {"unet 3x3 128->256 @16", 1, 128, 16, 16, 256, 3, 1, 1, 1},
      {"unet 3x3 256->256 @16", 1, 256, 16, 16, 256, 3, 1, 1, 1},
      {"unet 3x3 64->32 @128", 1, 64, 128, 128, 32, 3, 1, 1, 1},
      {"tdnn 1x1 1536->1536 @200", 1, 1536, 1, 1, 1536, 1, 1, 0, 1, 200},
      {"tdnn 1x1 512->512 @200", 1, 512, 1, 1, 512, 1, 1, 0, 1, 200},
      {"unet 3x3 128->64 @64", 1, 128, 64, 64, 64, 3, 1, 1, 1},
      {"unet 3x3 256->128 @32", 1, 256, 32, 32, 128, 3, 1, 1, 1},
  };
  ThreadPool p1(1), p2(2);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::printf("%-30s %9s %9s %9s %9s\n", "layer", "GFLOP", "1t wall", "1t cpu", "2t wall");
  for (const Layer& l : layers) {
    if (!filter.empty() && std::string(l.name).find(filter) == std::string::npos) continue;
    const int64_t wide = l.wide ? l.wide : l.w;
    const int64_t kw = l.kwide ? l.kwide : l.k;
    const int64_t oh = (l.h + 2 * l.pad - l.k) / l.stride + 1, ow = (wide + 2 * l.pad - kw) / l.stride + 1;
    Tensor x(DType::kFloat32, {l.n, l.c, l.h, wide}), w(DType::kFloat32, {l.m, l.c / l.group, l.k, kw}),
        b(DType::kFloat32, {l.m}), y(DType::kFloat32, {l.n, l.m, oh, ow});
    for (Tensor* t : {&x, &w, &b}) {
      for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = dist(rng);
    }
    Node node;
    node.name = "conv";
    node.op_type = "Conv";
    node.inputs = {"x", "w", "b"};
    node.outputs = {"y"};
    node.attrs["kernel_shape"] = ints({l.k, kw});
    node.attrs["strides"] = ints({l.stride, l.stride});
    node.attrs["pads"] = ints({l.pad, l.pad, l.pad, l.pad});
    Attribute g;
    g.kind = Attribute::Kind::kInt;
    g.i = l.group;
    node.attrs["group"] = g;
    KernelInit init{node, 13, {}, {nullptr, &w, &b}};
    const char* products = std::getenv("PRODUCTS");  // bf16 or fp16: packed for those products where the CPU can
    init.products = kernels::products_named(products ? products : "");
    for (const Tensor* t : {&x, &w, &b}) init.in_info.push_back(ValueInfo{t->dtype(), Shape::FromDims(t->dims())});
    auto kernel = create_kernel(*OpRegistry::instance().find("", "Conv"), init);
    if (!kernel.ok()) {
      std::printf("%s: %s\n", l.name, kernel.status().message().c_str());
      return 1;
    }
    const double flops = 2.0 * static_cast<double>(l.n * l.m * oh * ow) * static_cast<double>(l.c / l.group * l.k * kw);
    // CONV_BENCH_INPUT: what happens to the input before each timed run, as inside a model. "pool": rewritten by
    // the pool split in flat halves (an elementwise op); "rows": rewritten by the pool split by rows of every plane
    // (a convolution by rows); "caller": rewritten by the calling thread; "evict": 64 MiB touched, nothing cached;
    // unset: left as it is (hot in every cache).
    const char* mode_env = std::getenv("CONV_BENCH_INPUT");
    const std::string mode = mode_env ? mode_env : "";
    static std::vector<float> evict(size_t{16} << 20);
    auto prepare = [&](ThreadPool* pool) {
      float* xp = x.data<float>();
      const int64_t n = x.numel(), plane = l.h * wide, planes = n / plane;
      if (mode == "pool") {
        pool->parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) xp[i] = xp[i] * 0.5f + 0.25f;
        });
      } else if (mode == "rows") {
        const int64_t t = pool->num_threads();
        pool->parallel_for(t, 1, [&](int64_t b, int64_t e) {
          for (int64_t k = b; k < e; ++k) {
            for (int64_t p = 0; p < planes; ++p) {
              for (int64_t i = p * plane + k * l.h / t * wide; i < p * plane + (k + 1) * l.h / t * wide; ++i) {
                xp[i] = xp[i] * 0.5f + 0.25f;
              }
            }
          }
        });
      } else if (mode == "caller") {
        for (int64_t i = 0; i < n; ++i) xp[i] = xp[i] * 0.5f + 0.25f;
      } else if (mode == "evict") {
        for (float& v : evict) v += 1.f;
      }
    };
    auto measure = [&](ThreadPool* pool, bool cpu) {
      KernelContext ctx(node, {&x, &w, &b}, {&y}, pool, nullptr);
      (void)kernel.value()->run(ctx);
      const int runs = std::clamp(static_cast<int>(3e10 / flops), 5, 3000);
      std::vector<double> times;
      for (int r = 0; r < runs; ++r) {
        prepare(pool);
        const double t0 = cpu ? thread_cpu_seconds() : wall_seconds();
        (void)kernel.value()->run(ctx);
        times.push_back((cpu ? thread_cpu_seconds() : wall_seconds()) - t0);
      }
      std::sort(times.begin(), times.end());
      // The best run, or with CONV_BENCH_MEDIAN=1 the median (what a model's profile reports per node).
      return flops / (std::getenv("CONV_BENCH_MEDIAN") ? times[times.size() / 2] : times.front()) / 1e9;
    };
    const double w1 = measure(&p1, false), c1 = measure(&p1, true), w2 = measure(&p2, false);
    std::printf("%-30s %9.3f %9.1f %9.1f %9.1f\n", l.name, flops / 1e9, w1, c1, w2);
  }
  return 0;
}
