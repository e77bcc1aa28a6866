#include "dpinfer/plan/sharding.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <optional>

#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::plan {

ShardMode parse_shard_mode(const std::string& name) {
  if (name == "contiguous") return ShardMode::kContiguous;
  if (name == "strided") return ShardMode::kStrided;
  if (name == "dynamic") return ShardMode::kDynamic;
  throw UsageError("--shard-mode: expected contiguous, strided or dynamic, got " + quote(name, 60));
}

std::string to_string(ShardMode mode) {
  switch (mode) {
    case ShardMode::kContiguous: return "contiguous";
    case ShardMode::kStrided: return "strided";
    case ShardMode::kDynamic: return "dynamic";
  }
  return "?";
}

std::pair<int64_t, int64_t> contiguous_range(int64_t n, int parts, int index) {
  int64_t k = n / parts, extra = n % parts;
  int64_t begin = index * k + std::min<int64_t>(index, extra);
  return {begin, begin + k + (index < extra ? 1 : 0)};
}

StaticShare static_share(int64_t n, int world, int rank, ShardMode mode) {
  if (mode == ShardMode::kContiguous) {
    auto [b, e] = contiguous_range(n, world, rank);
    return {b, e, 1};
  }
  if (mode == ShardMode::kStrided) return {rank, n, world};
  return {};
}

std::vector<int64_t> static_assignment(int64_t n, int world, int rank, ShardMode mode) {
  const StaticShare share = static_share(n, world, rank, mode);
  std::vector<int64_t> out;
  for (int64_t k = 0; k < share.size(); ++k) out.push_back(share.at(k));
  return out;
}

namespace {

constexpr long long kMaxOuterShards = 1000000;

/// A shard number as a person or a script writes it: decimal digits only, without
/// sign, spaces or leading zeros (strtol took " 1", "+1" and "01", so one shard had
/// several spellings). Past 18 digits it saturates, to be refused by the cap.
/// nullopt when malformed.
std::optional<long long> shard_number(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  if (s.size() > 1 && s[0] == '0') return std::nullopt;
  return s.size() > 18 ? std::numeric_limits<long long>::max() : std::stoll(s);
}

}  // namespace

OuterShard parse_outer_shard(const std::string& text) {
  const auto slash = text.find('/');
  std::optional<long long> i, n;
  if (slash != std::string::npos) i = shard_number(text.substr(0, slash)), n = shard_number(text.substr(slash + 1));
  if (!i || !n)
    throw UsageError("--shard: expected I/N in plain decimal digits (no sign, spaces or leading zeros) with "
                     "0 <= I < N, e.g. 3/10; got " + quote(text, 60));
  if (*n > kMaxOuterShards)
    throw UsageError("--shard: N may be at most " + std::to_string(kMaxOuterShards) + ", got " + quote(text, 60) +
                     "; split the prompts file into fewer, larger shards");
  if (*n < 1 || *i >= *n)
    throw UsageError("--shard: expected I/N with 0 <= I < N (e.g. 3/10), got " + quote(text, 60));
  return {static_cast<int>(*i), static_cast<int>(*n)};
}

std::optional<OuterShardChoice> outer_shard_from_env(const EnvVars& env) {
  const std::string* task = find_env(env, "SLURM_ARRAY_TASK_ID");
  if (!task) return std::nullopt;
  constexpr long long kMaxId = 1LL << 40;
  const long long id = env_int(env, "SLURM_ARRAY_TASK_ID", 0, kMaxId);
  const long long min = env_int(env, "SLURM_ARRAY_TASK_MIN", 0, kMaxId);
  const long long max = env_int(env, "SLURM_ARRAY_TASK_MAX", 0, kMaxId);
  const long long step = env_int_or(env, "SLURM_ARRAY_TASK_STEP", 1, 1, kMaxId);
  const long long count = env_int(env, "SLURM_ARRAY_TASK_COUNT", 1, 1000000);
  const std::string vars = "SLURM_ARRAY_TASK_ID=" + std::to_string(id) + ", SLURM_ARRAY_TASK_MIN=" +
                           std::to_string(min) + ", SLURM_ARRAY_TASK_MAX=" + std::to_string(max) +
                           ", SLURM_ARRAY_TASK_STEP=" + std::to_string(step) +
                           (find_env(env, "SLURM_ARRAY_TASK_STEP") ? "" : " (unset)") +
                           ", SLURM_ARRAY_TASK_COUNT=" + std::to_string(count);
  // Only a range MIN-MAX:STEP numbers its tasks densely; a list such as 1,4,9 has
  // ids whose position in the list no task can know from its own variables.
  if (min > max || id < min || id > max || (id - min) % step != 0 || count != (max - min) / step + 1)
    throw UsageError("this SLURM job array is not a plain range MIN-MAX[:STEP] (" + vars +
                     "), so the task's shard cannot be derived; submit a range such as --array=0-" +
                     std::to_string(count - 1) + ", or pass --shard I/N explicitly with 0 <= I < N");
  OuterShardChoice c;
  c.shard = {static_cast<int>((id - min) / step), static_cast<int>(count)};
  c.sharded = true;
  c.source = vars;
  return c;
}

OuterShardChoice choose_outer_shard(const std::string& shard_option, const EnvVars& env) {
  OuterShardChoice c;
  if (!shard_option.empty()) {
    c.shard = parse_outer_shard(shard_option);
    c.sharded = true;
    c.source = "--shard " + shard_option;
    if (const std::string* task = find_env(env, "SLURM_ARRAY_TASK_ID"))
      c.source += " (given, so SLURM_ARRAY_TASK_ID=" + printable(*task, 60) + " is not used)";
    return c;
  }
  if (auto from_array = outer_shard_from_env(env)) return *from_array;
  c.source = "none";
  return c;
}

int64_t dynamic_chunk_size(int64_t batches, int world) {
  // Small enough that the last claims are short (tail latency ~ one chunk): one batch,
  // up to 4 while there are at least 4 world of them.
  return std::max<int64_t>(1, std::min<int64_t>(4, batches / (4L * world)));
}

}  // namespace dpinfer::plan
