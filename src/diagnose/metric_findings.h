// The findings the node agents' metrics give, added to a diagnosis after the timing comparison
// (AddMetricFindings): the OS's evidence through the cause rules (diagnose/causes.h) and the slow
// link from connection samples. When one rank's link is slow, every rank's collectives slow down
// alike (they all wait for the slow hop), so timing cannot name it. The connections can: the agents
// sample each worker's TCP send queues
// ("tcp.sendq.<local>><remote>", mean bytes queued during the window); a slow endpoint's own
// sends back up, and so do its peers' sends to it (their acknowledgements queue behind its
// traffic). The rank that the two most-queued connections share, and that most of the queued
// bytes touch, is the slow link (C4's idea: the slow hop names the link).
#ifndef PERFTRACKER_DIAGNOSE_METRIC_FINDINGS_H_
#define PERFTRACKER_DIAGNOSE_METRIC_FINDINGS_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "diagnose/finding.h"
#include "pattern/collected.h"
#include "pattern/compact_job.h"
#include "pattern/pattern.h"

namespace perftracker::diagnose {

using pattern::RankMetrics;

// A finding (category "communication", cause hardware) naming the rank whose connections back
// up, or nothing. RANKS give hosts and the time collectives take (the impact).
std::optional<Finding> DiagnoseSlowLink(const RankMetrics& metrics,
                                        const std::vector<pattern::CompactRank>& ranks);

// Adds the metric-based findings to D: a slow link replaces the all-rank communication
// findings it explains; a rank finding whose cause the OS's evidence names is rewritten by the
// cause rules (diagnose/causes.h), and a data-loading finding whose DataLoader workers are fast
// at their work says where the batch waits (ExplainLoaderHandOff); the OS-evidence finders add
// the ranks no finding named (throttled, slow loader workers, contended), and every rank
// throttled is one all-rank finding (diagnose/all_rank_os.h); findings stay sorted
// (SortFindings). RANKS are the ranks D diagnosed: D->peer_group is theirs (set when empty).
void AddMetricFindings(const RankMetrics& metrics, const std::vector<pattern::CompactRank>& ranks,
                       Diagnosis* d);

}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_METRIC_FINDINGS_H_
