// Run comparison: the same function identities, BASE against TEST, by the median over ranks.
// Exclusive time decides what changed, so a wrapper does not repeat its callee's regression.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "diagnose/analysis.h"
#include "diagnose/diagnose.h"
#include "diagnose/policy.h"

namespace perftracker::diagnose {
namespace {

using internal::Median;
using internal::Ms;
using internal::Percent;
using pattern::FunctionPattern;
using pattern::RankSummary;

struct Side {
  std::map<int, const FunctionPattern*> by_rank;
  std::map<int, double> self_by_rank;
};

struct KeyDiff {
  const FunctionPattern* proto = nullptr;
  Side base, test;
};

double MedianOver(const std::map<int, double>& m, const std::vector<int>& ranks) {
  std::vector<double> v;
  for (int r : ranks) {
    auto it = m.find(r);
    v.push_back(it == m.end() ? 0 : it->second);
  }
  return Median(std::move(v));
}

template <typename Get>
double MedianField(const std::map<int, const FunctionPattern*>& m, const std::vector<int>& ranks,
                   Get get) {
  std::map<int, double> vals;
  for (auto& [r, f] : m) vals[r] = get(*f);
  return MedianOver(vals, ranks);
}

std::vector<int> RanksOf(const std::vector<RankSummary>& side) {
  std::vector<int> r;
  for (const auto& s : side) r.push_back(s.rank);
  std::sort(r.begin(), r.end());
  return r;
}

}  // namespace

Diagnosis Diff(const std::vector<pattern::RankSummary>& base,
               const std::vector<pattern::RankSummary>& test, const DiagnoseOptions& o) {
  Diagnosis d;
  d.job = internal::BuildJobInfo(internal::Pointers(test));
  JobInfo base_job = internal::BuildJobInfo(internal::Pointers(base));
  d.job.notes.push_back(fmt::format("BASE: {} ranks, {} iterations, median iteration {:.3f} ms",
                                    base_job.ranks.size(), base_job.iterations,
                                    base_job.iteration_ms_median));
  if (base.empty() || test.empty()) {
    d.job.notes.push_back(base.empty() ? "BASE has no ranks" : "TEST has no ranks");
    return d;
  }
  double iter_us = d.job.iteration_ms_median * 1000.0;
  double base_iter_us = base_job.iteration_ms_median * 1000.0;
  const std::vector<int> base_ranks = RanksOf(base), test_ranks = RanksOf(test);
  std::vector<int> common;
  std::set_intersection(base_ranks.begin(), base_ranks.end(), test_ranks.begin(), test_ranks.end(),
                        std::back_inserter(common));

  std::map<std::string, KeyDiff> keys;
  auto add = [&](const std::vector<RankSummary>& side, bool is_base) {
    for (const auto& r : side) {
      bool has_self = internal::HasSelfTimes(r);
      for (const auto& f : r.functions) {
        KeyDiff& k = keys[f.Key()];
        if (!k.proto || (is_base && !k.proto)) k.proto = &f;
        Side& s = is_base ? k.base : k.test;
        if (s.by_rank.emplace(r.rank, &f).second)
          s.self_by_rank[r.rank] = internal::SelfUs(f, has_self);
      }
    }
  };
  add(base, true);
  add(test, false);

  double explained = 0;
  std::vector<std::pair<double, const FunctionPattern*>> contributors;
  for (auto& [key, k] : keys) {
    double b_self = MedianOver(k.base.self_by_rank, base_ranks);
    double t_self = MedianOver(k.test.self_by_rank, test_ranks);
    double delta = t_self - b_self;
    contributors.push_back({delta, k.proto});
    double thr = internal::EffectThreshold(b_self, iter_us, o);
    // A function that appears or disappears is a change of the program itself: worth naming
    // even when small (the regression/improvement it causes is still sized by its time).
    bool appeared_or_gone = k.base.by_rank.empty() || k.test.by_rank.empty();
    if (appeared_or_gone) thr = std::max(policy::kNewFunctionFloorUs, 0.001 * iter_us);
    if (std::fabs(delta) <= thr) continue;

    auto per_iter = [](const FunctionPattern& f) { return f.per_iter_us; };
    auto calls = [](const FunctionPattern& f) { return f.calls_per_iter; };
    double b_v = MedianField(k.base.by_rank, base_ranks, per_iter);
    double t_v = MedianField(k.test.by_rank, test_ranks, per_iter);
    double b_c = MedianField(k.base.by_rank, base_ranks, calls);
    double t_c = MedianField(k.test.by_rank, test_ranks, calls);
    bool slower = delta > 0;

    // Which ranks changed: those whose own change goes the same way by at least half the
    // threshold. All of them (or no rank-by-rank match) makes it an all-rank change.
    std::vector<int> changed;
    for (int r : common) {
      auto bi = k.base.self_by_rank.find(r);
      auto ti = k.test.self_by_rank.find(r);
      double bv = bi == k.base.self_by_rank.end() ? 0 : bi->second;
      double tv = ti == k.test.self_by_rank.end() ? 0 : ti->second;
      if ((slower ? tv - bv : bv - tv) >= 0.5 * thr) changed.push_back(r);
    }
    Finding f;
    f.category = slower ? "regression" : "improvement";
    if (common.empty() || changed.size() == common.size() || changed.empty()) {
      f.finding_class = FindingClass::kAll;
      f.ranks = test_ranks;
    } else {
      f.finding_class = FindingClass::kSubset;
      f.ranks = changed;
    }
    std::vector<const RankSummary*> rs;
    for (const auto& r : test)
      if (std::binary_search(f.ranks.begin(), f.ranks.end(), r.rank)) rs.push_back(&r);
    f.hosts = internal::HostsOf(rs);
    const FunctionPattern* proto =
        k.test.by_rank.empty() ? k.proto : k.test.by_rank.begin()->second;
    f.functions.push_back(internal::MakeFunctionRef(*proto));
    f.impact_ms = delta / 1000.0;
    f.impact_fraction = iter_us > 0 ? delta / iter_us : 0;
    f.evidence["base_ms"] = b_v / 1000.0;
    f.evidence["test_ms"] = t_v / 1000.0;
    f.evidence["base_self_ms"] = b_self / 1000.0;
    f.evidence["test_self_ms"] = t_self / 1000.0;
    if (b_v > 0) f.evidence["ratio"] = t_v / b_v;
    f.evidence["base_calls_per_iter"] = b_c;
    f.evidence["test_calls_per_iter"] = t_c;
    std::string what;
    if (k.base.by_rank.empty()) {
      what = "new in TEST";
      f.cause = Cause::kSoftware;
    } else if (k.test.by_rank.empty()) {
      what = "gone in TEST";
      f.cause = Cause::kSoftware;
    } else if (std::fabs(t_c - b_c) > 0.1 * std::max(b_c, 1.0)) {
      what = fmt::format("called {:.1f} instead of {:.1f} times per iteration", t_c, b_c);
      f.cause = Cause::kSoftware;
    } else {
      what = "same number of calls, each call takes a different time";
      f.cause = Cause::kUnknown;
    }
    f.evidence_text["change"] = what;
    std::string where = f.finding_class == FindingClass::kAll
                            ? "on all ranks"
                            : fmt::format("on ranks {}", RankList(f.ranks));
    f.summary = fmt::format(
        "{} is {} in TEST ({}): {}/iter vs {} in BASE {}; {}{}/iter ({} of "
        "the iteration)",
        proto->name, slower ? "slower" : "faster", what, Ms(t_v), Ms(b_v), where,
        slower ? "+" : "-", Ms(std::fabs(delta)), Percent(std::fabs(f.impact_fraction)));
    f.suggestion = slower ? fmt::format(
                                "Look at what changed around {} between the runs (code, "
                                "input shapes, library versions, hardware).",
                                proto->name)
                          : "An improvement; nothing to do.";
    if (slower) explained += delta;
    d.findings.push_back(std::move(f));
  }

  // Very different programs would list every function; keep the biggest appearances.
  auto is_new_or_gone = [](const Finding& f) {
    auto it = f.evidence_text.find("change");
    return it != f.evidence_text.end() &&
           (it->second == "new in TEST" || it->second == "gone in TEST");
  };
  std::vector<size_t> ng;
  for (size_t i = 0; i < d.findings.size(); ++i)
    if (is_new_or_gone(d.findings[i])) ng.push_back(i);
  if (ng.size() > policy::kMaxNewOrGone) {
    std::sort(ng.begin(), ng.end(), [&](size_t a, size_t b) {
      return std::fabs(d.findings[a].impact_ms) > std::fabs(d.findings[b].impact_ms);
    });
    std::vector<bool> drop(d.findings.size(), false);
    for (size_t k = policy::kMaxNewOrGone; k < ng.size(); ++k) drop[ng[k]] = true;
    std::vector<Finding> kept;
    for (size_t i = 0; i < d.findings.size(); ++i)
      if (!drop[i]) kept.push_back(std::move(d.findings[i]));
    d.findings = std::move(kept);
    d.job.notes.push_back(fmt::format("{} more functions appear in only one of the runs",
                                      ng.size() - policy::kMaxNewOrGone));
  }
  // A slowdown spread thinly over many functions passes no per-function threshold; name the
  // iteration itself with the biggest contributors.
  double iter_delta = iter_us - base_iter_us;
  if (iter_delta > internal::EffectThreshold(base_iter_us, iter_us, o) &&
      explained < 0.5 * iter_delta) {
    std::sort(contributors.begin(), contributors.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    Finding f;
    f.finding_class = FindingClass::kAll;
    f.cause = Cause::kUnknown;
    f.category = "regression";
    f.ranks = test_ranks;
    std::vector<const RankSummary*> rs;
    for (const auto& r : test) rs.push_back(&r);
    f.hosts = internal::HostsOf(rs);
    for (size_t i = 0; i < contributors.size() && i < 5 && contributors[i].first > 0; ++i)
      f.functions.push_back(internal::MakeFunctionRef(*contributors[i].second));
    f.impact_ms = (iter_delta - explained) / 1000.0;
    f.impact_fraction = iter_us > 0 ? (iter_delta - explained) / iter_us : 0;
    f.evidence["base_ms"] = base_iter_us / 1000.0;
    f.evidence["test_ms"] = iter_us / 1000.0;
    if (base_iter_us > 0) f.evidence["ratio"] = iter_us / base_iter_us;
    f.evidence_text["change"] = "the iteration is slower, spread over many functions";
    f.summary = fmt::format(
        "the iteration is slower in TEST: {} vs {} in BASE; {} of it is "
        "spread thinly over many functions",
        Ms(iter_us), Ms(base_iter_us), Ms(iter_delta - explained));
    f.suggestion =
        "A broad slowdown with no single function behind it often means a slower machine, "
        "different library versions or CPU contention; compare the environments.";
    d.findings.push_back(std::move(f));
  }
  internal::SortFindings(&d.findings);
  return d;
}

}  // namespace perftracker::diagnose
