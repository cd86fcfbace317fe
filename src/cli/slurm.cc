#include "cli/slurm.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

namespace perftracker::cli {

namespace fs = std::filesystem;

bool IsSrun(const std::vector<std::string>& command) {
  return !command.empty() && fs::path(command[0]).filename() == "srun";
}

std::string SelfExe() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("perftracker") : p.string();
}

std::vector<std::string> AllocationOptions(const std::vector<std::string>& srun) {
  static const std::set<std::string> kWithValue = {"-N",
                                                   "--nodes",
                                                   "-n",
                                                   "--ntasks",
                                                   "-p",
                                                   "--partition",
                                                   "-t",
                                                   "--time",
                                                   "-c",
                                                   "--cpus-per-task",
                                                   "--ntasks-per-node",
                                                   "-w",
                                                   "--nodelist",
                                                   "-x",
                                                   "--exclude",
                                                   "-A",
                                                   "--account",
                                                   "-q",
                                                   "--qos",
                                                   "-C",
                                                   "--constraint",
                                                   "--gres",
                                                   "--mem",
                                                   "--gpus",
                                                   "--gpus-per-node"};
  static const std::set<std::string> kFlags = {"--exclusive"};
  std::vector<std::string> out;
  for (size_t i = 1; i < srun.size(); ++i) {
    const std::string& a = srun[i];
    if (a.empty() || a[0] != '-') break;  // the program srun runs
    const std::string name = a.substr(0, a.find('='));
    if (kFlags.count(a)) {
      out.push_back(a);
    } else if (kWithValue.count(name) && name != a) {
      out.push_back(a);  // --ntasks=4
    } else if (kWithValue.count(a) && i + 1 < srun.size()) {
      out.push_back(a);
      out.push_back(srun[++i]);
    } else if (a.size() > 2 && a[1] != '-' && kWithValue.count(a.substr(0, 2))) {
      out.push_back(a);  // -N2
    } else if (name == a && i + 1 < srun.size() && srun[i + 1].size() > 0 &&
               srun[i + 1][0] != '-' && a.rfind("--", 0) != 0 && a.size() == 2) {
      ++i;  // another short option with its value: srun's own
    }
  }
  return out;
}

namespace {

// The first line ARGV prints on stdout (at most 255 bytes, without its line break), run as a
// program of its own: no shell, so what the arguments hold (a node list from the environment)
// is never read as a command. Empty where it cannot run or prints nothing.
std::string FirstLineOf(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return "";
  std::vector<char*> a;
  for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (dup2(fds[1], STDOUT_FILENO) < 0 || (null >= 0 && dup2(null, STDERR_FILENO) < 0)) _exit(127);
    execvp(a[0], a.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[256];
  ssize_t n;
  while (pid > 0 && out.size() < sizeof(buf) &&
         (n = read(fds[0], buf, sizeof(buf) - out.size())) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (pid > 0)
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  out = out.substr(0, out.find('\n'));
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace

void ApplySlurmDefaults(RunOptions* o, bool nnodes_given, bool node_rank_given,
                        bool master_addr_given) {
  if (o->nproc <= 0 || std::getenv("SLURM_JOB_ID") == nullptr) return;
  auto number = [](const char* name, int* out) {
    const char* v = std::getenv(name);
    if (v == nullptr) return false;
    int n = 0;
    auto [end, err] = std::from_chars(v, v + std::strlen(v), n);
    if (err != std::errc() || *end != '\0') return false;
    *out = n;
    return true;
  };
  if (!nnodes_given && !number("SLURM_JOB_NUM_NODES", &o->nnodes))
    number("SLURM_NNODES", &o->nnodes);
  if (!node_rank_given) number("SLURM_NODEID", &o->node_rank);
  if (!master_addr_given) {
    // The allocation's first node, as `scontrol show hostnames` expands the node list.
    const char* list = std::getenv("SLURM_JOB_NODELIST");
    if (list == nullptr) list = std::getenv("SLURM_NODELIST");
    if (list == nullptr) return;
    if (std::string first = FirstLineOf({"scontrol", "show", "hostnames", list}); !first.empty())
      o->master_addr = std::move(first);
  }
}

bool NeedsAllocation(const RunOptions& o) {
  return o.nproc == 0 && IsSrun(o.command) && std::getenv("SLURM_JOB_ID") == nullptr &&
         o.argv.size() > 1 && std::getenv("PERFTRACKER_NO_SALLOC") == nullptr;
}

std::vector<std::string> SallocArgv(const RunOptions& o, const std::string& self) {
  std::vector<std::string> argv = {"salloc", "--quiet"};
  for (std::string& a : AllocationOptions(o.command)) argv.push_back(std::move(a));
  argv.push_back(self);
  argv.insert(argv.end(), o.argv.begin() + 1, o.argv.end());
  return argv;
}

Status RunInAllocation(const RunOptions& o) {
  std::vector<std::string> argv = SallocArgv(o, SelfExe());
  std::vector<char*> a;
  for (auto& s : argv) a.push_back(s.data());
  a.push_back(nullptr);
  execvp(a[0], a.data());
  return Internal(
      fmt::format("run: cannot run salloc for `{}`: {}", o.command[0], std::strerror(errno)));
}

bool WantsAgentsStep(const RunOptions& o) {
  return o.nproc == 0 && o.agent_socket.empty() && IsSrun(o.command) &&
         std::getenv("SLURM_JOB_ID") != nullptr;
}

std::string SlurmNodeCount() {
  const char* nodes_env = std::getenv("SLURM_JOB_NUM_NODES");
  if (nodes_env == nullptr) nodes_env = std::getenv("SLURM_NNODES");
  return nodes_env != nullptr ? nodes_env : "1";
}

std::string RandomSuffix() {
  uint64_t bits = 0;
  auto* p = reinterpret_cast<unsigned char*>(&bits);
  size_t got = 0;
  while (got < sizeof(bits)) {
    const ssize_t n = getrandom(p + got, sizeof(bits) - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      break;
    }
  }
  if (got < sizeof(bits)) {
    // No getrandom (an old kernel, a seccomp filter): the C++ library's device reads
    // /dev/urandom.
    std::random_device dev;
    bits = (static_cast<uint64_t>(dev()) << 32) ^ dev();
  }
  return fmt::format("{:016x}", bits);
}

std::string AgentsStepSocket(const std::string& slurm_job, pid_t launcher) {
  return fmt::format("/tmp/perftracker-{}-{}-{}-{{node}}/agent.sock", slurm_job, launcher,
                     RandomSuffix());
}

std::vector<std::string> AgentsStepCommand(const AgentsStep& s) {
  std::vector<std::string> step = {"srun",
                                   "--overlap",
                                   "--quiet",
                                   "--kill-on-bad-exit=0",
                                   "--nodes=" + s.nodes,
                                   "--ntasks=" + s.nodes,
                                   "--ntasks-per-node=1",
                                   s.self,
                                   "agent",
                                   "--server",
                                   s.server,
                                   "--socket",
                                   s.socket,
                                   "--trace-dir",
                                   (fs::path(s.trace_dir) / "{node}").string(),
                                   "--job-id",
                                   s.job_id,
                                   "--keep-traces",
                                   std::to_string(s.keep_traces)};
  if (!s.token_file.empty()) {
    step.push_back("--token-file");
    step.push_back(s.token_file);
  }
  if (!s.tls_ca.empty()) {
    step.push_back("--tls-ca");
    step.push_back(s.tls_ca);
  }
  return step;
}

}  // namespace perftracker::cli
