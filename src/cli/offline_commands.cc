// The offline subcommands (cli/offline_commands.h): each subcommand's flags, then its runner.
#include "cli/offline_commands.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "base/terminal.h"
#include "base/units.h"
#include "diagnose/collective_sequence.h"
#include "diagnose/diagnose.h"
#include "diagnose/what_if.h"
#include "pattern/flight_recorder.h"
#include "pattern/job.h"
#include "pattern/rank_critical_path.h"
#include "pattern/steady_state.h"
#include "pattern/summarizer.h"
#include "pattern/summary_io.h"
#include "report/breakdown.h"
#include "report/diagnosis_reader.h"
#include "report/fr_export.h"
#include "report/html.h"
#include "report/report.h"
#include "report/trace_export.h"
#include "sim/simulator.h"
#include "trace/reader.h"

namespace pt = perftracker;

namespace perftracker::cli {

int Fail(const Status& status) {
  pt::PutSafe("perftracker: error: " + status.message() + "\n", stderr);
  return 1;
}

// The diagnosis numbers users tune (diagnose/policy.h has them all, with their reasons).
void AddDiagnoseFlags(CLI::App* cmd, pt::diagnose::DiagnoseOptions* o) {
  cmd->add_option("--min-impact", o->min_fraction,
                  "smallest share of an iteration a finding must cost (default 0.05)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--expected-busbw", o->expected_busbw_gbps,
                  "bus bandwidth (GB/s) large collectives should reach (default 50: NVLink; "
                  "lower it for PCIe or cross-node jobs)")
      ->check(CLI::PositiveNumber);
}

namespace {

double PeakRssMb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return pt::KiBToMiB(usage.ru_maxrss);
}

void AddOutputFlags(CLI::App* cmd, OutputFlags* flags) {
  cmd->add_option("--json", flags->json_path,
                  "write the diagnosis as JSON (perftracker.diagnosis/1)");
  cmd->add_option("--html", flags->html_path,
                  "write the report as one self-contained HTML page (charts, no outside request)");
  cmd->add_option("--threads", flags->threads,
                  "parallel readers, and diagnosis threads (default: all cores)");
  cmd->add_flag("-q,--quiet", flags->quiet, "no terminal report");
  cmd->add_flag("--stats", flags->stats, "print read throughput, time and peak memory to stderr");
  AddDiagnoseFlags(cmd, &flags->diagnose);
}

// An output file named like one of the inputs (`show --json TRACE ...` when `--json OUT TRACE`
// was meant) would be overwritten after it was read: refused before any work.
pt::Status OutputIsNotAnInput(const std::string& out, const std::vector<std::string>& inputs) {
  if (out.empty()) return pt::Status::Ok();
  std::error_code ec;
  for (const std::string& in : inputs) {
    if (std::filesystem::equivalent(out, in, ec) && !ec)
      return pt::InvalidArgument(
          fmt::format("{}: the output would overwrite an input; name another file", out));
  }
  return pt::Status::Ok();
}

// JOB: the patterns the diagnosis came from (the HTML report's per-rank views), or null.
int Emit(const pt::diagnose::Diagnosis& diagnosis, const OutputFlags& flags,
         const pt::pattern::CompactJob* job = nullptr, const std::string& title = "") {
  if (!flags.quiet) pt::PutSafe(pt::report::RenderText(diagnosis), stdout);
  if (!flags.json_path.empty()) {
    pt::Status st = pt::report::WriteJsonFile(diagnosis, flags.json_path);
    if (!st.ok()) return Fail(st);
  }
  if (!flags.html_path.empty()) {
    pt::report::HtmlInput in;
    in.title = title.empty() ? "perftracker report" : title;
    in.diagnosis = &diagnosis;
    in.job = job;
    in.generated = fmt::format("perftracker {}", PT_VERSION);
    pt::Status st = pt::report::WriteHtmlFile(in, flags.html_path);
    if (!st.ok()) return Fail(st);
  }
  return 0;
}

// What a report calls the job: its input, shortened ("traces/job1 (8 files)").
std::string JobTitle(const std::vector<std::string>& paths) {
  if (paths.empty()) return "";
  std::string first = std::filesystem::path(paths[0]).lexically_normal().string();
  if (first.size() > 1 && first.back() == '/') first.pop_back();
  return paths.size() == 1 ? "perftracker: " + first
                           : fmt::format("perftracker: {} and {} more", first, paths.size() - 1);
}

void PrintStats(const pt::pattern::LoadStats& s, double seconds, const pt::PhaseTimes& phases) {
  double mb = pt::BytesToMB(s.json_bytes);
  std::fprintf(stderr,
               "perftracker: %zu files, %.1f MB of JSON, %llu events, %llu skipped, %.3f s, "
               "%.0f MB/s, peak RSS %.0f MB\n",
               s.files, mb, static_cast<unsigned long long>(s.events),
               static_cast<unsigned long long>(s.skipped), seconds,
               seconds > 0 ? mb / seconds : 0.0, PeakRssMb());
  // Where the time went: wall time per phase; the summary files' parts in thread-seconds.
  std::fprintf(stderr, "perftracker: phases (wall): %s\n", phases.Format().c_str());
  if (s.read_s + s.decode_s + s.add_s > 0)
    std::fprintf(stderr,
                 "perftracker: summary files (thread-seconds): read %.2f s, decode %.2f s, "
                 "add to the job %.2f s\n",
                 s.read_s, s.decode_s, s.add_s);
}

// The traces among PATHS once the Flight Recorder DUMPS are set aside: a folder of dumps alone
// holds no trace, which is no error.
pt::StatusOr<std::vector<std::string>> TracesBesideDumps(const std::vector<std::string>& paths,
                                                         const std::vector<std::string>& dumps) {
  std::vector<std::string> traces;
  for (const std::string& path : paths) {
    if (std::find(dumps.begin(), dumps.end(), path) != dumps.end()) continue;
    auto files = pt::trace::ExpandTracePaths({path});
    if (!files.ok() && std::filesystem::is_directory(path)) continue;
    if (!files.ok()) return files.status();
    for (const std::string& f : *files)
      if (std::find(dumps.begin(), dumps.end(), f) == dumps.end()) traces.push_back(f);
  }
  return traces;
}

// The findings of the ranks' Flight Recorder dumps (diagnose/collective_sequence.h) added to D.
void AddSequenceFindings(const std::vector<pt::pattern::CollectiveLog>& logs,
                         std::vector<std::string> notes, pt::diagnose::Diagnosis* d) {
  std::vector<int> expected = d->job.ranks;
  if (expected.empty())
    for (const auto& log : logs) expected.push_back(log.rank);
  pt::diagnose::SequenceResult seq = pt::diagnose::DiagnoseCollectiveSequence(logs, expected, 0);
  notes.push_back(fmt::format("{} Flight Recorder dump(s) compared by collective sequence number",
                              logs.size()));
  for (auto& n : seq.notes) notes.push_back(std::move(n));
  for (auto& n : notes) d->job.notes.push_back(std::move(n));
  for (auto& f : seq.findings) d->findings.insert(d->findings.begin(), std::move(f));
}

int RunAnalyze(const std::vector<std::string>& paths, const OutputFlags& flags) {
  if (pt::Status st = OutputIsNotAnInput(flags.json_path, paths); !st.ok()) return Fail(st);
  if (pt::Status st = OutputIsNotAnInput(flags.html_path, paths); !st.ok()) return Fail(st);
  auto start = std::chrono::steady_clock::now();
  pt::PhaseTimes phases;
  std::optional<pt::ScopedPhase> finding(std::in_place, &phases, "find inputs");
  auto dumps = pt::pattern::FindFlightRecorderDumps(paths);
  if (!dumps.ok()) return Fail(dumps.status());
  std::vector<std::string> traces = paths;
  std::vector<pt::pattern::CollectiveLog> logs;
  std::vector<std::string> notes;
  if (!dumps->empty()) {
    auto t = TracesBesideDumps(paths, *dumps);
    if (!t.ok()) return Fail(t.status());
    traces = std::move(*t);
    logs = pt::pattern::ReadFlightRecorderDumps(*dumps, &notes);
  }
  finding.reset();
  pt::pattern::LoadStats stats;
  std::optional<pt::pattern::CompactJob> job;
  pt::diagnose::Diagnosis diagnosis;
  if (!traces.empty()) {
    {
      pt::ScopedPhase p(&phases, "load");
      auto j = pt::pattern::LoadCompactJob(traces, {.threads = flags.threads}, &stats);
      if (!j.ok()) return Fail(j.status());
      job = std::move(*j);
    }
    pt::diagnose::DiagnoseOptions options = flags.diagnose;
    options.threads = static_cast<size_t>(std::max(flags.threads, 0));  // as many as the readers
    options.phases = &phases;
    diagnosis = pt::diagnose::Diagnose(*job, options);
  } else {
    for (const auto& log : logs) diagnosis.job.ranks.push_back(log.rank);
    std::sort(diagnosis.job.ranks.begin(), diagnosis.job.ranks.end());
    diagnosis.job.world_size = diagnosis.job.ranks.empty() ? 0 : diagnosis.job.ranks.back() + 1;
  }
  if (!logs.empty()) AddSequenceFindings(logs, std::move(notes), &diagnosis);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int rc = 0;
  {
    pt::ScopedPhase p(&phases, "report");
    rc = Emit(diagnosis, flags, job ? &*job : nullptr, JobTitle(paths));
  }
  if (flags.stats) PrintStats(stats, seconds, phases);
  return rc;
}

// A rank's critical path per iteration (pattern/rank_critical_path.h) as it ran and without a
// function.
struct PathWithout {
  int rank = -1;
  double before_ms = 0, after_ms = 0;
};

// Each trace's rank's path as it ran and without FUNCTION (its calls, what they call and the GPU
// work they launch), over its ProfilerSteps; a trace without FUNCTION and summaries (no events)
// give none.
pt::StatusOr<std::vector<PathWithout>> PathsWithout(const std::vector<std::string>& paths,
                                                    const std::string& function) {
  std::vector<PathWithout> out;
  auto files = pt::trace::ExpandTracePaths(paths);
  if (!files.ok()) return out;  // summaries alone
  for (const std::string& file : *files) {
    if (pt::pattern::HasSummaryExtension(file) || pt::pattern::LooksLikeSummaryFile(file) ||
        pt::pattern::IsPythonWindowFile(file))  // its torch trace is listed on its own
      continue;
    pt::pattern::CriticalPathSink sink;
    auto read = pt::trace::ReadTrace(file, &sink);
    if (!read.ok()) return read.status();
    if (!sink.Holds(function)) continue;
    const pt::pattern::RankCriticalPath before = sink.Compute({}, 0);
    const pt::pattern::RankCriticalPath after = sink.Compute({}, 0, function);
    if (before.iterations > 0) out.push_back({sink.rank(), before.MeanMs(), after.MeanMs()});
  }
  return out;
}

int RunWhatIf(const WhatIfFlags& w) {
  namespace dg = pt::diagnose;
  if ((w.finding > 0) + (w.rank >= 0) + !w.function.empty() + (w.busbw_gbps > 0) != 1)
    return Fail(pt::InvalidArgument(
        "whatif: name one change: --finding N, --rank R, --function NAME or --busbw GBPS"));
  pt::pattern::LoadStats stats;
  auto job = pt::pattern::LoadCompactJob(w.paths, {}, &stats);
  if (!job.ok()) return Fail(job.status());
  const dg::Diagnosis d = dg::Diagnose(*job);
  const double iteration = d.job.iteration_ms_median;
  double saving = 0;
  std::string what;
  if (w.finding > 0) {
    if (static_cast<size_t>(w.finding) > d.findings.size())
      return Fail(pt::InvalidArgument(
          fmt::format("whatif: --finding {}: the diagnosis has {}", w.finding, d.findings.size())));
    const dg::Finding& f = d.findings[static_cast<size_t>(w.finding - 1)];
    if (f.what_if_ms < 0)
      return Fail(pt::InvalidArgument(fmt::format(
          "whatif: finding {} ({}) has no replay: no time cost, or no arrivals to go by", w.finding,
          dg::CategoryName(f.category))));
    saving = f.what_if_ms;
    what = fmt::format("without finding {} ({})", w.finding, f.summary);
  } else if (w.busbw_gbps > 0) {
    auto s = dg::BusBandwidthSavingMs(*job, d.arrivals, w.busbw_gbps);
    if (!s.ok()) return Fail(pt::InvalidArgument("whatif: --busbw: " + s.status().message()));
    saving = *s;
    what = fmt::format("collectives at {:g} GB/s bus bandwidth", w.busbw_gbps);
  } else {
    auto earlier = w.rank >= 0 ? dg::RankAtPeersMedian(d.arrivals, w.rank)
                               : dg::FunctionAtPeersMedian(*job, d.arrivals, w.function, w.zero);
    if (!earlier.ok()) return Fail(pt::InvalidArgument("whatif: " + earlier.status().message()));
    saving = d.arrivals.single_rank ? (earlier->empty() ? 0.0 : earlier->begin()->second)
                                    : dg::ArrivalSavingMs(d.arrivals.ranks, *earlier);
    what = w.rank >= 0
               ? fmt::format("rank {} at its peers' median", w.rank)
               : fmt::format("{} {}", w.function, w.zero ? "removed" : "at its peers' median");
  }
  // A function removed: each rank's own critical path re-timed without it. With one rank there
  // are no arrivals to replay, and the path says what removing it gives (time it spent off the
  // path, under the GPU's or the CPU's, gives nothing); with several, the arrivals decide.
  std::vector<PathWithout> within;
  if (!w.function.empty() && w.zero) {
    auto p = PathsWithout(w.paths, w.function);
    if (!p.ok()) return Fail(p.status());
    within = std::move(*p);
    if (d.arrivals.single_rank && within.size() == 1)
      saving = std::max(0.0, within[0].before_ms - within[0].after_ms);
  }
  saving = std::min(saving, iteration);
  std::printf("%s: the iteration %.1f ms -> %.1f ms (saves %.1f ms/iter, %.0f%%)\n", what.c_str(),
              iteration, iteration - saving, saving,
              iteration > 0 ? 100 * saving / iteration : 0.0);
  for (const PathWithout& p : within)
    pt::PutSafe(fmt::format("rank {}'s critical path: {:.1f} ms -> {:.1f} ms an iteration without "
                            "{}\n",
                            p.rank, p.before_ms, p.after_ms, w.function),
                stdout);
  std::vector<std::string> slack;
  for (const auto& [rank, ms] : d.job.slack_ms_per_rank)
    slack.push_back(ms < 0.05 ? fmt::format("rank {} (critical)", rank)
                              : fmt::format("rank {} {:.1f}", rank, ms));
  if (!slack.empty())
    std::printf("slack per iteration (ms): %s\n",
                fmt::format("{}", fmt::join(slack, ", ")).c_str());
  return 0;
}

// `perftracker export-trace`: the ranks' traces as one Chrome JSON trace (report/trace_export.h).
int RunExportTrace(const std::vector<std::string>& paths, const std::string& out,
                   std::string diagnosis_path) {
  namespace fs = std::filesystem;
  if (pt::Status st = OutputIsNotAnInput(out, paths); !st.ok()) return Fail(st);
  auto files = pt::trace::ExpandTracePaths(paths);
  if (!files.ok()) return Fail(files.status());
  // A run's window folder (REPORT_DIR/traces/window-<n>): that window's findings, if diagnosed.
  std::error_code ec;
  if (diagnosis_path.empty() && paths.size() == 1 && fs::is_directory(paths[0], ec)) {
    fs::path dir = fs::path(paths[0]).lexically_normal();
    if (dir.filename().empty()) dir = dir.parent_path();
    const std::string name = dir.filename().string();
    if (name.rfind("window-", 0) == 0) {
      fs::path d = dir.parent_path().parent_path() / "windows" / name.substr(7) / "diagnosis.json";
      if (fs::exists(d, ec)) diagnosis_path = d.string();
    }
  }
  std::optional<pt::diagnose::Diagnosis> diagnosis;
  if (!diagnosis_path.empty()) {
    auto d = pt::report::ReadDiagnosisFile(diagnosis_path);
    if (!d.ok()) return Fail(d.status());
    diagnosis = std::move(*d);
  }
  auto stats =
      pt::report::ExportTrace(*files, out, {.diagnosis = diagnosis ? &*diagnosis : nullptr});
  if (!stats.ok()) return Fail(stats.status());
  for (const std::string& n : stats->notes) std::fprintf(stderr, "note: %s\n", n.c_str());
  std::printf(
      "%s: %d rank(s), %d file(s), %llu events%s (open it in ui.perfetto.dev)\n", out.c_str(),
      stats->ranks, stats->files, static_cast<unsigned long long>(stats->events),
      diagnosis ? fmt::format(", {} finding(s) marked", diagnosis->findings.size()).c_str() : "");
  return 0;
}

// `perftracker export-fr`: the ranks' collectives as a folder PyTorch's fr_trace reads
// (report/fr_export.h). A report folder stands for its collectives/ folder.
int RunExportFr(std::vector<std::string> paths, const std::string& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (std::string& p : paths)
    if (fs::is_directory(fs::path(p) / "collectives", ec))
      p = (fs::path(p) / "collectives").string();
  if (pt::Status st = OutputIsNotAnInput(out, paths); !st.ok()) return Fail(st);
  auto dumps = pt::pattern::FindFlightRecorderDumps(paths);
  if (!dumps.ok()) return Fail(dumps.status());
  if (dumps->empty())
    return Fail(pt::InvalidArgument(fmt::format(
        "{}: no Flight Recorder dump or ring of collectives (rank_R.fr.pkl, rank_R.ring.json)",
        fmt::join(paths, ", "))));
  std::vector<std::string> notes;
  std::vector<pt::pattern::CollectiveLog> logs =
      pt::pattern::ReadFlightRecorderDumps(*dumps, &notes);
  auto exported = pt::report::ExportFlightRecorder(logs);
  if (!exported.ok()) return Fail(exported.status());
  if (pt::Status st = pt::report::WriteFlightRecorderFolder(*exported, out); !st.ok())
    return Fail(st);
  for (const std::string& n : notes) std::fprintf(stderr, "note: %s\n", n.c_str());
  for (const std::string& n : exported->notes) std::fprintf(stderr, "note: %s\n", n.c_str());
  std::printf(
      "%s: %zu rank(s) (rank_<R>); read it with: python -m "
      "torch.distributed.flight_recorder.fr_trace %s\n",
      out.c_str(), exported->files.size(), out.c_str());
  return 0;
}

int RunSummarize(const std::vector<std::string>& traces, const std::string& out) {
  if (traces.size() == 1 && !std::filesystem::is_directory(traces[0])) {
    auto summary = pt::pattern::SummarizeTrace(traces[0]);
    if (!summary.ok()) return Fail(summary.status());
    // -o summaries/rank-3.summary: its folder is made as the several-trace form makes OUT.
    std::error_code ec;
    const std::filesystem::path parent = std::filesystem::path(out).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (ec)
      return Fail(pt::InvalidArgument(
          fmt::format("{}: cannot create folder: {}", parent.string(), ec.message())));
    pt::Status st = pt::pattern::WriteSummaryFile(*summary, out);
    return st.ok() ? 0 : Fail(st);
  }
  // Several traces: OUT is a folder that receives rank-<R>.summary per trace.
  auto job = pt::pattern::LoadJob(traces);
  if (!job.ok()) return Fail(job.status());
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec)
    return Fail(
        pt::InvalidArgument(fmt::format("{}: cannot create folder: {}", out, ec.message())));
  for (const auto& r : *job) {
    pt::Status st =
        pt::pattern::WriteSummaryFile(r, fmt::format("{}/rank-{}.summary", out, r.rank));
    if (!st.ok()) return Fail(st);
  }
  return 0;
}

// The critical path (pattern/rank_critical_path.h) of each rank of JOB read from a trace file
// (not a summary: the path needs the events), through its steady iterations.
// The trace is read a second time: `show` is a person's command, and the summarizer keeps no
// events.
pt::StatusOr<pt::report::RankPaths> RankCriticalPaths(
    const std::vector<pt::pattern::RankSummary>& job) {
  // How many functions on the path a rank's line names.
  constexpr size_t kPathFunctionsShown = 3;
  pt::report::RankPaths out;
  for (const pt::pattern::RankSummary& r : job) {
    std::error_code ec;
    if (pt::pattern::HasSummaryExtension(r.source) ||
        !std::filesystem::is_regular_file(r.source, ec) ||
        pt::pattern::LooksLikeSummaryFile(r.source))
      continue;
    auto p = pt::pattern::TraceCriticalPath(r.source, r.iteration_steps, kPathFunctionsShown);
    if (!p.ok()) return p.status();
    if (p->iterations > 0 || p->too_many_events) out[r.rank] = std::move(*p);
  }
  return out;
}

// Prints what a rank's behaviour patterns hold: the top functions by time per iteration.
int RunShow(const std::vector<std::string>& paths, int top, const std::string& json_path) {
  if (pt::Status st = OutputIsNotAnInput(json_path, paths); !st.ok()) return Fail(st);
  auto job = pt::pattern::LoadJob(paths);
  if (!job.ok()) return Fail(job.status());
  auto critical = RankCriticalPaths(*job);
  if (!critical.ok()) return Fail(critical.status());
  pt::PutSafe(pt::report::BreakdownTable(*job), stdout);
  if (!json_path.empty()) {
    pt::Status st =
        pt::report::WriteTextFile(json_path, pt::report::BreakdownJson(*job, *critical));
    if (!st.ok()) return Fail(st);
  }
  for (const pt::pattern::RankSummary& r : *job) {
    for (const std::string& note : pt::pattern::SteadyStateNotes(r))
      pt::PutSafe(fmt::format("note: rank {}: {}\n", r.rank, note), stdout);
  }
  pt::PutSafe(pt::report::CriticalPathLines(*critical), stdout);
  std::printf("\n");
  for (const pt::pattern::RankSummary& r : *job) {
    pt::PutSafe(fmt::format("rank {} ({}): {} iterations from {}, mean {:.2f} ms, {} functions\n",
                            r.rank, r.source, r.iteration_ms.size(), r.iteration_source,
                            r.MeanIterationMs(), r.functions.size()),
                stdout);
    if (r.has_gpu) {
      std::printf(
          "  gpu per iteration: busy %.2f ms, idle %.2f ms, compute %.2f, comm %.2f, "
          "memcpy %.2f, overlap %.2f, cpu-critical %.2f\n",
          pt::UsToMs(r.gpu_busy_us), pt::UsToMs(r.gpu_idle_us), pt::UsToMs(r.compute_us),
          pt::UsToMs(r.comm_us), pt::UsToMs(r.memcpy_us), pt::UsToMs(r.comm_compute_overlap_us),
          pt::UsToMs(r.cpu_critical_us));
    }
    std::printf("  %10s %10s %8s %7s %10s %-11s %s\n", "ms/iter", "self ms", "calls", "share",
                "p99 us", "class", "function");
    int shown = 0;
    for (const auto& f : r.functions) {
      if (shown++ >= top) break;
      std::printf("  %10.3f %10.3f %8.1f %6.1f%% %10.1f %-11s ", pt::UsToMs(f.per_iter_us),
                  pt::UsToMs(f.self_per_iter_us), f.calls_per_iter, 100 * f.share, f.p99_us,
                  pt::pattern::FunctionClassName(f.fclass));
      pt::PutSafe(fmt::format("{}{}{}\n", f.name, f.stack.empty() ? "" : "  <- ", f.stack), stdout);
    }
  }
  return 0;
}

int RunDiff(const std::string& base, const std::string& test, const OutputFlags& flags) {
  if (pt::Status st = OutputIsNotAnInput(flags.json_path, {base, test}); !st.ok()) return Fail(st);
  auto b = pt::pattern::LoadJob({base}, {.threads = flags.threads});
  if (!b.ok()) return Fail(b.status());
  auto t = pt::pattern::LoadJob({test}, {.threads = flags.threads});
  if (!t.ok()) return Fail(t.status());
  return Emit(pt::diagnose::Diff(*b, *t, flags.diagnose), flags);
}

int RunSimulate(const SimulateFlags& f) {
  pt::sim::Config config;
  config.workers = f.workers;
  if (f.workers < 1) return Fail(pt::InvalidArgument("--workers: must be at least 1"));
  auto layout = pt::sim::ParseLayout(f.layout, f.workers);
  if (!layout.ok()) return Fail(layout.status());
  config.layout = *layout;
  config.gpus_per_node = f.gpus_per_node;
  config.nodes_per_switch = f.nodes_per_switch;
  config.iterations = f.iterations;
  config.layers = f.layers;
  config.traces = f.traces;
  config.seed = f.seed;
  config.threads = f.threads;
  config.noise = f.noise;
  for (const std::string& text : f.faults) {
    auto fault = pt::sim::ParseFault(text);
    if (!fault.ok()) return Fail(fault.status());
    config.faults.push_back(*fault);
  }
  auto stats = pt::sim::Run(config, f.out);
  if (!stats.ok()) return Fail(stats.status());
  std::fprintf(stderr, "perftracker: simulated %d workers (%d written) to %s: %.1f MB, %.2f s\n",
               f.workers, stats->ranks_written, f.out.c_str(), pt::BytesToMB(stats->bytes),
               stats->seconds);
  return 0;
}

// analyze, summarize, diagnose, diff: traces and summaries to a diagnosis.
void AddDiagnosisCommands(CLI::App& app, OfflineCommands* c) {
  c->analyze = app.add_subcommand(
      "analyze",
      "diagnose a job from its profiler traces (one file per rank, or folders) and PyTorch "
      "Flight Recorder dumps (one per rank: collectives compared by sequence number)");
  c->analyze->add_option("PATH", c->analyze_paths, "trace files, Flight Recorder dumps or folders")
      ->required();
  AddOutputFlags(c->analyze, &c->analyze_flags);
  c->analyze->footer(
      "Example:\n  perftracker analyze run1/rank-0.json.gz run1/rank-1.json.gz --json d.json\n"
      "  perftracker analyze run1/    (every trace in the folder, one per rank)\n"
      "  perftracker analyze fr_dumps/    (TORCH_FR_DUMP_TEMP_FILE's files: desync, hang)");

  c->summarize = app.add_subcommand(
      "summarize", "turn one rank's trace into a compact summary (the per-rank map step)");
  c->summarize->add_option("TRACE", c->summarize_paths, "trace file (or several, or a folder)")
      ->required();
  c->summarize
      ->add_option("-o,--output", c->summarize_out,
                   "summary file (a folder when several traces are given)")
      ->required();
  c->summarize->footer(
      "Example:\n  perftracker summarize traces/rank-3.json.gz -o summaries/rank-3.summary\n"
      "  perftracker summarize traces/ -o summaries/    (one rank-R.summary per trace)");

  c->diagnose =
      app.add_subcommand("diagnose", "diagnose a job from summaries (or traces): the reduce step");
  c->diagnose->add_option("PATH", c->diagnose_paths, "summary files, traces or folders")
      ->required();
  AddOutputFlags(c->diagnose, &c->diagnose_flags);
  c->diagnose->footer("Example:\n  perftracker diagnose summaries/ --json diagnosis.json");

  c->diff = app.add_subcommand("diff", "compare two runs: which functions changed");
  c->diff->add_option("BASE", c->diff_base, "trace, summary or folder of the baseline run")
      ->required();
  c->diff->add_option("TEST", c->diff_test, "trace, summary or folder of the run to compare")
      ->required();
  AddOutputFlags(c->diff, &c->diff_flags);
  c->diff->footer("Example:\n  perftracker diff before/ after/ --json diff.json");

  WhatIfFlags& w = c->whatif_flags;
  c->whatif = app.add_subcommand(
      "whatif", "the iteration a window's traces would take with one change (replayed)");
  c->whatif->add_option("PATH", w.paths, "trace or summary files, or folders")->required();
  c->whatif->add_option("--finding", w.finding, "without the diagnosis's finding N (1: the first)")
      ->check(CLI::PositiveNumber);
  c->whatif->add_option("--rank", w.rank, "rank R computing no more than its peers' median")
      ->check(CLI::NonNegativeNumber);
  c->whatif->add_option("--function", w.function,
                        "function NAME at its peers' median on every rank (a Python function's "
                        "name alone will do)");
  c->whatif->add_flag("--zero", w.zero, "with --function: the function removed");
  c->whatif
      ->add_option("--busbw", w.busbw_gbps,
                   "every collective slower than GBPS of bus bandwidth re-timed at GBPS (the "
                   "hardware's: e.g. 50 for NVLink-scale, 10 for PCIe)")
      ->check(CLI::PositiveNumber);
  c->whatif->footer(
      "Example:\n  perftracker whatif run1/ --rank 1\n"
      "  perftracker whatif run1/ --function aten::mm --zero\n"
      "  perftracker whatif run1/ --function aten::bmm    (at its peers' median)\n"
      "  perftracker whatif sim/summaries --busbw 200      (collectives at 200 GB/s)");
}

// show, export-trace, export-fr: what traces and summaries hold, for a person or for Perfetto.
void AddInspectCommands(CLI::App& app, OfflineCommands* c) {
  c->show = app.add_subcommand("show", "print the behaviour patterns of traces or summaries");
  c->show->add_option("PATH", c->show_paths, "trace or summary files, or folders")->required();
  c->show->add_option("--top", c->show_top, "functions per rank");
  c->show->add_option("--json", c->show_json,
                      "write the per-rank breakdown (schema perftracker.breakdown/1) to FILE");
  c->show->footer(
      "Example:\n  perftracker show traces/rank-0.json.gz --top 10 --json breakdown.json");

  c->export_trace = app.add_subcommand(
      "export-trace", "one Perfetto / Chrome trace of a window or a job: a process per rank");
  c->export_trace
      ->add_option("PATH", c->export_paths,
                   "a window's trace folder (REPORT_DIR/traces/window-<n>), trace files "
                   "or folders")
      ->required();
  c->export_trace
      ->add_option("-o,--output", c->export_out, "the trace to write (.json or .json.gz)")
      ->required();
  c->export_trace->add_option("--diagnosis", c->export_diagnosis,
                              "mark this diagnosis's findings on their ranks (default for a "
                              "window folder: REPORT_DIR/windows/<n>/diagnosis.json)");
  c->export_trace->footer(
      "Example:\n  perftracker export-trace perftracker-report/traces/window-1 -o window-1.json.gz"
      "\n  (open it in ui.perfetto.dev)");

  c->export_fr = app.add_subcommand(
      "export-fr", "a job's collectives as a folder PyTorch's Flight Recorder analyzer reads");
  c->export_fr
      ->add_option("PATH", c->fr_paths,
                   "a report folder (its collectives/), or Flight Recorder dumps and rings of "
                   "collectives (files or folders)")
      ->required();
  c->export_fr->add_option("-o,--output", c->fr_out, "the folder to write (rank_<R> per rank)")
      ->required();
  c->export_fr->footer(
      "Example:\n  perftracker export-fr perftracker-report -o fr\n"
      "  python -m torch.distributed.flight_recorder.fr_trace fr");
}

void AddSimulateCommand(CLI::App& app, OfflineCommands* c) {
  SimulateFlags& sim = c->sim;
  CLI::App* simulate = c->simulate = app.add_subcommand(
      "simulate", "simulate a job's summaries (and small jobs' traces) with injected faults");
  simulate->add_option("--workers", sim.workers, "ranks in the job")->required();
  simulate->add_option("--layout", sim.layout, "tp=T,pp=P[,dp=D][,ep=E]")->required();
  simulate->add_option("--gpus-per-node", sim.gpus_per_node, "ranks per node (default 8)");
  simulate->add_option("--nodes-per-switch", sim.nodes_per_switch,
                       "nodes under one switch (default 4)");
  simulate->add_option(
      "--fault", sim.faults,
      "KIND@PLACE[,size=S][,every=K] (repeatable), e.g. slow-gpu@rank=5 or "
      "slow-gpu@rank=5,size=0.25,every=4 (a quarter of the default slowdown, every "
      "4th iteration)");
  simulate
      ->add_option("--noise", sim.noise,
                   "per-function, per-iteration noise as a coefficient of variation (default "
                   "0.03: a GPU job in steady state)")
      ->check(CLI::Range(0.0, 1.0));
  simulate->add_option("--iterations", sim.iterations, "iterations per rank (default 20)");
  simulate->add_option("--layers", sim.layers,
                       "transformer layers per pipeline stage (default 16: ~380 functions/rank)");
  simulate->add_flag("--traces", sim.traces, "also write Kineto JSON traces (up to 64 workers)");
  simulate->add_option("--seed", sim.seed, "random seed")->required();
  simulate->add_option("-o,--output", sim.out, "output folder")->required();
  simulate->add_option("--threads", sim.threads, "writer threads (default 2)");
  simulate->footer(
      "Example:\n  perftracker simulate --workers 1024 --layout tp=8,pp=4 "
      "--fault slow-gpu@rank=77 --seed 1 -o sim/\n"
      "  perftracker diagnose sim/summaries");
}

}  // namespace

void AddOfflineCommands(CLI::App& app, OfflineCommands* c) {
  AddDiagnosisCommands(app, c);
  AddInspectCommands(app, c);
  AddSimulateCommand(app, c);
}

int DispatchOffline(const OfflineCommands& c) {
  if (*c.analyze) return RunAnalyze(c.analyze_paths, c.analyze_flags);
  if (*c.summarize) return RunSummarize(c.summarize_paths, c.summarize_out);
  if (*c.diagnose) return RunAnalyze(c.diagnose_paths, c.diagnose_flags);
  if (*c.diff) return RunDiff(c.diff_base, c.diff_test, c.diff_flags);
  if (*c.show) return RunShow(c.show_paths, c.show_top, c.show_json);
  if (*c.export_trace) return RunExportTrace(c.export_paths, c.export_out, c.export_diagnosis);
  if (*c.export_fr) return RunExportFr(c.fr_paths, c.fr_out);
  if (*c.simulate) return RunSimulate(c.sim);
  if (*c.whatif) return RunWhatIf(c.whatif_flags);
  return 0;
}

}  // namespace perftracker::cli
