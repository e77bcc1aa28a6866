// `dpinfer merge OUT`: the worker's end-of-run merge (io::read_manifests and
// io::write_merged), run by hand once every job array task has ended: each task's
// rank 0 merges at its own end, so the last to finish may not have seen the others.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <memory>

#include "dpinfer/cli/run_dir_commands.h"
#include "dpinfer/io/manifest.h"
#include "dpinfer/launcher/termination.h"
#include "dpinfer/util/cli_reference.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"
#include "parse_command_line.h"

namespace dpinfer::cli {
namespace {

struct MergeArgs {
  std::string out;
  bool latest_wins = false;
};

/// The parser, once for the command and for the option reference (merge_options_markdown).
std::unique_ptr<CLI::App> merge_parser(MergeArgs& a) {
  auto app = std::make_unique<CLI::App>(
      "Merges every manifest*.jsonl in OUT (all ranks, shards and job array tasks) into OUT/metadata.jsonl and "
      "OUT/failures.jsonl, as the worker does at the end of a run; for a --layout webdataset run, also writes "
      "OUT/index.parquet over every shard, and any shard's own index that is missing.",
      "dpinfer merge");
  app->add_option("out", a.out, "the output directory (--out of dpinfer generate)")->required();
  app->add_flag("--latest-wins", a.latest_wins,
                "when two manifests disagree on what an item is (prompt, seed, size, ...), keep its latest record "
                "instead of refusing to merge");
  return app;
}

}  // namespace

std::string merge_options_markdown() {
  MergeArgs a;
  return options_markdown(*merge_parser(a));
}

int run_merge_command(const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  MergeArgs a;
  const std::unique_ptr<CLI::App> app = merge_parser(a);
  if (!parse_command_line(*app, args, "dpinfer merge")) return exit_status::kSuccess;
  const std::string& out = a.out;
  const bool latest_wins = a.latest_wins;
  std::error_code ec;
  if (!fs::is_directory(out, ec)) throw UsageError("'" + out + "' is not a directory; give the --out of dpinfer generate");
  io::ManifestSet set = io::read_manifests(out);
  if (set.manifests.empty())
    throw InputError("'" + out + "' holds no manifest*.jsonl, so there is nothing to merge; give the --out of "
                     "dpinfer generate");
  if (!set.conflicts.empty() && !latest_wins)
    throw InputError("'" + out + "': " + set.conflicts.front().describe() + " (" +
                     std::to_string(set.conflicts.size()) +
                     " item(s) conflict: the directory mixes runs of different prompt files or options); nothing was "
                     "written; use one --out per run, or pass --latest-wins to keep each item's latest record");
  size_t missing_files = 0;
  for (const auto& [index, entry] : set.items) missing_files += entry.state == io::ItemState::kMissingFile;
  io::MergeResult r = io::write_merged(out, set);
  log::info("merged {} manifest(s): {} row(s) in {}, {} in {}", set.manifests.size(), r.ok,
            (fs::path(out) / "metadata.jsonl").string(), r.failed, (fs::path(out) / "failures.jsonl").string());
  if (r.conflicts)
    log::warn("{} item(s) have conflicting records (first: {}); kept each one's latest (--latest-wins)", r.conflicts,
              set.conflicts.front().describe());
  if (r.duplicates)
    log::warn("{} item(s) were generated more than once (an ok record in several manifests, e.g. overlapping "
              "--shard specs); kept each one's latest record",
              r.duplicates);
  if (missing_files)
    log::warn("{} item(s) recorded as done have no PNG in {} and are left out; a resumed run regenerates them",
              missing_files, out);
  if (r.dataset_index)
    log::info("--layout webdataset: {} over every shard{}", (fs::path(out) / "index.parquet").string(),
              r.shard_indexes_written
                  ? fmt::format("; {} shard(s) had no index (a run stopped between a shard and its index), now "
                                "written", r.shard_indexes_written)
                  : std::string());
  if (!r.no_index_why.empty()) log::warn("--layout webdataset: no parquet index written: {}", r.no_index_why);
  if (r.torn_lines) log::warn("{} torn manifest line(s) from an interrupted run were ignored", r.torn_lines);
  return exit_status::kSuccess;
}

}  // namespace dpinfer::cli
