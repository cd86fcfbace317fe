#include "worker/collective_ring.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/private_file.h"

namespace perftracker::worker::collective_ring {
namespace {

// Field widths: longer values are cut (a path keeps its end, where the file name is).
constexpr size_t kGroupChars = 24, kDescChars = 40, kOpChars = 32, kBackendChars = 16,
                 kDtypeChars = 16, kFileChars = 192, kFunctionChars = 64, kMaxDims = 8;
// The dump: each entry is at most ~1.5 KiB escaped (file and function names escaped as \u00XX
// at worst are cut to fit); 64 of them and the frame of the dump fit in 128 KiB.
constexpr size_t kDumpBytes = 128 << 10;
constexpr size_t kCrashPathChars = 1024;
constexpr std::array<int, 5> kFatalSignals = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};

enum SlotState : uint32_t { kEmpty = 0, kBusy = 1, kReady = 2 };
enum CallState : uint8_t { kScheduled = 0, kStarted = 1, kCompleted = 2 };

struct Slot {
  std::atomic<uint32_t> state{kEmpty};
  std::atomic<uint8_t> call{kScheduled};
  std::atomic<uint64_t> ticket{0};
  int64_t seq = -1, created_ns = 0;
  int64_t sizes[kMaxDims] = {};
  uint8_t dims = 0;
  bool has_tensor = false, p2p = false;
  int line = 0;
  char group[kGroupChars], desc[kDescChars], op[kOpChars], backend[kBackendChars],
      dtype[kDtypeChars], file[kFileChars], function[kFunctionChars];
};

Slot g_ring[kRingSize];
std::atomic<uint64_t> g_next{0};
char g_crash_path[kCrashPathChars];
pid_t g_crash_pid = 0;
char g_crash_buf[kDumpBytes];
std::atomic<bool> g_dumping{false};
struct sigaction g_old[kFatalSignals.size()];
bool g_installed = false;

// S cut to fit DST, at a UTF-8 character's boundary: a character cut in two makes the dump's
// JSON unreadable (a reader refuses invalid UTF-8), and the whole ring with it.
//   Copy("ab\xc3\xa9", char[4]) -> "ab";  with KEEP_END, Copy("\xc3\xa9xy", char[4]) -> "xy"
template <size_t N>
void Copy(std::string_view s, char (&dst)[N], bool keep_end = false) {
  auto continuation = [](char c) { return (static_cast<unsigned char>(c) & 0xc0) == 0x80; };
  if (s.size() >= N) {
    if (keep_end) {
      s = s.substr(s.size() - (N - 1));
      while (!s.empty() && continuation(s.front())) s.remove_prefix(1);
    } else {
      size_t cut = N - 1;  // s[cut] is the first byte left out
      while (cut > 0 && continuation(s[cut])) --cut;
      s = s.substr(0, cut);
    }
  }
  std::memcpy(dst, s.data(), s.size());
  dst[s.size()] = '\0';
}

// OP as torch's Flight Recorder names it: "send", or with its peers in the group ("send 0->1",
// "recv 1<-0"), which PyTorch's fr_trace needs to pair a send with its recv.
bool IsP2p(std::string_view op) {
  op = op.substr(0, op.find(' '));
  return op == "send" || op == "recv" || op == "isend" || op == "irecv";
}

// JSON into a fixed buffer with async-signal-safe code only. Once full, it writes nothing more
// and ok() is false; the caller keeps room for the closing brackets.
class Out {
 public:
  Out(char* buf, size_t cap) : buf_(buf), cap_(cap) {}
  void Put(std::string_view s) {
    if (len_ + s.size() > cap_) {
      full_ = true;
      return;
    }
    std::memcpy(buf_ + len_, s.data(), s.size());
    len_ += s.size();
  }
  void Str(const char* s) {
    Put("\"");
    Body(s);
    Put("\"");
  }
  // S escaped, without quotes.
  void Body(const char* s) {
    for (; *s != '\0'; ++s) {
      const auto c = static_cast<unsigned char>(*s);
      if (c == '"' || c == '\\') {
        const char esc[2] = {'\\', static_cast<char>(c)};
        Put({esc, 2});
      } else if (c < 0x20) {
        static const char kHex[] = "0123456789abcdef";
        const char esc[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
        Put({esc, 6});
      } else {
        Put({reinterpret_cast<const char*>(&c), 1});
      }
    }
  }
  void Int(int64_t v) {
    char tmp[24];
    size_t n = 0;
    uint64_t u = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    do {
      tmp[n++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u != 0);
    if (v < 0) tmp[n++] = '-';
    char out[24];
    for (size_t i = 0; i < n; ++i) out[i] = tmp[n - 1 - i];
    Put({out, n});
  }
  size_t len() const { return len_; }
  bool full() const { return full_; }
  void Truncate(size_t len) {
    len_ = len;
    full_ = false;
  }

 private:
  char* buf_;
  size_t cap_;
  size_t len_ = 0;
  bool full_ = false;
};

void Entry(const Slot& s, uint8_t call, Out* o) {
  o->Put("{\"process_group\":[");
  o->Str(s.group);
  o->Put(",");
  o->Str(s.desc);
  o->Put("],\"collective_seq_id\":");
  o->Int(s.p2p ? 0 : s.seq);
  o->Put(",\"p2p_seq_id\":");
  o->Int(s.p2p ? s.seq : 0);
  o->Put(s.p2p ? ",\"is_p2p\":true" : ",\"is_p2p\":false");
  o->Put(",\"profiling_name\":\"");
  o->Body(s.backend);
  o->Put(":");
  o->Body(s.op);
  o->Put("\",\"input_sizes\":[");
  if (s.has_tensor) {
    o->Put("[");
    for (uint8_t d = 0; d < s.dims; ++d) {
      if (d > 0) o->Put(",");
      o->Int(s.sizes[d]);
    }
    o->Put("]");
  }
  o->Put("],\"input_dtypes\":[");
  if (s.has_tensor) o->Str(s.dtype);
  o->Put("],\"state\":\"");
  o->Put(call == kCompleted ? "completed" : call == kStarted ? "started" : "scheduled");
  o->Put("\",\"time_created_ns\":");
  o->Int(s.created_ns);
  o->Put(",\"frames\":[{\"name\":");
  o->Str(s.function);
  o->Put(",\"filename\":");
  o->Str(s.file);
  o->Put(",\"line\":");
  o->Int(s.line);
  o->Put("}]}");
}

// The ring as JSON into BUF; returns its length. Async-signal-safe.
size_t Format(char* buf, size_t cap) {
  // "entries" first: readers know a dump by its first key (pattern/flight_recorder.h).
  static constexpr std::string_view kTail =
      "],\"pg_status\":{},\"version\":\"perftracker-ring/1\"}\n";
  Out o(buf, cap - kTail.size());
  o.Put("{\"entries\":[");
  const uint64_t next = g_next.load(std::memory_order_acquire);
  const uint64_t first = next > kRingSize ? next - kRingSize : 0;
  bool any = false;
  for (uint64_t t = first; t < next; ++t) {
    const Slot& s = g_ring[t % kRingSize];
    if (s.state.load(std::memory_order_acquire) != kReady ||
        s.ticket.load(std::memory_order_relaxed) != t)
      continue;
    const size_t before = o.len();
    if (any) o.Put(",");
    Entry(s, s.call.load(std::memory_order_relaxed), &o);
    // A dump runs beside the collectives (the Python side writes it without the GIL): the slot
    // may have been taken for a newer call while it was read, and what was read is then half
    // one call, half the other. Left out, as a full buffer's last entry is.
    std::atomic_thread_fence(std::memory_order_acquire);
    const bool torn = s.state.load(std::memory_order_relaxed) != kReady ||
                      s.ticket.load(std::memory_order_relaxed) != t;
    if (const bool full = o.full(); full || torn) {
      o.Truncate(before);
      if (full) break;
      continue;
    }
    any = true;
  }
  std::memcpy(buf + o.len(), kTail.data(), kTail.size());
  return o.len() + kTail.size();
}

void OnFatalSignal(int sig) {
  const int saved_errno = errno;
  if (g_crash_path[0] != '\0' && getpid() == g_crash_pid && !g_dumping.exchange(true)) {
    const size_t n = Format(g_crash_buf, sizeof(g_crash_buf));
    // Made afresh: whatever is there (an earlier dump of this rank, or a link planted to make
    // the dump truncate another file: a hard link passes O_NOFOLLOW) goes first, and O_EXCL
    // refuses a file put back in between.
    unlink(g_crash_path);
    const int fd = open(g_crash_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
      size_t done = 0;
      while (done < n) {
        const ssize_t w = write(fd, g_crash_buf + done, n - done);
        if (w <= 0) break;
        done += static_cast<size_t>(w);
      }
      close(fd);
    }
  }
  // Hand the signal on: whoever had it before (faulthandler, the default action) gets it again.
  for (size_t i = 0; i < kFatalSignals.size(); ++i)
    if (kFatalSignals[i] == sig) sigaction(sig, &g_old[i], nullptr);
  errno = saved_errno;
  raise(sig);
}

}  // namespace

uint64_t Entered(const CollectiveEntry& e, int64_t now_ns) {
  const uint64_t t = g_next.load(std::memory_order_relaxed);
  Slot& s = g_ring[t % kRingSize];
  s.state.store(kBusy, std::memory_order_relaxed);
  // The fields' writes stay after kBusy for a reader on another thread (a dump: Format reads a
  // slot, then checks it again) and in a signal handler.
  std::atomic_thread_fence(std::memory_order_release);
  s.ticket.store(t, std::memory_order_relaxed);
  s.seq = e.seq;
  s.created_ns = now_ns;
  s.has_tensor = e.sizes != nullptr || !e.dtype.empty();
  s.dims = static_cast<uint8_t>(e.dims < kMaxDims ? e.dims : kMaxDims);
  for (size_t d = 0; d < s.dims; ++d) s.sizes[d] = e.sizes[d];
  s.line = e.line;
  s.p2p = IsP2p(e.op);
  s.call.store(kScheduled, std::memory_order_relaxed);
  Copy(e.group, s.group);
  Copy(e.group_desc, s.desc);
  Copy(e.op, s.op);
  Copy(e.backend, s.backend);
  Copy(e.dtype, s.dtype);
  Copy(e.file, s.file, /*keep_end=*/true);
  Copy(e.function, s.function);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  s.state.store(kReady, std::memory_order_release);
  g_next.store(t + 1, std::memory_order_release);
  return t;
}

void Returned(uint64_t ticket, bool completed) {
  Slot& s = g_ring[ticket % kRingSize];
  if (s.ticket.load(std::memory_order_relaxed) == ticket &&
      s.state.load(std::memory_order_acquire) == kReady)
    s.call.store(completed ? kCompleted : kStarted, std::memory_order_relaxed);
}

std::string DumpJson() {
  std::string out(kDumpBytes, '\0');
  out.resize(Format(out.data(), out.size()));
  return out;
}

Status WriteDump(const std::string& path) {
  // Made afresh, never through a link planted where the file goes (the folder comes from the
  // environment): a file of this user's left there by a dump that died is replaced.
  return WritePrivateFileAtomically(path, DumpJson(), AtPath::kReplace);
}

Status SetCrashPath(const std::string& path) {
  if (path.size() >= kCrashPathChars)
    return InvalidArgument(path + ": longer than a crash dump path may be");
  g_crash_path[0] = '\0';
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(g_crash_path + 1, path.c_str() + (path.empty() ? 0 : 1),
              path.empty() ? 0 : path.size());
  g_crash_pid = getpid();
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (!path.empty()) g_crash_path[0] = path[0];
  if (path.empty() || g_installed) return Status::Ok();
  for (size_t i = 0; i < kFatalSignals.size(); ++i) {
    struct sigaction sa {};
    sa.sa_handler = OnFatalSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_ONSTACK;
    if (sigaction(kFatalSignals[i], &sa, &g_old[i]) != 0)
      return Internal(std::string("sigaction: ") + std::strerror(errno));
  }
  g_installed = true;
  return Status::Ok();
}

void ResetForTest() {
  for (Slot& s : g_ring) s.state.store(kEmpty);
  g_next.store(0);
}

}  // namespace perftracker::worker::collective_ring
