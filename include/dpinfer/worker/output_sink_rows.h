#pragma once
// What output_sink.cpp's table of layouts is made of: each row's maker, and its check of a prompt
// line where it has one. Each is defined beside its sink: loose_file_sink.cpp (flat),
// benchmark_sinks.cpp (geneval, t2i-compbench, dpg), webdataset_sink.cpp.

#include <memory>

#include "dpinfer/worker/output_sink.h"

namespace dpinfer::worker {

std::unique_ptr<OutputSink> make_flat_sink(const OutputSinkContext& context);
std::unique_ptr<OutputSink> make_geneval_sink(const OutputSinkContext& context);
std::unique_ptr<OutputSink> make_t2i_compbench_sink(const OutputSinkContext& context);
std::unique_ptr<OutputSink> make_dpg_bench_sink(const OutputSinkContext& context);
std::unique_ptr<OutputSink> make_webdataset_sink(const OutputSinkContext& context);

/// The T2I-CompBench scripts read the prompt from the file name: one that cannot name a file is refused.
void check_t2i_compbench_line(const io::PromptSpec& spec, int64_t line_index, const plan::ItemDefaults& defaults,
                              const std::string& where);

/// DPG-Bench crops 4 images from each grid: a line must make 4, and its id name a grid file.
void check_dpg_bench_line(const io::PromptSpec& spec, int64_t line_index, const plan::ItemDefaults& defaults,
                          const std::string& where);

}  // namespace dpinfer::worker
