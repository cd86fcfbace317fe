#include "report/fr_export.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <set>
#include <string_view>

#include "base/private_dir.h"
#include "base/private_file.h"
#include "trace/pickle_writer.h"

namespace perftracker::report {
namespace {

using pattern::CollectiveCall;
using pattern::CollectiveLog;

// The description torch gives the group every rank belongs to.
constexpr std::string_view kDefaultGroupDesc = "default_pg";

// "2.10": the form of torch's dump versions (the worker's ring says "perftracker-ring/1").
bool IsDumpVersion(std::string_view v) {
  const size_t dot = v.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot + 1 == v.size()) return false;
  return std::all_of(v.begin(), v.end(), [](char c) { return c == '.' || (c >= '0' && c <= '9'); });
}

// A group's calls are numbered apart from its point-to-point ones: each is aligned on its own.
struct SeqKey {
  std::string group;
  bool p2p = false;
  auto operator<=>(const SeqKey&) const = default;
};

std::string Describe(const SeqKey& k, const std::string& desc) {
  return fmt::format("group '{}'{}{}", k.group, desc.empty() ? "" : fmt::format(" ({})", desc),
                     k.p2p ? " point-to-point" : "");
}

// Per group: the number from which every rank's record of it is complete; notes what is left
// out before it.
std::map<SeqKey, int64_t> AlignedStarts(const std::vector<CollectiveLog>& logs,
                                        std::vector<std::string>* notes) {
  std::map<SeqKey, std::map<int, std::vector<int64_t>>> seqs;  // key -> rank -> its numbers
  std::map<SeqKey, std::string> descs;
  for (const CollectiveLog& log : logs)
    for (const CollectiveCall& c : log.calls) {
      const SeqKey k{c.group, c.p2p};
      seqs[k][log.rank].push_back(c.seq);
      descs.emplace(k, c.group_desc);
    }
  std::map<SeqKey, int64_t> starts;
  for (const auto& [key, by_rank] : seqs) {
    int64_t start = -1;
    int latest = -1;
    size_t before = 0;
    for (const auto& [rank, numbers] : by_rank) {
      const int64_t from = internal::CompleteFrom(numbers);
      if (from > start) start = from, latest = rank;
    }
    for (const auto& [rank, numbers] : by_rank)
      before += std::count_if(numbers.begin(), numbers.end(), [&](int64_t s) { return s < start; });
    starts[key] = start;
    if (before > 0)
      notes->push_back(fmt::format(
          "{}: from #{}, where every rank's record is complete (rank {}'s runs from there): {} "
          "earlier call(s) left out",
          Describe(key, descs[key]), start, latest, before));
  }
  return starts;
}

std::string RankListText(const std::vector<int>& ranks) {
  return fmt::format("[{}]", fmt::join(ranks, ", "));  // Python's str() of the list
}

void WriteSizes(trace::PickleWriter* w, const std::vector<std::vector<int64_t>>& sizes) {
  w->OpenList();
  for (const std::vector<int64_t>& dims : sizes) {
    w->OpenList();
    for (int64_t d : dims) w->Int(d);
    w->Close();
  }
  w->Close();
}

void WriteStrings(trace::PickleWriter* w, const std::vector<std::string>& items) {
  w->OpenList();
  for (const std::string& s : items) w->String(s);
  w->Close();
}

void WriteEntry(trace::PickleWriter* w, const CollectiveCall& c, int64_t record_id, int pg_id,
                int group_size) {
  w->OpenDict();
  w->String("record_id");
  w->Int(record_id);
  w->String("pg_id");
  w->Int(pg_id);
  w->String("process_group");
  w->OpenTuple();
  w->String(c.group);
  w->String(c.group_desc);
  w->Close();
  w->String("collective_seq_id");
  w->Int(c.p2p ? 0 : c.seq);
  w->String("p2p_seq_id");
  w->Int(c.p2p ? c.seq : 0);
  w->String("op_id");
  w->Int(c.seq);
  w->String("profiling_name");
  w->String(c.backend.empty() ? c.op : c.backend + ":" + c.op);
  w->String("time_created_ns");
  w->Int(c.created_ns);
  w->String("input_sizes");
  WriteSizes(w, c.sizes);
  w->String("input_dtypes");
  WriteStrings(w, c.dtypes);
  w->String("output_sizes");
  WriteSizes(w, c.has_outputs ? c.output_sizes : internal::OutputsOf(c, group_size));
  w->String("output_dtypes");
  WriteStrings(w, c.has_outputs ? c.output_dtypes : c.dtypes);
  w->String("state");
  w->String(c.state);
  // Not kept by the reader, and not read by fr_trace: unknown.
  w->String("time_discovered_started_ns");
  w->None();
  w->String("time_discovered_completed_ns");
  w->None();
  w->String("is_p2p");
  w->Bool(c.p2p);
  w->String("frames");
  w->OpenList();
  for (auto f = c.frames.rbegin(); f != c.frames.rend(); ++f) {  // torch's: innermost first
    w->OpenDict();
    w->String("name");
    w->String(f->function);
    w->String("filename");
    w->String(f->file);
    w->String("line");
    w->Int(f->line);
    w->Close();
  }
  w->Close();
  w->Close();
}

}  // namespace

namespace internal {

std::map<std::string, std::vector<int>> GroupMembers(const std::vector<CollectiveLog>& logs) {
  std::map<std::string, std::vector<int>> out;
  int highest = -1;
  for (const CollectiveLog& log : logs) {
    highest = std::max(highest, log.rank);
    for (const auto& [group, ranks] : log.group_ranks) {
      if (!ranks.empty())
        highest = std::max(highest, *std::max_element(ranks.begin(), ranks.end()));
      if (!group.empty() && !ranks.empty()) out.emplace(group, ranks);
    }
  }
  for (const CollectiveLog& log : logs)
    for (const CollectiveCall& c : log.calls)
      if (c.group_desc == kDefaultGroupDesc && !out.contains(c.group)) {
        std::vector<int> every(highest + 1);
        for (int r = 0; r <= highest; ++r) every[r] = r;
        out.emplace(c.group, std::move(every));
      }
  return out;
}

int64_t CompleteFrom(const std::vector<int64_t>& seqs) {
  if (seqs.empty()) return -1;
  size_t i = seqs.size() - 1;
  while (i > 0 && seqs[i - 1] + 1 == seqs[i]) --i;
  return seqs[i];
}

std::vector<std::vector<int64_t>> OutputsOf(const CollectiveCall& c, int group_size) {
  std::vector<std::vector<int64_t>> out = c.sizes;
  const bool gather =
      c.op == "all_gather_into_tensor" || c.op == "_allgather_base" || c.op == "all_gather_base";
  const bool scatter = c.op == "reduce_scatter_tensor" || c.op == "_reduce_scatter_base";
  if ((gather || scatter) && group_size > 0)
    for (std::vector<int64_t>& dims : out)
      if (!dims.empty()) dims[0] = gather ? dims[0] * group_size : dims[0] / group_size;
  return out;
}

}  // namespace internal

StatusOr<FrExport> ExportFlightRecorder(const std::vector<CollectiveLog>& logs) {
  FrExport e;
  if (logs.empty()) return InvalidArgument("no collectives recorded: nothing to export");
  const std::map<std::string, std::vector<int>> members = internal::GroupMembers(logs);
  const std::map<SeqKey, int64_t> starts = AlignedStarts(logs, &e.notes);
  std::string version = kFrExportVersion;
  for (const CollectiveLog& log : logs)
    if (IsDumpVersion(log.version)) {
      version = log.version;
      break;
    }
  // Groups: every one the calls name whose ranks are known, numbered as torch's pg_id would be.
  std::map<std::string, std::string> descs;
  std::map<std::string, size_t> unplaced;  // groups without ranks: their calls
  for (const CollectiveLog& log : logs)
    for (const CollectiveCall& c : log.calls) {
      descs.emplace(c.group, c.group_desc);
      if (!members.contains(c.group)) ++unplaced[c.group];
    }
  for (const auto& [group, n] : unplaced)
    e.notes.push_back(fmt::format(
        "group '{}' ({}): no dump gives its ranks: its {} call(s) left out (fr_trace needs "
        "every group's members)",
        group, descs[group], n));
  std::map<std::string, int> pg_ids;
  for (const auto& [group, desc] : descs)
    if (members.contains(group)) pg_ids.emplace(group, static_cast<int>(pg_ids.size()));
  std::set<int> have;
  for (const CollectiveLog& log : logs) have.insert(log.rank);
  for (const auto& [group, ranks] : members) {
    if (!pg_ids.contains(group)) continue;
    std::vector<int> missing;
    for (int r : ranks)
      if (!have.contains(r)) missing.push_back(r);
    if (!missing.empty())
      e.notes.push_back(fmt::format(
          "group '{}': rank(s) {} left no record: run fr_trace with --allow-incomplete-ranks",
          group, fmt::join(missing, ",")));
  }
  for (const CollectiveLog& log : logs) {
    if (e.files.contains(log.rank))
      return InvalidArgument(fmt::format("two records of rank {} ({})", log.rank, log.source));
    trace::PickleWriter w;
    w.OpenDict();
    w.String("version");
    w.String(version);
    w.String("pg_config");
    w.OpenDict();
    for (const auto& [group, id] : pg_ids) {
      w.String(group);
      w.OpenDict();
      w.String("name");
      w.String(group);
      w.String("desc");
      w.String(descs[group]);
      w.String("ranks");
      w.String(RankListText(members.at(group)));
      w.Close();
    }
    w.Close();
    w.String("pg_status");
    w.OpenDict();
    for (const auto& [group, p] : log.progress) {
      if (!pg_ids.contains(group)) continue;
      w.String(group);
      w.OpenDict();
      w.String("last_enqueued_collective");
      w.Int(p.last_enqueued);
      w.String("last_started_collective");
      w.Int(p.last_started);
      w.String("last_completed_collective");
      w.Int(p.last_completed);
      w.Close();
    }
    w.Close();
    w.String("entries");
    w.OpenList();
    int64_t record_id = 0;
    size_t derived = 0;
    for (const CollectiveCall& c : log.calls) {
      auto id = pg_ids.find(c.group);
      if (id == pg_ids.end() || c.seq < starts.at({c.group, c.p2p})) continue;
      if (!c.has_outputs) ++derived;
      WriteEntry(&w, c, record_id++, id->second, static_cast<int>(members.at(c.group).size()));
    }
    w.Close();
    w.Close();
    if (derived > 0)
      e.notes.push_back(fmt::format(
          "rank {}: the outputs of {} call(s) follow from their op (its record is the worker's "
          "ring, {}: inputs only)",
          log.rank, derived, log.source));
    PT_ASSIGN_OR_RETURN(std::string bytes, w.Finish());
    e.files.emplace(log.rank, std::move(bytes));
  }
  return e;
}

Status WriteFlightRecorderFolder(const FrExport& e, const std::string& out) {
  PT_RETURN_IF_ERROR(MakeOwnFolder(out, "Flight Recorder folder"));
  for (const auto& [rank, bytes] : e.files) {
    const std::string path = (std::filesystem::path(out) / fmt::format("rank_{}", rank)).string();
    int err = 0;
    if (Status st = CreatePrivateFile(path, bytes, IfPresent::kFail, &err); !st.ok()) {
      return err == EEXIST ? InvalidArgument(st.message() + " (export into a new folder)") : st;
    }
  }
  return Status::Ok();
}

}  // namespace perftracker::report
