// Counts over a range of integer buckets that grows to what was actually hit: the storage of
// the log-scale histograms (pattern/histogram.h's LogHistogram, worker/call_tree.h's
// QuarterLog2Histogram), which differ only in how a value maps to a bucket.
//
//   BucketCounts c; c.Add(40); c.Add(38); c.Add(40);
//   c.offset() == 38, c.counts() == {1, 0, 2}, c.BucketAtRank(2) == 40
#ifndef PERFTRACKER_BASE_BUCKET_COUNTS_H_
#define PERFTRACKER_BASE_BUCKET_COUNTS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace perftracker {

class BucketCounts {
 public:
  // Adds N values to BUCKET.
  void Add(int bucket, uint32_t n = 1) {
    if (counts_.empty()) {
      offset_ = bucket;
      counts_.assign(1, 0);
    } else if (bucket < offset_) {
      counts_.insert(counts_.begin(), static_cast<size_t>(offset_ - bucket), 0);
      offset_ = bucket;
    } else if (bucket >= offset_ + static_cast<int>(counts_.size())) {
      counts_.resize(static_cast<size_t>(bucket - offset_ + 1), 0);
    }
    counts_[static_cast<size_t>(bucket - offset_)] += n;
    n_ += n;
  }

  // The bucket holding the RANK-th smallest value (1-based; nearest rank), or the last one.
  int BucketAtRank(uint64_t rank) const {
    uint64_t seen = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= rank) return offset_ + static_cast<int>(i);
    }
    return offset_ + static_cast<int>(counts_.size()) - 1;
  }

  int offset() const { return offset_; }
  const std::vector<uint32_t>& counts() const { return counts_; }
  uint64_t count() const { return n_; }
  bool empty() const { return n_ == 0; }

 private:
  int offset_ = 0;
  std::vector<uint32_t> counts_;
  uint64_t n_ = 0;
};

}  // namespace perftracker

#endif  // PERFTRACKER_BASE_BUCKET_COUNTS_H_
