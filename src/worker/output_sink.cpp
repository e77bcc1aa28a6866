#include "dpinfer/worker/output_sink.h"

#include "dpinfer/util/error.h"
#include "dpinfer/worker/output_sink_rows.h"

namespace dpinfer::worker {

std::string OutputSink::made_file(const plan::Item& item, const nlohmann::json*) const {
  return plan::item_file_name(item, context_.layout);
}

void OutputSink::finish_run(const plan::ItemList&, nlohmann::json&) {}

const std::vector<OutputSinkRow>& output_sink_rows() {
  static const std::vector<OutputSinkRow> rows = {
      {plan::Layout::kFlat, nullptr, make_flat_sink},
      {plan::Layout::kGeneval, nullptr, make_geneval_sink},
      {plan::Layout::kT2iCompBench, check_t2i_compbench_line, make_t2i_compbench_sink},
      {plan::Layout::kDpgBench, check_dpg_bench_line, make_dpg_bench_sink},
      {plan::Layout::kWebDataset, nullptr, make_webdataset_sink},
  };
  return rows;
}

const OutputSinkRow& output_sink_row(plan::Layout layout) {
  for (const OutputSinkRow& row : output_sink_rows())
    if (row.layout == layout) return row;
  throw Error("no output sink for --layout " + plan::to_string(layout));
}

std::unique_ptr<OutputSink> make_output_sink(const OutputSinkContext& context) {
  return output_sink_row(context.layout.layout).make(context);
}

std::string recorded_file_name(const nlohmann::json& record) {
  auto it = record.find("file_name");
  return it != record.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace dpinfer::worker
