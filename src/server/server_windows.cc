#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "base/background.h"
#include "base/units.h"
#include "diagnose/causes.h"
#include "diagnose/finding_text.h"
#include "diagnose/peer_stats.h"
#include "server/job_end.h"
#include "server/server_impl.h"

namespace perftracker::server {

JobProgress Server::Impl::ProgressLocked() const {
  std::set<int> expected = agents.DeclaredRanks();
  if (expected.empty()) expected = CurrentRanksLocked();
  return ProgressOf(ranks, expected);
}

TriggerResult Server::Impl::OpenWindowLocked(const std::string& reason, int iterations,
                                             bool slowdown, double mean_ms, int64_t trigger_step,
                                             std::vector<int> memory_ranks) {
  if (const int64_t open = sched->open_window()) {
    const WindowSpec& s = windows.Find(open)->spec();
    return {s.id, s.start_iteration, true};
  }
  WindowSpec spec;
  spec.id = windows.NextId();
  spec.iterations = sched->Iterations(iterations);
  spec.max_seconds = options.max_seconds;
  // Seen on an H200 (4 ms iterations): --profile-at-iteration's trigger arrived before any
  // iteration report, and the window was announced as iterations 0..9 while the ranks profiled
  // 170..179. The trigger's own step and iteration time stand in for the reports not yet come.
  JobProgress progress = ProgressLocked();
  if (trigger_step > progress.furthest_step) progress.furthest_step = trigger_step;
  // The trigger's recent iteration time where the run has no mean yet, and always for a
  // slowdown: its window starts the lead's seconds ahead at the rate the job runs now, not at
  // the run's mean (after a 1.8x slowdown that mean put the window 3.1 s after its trigger
  // instead of 2: a straggler, torch 2.13, 4 ranks): a later diagnosis, and a slowdown that
  // lasts only seconds over before its window began.
  if (mean_ms > 0 && (slowdown || progress.mean_iteration_ms <= 0))
    progress.mean_iteration_ms = mean_ms;
  spec.start_iteration = sched->StartIteration(progress);
  spec.attempt = attempts.current();
  spec.baseline = ReasonKind(reason) == "baseline";
  spec.record_shapes = !spec.baseline && ReasonKind(reason) != "periodic";
  spec.memory_ranks = std::move(memory_ranks);
  const std::set<int> expected = agents.DeclaredRanks();
  auto deadline = Window::Clock::now() +
                  std::chrono::duration_cast<Window::Clock::duration>(std::chrono::duration<double>(
                      options.max_seconds + options.upload_grace_seconds));
  // Where each rank stood when the command went out (every rank of the current attempt, when
  // none is declared).
  std::map<int, int64_t> steps;
  const std::set<int> current = expected.empty() ? CurrentRanksLocked() : std::set<int>();
  for (const auto& [r, st] : ranks)
    if (expected.empty() ? current.count(r) > 0 : expected.count(r) > 0) steps[r] = st.last_step;
  windows.Add(std::make_unique<Window>(spec, expected, deadline)).SetStepsAtOpen(std::move(steps));
  // The chart's steps are run-wide (the attempts one after another).
  windows.AddMark({spec.id, spec.start_iteration + attempts.Current().run_offset, spec.iterations,
                   spec.attempt == 0 ? reason
                                     : fmt::format("{} (attempt {}, its iterations {}..{})", reason,
                                                   spec.attempt, spec.start_iteration,
                                                   spec.start_iteration + spec.iterations - 1)});
  ++counters.windows_opened[ReasonKind(reason)];
  sched->Opened(spec.id, spec.start_iteration, std::chrono::steady_clock::now(), slowdown, mean_ms);
  healthy.WindowOpened(spec.start_iteration, spec.iterations);
  // The profiler's memory is perftracker's: no rank's memory series counts it as the job's.
  for (auto& [r, st] : ranks)
    for (MemoryWatch* m : {&st.memory, &st.gpu_memory})
      m->series.Profiled(spec.start_iteration, spec.start_iteration + spec.iterations - 1);
  if (::perftracker::Status st =
          store->AddWindow(job_id, spec.id, spec.start_iteration, spec.iterations, reason);
      !st.ok())
    log::Error("server", "{}", st.message());
  v1::Command cmd;
  v1::ProfileWindow* p = cmd.mutable_profile();
  p->set_window_id(spec.id);
  p->set_start_iteration(spec.start_iteration);
  p->set_iterations(spec.iterations);
  p->set_max_seconds(spec.max_seconds);
  p->set_record_shapes(spec.record_shapes);
  for (int r : spec.memory_ranks) p->add_memory_ranks(r);
  agents.Send(cmd);
  cv.notify_all();
  log::Event("", "window {} opened ({}): profiling iterations {}..{} on every rank{}", spec.id,
             reason, spec.start_iteration, spec.start_iteration + spec.iterations - 1,
             spec.attempt > 0 ? fmt::format(" (attempt {})", spec.attempt) : "");
  log::Detail("server", "window {} opened ({}): iterations {}..+{}, {} agents", spec.id, reason,
              spec.start_iteration, spec.iterations, agents.size());
  return {spec.id, spec.start_iteration, false};
}

void Server::Impl::OnMemoryGrowthLocked(int rank, const diagnose::MemoryGrowth& g,
                                        diagnose::MemoryKind kind) {
  const std::string reason =
      fmt::format("{}memory growth on rank {}: +{:.1f} MiB per iteration from iteration {} to {}",
                  kind == diagnose::MemoryKind::kGpu ? "GPU " : "", rank,
                  BytesToMiB(g.bytes_per_iteration), g.first_step, g.last_step);
  log::Event("", "{}", reason);
  windows.MemoryWindowDue(rank, reason);
  MaybeOpenScheduledLocked();
}

std::vector<diagnose::Finding> Server::Impl::MemoryFindingsLocked() const {
  std::map<std::string, diagnose::HostMemoryState> hosts;
  for (const auto& [id, a] : agents)
    if (a.memory.available_bytes > 0) hosts[a.host] = a.memory;
  return MemoryFindings(
      ranks, CurrentRanksLocked(),
      [&](const RankState& st) {
        const AgentState* a = agents.Find(st.agent);
        return a != nullptr ? a->host : std::string();
      },
      hosts);
}

void Server::Impl::ExplainMissingLocked(Window::Sealed* sealed) const {
  const auto now = std::chrono::steady_clock::now();
  for (diagnose::MissingRank& m : sealed->missing.ranks) {
    auto st = ranks.find(m.rank);
    const RankState* state = st == ranks.end() ? nullptr : &st->second;
    auto at_open = sealed->steps_at_open.find(m.rank);
    MissedWindow window{sealed->spec.id, sealed->spec.start_iteration,
                        at_open == sealed->steps_at_open.end() ? -1 : at_open->second};
    const AgentSeen agent = agents.SeenFor(m.rank, state == nullptr ? std::string() : state->agent,
                                           sealed->declared, sealed->spec.id, sealed->opened, now);
    m = ExplainMissing(m.rank, state, agent, window);
  }
}

std::set<int> Server::Impl::CurrentRanksLocked() const {
  return RanksOfAttempt(ranks, attempts.current());
}

void Server::Impl::NewAttemptLocked(int rank, int pid) {
  const auto& all = attempts.attempts();
  const Attempt& cur = all.back();
  log::Event("",
             "attempt {} began: rank {} runs in a new process (pid {}, restart count {}); "
             "its iterations count from 0 again and its detector learns again",
             cur.number, rank, pid, cur.restart_count);
  if (all.size() >= 2) log::Event("", "{}", AttemptLog::Info(all[all.size() - 2]).summary);
  // The old attempt's ranks will not upload any more: its window closes with what arrived (one
  // that got nothing is dropped, as at the job's end), and a hang's stacks are what came.
  hangs.NewAttempt();
  if (const int64_t open = sched->open_window()) {
    Window& w = *windows.Find(open);
    if (w.Reported().empty()) {
      w.Seal();
      sched->Closed(open, std::chrono::steady_clock::now());
      log::Detail("server", "window {} dropped: its attempt ended before any rank reported it",
                  open);
    } else {
      publishing.CloseLater(open);
    }
  }
  sched->NewAttempt();
  healthy.NewAttempt();
  for (auto& [r, st] : ranks) {
    st.last_step = -1;
    st.attempt_iterations = 0;
  }
}

void Server::Impl::TimerLoop() {
  std::unique_lock lk(mu);
  while (!shutting_down) {
    cv.wait_for(lk, std::chrono::milliseconds(100));
    try {
      TimerTick(lk);
    } catch (const std::exception& e) {
      log::Error("server", "timer: internal error, the server goes on: {}", e.what());
    } catch (...) {
      log::Error("server", "timer: internal error, the server goes on");
    }
    if (!lk.owns_lock()) lk.lock();
  }
}

void Server::Impl::ExpireLocked() {
  for (const auto& [id, host] :
       agents.Expire(std::chrono::steady_clock::now(), options.agent_expiry_seconds))
    log::Detail("server", "{} from {} silent for {:.0f} s: forgotten", id, host,
                options.agent_expiry_seconds);
  windows.ForgetOldClosed(sched->slowdown_window());
}

void Server::Impl::TimerTick(std::unique_lock<std::mutex>& lk) {
  ExpireLocked();
  if (const int64_t open = sched->open_window();
      open && windows.Find(open)->Expired(Window::Clock::now()))
    publishing.CloseLater(open);
  if (auto p = sched->TakeConfirmedHang(std::chrono::steady_clock::now()))
    hangs.Start(p->rank, p->mean_ms, p->since);
  hangs.FinishIfDue(lk);
  MaybeOpenScheduledLocked();
  if (std::optional<diagnose::Diagnosis> d = hangs.TakeCallback()) {
    lk.unlock();
    options.on_hang(*d);
    lk.lock();
  }
}

void Server::Impl::MaybeOpenScheduledLocked() {
  if (shutting_down || hangs.collecting()) return;
  const auto now = std::chrono::steady_clock::now();
  if (auto memory = sched->open_window() ? std::nullopt : windows.TakeMemoryWindow()) {
    // A memory growth's first: this window records where its memory is kept.
    OpenWindowLocked(memory->reason, 0, false, 0, -1, std::move(memory->ranks));
  } else if (auto due = sched->Due(ProgressLocked(), now)) {
    OpenWindowLocked(due->reason, 0, due->slowdown, due->mean_ms);
  } else if (auto slow = healthy.Check(now);  // with no baseline window, no window of its own
             slow && options.schedule.baseline_window &&
             sched->OnSlowdown(FurthestStep(ranks), slow->recent_ms, slow->reason, now) ==
                 WindowScheduler::SlowdownAction::kOpen) {
    // The window's own "opened" line says why on the terminal; this one is the log's.
    log::Detail("server", "{}", slow->reason);
    OpenWindowLocked(slow->reason, 0, true, slow->recent_ms, FurthestStep(ranks));
  }
}

std::string Server::Impl::RenderHtmlLocked(const diagnose::Diagnosis& d,
                                           const pattern::CompactJob* job, int64_t id,
                                           std::vector<report::WaitGroup> waits,
                                           int64_t views_from) const {
  return reports->RenderPage(d, job, RunSeriesOf(ranks), windows.marks(), id, std::move(waits),
                             views_from);
}

std::string Server::Impl::ReasonKind(const std::string& reason) {
  for (const char* k : {"baseline", "periodic", "slowdown", "hang", "memory"})
    if (reason.rfind(k, 0) == 0) return k;
  return "user";
}

}  // namespace perftracker::server
