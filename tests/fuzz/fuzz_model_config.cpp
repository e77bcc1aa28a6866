// libFuzzer: the model config readers (UNet2DConditionModel's, AutoencoderKL's and the CLIP
// text encoders' config.json) on arbitrary json, as the loader reaches them: the text read
// by io::read_json_object_file, then Config::from_json. Bits 0-1 of the first byte pick the
// reader (3: all three); the rest is the file.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "dpinfer/io/json_file.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_config.h"
#include "dpinfer/pipeline/models/text_encoders/clip_text_config.h"
#include "dpinfer/pipeline/models/unets/unet_2d_condition_config.h"
#include "dpinfer/util/error.h"
#include "fuzz_support.h"

using namespace dpinfer;

namespace {

template <typename Fn>
void expect_clean(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {  // bad input: a one-line, bounded, printable message
    fuzz::check_message(e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::MemFile file("config.json");
  if (size == 0) return 0;
  const int reader = data[0] & 3;
  nlohmann::json config;
  try {
    config = io::read_json_object_file(file.write(data + 1, size - 1));
  } catch (const Error& e) {
    fuzz::check_message(e.what());
    return 0;
  }
  if (reader == 0 || reader == 3)
    expect_clean([&] {
      const auto unet = pipeline::UNetConfig::from_json(config);
      // What from_json promises the builder: one entry per block in every per-block list.
      if (unet.block_out_channels.size() != unet.down_block_types.size()) std::abort();
    });
  if (reader == 1 || reader == 3)
    expect_clean([&] { (void)pipeline::AutoencoderKLConfig::from_json(config).scale_factor(); });
  if (reader == 2 || reader == 3) expect_clean([&] { (void)pipeline::CLIPTextConfig::from_json(config); });
  return 0;
}
