#include "diagnose/missing_ranks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>

namespace perftracker::diagnose {

namespace {

// Every enum value has its row, in enum order (Describe indexes the table).
constexpr bool TableMatchesEnum() {
  for (size_t i = 0; i < kMissingReasons.size(); ++i)
    if (static_cast<size_t>(kMissingReasons[i].reason) != i) return false;
  return true;
}
static_assert(TableMatchesEnum(), "PT_MISSING_REASONS rows out of enum order");

// Details listed per reason in the summary; the others are in the evidence.
constexpr size_t kDetailsPerReason = 3;

const char* Ranks(size_t n) { return n == 1 ? "rank" : "ranks"; }

// The ranks of each reason present, in table order, each group sorted by rank.
std::vector<std::pair<MissingReason, std::vector<const MissingRank*>>> ByReason(
    const std::vector<MissingRank>& ranks) {
  std::map<MissingReason, std::vector<const MissingRank*>> groups;
  for (const MissingRank& m : ranks) groups[m.reason].push_back(&m);
  std::vector<std::pair<MissingReason, std::vector<const MissingRank*>>> out;
  for (auto& [reason, members] : groups) {
    std::sort(members.begin(), members.end(),
              [](const MissingRank* a, const MissingRank* b) { return a->rank < b->rank; });
    out.emplace_back(reason, std::move(members));
  }
  return out;
}

std::vector<int> RanksOf(const std::vector<const MissingRank*>& members) {
  std::vector<int> out;
  out.reserve(members.size());
  for (const MissingRank* m : members) out.push_back(m->rank);
  return out;
}

// " (process exited at iteration 57)" for one rank or one detail shared by all; else
// " (1: ..., 3: ..., ...)" for the first few ranks with a detail.
std::string Details(const std::vector<const MissingRank*>& members) {
  std::vector<const MissingRank*> with;
  for (const MissingRank* m : members)
    if (!m->detail.empty()) with.push_back(m);
  if (with.empty()) return "";
  const bool same = std::all_of(with.begin(), with.end(),
                                [&](const MissingRank* m) { return m->detail == with[0]->detail; });
  if (members.size() == 1 || (same && with.size() == members.size()))
    return fmt::format(" ({})", with[0]->detail);
  std::string out;
  for (size_t i = 0; i < with.size() && i < kDetailsPerReason; ++i)
    out += fmt::format("{}{}: {}", i ? ", " : "", with[i]->rank, with[i]->detail);
  if (with.size() > kDetailsPerReason) out += ", ...";
  return " (" + out + ")";
}

std::string Capitalized(std::string s) {
  if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  return s;
}

}  // namespace

const MissingReasonInfo& Describe(MissingReason r) {
  const size_t i = static_cast<size_t>(r);
  return i < kMissingReasons.size() ? kMissingReasons[i] : kMissingReasons.back();
}

bool IsProblem(MissingReason reason) { return reason != MissingReason::kEndedBeforeWindow; }

std::optional<MissingReason> MissingReasonNamed(std::string_view name) {
  for (const MissingReasonInfo& row : kMissingReasons)
    if (name == row.name) return row.reason;
  return std::nullopt;
}

std::optional<Finding> MissingRankFinding(const MissingRanks& missing, int reported, int expected) {
  if (missing.ranks.empty()) return std::nullopt;
  const auto groups = ByReason(missing.ranks);
  std::vector<int> all;
  for (const MissingRank& m : missing.ranks) all.push_back(m.rank);
  std::sort(all.begin(), all.end());
  expected = std::max(expected, reported + static_cast<int>(all.size()));

  Finding f;
  f.finding_class = FindingClass::kSubset;
  f.cause = Cause::kUnknown;
  f.category = Category::kMissingRank;
  f.ranks = all;
  f.confidence = 1.0;  // observed: nothing came
  f.evidence["missing_ranks"] = static_cast<double>(all.size());
  f.evidence["reported_ranks"] = reported;
  f.evidence["world_size"] = expected;
  if (missing.window_id > 0) f.evidence["window"] = static_cast<double>(missing.window_id);
  if (missing.deadline_s > 0) f.evidence["deadline_s"] = missing.deadline_s;
  if (missing.start_iteration >= 0)
    f.evidence["start_iteration"] = static_cast<double>(missing.start_iteration);

  std::string head = missing.window_id > 0
                         ? fmt::format("{} {} did not report for window {}", Ranks(all.size()),
                                       RankList(all), missing.window_id)
                         : fmt::format("{} {} missing", Ranks(all.size()), RankList(all));
  std::string parts, reasoning, suggestion;
  for (const auto& [reason, members] : groups) {
    const MissingReasonInfo& info = Describe(reason);
    const std::vector<int> ranks = RanksOf(members);
    const std::string list = RankList(ranks);
    if (!parts.empty()) parts += "; ";
    parts += groups.size() == 1 ? fmt::format("{}{}", info.words, Details(members))
                                : fmt::format("{} {} {}{}", Ranks(ranks.size()), list, info.words,
                                              Details(members));
    f.evidence[fmt::format("missing_{}", info.name)] = static_cast<double>(ranks.size());
    f.evidence_text[fmt::format("reason_{}", info.name)] = list;
    reasoning += fmt::format("{}{} {}: {}", reasoning.empty() ? "" : "; ", Ranks(ranks.size()),
                             list, info.how);
    suggestion +=
        groups.size() == 1
            ? info.suggestion
            : fmt::format("{}{} ({} {}): {}", suggestion.empty() ? "" : " ",
                          Capitalized(info.words), Ranks(ranks.size()), list, info.suggestion);
  }
  // Per rank, for the lowest few: what was seen of it (when more than its reason) and its last
  // iteration.
  std::vector<const MissingRank*> sorted;
  for (const MissingRank& m : missing.ranks) sorted.push_back(&m);
  std::sort(sorted.begin(), sorted.end(),
            [](const MissingRank* a, const MissingRank* b) { return a->rank < b->rank; });
  for (size_t i = 0; i < sorted.size() && i < kMaxDetailedMissingRanks; ++i) {
    const MissingRank& m = *sorted[i];
    const MissingReasonInfo& info = Describe(m.reason);
    if (!m.detail.empty())
      f.evidence_text[fmt::format("rank_{}", m.rank)] = fmt::format("{}: {}", info.name, m.detail);
    if (m.last_iteration >= 0)
      f.evidence[fmt::format("rank_{}_last_iteration", m.rank)] =
          static_cast<double>(m.last_iteration);
  }
  f.evidence_text["reasoning"] = reasoning;
  f.summary =
      fmt::format("{}: {}. The diagnosis covers {} of {} ranks.", head, parts, reported, expected);
  f.suggestion = suggestion;
  return f;
}

std::string MissingRankNote(const MissingRanks& missing, int expected) {
  const auto groups = ByReason(missing.ranks);
  std::vector<int> all;
  for (const MissingRank& m : missing.ranks) all.push_back(m.rank);
  std::string why;
  for (const auto& [reason, members] : groups) {
    if (!why.empty()) why += ", ";
    why += groups.size() == 1
               ? Describe(reason).words
               : fmt::format("{} {}", RankList(RanksOf(members)), Describe(reason).words);
  }
  return fmt::format("{} {} of {} missing{}: {}", Ranks(all.size()), RankList(all), expected,
                     missing.window_id > 0 ? fmt::format(" from window {}", missing.window_id) : "",
                     why);
}

}  // namespace perftracker::diagnose
