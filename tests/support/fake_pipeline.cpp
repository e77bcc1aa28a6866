#include "support/fake_pipeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "dpinfer/util/error.h"

namespace dpinfer::test {
namespace {

uint64_t mix(uint64_t x) {  // SplitMix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

class FakePipeline : public pipeline::TextToImage {
 public:
  explicit FakePipeline(const pipeline::LoadRequest& r) {
    info_.family = "fake";
    info_.family_label = "Fake";
    info_.model_name = "fake-model";
    info_.model_path = r.model;
    info_.scheduler_name = r.scheduler.empty() ? "fake" : r.scheduler;
    info_.sampler_label = "Fake";
    info_.device = r.device;
    info_.dtype = r.dtype;
    info_.vae_tiling = r.vae_tiling;
    info_.default_width = 16;
    info_.default_height = 8;
    info_.default_steps = 4;
    info_.default_guidance_scale = 7.5;
    // Two settings, as a real family declares them, so that the worker's handling of
    // settings (records, infotext, resume, per-line values) is tested without a model.
    info_.setting_specs = {
        {"clip_skip", pipeline::SettingSpec::Type::kInteger, 0, 0, 100, "a fake setting", "Clip skip", 1},
        {"guidance_rescale", pipeline::SettingSpec::Type::kNumber, 0.0, 0, 1e6, "a fake setting", "CFG Rescale phi", 0}};
    info_.settings = pipeline::resolve_settings(info_.setting_specs, r.settings, "--set", info_.family_label);
  }
  const pipeline::PipelineInfo& info() const override { return info_; }

  /// Sleeps `ms` in 10 ms "denoising steps", honouring the cancel check between them.
  void work_for(int ms) const {
    for (int left = ms; left > 0; left -= 10) {
      throw_if_cancelled();
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(left, 10)));
    }
  }

  std::vector<pipeline::RgbImage> generate(const std::vector<pipeline::ImageRequest>& batch) override {
    std::vector<pipeline::RgbImage> out;
    if (const char* log = std::getenv("DPINFER_FAKE_BATCH_LOG")) log_batch(log, batch);
    if (const char* d = std::getenv("DPINFER_FAKE_DELAY_MS")) work_for(std::atoi(d) * static_cast<int>(batch.size()));
    for (const auto& r : batch) {
      if (r.prompt.find("EXIT-ITEM") != std::string::npos) ::_exit(7);
      if (r.prompt.find("SLOW-ITEM") != std::string::npos) work_for(1000);
      if (r.prompt.find("FAIL-ITEM") != std::string::npos) throw Error("simulated failure for '" + r.prompt + "'");
      pipeline::RgbImage img;
      img.width = r.width;
      img.height = r.height;
      img.pixels = fake_pixels(r);
      img.finite = r.prompt.find("NAN-ITEM") == std::string::npos;
      out.push_back(std::move(img));
    }
    return out;
  }

 private:
  /// Appends one line naming the batch's items in order, "prompt#seed prompt#seed ...", with
  /// one write() under O_APPEND, so the lines of several ranks do not interleave.
  static void log_batch(const char* path, const std::vector<pipeline::ImageRequest>& batch) {
    std::string line;
    for (const auto& r : batch) line += (line.empty() ? "" : " ") + r.prompt + "#" + std::to_string(r.seed);
    line += "\n";
    const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) throw Error(std::string("DPINFER_FAKE_BATCH_LOG: cannot open ") + path);
    const ssize_t n = ::write(fd, line.data(), line.size());
    ::close(fd);
    if (n != static_cast<ssize_t>(line.size())) throw Error(std::string("DPINFER_FAKE_BATCH_LOG: cannot write ") + path);
  }

  pipeline::PipelineInfo info_;
};

}  // namespace

std::vector<uint8_t> fake_pixels(const pipeline::ImageRequest& r) {
  uint64_t h = std::hash<std::string>{}(r.prompt + "\x1f" + r.negative_prompt);
  h = mix(h ^ r.seed) ^ mix(static_cast<uint64_t>(r.steps) * 1000003u + static_cast<uint64_t>(r.guidance_scale * 1000));
  std::vector<uint8_t> px(static_cast<size_t>(r.width) * r.height * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(mix(h + i) & 0xFF);
  return px;
}

std::unique_ptr<pipeline::TextToImage> make_fake_pipeline(const pipeline::LoadRequest& request) {
  return std::make_unique<FakePipeline>(request);
}

}  // namespace dpinfer::test
