// A bounded reader of the plain-data subset of Python's pickle format, as torch's Flight Recorder
// writes its dumps (torch.distributed's _dump_fr_trace: dicts, lists, tuples, strings, ints,
// floats, booleans, None). It never executes anything: the opcodes that name or call Python
// objects (GLOBAL, REDUCE, BUILD, NEWOBJ, persistent ids, extensions) are refused with the
// offset where they stand. Every value becomes a node of one arena, so a memoized object that
// the pickle refers to many times is stored once; the node count and the nesting the stack may
// reach are bounded (limits.h) before anything is allocated for them.
//   ParsePickle("\x80\x02}q\x00X\x01\x00\x00\x00aK\x07s.") is the dict {"a": 7}
//   ParsePickle("\x80\x02cos\nsystem\n...") fails: "opcode 'c' (GLOBAL) at byte 2 names a Python
//   object; only plain data is read"
#ifndef PERFTRACKER_TRACE_PICKLE_H_
#define PERFTRACKER_TRACE_PICKLE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace perftracker::trace {

// One value of the pickle. Containers hold the arena indices of their items (a dict's items are
// key, value, key, value, ...): a pickle may refer to one object from many places, or to itself.
struct PickleNode {
  enum class Type : uint8_t { kNone, kBool, kInt, kFloat, kString, kBytes, kList, kTuple, kDict };
  Type type = Type::kNone;
  int64_t i = 0;  // kBool (0 or 1), kInt
  double f = 0;   // kFloat
  std::string s;  // kString (UTF-8), kBytes
  std::vector<uint32_t> items;
};

class PickleValue;

// A whole pickle: the arena and its root.
class Pickle {
 public:
  PickleValue root() const;
  size_t size() const { return nodes_.size(); }

 private:
  friend class PickleParser;
  friend class PickleValue;
  std::vector<PickleNode> nodes_;
  uint32_t root_ = 0;
};

// A read-only view of one node, with the lookups a reader of the dump needs. Looking up what is
// not there (a missing key, a value of another type) gives a kNone view, never an error: the
// reader decides what it requires.
class PickleValue {
 public:
  PickleValue(const Pickle* p, uint32_t index) : p_(p), index_(index) {}
  PickleNode::Type type() const { return node().type; }
  bool is_none() const { return type() == PickleNode::Type::kNone; }
  bool is_string() const { return type() == PickleNode::Type::kString; }
  bool is_int() const {
    return type() == PickleNode::Type::kInt || type() == PickleNode::Type::kBool;
  }
  // A list or a tuple (or a set: the reader gives its items in the pickle's order).
  bool is_sequence() const;
  bool is_dict() const { return type() == PickleNode::Type::kDict; }
  std::string_view str() const {
    return is_string() ? std::string_view(node().s) : std::string_view();
  }
  int64_t integer(int64_t otherwise = 0) const { return is_int() ? node().i : otherwise; }
  double number(double otherwise = 0) const;
  size_t length() const;            // items of a sequence, pairs of a dict; 0 otherwise
  PickleValue at(size_t i) const;   // item I of a sequence
  PickleValue key(size_t i) const;  // pair I of a dict
  PickleValue value(size_t i) const;
  PickleValue get(std::string_view key) const;  // the value of a string key of a dict

 private:
  const PickleNode& node() const { return p_->nodes_[index_]; }
  PickleValue none() const;
  const Pickle* p_;
  uint32_t index_;
};

// The parse of one buffer. NAME names the file in errors ("rank3.pkl: ...").
StatusOr<Pickle> ParsePickle(std::string_view bytes, const std::string& name);

}  // namespace perftracker::trace

#endif  // PERFTRACKER_TRACE_PICKLE_H_
