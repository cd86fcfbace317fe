// The Python tracer's clock: the CPU's time stamp counter scaled to steady-clock nanoseconds.
//
// The tracer reads the time twice per call. clock_gettime costs 20-50 ns through the vDSO (more
// on a VM's paravirtual clock: a quarter of the tracer's time, measured with perf); the time
// stamp counter costs a few. Where the CPU has an invariant TSC, the tracer's clock is the TSC
// scaled to nanoseconds with a rate measured between the collector's install (Start) and the
// window's arming (Anchor: seconds apart, so parts per million), anchored at the arming's
// steady-clock time, so that its times line up with the detector's iteration markers. Without
// an invariant TSC, or with too short a measurement, it is the steady clock itself.
//
// The time source is a template parameter, not a virtual interface: Now() runs twice per traced
// call, and the hardware source inlines to one rdtsc. Tests pass a fake one (tracer_clock_test).
// Owns nothing but the calibration; not thread-safe (the armed thread's, under the GIL).
#ifndef PERFTRACKER_WORKER_TRACER_CLOCK_H_
#define PERFTRACKER_WORKER_TRACER_CLOCK_H_

#include <chrono>
#include <cstdint>
#include <utility>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace perftracker::worker {

// The steady clock in nanoseconds: the detector's, the window's and the watchdog's time base.
inline int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The real clocks. Ticks() is 0 and InvariantTsc() false off x86-64: the steady clock is used.
struct HardwareTimeSource {
  int64_t SteadyNs() const { return SteadyNowNs(); }
  uint64_t Ticks() const {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return 0;
#endif
  }
  // CPUID leaf 0x80000007, EDX bit 8: the TSC runs at a constant rate in every P-, C- and
  // T-state. Asked at each arming only: CPUID is slow, and traps to the hypervisor in a VM.
  bool InvariantTsc() const;
};

template <typename TimeSource = HardwareTimeSource>
class BasicTracerClock {
 public:
  // Below this span between Start and Anchor the two clock reads' own cost would show in the
  // rate: the window uses the steady clock instead.
  static constexpr int64_t kMinCalibrationNs = 50'000'000;

  BasicTracerClock() = default;
  explicit BasicTracerClock(TimeSource source) : source_(std::move(source)) {}

  // Called at install: the start of the rate measurement.
  void Start() {
    ns0_ = source_.SteadyNs();
    ticks0_ = source_.Ticks();
  }
  // Called at arming, NOW_NS being the steady clock's time then: anchors the clock there and
  // decides TSC or steady clock for this window.
  void Anchor(int64_t now_ns) {
    anchor_ns_ = now_ns;
    anchor_ticks_ = source_.Ticks();
    scale_ = 0;
    const int64_t span_ns = now_ns - ns0_;
    if (source_.InvariantTsc() && span_ns >= kMinCalibrationNs && anchor_ticks_ > ticks0_) {
      scale_ = static_cast<double>(span_ns) / static_cast<double>(anchor_ticks_ - ticks0_);
    }
  }
  // The time in steady-clock nanoseconds.
  int64_t Now() const {
    if (scale_ == 0) return source_.SteadyNs();
    return anchor_ns_ +
           static_cast<int64_t>(static_cast<double>(source_.Ticks() - anchor_ticks_) * scale_);
  }

  // Whether the last Anchor chose the TSC, and its rate then (ns per tick).
  bool uses_tsc() const { return scale_ != 0; }
  double ns_per_tick() const { return scale_; }

 private:
  [[no_unique_address]] TimeSource source_;
  int64_t ns0_ = 0;
  uint64_t ticks0_ = 0;
  int64_t anchor_ns_ = 0;
  uint64_t anchor_ticks_ = 0;
  double scale_ = 0;  // ns per tick; 0: use the steady clock
};

using TracerClock = BasicTracerClock<>;

}  // namespace perftracker::worker

#endif  // PERFTRACKER_WORKER_TRACER_CLOCK_H_
