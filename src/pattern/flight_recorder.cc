#include "pattern/flight_recorder.h"

#include <dirent.h>
#include <fmt/format.h>
#include <simdjson.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <utility>

#include "base/file_source.h"
#include "base/limits.h"
#include "pattern/summary_io.h"
#include "trace/pickle.h"
#include "trace/reader.h"

namespace perftracker::pattern {
namespace {

namespace dom = simdjson::dom;

// The JSON form seen through the lookups PickleValue has, so that one extraction reads both.
class JsonValue {
 public:
  JsonValue() = default;
  explicit JsonValue(dom::element e) : e_(e), ok_(true) {}
  bool is_none() const { return !ok_ || e_.is_null(); }
  bool is_string() const { return ok_ && e_.is_string(); }
  bool is_int() const { return ok_ && (e_.is_int64() || e_.is_uint64() || e_.is_bool()); }
  bool is_sequence() const { return ok_ && e_.is_array(); }
  bool is_dict() const { return ok_ && e_.is_object(); }
  std::string_view str() const {
    return is_string() ? std::string_view(e_.get_string().value_unsafe()) : "";
  }
  int64_t integer(int64_t otherwise = 0) const {
    if (!ok_) return otherwise;
    if (e_.is_bool()) return e_.get_bool().value_unsafe() ? 1 : 0;
    int64_t v;
    if (e_.get_int64().get(v) == simdjson::SUCCESS) return v;
    return otherwise;
  }
  size_t length() const {
    if (is_sequence()) return dom::array(e_.get_array().value_unsafe()).size();
    if (is_dict()) return dom::object(e_.get_object().value_unsafe()).size();
    return 0;
  }
  JsonValue at(size_t i) const {
    dom::element v;
    if (is_sequence() && e_.get_array().at(i).get(v) == simdjson::SUCCESS) return JsonValue(v);
    return {};
  }
  JsonValue get(std::string_view key) const {
    dom::element v;
    if (is_dict() && e_.get_object()[key].get(v) == simdjson::SUCCESS) return JsonValue(v);
    return {};
  }
  // Calls F(item) for each item of a sequence, in order: an array's items are walked, not
  // looked up by index (simdjson's at(i) walks from the start: quadratic over a dump's entries).
  template <typename F>
  void items(F f) const {
    if (!is_sequence()) return;
    for (dom::element x : dom::array(e_.get_array().value_unsafe())) f(JsonValue(x));
  }
  // Calls F(key, value) for each member of a dict.
  template <typename F>
  void each(F f) const {
    if (!is_dict()) return;
    for (auto [k, v] : dom::object(e_.get_object().value_unsafe())) f(std::string(k), JsonValue(v));
  }

 private:
  dom::element e_;
  bool ok_ = false;
};

template <typename F>
void Each(const trace::PickleValue& v, F f) {
  for (size_t i = 0; i < v.length() && v.is_dict(); ++i)
    if (v.key(i).is_string()) f(std::string(v.key(i).str()), v.value(i));
}
template <typename F>
void Each(const JsonValue& v, F f) {
  v.each(f);
}
template <typename F>
void Items(const trace::PickleValue& v, F f) {
  for (size_t i = 0; i < v.length() && v.is_sequence(); ++i) f(v.at(i));
}
template <typename F>
void Items(const JsonValue& v, F f) {
  v.items(f);
}

// What the entries read so far may still become (limits::kMaxFlightRecorderExpanded): every
// copy out of the dump is charged before it is made.
//   ExpandBudget b(100); b.Take(60) == true; b.Take(60) == false; b.exhausted() == true
class ExpandBudget {
 public:
  explicit ExpandBudget(size_t bytes) : left_(bytes) {}
  bool Take(size_t bytes) {
    if (bytes > left_) exhausted_ = true;
    if (exhausted_) return false;
    left_ -= bytes;
    used_ += bytes;
    return true;
  }
  bool exhausted() const { return exhausted_; }
  size_t used() const { return used_; }

 private:
  size_t left_;
  size_t used_ = 0;
  bool exhausted_ = false;
};

// An integer the dump may write as a number or as its text (the JSON form's pg_status: "10").
template <typename V>
int64_t Int(const V& v, int64_t otherwise) {
  if (v.is_int()) return v.integer(otherwise);
  const std::string_view s = v.str();
  int64_t out = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty() ? out : otherwise;
}

// "[0, 1, 3]" (pg_config's ranks) -> {0, 1, 3}; bounded by the text's length.
std::vector<int> RankListText(std::string_view s) {
  std::vector<int> out;
  int64_t cur = -1;
  for (char c : s) {
    if (c >= '0' && c <= '9') {
      cur = (cur < 0 ? 0 : cur) * 10 + (c - '0');
      if (cur >= limits::kMaxWorldSize) return {};
    } else if (cur >= 0) {
      out.push_back(static_cast<int>(cur));
      cur = -1;
    }
  }
  if (cur >= 0) out.push_back(static_cast<int>(cur));
  return out;
}

// Reads entry E into C, charging what it copies to BUDGET; false when E is no collective or the
// budget ran out (BUDGET says which).
template <typename V>
bool ReadCall(const V& e, CollectiveCall* c, ExpandBudget* budget) {
  if (!e.is_dict()) return false;
  const std::string_view name = e.get("profiling_name").str();
  if (name.empty()) return false;
  const V pg = e.get("process_group");
  const std::string_view state = e.get("state").str();
  if (!budget->Take(sizeof(CollectiveCall) + name.size() + pg.at(0).str().size() +
                    pg.at(1).str().size() + state.size()))
    return false;
  if (const size_t colon = name.find(':'); colon != std::string_view::npos) {
    c->backend = std::string(name.substr(0, colon));
    c->op = std::string(name.substr(colon + 1));
  } else {
    c->op = std::string(name);
  }
  c->p2p = e.get("is_p2p").integer(0) != 0;
  c->seq = Int(e.get(c->p2p ? "p2p_seq_id" : "collective_seq_id"), -1);
  if (c->seq < 0) return false;
  c->group = std::string(pg.at(0).is_string() ? pg.at(0).str() : std::string_view());
  if (c->group.empty()) c->group = std::to_string(Int(e.get("pg_id"), 0));
  c->group_desc = std::string(pg.at(1).str());
  bool ok = true;
  auto sizes = [&](const V& list, std::vector<std::vector<int64_t>>* out) {
    Items(list, [&](const V& dims_of) {
      if (!(ok = ok &&
                 budget->Take(sizeof(std::vector<int64_t>) + sizeof(int64_t) * dims_of.length())))
        return;
      std::vector<int64_t> dims;
      Items(dims_of, [&](const V& d) { dims.push_back(d.integer(-1)); });
      out->push_back(std::move(dims));
    });
  };
  auto dtypes = [&](const V& list, std::vector<std::string>* out) {
    Items(list, [&](const V& t) {
      if ((ok = ok && budget->Take(sizeof(std::string) + t.str().size())))
        out->emplace_back(t.str());
    });
  };
  sizes(e.get("input_sizes"), &c->sizes);
  dtypes(e.get("input_dtypes"), &c->dtypes);
  c->has_outputs = !e.get("output_sizes").is_none();
  sizes(e.get("output_sizes"), &c->output_sizes);
  dtypes(e.get("output_dtypes"), &c->output_dtypes);
  c->state = std::string(state);
  c->created_ns = Int(e.get("time_created_ns"), 0);
  // torch lists the frames innermost first; a StackFrame list is outermost first.
  Items(e.get("frames"), [&](const V& f) {
    const std::string_view file = f.get("filename").str(), function = f.get("name").str();
    if ((ok = ok && budget->Take(sizeof(StackFrame) + file.size() + function.size())))
      c->frames.push_back(
          {std::string(file), static_cast<int>(Int(f.get("line"), 0)), std::string(function)});
  });
  std::reverse(c->frames.begin(), c->frames.end());
  return ok;
}

template <typename V>
Status Extract(const V& root, const std::string& name, CollectiveLog* log, int* skipped,
               ExpandBudget* budget) {
  if (!root.is_dict()) return DataLoss(name + ": a Flight Recorder dump is a dict; this is not");
  const V entries = root.get("entries");
  if (!entries.is_sequence())
    return DataLoss(name + ": no \"entries\" list: not a Flight Recorder dump");
  log->version = std::string(root.get("version").str());
  int bad = 0;
  Items(entries, [&](const V& entry) {
    if (budget->exhausted()) return;
    CollectiveCall c;
    if (ReadCall(entry, &c, budget))
      log->calls.push_back(std::move(c));
    else
      ++bad;
  });
  if (budget->exhausted())
    return ResourceExhausted(fmt::format(
        "{}: its entries expand to more than {} MiB once read (values the pickle refers to "
        "from many places, copied each time): not read",
        name, budget->used() >> 20));
  Each(root.get("pg_status"), [&](const std::string& group, const V& s) {
    log->progress[group] = {Int(s.get("last_enqueued_collective"), -1),
                            Int(s.get("last_started_collective"), -1),
                            Int(s.get("last_completed_collective"), -1)};
  });
  Each(root.get("pg_config"), [&](const std::string& group, const V& s) {
    log->group_ranks[group] = RankListText(s.get("ranks").str());
  });
  if (skipped != nullptr) *skipped = bad;
  return Status::Ok();
}

// ParseFlightRecorder, charging what its entries become to BUDGET (the caller's: a set of dumps
// shares one total).
StatusOr<CollectiveLog> ParseWithin(std::string_view bytes, const std::string& name, int rank,
                                    int* skipped, ExpandBudget* budget) {
  CollectiveLog log;
  log.rank = rank;
  log.source = name;
  if (bytes.size() > limits::kMaxFlightRecorderDump)
    return ResourceExhausted(
        fmt::format("{}: {} bytes, over the {} MiB a Flight Recorder dump may have", name,
                    bytes.size(), limits::kMaxFlightRecorderDump >> 20));
  if (!bytes.empty() && static_cast<uint8_t>(bytes[0]) == 0x80) {
    PT_ASSIGN_OR_RETURN(trace::Pickle p, trace::ParsePickle(bytes, name));
    PT_RETURN_IF_ERROR(Extract(p.root(), name, &log, skipped, budget));
    return log;
  }
  dom::parser parser;
  dom::element doc;
  const simdjson::padded_string padded(bytes);
  if (auto err = parser.parse(padded).get(doc); err != simdjson::SUCCESS)
    return DataLoss(fmt::format("{}: not a Flight Recorder dump (neither a pickle nor JSON: {})",
                                name, simdjson::error_message(err)));
  PT_RETURN_IF_ERROR(Extract(JsonValue(doc), name, &log, skipped, budget));
  return log;
}

}  // namespace

bool LooksLikeFlightRecorder(std::string_view head) {
  if (head.size() >= 2 && static_cast<uint8_t>(head[0]) == 0x80)
    return head[1] >= 2 && head[1] <= 5;
  size_t i = 0;
  while (i < head.size() && std::isspace(static_cast<unsigned char>(head[i]))) ++i;
  if (i >= head.size() || head[i] != '{') return false;
  head.remove_prefix(i + 1);
  for (std::string_view key : {"\"comm_lib_version\"", "\"entries\"", "\"pg_config\""}) {
    size_t j = 0;
    while (j < head.size() && std::isspace(static_cast<unsigned char>(head[j]))) ++j;
    if (head.substr(j).starts_with(key)) return true;
  }
  return false;
}

StatusOr<CollectiveLog> ParseFlightRecorder(std::string_view bytes, const std::string& name,
                                            int rank, int* skipped) {
  ExpandBudget budget(limits::kMaxFlightRecorderExpanded);
  return ParseWithin(bytes, name, rank, skipped, &budget);
}

int FlightRecorderRank(const std::string& path) {
  const int r = trace::RankFromFileName(path);
  if (r >= 0) return r;
  std::string base =
      path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  for (std::string_view ext : {".json", ".pkl", ".pickle"})
    if (base.ends_with(ext)) base.resize(base.size() - ext.size());
  size_t i = base.size();
  while (i > 0 && base[i - 1] >= '0' && base[i - 1] <= '9') --i;
  if (i == base.size() || base.size() - i > 7) return -1;
  return std::stoi(base.substr(i));
}

namespace {

StatusOr<CollectiveLog> ReadWithin(const std::string& path, int* skipped, ExpandBudget* budget) {
  const int rank = FlightRecorderRank(path);
  if (rank < 0)
    return InvalidArgument(path + ": no rank in the file name (torch names dumps PREFIX<rank>)");
  PT_ASSIGN_OR_RETURN(std::string bytes,
                      ReadSmallFile(path, limits::kMaxFlightRecorderDump, "Flight Recorder dump"));
  return ParseWithin(bytes, path, rank, skipped, budget);
}

}  // namespace

StatusOr<CollectiveLog> ReadFlightRecorderFile(const std::string& path, int* skipped) {
  ExpandBudget budget(limits::kMaxFlightRecorderExpanded);
  return ReadWithin(path, skipped, &budget);
}

StatusOr<std::vector<std::string>> FindFlightRecorderDumps(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  auto head_of = [](const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    char buf[64] = {};
    in.read(buf, sizeof(buf));
    return std::string(buf, static_cast<size_t>(in.gcount()));
  };
  for (const std::string& path : paths) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return NotFound(path + ": " + std::strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
      if (LooksLikeFlightRecorder(head_of(path))) out.push_back(path);
      continue;
    }
    DIR* dir = opendir(path.c_str());
    if (dir == nullptr) return InvalidArgument(path + ": " + std::strerror(errno));
    while (dirent* e = readdir(dir)) {
      // A summary file is none (a folder of 100,000 of them was read twice, cold: 14 s of a
      // 55 s diagnosis), nor a dot file; the entry's type spares a stat where it is known.
      if (e->d_name[0] == '.' || HasSummaryExtension(e->d_name)) continue;
      if (e->d_type != DT_REG && e->d_type != DT_UNKNOWN && e->d_type != DT_LNK) continue;
      const std::string file = (path.ends_with('/') ? path : path + "/") + e->d_name;
      struct stat fs;  // a link counts as what it names
      if (e->d_type != DT_REG && (stat(file.c_str(), &fs) != 0 || !S_ISREG(fs.st_mode))) continue;
      if (LooksLikeFlightRecorder(head_of(file))) out.push_back(file);
    }
    closedir(dir);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void MergeCollectiveLog(CollectiveLog from, CollectiveLog* into) {
  std::set<std::pair<std::string, int64_t>> have;
  for (const CollectiveCall& c : into->calls)
    if (!c.p2p) have.emplace(c.group, c.seq);
  for (CollectiveCall& c : from.calls)
    if (c.p2p || !have.count({c.group, c.seq})) into->calls.push_back(std::move(c));
  std::stable_sort(
      into->calls.begin(), into->calls.end(),
      [](const CollectiveCall& a, const CollectiveCall& b) { return a.created_ns < b.created_ns; });
  into->source += ", " + from.source;
  for (auto& [g, p] : from.progress) into->progress.emplace(g, p);
  for (auto& [g, r] : from.group_ranks) into->group_ranks.emplace(g, std::move(r));
}

std::vector<CollectiveLog> ReadFlightRecorderDumps(const std::vector<std::string>& files,
                                                   std::vector<std::string>* notes) {
  std::vector<CollectiveLog> out;
  std::map<int, size_t> seen;  // rank -> its log in OUT
  int skipped_total = 0;
  size_t set_left = limits::kMaxFlightRecorderSetExpanded;
  std::vector<std::string> unread;
  for (const std::string& file : files) {
    int skipped = 0;
    // What this dump may become: its own cap, or what the set has left. What it took counts
    // against the set as its reader charged it.
    ExpandBudget budget(std::min(set_left, limits::kMaxFlightRecorderExpanded));
    auto log = ReadWithin(file, &skipped, &budget);
    if (!log.ok()) {
      // One damaged or hostile dump is a note on it; the other ranks' dumps still count.
      if (unread.size() < kMaxUnreadNamed) unread.push_back(log.status().message());
      continue;
    }
    skipped_total += skipped;
    set_left -= std::min(set_left, budget.used());
    if (auto [it, fresh] = seen.emplace(log->rank, out.size()); !fresh) {
      MergeCollectiveLog(std::move(*log), &out[it->second]);
      continue;
    }
    out.push_back(std::move(*log));
  }
  for (std::string& u : unread) notes->push_back("a Flight Recorder dump was left out: " + u);
  if (skipped_total > 0)
    notes->push_back(
        fmt::format("{} Flight Recorder entr{} without a name or sequence number left out",
                    skipped_total, skipped_total == 1 ? "y" : "ies"));
  return out;
}

}  // namespace perftracker::pattern
