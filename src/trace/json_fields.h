// Field readers over simdjson On-Demand values, shared by both passes of the trace reader
// (trace_scanner.h's metadata, event_decoder.h's events): raw key matching, integers that may be
// written as doubles, ids that may be strings, text that may be a number, rank lists.
// Internal to the trace module. The readers on the per-event path are inline here so that they
// inline into the event loop; their rare cases are out of line in json_fields.cc.
#ifndef PERFTRACKER_TRACE_JSON_FIELDS_H_
#define PERFTRACKER_TRACE_JSON_FIELDS_H_

#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "trace/block_classifier.h"

namespace perftracker::trace::internal {

// Built without -mavx2 etc., simdjson::ondemand is simdjson::fallback::ondemand (its builtin
// implementation; -march=x86-64-v3 alone does not change that, it lacks PCLMUL). That costs
// nothing here: the parts that use SIMD, stage 1 and string unescaping, go through the
// runtime-selected implementation (haswell on AVX2 machines) either way, and the rest of
// On-Demand is the same scalar code in every implementation. Measured with the builtin forced
// to haswell (-march=x86-64-v3 -mpclmul): 964.4 M instructions per 54 MB trace against 963.6 M.
namespace od = simdjson::ondemand;

static_assert(kPad == simdjson::SIMDJSON_PADDING, "the reader's buffers carry simdjson's padding");

// A string id hashed to a stable non-negative integer (FNV-1a: the same across runs and builds).
int64_t HashId(std::string_view s);

// Matches a raw (still quoted) simdjson key against a literal without unescaping it.
template <size_t N>
inline bool KeyIs(const char* raw, const char (&lit)[N]) {
  return std::memcmp(raw, lit, N - 1) == 0 && raw[N - 1] == '"';
}

// Errors that mean a value of the wrong type or shape, not broken JSON.
inline bool IsValueError(simdjson::error_code e) {
  return e == simdjson::INCORRECT_TYPE || e == simdjson::NUMBER_ERROR ||
         e == simdjson::NUMBER_OUT_OF_RANGE || e == simdjson::NO_SUCH_FIELD;
}

bool ReadIntSlow(od::value& v, int64_t* out);

// Integer from a JSON number (integers, or doubles truncated). False on any other type.
// The common case stays small enough to inline into the event loop; the rest is out of line.
[[gnu::always_inline]] inline bool ReadInt(od::value& v, int64_t* out) {
  int64_t i;
  if (v.get_int64().get(i) == simdjson::SUCCESS) {
    *out = i;
    return true;
  }
  return ReadIntSlow(v, out);
}

// A string id, hashed (ReadId's rare case).
bool ReadIdString(od::value& v, int64_t* out);

// pid / tid: a number, or a string hashed to a stable integer.
[[gnu::always_inline]] inline bool ReadId(od::value& v, int64_t* out) {
  return ReadInt(v, out) || ReadIdString(v, out);
}

// A string, or the raw text of a number (pg_name is "0" in some traces and 0 in others).
bool ReadText(od::value& v, std::string* out);

// Rank lists: a JSON array of integers, or a string such as "[0, 1]".
void ReadRanks(od::value& v, std::vector<int>* out);

// Some torch versions' trace writers (2.13's Kineto export among them) copy names into the JSON
// without escaping their double quotes: "name": "say "hi"". Walks DATA as JSON text that starts
// outside any string and turns each quote that would end a string but is not followed (after
// whitespace) by one of , : } ] or the end of DATA into a ', in place: the name reads say 'hi'.
// Returns how many it turned. Valid JSON comes back unchanged (every closing quote of valid JSON
// is followed so), and so does every byte before the first quote it turns. A quote followed by
// one of those four (say "a", b) still ends the string there: such a name stays broken JSON.
size_t RepairUnescapedQuotes(char* data, size_t len);

}  // namespace perftracker::trace::internal

#endif  // PERFTRACKER_TRACE_JSON_FIELDS_H_
