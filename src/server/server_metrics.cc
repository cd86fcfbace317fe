#include <fmt/format.h>

#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "base/units.h"
#include "server/server_impl.h"

namespace perftracker::server {

namespace {

void Head(std::string& out, const char* name, const char* type, const char* help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

// Memory, so that an alert can fire before a leak kills the job (it does not slow it first):
// the latest sample, the limits it runs into and, once the memory rule found a leak, its rate.
// Each family's lines together, as the text format asks.
void MemoryMetrics(const std::map<int, RankState>& ranks, const std::string& job,
                   std::string& out) {
  using Watch = std::pair<const char*, const MemoryWatch RankState::*>;
  const Watch watches[] = {{"host", &RankState::memory}, {"gpu", &RankState::gpu_memory}};
  Head(out, "perftracker_memory_bytes", "gauge",
       "The rank's memory at its latest report: host (its resident set) and gpu (what PyTorch's "
       "tensors hold, torch.cuda.memory_allocated, else its process on its GPU as NVML reads "
       "it).");
  for (const auto& [r, st] : ranks)
    for (const auto& [kind, member] : watches)
      if (const auto& samples = (st.*member).series.samples(); !samples.empty())
        fmt::format_to(std::back_inserter(out),
                       "perftracker_memory_bytes{{job=\"{}\",rank=\"{}\",host=\"{}\",kind=\"{}\"}} "
                       "{:.0f}\n",
                       job, r, MetricsHttp::Label(st.host), kind, samples.back().rss);
  Head(out, "perftracker_memory_limit_bytes", "gauge",
       "Limits the rank's memory runs into, where known: its memory cgroup's limit, its GPU's "
       "memory.");
  for (const auto& [r, st] : ranks)
    for (const auto& [limit, bytes] :
         {std::pair{"cgroup", st.cgroup_limit_bytes}, {"gpu", st.gpu_total_bytes}})
      if (bytes > 0)
        fmt::format_to(std::back_inserter(out),
                       "perftracker_memory_limit_bytes{{job=\"{}\",rank=\"{}\",host=\"{}\","
                       "limit=\"{}\"}} {:.0f}\n",
                       job, r, MetricsHttp::Label(st.host), limit, bytes);
  Head(out, "perftracker_memory_growth_bytes_per_iteration", "gauge",
       "How fast the rank's memory grows, once the memory rule found a leak (its slope since the "
       "leak began).");
  for (const auto& [r, st] : ranks)
    for (const auto& [kind, member] : watches)
      if (const auto& growth = (st.*member).growth)
        fmt::format_to(std::back_inserter(out),
                       "perftracker_memory_growth_bytes_per_iteration{{job=\"{}\",rank=\"{}\","
                       "host=\"{}\",kind=\"{}\"}} {:.0f}\n",
                       job, r, MetricsHttp::Label(st.host), kind, growth->bytes_per_iteration);
}

// The job's healthy rate (diagnose/healthy_rate.h) from its unprofiled iterations up to step
// UNTIL, and how much slower it runs now: what an alert on the job's own slowdown needs. Fitted
// afresh at each scrape: the history holds at most JobHistory::kMaxPoints points.
void RateMetrics(const HealthyWatch& healthy, int64_t until, const std::string& job,
                 std::string& out) {
  const std::optional<diagnose::HealthyRate> rate = healthy.RateBefore(until);
  Head(out, "perftracker_healthy_iteration_seconds", "gauge",
       "The job's healthy iteration time: the median of its unprofiled iterations before it "
       "slowed down, or of all of them.");
  if (rate)
    fmt::format_to(std::back_inserter(out),
                   "perftracker_healthy_iteration_seconds{{job=\"{}\"}} {:.6f}\n", job,
                   MsToS(rate->healthy.ms));
  Head(out, "perftracker_slowdown_ratio", "gauge",
       "How much slower the job runs now than when healthy (1: not slower), once the history "
       "shows a slowdown beyond its own noise.");
  if (rate)
    fmt::format_to(std::back_inserter(out), "perftracker_slowdown_ratio{{job=\"{}\"}} {:.4f}\n",
                   job, rate->slowdown_step ? rate->Ratio() : 1.0);
}

// The ranks the latest diagnosis names for a problem of their own (a finding on some ranks: a
// straggler, a throttled or starved rank, a slow loader, ...), one series per rank and category,
// at most kMostNamedRankSeries: what an alert on a straggling rank needs, with its rank.
constexpr size_t kMostNamedRankSeries = 1000;
void NamedRankMetrics(const std::optional<diagnose::Diagnosis>& latest, const std::string& job,
                      std::string& out) {
  Head(out, "perftracker_named_rank", "gauge",
       "1 for each rank the latest diagnosis names for a problem of its own, by the finding's "
       "category (diagnosis.json says why and what it costs).");
  if (!latest) return;
  std::set<std::pair<int, std::string_view>> named;
  for (const diagnose::Finding& f : latest->findings)
    if (f.finding_class == diagnose::FindingClass::kSubset)
      for (int r : f.ranks)
        if (named.size() < kMostNamedRankSeries)
          named.insert({r, diagnose::CategoryName(f.category)});
  for (const auto& [r, category] : named)
    fmt::format_to(std::back_inserter(out),
                   "perftracker_named_rank{{job=\"{}\",rank=\"{}\",category=\"{}\"}} 1\n", job, r,
                   category);
}

// Each rank's iteration times: its latest and its mean over the run.
void IterationMetrics(const std::map<int, RankState>& ranks, const std::string& job,
                      std::string& out) {
  Head(out, "perftracker_iteration_duration_seconds", "gauge",
       "The rank's latest iteration time, as its detector measured it.");
  for (const auto& [r, st] : ranks)
    if (st.count > 0)
      fmt::format_to(std::back_inserter(out),
                     "perftracker_iteration_duration_seconds{{job=\"{}\",rank=\"{}\",host=\"{}\"}} "
                     "{:.6f}\n",
                     job, r, MetricsHttp::Label(st.host), MsToS(st.last_ms));
  Head(out, "perftracker_iteration_mean_seconds", "gauge",
       "The rank's mean iteration time over the run.");
  for (const auto& [r, st] : ranks)
    if (st.count > 0)
      fmt::format_to(std::back_inserter(out),
                     "perftracker_iteration_mean_seconds{{job=\"{}\",rank=\"{}\",host=\"{}\"}} "
                     "{:.6f}\n",
                     job, r, MetricsHttp::Label(st.host), MsToS(st.sum_ms / st.count));
}

// STATE: the server's, one of the four below.
void StateMetrics(const std::map<int, RankState>& ranks, const ServerCounters& counters,
                  const char* state, const std::string& job, std::string& out) {
  Head(out, "perftracker_iterations_total", "counter", "Iterations the rank reported.");
  for (const auto& [r, st] : ranks)
    fmt::format_to(std::back_inserter(out),
                   "perftracker_iterations_total{{job=\"{}\",rank=\"{}\",host=\"{}\"}} {}\n", job,
                   r, MetricsHttp::Label(st.host), st.count);
  Head(out, "perftracker_triggers_total", "counter",
       "Window requests by kind: a worker detector's slowdown or hang, or a user's trigger.");
  for (const char* k : {"slowdown", "hang", "user"}) {
    auto it = counters.triggers_total.find(k);
    fmt::format_to(std::back_inserter(out),
                   "perftracker_triggers_total{{job=\"{}\",kind=\"{}\"}} {}\n", job, k,
                   it == counters.triggers_total.end() ? 0 : it->second);
  }
  Head(out, "perftracker_detector_state", "gauge",
       "1 for the server's current state: idle, window (profiling), hang_suspected (a hang "
       "trigger waits for confirmation) or hang (stacks being collected).");
  for (const char* s : {"idle", "window", "hang_suspected", "hang"})
    fmt::format_to(std::back_inserter(out),
                   "perftracker_detector_state{{job=\"{}\",state=\"{}\"}} {}\n", job, s,
                   std::string_view(s) == state ? 1 : 0);
  Head(out, "perftracker_windows_opened_total", "counter",
       "Profiling windows opened, by reason (and hangs whose stacks were collected).");
  for (const char* k : {"baseline", "periodic", "slowdown", "user", "hang"}) {
    auto it = counters.windows_opened.find(k);
    fmt::format_to(std::back_inserter(out),
                   "perftracker_windows_opened_total{{job=\"{}\",reason=\"{}\"}} {}\n", job, k,
                   it == counters.windows_opened.end() ? 0 : it->second);
  }
}

// What the diagnoses found, and the latest's count.
void FindingMetrics(const ServerCounters& counters,
                    const std::optional<diagnose::Diagnosis>& latest, const std::string& job,
                    std::string& out) {
  Head(out, "perftracker_findings_total", "counter",
       "Findings of every diagnosis, by category and cause.");
  for (const auto& [key, n] : counters.findings_total)
    fmt::format_to(std::back_inserter(out),
                   "perftracker_findings_total{{job=\"{}\",category=\"{}\",cause=\"{}\"}} {}\n",
                   job, MetricsHttp::Label(key.first), key.second, n);
  Head(out, "perftracker_latest_findings", "gauge", "Findings of the latest diagnosis.");
  fmt::format_to(std::back_inserter(out), "perftracker_latest_findings{{job=\"{}\"}} {}\n", job,
                 latest ? latest->findings.size() : 0);
}

// The agents, and what their uploads brought.
void AgentMetrics(const AgentRegistry& agents, const ServerCounters& counters,
                  const std::string& job, std::string& out) {
  Head(out, "perftracker_agents", "gauge",
       "Node agents registered, and those connected (a command stream open or a call in the "
       "last seconds).");
  const size_t connected = agents.CountConnected(std::chrono::steady_clock::now());
  fmt::format_to(std::back_inserter(out),
                 "perftracker_agents{{job=\"{}\",state=\"registered\"}} {}\n", job, agents.size());
  fmt::format_to(std::back_inserter(out),
                 "perftracker_agents{{job=\"{}\",state=\"connected\"}} {}\n", job, connected);
  Head(out, "perftracker_upload_bytes_total", "counter", "Bytes of rank summaries accepted.");
  fmt::format_to(std::back_inserter(out), "perftracker_upload_bytes_total{{job=\"{}\"}} {}\n", job,
                 counters.upload_bytes_total);
  Head(out, "perftracker_summaries_decoded_total", "counter",
       "Rank summaries inflated and decoded (an upload refused first costs none).");
  fmt::format_to(std::back_inserter(out), "perftracker_summaries_decoded_total{{job=\"{}\"}} {}\n",
                 job, counters.summaries_decoded);
  Head(out, "perftracker_uploads_total", "counter", "Rank summary uploads, accepted or refused.");
  fmt::format_to(std::back_inserter(out),
                 "perftracker_uploads_total{{job=\"{}\",result=\"accepted\"}} {}\n", job,
                 counters.uploads_accepted);
  fmt::format_to(std::back_inserter(out),
                 "perftracker_uploads_total{{job=\"{}\",result=\"refused\"}} {}\n", job,
                 counters.uploads_refused);
}

}  // namespace

// Formatted in place: at 100,000 ranks this runs ~300,000 lines under the server's lock.
std::string Server::Impl::MetricsLocked() const {
  const std::string job = MetricsHttp::Label(job_key.value_or(""));
  const std::optional<diagnose::Diagnosis>& latest = reports->latest().diagnosis;
  const char* state = hangs.collecting()      ? "hang"
                      : sched->pending_hang() ? "hang_suspected"
                      : sched->open_window()  ? "window"
                                              : "idle";
  std::string out;
  IterationMetrics(ranks, job, out);
  MemoryMetrics(ranks, job, out);
  RateMetrics(healthy, FurthestStep(ranks) + 1, job, out);
  NamedRankMetrics(latest, job, out);
  StateMetrics(ranks, counters, state, job, out);
  FindingMetrics(counters, latest, job, out);
  AgentMetrics(agents, counters, job, out);
  return out;
}

}  // namespace perftracker::server
