// StringIdMap: strings to 32-bit ids in one flat open-addressing table, for the summarizer's
// per-event name lookups. A lookup hashes the key a word at a time and usually settles in one
// probe, where std::unordered_map hashed it with murmur and followed a node pointer; read +
// summarize got about 3% faster. The map stores views: whoever inserts a key keeps its bytes
// alive as long as the map.
#ifndef PERFTRACKER_PATTERN_STRING_ID_MAP_H_
#define PERFTRACKER_PATTERN_STRING_ID_MAP_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

namespace perftracker::pattern {

// The hash StringIdMap uses: a word at a time, two multiplies per word.
inline uint64_t HashMix(uint64_t h, uint64_t w) {
  h = (h ^ w) * 0xff51afd7ed558ccdull;
  return h ^ (h >> 32);
}

inline uint64_t HashBytes(std::string_view s) {
  uint64_t h = s.size() * 0x9e3779b97f4a7c15ull;
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = HashMix(h, w);
  }
  if (i < s.size()) {
    uint64_t w = 0;
    std::memcpy(&w, s.data() + i, s.size() - i);
    h = HashMix(h, w);
  }
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 29);
}

// HashBytes with four words in flight, for long keys (call stacks run to hundreds of bytes,
// a process group's member list to thousands): one chain of multiplies was a tenth of loading
// a large job. Short keys get HashBytes.
inline uint64_t HashBytesWide(std::string_view s) {
  if (s.size() < 64) return HashBytes(s);
  // Four scalar chains (written as an array, they became SSE code that emulates 64-bit
  // multiplies, slower than one chain).
  uint64_t a = s.size(), b = 0x9e3779b97f4a7c15ull, c = 0xc2b2ae3d27d4eb4full,
           d = 0x165667b19e3779f9ull;
  size_t i = 0;
  for (; i + 32 <= s.size(); i += 32) {
    uint64_t w0, w1, w2, w3;
    std::memcpy(&w0, s.data() + i, 8);
    std::memcpy(&w1, s.data() + i + 8, 8);
    std::memcpy(&w2, s.data() + i + 16, 8);
    std::memcpy(&w3, s.data() + i + 24, 8);
    a = HashMix(a, w0);
    b = HashMix(b, w1);
    c = HashMix(c, w2);
    d = HashMix(d, w3);
  }
  return HashMix(HashMix(HashMix(HashMix(HashBytes(s.substr(i)), a), b), c), d);
}

class StringIdMap {
 public:
  struct Entry {
    uint64_t hash = 0;
    const char* data = nullptr;
    uint32_t size = 0;
    uint32_t id = std::numeric_limits<uint32_t>::max();  // the maximum marks a free slot
    std::string_view key() const { return {data, size}; }
  };

  // The entry stored for `key` (its key() views the inserted bytes), or nullptr.
  const Entry* Find(std::string_view key) const {
    if (slots_.empty()) return nullptr;
    const uint64_t h = Hash(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Entry& s = slots_[i];
      if (s.id == kEmpty) return nullptr;
      if (s.hash == h && s.size == key.size() &&
          (key.empty() || std::memcmp(s.data, key.data(), key.size()) == 0)) {
        return &s;
      }
    }
  }

  // Stores `id` (below 2^32 - 1) for `key` unless the key is there already; returns the id the
  // map holds for it afterwards.
  uint32_t Insert(std::string_view key, uint32_t id) {
    if (const Entry* found = Find(key)) return found->id;
    if ((size_ + 1) * 2 > slots_.size()) Grow();
    Place({Hash(key), key.data(), static_cast<uint32_t>(key.size()), id});
    ++size_;
    return id;
  }

  size_t size() const { return size_; }

 private:
  static constexpr uint32_t kEmpty = std::numeric_limits<uint32_t>::max();

  using Slot = Entry;

  static uint64_t Hash(std::string_view s) { return HashBytes(s); }

  void Place(const Slot& slot) {
    size_t i = slot.hash & mask_;
    while (slots_[i].id != kEmpty) i = (i + 1) & mask_;
    slots_[i] = slot;
  }

  void Grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.id != kEmpty) Place(s);
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_STRING_ID_MAP_H_
