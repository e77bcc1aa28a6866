// libFuzzer: the model config readers on arbitrary json, as the loader reaches them: the text
// read by io::read_json_object_file, then Config::from_json. Bits 0-2 of the first byte pick
// the reader: 0 UNet2DConditionModel, 1 AutoencoderKL, 2 the CLIP text encoders, 3
// ZImageTransformer2DModel, 4 the MMDiT transformers (QwenImageTransformer2DModel,
// FluxTransformer2DModel, ChromaTransformer2DModel, SD3Transformer2DModel and Flux2Transformer2DModel), 5 AutoencoderKLQwenImage, 6 the decoder-LLM
// text encoders (Qwen2.5-VL's and Qwen3's readers) and T5EncoderModel, 7 all of them; the rest is
// the file.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "dpinfer/io/json_file.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_config.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_qwen_image_config.h"
#include "dpinfer/pipeline/models/text_encoders/clip_text_config.h"
#include "dpinfer/pipeline/models/text_encoders/decoder_llm_config.h"
#include "dpinfer/pipeline/models/text_encoders/t5_config.h"
#include "dpinfer/pipeline/models/transformers/chroma_transformer_config.h"
#include "dpinfer/pipeline/models/transformers/flux2_transformer_config.h"
#include "dpinfer/pipeline/models/transformers/flux_transformer_config.h"
#include "dpinfer/pipeline/models/transformers/qwen_image_transformer_config.h"
#include "dpinfer/pipeline/models/transformers/sd3_transformer_config.h"
#include "dpinfer/pipeline/models/transformers/z_image_transformer_config.h"
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
  const int reader = data[0] & 7;
  auto wanted = [reader](int r) { return reader == r || reader == 7; };
  nlohmann::json config;
  try {
    config = io::read_json_object_file(file.write(data + 1, size - 1));
  } catch (const Error& e) {
    fuzz::check_message(e.what());
    return 0;
  }
  if (wanted(0))
    expect_clean([&] {
      const auto unet = pipeline::UNetConfig::from_json(config);
      // What from_json promises the builder: one entry per block in every per-block list.
      if (unet.block_out_channels.size() != unet.down_block_types.size()) std::abort();
    });
  if (wanted(1)) expect_clean([&] { (void)pipeline::AutoencoderKLConfig::from_json(config).scale_factor(); });
  if (wanted(2)) expect_clean([&] { (void)pipeline::CLIPTextConfig::from_json(config); });
  if (wanted(3)) expect_clean([&] { (void)pipeline::ZImageTransformerConfig::from_json(config); });
  if (wanted(4)) {
    expect_clean([&] { (void)pipeline::QwenImageTransformerConfig::from_json(config).out_features(); });
    expect_clean([&] { (void)pipeline::FluxTransformerConfig::from_json(config).out_features(); });
    expect_clean([&] {
      const auto flux2 = pipeline::Flux2TransformerConfig::from_json(config);
      // What from_json promises the builder: a feed-forward width, and RoPE axes that fill a head.
      int64_t axes = 0;
      for (int64_t d : flux2.axes_dims_rope) axes += d;
      if (flux2.mlp_hidden_dim() < 1 || axes != flux2.attention_head_dim) std::abort();
    });
    expect_clean([&] {
      const auto chroma = pipeline::ChromaTransformerConfig::from_json(config);
      // What from_json promises the approximator: four sinusoid blocks fill its input.
      if (chroma.approximator_num_channels % 4 != 0 || chroma.mod_index_length() < 2) std::abort();
    });
    expect_clean([&] {
      const auto sd3 = pipeline::SD3TransformerConfig::from_json(config);
      // What from_json promises the builder: the text stream enters the blocks at their width.
      if (sd3.caption_projection_dim != sd3.inner_dim()) std::abort();
    });
  }
  if (wanted(5)) expect_clean([&] { (void)pipeline::AutoencoderKLQwenImageConfig::from_json(config).scale_factor(); });
  if (wanted(6)) {
    expect_clean([&] { (void)pipeline::DecoderLLMConfig::qwen2_5_vl_from_json(config); });
    expect_clean([&] { (void)pipeline::DecoderLLMConfig::qwen3_from_json(config); });
    expect_clean([&] {
      const auto t5 = pipeline::T5Config::from_json(config);
      // What from_json promises the bucket function: room for exact and log buckets.
      if (t5.relative_attention_num_buckets < 4 || t5.relative_attention_max_distance <= t5.relative_attention_num_buckets / 4)
        std::abort();
    });
  }
  return 0;
}
