// libFuzzer target: any bytes through the Flight Recorder reader (the pickle reader for a first
// byte 0x80, JSON otherwise) must give a log or a Status, never a crash or unbounded memory; a
// log that reads is then compared with a shifted copy of itself by the sequence diagnosis. Its
// corpus starts from a memo amplification (fuzz/corpus/flight_recorder/memo_amplification: 4 KB
// of references to references that ask for ~340 MB once copied out), run under scripts/test.sh's
// 512 MB limit.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "diagnose/collective_sequence.h"
#include "pattern/flight_recorder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace p = perftracker::pattern;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)p::LooksLikeFlightRecorder(bytes);
  auto log = p::ParseFlightRecorder(bytes, "fuzz_0", 0);
  if (!log.ok()) return 0;
  p::CollectiveLog other = *log;
  other.rank = 1;
  if (!other.calls.empty()) other.calls.pop_back();
  for (auto& c : other.calls) c.sizes.push_back({1});
  (void)perftracker::diagnose::DiagnoseCollectiveSequence({*log, other}, {0, 1, 2}, 1.0);
  return 0;
}
