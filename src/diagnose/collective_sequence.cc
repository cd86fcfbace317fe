#include "diagnose/collective_sequence.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "base/units.h"
#include "diagnose/hang.h"

namespace perftracker::diagnose {
namespace {

using pattern::CollectiveCall;
using pattern::CollectiveLog;
using pattern::StackFrame;

// One group's collectives: rank -> number -> the call (the newest, should a ring hold two).
struct Group {
  std::string name, desc;
  std::map<int, std::map<int64_t, const CollectiveCall*>> calls;
  std::map<int, const CollectiveLog*> logs;
};

std::map<std::string, Group> GroupCalls(const std::vector<CollectiveLog>& logs) {
  std::map<std::string, Group> groups;
  for (const CollectiveLog& log : logs)
    for (const CollectiveCall& c : log.calls) {
      if (c.p2p) continue;  // p2p numbers count per pair of ranks, not per group
      Group& g = groups[c.group];
      g.name = c.group;
      if (g.desc.empty()) g.desc = c.group_desc;
      g.calls[log.rank][c.seq] = &c;
      g.logs[log.rank] = &log;
    }
  return groups;
}

std::string GroupName(const Group& g) {
  return g.desc.empty() || g.desc == g.name ? fmt::format("group {}", g.name)
                                            : fmt::format("group {} ({})", g.name, g.desc);
}

// What the ranks must agree on: op, sizes, dtypes.
std::string Signature(const CollectiveCall& c) {
  std::string s = c.op;
  for (const auto& dims : c.sizes) {
    s += '[';
    for (int64_t d : dims) s += std::to_string(d) + ',';
    s += ']';
  }
  for (const auto& t : c.dtypes) s += t + ';';
  return s;
}

// Whether two records of one number can be the same collective: the same op, and the same sizes
// and dtypes where both say them.
bool Compatible(const CollectiveCall& a, const CollectiveCall& b) {
  if (a.op != b.op) return false;
  if (!a.sizes.empty() && !b.sizes.empty() && a.sizes != b.sizes) return false;
  return a.dtypes.empty() || b.dtypes.empty() || a.dtypes == b.dtypes;
}

// "all_reduce of 7 Float in all_reduce at train.py:145": what, the library function that made
// it when that is not the user's code, and where the user's code called it.
std::string Where(const CollectiveCall& c) {
  std::string out = DescribeCollective(c);
  if (!c.frames.empty() && IsLibraryFrame(c.frames.back()) && c.frames.back().function != c.op)
    out += " in " + c.frames.back().function;
  if (const StackFrame* u = UserFrame(c)) out += fmt::format(" at {}:{}", u->file, u->line);
  return out;
}

FunctionRef Ref(const CollectiveCall& c) {
  FunctionRef ref;
  const StackFrame* u = UserFrame(c);
  ref.name = u != nullptr ? fmt::format("{}:{} in {}", u->file, u->line, u->function) : c.op;
  ref.kind = "collective";
  for (const StackFrame& f : c.frames)
    ref.stack.push_back(fmt::format("{}:{} in {}", f.file, f.line, f.function));
  return ref;
}

// A finding of the ranks of G about collective SEQ: observed (confidence 1), software, and a job
// that cannot go on loses every iteration from here.
Finding SequenceFinding(Category category, int64_t seq, const Group& g, double stalled_seconds) {
  Finding f;
  f.category = category;
  f.cause = Cause::kSoftware;
  f.finding_class = FindingClass::kSubset;
  f.impact_fraction = 1.0;
  f.impact_ms = SToMs(stalled_seconds);
  f.confidence = 1.0;
  f.evidence["collective_seq"] = static_cast<double>(seq);
  f.evidence_text["group"] = GroupName(g);
  return f;
}

// The first number at which the ranks' collectives differ.
class MismatchRule {
 public:
  static bool Apply(const Group& g, double stalled_seconds, std::vector<Finding>* out) {
    std::set<int64_t> seqs;
    for (const auto& [rank, calls] : g.calls)
      for (const auto& [seq, c] : calls) seqs.insert(seq);
    for (int64_t seq : seqs) {
      std::map<std::string, std::vector<int>> by_sig;
      std::map<std::string, const CollectiveCall*> example;
      for (const auto& [rank, calls] : g.calls) {
        auto it = calls.find(seq);
        if (it == calls.end()) continue;
        const std::string sig = Signature(*it->second);
        by_sig[sig].push_back(rank);
        example.emplace(sig, it->second);
      }
      if (by_sig.size() < 2) continue;
      // The majority is the collective the job meant; the others differ. With no majority, the
      // side of the lowest rank is the reference.
      auto major = std::max_element(by_sig.begin(), by_sig.end(), [](const auto& a, const auto& b) {
        return a.second.size() < b.second.size() ||
               (a.second.size() == b.second.size() && a.second.front() > b.second.front());
      });
      // A record that does not say its sizes (the worker's ring, for ops whose input it cannot
      // see as torch does) agrees with the reference on the op alone.
      const CollectiveCall& reference = *example.at(major->first);
      std::vector<int> agree = major->second;
      for (auto it = by_sig.begin(); it != by_sig.end();) {
        if (it != major && Compatible(*example.at(it->first), reference)) {
          agree.insert(agree.end(), it->second.begin(), it->second.end());
          it = by_sig.erase(it);
        } else {
          ++it;
        }
      }
      if (by_sig.size() < 2) continue;
      std::sort(agree.begin(), agree.end());
      major->second = agree;
      Finding f = SequenceFinding(Category::kCollectiveMismatch, seq, g, stalled_seconds);
      std::string odd_text;
      for (const auto& [sig, ranks] : by_sig) {
        if (sig == major->first) continue;
        f.ranks.insert(f.ranks.end(), ranks.begin(), ranks.end());
        const CollectiveCall& c = *example.at(sig);
        odd_text +=
            fmt::format("{}{} {}{} collective #{} on {} is {}", odd_text.empty() ? "" : "; ",
                        ranks.size() == 1 ? "rank" : "ranks", RankList(ranks),
                        ranks.size() == 1 ? "'s" : "'", seq, GroupName(g), Where(c));
        f.functions.push_back(Ref(c));
      }
      std::sort(f.ranks.begin(), f.ranks.end());
      const CollectiveCall& ref = *example.at(major->first);
      f.functions.push_back(Ref(ref));
      f.summary = fmt::format("collectives out of step: {}; {} {} {} in {}", odd_text,
                              major->second.size() == 1 ? "rank" : "ranks", RankList(major->second),
                              major->second.size() == 1 ? "is" : "are", Where(ref));
      f.evidence_text["expected"] = DescribeCollective(ref);
      f.evidence_text["expected_ranks"] = RankList(major->second);
      f.suggestion =
          "every rank of a process group must call its collectives in the same order with the "
          "same sizes and dtypes: look for a collective inside a rank-dependent branch, or inputs "
          "of different shapes, at the named line (TORCH_DISTRIBUTED_DEBUG=DETAIL checks each "
          "call)";
      out->push_back(std::move(f));
      return true;
    }
    return false;
  }
};

// Ranks behind the collective the others entered and still wait in.
class NeverEnteredRule {
 public:
  static void Apply(const Group& g, double stalled_seconds, std::vector<Finding>* out) {
    int64_t front = -1;
    for (const auto& [rank, calls] : g.calls)
      if (!calls.empty()) front = std::max(front, calls.rbegin()->first);
    std::vector<int> ahead;
    std::map<int64_t, std::vector<int>> behind;  // their last number -> ranks
    const CollectiveCall* waited = nullptr;
    bool waiting = false;
    for (const auto& [rank, calls] : g.calls) {
      const int64_t last = calls.empty() ? -1 : calls.rbegin()->first;
      if (last == front) {
        ahead.push_back(rank);
        waited = calls.rbegin()->second;
        waiting |= !Completed(*g.logs.at(rank), *waited);
      } else {
        behind[last].push_back(rank);
      }
    }
    // Ranks that finished it are not waiting for anyone: the dump was taken in passing.
    if (behind.empty() || waited == nullptr || !waiting) return;
    Finding f = SequenceFinding(Category::kHang, front, g, stalled_seconds);
    std::string behind_text;
    for (const auto& [last, ranks] : behind) {
      f.ranks.insert(f.ranks.end(), ranks.begin(), ranks.end());
      const CollectiveCall* at = g.calls.at(ranks.front()).at(last);
      behind_text += fmt::format("{}{} {} ({} last: #{}, {})", behind_text.empty() ? "" : "; ",
                                 ranks.size() == 1 ? "rank" : "ranks", RankList(ranks),
                                 ranks.size() == 1 ? "its" : "their", last, Where(*at));
      f.functions.push_back(Ref(*at));
    }
    std::sort(f.ranks.begin(), f.ranks.end());
    f.functions.push_back(Ref(*waited));
    f.summary = fmt::format(
        "{} never entered collective #{} on {}, {}, that {} {} {} in: {}",
        f.ranks.size() == 1 ? "rank " + RankList(f.ranks) : "ranks " + RankList(f.ranks), front,
        GroupName(g), DescribeCollective(*waited), ahead.size() == 1 ? "rank" : "ranks",
        RankList(ahead), ahead.size() == 1 ? "waits" : "wait", behind_text);
    f.evidence_text["others_wait_in"] = Where(*waited);
    f.evidence_text["waiting_ranks"] = RankList(ahead);
    f.suggestion =
        "the named ranks stopped before this collective: look at what they do after their last "
        "one (a rank-dependent branch that skips a collective, an exception caught and ignored, "
        "a stuck data source)";
    out->push_back(std::move(f));
  }
};

}  // namespace

const StackFrame* UserFrame(const CollectiveCall& c) {
  for (auto it = c.frames.rbegin(); it != c.frames.rend(); ++it)
    if (!IsLibraryFrame(*it)) return &*it;
  return nullptr;
}

bool Completed(const CollectiveLog& log, const CollectiveCall& c) {
  if (c.state == "completed") return true;
  auto it = log.progress.find(c.group);
  return it != log.progress.end() && it->second.last_completed >= c.seq;
}

std::string DescribeCollective(const CollectiveCall& c) {
  if (c.sizes.empty()) return c.op;
  // Sizes come from a dump: their product may not fit (saturated, said as "more than").
  int64_t n = 0;
  bool over = false;
  for (const auto& dims : c.sizes) {
    int64_t m = 1;
    for (int64_t d : dims) over |= __builtin_mul_overflow(m, std::max<int64_t>(d, 0), &m);
    over |= __builtin_add_overflow(n, m, &n);
  }
  if (over) n = std::numeric_limits<int64_t>::max();
  std::string count = std::to_string(n);
  for (int i = static_cast<int>(count.size()) - 3; i > 0; i -= 3)
    count.insert(static_cast<size_t>(i), ",");
  std::string dtype = c.dtypes.empty() ? "" : " " + c.dtypes.front();
  return fmt::format("{} of {}{}{}", c.op, over ? "more than " : "", count, dtype);
}

SequenceResult DiagnoseCollectiveSequence(const std::vector<pattern::CollectiveLog>& logs,
                                          const std::vector<int>& expected,
                                          double stalled_seconds) {
  SequenceResult result;
  std::set<int> have;
  for (const CollectiveLog& log : logs) have.insert(log.rank);
  std::vector<int> absent;
  for (int r : expected)
    if (!have.count(r)) absent.push_back(r);
  if (!absent.empty())
    result.notes.push_back(fmt::format("no ring of collectives from {} {}",
                                       absent.size() == 1 ? "rank" : "ranks", RankList(absent)));
  for (const auto& [name, g] : GroupCalls(logs))
    if (!MismatchRule::Apply(g, stalled_seconds, &result.findings))
      NeverEnteredRule::Apply(g, stalled_seconds, &result.findings);
  return result;
}

}  // namespace perftracker::diagnose
