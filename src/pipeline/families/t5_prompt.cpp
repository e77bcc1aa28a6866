// Ref: diffusers 0.36 FluxPipeline._get_t5_prompt_embeds and StableDiffusion3Pipeline._get_t5_prompt_embeds.
#include "t5_prompt.h"

#include "denoising.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {

void check_t5_tokenizer_fits(const Tokenizer& tokenizer, const T5Config& encoder, const std::string& tokenizer_name,
                             const std::string& encoder_name) {
  if (static_cast<int64_t>(tokenizer.vocab_size()) > encoder.vocab_size)
    throw InputError(tokenizer_name + ": " + std::to_string(tokenizer.vocab_size()) + " tokens, more than " +
                     encoder_name + "'s (T5) vocab_size " + std::to_string(encoder.vocab_size) +
                     "; the components do not belong together");
}

at::Tensor t5_prompt_embeds(T5EncoderModelImpl& encoder, const Tokenizer& tokenizer,
                            const std::vector<std::string>& texts, int max_sequence_length, bool negative,
                            const at::Device& device, at::ScalarType dtype) {
  std::vector<int64_t> ids;
  ids.reserve(texts.size() * static_cast<size_t>(max_sequence_length));
  for (const std::string& text : texts) {
    const Encoding e = tokenizer.encode(text, max_sequence_length);
    warn_truncated(text, negative, e.dropped_tokens, max_sequence_length, "T5 (max_sequence_length)");
    ids.insert(ids.end(), e.ids.begin(), e.ids.end());
  }
  const at::Tensor input_ids =
      at::tensor(ids, at::kLong).view({static_cast<int64_t>(texts.size()), max_sequence_length}).to(device);
  return encoder.forward(input_ids).to(dtype);  // [N, max_sequence_length, d_model]
}

}  // namespace dpinfer::pipeline
