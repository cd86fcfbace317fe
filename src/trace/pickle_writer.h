// Writes plain data as a Python pickle (protocol 2), the form torch's Flight Recorder dumps take
// and PyTorch's own analyzer (torch.distributed.flight_recorder.fr_trace) loads: dicts, lists,
// tuples, strings, integers, floats, booleans and None, never an opcode that names a Python
// object. Streamed: a container is opened, its items written, then closed; the writer keeps the
// open containers alone. Strings are written as valid UTF-8 (U+FFFD for a bad byte: Python's
// loader refuses invalid text). trace/pickle.h reads what it writes.
//   PickleWriter w; w.OpenDict(); w.String("a"); w.Int(7); w.Close();
//   *w.Finish() == "\x80\x02}(X\x01\x00\x00\x00" "aJ\x07\x00\x00\x00u."   (the dict {"a": 7})
#ifndef PERFTRACKER_TRACE_PICKLE_WRITER_H_
#define PERFTRACKER_TRACE_PICKLE_WRITER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace perftracker::trace {

class PickleWriter {
 public:
  PickleWriter();

  // A dict's items are written key, value, key, value, ...
  void OpenDict();
  void OpenList();
  void OpenTuple();
  void Close();

  void String(std::string_view s);
  void Int(int64_t v);
  void Float(double v);
  void Bool(bool v);
  void None();

  // The pickle; an error where a container is still open, a dict holds a key without its value,
  // or nothing (or more than one value) was written at the top.
  StatusOr<std::string> Finish();

 private:
  enum class Kind : uint8_t { kDict, kList, kTuple };
  struct Open {
    Kind kind;
    size_t items = 0;
  };
  void Item();

  std::string out_;
  std::vector<Open> open_;
  size_t top_ = 0;        // values written outside any container
  bool misused_ = false;  // Close() with nothing open
};

}  // namespace perftracker::trace

#endif  // PERFTRACKER_TRACE_PICKLE_WRITER_H_
