// The inputs' shapes of a CPU op (record_shapes' "Input Dims"), as the summary keeps them: a
// canonical text to show people and the inputs' element count to compare between ranks. Two
// ranks that run the same calls on inputs of different sizes do different work (data skew,
// padding, uneven sharding); timing alone reads that as a slow rank.
#ifndef PERFTRACKER_PATTERN_INPUT_SHAPES_H_
#define PERFTRACKER_PATTERN_INPUT_SHAPES_H_

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "pattern/string_id_map.h"

namespace perftracker::pattern {

// The longest canonical text kept: an op with many inputs (a fused optimizer step lists every
// parameter) is shown cut, with "...", while its element count still covers every input.
inline constexpr size_t kMaxInputDimsText = 120;

// Parses RAW, the JSON text of "Input Dims": one list of dimensions per input, [] for a scalar
// or a non-tensor argument, nested lists for a tensor list. E.g.
//   "[[8, 96,128], [], [96, 128]]"  ->  canonical "[8, 96, 128], [], [96, 128]",
//                                       elements 8*96*128 + 96*128 = 110592
// Anything but digits, commas, brackets and blanks (or unbalanced brackets, or a list nested
// more than 3 deep) is not a shape list: false, outputs untouched.
// PER_INPUT (optional) gets each input's element count: {98304, 0, 12288} above; NDIMS (optional)
// each input's number of dimensions (a tensor list's: its members'): {3, 0, 3}.
bool ParseInputDims(std::string_view raw, std::string* canonical, double* elements,
                    std::vector<double>* per_input = nullptr, std::vector<int>* ndims = nullptr);

// How much larger the data of the same call is in OWN than in OTHER, two canonical texts of one
// op: the ratio of the one input whose elements differ, when both list the same inputs with the
// same number of dimensions each and every other input is equal ("[256, 512], [512, 512]" vs
// "[64, 512], [512, 512]": 4.0, the batch beside the same weight). 0 when they are not the same
// call on other data: another call site of the op ("[262144]" vs "[1, 256]"; aten::mm's forward
// against its backward), two inputs that differ, or a text that does not parse (a cut one).
double DataInputRatio(std::string_view own, std::string_view other);

// Raw "Input Dims" texts, each parsed once (a record_shapes trace repeats a few thousand): its
// canonical text, by id, and its element count. At most MAX_RAW distinct raw texts; past them a
// new one is not parsed (raw texts may embed a growing length, as a counter in a name does).
class InputDimsCache {
 public:
  struct Parsed {
    uint32_t text = 0;  // Text(text); 0 is "", never a parsed shape list's id
    double elements = 0;
  };
  explicit InputDimsCache(size_t max_raw) : max_raw_(max_raw) { texts_.emplace_back(); }
  InputDimsCache(const InputDimsCache&) = delete;  // the maps hold views of the stores
  // RAW's shapes, or nullptr when RAW is no shape list or new past the bound.
  const Parsed* Find(std::string_view raw);
  const std::string& Text(uint32_t id) const { return texts_[id]; }

 private:
  size_t max_raw_;
  // The summarizer's string table (pattern/string_id_map.h): an event's raw text is looked up
  // as a view, never copied; the deques keep the keys' bytes where the maps' views point.
  std::deque<std::string> raw_store_;
  StringIdMap raw_ids_;        // raw text -> its index in parsed_
  std::deque<Parsed> parsed_;  // text 0: not a shape list
  std::deque<std::string> texts_;
  StringIdMap text_ids_;
};

// One function's input shapes over its calls: time per distinct shape (InputDimsCache ids),
// for the first kMaxShapes shapes (a sequence model padded to a few lengths has a handful; one
// called on every length has many, its commonest among the first), and the element count.
class ShapeTally {
 public:
  static constexpr size_t kMaxShapes = 16;
  void Add(uint32_t text, double elements, double dur_us);
  uint64_t calls() const { return calls_; }
  double MeanElements() const { return calls_ ? elements_ / static_cast<double>(calls_) : 0; }
  // The shape its time went to most (0: none).
  uint32_t Costliest() const;

 private:
  std::vector<std::pair<uint32_t, double>> us_;
  double elements_ = 0;
  uint64_t calls_ = 0;
};

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_INPUT_SHAPES_H_
