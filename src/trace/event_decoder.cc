// Pass 2 of the trace reader (event_decoder.h): segments parsed by simdjson On-Demand, events
// decoded field by field. The whole per-event path (ParseDocument, DecodeEvent, the field
// readers of json_fields.h, KindFromCat) sits in this one translation unit so that it inlines.
#include "trace/event_decoder.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "base/limits.h"
#include "trace/ascii.h"
#include "trace/block_classifier.h"
#include "trace/json_fields.h"

namespace perftracker::trace::internal {
namespace {

// Unknown categories counted by name (ReadStats::unknown_cats).
constexpr size_t kMaxUnknownCats = limits::kMaxUnknownCategories;
// Where the categories past kMaxUnknownCats are counted together.
constexpr std::string_view kOtherUnknownCats = "(other)";

// Kineto "cat" to kind. Returns false for a category we do not know.
bool KindFromCat(std::string_view cat, EventKind* kind) {
  struct Entry {
    std::string_view cat;
    EventKind kind;
  };
  // Exact lowercase spellings first (torch 2.x), then older capitalised ones case-insensitively.
  static constexpr Entry kTable[] = {
      {"cpu_op", EventKind::kCpuOp},
      {"kernel", EventKind::kKernel},
      {"cuda_runtime", EventKind::kCudaRuntime},
      {"python_function", EventKind::kPythonFunction},
      {"user_annotation", EventKind::kUserAnnotation},
      {"gpu_user_annotation", EventKind::kGpuUserAnnotation},
      {"gpu_memcpy", EventKind::kMemcpy},
      {"gpu_memset", EventKind::kMemset},
      {"cuda_driver", EventKind::kCudaDriver},
      {"cuda_sync", EventKind::kCudaSync},
      {"operator", EventKind::kCpuOp},
      {"runtime", EventKind::kCudaRuntime},
      {"driver", EventKind::kCudaDriver},
      {"memcpy", EventKind::kMemcpy},
      {"memset", EventKind::kMemset},
      {"record_function", EventKind::kUserAnnotation},
      {"python", EventKind::kPythonFunction},
      {"trace", EventKind::kOther},
      {"overhead", EventKind::kOther},
      {"cpu_instant_event", EventKind::kOther},
      {"cuda_profiler_range", EventKind::kOther},
      {"gpu_op", EventKind::kOther},
      {"ac2g", EventKind::kOther},
      {"fwdbwd", EventKind::kOther},
  };
  for (const Entry& e : kTable) {
    if (cat == e.cat) {
      *kind = e.kind;
      return true;
    }
  }
  for (const Entry& e : kTable) {
    if (EqualsIgnoreCase(cat, e.cat)) {
      *kind = e.kind;
      return true;
    }
  }
  return false;
}

// Events without a cat (legacy torch 1.x traces): record_function markers by their names.
EventKind KindFromName(std::string_view name) {
  if (StartsWith(name, "ProfilerStep#") || StartsWith(name, "enumerate(DataLoader)") ||
      StartsWith(name, "Optimizer.step#") || StartsWith(name, "Optimizer.zero_grad#")) {
    return EventKind::kUserAnnotation;
  }
  return EventKind::kCpuOp;
}

// Invalid UTF-8 bytes become '?', so one bad name cannot fail a whole segment.
void RepairUtf8(char* data, size_t len) {
  auto* p = reinterpret_cast<unsigned char*>(data);
  size_t i = 0;
  while (i < len) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;
    uint32_t cp = 0;
    if ((c & 0xe0) == 0xc0) {
      n = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
      cp = c & 0x07;
    } else {
      p[i++] = '?';
      continue;
    }
    bool ok = i + n < len;
    for (size_t k = 1; ok && k <= n; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) ok = false;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    if (ok) {
      static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
      ok = cp >= kMin[n] && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
    }
    if (!ok) {
      p[i++] = '?';
      continue;
    }
    i += n + 1;
  }
}

// The profiler's names for its memory records (trace::MemoryEvent).
constexpr std::string_view kMemoryRecord = "[memory]";
constexpr std::string_view kOutOfMemoryRecord = "[OutOfMemory]";

// A memory record's args into M, each looked up by name (other keys are not read):
//   {"Total Allocated": 1052672, "Bytes": 4096, "Device Type": 1, "Device Id": 0, "Addr": 7}
//   -> total_allocated 1052672, bytes 4096, device_type 1, device_id 0, addr 7.
simdjson::error_code MemoryArgs(od::object& args, trace::MemoryEvent* m) {
  int64_t type = m->device_type, id = m->device_id;
  const std::pair<const char*, int64_t*> fields[] = {{"Bytes", &m->bytes},
                                                     {"Total Allocated", &m->total_allocated},
                                                     {"Total Reserved", &m->total_reserved},
                                                     {"Device Type", &type},
                                                     {"Device Id", &id},
                                                     {"Addr", &m->addr}};
  for (const auto& [key, out] : fields) {
    od::value v;
    const simdjson::error_code e = args.find_field_unordered(key).get(v);
    if (e == simdjson::NO_SUCH_FIELD) continue;
    if (e) return e;
    int64_t i;
    if (ReadInt(v, &i)) *out = i;
  }
  m->device_type = static_cast<int32_t>(type);
  m->device_id = static_cast<int32_t>(id);
  return simdjson::SUCCESS;
}

// Pass 2 over one trace: reads (or maps) the segments and decodes their events.
class EventDecoder {
 public:
  EventDecoder(const std::string& name, const ReaderTuning& tuning, EventSink* sink,
               ReadStats* stats)
      : name_(name), tuning_(tuning), sink_(sink), stats_(stats) {}

  // `map` (with `map_size` bytes and kPad more after them) is the whole input when the source is
  // mapped; null to stream it through Read. Segments are then framed and parsed in place.
  Status Run(ByteSource* src, const ScanResult& scan, char* map, size_t map_size) {
    src_ = src;
    const auto& cuts = scan.cuts;
    size_t released = 0;
    uint64_t ahead = 0;  // bytes hinted to the source as read next
    for (size_t i = 0; i < cuts.size(); ++i) {
      const uint64_t s = cuts[i];
      const uint64_t e = i + 1 < cuts.size() ? cuts[i + 1] : scan.events_end;
      if (map != nullptr) {
        if (e + kPad > ahead) {
          ahead = std::max<uint64_t>(e + kPad, s + tuning_.release_bytes);
          if (!src->WillRead(static_cast<size_t>(s - 1), static_cast<size_t>(ahead))) {
            return DataLoss(name_ + ": file changed while being read");
          }
        }
        // Pass 1 checked that the events lie inside the input and start after its first byte.
        win_ = map;
        win_base_ = 0;
        win_len_ = map_size;
        seg_ = map + s;
        seg_cap_ = map_size + kPad - static_cast<size_t>(s - 1);
        const uint64_t next_end = i + 2 < cuts.size() ? cuts[i + 2] : scan.events_end;
        prefetch_ = map + e;
        prefetch_end_ = map + next_end;
      } else {
        PT_RETURN_IF_ERROR(Fill(s, e));
        win_ = seg_ = buf_.data() + start_;
        win_base_ = base_;
        win_len_ = len_;
        seg_cap_ = buf_.size() - (start_ - 1);
      }
      PT_RETURN_IF_ERROR(ParseSegment(s, e));
      if (map != nullptr && e - released >= tuning_.release_bytes) {
        src->Release(released, e);
        released = e;
      }
    }
    if (map != nullptr) src->Release(released, map_size);
    for (const auto& [cat, n] : unknown_cats_) stats_->unknown_cats[cat] += n;
    return Status::Ok();
  }

 private:
  // Makes buf_[start_..] hold stream bytes [s, e], plus room for padding. buf_[start_ - 1] is
  // free for the '[' that frames the segment (it held bytes of an earlier, finished segment).
  // Bytes are moved only when the buffer's tail has no room for another read, so a segment much
  // smaller than a read costs no copying.
  Status Fill(uint64_t s, uint64_t e) {
    const size_t read = std::max<size_t>(tuning_.read_bytes, 1);
    if (base_ + len_ <= s) {
      len_ = 0;
      base_ = pos_;
      start_ = 1;
    } else if (s > base_) {
      const size_t drop = static_cast<size_t>(s - base_);
      start_ += drop;
      base_ = s;
      len_ -= drop;
    }
    while (base_ + len_ <= e) {
      if (start_ + len_ + read + kPad > buf_.size()) {
        if (start_ > 1) {
          std::memmove(buf_.data() + 1, buf_.data() + start_, len_);
          start_ = 1;
        }
        const size_t need = 1 + len_ + read + kPad;
        if (buf_.size() < need) {
          buf_.resize(
              std::max({need, buf_.size() * 2, static_cast<size_t>(e - s) + 2 + read + kPad}));
        }
      }
      StatusOr<size_t> n = src_->Read(buf_.data() + start_ + len_, read);
      if (!n.ok()) return Status(n.status().code(), name_ + ": " + n.status().message());
      if (*n == 0) return DataLoss(name_ + ": file changed while being read");
      pos_ += *n;
      len_ += *n;
      if (base_ < s) {  // still before the segment: discard what was read
        const size_t drop = static_cast<size_t>(std::min<uint64_t>(s - base_, len_));
        start_ += drop;
        base_ += drop;
        len_ -= drop;
        if (len_ == 0) start_ = 1;
      }
    }
    return Status::Ok();
  }

  Status JsonError(const char* where, simdjson::error_code e, uint64_t fallback) {
    uint64_t at = fallback;
    const char* loc = nullptr;
    if (where != nullptr) loc = where;
    if (loc != nullptr && loc >= win_ && loc < win_ + win_len_) {
      at = win_base_ + static_cast<uint64_t>(loc - win_);
    }
    return MalformedJson(name_, at, simdjson::error_message(e));
  }

  Status ParseSegment(uint64_t s, uint64_t e) {
    char* const seg = seg_;
    size_t t = static_cast<size_t>(e - s);
    // Drop the separator before the next segment's first event.
    while (t > 0 && kTables.cls[static_cast<uint8_t>(seg[t - 1])] == kWs) --t;
    if (t > 0 && seg[t - 1] == ',') --t;
    const size_t doc_len = t + 2;
    const char saved = seg[t];
    seg[-1] = '[';
    seg[t] = ']';
    Status st = ParseDocument(doc_len, s, /*repaired=*/0, /*skip=*/0);
    seg[t] = saved;
    return st;
  }

  // The repairs ParseDocument may make to a segment, once each (`repaired`).
  static constexpr int kUtf8Repaired = 1;
  static constexpr int kQuotesRepaired = 2;

  // Parses the framed segment; the first `skip` events were decoded by an earlier try (before
  // its error) and are passed over.
  Status ParseDocument(size_t doc_len, uint64_t s, int repaired, size_t skip) {
    od::document doc;
    od::array arr;
    // One parser per thread, kept across files: its index buffers are sized for a segment and
    // reallocating (and page-faulting) them for every trace costs more than parsing a small one.
    thread_local od::parser parser;
    char* const doc_start = seg_ - 1;
    auto err = parser.iterate(doc_start, doc_len, seg_cap_).get(doc);
    if (!err) err = doc.get_array().get(arr);
    if (err == simdjson::UTF8_ERROR && !(repaired & kUtf8Repaired)) {
      RepairUtf8(doc_start + 1, doc_len - 2);
      return ParseDocument(doc_len, s, repaired | kUtf8Repaired, skip);
    }
    if (err) return RepairQuotesOr(JsonError(nullptr, err, s), doc_len, s, repaired, skip);
    size_t index = 0;
    for (auto el : arr) {
      if (auto e = el.error()) {
        const char* loc = nullptr;
        if (doc.current_location().get(loc)) loc = nullptr;
        return RepairQuotesOr(JsonError(loc, e, s), doc_len, s, repaired, index);
      }
      if (index++ < skip) continue;      // decoded before the repair
      od::value& v = el.value_unsafe();  // not a copy: see DecodeEvent
      // Mapped input: pull the next segment toward the cache while this one is decoded, so its
      // stage 1 does not wait on memory.
      if (prefetch_ < prefetch_end_) {
        for (int k = 0; k < 4; ++k) __builtin_prefetch(prefetch_ + 64 * k, 0, 2);
        prefetch_ += 256;
      }
      if (auto e = DecodeEvent(v)) {
        const char* loc = nullptr;
        if (doc.current_location().get(loc)) loc = nullptr;
        return RepairQuotesOr(JsonError(loc, e, s), doc_len, s, repaired, index - 1);
      }
      if (bad_why_ != nullptr) NoteFirstBad(doc, s);
    }
    return Status::Ok();
  }

  // Broken JSON in a segment: if unescaped quotes inside strings explain it (torch 2.13's
  // writer leaves the quotes of names unescaped, json_fields.h), the segment is parsed again
  // with them turned into ' (in place: the length stays), passing over the `done` events
  // decoded before the error (the repair leaves every byte before its first change as it was).
  // Otherwise, or if the repaired segment is still broken, `error` is the answer.
  Status RepairQuotesOr(Status error, size_t doc_len, uint64_t s, int repaired, size_t done) {
    if ((repaired & kQuotesRepaired) || RepairUnescapedQuotes(seg_, doc_len - 2) == 0) {
      return error;
    }
    Status again = ParseDocument(doc_len, s, repaired | kQuotesRepaired, done);
    return again.ok() ? again : error;
  }

  // Records where the first malformed event was found (off the hot path: only once per trace).
  void NoteFirstBad(od::document& doc, uint64_t fallback) {
    if (stats_->first_bad.empty()) {
      const char* loc = nullptr;
      if (doc.current_location().get(loc)) loc = nullptr;
      uint64_t at = fallback;
      if (loc != nullptr && loc >= win_ && loc < win_ + win_len_)
        at = win_base_ + static_cast<uint64_t>(loc - win_);
      stats_->first_bad_byte = at;
      stats_->first_bad = bad_why_;
    }
    bad_why_ = nullptr;
  }

  // Counts a malformed event; the first one's reason is kept (see NoteFirstBad).
  void Malformed(const char* why) {
    ++stats_->malformed_events;
    if (stats_->first_bad.empty()) bad_why_ = why;
  }

  // Decodes one element of the event array. Returns an error only when the JSON itself is broken;
  // events of the wrong shape are counted.
  [[gnu::always_inline]] simdjson::error_code DecodeEvent(od::value& v) {
    // On-Demand handles (value, object) are held by reference, not copied: a copy is built
    // from narrow stores and read back wide, a store-forwarding stall that once cost a sixth
    // of the whole run.
    auto as_object = v.get_object();
    if (auto e = as_object.error()) {
      if (!IsValueError(e)) return e;
      Malformed("an event object, found another JSON value");
      return simdjson::SUCCESS;
    }
    od::object& obj = as_object.value_unsafe();
    trace::Event ev;
    trace::MemoryEvent mem;
    std::string_view ph, cat;
    bool has_cat = false, has_ts = false, has_name = false, bad = false, skip = false;
    bool instant = false;           // "ph":"i": a memory record, if named so (read on for its args)
    const char* bad_key = nullptr;  // the first field of the wrong type
    for (auto f : obj) {
      if (auto e = f.error()) return e;
      od::field& field = f.value_unsafe();
      const char* k = field.key().raw();
      od::value& val = field.value();
      simdjson::error_code e = simdjson::SUCCESS;
      switch (k[0]) {
        case 'p':
          if (KeyIs(k, "ph")) {
            e = val.get_string().get(ph);
            instant = e == simdjson::SUCCESS && ph.size() == 1 && (ph[0] == 'i' || ph[0] == 'I');
            skip = e == simdjson::SUCCESS && ph.size() == 1 && ph[0] != 'X' && !instant;
          } else if (KeyIs(k, "pid")) {
            bad |= !ReadId(val, &ev.pid);
          }
          break;
        case 't':
          if (KeyIs(k, "ts")) {
            e = val.get_double().get(ev.ts_us);
            has_ts = e == simdjson::SUCCESS;
          } else if (KeyIs(k, "tid")) {
            bad |= !ReadId(val, &ev.tid);
          }
          break;
        case 'd':
          if (KeyIs(k, "dur")) e = val.get_double().get(ev.dur_us);
          break;
        case 'n':
          if (KeyIs(k, "name")) {
            e = val.get_string().get(ev.name);
            has_name = e == simdjson::SUCCESS;
          }
          break;
        case 'c':
          if (KeyIs(k, "cat")) {
            e = val.get_string().get(cat);
            has_cat = e == simdjson::SUCCESS;
          }
          break;
        case 'a':
          if (KeyIs(k, "args")) {
            od::object args;
            e = val.get_object().get(args);
            if (!e) e = instant ? MemoryArgs(args, &mem) : Args(args, &ev);
          }
          break;
        default:
          break;
      }
      if (e) {
        if (!IsValueError(e)) return e;
        if (auto ce = CheckScalar(val)) return ce;  // `tru`, `1.2.3`: broken JSON, not a bad event
        bad = true;
        if (bad_key == nullptr) bad_key = k;
      }
      // Once "ph" (usually the first key) says this is not a complete event, nothing else of it
      // is needed: leaving the object here lets the array iterator skip the rest token by token,
      // cheaper than walking its fields. A third of Kineto's elements are flows.
      if (skip) break;
    }
    if (ph.size() != 1) {
      Malformed("a \"ph\" string of one letter");
      return simdjson::SUCCESS;
    }
    switch (ph[0]) {
      case 'X':
        break;
      case 's':
      case 'f':
      case 't':
        ++stats_->flow_events;
        return simdjson::SUCCESS;
      case 'i':
      case 'I':
        if (has_ts && !bad && (ev.name == kMemoryRecord || ev.name == kOutOfMemoryRecord)) {
          mem.ts_us = ev.ts_us;
          mem.tid = ev.tid;
          mem.out_of_memory = ev.name == kOutOfMemoryRecord;
          ++stats_->memory_events;
          sink_->OnMemory(mem);
          return simdjson::SUCCESS;
        }
        ++stats_->metadata_events;
        return simdjson::SUCCESS;
      default:  // M, C and the rarer phases: metadata for a viewer, not work
        ++stats_->metadata_events;
        return simdjson::SUCCESS;
    }
    if (bad || !has_ts || !has_name) {
      Malformed(BadFieldReason(bad_key, has_ts));
      return simdjson::SUCCESS;
    }
    if (has_cat) {
      if (!KindFromCat(cat, &ev.kind)) {
        ev.kind = EventKind::kOther;
        ++stats_->unknown_kind;
        CountUnknownCat(cat);
      }
    } else {
      ev.kind = KindFromName(ev.name);
    }
    ++stats_->events;
    sink_->OnEvent(ev);
    return simdjson::SUCCESS;
  }

  // What a complete event lacked, for the first-bad-event message. KEY points into the input at
  // the field's key (its closing quote ends it).
  static const char* BadFieldReason(const char* key, bool has_ts) {
    if (key != nullptr) {
      if (KeyIs(key, "ts")) return "a number for \"ts\"";
      if (KeyIs(key, "dur")) return "a number for \"dur\"";
      if (KeyIs(key, "name")) return "a string for \"name\"";
      if (KeyIs(key, "cat")) return "a string for \"cat\"";
      if (KeyIs(key, "pid") || KeyIs(key, "tid")) return "a number or string for \"pid\"/\"tid\"";
      if (KeyIs(key, "args")) return "an object for \"args\"";
      return "fields of the right types";
    }
    return has_ts ? "a \"name\" string" : "a \"ts\" number";
  }

  // On-demand parsing reports a misspelt literal as a type mismatch; tell the two apart.
  static simdjson::error_code CheckScalar(od::value& v) {
    od::json_type t;
    if (auto e = v.type().get(t)) return e;
    switch (t) {
      case od::json_type::boolean: {
        bool b;
        return v.get_bool().get(b) ? simdjson::T_ATOM_ERROR : simdjson::SUCCESS;
      }
      case od::json_type::null: {
        bool n = false;
        return (v.is_null().get(n) || !n) ? simdjson::N_ATOM_ERROR : simdjson::SUCCESS;
      }
      case od::json_type::number: {
        double d;
        return v.get_double().get(d) ? simdjson::NUMBER_ERROR : simdjson::SUCCESS;
      }
      default:
        return simdjson::SUCCESS;
    }
  }

  void CountUnknownCat(std::string_view cat) {
    for (auto& [c, n] : unknown_cats_) {
      if (c == cat) {
        ++n;
        return;
      }
    }
    // Past the bound every new category counts under one "(other)" entry, the one allowed
    // beyond it (it used to be looked up as a new category again, forever).
    if (unknown_cats_.size() >= kMaxUnknownCats) {
      cat = kOtherUnknownCats;
      for (auto& [c, n] : unknown_cats_) {
        if (c == cat) {
          ++n;
          return;
        }
      }
    }
    unknown_cats_.emplace_back(std::string(cat), 1);
  }

  static simdjson::error_code Args(od::object& args, trace::Event* ev) {
    for (auto f : args) {
      if (auto e = f.error()) return e;
      od::field& field = f.value_unsafe();
      const char* k = field.key().raw();
      od::value& v = field.value();
      int64_t i;
      switch (k[0]) {
        case 'E':
          if (KeyIs(k, "External id") && ReadInt(v, &i)) ev->external_id = i;
          break;
        case 'c':
          if (KeyIs(k, "correlation") && ReadInt(v, &i)) ev->correlation = i;
          break;
        case 's':
          if (KeyIs(k, "stream") && ReadInt(v, &i)) ev->stream = static_cast<int32_t>(i);
          break;
        case 'w':
          if (KeyIs(k, "wait_on_stream")) {
            if (ReadInt(v, &i)) ev->wait_on_stream = static_cast<int32_t>(i);
          } else if (KeyIs(k, "wait_on_cuda_event_record_corr_id")) {
            if (ReadInt(v, &i)) ev->wait_on_record_correlation = i;
          }
          break;
        case 'd':
          if (KeyIs(k, "device")) {
            if (ReadInt(v, &i)) ev->device = static_cast<int32_t>(i);
          } else if (KeyIs(k, "dtype")) {
            if (v.get_string().get(ev->dtype)) {
            }
          }
          break;
        case 'C':
          if (KeyIs(k, "Collective name")) {
            if (v.get_string().get(ev->collective_name)) {
            }
          } else if (KeyIs(k, "Call stack")) {
            if (v.get_string().get(ev->call_stack)) {
            }
          }
          break;
        case 'I':
          if (KeyIs(k, "In msg nelems")) {
            if (ReadInt(v, &i)) ev->in_msg_nelems = i;
          } else if (KeyIs(k, "Input Dims")) {
            od::array arr;
            if (v.get_array().get(arr) == simdjson::SUCCESS) {
              if (arr.raw_json().get(ev->input_dims)) {
              }
            }
          }
          break;
        case 'O':
          if (KeyIs(k, "Out msg nelems") && ReadInt(v, &i)) ev->out_msg_nelems = i;
          break;
        case 'G':
          if (KeyIs(k, "Group size") && ReadInt(v, &i)) ev->group_size = static_cast<int32_t>(i);
          break;
        case 'P':
          if (KeyIs(k, "Process Group Ranks")) {
            if (v.get_string().get(ev->pg_ranks) != simdjson::SUCCESS) {
              od::array arr;
              if (v.get_array().get(arr) == simdjson::SUCCESS) {
                if (arr.raw_json().get(ev->pg_ranks)) {
                }
              }
            }
          } else if (KeyIs(k, "Process Group Name")) {
            if (v.get_string().get(ev->pg_name)) {
            }
          } else if (KeyIs(k, "Python id")) {
            if (ReadInt(v, &i)) ev->python_id = i;
          } else if (KeyIs(k, "Python parent id")) {
            if (ReadInt(v, &i)) ev->python_parent_id = i;
          }
          break;
        case 'b':
          if (KeyIs(k, "bytes") && ReadInt(v, &i)) ev->bytes = i;
          break;
        default:
          break;
      }
    }
    return simdjson::SUCCESS;
  }

  const std::string& name_;
  const ReaderTuning& tuning_;
  EventSink* sink_;
  ReadStats* stats_;
  const char* bad_why_ = nullptr;  // the malformed event just decoded, before its offset is known
  ByteSource* src_ = nullptr;

  std::vector<char> buf_;
  size_t start_ = 1;   // buf_[start_] holds stream byte base_
  uint64_t base_ = 0;  // stream offset of buf_[start_]
  size_t len_ = 0;
  uint64_t pos_ = 0;  // stream offset of the next byte the source yields
  // The segment being parsed: seg_ holds its first byte, seg_[-1] its framing '['; seg_cap_
  // bytes from seg_ - 1 are usable by simdjson. win_ holds stream bytes [win_base_,
  // win_base_ + win_len_), for locating errors.
  char* seg_ = nullptr;
  size_t seg_cap_ = 0;
  const char* prefetch_ = nullptr;  // mapped input: the next segment's bytes not yet prefetched
  const char* prefetch_end_ = nullptr;
  const char* win_ = nullptr;
  uint64_t win_base_ = 0;
  size_t win_len_ = 0;
  std::vector<std::pair<std::string, uint64_t>> unknown_cats_;
};

}  // namespace

Status DecodeEvents(const std::string& name, const ReaderTuning& tuning, const ScanResult& scan,
                    ByteSource* src, char* map, size_t map_size, EventSink* sink,
                    ReadStats* stats) {
  EventDecoder decoder(name, tuning, sink, stats);
  return decoder.Run(src, scan, map, map_size);
}

}  // namespace perftracker::trace::internal
