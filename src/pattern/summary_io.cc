// Layout: "PTSUMMRY", u32 LE major version, then a varint with the payload's size and the
// payload compressed: version 3 to 5 with zstd (a frame with its checksum; 4 adds a function's
// input shapes, behind its flag 8, which 3's readers refuse; 5 writes a process group's ranks as
// runs, see WriteRanks), version 2 deflated with
// zlib (still read); version 1 stored the payload as is. The payload is a string table (varint
// count, varint-length strings) and the body. Python stacks repeat long paths, so compression
// shrinks a summary a lot (agents upload one per rank and window); zstd because inflating was
// half the time of diagnosing 10,000 summaries from disk, and deflate most of simulating them.
// Integers
// are LEB128 varints (signed ones zigzag), doubles / floats are raw little-endian IEEE. Every
// string in the body is an index into the table, so repeated names, stacks and groups cost one
// varint. Readers ignore bytes after the body, which leaves room for additions within a major
// version.
#include "pattern/summary_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
// For ZSTD_c_literalCompressionMode (an experimental parameter, stable in libzstd since 1.4.5).
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <optional>
#include <unordered_map>

#include "base/limits.h"
#include "pattern/inflate.h"
#include "pattern/names.h"
#include "pattern/rank_runs.h"
#include "pattern/summary_codec.h"

namespace perftracker::pattern {
namespace {

// The fewest bytes one function can take in the body: eight one-byte varints, eleven doubles,
// an empty iteration list and no collective.
constexpr size_t kMinFunctionBytes = 8 + 11 * 8 + 1 + 1;

using summary_codec::kHeaderSize;
using summary_codec::kMagic;
using summary_codec::Reader;
using summary_codec::Writer;

// The header of VERSION.
std::string Header(uint32_t version) {
  std::string out(kMagic, sizeof(kMagic));
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((version >> (8 * i)) & 0xff));
  return out;
}

// Header, then the payload compressed; nullopt if zstd could not (out of memory).
std::optional<std::string> Wrap(const std::string& payload, uint32_t version) {
  std::string out = Header(version);
  Writer size;
  size.U(payload.size());
  out += size.Take();
  std::string z(ZSTD_compressBound(payload.size()), '\0');
  size_t n = 0;
  if (ZSTD_CCtx* cctx = ZSTD_createCCtx()) {
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, ZSTD_CLEVEL_DEFAULT);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    // Literals stored as they are, not Huffman-coded: most of a payload is the functions'
    // times, raw doubles and floats whose bytes repeat little, so coding them saved 5% of the
    // size and took 60% of inflating (120 -> 48 us a simulated 140 KB payload; the load of
    // 100,000 summaries is mostly inflating). A reader of any zstd version reads either.
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_literalCompressionMode, ZSTD_ps_disable);
    n = ZSTD_compress2(cctx, z.data(), z.size(), payload.data(), payload.size());
    ZSTD_freeCCtx(cctx);
  }
  if (n == 0 || ZSTD_isError(n)) return std::nullopt;
  z.resize(n);
  return out + z;
}

std::string ErrnoText() { return std::strerror(errno); }

// A process group's ranks (version 5): the run count, then per run its first rank, its stride
// and its length (pattern/rank_runs.h). Decoding a data-parallel group's 12 KB of varints in
// every summary was 7.4% of the CPU time of diagnosing 100,000 summaries at tp=4,pp=5 (1.7% as
// runs), and the files are 20% smaller (7.5 -> 5.9 GB).
void WriteRanks(Writer& w, const std::vector<int>& ranks) {
  size_t runs = 0;
  ForEachRankRun(ranks, [&](const RankRun&) { ++runs; });
  w.U(runs);
  ForEachRankRun(ranks, [&](const RankRun& run) {
    w.S(run.start);
    w.S(run.stride);
    w.U(run.length);
  });
}

// The payload of S in format VERSION (4: ranks listed, 5: as runs).
std::string EncodePayload(const RankSummary& s, uint32_t version) {
  Writer w;
  w.S(s.rank);
  w.S(s.world_size);
  w.Str(s.host);
  w.Str(s.source);
  w.B(s.legacy_format);
  w.B(s.has_gpu);
  w.U(s.process_groups.size());
  for (const auto& pg : s.process_groups) {
    w.Str(pg.name);
    w.Str(pg.desc);
    w.Str(pg.backend);
    w.S(pg.size);
    if (version >= 5) {
      WriteRanks(w, pg.ranks);
    } else {
      w.U(pg.ranks.size());
      for (int r : pg.ranks) w.S(r);
    }
  }
  w.U(s.devices.size());
  for (const auto& d : s.devices) {
    w.S(d.id);
    w.Str(d.name);
    w.S(d.num_sms);
    w.S(d.compute_major);
    w.S(d.compute_minor);
  }
  w.Str(s.iteration_source);
  w.B(s.whole_window);
  w.U(s.iteration_ms.size());
  for (double v : s.iteration_ms) w.D(v);
  w.U(s.iteration_steps.size());
  for (int64_t v : s.iteration_steps) w.S(v);
  w.D(s.window_ms);
  w.U(s.events_outside_iterations);
  w.S(s.main_tid);
  for (double v : {s.gpu_busy_us, s.gpu_idle_us, s.compute_us, s.comm_us, s.memcpy_us,
                   s.comm_compute_overlap_us, s.cpu_critical_us}) {
    w.D(v);
  }
  w.U(s.functions.size());
  for (const FunctionPattern& f : s.functions) {
    w.Str(f.name);
    w.U(static_cast<uint64_t>(f.kind));
    w.U(static_cast<uint64_t>(f.fclass));
    w.Str(f.stack);
    w.S(f.device);
    w.S(f.stream);
    const bool shaped = !f.input_dims.empty() || f.input_elements > 0;
    w.U((f.main_thread ? 1u : 0u) | (f.top_level ? 2u : 0u) | (f.in_python ? 4u : 0u) |
        (shaped ? 8u : 0u));
    w.U(f.count);
    for (double v : {f.total_us, f.mean_us, f.p50_us, f.p99_us, f.max_us, f.min_us, f.cv,
                     f.calls_per_iter, f.per_iter_us, f.share, f.self_per_iter_us}) {
      w.D(v);
    }
    w.U(f.iter_us.size());
    for (float v : f.iter_us) w.F(v);
    const bool coll = f.fclass == FunctionClass::kCollective || !f.coll.op.empty();
    w.B(coll);
    if (coll) {
      w.Str(f.coll.op);
      w.D(f.coll.msg_bytes);
      w.Str(f.coll.dtype);
      w.S(f.coll.group_size);
      w.Str(f.coll.group);
      w.D(f.coll.algbw_gbps);
      w.D(f.coll.busbw_gbps);
    }
    if (shaped) {
      w.Str(f.input_dims);
      w.D(f.input_elements);
    }
  }
  const trace::ReadStats& r = s.read_stats;
  for (uint64_t v :
       {r.bytes, r.events, r.flow_events, r.metadata_events, r.unknown_kind, r.malformed_events}) {
    w.U(v);
  }
  w.U(r.unknown_cats.size());
  for (const auto& [cat, n] : r.unknown_cats) {
    w.Str(cat);
    w.U(n);
  }
  // Optional trailing fields (older summaries end before them).
  w.Str(s.network_switch);
  w.U(r.first_bad_byte);
  w.Str(r.first_bad);
  w.Str(s.missing_part);
  w.Str(s.missing_why);
  w.U(s.excluded_iterations.size());
  for (const ExcludedIteration& e : s.excluded_iterations) {
    w.U(e.reason);
    w.S(e.step);
    w.S(e.index);
    w.D(e.ms);
  }
  w.U(s.pre_profiler_gpu_ops);
  w.D(s.pre_profiler_gpu_us);
  w.Str(s.backend);
  w.Str(s.nccl_version);
  w.U(s.memory.size());
  for (const DeviceMemory& m : s.memory) {
    w.Str(m.device);
    for (double v : {m.peak_allocated_bytes, m.peak_reserved_bytes, m.start_allocated_bytes,
                     m.end_allocated_bytes, m.allocated_bytes, m.largest_failed_bytes}) {
      w.D(v);
    }
    w.U(m.allocations);
    w.U(m.failed_allocations);
    w.U(m.iteration_end_bytes.size());
    for (size_t i = 0; i < m.iteration_end_bytes.size(); ++i) {
      w.D(m.iteration_end_bytes[i]);
      w.D(i < m.iteration_peak_bytes.size() ? m.iteration_peak_bytes[i] : 0.0);
    }
  }
  w.U(s.memory_sites.size());
  for (const MemorySite& m : s.memory_sites) {
    w.Str(m.device);
    w.Str(m.function);
    w.Str(m.stack);
    w.Str(m.op);
    w.D(m.kept_bytes);
    w.U(m.kept_iterations);
    w.U(m.counted_iterations);
    w.U(m.allocations);
  }
  return w.Payload();
}

}  // namespace

std::string SerializeSummary(const RankSummary& s) {
  return SerializeSummary(s, RankSummary::kVersion);
}

std::string SerializeSummary(const RankSummary& s, int version) {
  const uint32_t v = version == 4 ? 4 : RankSummary::kVersion;
  if (std::optional<std::string> out = Wrap(EncodePayload(s, v), v)) return *std::move(out);
  // zstd could not start (out of memory): version 1, the payload stored as it is and its ranks
  // listed, stays readable.
  return Header(1) + EncodePayload(s, 1);
}

namespace {

// UnwrapSummary, inflating into a buffer the caller reuses.
StatusOr<SummaryPayload> Unwrap(std::string_view bytes, const std::string& name,
                                ByteBuffer* inflated) {
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return InvalidArgument(name + ": not a perftracker summary");
  }
  auto truncated = [&] {
    return DataLoss(name + ": truncated summary at byte " + std::to_string(bytes.size()));
  };
  if (bytes.size() < kHeaderSize) return truncated();
  uint32_t version = 0;
  for (int i = 0; i < 4; ++i) {
    version |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
  }
  if (version > static_cast<uint32_t>(RankSummary::kVersion)) {
    return InvalidArgument(name + ": summary version " + std::to_string(version) +
                           " is newer than this perftracker (" +
                           std::to_string(RankSummary::kVersion) + ")");
  }
  if (version == 0) return DataLoss(name + ": corrupt summary: version 0");
  if (version < 2) return SummaryPayload{bytes, kHeaderSize, version};

  Reader h(bytes, kHeaderSize);
  uint64_t size = h.U();
  if (h.failed()) return truncated();
  if (size > limits::kMaxSummaryPayload) {
    return DataLoss(
        fmt::format("{}: corrupt summary: its body would inflate to {} bytes, over "
                    "the {} MiB a summary may have",
                    name, size, limits::kMaxSummaryPayload >> 20));
  }
  const size_t zpos = bytes.size() - h.remaining();
  const Inflated r = Inflate(version, bytes.substr(zpos), size, inflated);
  if (r == Inflated::kTruncated) return truncated();
  if (r == Inflated::kCorrupt)
    return DataLoss(name + ": corrupt summary: the compressed payload does not inflate");
  if (r == Inflated::kError) return Internal(name + ": cannot start inflating");
  return SummaryPayload{inflated->view(), 0, version};
}

}  // namespace

StatusOr<SummaryPayload> UnwrapSummary(std::string_view bytes, const std::string& name,
                                       std::string* inflated) {
  ByteBuffer buf;
  PT_ASSIGN_OR_RETURN(const SummaryPayload p, Unwrap(bytes, name, &buf));
  if (p.start != 0) return p;  // version 1: the payload is the file's own bytes
  inflated->assign(buf.view());
  return SummaryPayload{*inflated, 0, p.version};
}

namespace {

using StringTable = std::vector<std::string_view>;

// Rank and world size; a rank beyond a job's size is an error of its own.
Status ReadPlacement(Reader& r, const std::string& name, RankSummary* s) {
  s->rank = r.S32();
  s->world_size = r.S32();
  // A rank of -1 and a world size of -1 or 0: not known (a trace without distributedInfo).
  if ((s->rank != -1 && !limits::ValidRank(s->rank)) ||
      (s->world_size != -1 && s->world_size != 0 && !limits::ValidWorldSize(s->world_size))) {
    return DataLoss(
        fmt::format("{}: corrupt summary: rank {} of world size {} (a job has at most "
                    "{} ranks)",
                    name, s->rank, s->world_size, limits::kMaxWorldSize));
  }
  return Status::Ok();
}

// A process group's ranks: VERSION 5's runs (WriteRanks), older versions' list.
void ReadRanks(Reader& r, uint32_t version, std::vector<int>* ranks) {
  if (version < 5) {
    ranks->resize(r.Count<int>());
    for (int& x : *ranks) x = r.S32();
    return;
  }
  constexpr size_t kMinRunBytes = 3;
  const size_t runs = r.Count<char>(kMinRunBytes);
  ranks->clear();
  for (size_t i = 0; i < runs && !r.failed(); ++i) {
    const int64_t start = r.S32();
    const int64_t stride = r.S();
    const uint64_t length = r.U();
    // A rank fits in an int, so a step of one does in 33 bits, and a group is at most a job.
    if (length == 0 || length > static_cast<uint64_t>(limits::kMaxWorldSize) ||
        stride > int64_t{UINT32_MAX} || stride < -int64_t{UINT32_MAX}) {
      r.Corrupt();
      break;
    }
    const int64_t last = start + stride * static_cast<int64_t>(length - 1);  // < 2^53
    if (last < INT32_MIN || last > INT32_MAX) r.Corrupt();
    r.Charge(length * sizeof(int));
    if (r.failed()) break;
    ranks->reserve(ranks->size() + length);
    for (uint64_t k = 0; k < length; ++k)
      ranks->push_back(static_cast<int>(start + stride * static_cast<int64_t>(k)));
  }
}

// Host, source, process groups and devices.
void ReadSetup(Reader& r, const StringTable& table, uint32_t version, RankSummary* s) {
  s->host = r.Str(table);
  s->source = r.Str(table);
  s->legacy_format = r.B();
  s->has_gpu = r.B();
  s->process_groups.resize(r.Count<trace::ProcessGroup>(4));
  for (auto& pg : s->process_groups) {
    pg.name = r.Str(table);
    pg.desc = r.Str(table);
    pg.backend = r.Str(table);
    pg.size = r.S32();
    ReadRanks(r, version, &pg.ranks);
  }
  s->devices.resize(r.Count<trace::DeviceInfo>(5));
  for (auto& d : s->devices) {
    d.id = r.S32();
    d.name = r.Str(table);
    d.num_sms = r.S32();
    d.compute_major = r.S32();
    d.compute_minor = r.S32();
  }
}

// Iterations, the window and the rank-wide GPU / CPU breakdown.
void ReadIterations(Reader& r, const StringTable& table, RankSummary* s) {
  s->iteration_source = r.Str(table);
  s->whole_window = r.B();
  s->iteration_ms.resize(r.Count<double>(8));
  for (double& v : s->iteration_ms) v = r.D();
  s->iteration_steps.resize(r.Count<int64_t>());
  for (int64_t& v : s->iteration_steps) v = r.S();
  s->window_ms = r.D();
  s->events_outside_iterations = r.U();
  s->main_tid = r.S();
  for (double* v : {&s->gpu_busy_us, &s->gpu_idle_us, &s->compute_us, &s->comm_us, &s->memcpy_us,
                    &s->comm_compute_overlap_us, &s->cpu_critical_us}) {
    *v = r.D();
  }
}

// One function; its per-iteration times are appended to ITER_US, which the view then points
// into (the caller keeps ITER_US from reallocating while it needs the view).
void ReadFunction(Reader& r, const StringTable& table, std::vector<float>* iter_us,
                  FunctionView* f) {
  f->name = r.Str(table, &f->name_ref);
  const uint64_t kind = r.U();
  if (kind > static_cast<uint64_t>(trace::EventKind::kOther)) r.Corrupt();
  f->kind = static_cast<trace::EventKind>(kind);
  const uint64_t fclass = r.U();
  if (fclass > static_cast<uint64_t>(FunctionClass::kOther)) r.Corrupt();
  f->fclass = static_cast<FunctionClass>(fclass);
  f->stack = r.Str(table, &f->stack_ref);
  f->device = r.S32();
  f->stream = r.S32();
  const uint64_t flags = r.U();
  if (flags > 15) r.Corrupt();
  f->main_thread = flags & 1;
  f->top_level = flags & 2;
  f->in_python = flags & 4;
  f->count = r.U();
  r.Doubles({&f->total_us, &f->mean_us, &f->p50_us, &f->p99_us, &f->max_us, &f->min_us, &f->cv,
             &f->calls_per_iter, &f->per_iter_us, &f->share, &f->self_per_iter_us});
  const size_t n = r.Count<float>(4);
  const size_t start = iter_us->size();
  iter_us->resize(start + n);
  r.Floats(iter_us->data() + start, n);
  f->iter_us = std::span<const float>(iter_us->data() + start, n);
  if (r.B()) {
    f->coll_op = r.Str(table);
    f->coll_msg_bytes = r.D();
    f->coll_dtype = r.Str(table);
    f->coll_group_size = r.S32();
    f->coll_group = r.Str(table);
    f->coll_algbw_gbps = r.D();
    f->coll_busbw_gbps = r.D();
  } else {  // F may be reused: clear what an earlier function left
    f->coll_op = f->coll_dtype = f->coll_group = {};
    f->coll_msg_bytes = f->coll_algbw_gbps = f->coll_busbw_gbps = 0;
    f->coll_group_size = 0;
  }
  if (flags & 8) {
    f->input_dims = r.Str(table);
    f->input_elements = r.D();
  } else {
    f->input_dims = {};
    f->input_elements = 0;
  }
}

// The function list as views (a compact job's input): ITER_US holds every function's
// per-iteration times, reserved up front so that the views into it stay valid.
void ReadFunctionViews(Reader& r, const StringTable& table, std::vector<float>* iter_us,
                       std::vector<FunctionView>* fns) {
  // Each time takes 4 bytes of what is left: together they cannot outnumber remaining() / 4.
  iter_us->clear();
  iter_us->reserve(r.remaining() / 4);
  // Not cleared first: ReadFunction sets every field, so the last summary's views are
  // overwritten rather than constructed again (on a failure the list is dropped).
  fns->resize(r.Count<FunctionPattern>(kMinFunctionBytes));
  for (FunctionView& f : *fns) {
    if (r.failed()) break;
    ReadFunction(r, table, iter_us, &f);
  }
}

// The function list as FunctionPatterns, each converted as soon as it is read.
void ReadFunctions(Reader& r, const StringTable& table, std::vector<float>* iter_us,
                   std::vector<FunctionPattern>* fns) {
  const size_t n = r.Count<FunctionPattern>(kMinFunctionBytes);
  fns->reserve(n);
  for (size_t i = 0; i < n && !r.failed(); ++i) {
    iter_us->clear();
    FunctionView f;
    ReadFunction(r, table, iter_us, &f);
    fns->push_back(f.ToPattern());
  }
}

void ReadReadStats(Reader& r, const StringTable& table, trace::ReadStats* st) {
  for (uint64_t* v : {&st->bytes, &st->events, &st->flow_events, &st->metadata_events,
                      &st->unknown_kind, &st->malformed_events}) {
    *v = r.U();
  }
  const size_t cats = r.Count<std::pair<std::string, uint64_t>>(2);
  for (size_t i = 0; i < cats && !r.failed(); ++i) {
    const std::string_view cat = r.Str(table);
    st->unknown_cats[std::string(cat)] = r.U();
  }
}

// The devices' memory (RankSummary::memory): a name, six doubles and three counts at least.
constexpr size_t kMinDeviceMemoryBytes = 1 + 6 * 8 + 3;

void ReadMemory(Reader& r, const StringTable& table, std::vector<DeviceMemory>* out) {
  const size_t n = r.Count<DeviceMemory>(kMinDeviceMemoryBytes);
  out->reserve(n);
  for (size_t i = 0; i < n && !r.failed(); ++i) {
    DeviceMemory& m = out->emplace_back();
    m.device = std::string(r.Str(table));
    for (double* v : {&m.peak_allocated_bytes, &m.peak_reserved_bytes, &m.start_allocated_bytes,
                      &m.end_allocated_bytes, &m.allocated_bytes, &m.largest_failed_bytes}) {
      *v = r.D();
    }
    m.allocations = r.U();
    m.failed_allocations = r.U();
    const size_t k = r.Count<double>(2 * 8);
    r.Charge(k * sizeof(double));  // the peaks beside the ends
    m.iteration_end_bytes.reserve(k);
    m.iteration_peak_bytes.reserve(k);
    for (size_t j = 0; j < k && !r.failed(); ++j) {
      m.iteration_end_bytes.push_back(r.D());
      m.iteration_peak_bytes.push_back(r.D());
    }
  }
}

// Where memory was kept (RankSummary::memory_sites): four names, a double and three counts at
// least.
constexpr size_t kMinMemorySiteBytes = 4 + 8 + 3;

void ReadMemorySites(Reader& r, const StringTable& table, std::vector<MemorySite>* out) {
  const size_t n = r.Count<MemorySite>(kMinMemorySiteBytes);
  out->reserve(n);
  for (size_t i = 0; i < n && !r.failed(); ++i) {
    MemorySite& m = out->emplace_back();
    m.device = std::string(r.Str(table));
    m.function = std::string(r.Held(r.Str(table)));
    m.stack = std::string(r.Held(r.Str(table)));
    m.op = std::string(r.Held(r.Str(table)));
    m.kept_bytes = r.D();
    m.kept_iterations = static_cast<uint32_t>(r.U());
    m.counted_iterations = static_cast<uint32_t>(r.U());
    m.allocations = r.U();
  }
}

// The optional trailing fields, each group read only when bytes are left (older summaries end
// before them).
void ReadTrailer(Reader& r, const StringTable& table, RankSummary* s) {
  trace::ReadStats& st = s->read_stats;
  if (!r.failed() && r.remaining() > 0) s->network_switch = r.Str(table);
  if (!r.failed() && r.remaining() > 0) {
    st.first_bad_byte = r.U();
    st.first_bad = r.Str(table);
  }
  if (!r.failed() && r.remaining() > 0) {
    s->missing_part = r.Str(table);
    s->missing_why = r.Str(table);
  }
  if (!r.failed() && r.remaining() > 0) {
    const size_t n = r.Count<ExcludedIteration>(11);
    for (size_t i = 0; i < n && !r.failed(); ++i) {
      ExcludedIteration e;
      e.reason = r.U() == ExcludedIteration::kWarmup ? ExcludedIteration::kWarmup
                                                     : ExcludedIteration::kPartial;
      e.step = r.S();
      e.index = static_cast<int32_t>(r.S());
      e.ms = r.D();
      s->excluded_iterations.push_back(e);
    }
    s->pre_profiler_gpu_ops = r.U();
    s->pre_profiler_gpu_us = r.D();
  }
  if (!r.failed() && r.remaining() > 0) {
    s->backend = r.Str(table);
    s->nccl_version = r.Str(table);
  }
  if (!r.failed() && r.remaining() > 0) ReadMemory(r, table, &s->memory);
  if (!r.failed() && r.remaining() > 0) ReadMemorySites(r, table, &s->memory_sites);
}

// Why the reader stopped, if it did: over the memory budget, corrupt or truncated.
Status ReaderStatus(const Reader& r, const std::string& name) {
  if (r.over_budget()) {
    return DataLoss(
        fmt::format("{}: corrupt summary: its body expands past the {} MiB a summary "
                    "may hold in memory (at byte {})",
                    name, limits::kMaxSummaryMemory >> 20, r.fail_pos()));
  }
  if (r.failed()) {
    return DataLoss(name +
                    (r.corrupt() ? ": corrupt summary at byte " : ": truncated summary at byte ") +
                    std::to_string(r.fail_pos()));
  }
  return Status::Ok();
}

}  // namespace

namespace {

// What one thread reuses from summary to summary: the file, the inflated payload, the string
// table, the functions' views and their per-iteration times.
struct Scratch {
  ByteBuffer file;
  ByteBuffer inflated;
  StringTable table;
  std::vector<float> iter_us;
  std::vector<FunctionView> functions;

  // Buffers above a typical summary's needs are not kept: one outsized file (up to the
  // limits) is not held by the thread for good.
  void Trim() {
    constexpr size_t kKeep = 4u << 20;
    file.Trim(kKeep);
    inflated.Trim(kKeep);
    if (table.capacity() * sizeof(table[0]) > kKeep) table = {};
    if (iter_us.capacity() * sizeof(float) > kKeep) iter_us = {};
    if (functions.capacity() * sizeof(FunctionView) > kKeep) functions = {};
  }
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

// Decodes BYTES into S; READ_FUNCTIONS(reader, table) reads the function list, the one step
// the two forms of the result do differently. Every other check is the same for both.
template <typename ReadFns>
Status Decode(std::string_view bytes, const std::string& name, Scratch& sc, RankSummary* s,
              ReadFns read_functions) {
  PT_ASSIGN_OR_RETURN(const SummaryPayload payload, Unwrap(bytes, name, &sc.inflated));
  Reader r(payload.bytes, payload.start);
  StringTable& table = sc.table;
  table.clear();
  table.resize(r.Count<std::string_view>());
  for (auto& str : table) str = r.RawString();

  PT_RETURN_IF_ERROR(ReadPlacement(r, name, s));
  ReadSetup(r, table, payload.version, s);
  ReadIterations(r, table, s);
  read_functions(r, table);
  ReadReadStats(r, table, &s->read_stats);
  ReadTrailer(r, table, s);
  return ReaderStatus(r, name);
}

StatusOr<RankSummary> ParseWith(std::string_view bytes, const std::string& name, Scratch& sc) {
  RankSummary s;
  Status st = Decode(bytes, name, sc, &s, [&](Reader& r, const StringTable& table) {
    ReadFunctions(r, table, &sc.iter_us, &s.functions);
  });
  sc.Trim();
  if (!st.ok()) return st;
  return s;
}

// The caller trims SC first (what the last summary left: its views are dropped by now).
StatusOr<SummaryViews> ParseViewsWith(std::string_view bytes, const std::string& name,
                                      Scratch& sc) {
  SummaryViews v;
  PT_RETURN_IF_ERROR(Decode(bytes, name, sc, &v.summary, [&](Reader& r, const StringTable& t) {
    ReadFunctionViews(r, t, &sc.iter_us, &sc.functions);
  }));
  v.functions = sc.functions;
  v.strings = sc.table;
  return v;
}

// The whole file at PATH into OUT, with one read: no copy through a stream's buffer.
Status ReadFile(const std::string& path, ByteBuffer* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound(path + ": cannot open summary: " + ErrnoText());
  std::unique_ptr<const int, void (*)(const int*)> closer(&fd, [](const int* f) { ::close(*f); });
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size < 0 || ::lseek(fd, 0, SEEK_SET) < 0) {
    return DataLoss(path + ": cannot read summary: " + ErrnoText());
  }
  if (static_cast<uint64_t>(size) > limits::kMaxSummaryFile) {
    return DataLoss(fmt::format("{}: not a summary: {} bytes, over the {} MiB a summary may have",
                                path, size, limits::kMaxSummaryFile >> 20));
  }
  out->Resize(static_cast<size_t>(size));
  size_t got = 0;
  while (got < out->size()) {
    const ssize_t n = ::read(fd, out->data() + got, out->size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return DataLoss(path + ": cannot read summary: " + ErrnoText());
    if (n == 0) break;  // the file shrank since
    got += static_cast<size_t>(n);
  }
  out->Resize(got);
  return Status::Ok();
}

}  // namespace

StatusOr<RankSummary> ParseSummary(std::string_view bytes, const std::string& name) {
  return ParseWith(bytes, name, ThreadScratch());
}

StatusOr<SummaryViews> ParseSummaryViews(std::string_view bytes, const std::string& name) {
  Scratch& sc = ThreadScratch();
  sc.Trim();
  return ParseViewsWith(bytes, name, sc);
}

Status WriteSummaryFile(const RankSummary& summary, const std::string& path) {
  const std::string bytes = SerializeSummary(summary);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Unavailable(path + ": cannot write summary: " + ErrnoText());
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return Unavailable(path + ": cannot write summary: " + ErrnoText());
  return Status::Ok();
}

StatusOr<RankSummary> ReadSummaryFile(const std::string& path) {
  Scratch& sc = ThreadScratch();
  if (Status st = ReadFile(path, &sc.file); !st.ok()) {
    sc.Trim();
    return st;
  }
  return ParseWith(sc.file.view(), path, sc);
}

StatusOr<SummaryViews> ReadSummaryFileViews(const std::string& path, SummaryReadTimes* times) {
  Scratch& sc = ThreadScratch();
  sc.Trim();
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  PT_RETURN_IF_ERROR(ReadFile(path, &sc.file));
  const Clock::time_point t1 = Clock::now();
  StatusOr<SummaryViews> v = ParseViewsWith(sc.file.view(), path, sc);
  if (times != nullptr) {
    times->read_s += std::chrono::duration<double>(t1 - t0).count();
    times->decode_s += std::chrono::duration<double>(Clock::now() - t1).count();
  }
  return v;
}

bool HasSummaryExtension(std::string_view path) { return path.ends_with(".summary"); }

bool LooksLikeSummaryFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[sizeof(kMagic)] = {};
  if (!in.read(head, sizeof(head))) return false;
  return std::memcmp(head, kMagic, sizeof(kMagic)) == 0;
}

}  // namespace perftracker::pattern
