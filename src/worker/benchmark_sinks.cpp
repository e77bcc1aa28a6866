// The benchmark layouts' rows (output_sink.h): loose files (loose_file_sink.h) where each
// benchmark's evaluation script looks for them (plan::item_file_name), with what each needs more.

#include <filesystem>
#include <set>

#include "dpinfer/io/atomic_file.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/strings.h"
#include "dpinfer/worker/dpg_grids.h"
#include "dpinfer/worker/loose_file_sink.h"
#include "dpinfer/worker/output_sink_rows.h"

namespace dpinfer::worker {
namespace {

/// --layout geneval: GenEval's evaluate_images.py reads each prompt's metadata line (tag,
/// include, exclude) from OUT/<k>/metadata.jsonl.
class GenevalSink : public LooseFileSink {
 public:
  using LooseFileSink::LooseFileSink;

 protected:
  void before_file(const plan::Item& item, const std::string& file_name) override {
    // Written before the prompt's first image, the same by every rank.
    if (!metadata_written_.insert(item.prompt_index).second) return;
    nlohmann::json line = item.fields;
    line["prompt"] = item.prompt;
    const std::string dir = file_name.substr(0, file_name.find('/'));
    io::write_file_atomically((std::filesystem::path(context_.out) / dir / "metadata.jsonl").string(),
                              line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }

 private:
  std::set<int64_t> metadata_written_;  ///< the prompt lines whose metadata.jsonl this rank has written
};

/// --layout dpg: the ranks write the 4 images of each prompt, rank 0 composes their grids at the end.
class DpgBenchSink : public LooseFileSink {
 public:
  using LooseFileSink::LooseFileSink;

  void finish_run(const plan::ItemList& items, nlohmann::json& summary) override {
    const DpgGrids grids = make_dpg_grids(context_.out, items, context_.layout);
    summary["dpg_grids_made"] = grids.made;
    log::info("--layout dpg: {} grid(s) made in {}/grids{}", grids.made, context_.out,
              grids.incomplete ? ", " + std::to_string(grids.incomplete) +
                                     " prompt(s) without their 4 images yet (a rerun, or the shard that makes them, "
                                     "completes them)"
                               : std::string());
  }
};

}  // namespace

std::unique_ptr<OutputSink> make_geneval_sink(const OutputSinkContext& context) {
  return std::make_unique<GenevalSink>(context);
}

// --layout t2i-compbench: loose files named by the prompt (plan::item_file_name); only the
// planning check is its own.
std::unique_ptr<OutputSink> make_t2i_compbench_sink(const OutputSinkContext& context) {
  return std::make_unique<LooseFileSink>(context);
}

void check_t2i_compbench_line(const io::PromptSpec& spec, int64_t, const plan::ItemDefaults&,
                              const std::string& where) {
  if (const std::string problem = plan::t2i_compbench_name_problem(spec.prompt); !problem.empty())
    throw UsageError(where + ": the prompt cannot name a T2I-CompBench file (--layout t2i-compbench): " + problem);
}

std::unique_ptr<OutputSink> make_dpg_bench_sink(const OutputSinkContext& context) {
  return std::make_unique<DpgBenchSink>(context);
}

void check_dpg_bench_line(const io::PromptSpec& spec, int64_t line_index, const plan::ItemDefaults& defaults,
                          const std::string& where) {
  // compute_dpg_bench.py crops 4 images from each grid.
  if (spec.num_images.value_or(defaults.num_images) != 4)
    throw UsageError(where + ": --layout dpg makes a 2x2 grid of 4 images per prompt; give --num-images 4 (and no "
                     "other num_images on a line)");
  plan::Item first;
  first.id = spec.id;
  first.prompt_index = line_index;
  if (const std::string problem = plan::file_name_problem(plan::dpg_bench_name(first)); !problem.empty())
    throw UsageError(where + ": its id " + quote(*spec.id) + " cannot name a DPG-Bench grid file: " + problem);
}

}  // namespace dpinfer::worker
