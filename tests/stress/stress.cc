// Long-running checks of the runtime, through the public C++ API (tessera.hpp over libtessera.so):
//
//   tessera_stress soak  [--threads T] [--runs N] [--backends B1,B2,..] [--max-rss-growth PCT]
//                        [--session-threads S] MODEL.onnx...
//     One session per model and backend ("B,native" with priority placement: B takes what it claims, native the
//     rest). T threads each make N runs, going round the sessions. Every output must be bit-identical to the
//     session's serial run on the same inputs, and the resident set after all runs at most PCT % (default 5) above
//     the resident set once every thread has made N/10 runs. Each session runs on S threads of its own (default 1).
//
//   tessera_stress shapes [--threads T] [--runs N] [--shapes K] [--first-size F] [--backends B1,B2,..]
//                         [--session-threads S] MODEL.onnx...
//     For models with symbolic input dims: K input shapes, shape k giving every symbolic dim the size F + k (default
//     24 shapes from size 1: more than a session keeps plans for). T threads each make N runs at shapes they go
//     round, so plans are built (in the background), shared and evicted while other threads run; every output must
//     match the serial run at its shape (within rtol 1e-4, atol 1e-5: a shape's own plan fuses, the generic one,
//     which runs a shape while its plan is built, does not). With an engine backend, shapes are compiled as buckets
//     in the background after their first run (bucket payback 0), and the threads go on past N runs until one has
//     been swapped in and run on (at most two minutes).
//
//   tessera_stress leaks [--iterations N] [--backends B1,B2,..] [--session-threads S] MODEL.onnx...
//     N times, for each model and backend: a session from the .onnx file and one from its compiled .tsr, each run
//     once and released. Built with AddressSanitizer, LeakSanitizer then checks that nothing was left behind.
//
// Exit 0 when every check holds, 1 when one fails (a line says which), 2 on bad arguments or an unusable model.
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tessera/tessera.hpp"

extern "C" int __lsan_do_recoverable_leak_check() __attribute__((weak));

namespace {

struct Args {
  std::string mode;
  int threads = 8, runs = 10000, iterations = 1000, shapes = 24, first_size = 1;
  int session_threads = 1;  // each session's own threads (native pool, engines' pools)
  double max_rss_growth = 5;
  std::vector<std::string> backends = {"dnnl", "xnnpack", "native"};
  std::vector<std::string> models;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "tessera_stress: %s\nusage: tessera_stress soak|shapes|leaks [options] MODEL.onnx...\n",
               why.c_str());
  std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> r;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) r.push_back(item);
  }
  return r;
}

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) usage("no mode");
  a.mode = argv[1];
  if (a.mode != "soak" && a.mode != "shapes" && a.mode != "leaks") usage("unknown mode '" + a.mode + "'");
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    auto number = [&]() {
      const std::string v = value();
      char* end = nullptr;
      const double d = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || d < 0) usage(arg + ": '" + v + "' is not a non-negative number");
      return d;
    };
    if (arg == "--threads") a.threads = static_cast<int>(number());
    else if (arg == "--session-threads") a.session_threads = static_cast<int>(number());
    else if (arg == "--runs") a.runs = static_cast<int>(number());
    else if (arg == "--iterations") a.iterations = static_cast<int>(number());
    else if (arg == "--shapes") a.shapes = std::max(1, static_cast<int>(number()));
    else if (arg == "--first-size") a.first_size = static_cast<int>(number());
    else if (arg == "--max-rss-growth") a.max_rss_growth = number();
    else if (arg == "--backends") a.backends = split(value());
    else if (arg.rfind("--", 0) == 0) usage("unknown option " + arg);
    else a.models.push_back(arg);
  }
  if (a.models.empty()) usage("no model");
  if (a.threads < 1 || a.runs < 10 || a.backends.empty()) usage("--threads >= 1, --runs >= 10 and a backend");
  return a;
}

std::string base_name(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

tessera::SessionOptions options_for(const std::string& backend, int threads) {
  tessera::SessionOptions o;
  o.Backends(backend == "native" ? "native" : backend + ",native")
      .Placement("priority")
      .Tune(TESSERA_TUNE_OFF)
      .TuneCache("")
      .Threads(threads);
  return o;
}

// Resident set in KiB (/proc/self/status VmRSS).
long rss_kib() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return 0;
}

// Bytes malloc has handed out and not had back (mallinfo2's uordblks + hblkhd): what RSS would be without
// fragmentation.
double heap_mib() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks + m.hblkhd) / (1 << 20);
}

struct Case {
  std::string what;  // "model on backend"
  std::unique_ptr<tessera::Session> session;
  std::vector<std::string> input_names;
  std::vector<tessera::Value> inputs;
  std::vector<tessera::Value> expected;  // the serial run's outputs

  std::vector<std::pair<std::string, const tessera::Value*>> feeds() const {
    std::vector<std::pair<std::string, const tessera::Value*>> f;
    for (size_t i = 0; i < inputs.size(); ++i) f.emplace_back(input_names[i], &inputs[i]);
    return f;
  }
};

bool same_bits(tessera::Value& a, tessera::Value& b) {
  const size_t n = tessera_value_size_bytes(a.get());
  return n == tessera_value_size_bytes(b.get()) && a.Dims() == b.Dims() &&
         std::memcmp(tessera_value_data(a.get()), tessera_value_data(b.get()), n) == 0;
}

// Outputs of one shape from two plans (the shape's own, fused, or the generic one) agree to float rounding: within
// rtol 1e-4 and atol 1e-5 for float32, bit for bit otherwise. *worst receives the largest difference seen.
bool close(tessera::Value& a, tessera::Value& b, double* worst) {
  if (a.Dims() != b.Dims() || a.DType() != b.DType() || a.SizeBytes() != b.SizeBytes()) return false;
  if (a.DType() != TESSERA_DTYPE_FLOAT32) return same_bits(a, b);
  const float* x = a.Data<float>();
  const float* y = b.Data<float>();
  bool ok = true;
  for (size_t i = 0; i < a.SizeBytes() / sizeof(float); ++i) {
    const double d = std::fabs(static_cast<double>(x[i]) - y[i]);
    *worst = std::max(*worst, d);
    ok = ok && d <= 1e-5 + 1e-4 * std::fabs(static_cast<double>(y[i]));
  }
  return ok;
}

int soak(const Args& a) {
  tessera::Env env;
  std::vector<Case> cases;
  for (const auto& model : a.models) {
    for (const auto& backend : a.backends) {
      Case c;
      c.what = base_name(model) + " on " + backend;
      const tessera::SessionOptions opts = options_for(backend, a.session_threads);
      c.session = std::make_unique<tessera::Session>(env, model, &opts);
      for (const auto& info : c.session->Inputs()) c.input_names.push_back(info.name);
      c.inputs = c.session->RandomInputs(1);
      c.expected = c.session->Run(c.feeds());
      cases.push_back(std::move(c));
    }
  }
  std::atomic<long> mismatches{0}, failures{0};
  std::atomic<int> warmed{0};
  std::atomic<long> rss_warm{0};
  double heap_warm = 0;
  const int warm_runs = a.runs / 10;
  std::vector<std::thread> threads;
  for (int t = 0; t < a.threads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < a.runs; ++r) {
        Case& c = cases[static_cast<size_t>(t + r) % cases.size()];
        try {
          std::vector<tessera::Value> out = c.session->Run(c.feeds());
          for (size_t i = 0; i < out.size(); ++i) {
            if (!same_bits(out[i], c.expected[i])) {
              if (mismatches++ == 0) std::fprintf(stderr, "soak: %s: output %zu differs from the serial run\n", c.what.c_str(), i);
            }
          }
        } catch (const tessera::Error& e) {
          if (failures++ == 0) std::fprintf(stderr, "soak: %s: %s\n", c.what.c_str(), e.what());
        }
        if (r + 1 == warm_runs && ++warmed == a.threads) {
          rss_warm = rss_kib();
          heap_warm = heap_mib();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const long rss_end = rss_kib();
  const double growth = rss_warm > 0 ? 100.0 * (static_cast<double>(rss_end) / static_cast<double>(rss_warm.load()) - 1) : 0;
  const long total = static_cast<long>(a.threads) * a.runs;
  std::printf("soak: %d threads x %d runs = %ld runs over %zu sessions (%zu models x %zu backends): %ld outputs "
              "differ from serial runs, %ld runs failed; RSS %.1f MiB after %d runs per thread, %.1f MiB after %d "
              "(%+.2f %%, limit %.1f %%); heap in use %.1f -> %.1f MiB\n",
              a.threads, a.runs, total, cases.size(), a.models.size(), a.backends.size(), mismatches.load(),
              failures.load(), static_cast<double>(rss_warm.load()) / 1024, warm_runs,
              static_cast<double>(rss_end) / 1024, a.runs, growth, a.max_rss_growth, heap_warm, heap_mib());
  return mismatches == 0 && failures == 0 && growth <= a.max_rss_growth ? 0 : 1;
}

// Inputs of `session` with every symbolic dim of size `size`: floats from a fixed sequence, other dtypes 0.
std::vector<tessera::Value> inputs_sized(const tessera::Session& session, int64_t size) {
  std::vector<tessera::Value> values;
  uint32_t state = static_cast<uint32_t>(size) * 2654435761u;
  for (const auto& info : session.Inputs()) {
    std::vector<int64_t> dims = info.dims;
    for (int64_t& d : dims) d = d < 0 ? size : d;
    values.push_back(tessera::Value::Create(info.dtype, dims));
    if (info.dtype != TESSERA_DTYPE_FLOAT32) continue;
    float* p = values.back().Data<float>();
    for (size_t i = 0; i < values.back().SizeBytes() / sizeof(float); ++i) {
      state = state * 1664525u + 1013904223u;
      p[i] = static_cast<float>(state >> 8) / static_cast<float>(1u << 23) - 1.f;
    }
  }
  return values;
}

int shapes(const Args& a) {
  tessera::Env env;
  struct Shaped {
    std::vector<tessera::Value> inputs, expected;
  };
  long mismatches = 0, failures = 0, plans = 0, generic = 0, sessions = 0, compiled = 0, on_buckets = 0;
  double worst = 0;
  for (const auto& model : a.models) {
    for (const auto& backend : a.backends) {
      tessera::SessionOptions opts = options_for(backend, a.session_threads);
      opts.BucketPaybackMs(0);  // every shape earns a bucket at once, so that swaps overlap the runs
      tessera::Session session(env, model, &opts);
      std::vector<std::string> names;
      bool symbolic = false;
      for (const auto& info : session.Inputs()) {
        names.push_back(info.name);
        for (int64_t d : info.dims) symbolic = symbolic || d < 0;
      }
      if (!symbolic) usage("'" + model + "' has no symbolic input dim");
      auto feeds = [&](const std::vector<tessera::Value>& v) {
        std::vector<std::pair<std::string, const tessera::Value*>> f;
        for (size_t i = 0; i < v.size(); ++i) f.emplace_back(names[i], &v[i]);
        return f;
      };
      std::vector<Shaped> cases(static_cast<size_t>(a.shapes));
      for (int k = 0; k < a.shapes; ++k) {
        cases[static_cast<size_t>(k)].inputs = inputs_sized(session, a.first_size + k);
        cases[static_cast<size_t>(k)].expected = session.Run(feeds(cases[static_cast<size_t>(k)].inputs));
      }
      const tessera::Session::PlanCounts before = session.Plans();
      std::atomic<long> differ{0}, failed{0};
      std::mutex worst_mu;
      std::vector<std::thread> threads;
      // With engines, the threads go on past --runs until a bucket compiled in the background has been swapped in
      // (at most two minutes), so that runs overlap the swap.
      const bool want_bucket = backend != "native";
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
      auto more = [&](int r) {
        if (r < a.runs) return true;
        return want_bucket && session.Plans().bucket == before.bucket && std::chrono::steady_clock::now() < deadline;
      };
      for (int t = 0; t < a.threads; ++t) {
        threads.emplace_back([&, t] {
          for (int r = 0; more(r); ++r) {
            Shaped& c = cases[static_cast<size_t>(t * 7 + r * 5) % cases.size()];
            try {
              std::vector<tessera::Value> out = session.Run(feeds(c.inputs));
              for (size_t i = 0; i < out.size(); ++i) {
                double d = 0;
                const bool ok = close(out[i], c.expected[i], &d);
                {
                  std::lock_guard<std::mutex> lock(worst_mu);
                  worst = std::max(worst, d);
                }
                if (!ok && differ++ == 0) {
                  std::fprintf(stderr, "shapes: %s on %s: output %zu differs from the serial run\n",
                               base_name(model).c_str(), backend.c_str(), i);
                }
              }
            } catch (const tessera::Error& e) {
              if (failed++ == 0) std::fprintf(stderr, "shapes: %s on %s: %s\n", base_name(model).c_str(),
                                              backend.c_str(), e.what());
            }
          }
        });
      }
      for (auto& th : threads) th.join();
      mismatches += differ;
      failures += failed;
      const tessera::Session::PlanCounts after = session.Plans();
      plans += static_cast<long>(after.built - before.built);
      generic += static_cast<long>(after.generic - before.generic);
      compiled += static_cast<long>(after.compiled - before.compiled);
      on_buckets += static_cast<long>(after.bucket - before.bucket);
      ++sessions;
    }
  }
  std::printf("shapes: %d threads x %d runs on each of %ld sessions, %d input shapes each: %ld outputs differ from "
              "serial runs (largest difference %.3g), %ld runs failed; %ld plans built while they ran, %ld runs on the "
              "generic plan meanwhile; %ld buckets compiled in the background, %ld runs on them\n",
              a.threads, a.runs, sessions, a.shapes, mismatches, worst, failures, plans, generic, compiled, on_buckets);
  return mismatches == 0 && failures == 0 ? 0 : 1;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) usage("cannot read '" + path + "'");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

int leaks(const Args& a) {
  tessera::Env env;
  struct Target {
    std::string model, artifact;
    tessera::SessionOptions opts;
  };
  std::vector<Target> targets;
  for (const auto& model : a.models) {
    for (const auto& backend : a.backends) {
      Target t{model, "", options_for(backend, a.session_threads)};
      t.artifact = tessera::CompileBuffer(env, read_file(model), &t.opts);
      targets.push_back(std::move(t));
    }
  }
  long rss_first = 0;
  int sessions = 0;
  for (int i = 0; i < a.iterations; ++i) {
    for (const Target& t : targets) {
      for (int from_artifact = 0; from_artifact < 2; ++from_artifact) {
        tessera::Session s = from_artifact ? tessera::Session(env, t.artifact.data(), t.artifact.size(), &t.opts)
                                           : tessera::Session(env, t.model, &t.opts);
        std::vector<tessera::Value> inputs = s.RandomInputs(static_cast<uint64_t>(i));
        std::vector<std::pair<std::string, const tessera::Value*>> feeds;
        const auto infos = s.Inputs();
        for (size_t k = 0; k < inputs.size(); ++k) feeds.emplace_back(infos[k].name, &inputs[k]);
        (void)s.Run(feeds);
        ++sessions;
      }
    }
    if (i == 0) rss_first = rss_kib();
  }
  const int leaked = __lsan_do_recoverable_leak_check ? __lsan_do_recoverable_leak_check() : 0;
  std::printf("leaks: %d sessions loaded, run and released (%zu models x %zu backends x %d iterations x .onnx/.tsr); "
              "LeakSanitizer: %s; RSS %.1f MiB after the first iteration, %.1f MiB after the last\n",
              sessions, a.models.size(), a.backends.size(), a.iterations,
              __lsan_do_recoverable_leak_check ? (leaked ? "leaks found" : "no leaks") : "not in this build",
              static_cast<double>(rss_first) / 1024, static_cast<double>(rss_kib()) / 1024);
  return leaked ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    return a.mode == "soak" ? soak(a) : a.mode == "shapes" ? shapes(a) : leaks(a);
  } catch (const tessera::Error& e) {
    std::fprintf(stderr, "tessera_stress: %s\n", e.what());
    return 2;
  }
}
