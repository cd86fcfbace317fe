// The inputs' shapes of a CPU op (record_shapes' "Input Dims"), as the summary keeps them: a
// canonical text to show people and the inputs' element count to compare between ranks. Two
// ranks that run the same calls on inputs of different sizes do different work (data skew,
// padding, uneven sharding); timing alone reads that as a slow rank.
#ifndef PERFTRACKER_PATTERN_INPUT_SHAPES_H_
#define PERFTRACKER_PATTERN_INPUT_SHAPES_H_

#include <string>
#include <string_view>
#include <vector>

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
// PER_INPUT (optional) gets each input's element count: {98304, 0, 12288} above.
bool ParseInputDims(std::string_view raw, std::string* canonical, double* elements,
                    std::vector<double>* per_input = nullptr);

// The largest ratio between one input's elements in OWN and the same input's in OTHER, two
// canonical texts of the same op ("[256, 512], [512, 512]" vs "[64, 512], [512, 512]": 4.0):
// how much larger its data is where a large weight of the same size hides it in the total.
// 0 when either does not parse (a cut text) or they list different numbers of inputs.
double LargestInputRatio(std::string_view own, std::string_view other);

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_INPUT_SHAPES_H_
