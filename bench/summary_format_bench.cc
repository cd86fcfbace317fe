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
#include "summary_format_pb.h"

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
using pb::DecodePb;
using pb::EncodePb;
using pb::kPbHeader;
using pb::kPbMagic;
using pb::PutVarint;
using Clock = std::chrono::steady_clock;
using pt::DataLoss;
using pt::InvalidArgument;
using pt::StatusOr;
using pt::pattern::FunctionClass;
using pt::pattern::FunctionPattern;
using pt::pattern::RankSummary;


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
  Loc operator+(const Loc& o) const { return {lines + o.lines, code + o.code}; }
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
  const Loc codec = CountLines(io, {}, "Status WriteSummaryFile");
  const Loc header = CountLines(PT_SOURCE_DIR "/src/pattern/summary_io.h");
  const Loc proto = CountLines(PT_SOURCE_DIR "/bench/summary_format.proto");
  const Loc glue = CountLines(PT_SOURCE_DIR "/bench/summary_format_pb.cc") +
                   CountLines(PT_SOURCE_DIR "/bench/summary_format_pb.h");
  const Loc gen_h = CountLines(PT_GEN_BENCH "/summary_format.pb.h");
  const Loc gen_cc = CountLines(PT_GEN_BENCH "/summary_format.pb.cc");
  std::printf("\nlines of code (all lines / code lines, i.e. neither blank nor only a comment):\n");
  std::printf(
      "  custom:   summary_io.cc encode+decode %d / %d (incl. the v1/v2 readers), "
      "summary_io.h %d / %d\n",
      codec.lines, codec.code, header.lines, header.code);
  std::printf(
      "  protobuf: summary_format.proto %d / %d, glue (summary_format_pb.h/.cc) %d / %d; generated "
      "(not "
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
