#include "worker/window_file.h"

#include <cmath>
#include <cstdio>

#include "base/json_writer.h"
#include "base/private_file.h"
#include "base/python_window_format.h"

namespace perftracker::worker {

std::string PythonWindowJson(const PythonWindow& w) {
  // Nodes are arrays, not objects: a window may hold tens of thousands of them.
  std::string out;
  out.reserve(256 + w.tree.nodes().size() * 96 + w.names.size() * 48);
  out += "{\"schema\":\"";
  out += python_window::kSchema;
  out += "\",\"pid\":" + std::to_string(w.pid) + ",\"tid\":" + std::to_string(w.tid) +
         ",\"start_ns\":" + std::to_string(w.start_ns) + ",\"end_ns\":" + std::to_string(w.end_ns);
  out += ",\n\"iterations\":[";
  for (size_t i = 0; i < w.markers.size(); ++i) {
    const IterationMark& m = w.markers[i];
    if (i) out += ',';
    out += '[' + std::to_string(m.index) + ',' + std::to_string(m.start_ns) + ',' +
           std::to_string(m.end_ns) + ']';
  }
  out += "],\n\"names\":[";
  for (size_t i = 0; i < w.names.size(); ++i) {
    if (i) out += ',';
    AppendJsonString(w.names[i], &out);
  }
  out += "],\n\"nodes\":[";
  const std::vector<CallNode>& nodes = w.tree.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const CallNode& n = nodes[i];
    if (i) out += ",\n";
    out += '[' + std::to_string(n.parent) + ',' + std::to_string(n.name) + ',' +
           (n.gc ? "1" : "0") + ',' + std::to_string(n.count) + ',' + std::to_string(n.total_ns) +
           ',' + std::to_string(n.self_ns) + ',' + std::to_string(n.count ? n.min_ns : 0) + ',' +
           std::to_string(n.max_ns) + ',' + FormatJsonNumber(n.sum_sq_ns) + ',' +
           std::to_string(n.hist.offset()) + ",[";
    for (size_t b = 0; b < n.hist.counts().size(); ++b) {
      if (b) out += ',';
      out += std::to_string(n.hist.counts()[b]);
    }
    out += "],[";
    for (size_t c = 0; c < n.iterations.size(); ++c) {
      const IterationCell& cell = n.iterations[c];
      if (c) out += ',';
      out += '[' + std::to_string(cell.iteration) + ',' + std::to_string(cell.calls) + ',' +
             std::to_string(cell.inclusive_ns) + ',' + std::to_string(cell.self_ns) + ']';
    }
    out += "]]";
  }
  out += "],\n\"long_calls\":[";
  for (size_t i = 0; i < w.tree.long_calls().size(); ++i) {
    const LongCall& c = w.tree.long_calls()[i];
    if (i) out += ',';
    out += '[' + std::to_string(c.node) + ',' + std::to_string(c.start_ns) + ',' +
           std::to_string(c.end_ns) + ']';
  }
  out += ']';
  if (w.kept.sample_bytes > 0) {
    out += ",\n\"kept_memory\":{\"sample_bytes\":" + std::to_string(w.kept.sample_bytes) +
           ",\"samples\":" + std::to_string(w.kept.samples) +
           ",\"dropped\":" + std::to_string(w.kept.dropped) + ",\"cells\":[";
    for (size_t i = 0; i < w.kept.cells.size(); ++i) {
      const KeptHeapCell& c = w.kept.cells[i];
      if (i) out += ',';
      out += '[' + std::to_string(c.node) + ',' + std::to_string(c.iteration) + ',' +
             std::to_string(static_cast<uint64_t>(std::llround(c.bytes))) + ',' +
             std::to_string(c.samples);
      if (c.op != 0) out += ',' + std::to_string(c.op);
      out += ']';
    }
    out += "]}";
  }
  const CallTreeStats& s = w.tree.stats();
  out += ",\n\"stats\":{\"calls\":" + std::to_string(s.calls) +
         ",\"other_calls\":" + std::to_string(s.other_calls) +
         ",\"untraced_calls\":" + std::to_string(s.untraced_calls) +
         ",\"long_calls_dropped\":" + std::to_string(s.long_calls_dropped) +
         ",\"gc_collections\":" + std::to_string(s.gc_collections) +
         ",\"unmatched_returns\":" + std::to_string(s.unmatched_returns) + "}}\n";
  return out;
}

Status WritePythonWindow(const PythonWindow& w) {
  // Created, never opened: a link at either name (planted to make this process write elsewhere)
  // or a file already at the trace's name fails the write instead.
  const Status st = WritePrivateFileAtomically(w.path, PythonWindowJson(w), AtPath::kKeep);
  return st.ok() ? st : Internal("cannot write the Python window: " + st.message());
}

}  // namespace perftracker::worker
