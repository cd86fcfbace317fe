#include "worker/window_recorder.h"

#include <utility>

namespace perftracker::worker {

Status CheckTracerLimits(double nodes, double depth) {
  if (!(nodes >= kMinTracerNodes && nodes <= kMaxTracerNodes && depth >= 1 &&
        depth <= kMaxTracerDepth)) {
    return InvalidArgument(kTracerLimitsMessage);
  }
  return Status::Ok();
}

void WindowRecorder::Begin(int64_t now, const CallTreeLimits& limits) {
  names_.Reset();
  names_.Intern("");  // name 0: the root's
  gc_name_ = names_.Intern("<gc>");
  clock_.Anchor(now);
  tree_ = std::make_unique<CallTree>(limits);
  tree_->SetIteration(0);
}

void WindowRecorder::Finish(int64_t now, PythonWindow* w) {
  tree_->CloseAll(now);
  const CallTreeStats& s = tree_->stats();
  totals_.calls += s.calls;
  totals_.other_calls += s.other_calls;
  totals_.untraced += s.untraced_calls;
  totals_.gc_spans += s.gc_collections;
  totals_.nodes = tree_->nodes().size();
  w->tree = std::move(*tree_);
  tree_.reset();
  w->names = names_.TakeNames();
}

}  // namespace perftracker::worker
