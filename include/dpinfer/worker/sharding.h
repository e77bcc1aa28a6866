#pragma once
// Which items a rank generates. Pure functions of (item count, parts, index), so
// they are unit-tested and identical on every rank.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dpinfer::worker {

enum class ShardMode { kContiguous, kStrided, kDynamic };

/// "contiguous", "strided" or "dynamic"; throws UsageError otherwise.
ShardMode parse_shard_mode(const std::string& name);
std::string to_string(ShardMode mode);

/// [begin, end) of part `index` of `parts` over n items, as accelerate's
/// split_between_processes: the first n mod parts parts get one extra item.
std::pair<int64_t, int64_t> contiguous_range(int64_t n, int parts, int index);

/// The positions (0..n-1) that rank `rank` of `world` takes in a static mode.
/// kDynamic has no static assignment (the ranks claim chunks at run time).
std::vector<int64_t> static_assignment(int64_t n, int world, int rank, ShardMode mode);

/// An outer shard "I/N" (--shard, or a SLURM array task).
struct OuterShard {
  int index = 0;
  int count = 1;
};

/// Parses "I/N" with 0 <= I < N; throws UsageError.
OuterShard parse_outer_shard(const std::string& text);

/// Size of a dynamic-mode claim: a few batches, so that claims are cheap but the
/// tail stays short.
int64_t dynamic_chunk_size(int64_t n, int world, int batch_size);

}  // namespace dpinfer::worker
