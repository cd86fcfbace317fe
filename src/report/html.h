// The HTML report: one self-contained page (inline CSS and SVG drawn here, no script, no request
// leaves the page; a Content-Security-Policy forbids any) that shows a diagnosis the way people
// look at slow jobs: the job, the findings biggest first as cards (cause, place, functions with
// their stacks, evidence, suggestion, and the culprit against its peers for its top function),
// iteration time per rank over the run with the profiling windows marked, the differential view
// (ranks x top functions coloured by deviation from the rank's peer group) and the per-rank time
// breakdown. At any number of ranks the per-rank parts are a distribution plus the outliers and
// the culprits, so a 10,000-rank page stays small.
//
// Owns the page's layout and its charts; the numbers come from diagnose::Diagnosis and the
// job's patterns (pattern::CompactJob), and, online, the run's iteration series.
#ifndef PERFTRACKER_REPORT_HTML_H_
#define PERFTRACKER_REPORT_HTML_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "diagnose/finding.h"
#include "pattern/collected.h"
#include "pattern/compact_job.h"

namespace perftracker::report {

// One rank's iteration times over a whole online run (bounded by its producer).
struct RunSeries {
  int rank = -1;
  std::vector<int64_t> steps;
  std::vector<float> ms;  // the same length as steps
};

// A profiling window, marked on the iteration chart.
struct WindowMark {
  int64_t id = 0;
  int64_t start_iteration = 0;  // -1: a hang's stacks, not a window of iterations
  int iterations = 0;
  std::string reason;
};

// A hang: the ranks whose training thread stands at the same place, with that place's stack.
struct WaitGroup {
  std::string where;  // the innermost frame: "train.py:97 in hang_forever"
  std::vector<int> ranks;
  std::vector<std::string> stack;  // outermost first
  std::string collective;          // "in all_reduce for 6.2 s" when one is in progress
};
// Groups the ranks' stacks (a hang's replies) by where their training thread stands, the
// biggest group first.
std::vector<WaitGroup> GroupWaits(const std::vector<pattern::RankStacks>& stacks);

struct HtmlInput {
  std::string title = "perftracker report";
  const diagnose::Diagnosis* diagnosis = nullptr;  // required
  // The job's patterns: the culprit charts, the differential view and the breakdown need them;
  // null (a hang, a report without summaries) leaves those parts out with a note.
  const pattern::CompactJob* job = nullptr;
  // Online: each rank's iterations over the run. Empty: the window's own iterations (job).
  std::vector<RunSeries> series;
  std::vector<WindowMark> windows;
  std::vector<WaitGroup> waits;  // a hang: where each rank stands
  // The window the per-rank views come from when it is not the diagnosis's own (a hang's page
  // shows the latest profiled window's); 0: the diagnosis's own.
  int64_t views_from_window = 0;
  std::string trace_link;  // a Perfetto trace of the window (export-trace), relative; "" none
  std::string generated;   // e.g. "2026-12-02 10:31 UTC, perftracker 0.9"; "" leaves it out
};

std::string RenderHtml(const HtmlInput& input);
// Writes through a temporary file and a rename: a reader never sees half a page.
Status WriteHtmlFile(const HtmlInput& input, const std::string& path);

// Exposed for tests.
namespace internal {
// Escapes text for HTML content and attribute values: & < > " '.
std::string Escape(std::string_view text);
// A colour for a deviation from the peer group (-1 = twice as fast .. +1 = twice as slow and
// beyond): blue for faster, white for equal, red for slower.
std::string DeviationColour(double deviation);
}  // namespace internal

}  // namespace perftracker::report

#endif  // PERFTRACKER_REPORT_HTML_H_
