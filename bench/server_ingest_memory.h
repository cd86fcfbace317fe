// The --rank-state part of bench/server_ingest (see server_ingest_memory.cc).
#ifndef PERFTRACKER_BENCH_SERVER_INGEST_MEMORY_H_
#define PERFTRACKER_BENCH_SERVER_INGEST_MEMORY_H_

#include <cstdint>

namespace perftracker::bench {

// RANKS RankStates fed ITERATIONS iterations each; prints peak RSS and the percentiles' error
// against exact. 0: under 2 GB and within 1%.
int RankStateMemory(int ranks, int64_t iterations);

}  // namespace perftracker::bench

#endif  // PERFTRACKER_BENCH_SERVER_INGEST_MEMORY_H_
