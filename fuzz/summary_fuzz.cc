// libFuzzer target: any bytes through the summary decoder (what agents upload and `diagnose`
// reads) must give a summary or a Status, never a crash, and never hold more memory than
// base/limits.h allows (libFuzzer's -rss_limit_mb catches a decoder that does). Inputs are
// taken as they are and also behind a valid header, so the body decoder sees garbage too.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "pattern/summary_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace p = perftracker::pattern;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)p::ParseSummary(bytes, "fuzz.summary").ok();
  // Version 1 stores the body as is: the decoder's every branch, without the inflater.
  std::string v1("PTSUMMRY\x01\0\0\0", 12);
  v1.append(bytes);
  auto r = p::ParseSummary(v1, "fuzz.summary");
  // What decodes must encode and decode again to the same summary.
  if (r.ok()) {
    const std::string again = p::SerializeSummary(*r);
    auto back = p::ParseSummary(again, "again.summary");
    if (!back.ok() || p::SerializeSummary(*back) != again) __builtin_trap();
  }
  return 0;
}
