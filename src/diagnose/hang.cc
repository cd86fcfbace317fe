#include "diagnose/hang.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

#include "base/units.h"

namespace perftracker::diagnose {
namespace {

bool Contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

bool IsLibraryFrame(const StackFrame& f) {
  return Contains(f.file, "/site-packages/") || Contains(f.file, "/dist-packages/") ||
         Contains(f.file, "/lib/python3") || Contains(f.file, "/torch/") ||
         Contains(f.file, "/perftracker/") || (!f.file.empty() && f.file[0] == '<');
}

namespace {

const ThreadStack* MainThread(const RankStacks& r) {
  for (const auto& t : r.threads)
    if (t.main) return &t;
  for (const auto& t : r.threads)
    if (t.name == "MainThread") return &t;
  return r.threads.empty() ? nullptr : &r.threads.front();
}

std::string Where(const StackFrame& f) {
  return fmt::format("{}:{} in {}", f.file, f.line, f.function);
}

struct RankView {
  const RankStacks* r = nullptr;
  const ThreadStack* main = nullptr;
  bool waiting = false;              // in communication
  std::string signature;             // innermost frame's location
  const StackFrame* user = nullptr;  // innermost frame of the user's own code
};

RankView View(const RankStacks& r) {
  RankView v;
  v.r = &r;
  v.main = MainThread(r);
  v.waiting = r.last_collective.in_progress;
  if (v.main != nullptr && !v.main->frames.empty()) {
    for (const auto& f : v.main->frames) v.waiting = v.waiting || IsCommunicationFrame(f);
    const StackFrame& inner = v.main->frames.back();
    v.signature = fmt::format("{}:{}", inner.file, inner.line);
    for (auto it = v.main->frames.rbegin(); it != v.main->frames.rend(); ++it) {
      if (!IsLibraryFrame(*it)) {
        v.user = &*it;
        break;
      }
    }
    if (v.user == nullptr) v.user = &inner;
  }
  return v;
}

}  // namespace

bool IsCommunicationFrame(const StackFrame& f) {
  if (Contains(f.file, "torch/distributed/") || Contains(f.file, "torch/nn/parallel/distributed"))
    return true;
  // DDP's gradient all-reduce runs from autograd hooks inside backward(); Work.wait() and
  // barriers wait on the other ranks.
  if (Contains(f.file, "torch/autograd/") && f.function == "backward") return true;
  if (Contains(f.file, "torch/_tensor.py") && f.function == "backward") return true;
  static const std::set<std::string> kWaits = {"all_reduce",
                                               "all_gather",
                                               "reduce_scatter",
                                               "broadcast",
                                               "barrier",
                                               "monitored_barrier",
                                               "all_to_all",
                                               "all_to_all_single",
                                               "all_gather_into_tensor",
                                               "reduce_scatter_tensor",
                                               "recv",
                                               "irecv",
                                               "wait"};
  return kWaits.count(f.function) > 0 && Contains(f.file, "torch/");
}

Diagnosis DiagnoseHang(const std::vector<RankStacks>& replies, const std::vector<int>& expected,
                       double stalled_seconds) {
  Diagnosis d;
  std::set<int> all(expected.begin(), expected.end());
  for (const auto& r : replies) all.insert(r.rank);
  d.job.ranks.assign(all.begin(), all.end());
  d.job.world_size = static_cast<int>(all.size());
  if (all.empty()) return d;

  std::vector<RankView> views;
  std::set<int> replied;
  for (const auto& r : replies) {
    if (!replied.insert(r.rank).second) continue;
    views.push_back(View(r));
  }
  std::vector<int> silent;
  for (int r : all)
    if (!replied.count(r)) silent.push_back(r);

  // Who did not arrive: ranks outside communication while others wait in it; when that does
  // not split the ranks (all wait, or none does), the ranks whose stack differs from the
  // majority's innermost location.
  std::vector<const RankView*> culprits;
  size_t waiting =
      std::count_if(views.begin(), views.end(), [](const RankView& v) { return v.waiting; });
  std::string how;
  if (waiting > 0 && waiting < views.size()) {
    for (const auto& v : views)
      if (!v.waiting) culprits.push_back(&v);
    how = "not in communication while the others wait in it";
  } else if (views.size() > 1) {
    std::map<std::string, int> votes;
    for (const auto& v : views) ++votes[v.signature];
    auto best = std::max_element(votes.begin(), votes.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    if (best->second * 2 > static_cast<int>(views.size())) {
      for (const auto& v : views)
        if (v.signature != best->first) culprits.push_back(&v);
      how = "stopped somewhere else than the majority";
    }
  }

  Finding f;
  f.finding_class = FindingClass::kSubset;
  f.cause = Cause::kSoftware;
  f.category = Category::kHang;
  f.evidence["stalled_seconds"] = stalled_seconds;
  f.evidence["ranks_replied"] = static_cast<double>(views.size());
  f.evidence["ranks_waiting_in_communication"] = static_cast<double>(waiting);
  std::set<std::string> hosts;
  std::vector<std::string> places;
  for (const RankView* v : culprits) {
    f.ranks.push_back(v->r->rank);
    if (!v->r->host.empty()) hosts.insert(v->r->host);
    FunctionRef ref;
    ref.kind = "python_function";
    if (v->user != nullptr) {
      ref.name = Where(*v->user);
      places.push_back(fmt::format("rank {} at {}", v->r->rank, Where(*v->user)));
      f.evidence_text[fmt::format("rank_{}_at", v->r->rank)] =
          fmt::format("{}:{}", v->user->file, v->user->line);
    } else {
      ref.name = "(no Python frames)";
      places.push_back(fmt::format("rank {} (no Python frames)", v->r->rank));
    }
    if (v->main != nullptr)
      for (const auto& fr : v->main->frames) ref.stack.push_back(Where(fr));
    f.functions.push_back(std::move(ref));
  }
  for (int r : silent) f.ranks.push_back(r);
  f.hosts.assign(hosts.begin(), hosts.end());

  // Where the others wait, for the summary and the evidence.
  const RankView* waiter = nullptr;
  for (const auto& v : views)
    if (std::find(culprits.begin(), culprits.end(), &v) == culprits.end()) {
      waiter = &v;
      break;
    }
  std::string waits;
  if (waiter != nullptr && waiter->user != nullptr) {
    waits = Where(*waiter->user);
    f.evidence_text["others_wait_at"] =
        fmt::format("{}:{}", waiter->user->file, waiter->user->line);
    const LastCollective& lc = waiter->r->last_collective;
    if (!lc.op.empty())
      f.evidence_text["others_last_collective"] =
          fmt::format("{} #{} at {}:{}{}", lc.op, lc.count, lc.file, lc.line,
                      lc.in_progress ? " (in progress)" : "");
  }
  for (const RankView* v : culprits) {
    const LastCollective& lc = v->r->last_collective;
    if (!lc.op.empty())
      f.evidence_text[fmt::format("rank_{}_last_collective", v->r->rank)] =
          fmt::format("{} #{} at {}:{}{}", lc.op, lc.count, lc.file, lc.line,
                      lc.in_progress ? " (in progress)" : "");
  }

  std::string stalled = fmt::format("no iteration for {:.1f} s", stalled_seconds);
  if (!culprits.empty() || !silent.empty()) {
    std::string who;
    if (!places.empty()) who = fmt::format("{}", fmt::join(places, "; "));
    if (!silent.empty())
      who += fmt::format("{}rank{} {} sent no stacks (dead, or stuck holding the GIL)",
                         who.empty() ? "" : "; ", silent.size() == 1 ? "" : "s", RankList(silent));
    f.summary = fmt::format("hang ({}): {}{}{}", stalled, who,
                            culprits.empty() ? "" : fmt::format(": {}", how),
                            waits.empty() ? "" : fmt::format("; the others wait at {}", waits));
    f.suggestion =
        "look at the named rank's code at that line: it never reaches the collective the other "
        "ranks are blocked in (a rank-dependent branch, a stuck data source, a deadlock)";
  } else {
    // Every rank stands at the same place: nobody is behind, the job itself is stuck there.
    for (const auto& v : views) f.ranks.push_back(v.r->rank);
    f.finding_class = FindingClass::kAll;
    f.summary = fmt::format("hang ({}): every rank is stopped at {}", stalled,
                            waits.empty() ? std::string("an unknown place") : waits);
    f.suggestion =
        "all ranks wait at the same place: a collective that cannot complete (mismatched "
        "collectives, a dead peer outside the job, a network partition) or a shared resource";
    if (waiter != nullptr && waiter->user != nullptr) {
      FunctionRef ref{Where(*waiter->user), "python_function", {}};
      if (waiter->main != nullptr)
        for (const auto& fr : waiter->main->frames) ref.stack.push_back(Where(fr));
      f.functions.push_back(std::move(ref));
    }
  }
  std::sort(f.ranks.begin(), f.ranks.end());
  // A hang costs the whole iteration, and more.
  f.impact_fraction = 1.0;
  f.impact_ms = SToMs(stalled_seconds);
  d.findings.push_back(std::move(f));
  d.job.notes.push_back(fmt::format("the job stopped making progress: {}", stalled));
  return d;
}

Diagnosis SlowNotHung(const Diagnosis& hang, double stalled_seconds, int64_t resumed_step) {
  Diagnosis d = hang;
  std::erase_if(d.job.notes, [](const std::string& n) {
    return n.starts_with("the job stopped making progress");
  });
  d.job.notes.push_back(
      fmt::format("no iteration for {:.1f} s, then the job went on at iteration {}: slow, not hung",
                  stalled_seconds, resumed_step));
  for (Finding& f : d.findings) {
    if (f.category != Category::kHang) continue;
    f.evidence["stalled_seconds"] = stalled_seconds;
    f.evidence["resumed_at_iteration"] = static_cast<double>(resumed_step);
    f.impact_ms = SToMs(stalled_seconds);
    const auto text = [&](const std::string& key) {
      auto it = f.evidence_text.find(key);
      return it == f.evidence_text.end() ? std::string() : it->second;
    };
    const std::string waits = text("others_wait_at");
    if (f.finding_class == FindingClass::kAll) {
      f.category = Category::kStall;
      f.summary = fmt::format(
          "every rank stopped for {:.1f} s{}, then the job went on at iteration {}: a pause of "
          "the whole job, not a hang",
          stalled_seconds, waits.empty() ? "" : fmt::format(" at {}", waits), resumed_step);
      f.suggestion =
          "a pause every rank takes at the same place: a checkpoint, an evaluation, a slow "
          "shared file system or a collective with a slow member outside the job; move it off "
          "the training step or make it asynchronous";
      f.evidence_text["reasoning"] =
          "every rank stood at the same place and the iterations resumed: the job was paused";
      continue;
    }
    f.category = Category::kStraggler;
    f.cause = Cause::kUnknown;
    std::vector<std::string> places;
    for (int r : f.ranks) {
      const std::string at = text(fmt::format("rank_{}_at", r));
      places.push_back(at.empty() ? fmt::format("rank {}", r)
                                  : fmt::format("rank {} at {}", r, at));
    }
    f.summary = fmt::format(
        "{} slow, not hung: no iteration for {:.1f} s while {}{}, then the job went on at "
        "iteration {}",
        f.ranks.size() == 1 ? fmt::format("rank {} was", f.ranks[0])
                            : fmt::format("ranks {} were", RankList(f.ranks)),
        stalled_seconds, fmt::join(places, "; "),
        waits.empty() ? "" : fmt::format(" and the others waited at {}", waits), resumed_step);
    f.suggestion = fmt::format(
        "{}'s iterations complete, slowly: the slowdown window that follows profiles why (a CPU "
        "quota, a competing process, larger inputs, a slow data source)",
        f.ranks.size() == 1 ? fmt::format("rank {}", f.ranks[0])
                            : fmt::format("ranks {}", RankList(f.ranks)));
    f.evidence_text["reasoning"] =
        "the others waited for it and its iterations then completed: a straggler, not a hang";
  }
  return d;
}

}  // namespace perftracker::diagnose
