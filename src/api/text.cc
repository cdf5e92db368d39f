#include "api/text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "api/accuracy.h"

namespace tessera::api {

std::string describe_value(const Tensor& t, int64_t max_elements) {
  std::string s = t.str();
  if (t.dtype() == DType::kUndefined) return s;
  const int64_t n = std::min<int64_t>(t.numel(), std::max<int64_t>(max_elements, 0));
  s += " [";
  for (int64_t i = 0; i < n; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.6g", i ? ", " : "", t.as_double(i));
    s += buf;
  }
  return s + (t.numel() > n ? ", ...]" : "]");
}

std::string compare_values(const Tensor& expected, const Tensor& actual, double rtol, double atol) {
  if (expected.dtype() != actual.dtype()) {
    return std::string("dtype ") + dtype_name(actual.dtype()) + ", expected " + dtype_name(expected.dtype());
  }
  if (expected.dims() != actual.dims()) {
    return "shape " + dims_str(actual.dims()) + ", expected " + dims_str(expected.dims());
  }
  const bool is_float = dtype_is_float(expected.dtype());
  int64_t bad = 0, first_bad = -1;
  double worst = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double e = expected.as_double(i), v = actual.as_double(i);
    bool ok;
    if (!is_float) ok = expected.as_int64(i) == actual.as_int64(i) && e == v;
    else if (std::isnan(e)) ok = std::isnan(v);
    else if (std::isinf(e)) ok = e == v;
    else ok = std::fabs(v - e) <= atol + rtol * std::fabs(e);
    if (!ok) {
      if (first_bad < 0) first_bad = i;
      ++bad;
      worst = std::isnan(v) ? INFINITY : std::max(worst, std::fabs(v - e));
    }
  }
  if (bad == 0) return "";
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%lld of %lld values differ (max abs diff %.3g; first at %lld: got %.9g, expected %.9g)",
                static_cast<long long>(bad), static_cast<long long>(expected.numel()), worst,
                static_cast<long long>(first_bad), actual.as_double(first_bad), expected.as_double(first_bad));
  return buf;
}

std::string regions_line(const PartitionReport& report, size_t engines) {
  std::map<std::string, int> per_backend;
  for (const auto& r : report.regions) per_backend[r.backend]++;
  std::string regions;
  for (const auto& [b, c] : per_backend) regions += (regions.empty() ? "" : ", ") + std::to_string(c) + " " + b;
  return std::to_string(report.regions.size()) + " regions (" + regions + "), " + std::to_string(engines) +
         " engines";
}

std::string placement_line(const PartitionReport& report) {
  std::string placement = "placement " + report.policy;
  char buf[160];
  if (report.policy == "cost") {
    std::snprintf(buf, sizeof(buf), ", estimated %.3f ms", report.estimated_us / 1000);
    placement += buf;
  }
  if (report.measured > 0 || report.cache_hits > 0) {
    std::snprintf(buf, sizeof(buf), "; measured %d candidates now (%.2f s%s), reused %d measurements from the tune cache",
                  report.measured, report.measure_seconds, report.budget_exhausted ? ", budget reached" : "",
                  report.cache_hits);
    placement += buf;
  }
  if (!report.plan_timings.empty()) {
    std::snprintf(buf, sizeof(buf), "; end-to-end check of %zu plans (%.2f s)", report.plan_timings.size(),
                  report.check_seconds);
    placement += buf;
  }
  if (report.threads_best > 0) {
    std::snprintf(buf, sizeof(buf), "; runs on %d of the %d threads asked for (faster here)", report.threads_best,
                  report.threads_asked);
    placement += buf;
  }
  return placement;
}

std::string accuracy_report_line(const PartitionReport& report) {
  if (report.accuracy.empty()) return "";
  return report.precision + " against fp32 (" + report.accuracy_inputs + " inputs): " + accuracy_line(report.accuracy);
}

}  // namespace tessera::api
