// The offline subcommands of `perftracker` (analyze, summarize, diagnose, diff, show,
// export-trace, simulate, whatif): their flags and their runners, traces and summaries to a
// diagnosis without a server. cli/main.cc adds them beside the online ones (cli/online_commands.h)
// and dispatches. Every user error is one line naming the file and what is wrong, and a non-zero
// exit.
#ifndef PERFTRACKER_CLI_OFFLINE_COMMANDS_H_
#define PERFTRACKER_CLI_OFFLINE_COMMANDS_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "diagnose/diagnose.h"

namespace perftracker::cli {

// Where a diagnosis goes (--json, --html, the terminal unless --quiet), --stats' phase times,
// --threads, and the diagnosis' tunable numbers: analyze, diagnose and diff share them.
struct OutputFlags {
  std::string json_path;
  std::string html_path;
  bool quiet = false;
  bool stats = false;
  int threads = 0;
  diagnose::DiagnoseOptions diagnose;
};

// `perftracker whatif`: a window's traces (or summaries) diagnosed, and the iteration replayed
// with one change (diagnose/what_if.h).
struct WhatIfFlags {
  std::vector<std::string> paths;
  int finding = 0;  // 1-based, as the reports number them
  int rank = -1;
  std::string function;
  bool zero = false;
  double busbw_gbps = 0;  // > 0: every collective re-timed at this bus bandwidth
};

// `perftracker simulate`: the simulated job (sim/config.h), its faults and where it is written.
struct SimulateFlags {
  int workers = 0;
  std::string layout;
  int gpus_per_node = 8;
  int nodes_per_switch = 4;
  std::vector<std::string> faults;
  int iterations = 20;
  int layers = 16;
  bool traces = false;
  uint64_t seed = 0;
  std::string out;
  int threads = 2;
  double noise = 0.03;
};

// Every offline subcommand with the variables its flags are parsed into. CLI11 keeps their
// addresses: the struct stays where main put it.
struct OfflineCommands {
  OutputFlags analyze_flags;
  std::vector<std::string> analyze_paths;
  CLI::App* analyze = nullptr;
  std::vector<std::string> summarize_paths;
  std::string summarize_out;
  CLI::App* summarize = nullptr;
  OutputFlags diagnose_flags;
  std::vector<std::string> diagnose_paths;
  CLI::App* diagnose = nullptr;
  OutputFlags diff_flags;
  std::string diff_base, diff_test;
  CLI::App* diff = nullptr;
  std::vector<std::string> show_paths;
  int show_top = 25;
  std::string show_json;
  CLI::App* show = nullptr;
  std::vector<std::string> export_paths;
  std::string export_out, export_diagnosis;
  CLI::App* export_trace = nullptr;
  std::vector<std::string> fr_paths;
  std::string fr_out;
  CLI::App* export_fr = nullptr;
  SimulateFlags sim;
  CLI::App* simulate = nullptr;
  WhatIfFlags whatif_flags;
  CLI::App* whatif = nullptr;
};

// Prints STATUS as the command's one error line; returns the exit code, 1.
int Fail(const Status& status);
// The diagnosis' tunable numbers (--min-impact, --expected-busbw, ...) on CMD.
void AddDiagnoseFlags(CLI::App* cmd, diagnose::DiagnoseOptions* o);
// Every offline subcommand on APP, parsed into *C (which must stay where it is).
void AddOfflineCommands(CLI::App& app, OfflineCommands* c);
// Runs the offline subcommand APP's parse chose (0 when none did).
int DispatchOffline(const OfflineCommands& c);

}  // namespace perftracker::cli

#endif  // PERFTRACKER_CLI_OFFLINE_COMMANDS_H_
