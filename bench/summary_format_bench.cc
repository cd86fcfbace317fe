// Issue 14: the custom summary format (src/pattern/summary_io.cc) against protobuf carrying the
// same tables (bench/summary_format.proto), decided by measurement. For each real trace: the
// RankSummary the summarizer builds, then for both formats the encoded size (raw payload and the
// whole file after zstd at summary_io.cc's level, ZSTD_CLEVEL_DEFAULT with its checksum), the
// median encode and decode time (RankSummary -> file bytes -> RankSummary, zstd included; MB/s of
// the raw payload), the zstd part of those times, and the heap peak of one decode. Each decoded
// summary is checked: re-serialized with the custom writer it must give the very same bytes.
// Then hostile inputs, each decoded in a child process of its own: an 8 KB zstd bomb that inflates
// to 256 MiB of a valid protobuf repeated-bytes field (the string table), read through a bounded
// inflate, through protobuf's own total-bytes limit and with no limit at all; and 16 MiB bodies
// (inside every size cap) built to allocate as much as each format lets them. For those: the
// outcome, the C++ heap peak (operator new) and the peak RSS growth (VmHWM, zstd's window too).
// Last, the lines of code each format needs.
//
//   build/summary_format_bench [--reps 101] [--no-hostile] [TRACE...]
//   (default traces: every *.json.gz under ../shared/traces/kineto)
#include <fmt/format.h>
#include <google/protobuf/arena.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/limits.h"
#include "base/status.h"
#include "pattern/pattern.h"
#include "pattern/summarizer.h"
#include "pattern/summary_io.h"
#include "summary_format.pb.h"

// The C++ heap, counted while g_counting is set: live bytes (as malloc sizes them) and their peak.
namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};

void* Counted(void* p) {
  if (p != nullptr && g_counting.load(std::memory_order_relaxed)) {
    const int64_t now =
        g_live.fetch_add(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed) +
        static_cast<int64_t>(malloc_usable_size(p));
    int64_t peak = g_peak.load(std::memory_order_relaxed);
    while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }
  return p;
}
void Uncounted(void* p) {
  if (p != nullptr && g_counting.load(std::memory_order_relaxed)) {
    g_live.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  }
  std::free(p);
}
}  // namespace

void* operator new(size_t n) {
  void* p = Counted(std::malloc(n == 0 ? 1 : n));
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { Uncounted(p); }
void operator delete[](void* p) noexcept { Uncounted(p); }
void operator delete(void* p, size_t) noexcept { Uncounted(p); }
void operator delete[](void* p, size_t) noexcept { Uncounted(p); }

namespace {

namespace fs = std::filesystem;
namespace pt = perftracker;
namespace pb = perftracker::bench;
using Clock = std::chrono::steady_clock;
using pt::DataLoss;
using pt::InvalidArgument;
using pt::StatusOr;
using pt::pattern::FunctionClass;
using pt::pattern::FunctionPattern;
using pt::pattern::RankSummary;

// BEGIN PROTOBUF GLUE: everything the protobuf format needs beyond the generated code to do what
// summary_io.cc does: the same header ("PTSUMMRY", version 4, payload size), zstd, a bounded
// inflate, and the reader's checks (string indices, enum ranges, ranks, non-finite numbers, the
// memory budget of the decoded summary). Counted as the protobuf format's lines of code.
constexpr char kPbMagic[8] = {'P', 'T', 'S', 'U', 'M', 'M', 'R', 'Y'};
constexpr uint32_t kPbVersion = 4;
constexpr size_t kPbHeader = 12;

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

class Interner {
 public:
  explicit Interner(pb::RankSummaryPb* m) : m_(m) { Id(""); }  // index 0: the empty string
  uint32_t Id(const std::string& s) {
    auto [it, inserted] = index_.try_emplace(s, static_cast<uint32_t>(m_->strings_size()));
    if (inserted) m_->add_strings(s);
    return it->second;
  }

 private:
  pb::RankSummaryPb* m_;
  std::unordered_map<std::string, uint32_t> index_;
};

void ToPb(const RankSummary& s, pb::RankSummaryPb* m) {
  Interner t(m);
  m->set_rank(s.rank);
  m->set_world_size(s.world_size);
  m->set_host(t.Id(s.host));
  m->set_source(t.Id(s.source));
  m->set_legacy_format(s.legacy_format);
  m->set_has_gpu(s.has_gpu);
  for (const auto& g : s.process_groups) {
    pb::ProcessGroupPb* p = m->add_process_groups();
    p->set_name(t.Id(g.name));
    p->set_desc(t.Id(g.desc));
    p->set_backend(t.Id(g.backend));
    p->set_size(g.size);
    p->mutable_ranks()->Add(g.ranks.begin(), g.ranks.end());
  }
  for (const auto& d : s.devices) {
    pb::DevicePb* p = m->add_devices();
    p->set_id(d.id);
    p->set_name(t.Id(d.name));
    p->set_num_sms(d.num_sms);
    p->set_compute_major(d.compute_major);
    p->set_compute_minor(d.compute_minor);
  }
  m->set_iteration_source(t.Id(s.iteration_source));
  m->set_whole_window(s.whole_window);
  m->mutable_iteration_ms()->Add(s.iteration_ms.begin(), s.iteration_ms.end());
  m->mutable_iteration_steps()->Add(s.iteration_steps.begin(), s.iteration_steps.end());
  m->set_window_ms(s.window_ms);
  m->set_events_outside_iterations(s.events_outside_iterations);
  m->set_main_tid(s.main_tid);
  m->set_gpu_busy_us(s.gpu_busy_us);
  m->set_gpu_idle_us(s.gpu_idle_us);
  m->set_compute_us(s.compute_us);
  m->set_comm_us(s.comm_us);
  m->set_memcpy_us(s.memcpy_us);
  m->set_comm_compute_overlap_us(s.comm_compute_overlap_us);
  m->set_cpu_critical_us(s.cpu_critical_us);
  m->mutable_functions()->Reserve(static_cast<int>(s.functions.size()));
  for (const FunctionPattern& f : s.functions) {
    pb::FunctionPb* p = m->add_functions();
    p->set_name(t.Id(f.name));
    p->set_kind(static_cast<uint32_t>(f.kind));
    p->set_fclass(static_cast<uint32_t>(f.fclass));
    p->set_stack(t.Id(f.stack));
    p->set_device(f.device);
    p->set_stream(f.stream);
    p->set_flags((f.main_thread ? 1u : 0u) | (f.top_level ? 2u : 0u));
    p->set_count(f.count);
    p->set_total_us(f.total_us);
    p->set_mean_us(f.mean_us);
    p->set_p50_us(f.p50_us);
    p->set_p99_us(f.p99_us);
    p->set_max_us(f.max_us);
    p->set_min_us(f.min_us);
    p->set_cv(f.cv);
    p->set_calls_per_iter(f.calls_per_iter);
    p->set_per_iter_us(f.per_iter_us);
    p->set_share(f.share);
    p->set_self_per_iter_us(f.self_per_iter_us);
    p->mutable_iter_us()->Add(f.iter_us.begin(), f.iter_us.end());
    if (f.fclass == FunctionClass::kCollective || !f.coll.op.empty()) {
      pb::CollectivePb* c = p->mutable_coll();
      c->set_op(t.Id(f.coll.op));
      c->set_msg_bytes(f.coll.msg_bytes);
      c->set_dtype(t.Id(f.coll.dtype));
      c->set_group_size(f.coll.group_size);
      c->set_group(t.Id(f.coll.group));
      c->set_algbw_gbps(f.coll.algbw_gbps);
      c->set_busbw_gbps(f.coll.busbw_gbps);
    }
  }
  const pt::trace::ReadStats& r = s.read_stats;
  pb::ReadStatsPb* rs = m->mutable_read_stats();
  rs->set_bytes(r.bytes);
  rs->set_events(r.events);
  rs->set_flow_events(r.flow_events);
  rs->set_metadata_events(r.metadata_events);
  rs->set_unknown_kind(r.unknown_kind);
  rs->set_malformed_events(r.malformed_events);
  for (const auto& [cat, n] : r.unknown_cats) {
    pb::UnknownCatPb* u = rs->add_unknown_cats();
    u->set_cat(t.Id(cat));
    u->set_count(n);
  }
  rs->set_first_bad_byte(r.first_bad_byte);
  rs->set_first_bad(t.Id(r.first_bad));
  m->set_network_switch(t.Id(s.network_switch));
  m->set_missing_part(t.Id(s.missing_part));
  m->set_missing_why(t.Id(s.missing_why));
  for (const auto& e : s.excluded_iterations) {
    pb::ExcludedIterationPb* p = m->add_excluded_iterations();
    p->set_reason(e.reason);
    p->set_step(e.step);
    p->set_index(e.index);
    p->set_ms(e.ms);
  }
  m->set_pre_profiler_gpu_ops(s.pre_profiler_gpu_ops);
  m->set_pre_profiler_gpu_us(s.pre_profiler_gpu_us);
  m->set_backend(t.Id(s.backend));
  m->set_nccl_version(t.Id(s.nccl_version));
}

// Header, the payload's size, then the payload as one zstd frame with its checksum.
std::string PbFile(const std::string& payload) {
  std::string out(kPbMagic, sizeof(kPbMagic));
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((kPbVersion >> (8 * i)) & 0xff));
  PutVarint(payload.size(), &out);
  const size_t head = out.size();
  out.resize(head + ZSTD_compressBound(payload.size()));
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, ZSTD_CLEVEL_DEFAULT);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  const size_t n =
      ZSTD_compress2(cctx, out.data() + head, out.size() - head, payload.data(), payload.size());
  ZSTD_freeCCtx(cctx);
  out.resize(ZSTD_isError(n) ? head : head + n);
  return out;
}

std::string EncodePb(const RankSummary& s) {
  google::protobuf::Arena arena;
  pb::RankSummaryPb* m = google::protobuf::Arena::CreateMessage<pb::RankSummaryPb>(&arena);
  ToPb(s, m);
  return PbFile(m->SerializeAsString());
}

// Inflates SRC into OUT, which must come out exactly SIZE bytes (SIZE <= the payload cap); the
// buffer grows with what the frame yields, never past SIZE + 1.
bool BoundedInflate(std::string_view src, uint64_t size, std::string* out) {
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> d(ZSTD_createDCtx(), ZSTD_freeDCtx);
  ZSTD_DCtx_setParameter(d.get(), ZSTD_d_windowLogMax, 24);
  ZSTD_inBuffer in{src.data(), src.size(), 0};
  size_t produced = 0;
  for (;;) {
    if (produced == out->size()) {
      if (produced > size) return false;
      out->resize(std::min<size_t>(size + 1, std::max<size_t>(64 << 10, out->size() * 2)));
    }
    ZSTD_outBuffer o{out->data(), out->size(), produced};
    const size_t rc = ZSTD_decompressStream(d.get(), &o, &in);
    produced = o.pos;
    if (ZSTD_isError(rc)) return false;
    if (rc == 0) break;
    if (in.pos == in.size && o.pos < o.size) return false;
  }
  out->resize(produced);
  return produced == size;
}

// The reader's checks on a parsed message, while it becomes a RankSummary.
class FromPb {
 public:
  explicit FromPb(const pb::RankSummaryPb& m) : m_(m) {}
  bool failed() const { return failed_; }
  bool over_budget() const { return over_budget_; }
  void Corrupt() { failed_ = true; }
  void Charge(size_t bytes) {
    held_ += bytes;
    if (held_ > pt::limits::kMaxSummaryMemory) over_budget_ = failed_ = true;
  }
  std::string Str(uint32_t i) {
    if (i >= static_cast<uint32_t>(m_.strings_size())) {
      if (i != 0) Corrupt();  // 0 in an empty table: the empty string
      return {};
    }
    const std::string& s = m_.strings(static_cast<int>(i));
    if (s.size() > 15) Charge(s.size());
    return failed_ ? std::string() : s;
  }
  static double D(double v) { return std::isfinite(v) ? v : 0.0; }
  static float F(float v) { return std::isfinite(v) ? v : 0.0f; }

 private:
  const pb::RankSummaryPb& m_;
  bool failed_ = false;
  bool over_budget_ = false;
  size_t held_ = 0;
};

StatusOr<RankSummary> DecodePb(std::string_view bytes, const std::string& name) {
  if (bytes.size() < kPbHeader || std::memcmp(bytes.data(), kPbMagic, sizeof(kPbMagic)) != 0) {
    return InvalidArgument(name + ": not a perftracker summary");
  }
  uint32_t version = 0;
  for (int i = 0; i < 4; ++i) {
    version |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
  }
  if (version != kPbVersion) return InvalidArgument(name + ": not a protobuf summary");
  uint64_t size = 0;
  size_t pos = kPbHeader;
  for (int shift = 0;; shift += 7) {
    if (pos == bytes.size() || shift > 63) return DataLoss(name + ": truncated summary");
    const auto b = static_cast<uint8_t>(bytes[pos++]);
    size |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
  }
  if (size > pt::limits::kMaxSummaryPayload) {
    return DataLoss(
        fmt::format("{}: corrupt summary: its body would inflate to {} bytes", name, size));
  }
  std::string raw;
  if (!BoundedInflate(bytes.substr(pos), size, &raw)) {
    return DataLoss(name + ": corrupt summary: the compressed payload does not inflate");
  }
  google::protobuf::Arena arena;  // one block list for the parsed message, freed at once
  pb::RankSummaryPb& m = *google::protobuf::Arena::CreateMessage<pb::RankSummaryPb>(&arena);
  if (!m.ParseFromArray(raw.data(), static_cast<int>(raw.size()))) {
    return DataLoss(name + ": corrupt summary: not a valid message");
  }
  FromPb r(m);
  RankSummary s;
  s.rank = m.rank();
  s.world_size = m.world_size();
  if ((s.rank != -1 && !pt::limits::ValidRank(s.rank)) ||
      (s.world_size != -1 && s.world_size != 0 && !pt::limits::ValidWorldSize(s.world_size))) {
    return DataLoss(
        fmt::format("{}: corrupt summary: rank {} of world size {}", name, s.rank, s.world_size));
  }
  r.Charge(m.process_groups_size() * sizeof(pt::trace::ProcessGroup) +
           m.devices_size() * sizeof(pt::trace::DeviceInfo) +
           m.functions_size() * sizeof(FunctionPattern) +
           m.excluded_iterations_size() * sizeof(pt::pattern::ExcludedIteration) +
           m.iteration_ms_size() * sizeof(double) + m.iteration_steps_size() * sizeof(int64_t));
  if (r.failed()) {
    return DataLoss(fmt::format("{}: corrupt summary: its body expands past the {} MiB", name,
                                pt::limits::kMaxSummaryMemory >> 20));
  }
  s.host = r.Str(m.host());
  s.source = r.Str(m.source());
  s.legacy_format = m.legacy_format();
  s.has_gpu = m.has_gpu();
  for (const auto& p : m.process_groups()) {
    auto& g = s.process_groups.emplace_back();
    g.name = r.Str(p.name());
    g.desc = r.Str(p.desc());
    g.backend = r.Str(p.backend());
    g.size = p.size();
    r.Charge(p.ranks_size() * sizeof(int));
    if (!r.failed()) g.ranks.assign(p.ranks().begin(), p.ranks().end());
  }
  for (const auto& p : m.devices()) {
    auto& d = s.devices.emplace_back();
    d.id = p.id();
    d.name = r.Str(p.name());
    d.num_sms = p.num_sms();
    d.compute_major = p.compute_major();
    d.compute_minor = p.compute_minor();
  }
  s.iteration_source = r.Str(m.iteration_source());
  s.whole_window = m.whole_window();
  for (double v : m.iteration_ms()) s.iteration_ms.push_back(FromPb::D(v));
  s.iteration_steps.assign(m.iteration_steps().begin(), m.iteration_steps().end());
  s.window_ms = FromPb::D(m.window_ms());
  s.events_outside_iterations = m.events_outside_iterations();
  s.main_tid = m.main_tid();
  s.gpu_busy_us = FromPb::D(m.gpu_busy_us());
  s.gpu_idle_us = FromPb::D(m.gpu_idle_us());
  s.compute_us = FromPb::D(m.compute_us());
  s.comm_us = FromPb::D(m.comm_us());
  s.memcpy_us = FromPb::D(m.memcpy_us());
  s.comm_compute_overlap_us = FromPb::D(m.comm_compute_overlap_us());
  s.cpu_critical_us = FromPb::D(m.cpu_critical_us());
  s.functions.resize(m.functions_size());
  for (int i = 0; i < m.functions_size() && !r.failed(); ++i) {
    const pb::FunctionPb& p = m.functions(i);
    FunctionPattern& f = s.functions[i];
    f.name = r.Str(p.name());
    if (p.kind() > static_cast<uint32_t>(pt::trace::EventKind::kOther)) r.Corrupt();
    f.kind = static_cast<pt::trace::EventKind>(p.kind());
    if (p.fclass() > static_cast<uint32_t>(FunctionClass::kOther)) r.Corrupt();
    f.fclass = static_cast<FunctionClass>(p.fclass());
    f.stack = r.Str(p.stack());
    f.device = p.device();
    f.stream = p.stream();
    if (p.flags() > 3) r.Corrupt();
    f.main_thread = p.flags() & 1;
    f.top_level = p.flags() & 2;
    f.count = p.count();
    f.total_us = FromPb::D(p.total_us());
    f.mean_us = FromPb::D(p.mean_us());
    f.p50_us = FromPb::D(p.p50_us());
    f.p99_us = FromPb::D(p.p99_us());
    f.max_us = FromPb::D(p.max_us());
    f.min_us = FromPb::D(p.min_us());
    f.cv = FromPb::D(p.cv());
    f.calls_per_iter = FromPb::D(p.calls_per_iter());
    f.per_iter_us = FromPb::D(p.per_iter_us());
    f.share = FromPb::D(p.share());
    f.self_per_iter_us = FromPb::D(p.self_per_iter_us());
    r.Charge(p.iter_us_size() * sizeof(float));
    if (r.failed()) break;
    f.iter_us.reserve(p.iter_us_size());
    for (float v : p.iter_us()) f.iter_us.push_back(FromPb::F(v));
    if (p.has_coll()) {
      const pb::CollectivePb& c = p.coll();
      f.coll.op = r.Str(c.op());
      f.coll.msg_bytes = FromPb::D(c.msg_bytes());
      f.coll.dtype = r.Str(c.dtype());
      f.coll.group_size = c.group_size();
      f.coll.group = r.Str(c.group());
      f.coll.algbw_gbps = FromPb::D(c.algbw_gbps());
      f.coll.busbw_gbps = FromPb::D(c.busbw_gbps());
    }
  }
  const pb::ReadStatsPb& rs = m.read_stats();
  pt::trace::ReadStats& st = s.read_stats;
  st.bytes = rs.bytes();
  st.events = rs.events();
  st.flow_events = rs.flow_events();
  st.metadata_events = rs.metadata_events();
  st.unknown_kind = rs.unknown_kind();
  st.malformed_events = rs.malformed_events();
  r.Charge(rs.unknown_cats_size() * sizeof(std::pair<std::string, uint64_t>));
  for (int i = 0; i < rs.unknown_cats_size() && !r.failed(); ++i) {
    st.unknown_cats[r.Str(rs.unknown_cats(i).cat())] = rs.unknown_cats(i).count();
  }
  st.first_bad_byte = rs.first_bad_byte();
  st.first_bad = r.Str(rs.first_bad());
  s.network_switch = r.Str(m.network_switch());
  s.missing_part = r.Str(m.missing_part());
  s.missing_why = r.Str(m.missing_why());
  for (const auto& p : m.excluded_iterations()) {
    auto& e = s.excluded_iterations.emplace_back();
    e.reason = p.reason() == pt::pattern::ExcludedIteration::kWarmup
                   ? pt::pattern::ExcludedIteration::kWarmup
                   : pt::pattern::ExcludedIteration::kPartial;
    e.step = p.step();
    e.index = p.index();
    e.ms = FromPb::D(p.ms());
  }
  s.pre_profiler_gpu_ops = m.pre_profiler_gpu_ops();
  s.pre_profiler_gpu_us = FromPb::D(m.pre_profiler_gpu_us());
  s.backend = r.Str(m.backend());
  s.nccl_version = r.Str(m.nccl_version());
  if (r.over_budget()) {
    return DataLoss(fmt::format("{}: corrupt summary: its body expands past the {} MiB", name,
                                pt::limits::kMaxSummaryMemory >> 20));
  }
  if (r.failed()) return DataLoss(name + ": corrupt summary");
  return s;
}
// END PROTOBUF GLUE

// --- measurement ---

double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

volatile size_t g_sink = 0;

// Median microseconds of REPS calls of each of FN[0] and FN[1] (after one warm-up call each),
// interleaved in alternating order so that background load falls on both alike.
void MedianUs(int reps, const std::function<size_t()> (&fn)[2], double (&us)[2]) {
  std::vector<double> t[2];
  for (int k = 0; k < 2; ++k) {
    g_sink = g_sink + fn[k]();
    t[k].resize(static_cast<size_t>(reps));
  }
  for (int i = 0; i < reps; ++i) {
    for (int j = 0; j < 2; ++j) {
      const int k = (i + j) % 2;
      const auto a = Clock::now();
      g_sink = g_sink + fn[k]();
      t[k][static_cast<size_t>(i)] = Us(a, Clock::now());
    }
  }
  for (int k = 0; k < 2; ++k) {
    std::nth_element(t[k].begin(), t[k].begin() + reps / 2, t[k].end());
    us[k] = t[k][static_cast<size_t>(reps / 2)];
  }
}

// Heap bytes FN holds at its peak beyond what was live when it started.
int64_t HeapPeak(const std::function<void()>& fn) {
  g_live = 0;
  g_peak = 0;
  g_counting = true;
  fn();
  g_counting = false;
  return g_peak.load();
}

std::string Compress(std::string_view raw) {
  std::string z(ZSTD_compressBound(raw.size()), '\0');
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, ZSTD_CLEVEL_DEFAULT);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  const size_t n = ZSTD_compress2(cctx, z.data(), z.size(), raw.data(), raw.size());
  ZSTD_freeCCtx(cctx);
  z.resize(n);
  return z;
}

// The payload size a v3 (custom) or v4 (protobuf) file declares, and where its frame starts.
std::pair<uint64_t, size_t> Declared(std::string_view file) {
  uint64_t v = 0;
  size_t pos = kPbHeader;
  for (int shift = 0; pos < file.size(); shift += 7) {
    const auto b = static_cast<uint8_t>(file[pos++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
  }
  return {v, pos};
}

std::string Header(uint32_t version, uint64_t declared) {
  std::string out(kPbMagic, sizeof(kPbMagic));
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((version >> (8 * i)) & 0xff));
  PutVarint(declared, &out);
  return out;
}

std::string Inflate(std::string_view file) {
  const auto [size, pos] = Declared(file);
  std::string raw(size, '\0');
  ZSTD_decompress(raw.data(), raw.size(), file.data() + pos, file.size() - pos);
  return raw;
}

struct Row {
  std::string trace;
  size_t functions = 0, strings = 0;
  size_t raw[2] = {}, file[2] = {};
  double enc[2] = {}, dec[2] = {}, zenc[2] = {}, zdec[2] = {};
  int64_t peak[2] = {};
  bool same[2] = {};
};

bool Measure(const std::string& path, int reps, Row* row) {
  auto summary = pt::pattern::SummarizeTrace(path);
  if (!summary.ok()) {
    std::fprintf(stderr, "summary_format_bench: %s: %s\n", path.c_str(),
                 summary.status().ToString().c_str());
    return false;
  }
  const RankSummary& s = *summary;
  row->trace = fs::path(path).filename().string();
  row->functions = s.functions.size();
  const std::string custom = pt::pattern::SerializeSummary(s);
  const std::string proto = EncodePb(s);
  const std::string files[2] = {custom, proto};
  const std::string raws[2] = {Inflate(custom), Inflate(proto)};
  for (int k = 0; k < 2; ++k) {
    row->raw[k] = raws[k].size();
    row->file[k] = files[k].size();
  }
  MedianUs(reps,
           {[&] { return Compress(raws[0]).size(); }, [&] { return Compress(raws[1]).size(); }},
           row->zenc);
  MedianUs(reps, {[&] { return Inflate(custom).size(); }, [&] { return Inflate(proto).size(); }},
           row->zdec);
  {
    pb::RankSummaryPb m;
    m.ParseFromString(Inflate(proto));
    row->strings = static_cast<size_t>(m.strings_size());
  }
  MedianUs(
      reps,
      {[&] { return pt::pattern::SerializeSummary(s).size(); }, [&] { return EncodePb(s).size(); }},
      row->enc);
  MedianUs(reps,
           {[&] { return pt::pattern::ParseSummary(custom, "c")->functions.size(); },
            [&] { return DecodePb(proto, "p")->functions.size(); }},
           row->dec);
  row->peak[0] = HeapPeak([&] { g_sink = pt::pattern::ParseSummary(custom, "c").ok(); });
  row->peak[1] = HeapPeak([&] { g_sink = DecodePb(proto, "p").ok(); });
  auto c = pt::pattern::ParseSummary(custom, "c");
  auto p = DecodePb(proto, "p");
  row->same[0] = c.ok() && pt::pattern::SerializeSummary(*c) == custom;
  row->same[1] = p.ok() && pt::pattern::SerializeSummary(*p) == custom;
  return true;
}

// --- hostile inputs ---

// A protobuf ZeroCopyInputStream that inflates a zstd frame as protobuf reads it: no buffer of
// the whole payload, so only protobuf's own total-bytes limit stops a bomb.
class ZstdInput : public google::protobuf::io::ZeroCopyInputStream {
 public:
  explicit ZstdInput(std::string_view frame)
      : d_(ZSTD_createDCtx()), in_{frame.data(), frame.size(), 0}, buf_(64 << 10) {
    ZSTD_DCtx_setParameter(d_, ZSTD_d_windowLogMax, 24);
  }
  ~ZstdInput() override { ZSTD_freeDCtx(d_); }
  bool Next(const void** data, int* size) override {
    if (backed_up_ > 0) {
      *data = buf_.data() + (filled_ - backed_up_);
      *size = backed_up_;
      backed_up_ = 0;
      return true;
    }
    if (done_) return false;
    ZSTD_outBuffer o{buf_.data(), buf_.size(), 0};
    while (o.pos < o.size) {
      const size_t rc = ZSTD_decompressStream(d_, &o, &in_);
      if (ZSTD_isError(rc)) return false;
      if (rc == 0) {
        done_ = true;
        break;
      }
      if (in_.pos == in_.size && o.pos < o.size) break;
    }
    if (o.pos == 0) return false;
    filled_ = static_cast<int>(o.pos);
    count_ += filled_;
    *data = buf_.data();
    *size = filled_;
    return true;
  }
  void BackUp(int n) override {
    backed_up_ = n;
    count_ -= n;
  }
  bool Skip(int n) override {
    const void* d;
    int got;
    while (n > 0) {
      if (!Next(&d, &got)) return false;
      if (got > n) BackUp(got - n);
      n -= std::min(n, got);
    }
    return true;
  }
  int64_t ByteCount() const override { return count_; }

 private:
  ZSTD_DCtx* d_;
  ZSTD_inBuffer in_;
  std::vector<char> buf_;
  int filled_ = 0, backed_up_ = 0;
  int64_t count_ = 0;
  bool done_ = false;
};

// A zstd frame of SIZE bytes repeating PATTERN, compressed a chunk at a time.
std::string Bomb(std::string_view pattern, size_t size) {
  std::string chunk;
  while (chunk.size() < (1 << 20)) chunk += pattern;
  chunk.resize((1 << 20) / pattern.size() * pattern.size());
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, ZSTD_CLEVEL_DEFAULT);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  ZSTD_CCtx_setPledgedSrcSize(cctx, size);
  std::string out, buf(ZSTD_CStreamOutSize(), '\0');
  size_t left = size;
  do {
    const size_t n = std::min(left, chunk.size());
    left -= n;
    ZSTD_inBuffer in{chunk.data(), n, 0};
    const ZSTD_EndDirective mode = left == 0 ? ZSTD_e_end : ZSTD_e_continue;
    size_t rc;
    do {
      ZSTD_outBuffer o{buf.data(), buf.size(), 0};
      rc = ZSTD_compressStream2(cctx, &o, &in, mode);
      out.append(buf.data(), o.pos);
    } while (mode == ZSTD_e_end ? rc != 0 : in.pos < in.size);
  } while (left > 0);
  ZSTD_freeCCtx(cctx);
  return out;
}

int64_t ProcKb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(in, line)) {
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':') {
      return std::atoll(line.c_str() + n + 1);
    }
  }
  return -1;
}

struct Outcome {
  char text[160] = {};
  double ms = 0;
  int64_t heap = 0;    // C++ heap peak, bytes
  int64_t rss_kb = 0;  // peak RSS growth
};

// Runs FN (which says what happened) in a child process and returns its peaks.
Outcome InChild(const std::function<std::string()>& fn) {
  int fds[2];
  Outcome out;
  std::fflush(stdout);
  if (pipe(fds) != 0) return out;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::ofstream("/proc/self/clear_refs") << "5";  // resets VmHWM to the current RSS
    const int64_t base = ProcKb("VmRSS");
    Outcome o;
    const auto a = Clock::now();
    std::string text;
    o.heap = HeapPeak([&] { text = fn(); });
    o.ms = Us(a, Clock::now()) / 1000;
    o.rss_kb = ProcKb("VmHWM") - base;
    std::snprintf(o.text, sizeof o.text, "%s", text.c_str());
    if (write(fds[1], &o, sizeof o) != sizeof o) _exit(2);
    _exit(0);
  }
  close(fds[1]);
  if (read(fds[0], &out, sizeof out) != sizeof out) std::snprintf(out.text, 20, "child died");
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return out;
}

std::string Result(const StatusOr<RankSummary>& r) {
  if (!r.ok()) return "refused: " + r.status().message().substr(r.status().message().find(':') + 2);
  return fmt::format("ACCEPTED ({} functions)", r->functions.size());
}

// Protobuf reading straight from the zstd stream, LIMIT bytes at most (protobuf's own cap).
std::string PbStreamed(std::string_view frame, int limit) {
  ZstdInput zin(frame);
  google::protobuf::io::CodedInputStream cis(&zin);
  cis.SetTotalBytesLimit(limit);
  pb::RankSummaryPb m;
  const bool ok = m.ParseFromCodedStream(&cis) && cis.ConsumedEntireMessage();
  return fmt::format("{} after {} MiB inflated ({} strings, {} functions held)",
                     ok ? "ACCEPTED" : "refused", zin.ByteCount() >> 20, m.strings_size(),
                     m.functions_size());
}

void Hostile() {
  constexpr size_t kCap = pt::limits::kMaxSummaryPayload;
  // 0x0A is field 1 (the string table), wire type 2; then length 10 and ten 0x0A bytes: every
  // 12 bytes one valid table entry.
  constexpr size_t kBombSize = (size_t{256} << 20) / 12 * 12;
  const std::string bomb = Bomb("\n", kBombSize);
  // Inside the payload cap: empty table entries (0A 00) and empty functions (field 24: C2 01 00).
  const std::string empty_strings = Bomb(std::string_view("\n\0", 2), kCap / 2 * 2);
  const std::string empty_functions = Bomb(std::string_view("\xc2\x01\0", 3), kCap / 3 * 3);
  // The custom format's counterparts: a table of empty strings filling the cap, and a valid
  // summary with as many (default) functions as the cap holds.
  std::string table;
  PutVarint(kCap - 4, &table);
  table.resize(kCap, '\0');
  const std::string custom_table = Header(3, kCap) + Compress(table);
  RankSummary many;
  {
    RankSummary one;
    one.functions.resize(1);
    RankSummary none;
    const size_t base = Declared(pt::pattern::SerializeSummary(none)).first;
    const size_t per = Declared(pt::pattern::SerializeSummary(one)).first - base;
    many.functions.resize((kCap - base - 8) / per);  // 8: room for the count's longer varint
  }
  const std::string custom_many = pt::pattern::SerializeSummary(many);

  std::printf(
      "\nhostile inputs (each decoded in a child; heap = C++ heap peak, RSS = VmHWM "
      "growth):\n");
  std::printf("  bomb: %zu B zstd -> %zu B (256 MiB - 4), %zu valid string-table entries\n",
              bomb.size(), kBombSize, kBombSize / 12);
  struct Case {
    std::string name;
    std::function<std::string()> run;
  };
  const std::vector<Case> cases = {
      {"custom, bomb, header declares 256 MiB",
       [&] { return Result(pt::pattern::ParseSummary(Header(3, kBombSize) + bomb, "x")); }},
      {"custom, bomb, header lies (16 MiB)",
       [&] { return Result(pt::pattern::ParseSummary(Header(3, kCap) + bomb, "x")); }},
      {"protobuf+glue, bomb, header declares 256 MiB",
       [&] { return Result(DecodePb(Header(4, kBombSize) + bomb, "x")); }},
      {"protobuf+glue, bomb, header lies (16 MiB)",
       [&] { return Result(DecodePb(Header(4, kCap) + bomb, "x")); }},
      {"protobuf streamed, SetTotalBytesLimit(16 MiB)",
       [&] { return PbStreamed(bomb, static_cast<int>(kCap)); }},
      {"protobuf streamed, default limit (INT_MAX)",
       [&] { return PbStreamed(bomb, std::numeric_limits<int>::max()); }},
      {fmt::format("custom, 16 MiB table of empty strings ({} B zstd)", custom_table.size()),
       [&] { return Result(pt::pattern::ParseSummary(custom_table, "x")); }},
      {fmt::format("custom, 16 MiB of default functions ({} B zstd)", custom_many.size()),
       [&] { return Result(pt::pattern::ParseSummary(custom_many, "x")); }},
      {fmt::format("protobuf+glue, 16 MiB of empty strings ({} B zstd)", empty_strings.size()),
       [&] { return Result(DecodePb(Header(4, kCap / 2 * 2) + empty_strings, "x")); }},
      {fmt::format("protobuf+glue, 16 MiB of empty functions ({} B zstd)", empty_functions.size()),
       [&] { return Result(DecodePb(Header(4, kCap / 3 * 3) + empty_functions, "x")); }},
  };
  for (const Case& c : cases) {
    const Outcome o = InChild(c.run);
    std::printf("  %-58s heap %7.1f MiB  RSS %7.1f MiB  %8.1f ms  %s\n", c.name.c_str(),
                static_cast<double>(o.heap) / (1 << 20), static_cast<double>(o.rss_kb) / 1024, o.ms,
                o.text);
  }
}

// --- lines of code ---

struct Loc {
  int lines = 0, code = 0;  // code: not blank, not only a comment
};

Loc CountLines(const std::string& path, std::string_view from = {}, std::string_view to = {}) {
  std::ifstream in(path);
  std::string line;
  Loc loc;
  bool on = from.empty();
  while (std::getline(in, line)) {
    if (!on && line.find(from) != std::string::npos) on = true;
    if (!to.empty() && line.find(to) != std::string::npos) break;
    if (!on) continue;
    ++loc.lines;
    const size_t i = line.find_first_not_of(" \t");
    if (i != std::string::npos && line.compare(i, 2, "//") != 0) ++loc.code;
  }
  return loc;
}

void LinesOfCode() {
  const std::string io = PT_SOURCE_DIR "/src/pattern/summary_io.cc";
  const std::string bench = PT_SOURCE_DIR "/bench/summary_format_bench.cc";
  const Loc codec = CountLines(io, {}, "Status WriteSummaryFile");
  const Loc header = CountLines(PT_SOURCE_DIR "/src/pattern/summary_io.h");
  const Loc proto = CountLines(PT_SOURCE_DIR "/bench/summary_format.proto");
  const Loc glue = CountLines(bench, "// BEGIN PROTOBUF GLUE", "// END PROTOBUF GLUE");
  const Loc gen_h = CountLines(PT_GEN_BENCH "/summary_format.pb.h");
  const Loc gen_cc = CountLines(PT_GEN_BENCH "/summary_format.pb.cc");
  std::printf("\nlines of code (all lines / code lines, i.e. neither blank nor only a comment):\n");
  std::printf(
      "  custom:   summary_io.cc encode+decode %d / %d (incl. the v1/v2 readers), "
      "summary_io.h %d / %d\n",
      codec.lines, codec.code, header.lines, header.code);
  std::printf(
      "  protobuf: summary_format.proto %d / %d, glue %d / %d; generated (not "
      "maintained) .pb.h %d + .pb.cc %d\n",
      proto.lines, proto.code, glue.lines, glue.code, gen_h.lines, gen_cc.lines);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 101;
  bool hostile = true;
  std::vector<std::string> traces;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--no-hostile") {
      hostile = false;
    } else if (a.starts_with("--")) {
      std::fprintf(stderr, "usage: summary_format_bench [--reps N] [--no-hostile] [TRACE...]\n");
      return 2;
    } else {
      traces.push_back(a);
    }
  }
  if (traces.empty()) {
    const fs::path dir = PT_SOURCE_DIR "/../shared/traces/kineto";
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
      if (e.is_regular_file() && e.path().string().ends_with(".json.gz")) {
        traces.push_back(e.path().string());
      }
    }
    std::sort(traces.begin(), traces.end());
    if (traces.empty()) {
      std::fprintf(stderr, "summary_format_bench: no traces under %s\n", dir.c_str());
      return 1;
    }
  }
  std::printf(
      "summary formats, custom (C, summary_io.cc v3) vs protobuf (P, same tables, v4); "
      "zstd level %d; median of %d; MB/s of the raw payload\n",
      ZSTD_CLEVEL_DEFAULT, reps);
  std::printf("%-34s %5s %5s | %-7s %7s %6s | %14s %14s | %7s %7s | %8s %2s\n", "trace", "funcs",
              "strs", "format", "raw B", "zstd B", "encode us MB/s", "decode us MB/s", "zst enc",
              "zst dec", "dec heap", "ok");
  bool all_same = true;
  for (const std::string& path : traces) {
    Row r;
    if (!Measure(path, reps, &r)) return 1;
    for (int k = 0; k < 2; ++k) {
      std::printf(
          "%-34s %5s %5s | %-7s %7zu %6zu | %7.1f %6.1f %7.1f %6.1f | %7.1f %7.1f | "
          "%6.0fKB %2s\n",
          k == 0 ? r.trace.c_str() : "", k == 0 ? std::to_string(r.functions).c_str() : "",
          k == 0 ? std::to_string(r.strings).c_str() : "", k == 0 ? "C" : "P", r.raw[k], r.file[k],
          r.enc[k], static_cast<double>(r.raw[k]) / r.enc[k], r.dec[k],
          static_cast<double>(r.raw[k]) / r.dec[k], r.zenc[k], r.zdec[k],
          static_cast<double>(r.peak[k]) / 1024, r.same[k] ? "ok" : "NO");
      all_same = all_same && r.same[k];
    }
  }
  if (hostile) Hostile();
  LinesOfCode();
  if (!all_same) {
    std::printf("\nFAILED: a decoded summary did not re-serialize to the original bytes\n");
    return 1;
  }
  return 0;
}
