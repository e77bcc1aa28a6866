#pragma once
// Which items a rank generates. Pure functions of (item count, parts, index), so
// they are unit-tested and identical on every rank.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dpinfer/plan/env_vars.h"

namespace dpinfer::plan {

enum class ShardMode { kContiguous, kStrided, kDynamic };

/// "contiguous", "strided" or "dynamic"; throws UsageError otherwise.
ShardMode parse_shard_mode(const std::string& name);
std::string to_string(ShardMode mode);

/// [begin, end) of part `index` of `parts` over n items, as accelerate's
/// split_between_processes: the first n mod parts parts get one extra item.
std::pair<int64_t, int64_t> contiguous_range(int64_t n, int parts, int index);

/// The positions a rank takes in a static mode, without listing them: begin,
/// begin + step, ... below end. A run of a billion items so needs no billion-entry list.
struct StaticShare {
  int64_t begin = 0, end = 0, step = 1;
  /// How many positions.
  int64_t size() const { return begin < end ? (end - begin + step - 1) / step : 0; }
  /// Position `k` (0 <= k < size()).
  int64_t at(int64_t k) const { return begin + k * step; }
};

/// The positions (0..n-1) that rank `rank` of `world` takes in a static mode: a
/// contiguous_range, or every world-th position from `rank` (kStrided). kDynamic has no
/// static assignment (the ranks claim chunks at run time): an empty share.
StaticShare static_share(int64_t n, int world, int rank, ShardMode mode);

/// static_share() as a list, for tests and small n.
std::vector<int64_t> static_assignment(int64_t n, int world, int rank, ShardMode mode);

/// An outer shard "I/N" (--shard, or a SLURM array task).
struct OuterShard {
  int index = 0;
  int count = 1;
};

/// Parses "I/N" with 0 <= I < N; throws UsageError.
OuterShard parse_outer_shard(const std::string& text);

/// A run's outer shard and where it came from.
struct OuterShardChoice {
  OuterShard shard;      ///< {0, 1} when not sharded
  bool sharded = false;  ///< false: the whole prompts file (no --shard, no job array)
  std::string source;    ///< for the log: "--shard 2/5", "SLURM_ARRAY_TASK_ID=4 (...)", "none"
};

/// The outer shard of a SLURM job array task, or nullopt when SLURM_ARRAY_TASK_ID
/// is unset. Task ids MIN, MIN+STEP, ..., MAX (SLURM_ARRAY_TASK_MIN/MAX/STEP, STEP
/// 1 when unset) map to dense shard indexes 0..COUNT-1 (SLURM_ARRAY_TASK_COUNT), so
/// --array=0-10:2 gives shards 0/6..5/6. An array that is not such a range (e.g.
/// --array=1,4,9) has no well-defined dense index: UsageError, naming the variables
/// and asking for an explicit --shard I/N.
std::optional<OuterShardChoice> outer_shard_from_env(const EnvVars& env);

/// --shard when given (it always wins, in or out of SLURM), else the job array's
/// (outer_shard_from_env), else none. Throws UsageError.
OuterShardChoice choose_outer_shard(const std::string& shard_option, const EnvVars& env);

/// Size of a dynamic-mode claim, in whole batches (plan/batches.h) of the `batches` to
/// share: a few, so that claims are cheap but the tail stays short.
int64_t dynamic_chunk_size(int64_t batches, int world);

}  // namespace dpinfer::plan
