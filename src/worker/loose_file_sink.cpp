#include "dpinfer/worker/loose_file_sink.h"
#include "dpinfer/worker/output_sink_rows.h"

#include <filesystem>

namespace dpinfer::worker {

void LooseFileSink::write(const plan::Item& item, const std::string& file_name, const std::string& bytes,
                          nlohmann::json record) {
  ensure_directories(file_name);
  before_file(item, file_name);
  io::write_file_atomically((std::filesystem::path(context_.out) / file_name).string(), bytes);
  context_.manifest->append(record);
}

void LooseFileSink::before_file(const plan::Item&, const std::string&) {}

void LooseFileSink::ensure_directories(const std::string& file_name) {
  for (size_t slash = file_name.find('/'); slash != std::string::npos; slash = file_name.find('/', slash + 1))
    subdirectories_.ensure(file_name.substr(0, slash));
}

std::unique_ptr<OutputSink> make_flat_sink(const OutputSinkContext& context) {
  return std::make_unique<LooseFileSink>(context);
}

}  // namespace dpinfer::worker
