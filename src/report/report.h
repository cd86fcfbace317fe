// Reports: the terminal text report and the versioned JSON diagnosis
// (schema "perftracker.diagnosis/1", documented in docs/diagnosis-schema.md).
#ifndef PERFTRACKER_REPORT_REPORT_H_
#define PERFTRACKER_REPORT_REPORT_H_

#include <string>
#include <string_view>

#include "base/status.h"
#include "diagnose/finding.h"

namespace perftracker::report {

inline constexpr const char* kDiagnosisSchema = "perftracker.diagnosis/1";

std::string RenderText(const diagnose::Diagnosis& diagnosis);
std::string RenderJson(const diagnose::Diagnosis& diagnosis);
// Writes TEXT to PATH; errors name the file.
Status WriteTextFile(const std::string& path, std::string_view text);
Status WriteJsonFile(const diagnose::Diagnosis& diagnosis, const std::string& path);

}  // namespace perftracker::report

#endif  // PERFTRACKER_REPORT_REPORT_H_
