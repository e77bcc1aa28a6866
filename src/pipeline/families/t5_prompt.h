#pragma once
// The T5 side of the families that condition on T5's hidden states without a mask: FLUX.1
// (text_encoder_2 / tokenizer_2) and SD3 / SD3.5 (text_encoder_3 / tokenizer_3). Both follow
// diffusers 0.36's _get_t5_prompt_embeds (pipelines/flux/pipeline_flux.py and
// pipelines/stable_diffusion_3/pipeline_stable_diffusion_3.py), which are the same function.

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "dpinfer/pipeline/models/text_encoders/t5_config.h"
#include "dpinfer/pipeline/models/text_encoders/t5_encoder_model.h"
#include "dpinfer/pipeline/text/tokenizer.h"

namespace dpinfer::pipeline {

/// Throws InputError unless T5 tokenizer `tokenizer_name` fits T5 encoder `encoder_name` (config
/// `encoder`): every id the tokenizer gives (its pieces and <extra_id_N> tokens) is a row of the
/// encoder's embedding (vocab_size). The real T5 v1.1 has 32,100 tokens for 32,128 rows.
void check_t5_tokenizer_fits(const Tokenizer& tokenizer, const T5Config& encoder, const std::string& tokenizer_name,
                             const std::string& encoder_name);

/// _get_t5_prompt_embeds for `texts`: each tokenized with padding="max_length",
/// max_length=max_sequence_length and truncation (the first max_sequence_length - 1 tokens and
/// </s>, then <pad>; diffusers' warning, through warn_truncated, when a text is cut), T5's
/// last_hidden_state of the ids on `device` with no attention mask, cast to `dtype` (the
/// encoder's, as diffusers casts to text_encoder.dtype). Every text has the same length, so a
/// row does not depend on the other texts. Returns [N, max_sequence_length, d_model].
at::Tensor t5_prompt_embeds(T5EncoderModelImpl& encoder, const Tokenizer& tokenizer,
                            const std::vector<std::string>& texts, int max_sequence_length, bool negative,
                            const at::Device& device, at::ScalarType dtype);

}  // namespace dpinfer::pipeline
