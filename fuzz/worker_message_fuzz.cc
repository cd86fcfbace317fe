// libFuzzer target: any line a worker process could write must parse into a typed message
// (kMalformed at worst) within the bounds of agent/worker_message.h, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "agent/worker_message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace a = perftracker::agent;
  static simdjson::dom::parser parser;
  static a::WorkerMessage m;
  a::ParseWorkerMessage(std::string_view(reinterpret_cast<const char*>(data), size), parser, &m);
  using L = a::WorkerMessageLimits;
  if (m.items.size() > L::kMaxItems || m.stacks.threads.size() > L::kMaxThreads ||
      m.path.size() > L::kMaxString)
    __builtin_trap();
  for (const auto& t : m.stacks.threads)
    if (t.frames.size() > L::kMaxFrames) __builtin_trap();
  return 0;
}
