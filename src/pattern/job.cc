#include "pattern/job.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "base/parallel_for.h"
#include "pattern/merge.h"
#include "pattern/summarizer.h"
#include "pattern/summary_io.h"
#include "trace/reader.h"

namespace perftracker::pattern {
namespace {

namespace fs = std::filesystem;

// Folders may hold traces or summaries; summaries are listed by extension.
StatusOr<std::vector<std::string>> ExpandPaths(const std::vector<std::string>& paths) {
  std::vector<std::string> traces_in;
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      bool any_summary = false;
      std::vector<std::string> found;
      for (const auto& entry : fs::directory_iterator(p, ec)) {
        if (entry.is_regular_file() && HasSummaryExtension(entry.path().string())) {
          found.push_back(entry.path().string());
          any_summary = true;
        }
      }
      if (any_summary) {
        std::sort(found.begin(), found.end());
        out.insert(out.end(), found.begin(), found.end());
        continue;
      }
    } else if (fs::is_regular_file(p, ec) && (HasSummaryExtension(p) || LooksLikeSummaryFile(p))) {
      out.push_back(p);
      continue;
    }
    traces_in.push_back(p);
  }
  if (!traces_in.empty()) {
    PT_ASSIGN_OR_RETURN(std::vector<std::string> traces, trace::ExpandTracePaths(traces_in));
    out.insert(out.end(), traces.begin(), traces.end());
  }
  return out;
}

template <typename R>
Status Validate(const std::vector<R>& ranks) {
  std::vector<std::string> unplaced;
  std::map<int, std::string> by_rank;
  for (const auto& r : ranks) {
    if (r.rank < 0) {
      unplaced.push_back(r.source);
      continue;
    }
    auto [it, inserted] = by_rank.emplace(r.rank, r.source);
    if (!inserted) {
      return InvalidArgument(
          fmt::format("{} and {} both claim rank {}", it->second, r.source, r.rank));
    }
  }
  if (!unplaced.empty()) {
    std::string list;
    for (size_t i = 0; i < unplaced.size(); ++i) list += (i ? ", " : "") + unplaced[i];
    return InvalidArgument(fmt::format(
        "cannot tell the rank of {} file(s): {} (no distributedInfo.rank and no rank in the file "
        "name, e.g. rank-3.json)",
        unplaced.size(), list));
  }
  const R* first_ws = nullptr;
  for (const auto& r : ranks) {
    if (r.world_size <= 0) continue;
    if (first_ws == nullptr) {
      first_ws = &r;
    } else if (r.world_size != first_ws->world_size) {
      return InvalidArgument(fmt::format("{} says world size {} but {} says {}", first_ws->source,
                                         first_ws->world_size, r.source, r.world_size));
    }
  }
  return Status::Ok();
}

bool IsSummaryFile(const std::string& f) {
  return HasSummaryExtension(f) || LooksLikeSummaryFile(f);
}

constexpr std::string_view kTorch = ".torch.json";

bool IsTorchSidecar(const std::string& f) {
  return f.size() > kTorch.size() &&
         f.compare(f.size() - kTorch.size(), kTorch.size(), kTorch) == 0;
}

// Reads (summary) or summarizes (trace) every file on a pool of threads; consume(i, result) is
// called from the thread that produced file i's result.
template <typename Consume>
void ForEachFile(const std::vector<std::string>& files, const LoadOptions& options,
                 Consume consume) {
  const size_t threads = options.threads > 0 ? static_cast<size_t>(options.threads) : 0;
  ParallelFor(files.size(), threads, [&](size_t i) {
    const std::string& f = files[i];
    consume(i, IsSummaryFile(f) ? ReadSummaryFile(f) : SummarizeTrace(f, {}, IsTorchSidecar(f)));
  });
}

void Count(const RankSummary& r, bool new_file, LoadStats* stats) {
  stats->files += new_file;
  stats->json_bytes += r.read_stats.bytes;
  stats->events += r.read_stats.events;
  if (new_file) stats->skipped += r.read_stats.malformed_events + r.read_stats.unknown_kind;
}

// Files a ReadAhead keeps asked for ahead of the loading threads: 64 summaries of ~70 KB are a
// few MB in flight, enough to keep a virtual disk busy while two threads decode.
constexpr size_t kReadAheadFiles = 64;

// Reads ahead of the loading threads: a folder of cold summary files was read at the disk's pace
// by the two threads that also decode them (measured: 100,000 files, 7 GB, cold page cache:
// reading took 23 s of a 29 s diagnosis; 8 loading threads cut it to 14 s but fought over the
// job's lock). One thread asks the kernel for the next files (POSIX_FADV_WILLNEED) while the
// loading threads decode the ones before.
class ReadAhead {
 public:
  explicit ReadAhead(const std::vector<std::string>& files)
      : files_(files), thread_([this] { Run(); }) {}
  ~ReadAhead() {
    stop_ = true;
    thread_.join();
  }
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;
  // A loading thread took file I (files are taken in order: base/parallel_for.h).
  void Reached(size_t i) {
    size_t seen = reached_.load();
    while (i > seen && !reached_.compare_exchange_weak(seen, i)) {
    }
  }

 private:
  void Run() {
    for (size_t i = 0; i < files_.size() && !stop_; ++i) {
      while (!stop_ && i >= reached_.load() + kReadAheadFiles)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const int fd = open(files_[i].c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;  // the loading thread reports it
      (void)posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
      close(fd);
    }
  }

  const std::vector<std::string>& files_;
  std::atomic<size_t> reached_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: it starts once the rest is set
};

}  // namespace

Status ValidateJob(const std::vector<RankSummary>& ranks) { return Validate(ranks); }

StatusOr<std::vector<RankSummary>> LoadJob(const std::vector<std::string>& paths,
                                           const LoadOptions& options, LoadStats* stats) {
  PT_ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandPaths(paths));
  if (files.empty()) return InvalidArgument("no trace or summary files given");

  std::vector<std::optional<StatusOr<RankSummary>>> results(files.size());
  ForEachFile(files, options,
              [&](size_t i, StatusOr<RankSummary>&& r) { results[i].emplace(std::move(r)); });

  // The online collector writes a window's Python trace X and torch.profiler's X.torch.json
  // side by side: one rank, merged (pattern/merge.h), as the agent does.
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < files.size(); ++i) index[files[i]] = i;
  std::vector<bool> merged(files.size(), false);
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& f = files[i];
    if (!IsTorchSidecar(f)) continue;
    auto it = index.find(f.substr(0, f.size() - kTorch.size()));
    if (it == index.end()) continue;
    StatusOr<RankSummary>& primary = *results[it->second];
    StatusOr<RankSummary>& secondary = *results[i];
    if (!primary.ok() || !secondary.ok()) continue;  // reported below
    MergeWindowSummary(&*primary, *secondary);
    merged[i] = true;
  }

  std::vector<RankSummary> out;
  out.reserve(files.size());
  LoadStats local;
  for (size_t i = 0; i < files.size(); ++i) {
    StatusOr<RankSummary>& r = *results[i];
    if (!r.ok()) return r.status();
    Count(*r, !merged[i], &local);
    if (!merged[i]) out.push_back(std::move(r).value());
  }
  // One file is a one-rank job whatever it names; only a set needs every file placed.
  if (out.size() == 1 && out[0].rank < 0) {
    out[0].rank = 0;
    if (out[0].world_size <= 0) out[0].world_size = 1;
  }
  PT_RETURN_IF_ERROR(ValidateJob(out));
  std::sort(out.begin(), out.end(),
            [](const RankSummary& a, const RankSummary& b) { return a.rank < b.rank; });
  if (stats != nullptr) *stats = local;
  return out;
}

StatusOr<CompactJob> LoadCompactJob(const std::vector<std::string>& paths,
                                    const LoadOptions& options, LoadStats* stats) {
  PT_ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandPaths(paths));
  if (files.empty()) return InvalidArgument("no trace or summary files given");
  CompactJob job;
  // Window traces in pairs need merging first; a job of summaries (the large case) streams.
  if (std::any_of(files.begin(), files.end(), IsTorchSidecar)) {
    PT_ASSIGN_OR_RETURN(std::vector<RankSummary> ranks, LoadJob(paths, options, stats));
    for (auto& r : ranks) job.Add(std::move(r));
    return job;
  }
  std::mutex mu;
  Status first_error = Status::Ok();
  size_t first_error_file = files.size();
  LoadStats local;
  // One file is a one-rank job whatever it names; only a set needs every file placed.
  auto place_alone = [&](RankSummary* r) {
    if (files.size() == 1 && r->rank < 0) {
      r->rank = 0;
      if (r->world_size <= 0) r->world_size = 1;
    }
  };
  auto count = [&](const RankSummary& r) {
    std::lock_guard<std::mutex> lock(mu);
    Count(r, true, &local);
  };
  auto fail = [&](size_t i, const Status& st) {
    std::lock_guard<std::mutex> lock(mu);
    if (i < first_error_file) first_error = st, first_error_file = i;
  };
  job.Reserve(files.size());
  const size_t threads = options.threads > 0 ? static_cast<size_t>(options.threads) : 0;
  std::optional<ReadAhead> ahead;
  if (files.size() > kReadAheadFiles) ahead.emplace(files);
  ParallelFor(files.size(), threads, [&](size_t i) {
    const std::string& f = files[i];
    if (ahead) ahead->Reached(i);
    if (IsSummaryFile(f)) {
      // Decoded straight into the compact form: no FunctionPattern per function.
      SummaryReadTimes times;
      StatusOr<SummaryViews> v = ReadSummaryFileViews(f, &times);
      if (!v.ok()) return fail(i, v.status());
      place_alone(&v->summary);
      count(v->summary);
      const auto t0 = std::chrono::steady_clock::now();
      job.Add(std::move(v->summary), v->functions, v->strings);
      const double add_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::lock_guard<std::mutex> lock(mu);
      local.read_s += times.read_s;
      local.decode_s += times.decode_s;
      local.add_s += add_s;
      return;
    }
    StatusOr<RankSummary> r = SummarizeTrace(f);
    if (!r.ok()) return fail(i, r.status());
    place_alone(&*r);
    count(*r);
    job.Add(std::move(r).value());
  });
  PT_RETURN_IF_ERROR(first_error);
  job.SortByRank();  // first: the checks then name files in a stable order
  PT_RETURN_IF_ERROR(Validate(job.ranks()));
  if (stats != nullptr) *stats = local;
  return job;
}

}  // namespace perftracker::pattern
