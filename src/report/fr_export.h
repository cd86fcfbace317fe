// Writes the ranks' collectives (pattern/flight_recorder.h: torch's Flight Recorder dumps merged
// with the worker's ring per rank) as a folder PyTorch's own analyzer reads as it is:
//   python -m torch.distributed.flight_recorder.fr_trace OUT
// One pickle per rank, named rank_<R> (fr_trace reads every file under the folder and takes the
// rank from its name's trailing digits), each {"version", "pg_config", "pg_status", "entries"} in
// torch's dump format. What the dumps as they are lack for fr_trace is made whole:
// - pg_config names every group the entries name, with its ranks (torch 2.13's gloo dump keys its
//   one group "" while its entries say "0": fr_trace stopped with a KeyError). The default group
//   holds every rank; a group no dump gives the ranks of is left out, with a note;
// - a rank that died left only the worker's ring (its calls through torch.distributed's Python
//   API, inputs only): its outputs follow from the op (OutputsOf);
// - the records are aligned: fr_trace matches a group's collectives by sequence number from the
//   latest record start, found by record_id, a count of each process's own that no two ranks
//   share. Per group, the calls before the first number from which every rank's record is
//   complete to its end are left out, with a note, and record ids are renumbered from 0.
#ifndef PERFTRACKER_REPORT_FR_EXPORT_H_
#define PERFTRACKER_REPORT_FR_EXPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "pattern/collected.h"

namespace perftracker::report {

// The Flight Recorder format version written where no torch dump gives one (the entries carry
// every field fr_trace reads at that version).
inline constexpr char kFrExportVersion[] = "2.10";

struct FrExport {
  std::map<int, std::string> files;  // rank -> its pickle
  std::vector<std::string> notes;    // what was left out or made up, for the user
};

// The export of LOGS (one per rank).
StatusOr<FrExport> ExportFlightRecorder(const std::vector<pattern::CollectiveLog>& logs);

// Writes E's files into folder OUT (made as the user's own folder when missing) as rank_<R>,
// each created afresh (an existing file is an error, never overwritten or followed).
Status WriteFlightRecorderFolder(const FrExport& e, const std::string& out);

namespace internal {

// Each group's ranks: from any dump's pg_config; the default group ("default_pg") holds every
// rank of the job (the highest rank any dump names, plus one). Groups without ranks are absent.
std::map<std::string, std::vector<int>> GroupMembers(
    const std::vector<pattern::CollectiveLog>& logs);

// The first sequence number of the calls SEQS (one rank's in one group, in order) from which
// they run without a gap to the end: {3, 4, 9, 10, 11} -> 9; -1 when SEQS is empty.
int64_t CompleteFrom(const std::vector<int64_t>& seqs);

// A call's output sizes where its record has none (the worker's ring): an all_reduce's,
// broadcast's or p2p op's are its inputs; all_gather into a tensor multiplies the first dimension
// by the group's size, reduce_scatter into a tensor divides it.
std::vector<std::vector<int64_t>> OutputsOf(const pattern::CollectiveCall& c, int group_size);

}  // namespace internal
}  // namespace perftracker::report

#endif  // PERFTRACKER_REPORT_FR_EXPORT_H_
