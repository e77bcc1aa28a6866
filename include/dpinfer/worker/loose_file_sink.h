#pragma once
// --layout flat (output_sink.h): each image a file of its own in --out, named by
// plan::item_file_name() ("000042.png", or "00004/000042.png" with --files-per-dir), written
// atomically (io/atomic_file.h) and made durable before its record is appended to the rank's
// manifest. Exactly once: a file without a record is made again (resume.h), a record is never
// written before its file. The benchmark layouts (benchmark_sinks.cpp) are loose files too, with
// their own checks and extras around these writes.

#include <memory>
#include <string>

#include "dpinfer/io/atomic_file.h"
#include "dpinfer/worker/output_sink.h"

namespace dpinfer::worker {

class LooseFileSink : public OutputSink {
 public:
  explicit LooseFileSink(OutputSinkContext context) : OutputSink(context), subdirectories_(context.out) {}

  void write(const plan::Item& item, const std::string& file_name, const std::string& bytes,
             nlohmann::json record) override;

 protected:
  /// Called by write() once the file's directories are there, before the file: a layout's extra
  /// files beside it (GenEval's metadata.jsonl). Nothing here.
  virtual void before_file(const plan::Item& item, const std::string& file_name);

  /// Makes `file_name`'s directories under --out (durably) before the first file goes into each:
  /// --files-per-dir's "00001/012345.png", a benchmark layout's "00012/samples/00000.png".
  void ensure_directories(const std::string& file_name);

 private:
  io::SubdirectoryMaker subdirectories_;  ///< the writer thread's alone
};

}  // namespace dpinfer::worker
