#include "dpinfer/worker/sharding.h"

#include <algorithm>
#include <cstdlib>

#include "dpinfer/util/error.h"

namespace dpinfer::worker {

ShardMode parse_shard_mode(const std::string& name) {
  if (name == "contiguous") return ShardMode::kContiguous;
  if (name == "strided") return ShardMode::kStrided;
  if (name == "dynamic") return ShardMode::kDynamic;
  throw UsageError("--shard-mode: expected contiguous, strided or dynamic, got '" + name + "'");
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

std::vector<int64_t> static_assignment(int64_t n, int world, int rank, ShardMode mode) {
  std::vector<int64_t> out;
  if (mode == ShardMode::kContiguous) {
    auto [b, e] = contiguous_range(n, world, rank);
    for (int64_t i = b; i < e; ++i) out.push_back(i);
  } else if (mode == ShardMode::kStrided) {
    for (int64_t i = rank; i < n; i += world) out.push_back(i);
  }
  return out;
}

OuterShard parse_outer_shard(const std::string& text) {
  auto slash = text.find('/');
  char* end = nullptr;
  OuterShard s;
  bool ok = slash != std::string::npos && slash > 0;
  if (ok) {
    long i = std::strtol(text.c_str(), &end, 10);
    ok = end == text.c_str() + slash;
    long n = std::strtol(text.c_str() + slash + 1, &end, 10);
    ok = ok && *end == '\0' && slash + 1 < text.size() && n >= 1 && i >= 0 && i < n && n <= 1000000;
    s = {static_cast<int>(i), static_cast<int>(n)};
  }
  if (!ok) throw UsageError("--shard: expected I/N with 0 <= I < N (e.g. 3/10), got '" + text + "'");
  return s;
}

int64_t dynamic_chunk_size(int64_t n, int world, int batch_size) {
  // Small enough that the last claims are short (tail latency ~ one chunk), large
  // enough to batch: one batch, but at most n / (4 world) when that is larger.
  return std::max<int64_t>(batch_size, std::min<int64_t>(4L * batch_size, n / (4L * world)));
}

}  // namespace dpinfer::worker
