// The node agents of the job being collected (AgentRegistry): who registered, which ranks each
// declared and so speaks for, each one's command stream and the commands queued while it has
// none, and when each was last heard from. What the collector asks of them: may this agent
// upload for that rank, how many are connected, what is known of the agent of a silent rank,
// which agents a long job can forget. Not thread-safe: the collector's mutex guards it, as it
// guards the rest of the server's state (server/server_impl.h).
#ifndef PERFTRACKER_SERVER_AGENT_REGISTRY_H_
#define PERFTRACKER_SERVER_AGENT_REGISTRY_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "diagnose/memory_growth.h"
#include "perftracker.pb.h"
#include "server/rank_state.h"

namespace perftracker::server {

class CommandStream;

struct AgentState {
  std::string host;
  std::vector<int> ranks;
  std::chrono::steady_clock::time_point last_seen;  // its last call or open command stream
  std::deque<v1::Command> queue;                    // commands while no stream is open
  CommandStream* stream = nullptr;                  // the agent's open WatchCommands stream
  std::chrono::steady_clock::time_point registered;
  // What it reports of itself (ReportIterationsRequest): the newest window command it received
  // (nullopt: it does not say), and whether its ranks are worker processes on its socket.
  std::optional<int64_t> window_received;
  bool relays_workers = false;
  diagnose::HostMemoryState memory;  // its host's, as it last said
};

class AgentRegistry {
 public:
  using Clock = std::chrono::steady_clock;
  using Map = std::map<std::string, AgentState>;

  // Commands kept for an agent without an open stream (the newest; a window needs one).
  static constexpr size_t kMaxQueuedCommands = 16;
  // An agent that called this recently counts as connected while it reconnects its stream (an
  // agent reconnects within a second or two).
  static constexpr int kConnectedSeconds = 10;

  // A new agent's id: "agent-<n>-<SECRET's first 24 characters>", numbered from 1.
  std::string NextId(std::string_view secret);

  // Registers agent ID from HOST at NOW; each of RANKS is now spoken for by it.
  AgentState& Add(const std::string& id, std::string host, std::vector<int> ranks,
                  Clock::time_point now);
  AgentState* Find(const std::string& id);
  const AgentState* Find(const std::string& id) const;

  // Whether agent ID may speak for RANK: an agent that declared ranks speaks for those; one that
  // declared none (a folder-watching agent) for any rank no other agent declared.
  enum class Ownership { kOwns, kUnknownAgent, kAnotherAgents };
  Ownership Owns(const std::string& id, int rank) const;

  // The ranks the agents declared (empty: none did, the ranks are those that report).
  std::set<int> DeclaredRanks() const;

  // Connected: a command stream open, or a call in the last kConnectedSeconds. A job that ended
  // leaves agents with neither.
  static bool Connected(const AgentState& a, Clock::time_point now);
  size_t CountConnected(Clock::time_point now) const;

  // What is known of the agent of RANK, which did not report window WINDOW_ID (opened at
  // OPENED; DECLARED: its ranks were declared by agents): the agent that declared it, else
  // REPORTED_BY (the agent that last reported for it; empty: none).
  AgentSeen SeenFor(int rank, const std::string& reported_by, bool declared, int64_t window_id,
                    Clock::time_point opened, Clock::time_point now) const;

  // Queues CMD for every agent and writes it to the open streams. An agent without a stream
  // keeps the newest kMaxQueuedCommands: older ones are for windows that are over.
  void Send(const v1::Command& cmd);

  // Agent ID's command stream opens at NOW: a reconnecting agent's old stream is closed (which
  // gives back what it did not send), and the queue is written to the new one.
  void StreamOpened(const std::string& id, CommandStream* stream, Clock::time_point now);
  // Agent ID's stream DONE ended at NOW; LEFT, what it did not send, goes back to the front of
  // the queue (to the new stream, if one opened meanwhile). Nothing if the agent was forgotten.
  void StreamEnded(const std::string& id, CommandStream* done, std::deque<v1::Command> left,
                   Clock::time_point now);

  // Forgets the agents silent for over EXPIRY_S seconds with no open stream, and the ranks they
  // declared (no longer waited for). Returns their ids and hosts, for the log.
  std::vector<std::pair<std::string, std::string>> Expire(Clock::time_point now, double expiry_s);

  // A new job: every agent and declaration is forgotten (the previous job's, without streams).
  void Clear();

  size_t size() const { return agents_.size(); }
  Map::iterator begin() { return agents_.begin(); }
  Map::iterator end() { return agents_.end(); }
  Map::const_iterator begin() const { return agents_.begin(); }
  Map::const_iterator end() const { return agents_.end(); }

 private:
  Map agents_;
  std::map<int, std::string> declared_by_;  // rank -> the agent that registered it
  int64_t next_ = 1;
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_AGENT_REGISTRY_H_
