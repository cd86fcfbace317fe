#include "sim/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "sim/topology.h"

namespace perftracker::sim {

namespace {

bool ParseInt(std::string_view s, int* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

// The options after a fault's place (",size=S", ",every=K"), into *f. TEXT is the whole flag
// value, for the error.
Status ParseFaultOptions(std::string_view text, std::string_view opts, Fault* f) {
  while (!opts.empty()) {
    size_t next = opts.find(',');
    std::string_view opt = opts.substr(0, next);
    opts = next == std::string_view::npos ? std::string_view() : opts.substr(next + 1);
    size_t eq = opt.find('=');
    std::string_view key = opt.substr(0, eq);
    std::string value(eq == std::string_view::npos ? "" : opt.substr(eq + 1));
    char* end = nullptr;
    if (key == "size") {
      f->size = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(f->size > 0) || f->size > 100)
        return InvalidArgument(
            fmt::format("--fault: '{}': size must be a number in (0, 100]", text));
    } else if (key == "every") {
      int k = 0;
      if (!ParseInt(value, &k) || k < 1 || k > 1000)
        return InvalidArgument(fmt::format("--fault: '{}': every must be in [1, 1000]", text));
      f->every = k;
    } else {
      return InvalidArgument(
          fmt::format("--fault: '{}': unknown option '{}' (size=S, every=K)", text, opt));
    }
  }
  return Status::Ok();
}

Status ParseFaultKind(std::string_view kind, Fault* f) {
  static const FaultKind kKinds[] = {FaultKind::kSlowGpu,    FaultKind::kSlowNvlink,
                                     FaultKind::kSlowNic,    FaultKind::kSlowSwitch,
                                     FaultKind::kSlowLoader, FaultKind::kCpuContention,
                                     FaultKind::kGc,         FaultKind::kTinyKernels,
                                     FaultKind::kSync,       FaultKind::kHang};
  bool found = false;
  for (FaultKind k : kKinds) {
    if (kind == FaultKindName(k)) f->kind = k, found = true;
  }
  if (!found) {
    return InvalidArgument(fmt::format(
        "--fault: unknown kind '{}' (slow-gpu, slow-nvlink, slow-nic, slow-switch, slow-loader, "
        "cpu-contention, gc, tiny-kernels, sync, hang)",
        kind));
  }
  return Status::Ok();
}

// "rank=R", "node=N", "switch=S" or "all", into *f.
Status ParseFaultPlace(std::string_view text, std::string_view place, Fault* f) {
  f->place = std::string(place);
  if (place == "all") {
    f->place_kind = PlaceKind::kAll;
    return Status::Ok();
  }
  size_t eq = place.find('=');
  std::string_view key = place.substr(0, std::min(eq, place.size()));
  if (eq == std::string_view::npos || !ParseInt(place.substr(eq + 1), &f->index) || f->index < 0 ||
      (key != "rank" && key != "node" && key != "switch")) {
    return InvalidArgument(fmt::format(
        "--fault: '{}': place '{}' is not rank=R, node=N, switch=S or all", text, place));
  }
  f->place_kind = key == "rank"   ? PlaceKind::kRank
                  : key == "node" ? PlaceKind::kNode
                                  : PlaceKind::kSwitch;
  return Status::Ok();
}

// Which places make sense for which kind, and which kinds take a size or a period.
Status CheckFaultPlace(std::string_view text, std::string_view kind, const Fault& f) {
  auto bad = [&](const char* want) {
    return InvalidArgument(fmt::format("--fault: '{}': {} takes {}", text, kind, want));
  };
  switch (f.kind) {
    case FaultKind::kSlowGpu:
    case FaultKind::kCpuContention:
    case FaultKind::kGc:
    case FaultKind::kHang:
      if (f.place_kind != PlaceKind::kRank) return bad("rank=R");
      break;
    case FaultKind::kSlowNvlink:
    case FaultKind::kSlowNic:
      if (f.place_kind != PlaceKind::kNode) return bad("node=N");
      break;
    case FaultKind::kSlowSwitch:
      if (f.place_kind != PlaceKind::kSwitch) return bad("switch=S");
      break;
    case FaultKind::kSlowLoader:
      if (f.place_kind != PlaceKind::kRank && f.place_kind != PlaceKind::kNode) {
        return bad("rank=R or node=N");
      }
      break;
    case FaultKind::kTinyKernels:
    case FaultKind::kSync:
      if (f.place_kind != PlaceKind::kAll) return bad("all");
      break;
  }
  const bool timing =
      f.kind != FaultKind::kHang && f.kind != FaultKind::kSync && f.kind != FaultKind::kTinyKernels;
  if (!timing && (f.size != 1.0 || f.every != 1))
    return InvalidArgument(fmt::format("--fault: '{}': {} takes no size or every", text, kind));
  return Status::Ok();
}

// A fault's place within the cluster the configuration describes.
Status CheckFaultInRange(const Config& c, const Fault& f) {
  const int nodes = (c.workers + c.gpus_per_node - 1) / c.gpus_per_node;
  const int switches = (nodes + c.nodes_per_switch - 1) / c.nodes_per_switch;
  std::string what = fmt::format("--fault: '{}@{}'", FaultKindName(f.kind), f.place);
  if (f.place_kind == PlaceKind::kRank && f.index >= c.workers) {
    return InvalidArgument(
        fmt::format("{}: rank {} is not below {} workers", what, f.index, c.workers));
  }
  if (f.place_kind == PlaceKind::kNode && f.index >= nodes) {
    return InvalidArgument(
        fmt::format("{}: node {} does not exist ({} nodes)", what, f.index, nodes));
  }
  if (f.place_kind == PlaceKind::kSwitch && f.index >= switches) {
    return InvalidArgument(
        fmt::format("{}: switch {} does not exist ({} switches)", what, f.index, switches));
  }
  if (f.kind == FaultKind::kSlowLoader && FaultRanks(c, f).empty()) {
    return InvalidArgument(fmt::format(
        "{}: no rank there is in the first pipeline stage, where the data loader runs", what));
  }
  // A slow NVLink on a job without TP or EP groups is still simulated (DP and PP groups may
  // stay inside a node): nothing to refuse.
  return Status::Ok();
}

}  // namespace

const char* FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kSlowGpu:
      return "slow-gpu";
    case FaultKind::kSlowNvlink:
      return "slow-nvlink";
    case FaultKind::kSlowNic:
      return "slow-nic";
    case FaultKind::kSlowSwitch:
      return "slow-switch";
    case FaultKind::kSlowLoader:
      return "slow-loader";
    case FaultKind::kCpuContention:
      return "cpu-contention";
    case FaultKind::kGc:
      return "gc";
    case FaultKind::kTinyKernels:
      return "tiny-kernels";
    case FaultKind::kSync:
      return "sync";
    case FaultKind::kHang:
      return "hang";
  }
  return "?";
}

StatusOr<Layout> ParseLayout(std::string_view text, int workers) {
  Layout l;
  bool has_tp = false, has_pp = false, has_dp = false;
  l.dp = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(pos, end - pos);
    size_t eq = item.find('=');
    int v = 0;
    if (eq == std::string_view::npos || !ParseInt(item.substr(eq + 1), &v) || v < 1) {
      return InvalidArgument(fmt::format(
          "--layout: '{}' is not NAME=N with N >= 1 (expected tp=T,pp=P[,dp=D][,ep=E])", item));
    }
    std::string_view key = item.substr(0, eq);
    if (key == "tp") {
      l.tp = v, has_tp = true;
    } else if (key == "pp") {
      l.pp = v, has_pp = true;
    } else if (key == "dp") {
      l.dp = v, has_dp = true;
    } else if (key == "ep") {
      l.ep = v;
    } else {
      return InvalidArgument(
          fmt::format("--layout: unknown dimension '{}' (expected tp, pp, dp, ep)", key));
    }
    pos = end + 1;
  }
  if (!has_tp || !has_pp) {
    return InvalidArgument(fmt::format("--layout: '{}' needs tp=T and pp=P", text));
  }
  if (!has_dp) {
    if (workers <= 0 || workers % (l.tp * l.pp) != 0) {
      return InvalidArgument(fmt::format(
          "--layout: {} workers do not split into tp={} x pp={} x dp (not a multiple of {})",
          workers, l.tp, l.pp, l.tp * l.pp));
    }
    l.dp = workers / (l.tp * l.pp);
  }
  if (int64_t(l.tp) * l.pp * l.dp != workers) {
    return InvalidArgument(
        fmt::format("--layout: tp={} x pp={} x dp={} is {} ranks, not {} workers", l.tp, l.pp, l.dp,
                    int64_t(l.tp) * l.pp * l.dp, workers));
  }
  if (l.dp % l.ep != 0) {
    return InvalidArgument(fmt::format("--layout: ep={} does not divide dp={}", l.ep, l.dp));
  }
  return l;
}

StatusOr<Fault> ParseFault(std::string_view text) {
  size_t at = text.find('@');
  if (at == std::string_view::npos) {
    return InvalidArgument(
        fmt::format("--fault: '{}' is not KIND@PLACE (e.g. slow-gpu@rank=5)", text));
  }
  std::string_view kind = text.substr(0, at), place = text.substr(at + 1);
  Fault f;
  if (size_t comma = place.find(','); comma != std::string_view::npos) {
    std::string_view opts = place.substr(comma + 1);
    place = place.substr(0, comma);
    PT_RETURN_IF_ERROR(ParseFaultOptions(text, opts, &f));
  }
  PT_RETURN_IF_ERROR(ParseFaultKind(kind, &f));
  PT_RETURN_IF_ERROR(ParseFaultPlace(text, place, &f));
  PT_RETURN_IF_ERROR(CheckFaultPlace(text, kind, f));
  return f;
}

Status Validate(const Config& c) {
  if (c.workers < 1) return InvalidArgument("--workers: must be at least 1");
  const Layout& l = c.layout;
  if (int64_t(l.tp) * l.pp * l.dp != c.workers) {
    return InvalidArgument(fmt::format("--workers: {} is not tp x pp x dp = {}", c.workers,
                                       int64_t(l.tp) * l.pp * l.dp));
  }
  if (c.gpus_per_node < 1) return InvalidArgument("--gpus-per-node: must be at least 1");
  if (c.nodes_per_switch < 1) return InvalidArgument("--nodes-per-switch: must be at least 1");
  if (c.iterations < 2 || c.iterations > 1000) {
    return InvalidArgument("--iterations: must be between 2 and 1000");
  }
  if (c.layers < 1 || c.layers > 256) return InvalidArgument("--layers: must be between 1 and 256");
  if (c.traces && c.workers > 64) {
    return InvalidArgument(
        fmt::format("--traces: at most 64 workers get traces ({} asked); drop --traces for "
                    "summaries only",
                    c.workers));
  }
  for (const Fault& f : c.faults) PT_RETURN_IF_ERROR(CheckFaultInRange(c, f));
  return Status::Ok();
}

}  // namespace perftracker::sim
