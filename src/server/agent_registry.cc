#include "server/agent_registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "server/command_stream.h"

namespace perftracker::server {

std::string AgentRegistry::NextId(std::string_view secret) {
  return fmt::format("agent-{}-{}", next_++, secret.substr(0, 24));
}

AgentState& AgentRegistry::Add(const std::string& id, std::string host, std::vector<int> ranks,
                               Clock::time_point now) {
  for (int r : ranks) declared_by_[r] = id;
  AgentState& a = agents_[id];
  a.last_seen = a.registered = now;
  a.host = std::move(host);
  a.ranks = std::move(ranks);
  return a;
}

AgentState* AgentRegistry::Find(const std::string& id) {
  auto it = agents_.find(id);
  return it == agents_.end() ? nullptr : &it->second;
}

const AgentState* AgentRegistry::Find(const std::string& id) const {
  auto it = agents_.find(id);
  return it == agents_.end() ? nullptr : &it->second;
}

AgentRegistry::Ownership AgentRegistry::Owns(const std::string& id, int rank) const {
  const AgentState* a = Find(id);
  if (a == nullptr) return Ownership::kUnknownAgent;
  auto d = declared_by_.find(rank);
  const bool ok = a->ranks.empty() ? d == declared_by_.end() || d->second == id
                                   : d != declared_by_.end() && d->second == id;
  return ok ? Ownership::kOwns : Ownership::kAnotherAgents;
}

std::set<int> AgentRegistry::DeclaredRanks() const {
  std::set<int> ranks;
  for (const auto& [id, a] : agents_) ranks.insert(a.ranks.begin(), a.ranks.end());
  return ranks;
}

bool AgentRegistry::Connected(const AgentState& a, Clock::time_point now) {
  return a.stream != nullptr || now - a.last_seen < std::chrono::seconds(kConnectedSeconds);
}

size_t AgentRegistry::CountConnected(Clock::time_point now) const {
  return std::count_if(agents_.begin(), agents_.end(),
                       [&](const auto& kv) { return Connected(kv.second, now); });
}

AgentSeen AgentRegistry::SeenFor(int rank, const std::string& reported_by, bool declared,
                                 int64_t window_id, Clock::time_point opened,
                                 Clock::time_point now) const {
  AgentSeen a;
  std::string id;
  if (auto d = declared_by_.find(rank); d != declared_by_.end()) {
    id = d->second;
  } else {
    id = reported_by;
  }
  const AgentState* agent = id.empty() ? nullptr : Find(id);
  if (agent == nullptr) {
    // The window waited for the rank because an agent declared it, or an agent reported for it:
    // that agent is gone. Otherwise no agent was ever known to serve it.
    a.gone = declared || !id.empty();
    return a;
  }
  a.identified = true;
  a.host = agent->host;
  a.silent_seconds = std::chrono::duration<double>(now - agent->last_seen).count();
  a.connected = Connected(*agent, now);
  a.registered_after_open = agent->registered > opened;
  a.window_received = agent->window_received;
  a.command_waiting =
      std::any_of(agent->queue.begin(), agent->queue.end(), [&](const v1::Command& c) {
        return c.has_profile() && c.profile().window_id() == window_id;
      });
  a.relays_workers = agent->relays_workers;
  return a;
}

void AgentRegistry::Send(const v1::Command& cmd) {
  for (auto& [id, a] : agents_) {
    std::deque<v1::Command> one = {cmd};
    if (a.stream == nullptr || !a.stream->Push(&one)) {
      a.queue.push_back(cmd);
      while (a.queue.size() > kMaxQueuedCommands) a.queue.pop_front();
    }
  }
}

void AgentRegistry::StreamOpened(const std::string& id, CommandStream* stream,
                                 Clock::time_point now) {
  AgentState* agent = Find(id);
  if (agent == nullptr) return;
  agent->last_seen = now;
  if (agent->stream != nullptr) agent->stream->Close();
  agent->stream = stream;
  stream->Push(&agent->queue);
}

void AgentRegistry::StreamEnded(const std::string& id, CommandStream* done,
                                std::deque<v1::Command> left, Clock::time_point now) {
  AgentState* agent = Find(id);
  if (agent == nullptr) return;
  agent->last_seen = now;
  if (agent->stream == done) agent->stream = nullptr;
  for (auto c = left.rbegin(); c != left.rend(); ++c) agent->queue.push_front(std::move(*c));
  while (agent->queue.size() > kMaxQueuedCommands) agent->queue.pop_front();
  if (agent->stream != nullptr && !agent->queue.empty()) agent->stream->Push(&agent->queue);
}

std::vector<std::pair<std::string, std::string>> AgentRegistry::Expire(Clock::time_point now,
                                                                       double expiry_s) {
  std::vector<std::pair<std::string, std::string>> gone;
  for (auto it = agents_.begin(); it != agents_.end();) {
    const AgentState& a = it->second;
    if (a.stream == nullptr && now - a.last_seen > std::chrono::duration<double>(expiry_s)) {
      gone.emplace_back(it->first, a.host);
      std::erase_if(declared_by_, [&](const auto& kv) { return kv.second == it->first; });
      it = agents_.erase(it);
    } else {
      ++it;
    }
  }
  return gone;
}

void AgentRegistry::Clear() {
  declared_by_.clear();
  agents_.clear();
}

}  // namespace perftracker::server
