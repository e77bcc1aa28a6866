// `dpinfer status OUT [--prompts FILE]`: how far a run is, from the prompts file and
// the manifests alone. The item list comes from the generate options, parsed by
// generate's own parser (parse_generate_args), so --shard, --jsonl and --config
// mean what they mean to the worker. Without --prompts (and --num-images), the
// run's own, from OUT/run.json.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>
#include <iostream>

#include "dpinfer/cli/run_dir_commands.h"
#include "dpinfer/io/json_file.h"
#include "dpinfer/io/manifest.h"
#include "dpinfer/io/prompt_file.h"
#include "dpinfer/launcher/termination.h"
#include "dpinfer/util/cli_reference.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/strings.h"
#include "parse_command_line.h"
#include "dpinfer/plan/batches.h"
#include "dpinfer/plan/generate_options.h"
#include "dpinfer/plan/items.h"
#include "dpinfer/plan/run_status.h"
#include "dpinfer/plan/sharding.h"

namespace dpinfer::cli {
namespace {

/// What OUT/run.json says of the run that wrote OUT, for a status command that leaves
/// it out: the prompts file (its absolute path; none for a run that read stdin) and
/// --num-images (how many items a line that sets none gives). Each is nullopt when
/// run.json is missing, unreadable or from before it was recorded.
struct RecordedRun {
  bool readable = false;  ///< run.json is there and is a JSON object
  std::optional<std::string> prompts_path;
  std::optional<int> num_images;
  std::optional<int> batch_size;  ///< --batch-size, which cuts the batches and so the shards
  std::optional<std::string> prompt_column;  ///< --prompt-column, for a CSV/TSV prompts file
  std::optional<bool> keep_fields;           ///< --keep-fields: the file's unknown keys were kept, not refused
};

RecordedRun recorded_run(const std::string& out) {
  const std::string path = (std::filesystem::path(out) / "run.json").string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return {};
  nlohmann::json run;
  try {
    run = io::read_json_object_file(path);
  } catch (const Error&) {
    return {};  // a torn or foreign run.json says nothing
  }
  RecordedRun r;
  r.readable = true;
  if (const auto p = run.find("prompts_path"); p != run.end() && p->is_string() && !p->get<std::string>().empty())
    r.prompts_path = p->get<std::string>();
  if (const auto o = run.find("options"); o != run.end() && o->is_object()) {
    const auto n = o->find("num_images");
    if (n != o->end() && n->is_number_integer() && io::kImagesPerLineRange.contains(n->get<int64_t>()))
      r.num_images = n->get<int>();
    const auto b = o->find("batch_size");
    if (b != o->end() && b->is_number_integer() && b->get<int64_t>() >= 1 && b->get<int64_t>() <= 1000000)
      r.batch_size = b->get<int>();
    if (const auto c = o->find("prompt_column"); c != o->end() && c->is_string()) r.prompt_column = c->get<std::string>();
    if (const auto k = o->find("keep_fields"); k != o->end() && k->is_boolean()) r.keep_fields = k->get<bool>();
  }
  return r;
}


struct StatusArgs {
  std::string out, prompts;
  bool json = false;
};

/// The parser, once for the command and for the option reference (status_options_markdown).
std::unique_ptr<CLI::App> status_parser(StatusArgs& a) {
  auto app = std::make_unique<CLI::App>(
      "Counts the done, failed and missing items of a run, overall and per shard (or per rank), from the "
      "prompts file and OUT's manifests. Exit status 0: all done; 3: items failed or missing; 2: bad input.\n\n"
      "  dpinfer status OUT [--prompts FILE] [--json] [GENERATE OPTIONS, e.g. --shard I/N, --config F]",
      "dpinfer status");
  app->add_option("out", a.out, "the output directory (--out of dpinfer generate), first")->required();
  app->add_option("--prompts", a.prompts,
                  "the prompts file the run was given (default: the one OUT/run.json names, and its --num-images)");
  app->add_flag("--json", a.json, "print one JSON object instead of lines");
  app->allow_extras();  // the rest are generate options
  return app;
}

}  // namespace

std::string status_options_markdown() {
  StatusArgs a;
  return options_markdown(*status_parser(a));
}

int run_status_command(const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  StatusArgs a;
  const std::unique_ptr<CLI::App> app = status_parser(a);
  if (!parse_command_line(*app, args, "dpinfer status")) return exit_status::kSuccess;
  std::string out = a.out, prompts = a.prompts;
  const bool json = a.json;
  std::error_code ec;
  if (!fs::is_directory(out, ec)) throw UsageError(quote(out) + " is not a directory; give the --out of dpinfer generate");
  const RecordedRun recorded = recorded_run(out);
  if (prompts.empty()) {
    if (!recorded.readable)
      throw UsageError(quote(out) + " holds no readable run.json to name the prompts file (has a rank started?); give " +
                       "--prompts FILE");
    if (!recorded.prompts_path)
      throw UsageError(quote((fs::path(out) / "run.json").string()) + " names no prompts file (the run read stdin); " +
                       "give --prompts FILE");
    prompts = *recorded.prompts_path;
    if (!fs::exists(prompts, ec))
      throw UsageError(quote((fs::path(out) / "run.json").string()) + " names the prompts file " + quote(prompts) +
                       ", which is not there any more; give --prompts FILE");
  }
  std::vector<std::string> generate_args{prompts, "--out", out};
  bool batch_size_given = false, prompt_column_given = false;
  for (const std::string& arg : app->remaining()) {
    batch_size_given = batch_size_given || arg == "--batch-size" || arg.rfind("--batch-size=", 0) == 0;
    prompt_column_given = prompt_column_given || arg == "--prompt-column" || arg.rfind("--prompt-column=", 0) == 0;
    if (arg == "--out" || arg == "-o" || arg.rfind("--out=", 0) == 0)
      throw UsageError("dpinfer status: give the output directory as the first argument, not with " + arg);
    generate_args.push_back(arg);
  }
  plan::GenerateOptions o = plan::parse_generate_args(generate_args);

  // Read as the run read it: its --prompt-column and --keep-fields unless given here.
  if (!prompt_column_given && recorded.prompt_column) o.prompt_column = *recorded.prompt_column;
  if (recorded.keep_fields) o.keep_fields = o.keep_fields || *recorded.keep_fields;
  auto specs = io::read_prompt_file(o.prompts, plan::prompt_file_options(o));
  if (specs.empty()) throw InputError(quote(o.prompts) + " holds no prompt (blank lines and # comments are skipped)");
  // A shard is a run of whole batches (plan/batches.h): the run's --batch-size unless given.
  const int batch_size = batch_size_given ? o.batch_size : recorded.batch_size.value_or(o.batch_size);
  // Only the item count and the prompts matter here; the defaults are the worker's
  // where they need no model.
  plan::ItemDefaults d;
  // Not given: the run's own (run.json), so that `dpinfer status OUT --prompts FILE` counts
  // what `--num-images 4` made without being told again.
  const bool num_images_recorded = !o.num_images && recorded.num_images;
  d.num_images = o.num_images.value_or(recorded.num_images.value_or(1));
  d.negative_prompt = o.negative_prompt;
  d.seed = o.seed;
  d.seed_from = plan::parse_seed_from(o.seed_from);
  const plan::BatchPlan batches(specs, d.num_images, batch_size);
  const plan::ItemList items(std::move(specs), d);
  std::optional<plan::OuterShard> only;
  if (!o.shard.empty()) only = plan::parse_outer_shard(o.shard);

  const io::ManifestSet set = io::read_manifests(out);
  const plan::RunStatus st = plan::run_status(items, batches, set, only);
  if (!st.foreign_records.empty())
    throw InputError(quote(out) + ": " + st.foreign_records.front() + "; was it written from another prompts file " +
                     "than " + quote(o.prompts) + " or with another --num-images than " + std::to_string(d.num_images) +
                     (num_images_recorded ? " (its run.json's)" : "") + "?");
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
