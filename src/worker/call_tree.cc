#include "worker/call_tree.h"

#include <algorithm>
#include <bit>

namespace perftracker::worker {

CallTree::CallTree(const CallTreeLimits& limits) : limits_(limits) {
  nodes_.resize(2);  // kRoot, kOther
  frames_.reserve(64);
}

uint32_t CallTree::Child(uint32_t parent, uint32_t name, bool gc) {
  if (parent == kOther) return kOther;  // nothing is created below the overflow node
  CallNode& p = nodes_[parent];
  if (p.last_child_name == name && nodes_[p.last_child].gc == gc) return p.last_child;
  const uint64_t key = (static_cast<uint64_t>(parent) << 32) | name;
  auto it = children_.find(key);
  uint32_t id;
  if (it != children_.end() && nodes_[it->second].gc == gc) {
    id = it->second;
  } else if (nodes_.size() >= limits_.max_nodes) {
    return kOther;
  } else {
    id = static_cast<uint32_t>(nodes_.size());
    CallNode& n = nodes_.emplace_back();
    n.parent = parent;
    n.name = name;
    n.gc = gc;
    children_[key] = id;
  }
  CallNode& pp = nodes_[parent];  // emplace_back may have moved it
  pp.last_child_name = name;
  pp.last_child = id;
  return id;
}

uint32_t CallTree::Current() const {
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it)
    if (it->traced) return it->node;
  return kRoot;
}

void CallTree::Enter(uint32_t name, int64_t now) {
  if (muted_depth_ > 0) {
    ++muted_depth_;
    return;
  }
  const uint32_t node = static_cast<int>(frames_.size()) >= limits_.max_depth
                            ? kOther
                            : Child(Current(), name, /*gc=*/false);
  frames_.push_back({node, true, false, false, false, iteration_, now, 0});
}

void CallTree::EnterC(uint32_t name, int64_t now) {
  if (muted_depth_ > 0) {
    ++muted_depth_;
    return;
  }
  Enter(name, now);
  frames_.back().c_call = true;
}

void CallTree::Resync(const std::vector<uint32_t>& python_stack, int64_t now) {
  // A muted call's returns were missed with the rest: its placeholder goes with the stale frames.
  muted_depth_ = 0;
  // The open Python calls that match the stack's outermost frames, and the C calls between
  // them, stay; everything above the last match is stale.
  size_t matched = 0, keep = 0;
  for (size_t i = 0; i < frames_.size(); ++i) {
    const Frame& f = frames_[i];
    if (!f.traced || f.gc || f.c_call) continue;
    if (matched >= python_stack.size() || f.node == kOther ||
        nodes_[f.node].name != python_stack[matched])
      break;
    ++matched;
    keep = i + 1;
  }
  while (frames_.size() > keep) {
    const Frame f = frames_.back();
    frames_.pop_back();
    if (f.traced) Close(f, now);
  }
  for (size_t k = matched; k < python_stack.size(); ++k) EnterInProgress(python_stack[k], now);
}

void CallTree::EnterInProgress(uint32_t name, int64_t now) {
  muted_depth_ = 0;  // only ever at a window's start or a resync
  Enter(name, now);
  frames_.back().in_progress = true;
}

void CallTree::EnterUntraced() {
  if (muted_depth_ > 0) {
    ++muted_depth_;
    return;
  }
  ++stats_.untraced_calls;
  frames_.push_back({kRoot, false, false, false, false, iteration_, 0, 0});
}

void CallTree::EnterMuted() {
  if (muted_depth_ > 0) {
    ++muted_depth_;
    return;
  }
  frames_.push_back({kRoot, false, false, false, false, iteration_, 0, 0});
  muted_depth_ = 1;
}

void CallTree::EnterGc(uint32_t name, int64_t now) {
  // A collection inside a muted call is the collector's: muted too (its end is found by depth).
  if (muted_depth_ > 0) {
    ++muted_depth_;
    return;
  }
  const uint32_t node = static_cast<int>(frames_.size()) >= limits_.max_depth
                            ? kOther
                            : Child(Current(), name, /*gc=*/true);
  frames_.push_back({node, true, true, false, false, iteration_, now, 0});
}

void CallTree::Exit(int64_t now) {
  // Inside a muted call: its own return (depth 1) takes its placeholder off.
  if (muted_depth_ > 0 && --muted_depth_ > 0) return;
  if (frames_.empty()) {
    ++stats_.unmatched_returns;  // a call that began before the window
    return;
  }
  if (frames_.back().gc) return;  // only ExitGc closes a collection
  const Frame f = frames_.back();
  frames_.pop_back();
  if (f.traced) Close(f, now);
}

void CallTree::ExitC(int64_t now) {
  if (muted_depth_ > 0) {
    Exit(now);
    return;
  }
  if (!frames_.empty() && frames_.back().in_progress) {
    ++stats_.unmatched_returns;  // a C call that began before the window, under this frame
    return;
  }
  Exit(now);
}

void CallTree::ExitGc(int64_t now) {
  if (muted_depth_ > 0) {
    // A collection that began inside the muted call ends (depth > 1), or one that began before
    // it ends inside it: the muted call's frames go with it.
    if (--muted_depth_ > 0) return;
  }
  // The innermost open collection; calls a finalizer left open above it close with it.
  for (size_t i = frames_.size(); i-- > 0;) {
    if (!frames_[i].gc) continue;
    while (frames_.size() > i) {
      const Frame f = frames_.back();
      frames_.pop_back();
      if (f.traced) Close(f, now);
    }
    return;
  }
}

void CallTree::CloseAll(int64_t now) {
  muted_depth_ = 0;
  while (!frames_.empty()) {
    const Frame f = frames_.back();
    frames_.pop_back();
    if (f.traced) Close(f, now);
  }
}

void CallTree::Close(const Frame& f, int64_t now) {
  const int64_t dur = std::max<int64_t>(0, now - f.start);
  const int64_t self = std::max<int64_t>(0, dur - f.child_ns);
  CallNode& n = nodes_[f.node];
  ++n.count;
  n.total_ns += dur;
  n.self_ns += self;
  n.min_ns = std::min(n.min_ns, dur);
  n.max_ns = std::max(n.max_ns, dur);
  n.sum_sq_ns += static_cast<double>(dur) * static_cast<double>(dur);
  n.hist.Add(dur);
  if (f.iteration >= 0 && f.iteration < limits_.max_iterations) {
    if (n.iterations.empty() || n.iterations.back().iteration != f.iteration) {
      n.iterations.push_back({f.iteration, 0, 0, 0});
    }
    IterationCell& c = n.iterations.back();
    ++c.calls;
    c.inclusive_ns += dur;
    c.self_ns += self;
  }
  ++stats_.calls;
  if (f.node == kOther) ++stats_.other_calls;
  if (f.gc) ++stats_.gc_collections;
  if (dur >= limits_.long_call_ns) {
    if (long_calls_.size() < limits_.max_long_calls) {
      long_calls_.push_back({f.node, f.start, now});
    } else {
      ++stats_.long_calls_dropped;
    }
  }
  // Its time is a child's time for the nearest traced caller (an untraced C call between them
  // keeps its own time in that caller's self time).
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
    if (it->traced) {
      it->child_ns += dur;
      break;
    }
  }
}

}  // namespace perftracker::worker
