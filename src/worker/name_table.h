// The names of the functions a window's tracer sees, interned to the ids its CallTree keeps
// (worker/call_tree.h: a node holds a name id, never a string).
//
// The tracer asks for a name on every call, keyed by a pointer that stands for the function (a
// code object, a builtin's PyMethodDef): a direct-mapped cache in front of the hash map answers
// most lookups with one compare, and only a function's first call builds its name. Python-free:
// the extension (py/module.cc) builds the strings and keeps the keys' objects alive while the
// table holds them (a freed address could be reused by another function).
//
// Owns the names, the key -> id map and the cache; not thread-safe (the armed thread's, under the
// GIL). Memory grows with the distinct functions a window calls, and is freed at its end.
#ifndef PERFTRACKER_WORKER_NAME_TABLE_H_
#define PERFTRACKER_WORKER_NAME_TABLE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace perftracker::worker {

class NameTable {
 public:
  // Slots of the direct-mapped cache: more than the functions a training step's hot loop calls,
  // few enough (64 KB) to clear at every window's start and end.
  static constexpr size_t kCacheSlots = 4096;

  // The id of KEY's name if Add gave it one since the last Reset. KEY is never null (an empty
  // cache slot holds null). Inline: the tracer's hot path.
  bool Find(const void* key, uint32_t* id) {
    auto& slot = cache_[Slot(key)];
    if (slot.first == key) {
      *id = slot.second;
      return true;
    }
    auto it = ids_.find(key);
    if (it == ids_.end()) return false;
    slot = {key, it->second};
    *id = it->second;
    return true;
  }
  // KEY, not found, with its NAME: interned, and its new id returned.
  uint32_t Add(const void* key, std::string name);
  // A name without a key (the root's "", "<gc>"): its new id.
  uint32_t Intern(std::string name);
  // Forgets every name and key (a window's start).
  void Reset();
  // The names by id, moved out (a window's end); the table is Reset.
  std::vector<std::string> TakeNames();

  const std::vector<std::string>& names() const { return names_; }

 private:
  // Keys are objects at least 16 bytes apart (code objects, PyMethodDef arrays): the low four
  // bits would leave slots unused.
  static size_t Slot(const void* key) {
    return (reinterpret_cast<uintptr_t>(key) >> 4) % kCacheSlots;
  }

  std::unordered_map<const void*, uint32_t> ids_;
  std::array<std::pair<const void*, uint32_t>, kCacheSlots> cache_{};
  std::vector<std::string> names_;  // id -> name
};

}  // namespace perftracker::worker

#endif  // PERFTRACKER_WORKER_NAME_TABLE_H_
