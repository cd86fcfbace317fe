// The detector's news for Python: completed iterations, the triggers (slowdown, hang), learning
// and re-learning, and window files written or failed, queued by the training thread, the hang
// watchdog and the window writers, and taken by the Python client's thread (_worker.drain()).
//
// Bounded: a client that stops draining (stuck, or gone) must not grow a training process's
// memory. Past the bound the oldest news is dropped and counted (stats()'s news_dropped).
// Owns its items; not thread-safe (WindowControl guards it with its mutex).
#ifndef PERFTRACKER_WORKER_NEWS_QUEUE_H_
#define PERFTRACKER_WORKER_NEWS_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>

namespace perftracker::worker {

struct News {
  enum Kind { kIter, kSlowdown, kHang, kLearned, kRelearn, kWindowDone, kWindowFailed } kind;
  int64_t a = 0, b = 0;  // iter: start, end; slowdown: mean, best; hang: now, mean
  int64_t index = 0;
  bool clean = true;
  std::string text;  // learned: pattern; window done / failed: path
};

class NewsQueue {
 public:
  // The client drains every CLIENT_PERIOD_S (python/perftracker/config.py: half a second);
  // 10,000 items are seconds of a 1 ms step's iterations, and about 1 MB.
  static constexpr size_t kDefaultCapacity = 10000;

  explicit NewsQueue(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  // Queues N; when full, drops the oldest item first.
  void Push(News n) {
    if (items_.size() >= capacity_) {
      items_.pop_front();
      ++dropped_;
    }
    items_.push_back(std::move(n));
  }
  // Everything queued, oldest first; the queue is left empty.
  std::deque<News> TakeAll() {
    std::deque<News> out;
    out.swap(items_);
    return out;
  }
  // Forgets the queued items (a new install); the drop count stays.
  void Clear() { items_.clear(); }

  size_t size() const { return items_.size(); }
  size_t capacity() const { return capacity_; }
  uint64_t dropped() const { return dropped_; }

 private:
  size_t capacity_;
  std::deque<News> items_;
  uint64_t dropped_ = 0;
};

}  // namespace perftracker::worker

#endif  // PERFTRACKER_WORKER_NEWS_QUEUE_H_
