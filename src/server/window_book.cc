#include "server/window_book.h"

#include <iterator>
#include <utility>

namespace perftracker::server {

Window& WindowBook::Add(std::unique_ptr<Window> w) {
  const int64_t id = w->spec().id;
  auto& slot = windows_[id];
  slot = std::move(w);
  return *slot;
}

Window* WindowBook::Find(int64_t id) {
  auto it = windows_.find(id);
  return it == windows_.end() ? nullptr : it->second.get();
}

const Window* WindowBook::Find(int64_t id) const {
  auto it = windows_.find(id);
  return it == windows_.end() ? nullptr : it->second.get();
}

void WindowBook::ForgetOldClosed(int64_t keep) {
  size_t closed = 0;
  for (auto it = windows_.rbegin(); it != windows_.rend();) {
    if (it->second->closed() && ++closed > kKeptClosedWindows && it->first != keep) {
      it = decltype(it)(windows_.erase(std::next(it).base()));
    } else {
      ++it;
    }
  }
}

void WindowBook::AddMark(report::WindowMark m) {
  if (marks_.size() >= kMaxMarks) marks_.erase(marks_.begin());
  marks_.push_back(std::move(m));
}

void WindowBook::MemoryWindowDue(int rank, const std::string& reason) {
  if (!memory_due_) memory_due_ = DueMemoryWindow{reason, {}};
  std::vector<int>& r = memory_due_->ranks;
  if (std::find(r.begin(), r.end(), rank) == r.end()) r.push_back(rank);
}

std::optional<WindowBook::DueMemoryWindow> WindowBook::TakeMemoryWindow() {
  std::optional<DueMemoryWindow> due = std::move(memory_due_);
  memory_due_.reset();
  if (due) std::sort(due->ranks.begin(), due->ranks.end());
  return due;
}

}  // namespace perftracker::server
