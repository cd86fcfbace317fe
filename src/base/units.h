// Time units: the conversions between the microseconds traces and patterns count in, the
// milliseconds findings and reports speak in, and the seconds the OS reports. One function a
// conversion, so that a figure's unit is read from its name rather than from a bare 1000.
//   UsToMs(2500) == 2.5; MsToUs(2.5) == 2500; SToMs(0.25) == 250; MsToS(250) == 0.25;
//   BytesToMB(4e6) == 4; NsToUs(2500) == 2.5; NsToMs(2.5e6) == 2.5; SToNs(2) == 2e9;
//   NsToS(5e8) == 0.5; UsToS(2.5e6) == 2.5; KiBToBytes(4) == 4096; KiBToMiB(2048) == 2
// Each computes exactly what the expression it replaced did (x / 1000.0, x * 1000.0, x / 1e6,
// x * 1e-9): the outputs stay byte-identical. Multiplying by 1e-9 and dividing by 1e9 differ in the
// last bit for some values, so NsToS and UsToS are not a shorthand for x / 1e9 or x / 1e6.
#ifndef PERFTRACKER_BASE_UNITS_H_
#define PERFTRACKER_BASE_UNITS_H_

namespace perftracker {

inline constexpr double kNsPerUs = 1000.0;
inline constexpr double kNsPerMs = 1e6;
inline constexpr double kUsPerMs = 1000.0;
inline constexpr double kMsPerS = 1000.0;

// The Python tracer counts nanoseconds (base/python_window_format.h).
inline constexpr double NsToUs(double ns) { return ns / kNsPerUs; }
inline constexpr double NsToMs(double ns) { return ns / kNsPerMs; }

inline constexpr double UsToMs(double us) { return us / kUsPerMs; }
inline constexpr double MsToUs(double ms) { return ms * kUsPerMs; }
inline constexpr double SToMs(double s) { return s * kMsPerS; }
inline constexpr double MsToS(double ms) { return ms / kMsPerS; }
inline constexpr double SToNs(double s) { return s * kMsPerS * kNsPerMs; }
// Counters the OS and the DataLoader keep in nanoseconds (schedstat, cgroup v1) or microseconds
// (cgroup v2), summed into seconds.
inline constexpr double NsToS(double ns) { return ns * 1e-9; }
inline constexpr double UsToS(double us) { return us * 1e-6; }

// Sizes as reports print them: decimal megabytes (a message of 4,000,000 bytes is "4.0 MB").
inline constexpr double kBytesPerMB = 1e6;
inline constexpr double BytesToMB(double bytes) { return bytes / kBytesPerMB; }
// The kernel's sizes (/proc/meminfo, getrusage's ru_maxrss) count binary kilobytes.
inline constexpr double kBytesPerKiB = 1024.0;
inline constexpr double KiBToBytes(double kib) { return kib * kBytesPerKiB; }
inline constexpr double KiBToMiB(double kib) { return kib / kBytesPerKiB; }
inline constexpr double BytesToMiB(double bytes) { return bytes / (kBytesPerKiB * kBytesPerKiB); }

}  // namespace perftracker

#endif  // PERFTRACKER_BASE_UNITS_H_
