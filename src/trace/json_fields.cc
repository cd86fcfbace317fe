// The out-of-line field readers of json_fields.h.
#include "trace/json_fields.h"

#include <climits>

namespace perftracker::trace::internal {

int64_t HashId(std::string_view s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: stable across runs and builds
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return static_cast<int64_t>(h & 0x7fffffffffffffffull);  // never -1, never negative
}

[[gnu::noinline]] bool ReadIntSlow(od::value& v, int64_t* out) {
  double d;
  if (v.get_double().get(d) == simdjson::SUCCESS && d > -9.2e18 && d < 9.2e18) {
    *out = static_cast<int64_t>(d);
    return true;
  }
  uint64_t u;
  if (v.get_uint64().get(u) == simdjson::SUCCESS) {
    *out = static_cast<int64_t>(u >> 1);  // beyond int64: keep something ordered
    return true;
  }
  return false;
}

[[gnu::noinline]] bool ReadIdString(od::value& v, int64_t* out) {
  std::string_view s;
  if (v.get_string().get(s) == simdjson::SUCCESS) {
    *out = HashId(s);
    return true;
  }
  return false;
}

// A string, or the raw text of a number (pg_name is "0" in some traces and 0 in others).
bool ReadText(od::value& v, std::string* out) {
  std::string_view s;
  if (v.get_string().get(s) == simdjson::SUCCESS) {
    out->assign(s);
    return true;
  }
  if (v.type().error() == simdjson::SUCCESS) {
    s = v.raw_json_token();
    while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' ||
                          s.back() == '\t' || s.back() == ',')) {
      s.remove_suffix(1);
    }
    out->assign(s);
    return true;
  }
  return false;
}

// Rank lists: a JSON array of integers, or a string such as "[0, 1]".
void ReadRanks(od::value& v, std::vector<int>* out) {
  out->clear();
  od::array arr;
  if (v.get_array().get(arr) == simdjson::SUCCESS) {
    for (auto el : arr) {
      od::value ev;
      int64_t r;
      if (el.get(ev) == simdjson::SUCCESS && ReadInt(ev, &r)) out->push_back(static_cast<int>(r));
    }
    return;
  }
  std::string_view s;
  if (v.get_string().get(s) != simdjson::SUCCESS) return;
  int64_t cur = -1;
  for (char c : s) {
    if (c >= '0' && c <= '9') {
      cur = (cur < 0 ? 0 : cur) * 10 + (c - '0');
      if (cur > INT_MAX) cur = INT_MAX;
    } else if (cur >= 0) {
      out->push_back(static_cast<int>(cur));
      cur = -1;
    }
  }
  if (cur >= 0) out->push_back(static_cast<int>(cur));
}

size_t RepairUnescapedQuotes(char* data, size_t len) {
  size_t turned = 0;
  bool in_string = false;
  for (size_t i = 0; i < len; ++i) {
    const char c = data[i];
    if (!in_string) {
      in_string = c == '"';
      continue;
    }
    if (c == '\\') {
      ++i;  // the escaped byte, whatever it is
      continue;
    }
    if (c != '"') continue;
    size_t j = i + 1;
    while (j < len && (data[j] == ' ' || data[j] == '\t' || data[j] == '\n' || data[j] == '\r'))
      ++j;
    if (j == len || data[j] == ',' || data[j] == ':' || data[j] == '}' || data[j] == ']') {
      in_string = false;
    } else {
      data[i] = '\'';
      ++turned;
    }
  }
  return turned;
}

}  // namespace perftracker::trace::internal
