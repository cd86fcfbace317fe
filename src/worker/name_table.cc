#include "worker/name_table.h"

namespace perftracker::worker {

uint32_t NameTable::Add(const void* key, std::string name) {
  const uint32_t id = Intern(std::move(name));
  ids_.emplace(key, id);
  cache_[Slot(key)] = {key, id};
  return id;
}

uint32_t NameTable::Intern(std::string name) {
  names_.push_back(std::move(name));
  return static_cast<uint32_t>(names_.size() - 1);
}

void NameTable::Reset() {
  names_.clear();
  ids_.clear();
  cache_.fill({nullptr, 0});
}

std::vector<std::string> NameTable::TakeNames() {
  std::vector<std::string> out = std::move(names_);
  Reset();
  return out;
}

}  // namespace perftracker::worker
