// dpinfer_write_bench: the writer's cost per image, by format and layout (issue 27). It encodes
// one 512x512 picture (--size) as dpinfer's writer does (PNG with its two texts, JPEG, WebP lossy
// and lossless with theirs) and writes it N times, one thread: as loose files (write_file_atomically:
// a temporary, fsync, rename) and into tar shards (io::TarWriter, one fsync and rename per shard).
// Prints images/s and bytes per image for each; tools/bench/output_formats.sh sets it beside
// Pillow's own saves. A developer tool: never installed.
//
// The picture is synthetic but image-like (smooth gradients, soft shapes, fine texture), made
// from a fixed seed, since compressors judged on noise say nothing of real images.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <tuple>
#include <random>
#include <string>
#include <vector>

#include "dpinfer/io/atomic_file.h"
#include "dpinfer/io/jpeg_writer.h"
#include "dpinfer/io/png_writer.h"
#include "dpinfer/io/tar_writer.h"
#include "dpinfer/io/webp_writer.h"

namespace {

std::vector<uint8_t> picture(int side) {
  std::vector<uint8_t> rgb(static_cast<size_t>(side) * side * 3);
  std::mt19937 rng(7);
  std::normal_distribution<double> grain(0.0, 3.0);
  for (int y = 0; y < side; ++y)
    for (int x = 0; x < side; ++x) {
      const double u = double(x) / side, v = double(y) / side;
      // sky-to-ground gradient, a soft sun, two soft discs, fine grain
      double r = 90 + 120 * v, g = 140 + 60 * (1 - v), b = 210 - 130 * v;
      const double sun = std::exp(-(std::pow(u - 0.7, 2) + std::pow(v - 0.25, 2)) * 60);
      r += 120 * sun, g += 100 * sun, b += 30 * sun;
      for (const auto& [cx, cy, cr] : {std::tuple{0.3, 0.7, 0.15}, std::tuple{0.6, 0.8, 0.1}}) {
        const double d = std::sqrt(std::pow(u - cx, 2) + std::pow(v - cy, 2));
        const double w = 1 / (1 + std::exp((d - cr) * 120));
        r = r * (1 - w) + 180 * w, g = g * (1 - w) + 60 * w, b = b * (1 - w) + 50 * w;
      }
      uint8_t* p = &rgb[(static_cast<size_t>(y) * side + x) * 3];
      for (int c = 0; c < 3; ++c) p[c] = static_cast<uint8_t>(std::clamp((c == 0 ? r : c == 1 ? g : b) + grain(rng), 0.0, 255.0));
    }
  return rgb;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  int side = 512, count = 100, shard_size = 100;
  std::string dir = "/tmp/dpinfer-write-bench", dump;
  CLI::App app("Times dpinfer's image writer per format and layout (tools/bench/README.md).");
  app.add_option("--size", side, "picture side, pixels")->capture_default_str();
  app.add_option("--count", count, "images written per format and layout")->capture_default_str();
  app.add_option("--shard-size", shard_size, "images per shard")->capture_default_str();
  app.add_option("--dir", dir, "where to write (removed first and after)")->capture_default_str();
  app.add_option("--dump-picture", dump, "write the picture's raw RGB bytes here (for the Pillow peer), and exit");
  CLI11_PARSE(app, argc, argv);
  namespace fs = std::filesystem;
  const std::vector<uint8_t> rgb = picture(side);
  if (!dump.empty()) {
    dpinfer::io::write_file_atomically(dump, std::string(rgb.begin(), rgb.end()));
    return 0;
  }
  const std::string infotext = "a sunset over two red hills\nSteps: 28, Sampler: Euler, CFG scale: 3.5, Seed: 7, "
                               "Size: 512x512, Model hash: 0123456789, Model: bench";
  const std::string record(900, 'r');  // a record's usual size
  struct Format {
    const char* name;
    const char* ext;
    std::function<std::string()> encode;
  };
  const std::vector<Format> formats = {
      {"png", "png", [&] { return dpinfer::io::encode_png(rgb.data(), side, side, {{"parameters", infotext}, {"dpinfer", record, true}}); }},
      {"jpeg q95", "jpg", [&] { return dpinfer::io::encode_jpeg(rgb.data(), side, side, 95, {infotext, record}).bytes; }},
      {"webp q90", "webp", [&] { return dpinfer::io::encode_webp(rgb.data(), side, side, 90, false, {infotext, record}); }},
      {"webp lossless", "webp", [&] { return dpinfer::io::encode_webp(rgb.data(), side, side, 90, true, {infotext, record}); }},
  };
  std::printf("format,layout,images_per_s,bytes_per_image\n");
  for (const Format& f : formats) {
    for (const bool shards : {false, true}) {
      fs::remove_all(dir);
      fs::create_directories(dir);
      size_t bytes = 0;
      const auto start = std::chrono::steady_clock::now();
      std::unique_ptr<dpinfer::io::AtomicFileWriter> file;
      std::unique_ptr<dpinfer::io::TarWriter> tar;
      for (int i = 0; i < count; ++i) {
        const std::string image = f.encode();
        bytes += image.size();
        char key[16];
        std::snprintf(key, sizeof key, "%09d", i);
        if (!shards) {
          dpinfer::io::write_file_atomically(dir + "/" + key + "." + f.ext, image);
          continue;
        }
        if (!tar) {
          file = std::make_unique<dpinfer::io::AtomicFileWriter>(dir + "/" + key + ".tar");
          tar = std::make_unique<dpinfer::io::TarWriter>(*file);
        }
        tar->add(std::string(key) + "." + f.ext, image, 0);
        tar->add(std::string(key) + ".txt", infotext.substr(0, 27), 0);
        tar->add(std::string(key) + ".json", record, 0);
        if ((i + 1) % shard_size == 0 || i + 1 == count) {
          tar->finish();
          file->sync();
          file->publish();
          tar.reset();
          file.reset();
        }
      }
      const double s = seconds_since(start);
      std::printf("%s,%s,%.1f,%zu\n", f.name, shards ? "shards" : "loose", count / s, bytes / count);
    }
  }
  fs::remove_all(dir);
  return 0;
}
