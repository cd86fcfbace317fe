// Memory as the traces themselves record it: torch.profiler with profile_memory=True writes
// every allocation and free with the allocator's totals (pattern/memory_use.h). From them, per
// rank and device, the peak, the level at each steady iteration's end and its growth
// (JobInfo::memory: `analyze`'s memory table and the reports), and the findings they carry:
// memory that grows through the profiled iterations (memory_growth), an allocation the trace
// saw fail (memory_peak), and in `diff` a peak above the reference's (memory_peak). Offline
// traces, and online the windows a memory growth opens (their growing ranks record memory, to
// name where it grows: NameMemorySites); the server follows each rank's memory with its
// iteration reports (memory_growth.h).
#ifndef PERFTRACKER_DIAGNOSE_TRACE_MEMORY_H_
#define PERFTRACKER_DIAGNOSE_TRACE_MEMORY_H_

#include <map>
#include <string>
#include <vector>

#include "diagnose/finding.h"
#include "pattern/pattern.h"

namespace perftracker::diagnose {

// One row per rank and device its trace holds memory records of, in rank order.
std::vector<RankMemoryUse> TraceMemoryOf(const std::vector<const pattern::RankSummary*>& ranks);

// The least-squares slope of LEVELS (bytes at consecutive iterations' ends), bytes per
// iteration; 0 for fewer than two.
double MemorySlope(const std::vector<double>& levels);

// Whether a rank's levels grow through its iterations: kTraceMemoryMinIterations of them at
// least, most intervals rising (kMemoryRisingShare) and kMemoryMinGrowthBytes over them.
bool TraceMemoryGrows(const std::vector<double>& levels);

// The findings of MEMORY (JobInfo::memory of a job of JOB_RANKS ranks; HOSTS: rank -> host):
// one memory_growth finding per kind of device (host, GPU) for the ranks whose memory grows
// (TraceMemoryGrows of their iteration_end_bytes), and one memory_peak finding for the ranks
// whose trace saw an allocation fail.
std::vector<Finding> TraceMemoryFindings(const std::vector<RankMemoryUse>& memory, size_t job_ranks,
                                         const std::map<int, std::string>& hosts);

// Names where memory grows in each memory_growth finding of FINDINGS (the traces' own or an
// online run's), from MEMORY's kept places (RankMemoryUse::kept, profile_memory's records): the
// place that kept the most per iteration on the finding's ranks and kind of device, among those
// that kept memory in policy::kKeptMemoryShare of the profiled iterations, becomes the
// finding's first function, its evidence (kept_at, kept_bytes_per_iteration) and a clause of its
// summary. A finding without such a place, or named already, is left as it is.
void NameMemorySites(const std::vector<RankMemoryUse>& memory, std::vector<Finding>* findings);

// `diff`: one memory_peak finding per kind of device for the ranks whose peak in TEST is above
// their peak in BASE by kMemoryPeakRise and kMemoryPeakMinBytes at least (the same rank and
// device on both sides), named BASE_NAME and TEST_NAME.
std::vector<Finding> MemoryPeakChanges(const std::vector<RankMemoryUse>& base,
                                       const std::vector<RankMemoryUse>& test,
                                       const std::string& base_name, const std::string& test_name);

}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_TRACE_MEMORY_H_
