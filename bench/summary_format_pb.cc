// The protobuf form of a rank summary (summary_format_pb.h): everything the protobuf format needs
// beyond the generated code to do what src/pattern/summary_io.cc does: the same header
// ("PTSUMMRY", version 4, payload size), zstd, a bounded inflate, and the reader's checks (string
// indices, enum ranges, ranks, non-finite numbers, the memory budget of the decoded summary).
// bench/summary_format_bench.cc counts it as the protobuf format's lines of code.
#include "summary_format_pb.h"

#include <fmt/format.h>
#include <google/protobuf/arena.h>
#include <zstd.h>

#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>

#include "base/limits.h"

namespace perftracker::bench {

namespace pt = perftracker;
namespace pb = perftracker::bench;
using pt::DataLoss;
using pt::InvalidArgument;
using pt::StatusOr;
using pt::pattern::FunctionClass;
using pt::pattern::FunctionPattern;
using pt::pattern::RankSummary;

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

namespace {

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
    if (!f.input_dims.empty()) p->set_input_dims(t.Id(f.input_dims));
    p->set_input_elements(f.input_elements);
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

}  // namespace

std::string EncodePb(const RankSummary& s) {
  google::protobuf::Arena arena;
  pb::RankSummaryPb* m = google::protobuf::Arena::CreateMessage<pb::RankSummaryPb>(&arena);
  ToPb(s, m);
  return PbFile(m->SerializeAsString());
}

namespace {

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

// One function's pattern from P into F, through R's checks.
void FunctionFromPb(const pb::FunctionPb& p, FromPb& r, FunctionPattern& f) {
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
  f.input_dims = r.Str(p.input_dims());
  f.input_elements = FromPb::D(p.input_elements());
  r.Charge(p.iter_us_size() * sizeof(float));
  if (r.failed()) return;
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

}  // namespace

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
    FunctionFromPb(m.functions(i), r, s.functions[i]);
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

}  // namespace perftracker::bench
