#include "pattern/input_shapes.h"

#include <algorithm>
#include <vector>

namespace perftracker::pattern {

bool ParseInputDims(std::string_view raw, std::string* canonical, double* elements,
                    std::vector<double>* per_input) {
  // Depth 1 is the outer list; 2 an input's dims; 3 a tensor list's member.
  constexpr int kMaxDepth = 4;
  std::string out;
  double total = 0;
  std::vector<double> inputs;
  int depth = 0;
  double product = 1;         // of the innermost list being read
  bool list_has_dim = false;  // it holds a number (not [] : a scalar has no elements here)
  bool need_sep = false;      // the next item at this depth follows another
  bool in_number = false;
  double number = 0;
  auto end_number = [&] {
    if (!in_number) return;
    product *= number;
    list_has_dim = true;
    in_number = false;
  };
  for (char c : raw) {
    if (c >= '0' && c <= '9') {
      if (depth < 2) return false;  // a bare number in the outer list
      if (!in_number) {
        if (need_sep) out += ", ";
        in_number = true;
        number = 0;
      }
      number = number * 10 + (c - '0');
      out.push_back(c);
      need_sep = true;
      continue;
    }
    switch (c) {
      case '[':
        end_number();
        if (++depth > kMaxDepth) return false;
        if (depth == 2) inputs.push_back(0);
        if (depth >= 2) {
          if (need_sep) out += ", ";
          out.push_back('[');
        }
        product = 1;
        list_has_dim = false;
        need_sep = false;
        break;
      case ']':
        end_number();
        if (depth == 0) return false;
        if (list_has_dim) {
          total += product;
          if (!inputs.empty()) inputs.back() += product;
        }
        list_has_dim = false;
        product = 1;
        if (depth >= 2) out.push_back(']');
        --depth;
        need_sep = true;
        break;
      case ',':
        end_number();
        break;
      case ' ':
      case '\n':
      case '\t':
      case '\r':
        end_number();
        break;
      default:
        return false;
    }
  }
  if (depth != 0 || in_number) return false;
  if (out.size() > kMaxInputDimsText) {
    out.resize(kMaxInputDimsText);
    out += "...";
  }
  *canonical = std::move(out);
  *elements = total;
  if (per_input != nullptr) *per_input = std::move(inputs);
  return true;
}

double LargestInputRatio(std::string_view own, std::string_view other) {
  std::string text;
  double total = 0;
  std::vector<double> a, b;
  if (!ParseInputDims("[" + std::string(own) + "]", &text, &total, &a) ||
      !ParseInputDims("[" + std::string(other) + "]", &text, &total, &b) || a.size() != b.size())
    return 0;
  double ratio = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (b[i] > 0) ratio = std::max(ratio, a[i] / b[i]);
  return ratio;
}

}  // namespace perftracker::pattern
