// Diagnosis by collective sequence: every rank's ring of collectives (torch's Flight Recorder
// dumps, or the worker's ring; pattern::CollectiveLog) aligned by the number each process group
// gives its collectives. Every rank of a group must make the group's collectives in the same
// order with the same op, sizes and dtypes; where they do not, the job crashes (gloo checks the
// sizes) or hangs (NCCL waits for data that never comes). Two rules, each per group:
//   * MismatchRule: the first number at which the ranks' collectives differ in op, sizes or dtype
//     ("rank 1's collective #9 on group 0 (default_pg) is all_reduce of 7 Float at train.py:145;
//     ranks 0,2,3 are in all_reduce of 33,040 Float in _engine_run_backward (train.py:120)").
//     Finding `collective_mismatch`, the ranks that differ from the majority.
//   * NeverEnteredRule: ranks whose last collective is behind the one the others entered and
//     wait in (not completed) never entered it: finding `hang`, with the sequence numbers and
//     where each side stands.
// Ranks that made no collective of a group are not its members here; ranks without a ring are
// named in a note.
#ifndef PERFTRACKER_DIAGNOSE_COLLECTIVE_SEQUENCE_H_
#define PERFTRACKER_DIAGNOSE_COLLECTIVE_SEQUENCE_H_

#include <string>
#include <vector>

#include "diagnose/finding.h"
#include "pattern/collected.h"

namespace perftracker::diagnose {

struct SequenceResult {
  std::vector<Finding> findings;
  std::vector<std::string> notes;
};

// LOGS: one per rank. EXPECTED: the job's ranks (empty: those of LOGS). STALLED_SECONDS: how long
// the job has made no progress, the findings' impact (0 when not known, as offline).
SequenceResult DiagnoseCollectiveSequence(const std::vector<pattern::CollectiveLog>& logs,
                                          const std::vector<int>& expected, double stalled_seconds);

// The innermost frame of the user's own code in C's stack (hang.h's IsLibraryFrame), or null.
const pattern::StackFrame* UserFrame(const pattern::CollectiveCall& c);

// Whether C completed: by its state, or by its group's progress in LOG (gloo's Flight Recorder
// leaves every entry "scheduled").
bool Completed(const pattern::CollectiveLog& log, const pattern::CollectiveCall& c);

// "all_reduce of 33,040 Float" (sizes summed over the input tensors; "barrier" without any).
std::string DescribeCollective(const pattern::CollectiveCall& call);

}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_COLLECTIVE_SEQUENCE_H_
