// A small streaming JSON writer for reports: objects, arrays, strings (every control character
// escaped, invalid UTF-8 replaced by U+FFFD so output always parses), numbers printed with up to
// 10 significant digits (integers exactly), non-finite numbers as null. Misuse (a value where a
// key is due) is a programming error and asserts; the writer never throws.
#ifndef PERFTRACKER_BASE_JSON_WRITER_H_
#define PERFTRACKER_BASE_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace perftracker {

class JsonWriter {
 public:
  // indent = 0 writes compact JSON; > 0 pretty-prints with that many spaces per level.
  explicit JsonWriter(int indent = 0) : indent_(indent) {}

  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(std::string_view key);
  JsonWriter& String(std::string_view value);
  JsonWriter& Number(double value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();

  const std::string& str() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  struct Frame {
    bool object = false;
    int count = 0;
  };
  void BeforeValue();
  void Close(bool object, char c);
  void Newline();

  int indent_;
  std::string out_;
  std::vector<Frame> stack_;
  bool after_key_ = false;
};

// Appends `s` as a quoted JSON string literal to *out.
void AppendJsonString(std::string_view s, std::string* out);
// Formats a number the way JsonWriter::Number does ("null" when not finite).
std::string FormatJsonNumber(double value);

}  // namespace perftracker

#endif  // PERFTRACKER_BASE_JSON_WRITER_H_
