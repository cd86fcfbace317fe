// Reads a diagnosis back from its JSON (perftracker.diagnosis/1, report/report.h writes it), so
// a report can be drawn later from what a run stored: `perftracker report DIR` takes the
// diagnosis from DIR/diagnosis.json or the SQLite store. Bounded and lenient like every reader
// here: a wrong schema or a malformed document is one error naming the input; unknown keys are
// ignored (a newer minor version adds keys).
#ifndef PERFTRACKER_REPORT_DIAGNOSIS_READER_H_
#define PERFTRACKER_REPORT_DIAGNOSIS_READER_H_

#include <string>
#include <string_view>

#include "base/status.h"
#include "diagnose/finding.h"

namespace perftracker::report {

// NAME: the input's name for errors ("DIR/diagnosis.json").
StatusOr<diagnose::Diagnosis> ParseDiagnosisJson(std::string_view json, const std::string& name);
StatusOr<diagnose::Diagnosis> ReadDiagnosisFile(const std::string& path);

}  // namespace perftracker::report

#endif  // PERFTRACKER_REPORT_DIAGNOSIS_READER_H_
