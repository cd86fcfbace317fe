#include "diagnose/cuda_oom.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>

namespace perftracker::diagnose {
namespace {

// The size just before MARKER in TEXT ("... 1.19 GiB is free": the figure before " is free"),
// or nullopt when MARKER is absent or no size precedes it.
std::optional<double> SizeBefore(std::string_view text, std::string_view marker) {
  const size_t at = text.find(marker);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view head = text.substr(0, at);
  // Its last word, taken off HEAD (words end at a space, '(' or ';').
  auto last_word = [&head]() {
    while (!head.empty() && head.back() == ' ') head.remove_suffix(1);
    const size_t p = head.find_last_of(" (;");
    const std::string_view w = p == std::string_view::npos ? head : head.substr(p + 1);
    head = p == std::string_view::npos ? std::string_view() : head.substr(0, p);
    return w;
  };
  const std::string_view unit = last_word();
  const std::string_view number = last_word();
  return ParseTorchSize(std::string(number) + " " + std::string(unit));
}

// The size just after MARKER ("Tried to allocate 2.00 GiB": the figure after the marker).
std::optional<double> SizeAfter(std::string_view text, std::string_view marker) {
  const size_t at = text.find(marker);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = text.substr(at + marker.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  // The number and its unit: up to the second space, '.', ';' or ')' after the number.
  size_t n = rest.find(' ');
  if (n == std::string_view::npos) return std::nullopt;
  size_t e = n + 1;
  while (e < rest.size() && std::isalpha(static_cast<unsigned char>(rest[e]))) ++e;
  return ParseTorchSize(rest.substr(0, e));
}

// The device index after "GPU " (torch 2.x: "GPU 0 has", 1.13: "(GPU 0;").
int GpuIndex(std::string_view text) {
  const size_t at = text.find("GPU ");
  if (at == std::string_view::npos) return -1;
  int gpu = -1;
  const char* b = text.data() + at + 4;
  const char* e = text.data() + text.size();
  if (std::from_chars(b, e, gpu).ec != std::errc()) return -1;
  return gpu;
}

}  // namespace

std::optional<double> ParseTorchSize(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  const size_t space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  double value = 0;
  const std::string_view number = text.substr(0, space);
  if (std::from_chars(number.data(), number.data() + number.size(), value).ec != std::errc() ||
      !(value >= 0))
    return std::nullopt;
  const std::string_view unit = text.substr(space + 1);
  struct Unit {
    std::string_view name;
    double bytes;
  };
  static constexpr Unit kUnits[] = {{"B", 1},        {"bytes", 1},    {"byte", 1},
                                    {"KiB", 0x1p10}, {"MiB", 0x1p20}, {"GiB", 0x1p30},
                                    {"TiB", 0x1p40}, {"KB", 0x1p10},  {"MB", 0x1p20},
                                    {"GB", 0x1p30},  {"TB", 0x1p40}};
  for (const Unit& u : kUnits)
    if (unit == u.name) return value * u.bytes;
  return std::nullopt;
}

std::optional<CudaOom> FindCudaOom(const std::vector<std::string>& lines) {
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    const std::string_view text = *it;
    if (text.find("CUDA out of memory") == std::string_view::npos) continue;
    CudaOom o;
    o.gpu = GpuIndex(text);
    auto take = [](std::optional<double> v, double* into) {
      if (v) *into = *v;
    };
    take(SizeAfter(text, "Tried to allocate"), &o.requested_bytes);
    // torch 2.x
    take(SizeAfter(text, "has a total capacity of"), &o.total_bytes);
    take(SizeBefore(text, " is free"), &o.free_bytes);
    take(SizeBefore(text, " is allocated by PyTorch"), &o.allocated_bytes);
    take(SizeBefore(text, " is reserved by PyTorch but unallocated"),
         &o.reserved_unallocated_bytes);
    // torch 1.13
    if (o.total_bytes < 0) take(SizeBefore(text, " total capacity"), &o.total_bytes);
    if (o.allocated_bytes < 0) take(SizeBefore(text, " already allocated"), &o.allocated_bytes);
    if (o.free_bytes < 0) take(SizeBefore(text, " free;"), &o.free_bytes);
    take(SizeBefore(text, " reserved in total by PyTorch"), &o.reserved_bytes);
    if (o.reserved_unallocated_bytes < 0 && o.reserved_bytes >= 0 && o.allocated_bytes >= 0)
      o.reserved_unallocated_bytes = std::max(0.0, o.reserved_bytes - o.allocated_bytes);
    return o;
  }
  return std::nullopt;
}

}  // namespace perftracker::diagnose
