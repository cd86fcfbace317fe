// Run comparison: the same function identities, BASE against TEST, by the median over ranks.
// Exclusive time decides what changed, so a wrapper does not repeat its callee's regression.
#include "diagnose/diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "base/units.h"
#include "diagnose/finding_text.h"
#include "diagnose/peer_stats.h"
#include "diagnose/policy.h"
#include "diagnose/rank_info.h"
#include "diagnose/trace_memory.h"

namespace perftracker::diagnose {
namespace internal::diff {
namespace {

using pattern::FunctionPattern;
using pattern::RankSummary;

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

// SIDE's exclusive time on rank R, 0 where the function did not run there.
double SelfOn(const Side& side, int r) {
  auto it = side.self_by_rank.find(r);
  return it == side.self_by_rank.end() ? 0 : it->second;
}

// The standard error of a change between two runs with these spreads (IterationSpread).
double ChangeNoise(std::pair<double, double> base, std::pair<double, double> test) {
  const auto [b_sd, b_n] = base;
  const auto [t_sd, t_n] = test;
  return std::sqrt((b_n > 0 ? b_sd * b_sd / b_n : 0) + (t_n > 0 ? t_sd * t_sd / t_n : 0));
}

}  // namespace

std::optional<double> TypicalChangeOn(const KeyDiff& k, int rank) {
  auto typical = [rank](const Side& side) -> std::optional<double> {
    auto it = side.by_rank.find(rank);
    if (it == side.by_rank.end() || it->second->iter_us.empty()) return std::nullopt;
    std::vector<double> v(it->second->iter_us.begin(), it->second->iter_us.end());
    const double m = Median(std::move(v));
    // A function absent from most iterations (a step every few iterations) has no typical
    // iteration to compare: its mean is all there is.
    if (!(m > 0)) return std::nullopt;
    return m;
  };
  const std::optional<double> b = typical(k.base), t = typical(k.test);
  if (!b || !t) return std::nullopt;
  return *t - *b;
}

KeyDiffs CollectKeys(const std::vector<RankSummary>& base, const std::vector<RankSummary>& test) {
  KeyDiffs keys;
  auto add = [&](const std::vector<RankSummary>& side, bool is_base) {
    for (const auto& r : side) {
      bool has_self = HasSelfTimes(r);
      for (const auto& f : r.functions) {
        KeyDiff& k = keys[f.Key()];
        if (!k.proto || (is_base && !k.proto)) k.proto = &f;
        Side& s = is_base ? k.base : k.test;
        if (s.by_rank.emplace(r.rank, &f).second) s.self_by_rank[r.rank] = SelfUs(f, has_self);
      }
    }
  };
  add(base, true);
  add(test, false);
  return keys;
}

DiffInput::DiffInput(const std::vector<RankSummary>& base_runs,
                     const std::vector<RankSummary>& test_runs, const DiagnoseOptions& options,
                     double base_iteration_us, double iteration_us, DiffNames run_names)
    : base(base_runs),
      test(test_runs),
      o(options),
      names(std::move(run_names)),
      base_iter_us(base_iteration_us),
      iter_us(iteration_us),
      iter_delta(iteration_us - base_iteration_us),
      base_ranks(RanksOf(base_runs)),
      test_ranks(RanksOf(test_runs)),
      keys(CollectKeys(base_runs, test_runs)) {
  std::set_intersection(base_ranks.begin(), base_ranks.end(), test_ranks.begin(), test_ranks.end(),
                        std::back_inserter(common));
}

double MedianOver(const std::map<int, double>& m, const std::vector<int>& ranks) {
  std::vector<double> v;
  for (int r : ranks) {
    auto it = m.find(r);
    v.push_back(it == m.end() ? 0 : it->second);
  }
  return Median(std::move(v));
}

std::pair<double, double> IterationSpread(const std::map<int, const FunctionPattern*>& by_rank) {
  double n = 0, sum = 0, sq = 0;
  for (const auto& [rank, f] : by_rank) {
    for (float v : f->iter_us) {
      n += 1;
      sum += v;
      sq += static_cast<double>(v) * v;
    }
  }
  if (n < 2) return {0, n};
  const double mean = sum / n;
  return {std::sqrt(std::max(0.0, (sq - n * mean * mean) / (n - 1))), n};
}

Settings SettingsOf(const std::vector<RankSummary>& side) {
  Settings st;
  std::map<std::string, int> names;
  for (const RankSummary& r : side) {
    for (const auto& d : r.devices) ++names[d.name];
    st.gpus = std::max(st.gpus, static_cast<int>(r.devices.size()));
    st.world_size = std::max({st.world_size, r.world_size, r.rank + 1});
    if (st.backend.empty()) st.backend = r.backend;
    if (st.nccl_version.empty()) st.nccl_version = r.nccl_version;
  }
  int best = 0;
  for (const auto& [name, n] : names) {
    if (n > best) {
      best = n;
      st.gpu = name;
    }
  }
  if (st.world_size < static_cast<int>(side.size())) st.world_size = static_cast<int>(side.size());
  return st;
}

SetupChange CompareSetups(const std::vector<RankSummary>& base,
                          const std::vector<RankSummary>& test) {
  SetupChange c;
  c.base = SettingsOf(base);
  c.test = SettingsOf(test);
  const Settings &bs = c.base, &ts = c.test;
  c.gpu = !bs.gpu.empty() && !ts.gpu.empty() && (bs.gpu != ts.gpu || bs.gpus != ts.gpus);
  c.world = bs.world_size != ts.world_size;
  auto differs = [](const std::string& a, const std::string& b) {
    return !a.empty() && !b.empty() && a != b;
  };
  c.backend = differs(bs.backend, ts.backend);
  c.nccl = differs(bs.nccl_version, ts.nccl_version);
  return c;
}

Finding SetupChangeFinding(const DiffInput& in, const SetupChange& setup) {
  const Settings &bs = setup.base, &ts = setup.test;
  const double iter_us = in.iter_us, base_iter_us = in.base_iter_us;
  Finding f;
  f.finding_class = FindingClass::kAll;
  f.cause = setup.gpu ? Cause::kHardware : Cause::kConfiguration;
  f.category = setup.gpu ? Category::kHardwareChange : Category::kConfigurationChange;
  f.ranks = in.test_ranks;
  std::vector<const RankSummary*> rs;
  for (const auto& r : in.test) rs.push_back(&r);
  f.hosts = HostsOf(rs);
  std::vector<std::string> parts;
  if (setup.gpu) {
    parts.push_back(fmt::format("GPU {} x {} -> {} x {}", bs.gpus, bs.gpu, ts.gpus, ts.gpu));
    f.evidence_text["base_gpu"] = bs.gpu;
    f.evidence_text["test_gpu"] = ts.gpu;
    f.evidence["base_gpus"] = bs.gpus;
    f.evidence["test_gpus"] = ts.gpus;
  }
  if (setup.world) {
    parts.push_back(fmt::format("world size {} -> {} ranks", bs.world_size, ts.world_size));
    f.evidence["base_world_size"] = bs.world_size;
    f.evidence["test_world_size"] = ts.world_size;
  }
  // A named setting, as text: "NCCL 2.17.1 -> 2.18.3", evidence base_<key> and test_<key>.
  auto text_change = [&](const char* label, const std::string& key, const std::string& b,
                         const std::string& t) {
    parts.push_back(fmt::format("{} {} -> {}", label, b, t));
    f.evidence_text["base_" + key] = b;
    f.evidence_text["test_" + key] = t;
  };
  if (setup.backend) text_change("backend", "backend", bs.backend, ts.backend);
  if (setup.nccl) text_change("NCCL", "nccl_version", bs.nccl_version, ts.nccl_version);
  std::string what;
  for (const std::string& p : parts) what += (what.empty() ? "" : "; ") + p;
  f.evidence_text["change"] = what;
  f.evidence["base_ms"] = UsToMs(base_iter_us);
  f.evidence["test_ms"] = UsToMs(iter_us);
  // The whole iteration's change is read in the light of this one: it leads.
  f.impact_ms = UsToMs(std::fabs(in.iter_delta));
  f.impact_fraction = iter_us > 0 ? std::fabs(in.iter_delta) / iter_us : 0;
  f.confidence = 1.0;
  f.summary = fmt::format(
      "the runs differ in their setup: {}; the iteration takes {} in {} vs {} in {}, and "
      "the function changes below are partly this change's",
      what, Ms(iter_us), in.names.test, Ms(base_iter_us), in.names.base);
  f.suggestion = setup.gpu ? "Compare like with like: the same GPU model and count, or read "
                             "the per-function changes as the hardware's."
                           : "Compare runs with the same world size and communication stack, or "
                             "expect collectives and per-rank work to change with them.";
  return f;
}

std::map<int, RankChange> RankChanges(const DiffInput& in) {
  std::map<int, RankChange> per_rank;
  for (auto& [key, k] : in.keys) {
    const FunctionPattern* proto = k.proto;
    const bool coll = proto->fclass == pattern::FunctionClass::kCollective;
    for (int r : in.common) {
      auto ti = k.test.self_by_rank.find(r);
      const double bv = SelfOn(k.base, r);
      const double tv = ti == k.test.self_by_rank.end() ? 0 : ti->second;
      RankChange& c = per_rank[r];
      if (coll) {
        c.wait += tv - bv;
      } else if (tv - bv > c.compute) {
        c.compute = tv - bv;
        c.fn = ti == k.test.self_by_rank.end() ? proto : k.test.by_rank.at(r);
        c.key = key;
      }
    }
  }
  return per_rank;
}

std::optional<Finding> CrossRunStraggler(const DiffInput& in, std::set<std::string>* echo_keys) {
  if (in.common.size() < 2) return std::nullopt;
  std::map<int, RankChange> per_rank = RankChanges(in);
  // The rank whose compute rose most beyond its own wait: a peer that waits for it inside a
  // call that is not a collective (DDP's all-reduce wait inside the Python backward,
  // <built-in method run_backward>) shows a compute rise as large, with its collectives'
  // rise beside it (measured on 4 gloo ranks: run_backward +7.9 ms on each waiter, their
  // gloo:all_reduce +7.1 ms; the straggler's own aten::mm +7 ms, its wait unchanged).
  auto own_rise = [](const RankChange& c) { return c.compute - std::max(c.wait, 0.0); };
  int s = -1;
  for (const auto& [r, c] : per_rank)
    if (c.fn && (s < 0 || own_rise(c) > own_rise(per_rank[s]))) s = r;
  if (s < 0) return std::nullopt;
  const double iter_us = in.iter_us;
  const RankChange& sc = per_rank[s];
  std::vector<double> peers_wait, peers_same_fn;
  std::vector<int> waiters;
  const KeyDiff& sk = in.keys.at(sc.key);
  for (const auto& [r, c] : per_rank) {
    if (r == s) continue;
    peers_wait.push_back(c.wait);
    // The peers of its role only: a rank that runs the function in neither run (another pipeline
    // stage) says nothing of how the machine changed it.
    if (sk.base.by_rank.count(r) > 0 || sk.test.by_rank.count(r) > 0)
      peers_same_fn.push_back(SelfOn(sk.test, r) - SelfOn(sk.base, r));
  }
  const double wait = Median(peers_wait);
  // What the rank computes beyond what its peers' same function rose by: a machine that is
  // slower in TEST raises every rank's compute (measured: aten::mm +43% a call on every
  // rank between two runs on this VM), and only the excess is the rank's own, and what its
  // peers wait for.
  const double peers_rise = peers_same_fn.empty() ? 0.0 : std::max(Median(peers_same_fn), 0.0);
  const double excess = sc.compute - peers_rise;
  // The excess must stand out of the rank's own iteration-to-iteration spread of that
  // function in both runs, and what the peers lose waiting (the finding's impact) must cost
  // what a diagnosis finding costs: between two clean runs on this VM one rank's addmm rose
  // 3.7 ms and its peers waited 1.2 ms longer (2% of the iteration).
  auto spread_on_s = [&](const Side& side) {
    std::map<int, const FunctionPattern*> one;
    if (auto it = side.by_rank.find(s); it != side.by_rank.end()) one.emplace(s, it->second);
    return IterationSpread(one);
  };
  const double own_noise = ChangeNoise(spread_on_s(sk.base), spread_on_s(sk.test));
  for (const auto& [r, c] : per_rank)
    if (r != s && c.wait >= policy::kDiffEchoShare * excess) waiters.push_back(r);
  const double floor = std::max(policy::kDiffMinUs, MinImpactUs(iter_us, in.o));
  if (!(excess > floor && excess > policy::kDiffNoiseZ * own_noise && wait >= floor &&
        wait >= policy::kDiffEchoShare * excess && sc.wait < policy::kDiffOwnShare * wait))
    return std::nullopt;
  const FunctionPattern* fn = sc.fn;
  Finding f;
  f.finding_class = FindingClass::kSubset;
  f.cause = Cause::kSoftware;
  f.category = Category::kStraggler;
  f.ranks = {s};
  std::vector<const RankSummary*> rs;
  for (const auto& r : in.test)
    if (r.rank == s) rs.push_back(&r);
  f.hosts = HostsOf(rs);
  f.functions.push_back(MakeFunctionRef(*fn));
  f.impact_ms = UsToMs(wait);
  f.impact_fraction = iter_us > 0 ? wait / iter_us : 0;
  f.confidence = 1.0;
  auto calls_on = [&](const Side& side) {
    auto it = side.by_rank.find(s);
    return it == side.by_rank.end() ? 0.0 : it->second->calls_per_iter;
  };
  const double b_c = calls_on(sk.base), t_c = calls_on(sk.test);
  f.evidence["extra_compute_ms"] = UsToMs(sc.compute);
  f.evidence["peers_extra_compute_ms"] = UsToMs(peers_rise);
  f.evidence["peers_extra_wait_ms"] = UsToMs(wait);
  f.evidence["base_calls_per_iter"] = b_c;
  f.evidence["test_calls_per_iter"] = t_c;
  f.evidence_text["change"] = "a rank computes more; its peers wait for it";
  f.summary = fmt::format(
      "rank {} computes more in {}: {} +{}/iter on rank {} alone ({:.1f} calls per "
      "iteration vs {:.1f}); ranks {} wait for it in collectives, +{}/iter ({} of the "
      "iteration)",
      s, in.names.test, fn->name, Ms(sc.compute), s, t_c, b_c, RankList(waiters), Ms(wait),
      Percent(f.impact_fraction));
  f.suggestion = fmt::format("Look at what rank {} does differently in {} around {}.", s,
                             in.names.test, fn->name);
  for (auto& [key, kd] : in.keys) {
    if (kd.proto->fclass == pattern::FunctionClass::kCollective) {
      echo_keys->insert(key);
      continue;
    }
    // A function that rose on the waiters and not (by half as much) on the straggler is where
    // they wait for it: DDP's all-reduce wait inside the Python backward (run_backward +6 ms on
    // every waiter; measured on 4 gloo ranks, it outranked the straggler's own aten::mm).
    std::vector<double> on_waiters;
    for (int r : waiters) on_waiters.push_back(SelfOn(kd.test, r) - SelfOn(kd.base, r));
    const double rise = on_waiters.empty() ? 0 : Median(on_waiters);
    if (rise > 0 && SelfOn(kd.test, s) - SelfOn(kd.base, s) < policy::kDiffOwnShare * rise)
      echo_keys->insert(key);
  }
  echo_keys->insert(sc.key);
  return f;
}

double ProgramChangeFloorUs(double iter_us) {
  return std::max(policy::kNewFunctionFloorUs, policy::kNewFunctionShare * iter_us);
}

double ChangeThreshold(const DiffInput& in, const KeyDiff& k, double b_self) {
  // The runs' own variation decides, not a share of the iteration: the change must stand out
  // of both runs' iteration-to-iteration spread of this function.
  const double noise =
      ChangeNoise(IterationSpread(k.base.by_rank), IterationSpread(k.test.by_rank));
  // And it must cost what a diagnosis finding costs (--min-impact of the iteration): two
  // clean runs on a shared host differ by a millisecond here and there, most in collectives,
  // which carry every peer's noise (measured: c10d::allreduce_ 1.3 vs 0.5 ms on 3 of 4 ranks).
  double thr = std::max({policy::kDiffMinUs, policy::kDiffMinRelative * std::fabs(b_self),
                         policy::kDiffNoiseZ * noise, MinImpactUs(in.iter_us, in.o)});
  // A function that appears or disappears is a change of the program itself: worth naming
  // even when small (the regression/improvement it causes is still sized by its time).
  if (k.base.by_rank.empty() || k.test.by_rank.empty()) thr = ProgramChangeFloorUs(in.iter_us);
  return thr;
}

std::optional<Finding> FunctionChangeFinding(const DiffInput& in, const SetupChange& setup,
                                             const KeyDiff& k, double b_self, double t_self) {
  const double iter_us = in.iter_us;
  const double delta = t_self - b_self;
  const double thr = ChangeThreshold(in, k, b_self);
  const bool appeared_or_gone = k.base.by_rank.empty() || k.test.by_rank.empty();
  auto per_iter = [](const FunctionPattern& f) { return f.per_iter_us; };
  auto calls = [](const FunctionPattern& f) { return f.calls_per_iter; };
  double b_v = MedianField(k.base.by_rank, in.base_ranks, per_iter);
  double t_v = MedianField(k.test.by_rank, in.test_ranks, per_iter);
  double b_c = MedianField(k.base.by_rank, in.base_ranks, calls);
  double t_c = MedianField(k.test.by_rank, in.test_ranks, calls);
  // A call count that doubles or halves is a change of the program, whatever its time. A
  // function one run never called is compared with a call count next to none, not divided by 0.
  constexpr double kNextToNoCalls = 1e-9;
  const bool calls_changed =
      !appeared_or_gone && std::fabs(t_c - b_c) >= policy::kDiffMinCallDelta &&
      std::max(t_c, b_c) >= policy::kDiffCallRatio * std::max(std::min(t_c, b_c), kNextToNoCalls);
  if (std::fabs(delta) <= thr && !calls_changed) return std::nullopt;
  bool slower = delta > 0 || (std::fabs(delta) <= thr && t_c > b_c);

  // Which ranks changed: those whose own change goes the same way by at least half the
  // threshold. All of them (or no rank-by-rank match) makes it an all-rank change.
  // A rank's change must show in its typical iteration too (the median of its per-iteration
  // time), not in a few: a process descheduled on a shared host puts a whole timeslice into
  // whatever it was running. Measured: two clean 4-rank runs on 2 busy cores,
  // DistributedDataParallel.forward 1.0 vs 2.4 ms/iter on ranks 0,2 (a subset finding) from
  // 3-4 of 20 iterations at 5-15 ms, the median iteration 0.73 vs 0.86 ms. A call count that
  // changed, or a function one run lacks, is the program's change whatever its iterations say.
  const bool program_changed = calls_changed || appeared_or_gone;
  std::vector<int> changed, typical;
  for (int r : in.common) {
    double bv = SelfOn(k.base, r), tv = SelfOn(k.test, r);
    if ((slower ? tv - bv : bv - tv) < policy::kDiffRankShare * thr) continue;
    changed.push_back(r);
    const std::optional<double> typ = TypicalChangeOn(k, r);
    if (program_changed || !typ || (slower ? *typ : -*typ) >= policy::kDiffRankShare * thr)
      typical.push_back(r);
  }
  // Slower in a few iterations of its ranks only: the iteration's change (named as spread
  // thinly where nothing else explains it), not this function's.
  if (!changed.empty() && typical.empty()) return std::nullopt;
  if (changed.size() < in.common.size()) changed = typical;
  Finding f;
  f.category = slower ? Category::kRegression : Category::kImprovement;
  // A collective called as often that takes longer on some ranks only is where they wait for
  // the others: not their problem, and no subset finding may name them (seen on CI: two clean
  // runs, all_reduce +2.4 ms on ranks 0,2,3 named them as a subset). The rank they waited for is
  // the cross-run straggler's to name, where its compute rose. A changed call count is the
  // program's change on those ranks, and stays theirs.
  const bool waits = k.proto->fclass == pattern::FunctionClass::kCollective && slower &&
                     !calls_changed && !appeared_or_gone && !changed.empty() &&
                     changed.size() < in.common.size();
  if (in.common.empty() || changed.size() == in.common.size() || changed.empty() || waits) {
    f.finding_class = FindingClass::kAll;
    f.ranks = in.test_ranks;
  } else {
    f.finding_class = FindingClass::kSubset;
    f.ranks = changed;
  }
  std::vector<const RankSummary*> rs;
  for (const auto& r : in.test)
    if (std::binary_search(f.ranks.begin(), f.ranks.end(), r.rank)) rs.push_back(&r);
  f.hosts = HostsOf(rs);
  const FunctionPattern* proto = k.test.by_rank.empty() ? k.proto : k.test.by_rank.begin()->second;
  f.functions.push_back(MakeFunctionRef(*proto));
  f.impact_ms = UsToMs(delta);
  f.impact_fraction = iter_us > 0 ? delta / iter_us : 0;
  f.evidence["base_ms"] = UsToMs(b_v);
  f.evidence["test_ms"] = UsToMs(t_v);
  f.evidence["base_self_ms"] = UsToMs(b_self);
  f.evidence["test_self_ms"] = UsToMs(t_self);
  if (b_v > 0) f.evidence["ratio"] = t_v / b_v;
  f.evidence["base_calls_per_iter"] = b_c;
  f.evidence["test_calls_per_iter"] = t_c;
  std::string what;
  if (k.base.by_rank.empty()) {
    what = "new in " + in.names.test;
    f.cause = Cause::kSoftware;
  } else if (k.test.by_rank.empty()) {
    what = "gone in " + in.names.test;
    f.cause = Cause::kSoftware;
  } else if (std::fabs(t_c - b_c) > policy::kDiffCallsChanged * std::max(b_c, 1.0)) {
    what = fmt::format("called {:.1f} instead of {:.1f} times per iteration", t_c, b_c);
    f.cause = Cause::kSoftware;
  } else {
    what = kChangeSameCallsSlower;
    f.cause =
        setup.gpu && proto->kind == trace::EventKind::kKernel ? Cause::kHardware : Cause::kUnknown;
  }
  if (setup.world && proto->fclass == pattern::FunctionClass::kCollective)
    f.cause = Cause::kConfiguration;
  // How many ranks wait longer: the finding names every rank, the wait is theirs alone.
  if (waits) f.evidence["waiting_ranks"] = static_cast<double>(changed.size());
  f.evidence_text["change"] = what;
  std::string where =
      waits
          ? fmt::format("on ranks {}, which wait longer in it for a later peer", RankList(changed))
      : f.finding_class == FindingClass::kAll ? "on all ranks"
                                              : fmt::format("on ranks {}", RankList(f.ranks));
  f.summary = fmt::format(
      "{} is {} in {} ({}): {}/iter vs {} in {} {}; {}{}/iter ({} of "
      "the iteration)",
      proto->name, slower ? "slower" : "faster", in.names.test, what, Ms(t_v), Ms(b_v),
      in.names.base, where, slower ? "+" : "-", Ms(std::fabs(delta)),
      Percent(std::fabs(f.impact_fraction)));
  f.suggestion = slower ? fmt::format(
                              "Look at what changed around {} between the runs (code, "
                              "input shapes, library versions, hardware).",
                              proto->name)
                        : "An improvement; nothing to do.";
  return f;
}

void CapNewOrGone(Diagnosis* d) {
  auto is_new_or_gone = [](const Finding& f) {
    auto it = f.evidence_text.find("change");
    return it != f.evidence_text.end() &&
           (it->second.starts_with("new in ") || it->second.starts_with("gone in "));
  };
  std::vector<size_t> ng;
  for (size_t i = 0; i < d->findings.size(); ++i)
    if (is_new_or_gone(d->findings[i])) ng.push_back(i);
  if (ng.size() <= policy::kMaxNewOrGone) return;
  std::sort(ng.begin(), ng.end(), [&](size_t a, size_t b) {
    return std::fabs(d->findings[a].impact_ms) > std::fabs(d->findings[b].impact_ms);
  });
  std::vector<bool> drop(d->findings.size(), false);
  for (size_t k = policy::kMaxNewOrGone; k < ng.size(); ++k) drop[ng[k]] = true;
  std::vector<Finding> kept;
  for (size_t i = 0; i < d->findings.size(); ++i)
    if (!drop[i]) kept.push_back(std::move(d->findings[i]));
  d->findings = std::move(kept);
  d->job.notes.push_back(fmt::format("{} more functions appear in only one of the runs",
                                     ng.size() - policy::kMaxNewOrGone));
}

std::optional<Finding> SpreadSlowdownFinding(
    const DiffInput& in, const SetupChange& setup,
    std::vector<std::pair<double, const FunctionPattern*>> contributors, double explained) {
  const double iter_us = in.iter_us, base_iter_us = in.base_iter_us, iter_delta = in.iter_delta;
  if (!(!setup.any() && iter_delta > EffectThreshold(base_iter_us, iter_us, in.o) &&
        explained < policy::kSpreadExplainedShare * iter_delta))
    return std::nullopt;
  std::sort(contributors.begin(), contributors.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  Finding f;
  f.finding_class = FindingClass::kAll;
  f.cause = Cause::kUnknown;
  f.category = Category::kRegression;
  f.ranks = in.test_ranks;
  std::vector<const RankSummary*> rs;
  for (const auto& r : in.test) rs.push_back(&r);
  f.hosts = HostsOf(rs);
  for (size_t i = 0; i < contributors.size() && i < 5 && contributors[i].first > 0; ++i)
    f.functions.push_back(MakeFunctionRef(*contributors[i].second));
  f.impact_ms = UsToMs(iter_delta - explained);
  f.impact_fraction = iter_us > 0 ? (iter_delta - explained) / iter_us : 0;
  f.evidence["base_ms"] = UsToMs(base_iter_us);
  f.evidence["test_ms"] = UsToMs(iter_us);
  if (base_iter_us > 0) f.evidence["ratio"] = iter_us / base_iter_us;
  f.evidence_text["change"] = kChangeSpreadThinly;
  f.summary = fmt::format(
      "the iteration is slower in {}: {} vs {} in {}; {} of it is "
      "spread thinly over many functions",
      in.names.test, Ms(iter_us), Ms(base_iter_us), in.names.base, Ms(iter_delta - explained));
  f.suggestion =
      "A broad slowdown with no single function behind it often means a slower machine, "
      "different library versions or CPU contention; compare the environments.";
  return f;
}

}  // namespace internal::diff

Diagnosis Diff(const std::vector<pattern::RankSummary>& base,
               const std::vector<pattern::RankSummary>& test, const DiagnoseOptions& o,
               const DiffNames& names) {
  namespace diff = internal::diff;
  Diagnosis d;
  d.job = internal::BuildJobInfo(internal::Pointers(test));
  JobInfo base_job = internal::BuildJobInfo(internal::Pointers(base));
  d.job.notes.push_back(fmt::format("{}: {} ranks, {} iterations, median iteration {:.3f} ms",
                                    names.base, base_job.ranks.size(), base_job.iterations,
                                    base_job.iteration_ms_median));
  if (base.empty() || test.empty()) {
    d.job.notes.push_back(fmt::format("{} has no ranks", base.empty() ? names.base : names.test));
    return d;
  }
  const diff::DiffInput in(base, test, o, MsToUs(base_job.iteration_ms_median),
                           MsToUs(d.job.iteration_ms_median), names);
  // The runs' settings first: a different GPU or world size changes every number after it.
  const diff::SetupChange setup = diff::CompareSetups(base, test);
  if (setup.any()) d.findings.push_back(diff::SetupChangeFinding(in, setup));
  std::set<std::string> echo_keys;
  if (std::optional<Finding> f = diff::CrossRunStraggler(in, &echo_keys))
    d.findings.push_back(std::move(*f));

  double explained = 0;  // the regressions' share of the iteration's change
  std::vector<std::pair<double, const pattern::FunctionPattern*>> contributors;
  for (auto& [key, k] : in.keys) {
    double b_self = diff::MedianOver(k.base.self_by_rank, in.base_ranks);
    double t_self = diff::MedianOver(k.test.self_by_rank, in.test_ranks);
    double delta = t_self - b_self;
    contributors.push_back({delta, k.proto});
    if (echo_keys.count(key)) {
      explained += std::max(0.0, delta);
      continue;  // the straggler finding above names it
    }
    std::optional<Finding> f = diff::FunctionChangeFinding(in, setup, k, b_self, t_self);
    if (!f) continue;
    if (f->category == Category::kRegression) explained += delta;
    d.findings.push_back(std::move(*f));
  }
  diff::CapNewOrGone(&d);
  if (std::optional<Finding> f =
          diff::SpreadSlowdownFinding(in, setup, std::move(contributors), explained))
    d.findings.push_back(std::move(*f));
  for (Finding& f : MemoryPeakChanges(base_job.memory, d.job.memory, names.base, names.test))
    d.findings.push_back(std::move(f));
  internal::SortFindings(&d.findings);
  // A change of the runs' settings comes first, whatever its size: every other change is read
  // in its light.
  std::stable_partition(d.findings.begin(), d.findings.end(), [](const Finding& f) {
    return f.category == Category::kHardwareChange || f.category == Category::kConfigurationChange;
  });
  return d;
}

}  // namespace perftracker::diagnose
