// Turns a stream of trace events into a RankSummary (behaviour patterns). The Summarizer is an
// EventSink: memory grows with the number of distinct functions (and GPU activity intervals
// for the busy/idle breakdown), not with the number of CPU events.
#ifndef PERFTRACKER_PATTERN_SUMMARIZER_H_
#define PERFTRACKER_PATTERN_SUMMARIZER_H_

#include <memory>
#include <string>

#include "base/status.h"
#include "pattern/pattern.h"
#include "trace/event.h"
#include "trace/reader.h"

namespace perftracker::pattern {

class Summarizer : public trace::EventSink {
 public:
  Summarizer();
  ~Summarizer() override;
  void OnBegin(const trace::TraceMeta& meta) override;
  void OnEvent(const trace::Event& event) override;
  void OnMemory(const trace::MemoryEvent& event) override;
  void OnEnd(const trace::ReadStats& stats) override;

  // Finishes the summary; call once after the reader returned.
  RankSummary Finish();
  // Leaves no iteration out as warm-up (only partial ones): a window's torch trace, whose
  // iterations the window's Python trace decides when the two are merged (pattern/merge.h).
  void LeaveWarmupIn();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Read + summarize one trace file. MERGED: a window's torch trace to be merged into its Python
// trace (Summarizer::LeaveWarmupIn).
StatusOr<RankSummary> SummarizeTrace(const std::string& path,
                                     const trace::ReadOptions& options = {}, bool merged = false);

// Kernel template arguments, hex addresses, long digit runs normalized away.
std::string NormalizeName(std::string_view name, trace::EventKind kind);

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_SUMMARIZER_H_
