// The output tables (issue 27, item 1): every --layout has one sink row and every --image-format
// one encoder row, and the loose-file sink writes a file before its record. The layouts' and
// formats' behaviour end to end is tested by the worker runs (test_worker_process.cpp,
// test_webdataset.cpp, benchmark_layouts_test.sh), which go through these rows.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "dpinfer/util/error.h"
#include "dpinfer/worker/image_encoder.h"
#include "dpinfer/worker/output_sink.h"
#include "support/temp_dir.h"

using namespace dpinfer;
using namespace dpinfer::test;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}


TEST(OutputSinks, EveryLayoutHasOneRow) {
  const std::vector<plan::Layout> layouts = {plan::Layout::kFlat, plan::Layout::kGeneval, plan::Layout::kT2iCompBench,
                                             plan::Layout::kDpgBench, plan::Layout::kWebDataset};
  std::set<plan::Layout> rows;
  for (const worker::OutputSinkRow& row : worker::output_sink_rows()) {
    EXPECT_TRUE(rows.insert(row.layout).second) << plan::to_string(row.layout) << " has two rows";
    EXPECT_NE(row.make, nullptr);
  }
  for (plan::Layout layout : layouts) {
    EXPECT_TRUE(rows.count(layout)) << plan::to_string(layout) << " has no row";
    // Every name --layout takes reaches its own row.
    EXPECT_EQ(worker::output_sink_row(plan::parse_layout(plan::to_string(layout))).layout, layout);
  }
  EXPECT_EQ(rows.size(), layouts.size());
}

TEST(ImageEncoders, EveryFormatHasOneRow) {
  pipeline::RgbImage image;
  image.width = 2;
  image.height = 2;
  image.pixels.assign(12, 200);
  plan::GenerateOptions o;
  const std::vector<std::pair<plan::ImageFormat, std::string>> magic = {
      {plan::ImageFormat::kPng, "\x89PNG"}, {plan::ImageFormat::kJpeg, "\xFF\xD8\xFF"}, {plan::ImageFormat::kWebp, "RIFF"}};
  EXPECT_EQ(worker::image_encoders().size(), magic.size());
  for (const auto& [format, start] : magic) {
    const worker::ImageEncoder& row = worker::image_encoder(format);
    EXPECT_EQ(row.format, format);
    const worker::EncodedImage file = row.encode(image, "a prompt\nSteps: 1", "{\"index\": 0}", o, "000000.x");
    EXPECT_EQ(file.bytes.substr(0, start.size()), start) << plan::to_string(format);
    EXPECT_TRUE(file.warning.empty());
  }
  // WebP's bound is the row's, said as before the table.
  try {
    worker::check_image_size(worker::image_encoder(plan::ImageFormat::kWebp), 16384, 64, "\"p.txt\" line 1");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "\"p.txt\" line 1: size 16384x64 is larger than a WebP holds (16383x16383); use "
                           "--image-format png");
  }
  EXPECT_NO_THROW(worker::check_image_size(worker::image_encoder(plan::ImageFormat::kPng), 16384, 64, "x"));
}

TEST(OutputSinks, TheFlatSinkWritesTheFileInItsDirectoryThenTheRecord) {
  TempDir dir;
  const std::string manifest_path = dir.file("manifest.rank0.jsonl");
  {
    io::ManifestWriter manifest(manifest_path);
    worker::OutputSinkContext context{dir.path(), {plan::Layout::kFlat, plan::ImageFormat::kPng, 10}, 0, 0, &manifest};
    auto sink = worker::make_output_sink(context);
    plan::Item item;
    item.index = 42;
    const std::string name = plan::item_file_name(item, context.layout);
    EXPECT_EQ(name, "00004/000042.png");
    EXPECT_EQ(sink->made_file(item, nullptr), name);
    sink->write(item, name, "bytes", {{"index", 42}, {"file_name", name}, {"status", "ok"}});
    sink->flush();
  }
  EXPECT_EQ(read_all(dir.file("00004/000042.png")), "bytes");
  EXPECT_EQ(nlohmann::json::parse(read_all(manifest_path))["file_name"], "00004/000042.png");
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
