// libFuzzer target: any bytes through the trace reader must give events or a Status, never a
// crash. Runs both the default buffer sizes and tiny ones so chunk-boundary paths are covered,
// and gzip input (the corpus has a seed) through a file, so the inflater sees garbage too.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "trace/reader.h"
#include "trace/reader_internal.h"

namespace {

class NullSink : public perftracker::trace::EventSink {
 public:
  void OnEvent(const perftracker::trace::Event& e) override { sum_ += e.dur_us + e.name.size(); }
  double sum_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace t = perftracker::trace;
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  NullSink sink;
  (void)t::ReadTraceBuffer(json, "fuzz.json", &sink);
  t::internal::ReaderTuning tiny;
  tiny.read_bytes = 5;
  tiny.segment_bytes = 40;
  tiny.classifier = 0;  // the portable block classifier; the default runs the CPU's best
  auto open = [&]() -> perftracker::StatusOr<std::unique_ptr<perftracker::ByteSource>> {
    return perftracker::OpenMemorySource(json);
  };
  (void)t::internal::ReadTraceFrom(open, "fuzz.json", &sink, {}, tiny);
  // The mapped path (plain files): the input read in place, pages released as they pass.
  tiny.release_bytes = 1;
  auto open_mapped = [&]() -> perftracker::StatusOr<std::unique_ptr<perftracker::ByteSource>> {
    return perftracker::OpenMemorySource(json, /*mappable=*/true);
  };
  (void)t::internal::ReadTraceFrom(open_mapped, "fuzz.json", &sink, {}, tiny);
  // Gzip input goes through a file: the file source sniffs the magic and inflates (ISA-L).
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
    static const std::string path = "/tmp/pt_fuzz_" + std::to_string(getpid()) + ".json.gz";
    if (FILE* f = std::fopen(path.c_str(), "wb")) {
      std::fwrite(data, 1, size, f);
      std::fclose(f);
      (void)t::ReadTrace(path, &sink);
    }
  }
  return 0;
}
