#include "base/json_writer.h"

#include <cassert>
#include <cmath>
#include <cstdio>

#include "base/utf8.h"

namespace perftracker {

void AppendJsonString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      size_t n = Utf8SequenceLength(s, i);
      if (n == 0) {
        out->append("\xEF\xBF\xBD");  // U+FFFD for each invalid byte
        ++i;
      } else {
        out->append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out->append(buf);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out->push_back('"');
}

std::string FormatJsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  char buf[40];
  // Integers below 2^53 print exactly; everything else with 10 significant digits, which hides
  // binary noise such as 30.900000000000002 without losing anything a report needs.
  if (value == std::floor(value) && std::fabs(value) < 9007199254740992.0) {
    std::snprintf(buf, sizeof(buf), "%.0f", value);
    if (std::string_view(buf) == "-0") return "0";
  } else {
    std::snprintf(buf, sizeof(buf), "%.10g", value);
  }
  return buf;
}

void JsonWriter::Newline() {
  if (indent_ <= 0) return;
  out_.push_back('\n');
  out_.append(stack_.size() * indent_, ' ');
}

void JsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (stack_.empty()) return;
  assert(!stack_.back().object && "a value inside an object needs a Key() first");
  if (stack_.back().count++ > 0) out_.push_back(',');
  Newline();
}

JsonWriter& JsonWriter::Key(std::string_view key) {
  assert(!stack_.empty() && stack_.back().object && !after_key_);
  if (stack_.back().count++ > 0) out_.push_back(',');
  Newline();
  AppendJsonString(key, &out_);
  out_.append(indent_ > 0 ? ": " : ":");
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::BeginObject() {
  BeforeValue();
  out_.push_back('{');
  stack_.push_back({true, 0});
  return *this;
}

JsonWriter& JsonWriter::BeginArray() {
  BeforeValue();
  out_.push_back('[');
  stack_.push_back({false, 0});
  return *this;
}

void JsonWriter::Close(bool object, char c) {
  assert(!stack_.empty() && stack_.back().object == object && !after_key_);
  bool empty = stack_.back().count == 0;
  stack_.pop_back();
  if (!empty) Newline();
  out_.push_back(c);
}

JsonWriter& JsonWriter::EndObject() {
  Close(true, '}');
  return *this;
}

JsonWriter& JsonWriter::EndArray() {
  Close(false, ']');
  return *this;
}

JsonWriter& JsonWriter::String(std::string_view value) {
  BeforeValue();
  AppendJsonString(value, &out_);
  return *this;
}

JsonWriter& JsonWriter::Number(double value) {
  BeforeValue();
  out_.append(FormatJsonNumber(value));
  return *this;
}

JsonWriter& JsonWriter::Int(int64_t value) {
  BeforeValue();
  out_.append(std::to_string(value));
  return *this;
}

JsonWriter& JsonWriter::Bool(bool value) {
  BeforeValue();
  out_.append(value ? "true" : "false");
  return *this;
}

JsonWriter& JsonWriter::Null() {
  BeforeValue();
  out_.append("null");
  return *this;
}

}  // namespace perftracker
