#include "pattern/input_shapes.h"

#include <algorithm>
#include <vector>

namespace perftracker::pattern {

bool ParseInputDims(std::string_view raw, std::string* canonical, double* elements,
                    std::vector<double>* per_input, std::vector<int>* ndims) {
  // Depth 1 is the outer list; 2 an input's dims; 3 a tensor list's member.
  constexpr int kMaxDepth = 4;
  std::string out;
  double total = 0;
  std::vector<double> inputs;
  std::vector<int> dims;
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
    if (!dims.empty()) ++dims.back();
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
        if (depth == 2) {
          inputs.push_back(0);
          dims.push_back(0);
        }
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
  if (ndims != nullptr) *ndims = std::move(dims);
  return true;
}

double DataInputRatio(std::string_view own, std::string_view other) {
  std::string text;
  double total = 0;
  std::vector<double> a, b;
  std::vector<int> da, db;
  if (!ParseInputDims("[" + std::string(own) + "]", &text, &total, &a, &da) ||
      !ParseInputDims("[" + std::string(other) + "]", &text, &total, &b, &db) ||
      a.size() != b.size() || da != db)
    return 0;
  double ratio = 0;
  int differing = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    if (++differing > 1 || b[i] <= 0) return 0;
    ratio = a[i] / b[i];
  }
  return differing == 1 ? ratio : 1.0;
}

const InputDimsCache::Parsed* InputDimsCache::Find(std::string_view raw) {
  const StringIdMap::Entry* e = raw_ids_.Find(raw);
  if (e == nullptr) {
    if (parsed_.size() >= max_raw_) return nullptr;
    Parsed p;
    std::string text;
    if (ParseInputDims(raw, &text, &p.elements)) {
      if (const StringIdMap::Entry* t = text_ids_.Find(text)) {
        p.text = t->id;
      } else {
        p.text = static_cast<uint32_t>(texts_.size());
        text_ids_.Insert(texts_.emplace_back(std::move(text)), p.text);
      }
    }
    const auto id = static_cast<uint32_t>(parsed_.size());
    parsed_.push_back(p);
    raw_ids_.Insert(raw_store_.emplace_back(raw), id);
    return p.text == 0 ? nullptr : &parsed_.back();
  }
  const Parsed& p = parsed_[e->id];
  return p.text == 0 ? nullptr : &p;
}

void ShapeTally::Add(uint32_t text, double elements, double dur_us) {
  elements_ += elements;
  ++calls_;
  for (auto& [id, us] : us_) {
    if (id == text) {
      us += dur_us;
      return;
    }
  }
  if (us_.size() < kMaxShapes) us_.emplace_back(text, dur_us);
}

uint32_t ShapeTally::Costliest() const {
  auto top = std::max_element(us_.begin(), us_.end(),
                              [](const auto& a, const auto& b) { return a.second < b.second; });
  return top == us_.end() ? 0 : top->first;
}

}  // namespace perftracker::pattern
