#include "diagnose/categories.h"

namespace perftracker::diagnose {

const char* CategoryName(Category c) {
  for (const CategoryInfo& i : kCategories)
    if (i.category == c) return i.name;
  return "unknown";  // not reached: every enumerator has its row
}

std::optional<Category> ParseCategory(std::string_view name) {
  for (const CategoryInfo& i : kCategories)
    if (name == i.name) return i.category;
  return std::nullopt;
}

}  // namespace perftracker::diagnose
