// --layout webdataset's sink (output_sink.h): the items go into the rank's tar shards through
// ShardWriter (shard_writer.h), which appends their records to the manifest as it publishes each.

#include "dpinfer/worker/output_sink_rows.h"
#include "dpinfer/worker/shard_writer.h"

namespace dpinfer::worker {
namespace {

class WebDatasetSink : public OutputSink {
 public:
  explicit WebDatasetSink(const OutputSinkContext& context)
      : OutputSink(context), shards_(context.out, context.shard_size, *context.manifest, context.rank) {}

  /// An item is made when its record names a shard that is there (shard_writer.h); a record of a
  /// loose file is another layout's, which resume refuses by its image's name.
  std::string made_file(const plan::Item& item, const nlohmann::json* recorded) const override {
    if (recorded) {
      const std::string shard = recorded_file_name(*recorded);
      if (plan::layout_of_file_name(shard) == plan::Layout::kWebDataset) return shard;
    }
    return OutputSink::made_file(item, recorded);
  }

  void write(const plan::Item& item, const std::string& file_name, const std::string& bytes,
             nlohmann::json record) override {
    // Into the rank's open shard; its record reaches the manifest when the shard is published.
    shards_.add(std::move(record), file_name, bytes, item.prompt);
  }

  void flush() override { shards_.commit(); }

 private:
  ShardWriter shards_;
};

}  // namespace

std::unique_ptr<OutputSink> make_webdataset_sink(const OutputSinkContext& context) {
  return std::make_unique<WebDatasetSink>(context);
}

}  // namespace dpinfer::worker
