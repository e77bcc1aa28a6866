#pragma once
// `dpinfer merge` and `dpinfer status`: commands on an output directory, without
// LibTorch, a GPU or running workers (docs/merge-and-status.md).

#include <string>
#include <vector>

namespace dpinfer::cli {

/// `dpinfer merge OUT [--latest-wins]`: every manifest*.jsonl in OUT into
/// OUT/metadata.jsonl and OUT/failures.jsonl, as the worker's own end-of-run merge.
/// Returns 0; throws UsageError/InputError (status 2) for a missing directory, no
/// manifests, or items whose records conflict (unless --latest-wins).
int run_merge_command(const std::vector<std::string>& args);

/// `dpinfer status OUT --prompts FILE [--json] [GENERATE OPTIONS]`: done, failed
/// and missing items overall and per shard (or rank). Returns 0 when every item is
/// done, 3 when some failed or are missing; throws UsageError/InputError (status 2).
int run_status_command(const std::vector<std::string>& args);

/// Their options as Markdown tables, from the parsers themselves (the option reference,
/// docs/reference/options.md).
std::string merge_options_markdown();
std::string status_options_markdown();

}  // namespace dpinfer::cli
