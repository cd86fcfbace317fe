// libFuzzer target: any bytes through the diagnosis reader (`perftracker report` and
// `export-trace --diagnosis` read diagnosis.json files back) must give a diagnosis or a Status,
// never a crash; what it reads must render as a page and as JSON that reads back the same.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "report/diagnosis_reader.h"
#include "report/html.h"
#include "report/report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace r = perftracker::report;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto d = r::ParseDiagnosisJson(bytes, "fuzz.json");
  if (!d.ok()) return 0;
  r::HtmlInput in;
  in.diagnosis = &*d;
  (void)r::RenderHtml(in).size();
  const std::string json = r::RenderJson(*d);
  auto back = r::ParseDiagnosisJson(json, "again.json");
  if (!back.ok() || r::RenderJson(*back) != json) __builtin_trap();
  return 0;
}
