#include "dpinfer/pipeline/models/transformers/chroma_transformer_config.h"

#include <nlohmann/json.hpp>

#include "../config_parsing.h"
#include "dpinfer/pipeline/models/transformers/flux_transformer_config.h"

namespace dpinfer::pipeline {
namespace {

using io::ConfigReader;
using nlohmann::json;


}  // namespace

// Ref: diffusers/models/transformers/transformer_chroma.py ChromaTransformer2DModel.__init__
ChromaTransformerConfig ChromaTransformerConfig::from_json(const json& j) {
  using namespace transformer_config;  // here, not at file scope: a unity batch would see it
  // The blocks' fields are FluxTransformer2DModel's, with the same meaning and checks (Chroma's config
  // has neither pooled_projection_dim nor guidance_embeds: the approximator replaces both).
  const FluxTransformerConfig flux = FluxTransformerConfig::from_json(j);
  ChromaTransformerConfig c;
  c.patch_size = flux.patch_size;
  c.in_channels = flux.in_channels;
  c.out_channels = flux.out_channels;
  c.num_layers = flux.num_layers;
  c.num_single_layers = flux.num_single_layers;
  c.attention_head_dim = flux.attention_head_dim;
  c.num_attention_heads = flux.num_attention_heads;
  c.joint_attention_dim = flux.joint_attention_dim;
  c.axes_dims_rope = flux.axes_dims_rope;
  ConfigReader r(j, kComponent);
  c.approximator_num_channels =
      bounded_integer_field(r, "approximator_num_channels", c.approximator_num_channels, 4, kMaxWidth);
  // ChromaCombinedTimestepTextProjEmbeddings(num_channels=approximator_num_channels // 4): two
  // Timesteps of that width and a mod_proj of twice it must fill the approximator's in_proj (diffusers
  // fails in the forward otherwise).
  if (c.approximator_num_channels % 4 != 0)
    throw r.error("approximator_num_channels", "= " + std::to_string(c.approximator_num_channels) +
                                                   " must be a multiple of 4 (the approximator's input: timestep, "
                                                   "guidance and twice-as-wide modulation-index sinusoids)");
  c.approximator_hidden_dim =
      bounded_integer_field(r, "approximator_hidden_dim", c.approximator_hidden_dim, 1, kMaxWidth);
  c.approximator_layers = bounded_integer_field(r, "approximator_layers", c.approximator_layers, 0, kMaxLayers);
  return c;
}

ChromaTransformerConfig ChromaTransformerConfig::from_file(const std::string& path) {
  using namespace transformer_config;  // here, not at file scope: a unity batch would see it
  return config_from_file<ChromaTransformerConfig>(path, kComponent);
}

}  // namespace dpinfer::pipeline
