// The `perftracker` command. Offline: analyze (traces -> diagnosis), summarize (one trace ->
// a compact summary, the per-rank map step), diagnose (summaries -> diagnosis, the reduce
// step), diff (two runs). Every user error is one line naming the file and what is wrong, and a
// non-zero exit. Online (cli/online_commands.h, cli/launcher.h): server, agent, run, trigger,
// status, report. This file defines every subcommand's flags and dispatches to its runner.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "diagnose/collective_sequence.h"
#include "diagnose/diagnose.h"
#include "diagnose/what_if.h"
#include "pattern/flight_recorder.h"
#include "pattern/job.h"
#include "pattern/steady_state.h"
#include "pattern/summarizer.h"
#include "pattern/summary_io.h"
#include "report/breakdown.h"
#include "report/diagnosis_reader.h"
#include "report/html.h"
#include "report/report.h"
#include "report/trace_export.h"
#include "sim/simulator.h"
#include "trace/reader.h"
#ifdef PT_ONLINE
#include "base/credentials.h"
#include "base/terminal.h"
#include "base/units.h"
#include "cli/launcher.h"
#include "cli/online_commands.h"
#endif

namespace pt = perftracker;

namespace {

#ifdef PT_ONLINE
constexpr bool kOnline = true;
#else
constexpr bool kOnline = false;
#endif

int Fail(const pt::Status& status) {
  pt::PutSafe("perftracker: error: " + status.message() + "\n", stderr);
  return 1;
}

double PeakRssMb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return pt::KiBToMiB(usage.ru_maxrss);
}

struct OutputFlags {
  std::string json_path;
  std::string html_path;
  bool quiet = false;
  bool stats = false;
  int threads = 0;
  pt::diagnose::DiagnoseOptions diagnose;
};

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

// `perftracker whatif`: a window's traces (or summaries) diagnosed, and the iteration replayed
// with one change (diagnose/what_if.h).
struct WhatIfFlags {
  std::vector<std::string> paths;
  int finding = 0;  // 1-based, as the reports number them
  int rank = -1;
  std::string function;
  bool zero = false;
};

int RunWhatIf(const WhatIfFlags& w) {
  namespace dg = pt::diagnose;
  if ((w.finding > 0) + (w.rank >= 0) + !w.function.empty() != 1)
    return Fail(
        pt::InvalidArgument("whatif: name one change: --finding N, --rank R or --function NAME"));
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
  saving = std::min(saving, iteration);
  std::printf("%s: the iteration %.1f ms -> %.1f ms (saves %.1f ms/iter, %.0f%%)\n", what.c_str(),
              iteration, iteration - saving, saving,
              iteration > 0 ? 100 * saving / iteration : 0.0);
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

// Prints what a rank's behaviour patterns hold: the top functions by time per iteration.
int RunShow(const std::vector<std::string>& paths, int top, const std::string& json_path) {
  if (pt::Status st = OutputIsNotAnInput(json_path, paths); !st.ok()) return Fail(st);
  auto job = pt::pattern::LoadJob(paths);
  if (!job.ok()) return Fail(job.status());
  pt::PutSafe(pt::report::BreakdownTable(*job), stdout);
  if (!json_path.empty()) {
    pt::Status st = pt::report::WriteTextFile(json_path, pt::report::BreakdownJson(*job));
    if (!st.ok()) return Fail(st);
  }
  for (const pt::pattern::RankSummary& r : *job) {
    for (const std::string& note : pt::pattern::SteadyStateNotes(r))
      pt::PutSafe(fmt::format("note: rank {}: {}\n", r.rank, note), stdout);
  }
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

struct SimulateFlags {
  int workers = 0;
  std::string layout;
  int gpus_per_node = 8;
  int nodes_per_switch = 4;
  std::vector<std::string> faults;
  int iterations = 20;
  int layers = 16;
  bool traces = false;
  uint64_t seed = 0;
  std::string out;
  int threads = 2;
  double noise = 0.03;
};

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

// Every offline subcommand with the variables its flags are parsed into. CLI11 keeps their
// addresses: the struct stays where main put it.
struct OfflineCommands {
  OutputFlags analyze_flags;
  std::vector<std::string> analyze_paths;
  CLI::App* analyze = nullptr;
  std::vector<std::string> summarize_paths;
  std::string summarize_out;
  CLI::App* summarize = nullptr;
  OutputFlags diagnose_flags;
  std::vector<std::string> diagnose_paths;
  CLI::App* diagnose = nullptr;
  OutputFlags diff_flags;
  std::string diff_base, diff_test;
  CLI::App* diff = nullptr;
  std::vector<std::string> show_paths;
  int show_top = 25;
  std::string show_json;
  CLI::App* show = nullptr;
  std::vector<std::string> export_paths;
  std::string export_out, export_diagnosis;
  CLI::App* export_trace = nullptr;
  SimulateFlags sim;
  CLI::App* simulate = nullptr;
  WhatIfFlags whatif_flags;
  CLI::App* whatif = nullptr;
};

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
  c->whatif->footer(
      "Example:\n  perftracker whatif run1/ --rank 1\n"
      "  perftracker whatif run1/ --function aten::mm --zero\n"
      "  perftracker whatif run1/ --function aten::bmm    (at its peers' median)");
}

// show, export-trace: what traces and summaries hold, for a person or for Perfetto.
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

int DispatchOffline(const OfflineCommands& c) {
  if (*c.analyze) return RunAnalyze(c.analyze_paths, c.analyze_flags);
  if (*c.summarize) return RunSummarize(c.summarize_paths, c.summarize_out);
  if (*c.diagnose) return RunAnalyze(c.diagnose_paths, c.diagnose_flags);
  if (*c.diff) return RunDiff(c.diff_base, c.diff_test, c.diff_flags);
  if (*c.show) return RunShow(c.show_paths, c.show_top, c.show_json);
  if (*c.export_trace) return RunExportTrace(c.export_paths, c.export_out, c.export_diagnosis);
  if (*c.simulate) return RunSimulate(c.sim);
  if (*c.whatif) return RunWhatIf(c.whatif_flags);
  return 0;
}

#ifdef PT_ONLINE

// --tls-cert, --tls-key, --tls-ca: what a server presents and checks, or what a client checks
// the server with and presents.
void AddTlsFlags(CLI::App* cmd, pt::TlsFiles* tls, bool server) {
  cmd->add_option("--tls-cert", tls->cert,
                  server ? "PEM certificate the server presents (needed off 127.0.0.1)"
                         : "PEM certificate this client presents (mutual TLS)");
  cmd->add_option("--tls-key", tls->key, "PEM private key of --tls-cert (mode 0600)");
  cmd->add_option("--tls-ca", tls->ca,
                  server ? "PEM CA: only clients with a certificate it signed are accepted"
                         : "PEM CA the server's certificate must be signed by");
}

// Every online subcommand with the variables its flags are parsed into (see OfflineCommands).
struct OnlineCommands {
  pt::cli::OnlineFlags online;
  CLI::App* server = nullptr;
  CLI::App* agent = nullptr;
  pt::cli::RunOptions run_opts;
  std::string on_hang = "keep";
  std::string run_baseline = "on", run_every;
  CLI::App* run = nullptr;
  CLI::App* trigger = nullptr;
  CLI::App* status = nullptr;
  std::string report_dir_arg, report_out;
  int64_t report_window = 0;
  CLI::App* report = nullptr;
};

// server, agent: the online path's long-running parts.
void AddServerCommands(CLI::App& app, OnlineCommands* c) {
  pt::cli::OnlineFlags& online = c->online;
  CLI::App* server = c->server =
      app.add_subcommand("server", "the central collector of the online path");
  server->add_option("--listen", online.listen, "address:port (non-loopback needs --token-file)");
  server->add_option("--report-dir", online.report_dir, "where diagnoses and the database go")
      ->required();
  server->add_option("--token-file", online.token_file,
                     "shared token agents must present (default: one the server makes, in "
                     "REPORT_DIR/.perftracker/token)");
  server->add_flag("--insecure-no-token", online.no_token,
                   "no token at all (loopback only): any local process may register, trigger and "
                   "read status");
  server->add_option("--metrics", online.metrics,
                     "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9464)");
  server->add_flag("--metrics-public", online.metrics_public,
                   "--metrics may listen off loopback; scrapers then send the server's token "
                   "(Authorization: Bearer, the --token-file's)");
  AddTlsFlags(server, &online.tls, /*server=*/true);
  server->add_option("--max-seconds", online.max_seconds, "profiling time limit of a window");
  server->add_option("--grace-seconds", online.grace_seconds,
                     "how long after that missing ranks are waited for");
  server->add_option("--iterations", online.iterations, "iterations per window");
  AddDiagnoseFlags(server, &online.diagnose);
  server
      ->add_option("--baseline-window", online.baseline,
                   "on (default): profile one window once every rank is past its warm-up")
      ->check(CLI::IsMember({"on", "off"}));
  server->add_option("--profile-every", online.profile_every,
                     "also profile a window every DURATION (e.g. 15m)");
  server->footer(
      "Examples (its token: reports/.perftracker/token):\n"
      "  perftracker server --listen 127.0.0.1:50551 --report-dir reports/\n"
      "  perftracker server --listen 0.0.0.0:50551 --tls-cert server.crt --tls-key server.key "
      "--report-dir reports/");
  CLI::App* agent_cmd = c->agent =
      app.add_subcommand("agent", "the node agent: relays and uploads windows");
  agent_cmd->add_option("--server", online.server, "server address:port")->required();
  agent_cmd->add_option("--token-file", online.token_file, "shared token file");
  agent_cmd->add_option("--job-id", online.job_id,
                        "the job these ranks belong to (the same on every node; a server "
                        "collects one job at a time)");
  AddTlsFlags(agent_cmd, &online.tls, /*server=*/false);
  agent_cmd->add_option("--socket", online.socket,
                        "serve this node's workers on this Unix socket (perftracker run "
                        "--agent-socket PATH, or PERFTRACKER_AGENT_SOCKET in their environment); "
                        "{node} is this node's name");
  agent_cmd->add_option("--trace-dir", online.trace_dir,
                        "with --socket: where workers write their windows' raw traces, a folder "
                        "nobody else may enter (default: traces beside the socket)");
  agent_cmd->add_option("--keep-traces", online.keep_traces,
                        "with --socket: windows whose raw traces stay in --trace-dir");
  agent_cmd->add_option("--watch", online.watch_dir,
                        "instead of --socket: a folder where workers' traces appear");
  agent_cmd->add_option("--ranks", online.ranks, "local ranks (when known)")->delimiter(',');
  agent_cmd->footer(
      "Examples (token: a copy of the server's; off loopback with TLS):\n"
      "  perftracker agent --server head:50551 --tls-ca ca.crt --token-file token --socket "
      "agent/agent.sock --ranks 0,1,2,3\n"
      "  perftracker agent --server head:50551 --tls-ca ca.crt --token-file token --watch traces/ "
      "--ranks 0,1,2,3");
}

// run: a training job with the online collector (cli/launcher.h).
void AddRunCommand(CLI::App& app, OnlineCommands* c) {
  pt::cli::RunOptions& run_opts = c->run_opts;
  CLI::App* run = c->run = app.add_subcommand(
      "run", "run a training job with the online collector: perftracker run --nproc N -- CMD");
  run->add_option("--nproc", run_opts.nproc,
                  "ranks to start on this node (0: run CMD once; it starts the ranks, e.g. "
                  "torchrun)");
  run->add_option("--nnodes", run_opts.nnodes,
                  "nodes in the job (with --nproc; in a Slurm allocation: its node count)");
  run->add_option("--node-rank", run_opts.node_rank,
                  "this node's index (with --nproc; in a Slurm allocation: SLURM_NODEID)");
  run->add_option("--master-addr", run_opts.master_addr,
                  "MASTER_ADDR for the ranks (in a Slurm allocation: its first node)");
  run->add_option("--master-port", run_opts.master_port, "MASTER_PORT (default: a free port)");
  run->add_option("--report-dir", run_opts.report_dir,
                  "where diagnosis.json, windows/ and the traces go");
  run->add_option("--server", run_opts.server,
                  "a running perftracker server (default: one inside this launcher)");
  run->add_option("--listen", run_opts.listen,
                  "the embedded server's address, on loopback (default 127.0.0.1:0; ranks on other "
                  "hosts: --server)");
  run->add_option("--metrics", run_opts.metrics,
                  "serve Prometheus metrics of the embedded server at http://ADDR/metrics "
                  "(e.g. 127.0.0.1:9464)");
  run->add_flag("--metrics-public", run_opts.metrics_public,
                "--metrics may listen off loopback; scrapers then send the run's token "
                "(Authorization: Bearer, REPORT_DIR/.perftracker/token)");
  run->add_option("--agent-socket", run_opts.agent_socket,
                  "this node's agent is already running (`perftracker agent --socket PATH`): the "
                  "ranks report to it and the launcher starts none");
  run->add_option("--token-file", run_opts.token_file, "shared token file");
  run->add_option("--job-id", run_opts.job_id,
                  "with --server: the job's name, the same on every node (default: "
                  "MASTER_ADDR:MASTER_PORT with --master-port, else one per run)");
  AddTlsFlags(run, &run_opts.tls, /*server=*/false);
  run->add_option("--iterations", run_opts.iterations, "iterations per profiling window");
  run->add_option("--max-seconds", run_opts.max_seconds, "a window's profiling time limit");
  run->add_option("--profile-at-iteration", run_opts.profile_at_iteration,
                  "profile a window once a rank completed iteration K");
  run->add_option("--on-hang", c->on_hang, "keep (default) or kill the job after a hang report")
      ->check(CLI::IsMember({"keep", "kill"}));
  run->add_option("--baseline-window", c->run_baseline,
                  "on (default): profile one window once every rank is past its warm-up, so a "
                  "problem present from the start is found")
      ->check(CLI::IsMember({"on", "off"}));
  run->add_option("--profile-every", c->run_every,
                  "also profile a window every DURATION (e.g. 15m)");
  run->add_option("--keep-traces", run_opts.keep_traces,
                  "windows whose raw traces stay in REPORT_DIR/traces, newest first (default 3; "
                  "2 GiB at most); older ones are removed once summarized")
      ->check(CLI::Range(1, 1000000));
  AddDiagnoseFlags(run, &run_opts.diagnose);
  run->add_flag("-v,--verbose", run_opts.verbose,
                "print every agent and server line (always in REPORT_DIR/perftracker.log)");
  run->add_option("CMD", run_opts.command, "the training command, after --")->required();
  run->footer(
      "Examples:\n"
      "  perftracker run --nproc 4 -- python train.py --epochs 1\n"
      "  perftracker run --nproc 8 --report-dir out/ --on-hang kill -- python train.py\n"
      "  perftracker run -- torchrun --nproc-per-node 8 train.py   (the command starts the ranks)");
}

// trigger, status, report: asking a running server, and a run's report folder as a page.
void AddClientCommands(CLI::App& app, OnlineCommands* c) {
  pt::cli::OnlineFlags& online = c->online;
  CLI::App* trigger = c->trigger = app.add_subcommand("trigger", "profile every rank now");
  CLI::App* status = c->status = app.add_subcommand("status", "ranks, iteration times and windows");
  for (CLI::App* cmd : {trigger, status}) {
    cmd->add_option("--report-dir", online.report_dir,
                    "the report folder of a `perftracker run`: its server and token");
    cmd->add_option("--server", online.server, "server address:port");
    cmd->add_option("--token-file", online.token_file, "shared token file");
    AddTlsFlags(cmd, &online.tls, /*server=*/false);
  }
  trigger->footer(
      "Examples:\n  perftracker trigger --report-dir perftracker-report/   (a running "
      "`perftracker run`)\n  perftracker trigger --server head:50551 --tls-ca ca.crt --token-file "
      "token");
  status->footer(
      "Examples:\n  perftracker status --report-dir perftracker-report/\n"
      "  perftracker status --server 127.0.0.1:50551 --token-file reports/.perftracker/token");
  CLI::App* report_cmd = c->report = app.add_subcommand(
      "report", "the HTML page of a run's report folder (what its server stored)");
  report_cmd
      ->add_option("DIR", c->report_dir_arg,
                   "the report folder of a `perftracker run` or "
                   "`perftracker server`")
      ->required();
  report_cmd->add_option("-o,--output", c->report_out,
                         "the page to write (default DIR/report.html)");
  report_cmd->add_option("--window", c->report_window, "a window's page (default: the latest)");
  report_cmd->footer("Example:\n  perftracker report perftracker-report/ -o report.html");
}

int Exit(const pt::Status& status) { return status.ok() ? 0 : Fail(status); }

// `perftracker run`: the flags that need more than a copy, perftracker's own command line (for
// salloc) and Slurm's defaults, then the job.
int RunJob(OnlineCommands& c, int argc, char** argv) {
  pt::cli::RunOptions& run_opts = c.run_opts;
  run_opts.kill_on_hang = c.on_hang == "kill";
  run_opts.baseline_window = c.run_baseline == "on";
  if (!c.run_every.empty()) {
    auto every = pt::cli::ParseDuration("--profile-every", c.run_every);
    if (!every.ok()) return Fail(every.status());
    run_opts.profile_every_seconds = *every;
  }
  run_opts.argv.assign(argv, argv + argc);
  pt::cli::ApplySlurmDefaults(&run_opts, c.run->count("--nnodes") > 0,
                              c.run->count("--node-rank") > 0, c.run->count("--master-addr") > 0);
  return pt::cli::RunJob(run_opts);
}

// The exit code of the online subcommand that was given, or none.
std::optional<int> DispatchOnline(OnlineCommands& c, int argc, char** argv) {
  if (*c.report) return Exit(pt::cli::RunReport(c.report_dir_arg, c.report_out, c.report_window));
  if (*c.run) return RunJob(c, argc, argv);
  if (*c.server) return Exit(pt::cli::RunServer(c.online));
  if (*c.agent) return Exit(pt::cli::RunAgent(c.online));
  if (*c.trigger) return Exit(pt::cli::RunClient(c.online, true));
  if (*c.status) return Exit(pt::cli::RunClient(c.online, false));
  return std::nullopt;
}
#else
// An offline build keeps the online commands' names, so a user learns why they do nothing.
std::vector<CLI::App*> AddOfflineStubs(CLI::App& app) {
  std::vector<CLI::App*> offline_stubs;
  for (const char* name : {"run", "server", "agent", "trigger", "status", "report"}) {
    CLI::App* c = app.add_subcommand(name,
                                     "not in this build (configured with "
                                     "-DPERFTRACKER_ONLINE=OFF)");
    c->allow_extras();
    c->prefix_command();
    offline_stubs.push_back(c);
  }
  return offline_stubs;
}

// Exit code 2 for an online command of the offline build, or none.
std::optional<int> RefuseOfflineStubs(const std::vector<CLI::App*>& offline_stubs) {
  for (CLI::App* c : offline_stubs) {
    if (!*c) continue;
    std::fprintf(stderr,
                 "perftracker %s: this build has no online path (configured with "
                 "-DPERFTRACKER_ONLINE=OFF); run scripts/deps.sh and rebuild with the default "
                 "configuration (scripts/build.sh)\n",
                 c->get_name().c_str());
    return 2;
  }
  return std::nullopt;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"perftracker: finds why a PyTorch training job runs slower than it should"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("perftracker ") + PT_VERSION +
                                        (kOnline ? "" : " (offline build: no run/server/agent)"));
  app.footer(
      "Examples:\n"
      "  perftracker run --nproc 4 -- python train.py      profile a job while it runs\n"
      "  perftracker analyze traces/ --json diagnosis.json  diagnose profiler traces\n"
      "Run 'perftracker SUBCOMMAND --help' for a subcommand's options and an example.");

  OfflineCommands offline;
  AddDiagnosisCommands(app, &offline);
  AddInspectCommands(app, &offline);
  AddSimulateCommand(app, &offline);
#ifdef PT_ONLINE
  OnlineCommands online;
  AddServerCommands(app, &online);
  AddRunCommand(app, &online);
  AddClientCommands(app, &online);
#else
  std::vector<CLI::App*> offline_stubs = AddOfflineStubs(app);
#endif

  CLI11_PARSE(app, argc, argv);

#ifdef PT_ONLINE
  if (std::optional<int> rc = DispatchOnline(online, argc, argv)) return *rc;
#else
  if (std::optional<int> rc = RefuseOfflineStubs(offline_stubs)) return *rc;
#endif
  return DispatchOffline(offline);
}
