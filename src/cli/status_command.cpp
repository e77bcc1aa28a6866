// `dpinfer status OUT --prompts FILE`: how far a run is, from the prompts file and
// the manifests alone. The item list comes from the generate options, parsed by
// generate's own parser (parse_generate_args), so --shard, --jsonl and --config
// mean what they mean to the worker.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>

#include "dpinfer/cli/run_dir_commands.h"
#include "dpinfer/io/json_file.h"
#include "dpinfer/io/manifest.h"
#include "dpinfer/io/prompt_file.h"
#include "dpinfer/launcher/termination.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/strings.h"
#include "parse_command_line.h"
#include "dpinfer/plan/generate_options.h"
#include "dpinfer/plan/items.h"
#include "dpinfer/plan/run_status.h"
#include "dpinfer/plan/sharding.h"

namespace dpinfer::cli {
namespace {

/// The --num-images of the run that wrote `out` (its run.json's resolved options), for a
/// status command that gives none: it decides how many items each prompt line gives.
/// nullopt when run.json is missing, unreadable or from before the option existed.
std::optional<int> recorded_num_images(const std::string& out) {
  const std::string path = (std::filesystem::path(out) / "run.json").string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  try {
    const nlohmann::json run = io::read_json_object_file(path);
    const nlohmann::json* n = run.contains("options") && run["options"].is_object() && run["options"].contains("num_images")
                                  ? &run["options"]["num_images"]
                                  : nullptr;
    if (n && n->is_number_integer() && io::kImagesPerLineRange.contains(n->get<int64_t>())) return n->get<int>();
  } catch (const Error&) {
    // A torn or foreign run.json says nothing; the default stands.
  }
  return std::nullopt;
}

}  // namespace

int run_status_command(const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  std::string out, prompts;
  bool json = false;
  CLI::App app(
      "Counts the done, failed and missing items of a run, overall and per shard (or per rank), from the "
      "prompts file and OUT's manifests. Exit status 0: all done; 3: items failed or missing; 2: bad input.\n\n"
      "  dpinfer status OUT --prompts FILE [--json] [GENERATE OPTIONS, e.g. --shard I/N, --config F]",
      "dpinfer status");
  app.add_option("out", out, "the output directory (--out of dpinfer generate), first")->required();
  app.add_option("--prompts", prompts, "the prompts file the run was given")->required();
  app.add_flag("--json", json, "print one JSON object instead of lines");
  app.allow_extras();  // the rest are generate options
  if (!parse_command_line(app, args, "dpinfer status")) return exit_status::kSuccess;
  std::vector<std::string> generate_args{prompts, "--out", out};
  for (const std::string& a : app.remaining()) {
    if (a == "--out" || a == "-o" || a.rfind("--out=", 0) == 0)
      throw UsageError("dpinfer status: give the output directory as the first argument, not with " + a);
    generate_args.push_back(a);
  }
  plan::GenerateOptions o = plan::parse_generate_args(generate_args);

  std::error_code ec;
  if (!fs::is_directory(out, ec)) throw UsageError(quote(out) + " is not a directory; give the --out of dpinfer generate");
  auto specs = io::read_prompt_file(o.prompts, o.jsonl_stdin);
  if (specs.empty()) throw InputError(quote(o.prompts) + " holds no prompt (blank lines and # comments are skipped)");
  // Only the item count and the prompts matter here; the defaults are the worker's
  // where they need no model.
  plan::ItemDefaults d;
  // Not given: the run's own (run.json), so that `dpinfer status OUT --prompts FILE` counts
  // what `--num-images 4` made without being told again.
  const std::optional<int> recorded = o.num_images ? std::nullopt : recorded_num_images(out);
  d.num_images = o.num_images.value_or(recorded.value_or(1));
  d.negative_prompt = o.negative_prompt;
  d.seed = o.seed;
  d.seed_from = plan::parse_seed_from(o.seed_from);
  const plan::ItemList items(std::move(specs), d);
  std::optional<plan::OuterShard> only;
  if (!o.shard.empty()) only = plan::parse_outer_shard(o.shard);

  const io::ManifestSet set = io::read_manifests(out);
  const plan::RunStatus st = plan::run_status(items, set, only);
  if (!st.foreign_records.empty())
    throw InputError(quote(out) + ": " + st.foreign_records.front() + "; was it written from another prompts file " +
                     "than " + quote(o.prompts) + " or with another --num-images than " + std::to_string(d.num_images) +
                     (recorded ? " (its run.json's)" : "") + "?");
  if (json) {
    std::cout << st.to_json().dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    for (const std::string& line : st.lines()) std::cout << line << "\n";
  }
  if (st.manifests == 0) log::warn("'{}' holds no manifest yet: no rank has started", out);
  if (!st.conflicts.empty())
    log::warn("{} item(s) have conflicting records (first: {}); 'dpinfer merge' refuses them", st.conflicts.size(),
              st.conflicts.front().describe());
  if (st.duplicates) log::warn("{} item(s) were generated more than once", st.duplicates);
  if (st.torn_lines) log::warn("{} torn manifest line(s) from an interrupted run were ignored", st.torn_lines);
  return st.complete() ? exit_status::kSuccess : exit_status::kItemsFailed;
}

}  // namespace dpinfer::cli
