// Throughput of the trace reader and of read + summarize, single-threaded, on a real Kineto
// trace held in memory (decompressed once, outside the timed loop). Prints bytes/s per run.
//   build/reader_bench [--benchmark_filter=...]     (PT_BENCH_TRACE=path overrides the input)
#include <benchmark/benchmark.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "pattern/summarizer.h"
#include "trace/reader.h"

namespace {

namespace pt = perftracker;

std::string LoadInput() {
  const char* env = std::getenv("PT_BENCH_TRACE");
  std::string path =
      env ? env : PT_SOURCE_DIR "/../shared/traces/kineto/resnet_ns_rank-0.pt.trace.json.gz";
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files too
  if (f == nullptr) {
    std::fprintf(stderr, "reader_bench: cannot open %s\n", path.c_str());
    std::exit(1);
  }
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, n);
  gzclose(f);
  return out;
}

const std::string& Input() {
  static const std::string input = LoadInput();
  return input;
}

class NullSink : public pt::trace::EventSink {
 public:
  void OnEvent(const pt::trace::Event& e) override { benchmark::DoNotOptimize(e.dur_us); }
};

void BM_Read(benchmark::State& state) {
  const std::string& json = Input();
  for (auto _ : state) {
    NullSink sink;
    auto st = pt::trace::ReadTraceBuffer(json, "bench.json", &sink);
    if (!st.ok()) state.SkipWithError(st.status().message().c_str());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * json.size()));
}
BENCHMARK(BM_Read)->Unit(benchmark::kMillisecond);

void BM_ReadAndSummarize(benchmark::State& state) {
  const std::string& json = Input();
  for (auto _ : state) {
    pt::pattern::Summarizer summarizer;
    auto st = pt::trace::ReadTraceBuffer(json, "bench.json", &summarizer);
    if (!st.ok()) state.SkipWithError(st.status().message().c_str());
    benchmark::DoNotOptimize(summarizer.Finish());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * json.size()));
}
BENCHMARK(BM_ReadAndSummarize)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
