// libFuzzer target: any bytes through the summary decoder (what agents upload and `diagnose`
// reads) must give a summary or a Status, never a crash, and never hold more memory than
// base/limits.h allows (libFuzzer's -rss_limit_mb catches a decoder that does). Inputs are
// taken as they are and also behind a valid header, so the body decoder sees garbage too. The
// compact job's decoder (ParseSummaryViews) must agree with the full one on every input.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "pattern/summary_io.h"

namespace {

namespace p = perftracker::pattern;

// The compact job's decoder (functions as views) must accept and refuse exactly what the full
// one does, with the same message, and decode the same functions.
void SameAsViews(std::string_view bytes, const perftracker::StatusOr<p::RankSummary>& full) {
  auto views = p::ParseSummaryViews(bytes, "fuzz.summary");
  if (views.ok() != full.ok()) __builtin_trap();
  if (!full.ok()) {
    if (views.status().message() != full.status().message()) __builtin_trap();
    return;
  }
  p::RankSummary s = std::move(views->summary);
  for (const p::FunctionView& f : views->functions) s.functions.push_back(f.ToPattern());
  if (p::SerializeSummary(s) != p::SerializeSummary(*full)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  SameAsViews(bytes, p::ParseSummary(bytes, "fuzz.summary"));
  // Version 1 stores the body as is: the decoder's every branch, without the inflater.
  std::string v1("PTSUMMRY\x01\0\0\0", 12);
  v1.append(bytes);
  auto r = p::ParseSummary(v1, "fuzz.summary");
  SameAsViews(v1, r);
  // What decodes must encode and decode again to the same summary.
  if (r.ok()) {
    const std::string again = p::SerializeSummary(*r);
    auto back = p::ParseSummary(again, "again.summary");
    if (!back.ok() || p::SerializeSummary(*back) != again) __builtin_trap();
  }
  return 0;
}
