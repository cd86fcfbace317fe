// Pass 1 of the trace reader (trace_scanner.h): the structural scan. Its bytes come from
// ScanInput (scan_input.h); the values it reads whole, ScannedValueParser parses
// (scanned_values.h).
#include "trace/trace_scanner.h"

#include <algorithm>
#include <string>
#include <vector>

#include "base/limits.h"
#include "trace/ascii.h"
#include "trace/block_classifier.h"
#include "trace/scan_input.h"
#include "trace/scanned_values.h"

namespace perftracker::trace::internal {
namespace {

// Deepest nesting accepted: far past any trace, and it bounds the bracket stack of a hostile file.
constexpr size_t kMaxDepth = limits::kMaxJsonDepth;
// Blocks classified per call of the classifier: reading blocks in runs lets the machine's vector
// width pay off.
constexpr size_t kBatchBlocks = 8;

// The JSON type of a value that starts with `c`, for messages; null when no value starts so.
const char* TypeName(unsigned char c) {
  switch (c) {
    case '"':
      return "a string";
    case 't':
    case 'f':
      return "a boolean";
    case 'n':
      return "null";
    case '{':
      return "an object";
    case '[':
      return "an array";
    default:
      if (c == '-' || (c >= '0' && c <= '9')) return "a number";
      return nullptr;
  }
}

// Pass 1 over one trace; its state carries from one chunk of input to the next.
class TraceScanner {
 public:
  TraceScanner(const std::string& name, const ReaderTuning& tuning, ScanResult* out)
      : name_(name),
        tuning_(tuning),
        out_(out),
        in_(name, tuning),
        values_(name, out),
        classify_(tuning.classifier < 0 ? BestClassifier() : Classifier(tuning.classifier)) {
    if (classify_ == nullptr) classify_ = BestClassifier();
  }

  // `map` (with `map_size` bytes and kPad more after them) is the whole input when the source is
  // mapped; null to stream it through Read.
  Status Run(ByteSource* src, const char* map, size_t map_size) {
    stack_.reserve(64);
    PT_RETURN_IF_ERROR(in_.Feed(src, map, map_size, [this](size_t from) { return Scan(from); }));
    return Finish();
  }

 private:
  Status Finish() {
    const uint64_t total = in_.total();
    out_->bytes = total;
    if (top_ == kTopStart) return InvalidArgument(name_ + ": empty file");
    if (top_ != kTopDone || in_string_) return Error(total, "unexpected end of input");
    if (!out_->meta.legacy_format && !out_->have_events) {
      return InvalidArgument(name_ + ": no traceEvents array");
    }
    out_->events_end = events_end_;
    return Status::Ok();
  }

  enum Top : uint8_t {
    kTopStart,
    kTopKey,
    kTopColon,
    kTopValue,
    kTopInValue,
    kTopAfterValue,
    kTopDone
  };

  uint64_t Abs(size_t i) const { return in_.base() + i; }

  Status Error(uint64_t at, const std::string& what) const {
    return MalformedJson(name_, at, what);
  }

  Status Push(char c, uint64_t at) {
    if (stack_.size() >= kMaxDepth) return Error(at, "nesting deeper than 1024");
    stack_.push_back(c == '{' ? '}' : ']');
    return Status::Ok();
  }
  Status Pop(char c, uint64_t at) {
    if (stack_.empty() || stack_.back() != c) {
      return Error(at, std::string("unexpected '") + c + "'");
    }
    stack_.pop_back();
    return Status::Ok();
  }

  Status Scan(size_t from) {
    batch_n_ = 0;  // the bytes past the last scan's end were not there yet
    const auto* const begin = reinterpret_cast<const unsigned char*>(in_.data());
    const auto* p = begin + from;
    const auto* const end = begin + in_.len();
    while (p < end) {
      if (stack_.size() > fast_depth_ && !slow_nested_) {
        PT_RETURN_IF_ERROR(Nested(p, begin, end));
        continue;
      }
      if (in_string_) {
        if (escape_) {
          escape_ = false;
          ++p;
          continue;
        }
        p = SkipInString(p, end);
        if (p == end) break;
        const unsigned char c = *p++;
        if (c == '\\') {
          escape_ = true;
        } else if (c == '#') {
          if (events_active_ && stack_.size() > ev_depth_) candidate_ = true;
        } else {
          in_string_ = false;
          if (stack_.size() <= fast_depth_) PT_RETURN_IF_ERROR(StringEnd(Abs(p - begin)));
        }
        continue;
      }
      if (stack_.size() > fast_depth_) {
        // Inside an event or a nested top-level value: only strings and brackets matter here;
        // simdjson validates the rest when it parses the value. Strings are skipped inline.
        for (;;) {
          p = SkipOrdinary(p, end);
          if (p == end) break;
          const unsigned char c = *p++;
          if (c == '"') {
            for (;;) {
              p = SkipInString(p, end);
              if (p == end) {
                in_string_ = true;
                break;
              }
              const unsigned char sc = *p++;
              if (sc == '"') break;
              if (sc == '#') {
                if (events_active_ && stack_.size() > ev_depth_) candidate_ = true;
                continue;
              }
              if (p == end) {  // a backslash ends the chunk: its escapee comes next time
                in_string_ = true;
                escape_ = true;
                break;
              }
              ++p;
            }
            if (in_string_) break;
            continue;
          }
          if (c == '{' || c == '[') {
            if (stack_.size() >= kMaxDepth) return Error(Abs(p - 1 - begin), "nesting too deep");
            stack_.push_back(c == '{' ? '}' : ']');
            continue;
          }
          if (stack_.back() != c)
            return Error(Abs(p - 1 - begin),
                         std::string("unexpected '") + static_cast<char>(c) + "'");
          stack_.pop_back();
          if (stack_.size() == fast_depth_) {
            PT_RETURN_IF_ERROR(NestedEnd(Abs(p - begin)));
            break;
          }
        }
        continue;
      }
      PT_RETURN_IF_ERROR(Slow(*p, Abs(p - begin)));
      ++p;
    }
    return Status::Ok();
  }

  // Inside an event or a nested top-level value (depth > fast_depth_), 64 bytes at a time: only
  // strings and brackets matter here; simdjson validates the rest when it parses the value.
  // Advances `p` to `end`, or to just past the bracket that closes the value (after handling
  // it). A backslash outside a string (broken JSON) hands the rest of the value to the
  // byte-at-a-time loop in Scan, which reports errors exactly as it always has.
  Status Nested(const unsigned char*& p, const unsigned char* begin, const unsigned char* end) {
    uint64_t in_str = in_string_ ? ~uint64_t{0} : 0;
    uint64_t esc = escape_ ? 1 : 0;
    const bool track_hash = events_active_;
    while (p < end) {
      const size_t avail = static_cast<size_t>(end - p);
      const uint64_t valid = avail >= 64 ? ~uint64_t{0} : (uint64_t{1} << avail) - 1;
      // Masks come from a batch classified ahead, while the blocks follow each other.
      if (p != batch_next_ || batch_i_ >= batch_n_) {
        batch_n_ = std::min(kBatchBlocks, (avail + 63) / 64);
        batch_i_ = 0;
        classify_(p, batch_n_, batch_);
      }
      const BlockMasks& m = batch_[batch_i_++];
      batch_next_ = p + 64;
      uint64_t escaped = 0;
      uint64_t next_esc = 0;
      uint64_t str;  // string bytes and opening quotes
      if (avail >= 64 && (m.backslash | esc) == 0) {
        // A whole block with nothing escaped (the common case): the classifier's prefix XOR is
        // the string mask, and a block without brackets only carries the string state on.
        str = m.quote_prefix ^ in_str;
        if (m.bracket == 0) {
          if (track_hash && (m.hash & str) != 0) candidate_ = true;
          in_str = static_cast<uint64_t>(static_cast<int64_t>(str) >> 63);
          p += 64;
          continue;
        }
      } else {
        const uint64_t backslash = m.backslash & valid;
        escaped = EscapedBytes(backslash, esc, avail, &next_esc);
        const uint64_t quote = m.quote & valid & ~escaped;
        str = PrefixXor(quote) ^ in_str;
        if ((backslash & ~str) != 0) {
          in_string_ = in_str != 0;
          escape_ = esc != 0;
          slow_nested_ = true;
          return Status::Ok();
        }
      }
      uint64_t hash = track_hash ? (m.hash & valid & str & ~escaped) : 0;
      const size_t in_block = std::min<size_t>(avail, 64);
      uint64_t structural = m.bracket & valid & ~str;
      while (structural != 0) {
        const int i = __builtin_ctzll(structural);
        structural &= structural - 1;
        const unsigned char c = p[i];
        if (c == '{' || c == '[') {
          if (stack_.size() >= kMaxDepth) return Error(Abs(p + i - begin), "nesting too deep");
          stack_.push_back(c == '{' ? '}' : ']');
          continue;
        }
        if (stack_.back() != c) {
          return Error(Abs(p + i - begin),
                       std::string("unexpected '") + static_cast<char>(c) + "'");
        }
        stack_.pop_back();
        if (stack_.size() == fast_depth_) {
          const uint64_t upto = (uint64_t{2} << i) - 1;  // bits 0..i (all of them for i = 63)
          if ((hash & upto) != 0) candidate_ = true;
          if (events_active_) {
            // The common case between events, `}, {` with whitespace around the comma inside
            // this block: end this event and start the next one right here, keeping the block's
            // masks (nothing between the two brackets is a quote or a bracket).
            const size_t j = NextObjectInBlock(p, static_cast<size_t>(i) + 1, in_block);
            if (j != 0) {
              hash &= ~upto;
              PT_RETURN_IF_ERROR(NestedEnd(Abs(p + i + 1 - begin)));
              expect_element_ = true;
              ElementStart(Abs(p + j - begin), true);
              stack_.push_back('}');         // back to the depth just closed, which was allowed
              structural &= structural - 1;  // that '{' is bit j, the next one set
              continue;
            }
          }
          p += i + 1;
          in_string_ = false;
          escape_ = false;
          return NestedEnd(Abs(p - begin));
        }
      }
      if (hash != 0) candidate_ = true;
      in_str = static_cast<uint64_t>(static_cast<int64_t>(str) >> 63);
      esc = next_esc;
      p += std::min<size_t>(avail, 64);
    }
    in_string_ = in_str != 0;
    escape_ = esc != 0;
    return Status::Ok();
  }

  // With p[k - 1] the '}' closing an event, the position of the '{' opening the next one when
  // only whitespace, one ',' and whitespace lie between them, all before p[n]; 0 otherwise.
  static size_t NextObjectInBlock(const unsigned char* p, size_t k, size_t n) {
    while (k < n && kTables.cls[p[k]] == kWs) ++k;
    if (k >= n || p[k] != ',') return 0;
    ++k;
    while (k < n && kTables.cls[p[k]] == kWs) ++k;
    if (k >= n || p[k] != '{') return 0;
    return k;
  }

  // A string closed at a depth we track (`end` is just past its closing quote).
  Status StringEnd(uint64_t end) {
    if (events_active_) {
      if (stack_.size() == ev_depth_) ElementEnd(end);  // a string as an event: pass 2 counts it
      return Status::Ok();
    }
    if (top_ == kTopKey) {
      key_.assign(in_.View(key_start_, end - 1));
      in_.Drop();
      top_ = kTopColon;
      return Status::Ok();
    }
    if (top_ == kTopInValue) return ValueEnd(end);
    return Status::Ok();
  }

  // A nested object/array closed back to the depth we track.
  Status NestedEnd(uint64_t end) {
    slow_nested_ = false;
    if (events_active_) {
      ElementEnd(end);
      return Status::Ok();
    }
    return ValueEnd(end);
  }

  void ElementStart(uint64_t at, bool keep) {
    expect_element_ = false;
    ++elements_;
    element_start_ = at;
    if (keep) in_.Keep(at);  // scalars need no bytes kept: they never reach ElementEnd
    candidate_ = false;
    if (out_->cuts.empty() || at - out_->cuts.back() >= tuning_.segment_bytes) {
      out_->cuts.push_back(at);
    }
  }

  void ElementEnd(uint64_t end) {
    in_.Drop();
    if (candidate_) values_.StepCandidate(in_.View(element_start_, end));
    candidate_ = false;
  }

  // One byte at a depth where the top-level object or the event array is being walked.
  Status Slow(unsigned char c, uint64_t at) {
    const uint8_t k = kTables.cls[c];
    if (events_active_) {
      switch (k) {
        case kWs:
          return Status::Ok();
        case kComma:
          if (expect_element_) return Error(at, "unexpected ',' in the event array");
          expect_element_ = true;
          return Status::Ok();
        case kClose:
          if (c == ']' && expect_element_ && elements_ > 0) {
            return Error(at, "trailing ',' in the event array");
          }
          PT_RETURN_IF_ERROR(Pop(static_cast<char>(c), at));
          events_active_ = false;
          events_end_ = at;
          in_.Drop();
          if (out_->meta.legacy_format) {
            top_ = kTopDone;
            fast_depth_ = 0;
          } else {
            top_ = kTopAfterValue;
            fast_depth_ = 1;
          }
          return Status::Ok();
        case kColon:
          return Error(at, "unexpected ':' in the event array");
        default:
          if (!expect_element_) {
            if (k == kOrd) return Status::Ok();  // rest of a scalar; simdjson judges it
            return Error(at, "missing ',' between events");
          }
          ElementStart(at, k == kOpen || k == kQuote);
          if (k == kOpen) return Push(static_cast<char>(c), at);
          if (k == kQuote) in_string_ = true;
          return Status::Ok();
      }
    }
    if (stack_.empty()) {  // depth 0
      if (k == kWs) return Status::Ok();
      if (top_ == kTopDone) return Error(at, "unexpected data after the top-level value");
      if (at == 0 && c == 0xef) {  // UTF-8 byte order mark
        bom_ = 1;
        return Status::Ok();
      }
      if (bom_ > 0 && bom_ < 3 && at == static_cast<uint64_t>(bom_)) {
        ++bom_;
        return Status::Ok();
      }
      top_ = kTopKey;  // anything but whitespace: the file is not empty
      if (c == '{') return Push('{', at);
      if (c == '[') {
        out_->meta.legacy_format = true;
        PT_RETURN_IF_ERROR(Push('[', at));
        StartEvents();
        return Status::Ok();
      }
      const char* type = TypeName(c);
      if (type == nullptr) return Error(at, "unexpected character");
      return InvalidArgument(name_ + ": top-level value is " + type +
                             ", expected an object with traceEvents or a list of events");
    }
    // Depth 1 of a Kineto object.
    switch (top_) {
      case kTopKey:
        if (k == kWs) return Status::Ok();
        if (c == '"') {
          in_string_ = true;
          key_start_ = at + 1;
          in_.Keep(at);
          return Status::Ok();
        }
        if (c == '}') return CloseTop(at);
        return Error(at, "expected a key");
      case kTopColon:
        if (k == kWs) return Status::Ok();
        if (c == ':') {
          top_ = kTopValue;
          return Status::Ok();
        }
        return Error(at, "expected ':'");
      case kTopValue:
        if (k == kWs) return Status::Ok();
        if (k == kClose || k == kComma || k == kColon) return Error(at, "expected a value");
        if (key_ == "traceEvents") {
          if (c != '[') {
            return InvalidArgument(name_ + ": traceEvents is " +
                                   (TypeName(c) ? TypeName(c) : "not a value") +
                                   ", expected an array");
          }
          PT_RETURN_IF_ERROR(Push('[', at));
          StartEvents();
          top_ = kTopInValue;
          return Status::Ok();
        }
        value_start_ = at;
        capture_ = ScannedValueParser::IsMetadataKey(key_);
        if (capture_) in_.Keep(at);
        top_ = kTopInValue;
        if (k == kQuote) in_string_ = true;
        if (k == kOpen) return Push(static_cast<char>(c), at);
        return Status::Ok();
      case kTopInValue:  // a scalar at depth 1
        if (k == kWs || k == kComma || c == '}') {
          PT_RETURN_IF_ERROR(ValueEnd(at));
          return Slow(c, at);
        }
        return Status::Ok();
      case kTopAfterValue:
        if (k == kWs) return Status::Ok();
        if (c == ',') {
          top_ = kTopKey;
          return Status::Ok();
        }
        if (c == '}') return CloseTop(at);
        return Error(at, "expected ',' or '}'");
      default:
        return Error(at, "unexpected character");
    }
  }

  Status CloseTop(uint64_t at) {
    PT_RETURN_IF_ERROR(Pop('}', at));
    top_ = kTopDone;
    fast_depth_ = 0;
    return Status::Ok();
  }

  void StartEvents() {
    out_->have_events = true;
    events_active_ = true;
    ev_depth_ = stack_.size();
    fast_depth_ = ev_depth_;
    expect_element_ = true;
    elements_ = 0;
  }

  Status ValueEnd(uint64_t end) {
    top_ = kTopAfterValue;
    if (!capture_) return Status::Ok();
    capture_ = false;
    in_.Drop();
    return values_.Metadata(key_, in_.View(value_start_, end), value_start_);
  }

  const std::string& name_;
  const ReaderTuning& tuning_;
  ScanResult* out_;
  ScanInput in_;               // the bytes, mapped or streamed
  ScannedValueParser values_;  // the values parsed whole: metadata, step markers
  ClassifyFn classify_;


  // Block masks classified ahead by Nested: batch_[batch_i_] describes the 64 bytes at
  // batch_next_ (when Nested goes on there), the next ones the blocks after it.
  BlockMasks batch_[kBatchBlocks];
  const unsigned char* batch_next_ = nullptr;
  size_t batch_i_ = 0;
  size_t batch_n_ = 0;

  std::vector<char> stack_;  // expected closing brackets
  bool in_string_ = false;
  bool escape_ = false;
  bool slow_nested_ = false;  // the byte loop, not Nested, handles the value being walked
  int bom_ = 0;
  Top top_ = kTopStart;
  size_t fast_depth_ = 1;  // deeper than this, only strings and brackets are tracked

  std::string key_;
  uint64_t key_start_ = 0;
  uint64_t value_start_ = 0;
  bool capture_ = false;

  bool events_active_ = false;
  size_t ev_depth_ = 0;
  bool expect_element_ = false;
  uint64_t elements_ = 0;
  uint64_t element_start_ = 0;
  bool candidate_ = false;
  uint64_t events_end_ = 0;

};

}  // namespace

Status ScanTrace(const std::string& name, const ReaderTuning& tuning, ByteSource* src,
                 const char* map, size_t map_size, ScanResult* out) {
  TraceScanner scanner(name, tuning, out);
  return scanner.Run(src, map, map_size);
}

}  // namespace perftracker::trace::internal
