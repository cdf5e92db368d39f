#include "api/accuracy.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "util/cpu_isa.h"

namespace tessera::api {

Expected<Precision> parse_precision(const std::string& text) {
  if (text.empty() || text == "fp32") return Precision::kFp32;
  if (text == "bf16") return Precision::kBf16;
  if (text == "fp16") return Precision::kFp16;
  return InvalidInput("--precision expects fp32, bf16 or fp16, got '" + text + "'");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    default: return "fp32";
  }
}

std::string precision_unavailable(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "";
    case Precision::kBf16:
      if (cpu::avx512_bf16()) return "";
      return std::string("--precision bf16 needs the AVX-512 BF16 dot products (vdpbf16ps), which this CPU lacks") +
             (cpu::forced_isa() ? " or TESSERA_ISA turns off" : "");
    case Precision::kFp16:
      if (cpu::avx512_fp16()) return "";
      return std::string("--precision fp16 needs AVX512-FP16 arithmetic (vfmadd231ph), which this CPU lacks") +
             (cpu::forced_isa() ? " or TESSERA_ISA turns off" : "") + "; bf16 keeps float32's range";
  }
  return "";
}

Expected<AccuracyBudget> parse_accuracy_budget(const std::string& text) {
  AccuracyBudget b;
  auto bad = [&](const std::string& why) {
    return InvalidInput("--accuracy-budget '" + text + "': " + why +
                        " (expected cos=MIN,abs=MAX,rel=MAX, any of them, e.g. cos=0.999)");
  };
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(at, end - at);
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return bad("'" + item + "' has no '='");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    char* stop = nullptr;
    const double v = std::strtod(value.c_str(), &stop);
    if (value.empty() || *stop != '\0' || !std::isfinite(v) || v < 0) return bad("'" + value + "' is not a limit");
    if (key == "cos" || key == "cosine") {
      if (v > 1) return bad("a cosine is at most 1");
      b.min_cosine = v;
    } else if (key == "abs") {
      b.max_abs = v;
    } else if (key == "rel") {
      b.max_rel = v;
    } else {
      return bad("unknown limit '" + key + "'");
    }
    at = end + 1;
  }
  if (b.empty()) return bad("no limit given");
  return b;
}

namespace {

// The elements of a tensor as doubles.
std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) {
      if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
        v[i] = static_cast<double>(static_cast<float>(p[i]));
      } else {
        v[i] = static_cast<double>(p[i]);
      }
    }
  });
  return v;
}

std::string fmt(double x, const char* f = "%.3g") {
  char buf[32];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

}  // namespace

Expected<std::vector<OutputAccuracy>> compare_outputs(const std::vector<std::string>& names,
                                                      const std::vector<Tensor>& got,
                                                      const std::vector<Tensor>& want) {
  if (got.size() != want.size() || got.size() != names.size()) {
    return InternalError("accuracy check: " + std::to_string(got.size()) + " outputs against " +
                    std::to_string(want.size()));
  }
  std::vector<OutputAccuracy> acc;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].dtype() != want[i].dtype() || got[i].dims() != want[i].dims()) {
      return InternalError("accuracy check: output '" + names[i] + "' is " + dtype_name(got[i].dtype()) +
                      dims_str(got[i].dims()) + " at reduced precision, " + dtype_name(want[i].dtype()) +
                      dims_str(want[i].dims()) + " at fp32");
    }
    OutputAccuracy a;
    a.name = names[i];
    a.elements = got[i].numel();
    a.compared = dtype_is_float(got[i].dtype());
    const std::vector<double> g = as_doubles(got[i]), w = as_doubles(want[i]);
    double dot = 0, gg = 0, ww = 0, range = 0;
    for (size_t k = 0; k < g.size(); ++k) {
      const double d = std::fabs(g[k] - w[k]);
      // A NaN on one side only is the worst error there is.
      const bool nan_mismatch = std::isnan(g[k]) != std::isnan(w[k]);
      if (nan_mismatch || d > a.max_abs) a.max_abs = nan_mismatch ? INFINITY : d;
      if (std::isfinite(w[k])) range = std::max(range, std::fabs(w[k]));
      if (std::isfinite(g[k]) && std::isfinite(w[k])) dot += g[k] * w[k], gg += g[k] * g[k], ww += w[k] * w[k];
    }
    a.max_rel = range > 0 ? a.max_abs / range : (a.max_abs > 0 ? INFINITY : 0);
    a.cosine = gg > 0 && ww > 0 ? dot / std::sqrt(gg * ww) : (gg == ww ? 1.0 : 0.0);
    acc.push_back(a);
  }
  return acc;
}

std::string budget_violation(const std::vector<OutputAccuracy>& acc, const AccuracyBudget& b,
                             const std::string& precision) {
  for (const OutputAccuracy& a : acc) {
    std::string why;
    if (b.min_cosine >= 0 && !(a.cosine >= b.min_cosine)) {
      why = "cosine " + fmt(a.cosine, "%.6f") + " is below the budget's " + fmt(b.min_cosine, "%.6g");
    } else if (b.max_abs >= 0 && !(a.max_abs <= b.max_abs)) {
      why = "max abs error " + fmt(a.max_abs) + " exceeds the budget's " + fmt(b.max_abs);
    } else if (b.max_rel >= 0 && !(a.max_rel <= b.max_rel)) {
      why = "max relative error " + fmt(a.max_rel) + " exceeds the budget's " + fmt(b.max_rel);
    }
    if (!why.empty()) {
      return "--accuracy-budget: output '" + a.name + "' at " + precision + ": " + why +
             " (against fp32 on the same inputs); compile at fp32 or relax the budget";
    }
  }
  return "";
}

std::string accuracy_line(const std::vector<OutputAccuracy>& acc) {
  std::string s;
  for (const OutputAccuracy& a : acc) {
    if (!s.empty()) s += "; ";
    s += a.name + ": max abs " + fmt(a.max_abs) + ", max rel " + fmt(a.max_rel) + ", cosine " + fmt(a.cosine, "%.6f");
  }
  return s;
}

}  // namespace tessera::api
