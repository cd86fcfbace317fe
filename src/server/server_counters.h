// What the collector counts for /metrics since it started (ServerCounters): windows opened
// by kind of reason, findings by category and cause, triggers by kind, uploads and their bytes,
// summaries decoded, windows and hangs diagnosed. Plain values: the collector's mutex guards
// them; server/server_metrics.cc renders them with the rest of /metrics.
#ifndef PERFTRACKER_SERVER_SERVER_COUNTERS_H_
#define PERFTRACKER_SERVER_SERVER_COUNTERS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "diagnose/diagnose.h"

namespace perftracker::server {

struct ServerCounters {
  std::map<std::string, uint64_t> windows_opened;                          // by kind of reason
  std::map<std::pair<std::string, std::string>, uint64_t> findings_total;  // category, cause
  std::map<std::string, uint64_t> triggers_total;                          // slowdown, hang, user
  uint64_t upload_bytes_total = 0;
  uint64_t uploads_accepted = 0, uploads_refused = 0;
  // Summaries inflated and decoded: an upload refused before (not the agent's rank, no window
  // open) costs no decoding.
  uint64_t summaries_decoded = 0;
  int windows_diagnosed = 0;
  int hangs_diagnosed = 0;

  // An upload of BYTES, ACCEPTED or refused (a refused one's bytes are not counted).
  void CountUpload(bool accepted, size_t bytes);
  // A trigger of KIND: "hang" and "slowdown" (a worker detector's) by name, any other a user's.
  void CountTrigger(std::string_view kind);
  // A published diagnosis D, WHAT "window", "hang" or "amended" (a hang published again: its
  // findings are counted again, the diagnosis is not).
  void CountDiagnosis(const diagnose::Diagnosis& d, std::string_view what);
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_SERVER_COUNTERS_H_
