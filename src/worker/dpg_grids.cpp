#include "dpinfer/worker/dpg_grids.h"

#include <sys/stat.h>

#include <array>
#include <filesystem>

#include "dpinfer/io/atomic_file.h"
#include "dpinfer/io/image_reader.h"
#include "dpinfer/io/png_writer.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::worker {
namespace {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && st.st_size > 0;
}

}  // namespace

DpgGrids make_dpg_grids(const std::string& out, const plan::ItemList& items, const plan::OutputLayout& layout) {
  namespace fs = std::filesystem;
  DpgGrids result;
  io::SubdirectoryMaker dirs(out);
  for (int64_t first = 0; first + 4 <= items.size(); first += 4) {
    std::array<plan::Item, 4> four;
    for (int j = 0; j < 4; ++j) four[j] = items.at(first + j);
    if (four[0].image != 0 || four[3].image != 3 || four[0].prompt_index != four[3].prompt_index)
      throw Error("--layout dpg: item " + std::to_string(first) + " does not start a prompt of 4 images");
    const std::string grid = "grids/" + plan::dpg_bench_name(four[0]) + ".png";
    if (exists((fs::path(out) / grid).string())) continue;
    std::array<io::RgbImageData, 4> images;
    bool complete = true;
    nlohmann::json sources = nlohmann::json::array();
    for (int j = 0; j < 4 && complete; ++j) {
      const std::string name = plan::item_file_name(four[j], layout);
      const std::string path = (fs::path(out) / name).string();
      complete = exists(path);
      if (complete) images[j] = io::read_rgb_image(path);
      sources.push_back(name);
    }
    if (!complete) {
      ++result.incomplete;
      continue;
    }
    const int w = images[0].width, h = images[0].height;
    for (const io::RgbImageData& im : images)
      if (im.width != w || im.height != h)
        throw Error("--layout dpg: the 4 images of " + quote(grid) + " differ in size; DPG-Bench crops equal squares");
    // 2x2, row-major: j = 0 top left, 1 top right, 2 bottom left, 3 bottom right.
    std::vector<uint8_t> pixels(static_cast<size_t>(2 * w) * (2 * h) * 3);
    for (int j = 0; j < 4; ++j) {
      const int x0 = (j % 2) * w, y0 = (j / 2) * h;
      for (int y = 0; y < h; ++y)
        std::copy_n(images[j].pixels.data() + static_cast<size_t>(y) * w * 3, static_cast<size_t>(w) * 3,
                    pixels.data() + (static_cast<size_t>(y0 + y) * 2 * w + x0) * 3);
    }
    dirs.ensure("grids");
    const nlohmann::json record = {{"prompt", four[0].prompt}, {"grid_of", sources}};
    io::write_file_atomically((fs::path(out) / grid).string(),
                              io::encode_png(pixels.data(), 2 * w, 2 * h, {{"dpinfer", record.dump(), true}}));
    ++result.made;
  }
  return result;
}

}  // namespace dpinfer::worker
