#include "server/server_counters.h"

#include "diagnose/categories.h"
#include "diagnose/finding.h"

namespace perftracker::server {

void ServerCounters::CountUpload(bool accepted, size_t bytes) {
  ++(accepted ? uploads_accepted : uploads_refused);
  if (accepted) upload_bytes_total += bytes;
}

void ServerCounters::CountTrigger(std::string_view kind) {
  ++triggers_total[kind == "hang" || kind == "slowdown" ? std::string(kind) : "user"];
}

void ServerCounters::CountDiagnosis(const diagnose::Diagnosis& d, std::string_view what) {
  for (const diagnose::Finding& f : d.findings)
    ++findings_total[{diagnose::CategoryName(f.category), diagnose::CauseName(f.cause)}];
  if (what != "amended") ++(what == "hang" ? hangs_diagnosed : windows_diagnosed);
}

}  // namespace perftracker::server
