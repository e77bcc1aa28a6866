#include "dpinfer/pipeline/models/model_classes.h"

#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_flux2.h"
#include "dpinfer/pipeline/models/autoencoders/autoencoder_kl_qwen_image.h"
#include "dpinfer/pipeline/models/text_encoders/clip_text_model.h"
#include "dpinfer/pipeline/models/text_encoders/decoder_llm_text_encoder.h"
#include "dpinfer/pipeline/models/text_encoders/t5_encoder_model.h"
#include "dpinfer/pipeline/models/transformers/chroma_transformer.h"
#include "dpinfer/pipeline/models/transformers/flux2_transformer.h"
#include "dpinfer/pipeline/models/transformers/flux_transformer.h"
#include "dpinfer/pipeline/models/transformers/qwen_image_transformer.h"
#include "dpinfer/pipeline/models/transformers/sd3_transformer.h"
#include "dpinfer/pipeline/models/transformers/z_image_transformer.h"
#include "dpinfer/pipeline/models/unets/unet_2d_condition.h"
#include "dpinfer/pipeline/models/vision/qwen2_5_vl_vision.h"

namespace dpinfer::pipeline {
namespace {

const char* down_name(UNetConfig::DownBlockType t) {
  return t == UNetConfig::DownBlockType::kCrossAttnDownBlock2D ? "CrossAttnDownBlock2D" : "DownBlock2D";
}

const char* up_name(UNetConfig::UpBlockType t) {
  return t == UNetConfig::UpBlockType::kCrossAttnUpBlock2D ? "CrossAttnUpBlock2D" : "UpBlock2D";
}

const char* mid_name(UNetConfig::MidBlockType t) {
  switch (t) {
    case UNetConfig::MidBlockType::kNone: return "none";
    case UNetConfig::MidBlockType::kUNetMidBlock2DCrossAttn: return "UNetMidBlock2DCrossAttn";
    case UNetConfig::MidBlockType::kUNetMidBlock2D: return "UNetMidBlock2D";
  }
  return "?";
}

nlohmann::ordered_json clip_facts(const nlohmann::json& config) {
  const CLIPTextConfig c = CLIPTextConfig::from_json(config);
  nlohmann::ordered_json j;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_attention_heads"] = c.num_attention_heads;
  j["hidden_act"] = c.hidden_act == CLIPTextConfig::Activation::kQuickGELU ? "quick_gelu" : "gelu";
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  return j;
}

nlohmann::ordered_json clip_projection_facts(const nlohmann::json& config) {
  nlohmann::ordered_json j = clip_facts(config);
  j["projection_dim"] = CLIPTextConfig::from_json(config).projection_dim;
  return j;
}

nlohmann::ordered_json decoder_llm_facts(const DecoderLLMConfig& c) {
  nlohmann::ordered_json j;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["rope_theta"] = c.rope_theta;
  j["qk_norm"] = c.qk_norm;
  if (!c.mrope_section.empty()) j["mrope_section"] = c.mrope_section;
  return j;
}

nlohmann::ordered_json qwen2_5_vl_facts(const nlohmann::json& config) {
  return decoder_llm_facts(DecoderLLMConfig::qwen2_5_vl_from_json(config));
}

nlohmann::ordered_json qwen2_5_vl_vision_facts(const nlohmann::json& config) {
  if (!config.is_object() || !config.contains("vision_config") || !config["vision_config"].is_object())
    throw Error("config.json has no vision_config object; it is not a Qwen2.5-VL model with a vision tower");
  const Qwen2_5_VLVisionConfig c = Qwen2_5_VLVisionConfig::from_json(config["vision_config"]);
  nlohmann::ordered_json j;
  j["depth"] = c.depth;
  j["hidden_size"] = c.hidden_size;
  j["num_heads"] = c.num_heads;
  j["out_hidden_size"] = c.out_hidden_size;
  j["patch_size"] = c.patch_size;
  j["spatial_merge_size"] = c.spatial_merge_size;
  j["window_size"] = c.window_size;
  j["fullatt_block_indexes"] = c.fullatt_block_indexes;
  return j;
}

nlohmann::ordered_json qwen3_facts(const nlohmann::json& config) {
  return decoder_llm_facts(DecoderLLMConfig::qwen3_from_json(config));
}

std::shared_ptr<torch::nn::Module> build_qwen2_5_vl(const nlohmann::json& config, const at::TensorOptions& options) {
  return std::make_shared<DecoderLLMTextEncoderImpl>(DecoderLLMConfig::qwen2_5_vl_from_json(config), options);
}

std::shared_ptr<torch::nn::Module> build_qwen3(const nlohmann::json& config, const at::TensorOptions& options) {
  return std::make_shared<DecoderLLMTextEncoderImpl>(DecoderLLMConfig::qwen3_from_json(config), options);
}

// Qwen3ForCausalLM (FLUX.2 [klein]'s text encoder): Qwen3Model under "model", plus an lm_head the text path
// does not use (skipped at load; absent from the file when tie_word_embeddings is set).
std::shared_ptr<torch::nn::Module> build_qwen3_causal_lm(const nlohmann::json& config,
                                                         const at::TensorOptions& options) {
  DecoderLLMConfig c = DecoderLLMConfig::qwen3_from_json(config);
  c.prefix = "model";
  return std::make_shared<DecoderLLMTextEncoderImpl>(c, options);
}

nlohmann::ordered_json mistral3_facts(const nlohmann::json& config) {
  const DecoderLLMConfig c = DecoderLLMConfig::mistral3_from_json(config);
  nlohmann::ordered_json j = decoder_llm_facts(c);
  j["sliding_window"] = c.sliding_window > 0 ? nlohmann::ordered_json(c.sliding_window) : nlohmann::ordered_json();
  return j;
}

// Mistral3ForConditionalGeneration (FLUX.2 [dev]'s text encoder): its text model, saved by transformers 4.x as
// "language_model.model.*" (the reverse of its _checkpoint_conversion_mapping); the vision tower, the
// multimodal projector and the lm_head, which the text path does not use, are skipped at load.
std::shared_ptr<torch::nn::Module> build_mistral3(const nlohmann::json& config, const at::TensorOptions& options) {
  return std::make_shared<DecoderLLMTextEncoderImpl>(DecoderLLMConfig::mistral3_from_json(config), options);
}

std::shared_ptr<torch::nn::Module> build_flux2_vae(const nlohmann::json& config, const at::TensorOptions& options) {
  return std::make_shared<AutoencoderKLFlux2Impl>(AutoencoderKLFlux2Config::from_json(config), options);
}

nlohmann::ordered_json t5_facts(const nlohmann::json& config) {
  const T5Config c = T5Config::from_json(config);
  static const char* const kActivations[] = {"relu", "gelu_new", "gelu", "silu"};
  nlohmann::ordered_json j;
  j["num_layers"] = c.num_layers;
  j["d_model"] = c.d_model;
  j["d_ff"] = c.d_ff;
  j["num_heads"] = c.num_heads;
  j["d_kv"] = c.d_kv;
  j["feed_forward"] = std::string(c.is_gated_act ? "gated-" : "") + kActivations[static_cast<int>(c.dense_act_fn)];
  j["relative_attention_num_buckets"] = c.relative_attention_num_buckets;
  j["relative_attention_max_distance"] = c.relative_attention_max_distance;
  j["vocab_size"] = c.vocab_size;
  return j;
}

nlohmann::ordered_json unet_facts(const nlohmann::json& config) {
  const UNetConfig c = UNetConfig::from_json(config);
  nlohmann::ordered_json j;
  std::vector<std::string> down, up;
  for (auto t : c.down_block_types) down.push_back(down_name(t));
  for (auto t : c.up_block_types) up.push_back(up_name(t));
  j["down_block_types"] = down;
  j["mid_block_type"] = mid_name(c.mid_block_type);
  j["up_block_types"] = up;
  j["block_out_channels"] = c.block_out_channels;
  j["layers_per_block"] = c.layers_per_block;
  j["num_attention_heads"] = c.num_attention_heads;
  j["cross_attention_dim"] = c.cross_attention_dim;
  j["use_linear_projection"] = c.use_linear_projection;
  j["in_channels"] = c.in_channels;
  j["out_channels"] = c.out_channels;
  if (c.sample_size)
    j["sample_size"] = {(*c.sample_size)[0], (*c.sample_size)[1]};
  else
    j["sample_size"] = nullptr;
  if (c.time_cond_proj_dim) j["time_cond_proj_dim"] = *c.time_cond_proj_dim;
  if (c.addition_embed_type == UNetConfig::AdditionEmbedType::kTextTime) {
    j["transformer_layers_per_block"] = c.transformer_layers_per_block;
    j["addition_embed_type"] = "text_time";
    j["addition_time_embed_dim"] = c.addition_time_embed_dim;
    j["projection_class_embeddings_input_dim"] = c.projection_class_embeddings_input_dim;
  }
  return j;
}

nlohmann::ordered_json vae_facts(const nlohmann::json& config) {
  const AutoencoderKLConfig c = AutoencoderKLConfig::from_json(config);
  nlohmann::ordered_json j;
  j["in_channels"] = c.in_channels;
  j["out_channels"] = c.out_channels;
  j["latent_channels"] = c.latent_channels;
  j["block_out_channels"] = c.block_out_channels;
  j["layers_per_block"] = c.layers_per_block;
  j["scale_factor"] = c.scale_factor();
  j["scaling_factor"] = c.scaling_factor;
  if (c.shift_factor) j["shift_factor"] = *c.shift_factor;
  j["force_upcast"] = c.force_upcast;
  // What --vae-tiling does with it (AutoencoderKLImpl::set_tiling, tile_latent_min_size).
  const auto latent_tile =
      static_cast<int64_t>(static_cast<double>(c.sample_size) / static_cast<double>(c.scale_factor()));
  j["tiling"] = c.sample_size_is_list ? std::string("refused (sample_size is a list)")
                                      : std::to_string(c.sample_size) + " px tiles (" + std::to_string(latent_tile) +
                                            " latents) with --vae-tiling";
  if (!c.sample_size_is_list) j["tile_sample_size"] = c.sample_size;  // the side the memory plan reads
  return j;
}

nlohmann::ordered_json flux2_vae_facts(const nlohmann::json& config) {
  const AutoencoderKLFlux2Config c = AutoencoderKLFlux2Config::from_json(config);
  nlohmann::ordered_json j;
  j["in_channels"] = c.kl.in_channels;
  j["out_channels"] = c.kl.out_channels;
  j["latent_channels"] = c.kl.latent_channels;
  j["block_out_channels"] = c.kl.block_out_channels;
  j["layers_per_block"] = c.kl.layers_per_block;
  j["scale_factor"] = c.kl.scale_factor();
  j["batch_norm_eps"] = c.batch_norm_eps;
  j["batch_norm_channels"] = c.patched_channels();
  return j;
}

nlohmann::ordered_json qwen_image_vae_facts(const nlohmann::json& config) {
  const AutoencoderKLQwenImageConfig c = AutoencoderKLQwenImageConfig::from_json(config);
  nlohmann::ordered_json j;
  j["base_dim"] = c.base_dim;
  j["z_dim"] = c.z_dim;
  j["dim_mult"] = c.dim_mult;
  j["num_res_blocks"] = c.num_res_blocks;
  j["temperal_downsample"] = c.temperal_downsample;
  j["scale_factor"] = c.scale_factor();
  j["latents_mean"] = c.latents_mean;
  j["latents_std"] = c.latents_std;
  j["built"] = "encoder and decoder (one frame)";
  j["tiling"] = std::to_string(AutoencoderKLQwenImageImpl::kTileSampleMinSize) + " px tiles every " +
                std::to_string(AutoencoderKLQwenImageImpl::kTileSampleStride) + " with --vae-tiling";
  j["tile_sample_size"] = AutoencoderKLQwenImageImpl::kTileSampleMinSize;  // the side the memory plan reads
  return j;
}

nlohmann::ordered_json z_image_transformer_facts(const nlohmann::json& config) {
  const ZImageTransformerConfig c = ZImageTransformerConfig::from_json(config);
  nlohmann::ordered_json j;
  j["dim"] = c.dim;
  j["n_layers"] = c.n_layers;
  j["n_refiner_layers"] = c.n_refiner_layers;
  j["n_heads"] = c.n_heads;
  j["in_channels"] = c.in_channels;
  j["cap_feat_dim"] = c.cap_feat_dim;
  j["all_patch_size"] = c.all_patch_size;
  j["all_f_patch_size"] = c.all_f_patch_size;
  j["axes_dims"] = c.axes_dims;
  j["axes_lens"] = c.axes_lens;
  j["rope_theta"] = c.rope_theta;
  j["t_scale"] = c.t_scale;
  return j;
}

nlohmann::ordered_json qwen_image_transformer_facts(const nlohmann::json& config) {
  const QwenImageTransformerConfig c = QwenImageTransformerConfig::from_json(config);
  nlohmann::ordered_json j;
  j["num_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["attention_head_dim"] = c.attention_head_dim;
  j["inner_dim"] = c.inner_dim();
  j["joint_attention_dim"] = c.joint_attention_dim;
  j["patch_size"] = c.patch_size;
  j["in_channels"] = c.in_channels;
  j["out_channels"] = c.out_channels;
  j["axes_dims_rope"] = c.axes_dims_rope;
  j["guidance_embeds"] = c.guidance_embeds;
  return j;
}

nlohmann::ordered_json flux_transformer_facts(const nlohmann::json& config) {
  const FluxTransformerConfig c = FluxTransformerConfig::from_json(config);
  nlohmann::ordered_json j;
  j["num_layers"] = c.num_layers;
  j["num_single_layers"] = c.num_single_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["attention_head_dim"] = c.attention_head_dim;
  j["inner_dim"] = c.inner_dim();
  j["joint_attention_dim"] = c.joint_attention_dim;
  j["pooled_projection_dim"] = c.pooled_projection_dim;
  j["patch_size"] = c.patch_size;
  j["in_channels"] = c.in_channels;
  j["out_channels"] = c.out_channels;
  j["axes_dims_rope"] = c.axes_dims_rope;
  j["guidance_embeds"] = c.guidance_embeds;
  return j;
}

nlohmann::ordered_json chroma_transformer_facts(const nlohmann::json& config) {
  const ChromaTransformerConfig c = ChromaTransformerConfig::from_json(config);
  nlohmann::ordered_json j;
  j["num_layers"] = c.num_layers;
  j["num_single_layers"] = c.num_single_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["attention_head_dim"] = c.attention_head_dim;
  j["inner_dim"] = c.inner_dim();
  j["joint_attention_dim"] = c.joint_attention_dim;
  j["patch_size"] = c.patch_size;
  j["in_channels"] = c.in_channels;
  j["out_channels"] = c.out_channels;
  j["axes_dims_rope"] = c.axes_dims_rope;
  j["approximator_num_channels"] = c.approximator_num_channels;
  j["approximator_hidden_dim"] = c.approximator_hidden_dim;
  j["approximator_layers"] = c.approximator_layers;
  return j;
}

nlohmann::ordered_json sd3_transformer_facts(const nlohmann::json& config) {
  const SD3TransformerConfig c = SD3TransformerConfig::from_json(config);
  nlohmann::ordered_json j;
  j["num_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["attention_head_dim"] = c.attention_head_dim;
  j["inner_dim"] = c.inner_dim();
  j["joint_attention_dim"] = c.joint_attention_dim;
  j["pooled_projection_dim"] = c.pooled_projection_dim;
  j["patch_size"] = c.patch_size;
  j["in_channels"] = c.in_channels;
  j["out_channels"] = c.out_channels;
  j["pos_embed_max_size"] = c.pos_embed_max_size;
  j["qk_norm"] = c.qk_norm ? nlohmann::ordered_json("rms_norm") : nlohmann::ordered_json(nullptr);
  j["dual_attention_layers"] = c.dual_attention_layers;
  return j;
}

nlohmann::ordered_json flux2_transformer_facts(const nlohmann::json& config) {
  const Flux2TransformerConfig c = Flux2TransformerConfig::from_json(config);
  nlohmann::ordered_json j;
  j["num_layers"] = c.num_layers;
  j["num_single_layers"] = c.num_single_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["attention_head_dim"] = c.attention_head_dim;
  j["inner_dim"] = c.inner_dim();
  j["joint_attention_dim"] = c.joint_attention_dim;
  j["in_channels"] = c.in_channels;
  j["out_channels"] = c.out_channels;
  j["mlp_ratio"] = c.mlp_ratio;
  j["axes_dims_rope"] = c.axes_dims_rope;
  j["rope_theta"] = c.rope_theta;
  j["guidance_embeds"] = c.guidance_embeds;
  return j;
}

template <typename Impl, typename Config>
std::shared_ptr<torch::nn::Module> build(const nlohmann::json& config, const at::TensorOptions& options) {
  return std::make_shared<Impl>(Config::from_json(config), options);
}

// transformers drops position_ids, a non-persistent buffer that older checkpoints still carry.
const KeyRenames kClipRenames{{}, {"text_model.embeddings.position_ids"}, {}};
// The deprecated attention names of old VAE checkpoints (diffusers modeling_utils.py
// _fix_state_dict_keys_on_load). The shapes stay: those checkpoints stored Linear weights,
// and diffusers does not reshape them either.
// Qwen-Image's text encoder file is the whole Qwen2.5-VL: the vision tower and the LM head are not
// part of the text path (and lm_head.weight is absent when tie_word_embeddings is set).
const KeyRenames kQwen2_5_VLRenames{{}, {"lm_head.weight"}, {"visual"}};
// T5EncoderModel ties encoder.embed_tokens to shared (_tied_weights_keys): save_pretrained
// writes shared.weight only, other files hold both names or only encoder.embed_tokens.weight.
const KeyRenames kT5Renames{{}, {}, {}, {{"encoder.embed_tokens.weight", "shared.weight"}}};
const KeyRenames kVaeRenames{
    {{"query", "to_q"}, {"key", "to_k"}, {"value", "to_v"}, {"proj_attn", "to_out.0"}}, {}, {}};
// AutoencoderKLFlux2's bn.num_batches_tracked (an int64 counter of training) is read by nothing.
const KeyRenames kFlux2VaeRenames{{}, {"bn.num_batches_tracked"}, {}};
const KeyRenames kQwen3CausalLMRenames{{}, {"lm_head.weight"}, {}};
// Mistral3ForConditionalGeneration as transformers 4.x saves it (language_model.model.*, language_model.lm_head,
// vision_tower.*, multi_modal_projector.*) and as transformers 5 does (model.language_model.*, lm_head,
// model.vision_tower.*, model.multi_modal_projector.*): the text model loads from either, the rest is skipped.
const KeyRenames kMistral3Renames{{},
                                  {"lm_head.weight"},
                                  {"vision_tower", "multi_modal_projector", "model.vision_tower",
                                   "model.multi_modal_projector"},
                                  {},
                                  {{"model.language_model", "language_model.model"}}};
// The _skip_layerwise_casting_patterns of diffusers 0.36's FLUX.1, Chroma, SD3 and Qwen-Image
// transformers.
const std::vector<std::string> kDitSkips{"pos_embed", "norm"};

}  // namespace

const std::vector<ModelClass>& model_classes() {
  static const std::vector<ModelClass> table{
      {"CLIPTextModel", "transformers", ComponentRole::kTextEncoder, build<CLIPTextModelImpl, CLIPTextConfig>,
       clip_facts, kClipRenames},
      {"CLIPTextModelWithProjection", "transformers", ComponentRole::kTextEncoder,
       build<CLIPTextModelWithProjectionImpl, CLIPTextConfig>, clip_projection_facts, kClipRenames},
      {"Qwen2_5_VLForConditionalGeneration", "transformers", ComponentRole::kTextEncoder, build_qwen2_5_vl,
       qwen2_5_vl_facts, kQwen2_5_VLRenames},
      // Qwen-Image-Edit's vision tower, read from the Qwen2_5_VLForConditionalGeneration folder's visual.* keys: no
      // model_index.json names it, the family does (models/vision/qwen2_5_vl_vision.h).
      {kQwen2_5_VLVisionClass, "transformers", ComponentRole::kTextEncoder, build_qwen2_5_vl_vision,
       qwen2_5_vl_vision_facts, qwen2_5_vl_vision_renames()},
      {"Qwen3Model", "transformers", ComponentRole::kTextEncoder, build_qwen3, qwen3_facts, {}},
      {"Qwen3ForCausalLM", "transformers", ComponentRole::kTextEncoder, build_qwen3_causal_lm, qwen3_facts,
       kQwen3CausalLMRenames},
      {"Mistral3ForConditionalGeneration", "transformers", ComponentRole::kTextEncoder, build_mistral3,
       mistral3_facts, kMistral3Renames},
      {"T5EncoderModel", "transformers", ComponentRole::kTextEncoder, build<T5EncoderModelImpl, T5Config>, t5_facts,
       kT5Renames, {"wo"}},
      {"UNet2DConditionModel", "diffusers", ComponentRole::kDenoiser, build<UNet2DConditionModelImpl, UNetConfig>,
       unet_facts, {}, {"norm"}},
      {"AutoencoderKL", "diffusers", ComponentRole::kVae, build<AutoencoderKLImpl, AutoencoderKLConfig>, vae_facts,
       kVaeRenames},
      {"AutoencoderKLQwenImage", "diffusers", ComponentRole::kVae,
       build<AutoencoderKLQwenImageImpl, AutoencoderKLQwenImageConfig>, qwen_image_vae_facts, {}},
      {"AutoencoderKLFlux2", "diffusers", ComponentRole::kVae, build_flux2_vae, flux2_vae_facts, kFlux2VaeRenames},
      {"ZImageTransformer2DModel", "diffusers", ComponentRole::kDenoiser,
       build<ZImageTransformer2DModelImpl, ZImageTransformerConfig>, z_image_transformer_facts, {}, {"t_embedder", "cap_embedder"}},
      {"QwenImageTransformer2DModel", "diffusers", ComponentRole::kDenoiser,
       build<QwenImageTransformer2DModelImpl, QwenImageTransformerConfig>, qwen_image_transformer_facts, {}, kDitSkips},
      {"FluxTransformer2DModel", "diffusers", ComponentRole::kDenoiser,
       build<FluxTransformer2DModelImpl, FluxTransformerConfig>, flux_transformer_facts, {}, kDitSkips},
      {"ChromaTransformer2DModel", "diffusers", ComponentRole::kDenoiser,
       build<ChromaTransformer2DModelImpl, ChromaTransformerConfig>, chroma_transformer_facts, {}, kDitSkips},
      {"SD3Transformer2DModel", "diffusers", ComponentRole::kDenoiser,
       build<SD3Transformer2DModelImpl, SD3TransformerConfig>, sd3_transformer_facts, {}, kDitSkips},
      // diffusers 0.37.0's Flux2Transformer2DModel._skip_layerwise_casting_patterns: "pos_embed", "norm".
      {"Flux2Transformer2DModel", "diffusers", ComponentRole::kDenoiser,
       build<Flux2Transformer2DModelImpl, Flux2TransformerConfig>, flux2_transformer_facts, {}, kDitSkips},
  };
  return table;
}

const ModelClass* find_model_class(const std::string& class_name) {
  for (const ModelClass& m : model_classes())
    if (m.class_name == class_name) return &m;
  return nullptr;
}

}  // namespace dpinfer::pipeline
