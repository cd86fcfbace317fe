// The report page's charts (report/html.h), each an inline <svg> with a viewBox so it scales with
// the page: the culprit against its peers, iteration time and memory per rank, the differential
// view (ranks x top functions) and where each rank's iteration goes. At any number of ranks they
// show a distribution plus the outliers and the culprits. Owns the charts' policy numbers; html.cc
// assembles the page around them. Internal to src/report.
#ifndef PERFTRACKER_REPORT_HTML_CHARTS_H_
#define PERFTRACKER_REPORT_HTML_CHARTS_H_

#include <string>
#include <string_view>

#include "diagnose/finding.h"
#include "pattern/compact_job.h"
#include "report/html.h"

namespace perftracker::report::internal {

// A duration for people: "123 ms", "12.3 ms", "0.12 ms".
std::string Ms(double ms);

// The culprit against its peers in the finding's top function: a bar per rank, or, at scale,
// the distribution of every rank with the culprits marked. "" when the finding has no culprit
// or JOB is null.
std::string CulpritChart(const diagnose::Finding& f, const diagnose::Diagnosis& d,
                         const pattern::CompactJob* job);
// Iteration time per rank: over the run (online series) or the window's iterations.
std::string IterationChart(const HtmlInput& in);
// Memory per rank over iterations (Diagnosis::job.memory: the traces' memory records, or the
// online run's samples), host (GPU false) or GPU memory. "" when there is none.
std::string MemoryChart(const HtmlInput& in, bool gpu);
// A function's column heading in the differential view: its name and, apart, where it is, so
// that columns of long, similar names read differently at a glance.
//   "/a/torch/nn/modules/module.py(1501): _call_impl" -> {"_call_impl", "module.py:1501"}
//   "void at::native::fill_kernel<float>(int)"        -> {"fill_kernel", ""}
//   "aten::addmm"                                     -> {"aten::addmm", ""}
struct ColumnHeading {
  std::string name;
  std::string where;
};
ColumnHeading HeadingOf(std::string_view function);

// Ranks x top functions, each cell coloured by the rank's deviation from its peer group (the
// ranks the diagnosis compares it with: diagnose::PeerGroups). "" below two ranks.
std::string Heatmap(const diagnose::Diagnosis& d, const pattern::CompactJob& job);
// Where each rank's iteration goes, by kind of function, with GPU idle time.
std::string BreakdownChart(const diagnose::Diagnosis& d, const pattern::CompactJob& job);

}  // namespace perftracker::report::internal

#endif  // PERFTRACKER_REPORT_HTML_CHARTS_H_
