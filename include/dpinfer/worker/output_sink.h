#pragma once
// Where a rank's made items go (issue 27, item 1): one OutputSink per --layout, chosen from a
// table of rows (output_sink.cpp), so that the run loop (generate_run.h) writes every item
// through one interface and never branches on the layout. A row is a layout and the function
// that makes its sink:
//   flat           loose files in --out, in --files-per-dir's numbered subdirectories (loose_file_sink.h)
//   geneval        loose files, and each prompt's metadata.jsonl before its first image (benchmark_sinks.cpp)
//   t2i-compbench  loose files named by the prompt, checked at planning (benchmark_sinks.cpp)
//   dpg            loose files, and rank 0's 2x2 grids at the end of the run (benchmark_sinks.cpp, dpg_grids.h)
//   webdataset     tar shards with parquet indexes (webdataset_sink.cpp, shard_writer.h)
// A new layout is its sink and one row, with its name and item file names in plan/items.h
// (which merge and status read too, without a sink). Resume (resume.h) asks the sink which file
// says an item is made. The image's bytes come from the --image-format's row (image_encoder.h).
//
// Threads: a row's check_line runs at planning, before the sink is made; made_file() on the
// denoising thread (resume's check of a batch before it is made, during the loop in dynamic mode);
// write() and flush() on the writer thread (write_queue.h) alone; finish_run() on rank 0 once every
// rank is done.

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dpinfer/io/manifest.h"
#include "dpinfer/io/prompt_file.h"
#include "dpinfer/plan/generate_options.h"
#include "dpinfer/plan/items.h"

namespace dpinfer::worker {

/// What a sink is made with.
struct OutputSinkContext {
  std::string out;            ///< --out
  plan::OutputLayout layout;  ///< --layout, --image-format, --files-per-dir
  int64_t shard_size = 0;     ///< --shard-size (webdataset)
  int rank = 0;
  io::ManifestWriter* manifest = nullptr;  ///< the rank's manifest: a made item's record goes there
};

class OutputSink {
 public:
  virtual ~OutputSink() = default;

  /// The file, relative to --out, whose presence (with a record that says ok) means `item` is made:
  /// its image (plan::item_file_name), unless the layout bundles items, where `recorded` (the item's
  /// latest ok record, or null) names the bundle.
  virtual std::string made_file(const plan::Item& item, const nlohmann::json* recorded) const;

  /// Writer thread: stores `item`'s encoded image `bytes` as `file_name` (plan::item_file_name), and
  /// its `record` (status ok) in the manifest once the image is durable, or with its bundle. Throws
  /// SystemError (ENOSPC on a full disk) or Error.
  virtual void write(const plan::Item& item, const std::string& file_name, const std::string& bytes,
                     nlohmann::json record) = 0;

  /// Writer thread, at the end of the writing (a stopped run's too, unless the writer failed):
  /// publishes what the sink holds.
  virtual void flush() {}

  /// Rank 0, after the manifests are merged: what the layout makes of the whole output (`items`,
  /// the prompts file's), logged and counted in `summary` (run.json).
  virtual void finish_run(const plan::ItemList& items, nlohmann::json& summary);

 protected:
  explicit OutputSink(OutputSinkContext context) : context_(std::move(context)) {}
  const OutputSinkContext context_;
};

/// Planning, per prompt line (`spec`, line `line_index` of the file, items from `defaults`):
/// refuses a line the layout cannot write with a UsageError that starts with `where`. Before the
/// sink is made (the manifest it writes to is opened once every line has passed).
using CheckLine = void (*)(const io::PromptSpec& spec, int64_t line_index, const plan::ItemDefaults& defaults,
                           const std::string& where);

/// One row of the table: a layout, its check of each prompt line (null: none), and its sink.
struct OutputSinkRow {
  plan::Layout layout;
  CheckLine check_line;
  std::unique_ptr<OutputSink> (*make)(const OutputSinkContext& context);
};

/// Every row, one per plan::Layout.
const std::vector<OutputSinkRow>& output_sink_rows();

/// The row of `layout` (every layout has one: OutputSinks.EveryLayoutHasOneRow checks it).
const OutputSinkRow& output_sink_row(plan::Layout layout);

/// The sink of `context.layout.layout`, from its row.
std::unique_ptr<OutputSink> make_output_sink(const OutputSinkContext& context);

/// A record's "file_name" (where its sink put the item), or "" when it has none or it is not a
/// string.
std::string recorded_file_name(const nlohmann::json& record);

}  // namespace dpinfer::worker
