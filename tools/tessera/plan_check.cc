#include "plan_check.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "cli.h"
#include "runtime/session.h"

namespace tessera::cli {

namespace {

using Clock = std::chrono::steady_clock;

// The plans a single backend gives, from the set search's prices.
bool single_backend_plan(const SetOption& s) {
  return (s.backends.size() == 1) || (s.backends.size() == 2 && s.plan == "engine first");
}

std::string plan_name(const SetOption& s) {
  std::string n;
  for (const auto& b : s.backends) n += (n.empty() ? "" : ",") + b;
  return s.plan == "cost" ? n : n + " " + s.plan;
}

// Same regions on the same backends: the same program.
bool same_placement(const PartitionReport& a, const PartitionReport& b) {
  if (a.regions.size() != b.regions.size()) return false;
  for (size_t i = 0; i < a.regions.size(); ++i) {
    if (a.regions[i].backend != b.regions[i].backend || a.regions[i].nodes != b.regions[i].nodes ||
        a.regions[i].graph != b.regions[i].graph) {
      return false;
    }
  }
  return true;
}

struct Candidate {
  std::string name;
  Program program;
  PartitionReport report;
  std::unique_ptr<InferenceSession> session;
  std::vector<Tensor> inputs;
  std::vector<double> times_us;
};

Status run_once(Candidate& c, bool timed) {
  auto t0 = Clock::now();
  auto out = c.session->run(c.inputs);
  if (!out.ok()) return out.status();
  if (timed) c.times_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  return Status::Ok();
}

double lower_quartile(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 4];
}

}  // namespace

Expected<Program> check_plan(Program chosen, const Graph& g, const PartitionOptions& po, PartitionReport* report,
                             double budget_us) {
  if (po.policy != PlacementPolicy::kCost || po.measure == MeasureMode::kOff || po.force || report->sets.empty()) {
    return chosen;
  }
  const SetOption* picked = nullptr;
  for (const auto& s : report->sets) {
    if (s.chosen) picked = &s;
  }
  if (!picked) return chosen;
  // Alternatives priced within 1.3x of the chosen plan, cheapest first.
  std::vector<const SetOption*> alternatives;
  for (const auto& s : report->sets) {
    if (&s != picked && single_backend_plan(s) && s.us <= 1.3 * picked->us) alternatives.push_back(&s);
  }
  std::stable_sort(alternatives.begin(), alternatives.end(),
                   [](const SetOption* a, const SetOption* b) { return a->us < b->us; });
  std::vector<Candidate> cands;
  cands.push_back(Candidate{"chosen (" + plan_name(*picked) + ")", std::move(chosen), *report, nullptr, {}, {}});
  for (const SetOption* s : alternatives) {
    PartitionOptions alt = po;
    alt.force = PartitionOptions::ForcedPlan{s->backends, s->plan == "engine first"};
    alt.progress = nullptr;
    PartitionReport rep;
    auto p = partition_and_compile(g, alt, &rep);
    if (!p.ok()) continue;  // the chosen plan stands
    bool duplicate = false;
    for (const auto& c : cands) duplicate = duplicate || same_placement(c.report, rep);
    if (duplicate) continue;
    cands.push_back(Candidate{plan_name(*s), std::move(*p), std::move(rep), nullptr, {}, {}});
  }
  if (cands.size() == 1) return std::move(cands[0].program);
  SessionOptions so;
  so.num_threads = po.num_threads;
  for (auto& c : cands) {
    auto s = InferenceSession::Create(c.program, so);
    if (!s.ok()) return s.status();
    c.session = std::move(*s);
    TSR_ASSIGN_OR_RETURN(c.inputs, random_inputs(*c.session, 42));
  }
  // Warm up, then interleave (the order turns every round, so none always
  // follows the same program) until every program has 5 runs and 200 ms
  // have passed, or the budget is spent (at least two runs each).
  for (auto& c : cands) {
    for (int i = 0; i < 2; ++i) TSR_RETURN_IF_ERROR(run_once(c, false));
  }
  const auto start = Clock::now();
  for (size_t round = 0;; ++round) {
    for (size_t k = 0; k < cands.size(); ++k) TSR_RETURN_IF_ERROR(run_once(cands[(k + round) % cands.size()], true));
    const double elapsed = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    const size_t runs = round + 1;
    if (runs >= 2 && elapsed >= budget_us) break;
    if (runs >= 5 && elapsed >= 200e3) break;
    if (runs >= 50) break;
  }
  size_t best = 0;
  std::vector<double> us;
  for (const auto& c : cands) us.push_back(lower_quartile(c.times_us));
  for (size_t k = 1; k < cands.size(); ++k) {
    if (us[k] < us[0] * 0.97 && us[k] < us[best]) best = k;
  }
  std::vector<PlanTiming> timings;
  for (size_t k = 0; k < cands.size(); ++k) timings.push_back({cands[k].name, us[k] / 1e3, k == best});
  if (best != 0) {
    char buf[200];
    std::snprintf(buf, sizeof(buf), "end-to-end check: %s ran in %.3f ms, the chosen plan in %.3f ms: kept %s",
                  cands[best].name.c_str(), us[best] / 1e3, us[0] / 1e3, cands[best].name.c_str());
    PartitionReport kept = std::move(cands[best].report);
    kept.events.push_back(buf);
    kept.sets = report->sets;  // the prices that led here, the kept plan marked
    for (auto& s : kept.sets) s.chosen = plan_name(s) == cands[best].name;
    kept.cache_hits = report->cache_hits;
    // What was measured to choose belongs to the report whichever plan won.
    kept.measured = report->measured;
    kept.measurements = report->measurements;
    kept.measure_seconds = report->measure_seconds;
    kept.budget_exhausted = report->budget_exhausted;
    *report = std::move(kept);
  }
  report->plan_timings = std::move(timings);
  return std::move(cands[best].program);
}

}  // namespace tessera::cli
