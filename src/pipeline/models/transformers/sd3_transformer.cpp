#include "dpinfer/pipeline/models/transformers/sd3_transformer.h"

#include <algorithm>
#include <memory>
#include <string>

#include <torch/nn/modules/container/modulelist.h>

#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

constexpr const char* kSd3Transformer = "sd3 transformer";
constexpr double kSd3Eps = 1e-6;  // every norm of the model: blocks, QK norms, norm_out

}  // namespace

// Ref: diffusers/models/embeddings.py PatchEmbed (__init__ with pos_embed_max_size, cropped_pos_embed, forward)
SD3PatchEmbedImpl::SD3PatchEmbedImpl(int64_t in_channels, int64_t dim, int64_t patch_size, int64_t pos_embed_max_size,
                                     const at::TensorOptions& options)
    : patch_size_(patch_size), max_size_(pos_embed_max_size) {
  proj_ = register_module("proj", nn::Conv2d(in_channels, dim, patch_size, patch_size, 0, true, options));
  // In the run dtype, as diffusers as installed by default holds it (issue 35): PatchEmbed registers the
  // table float32 and persistent, so the checkpoint stores it, and from_pretrained(torch_dtype=...) with
  // accelerate (low_cpu_mem_usage, the default) casts every checkpoint tensor, buffers too, to torch_dtype
  // (model_loading_utils.load_model_dict_into_meta). Only without accelerate does load_state_dict copy it
  // into the float32 buffer (tools/fixtures/audit_half_dtypes.py; the dtype table in tools/fixtures/README.md).
  // The sum with the patches is then in the run dtype, as PatchEmbed.forward's latent + pos_embed.
  pos_embed_ = register_buffer("pos_embed", at::empty({1, pos_embed_max_size * pos_embed_max_size, dim}, options));
}

at::Tensor SD3PatchEmbedImpl::forward(const at::Tensor& latent) {
  const int64_t height = latent.size(-2) / patch_size_, width = latent.size(-1) / patch_size_;
  if (height > max_size_ || width > max_size_)
    throw Error(std::string(kSd3Transformer) + ": the latent is " + std::to_string(height) + " x " + std::to_string(width) +
                " patches, but the position table (pos_embed_max_size) has " + std::to_string(max_size_) +
                " per side; use a smaller image");
  at::Tensor tokens = proj_(latent).flatten(2).transpose(1, 2);  // [B, h w, dim]
  // cropped_pos_embed: the centre h x w of the M x M table, rows then columns.
  const int64_t top = (max_size_ - height) / 2, left = (max_size_ - width) / 2;
  at::Tensor pos = pos_embed_.reshape({1, max_size_, max_size_, -1})
                       .narrow(1, top, height)
                       .narrow(2, left, width)
                       .reshape({1, height * width, -1});  // [1, h w, dim]
  return (tokens + pos).to(tokens.scalar_type());
}

// Ref: diffusers/models/attention.py JointTransformerBlock.__init__
SD3JointTransformerBlockImpl::SD3JointTransformerBlockImpl(int64_t dim, int64_t heads, int64_t head_dim,
                                                           bool context_pre_only, bool qk_norm,
                                                           bool use_dual_attention, const at::TensorOptions& options)
    : context_pre_only_(context_pre_only), dual_(use_dual_attention) {
  norm1_ = register_module("norm1", nn::AdaLayerNormZero(dim, use_dual_attention ? 9 : 6, kSd3Eps, options));
  if (context_pre_only)
    norm1_context_final_ = register_module("norm1_context", nn::AdaLayerNormContinuous(dim, dim, kSd3Eps, options));
  else
    norm1_context_ = register_module("norm1_context", nn::AdaLayerNormZero(dim, 6, kSd3Eps, options));
  nn::JointAttentionOptions attention;
  attention.dim = dim;
  attention.heads = heads;
  attention.dim_head = head_dim;
  attention.qk_norm = qk_norm;
  attention.qk_norm_eps = kSd3Eps;
  attention.bias = true;
  attention.out_bias = true;
  attention.text_first = false;
  attention.context_pre_only = context_pre_only;
  attn_ = register_module("attn", nn::DoubleStreamAttention(attention, options));
  if (use_dual_attention) attn2_ = register_module("attn2", nn::JointAttention(attention, options));
  norm2_ = register_module("norm2", nn::LayerNorm(dim, kSd3Eps, false, options));
  ff_ = register_module("ff", nn::FeedForward(dim, options, nn::FeedForwardActivation::kGELUApproximate));
  if (!context_pre_only) {
    norm2_context_ = register_module("norm2_context", nn::LayerNorm(dim, kSd3Eps, false, options));
    ff_context_ =
        register_module("ff_context", nn::FeedForward(dim, options, nn::FeedForwardActivation::kGELUApproximate));
  }
}

// Ref: diffusers/models/attention.py JointTransformerBlock.forward; normalization.py AdaLayerNormZero,
// SD35AdaLayerNormZeroX
SD3JointTransformerBlockImpl::Output SD3JointTransformerBlockImpl::forward(const at::Tensor& image,
                                                                           const at::Tensor& text,
                                                                           const at::Tensor& temb) {
  using nn::modulate_tokens;
  // [B, dim] each: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp
  // (+ shift_msa2, scale_msa2, gate_msa2 with dual attention).
  const std::vector<at::Tensor> m = norm1_->chunks(temb);
  const at::Tensor normed = norm1_->norm(image);
  const at::Tensor norm_image = modulate_tokens(normed, m[0], m[1]);
  std::vector<at::Tensor> c;  // the text stream's six, unless context_pre_only
  at::Tensor norm_text;
  if (context_pre_only_) {
    norm_text = norm1_context_final_(text, temb);
  } else {
    c = norm1_context_->chunks(temb);
    norm_text = modulate_tokens(norm1_context_->norm(text), c[0], c[1]);
  }
  const nn::DoubleStreamAttentionImpl::Output a =
      attn_(norm_image, norm_text, at::Tensor(), at::Tensor(), at::Tensor());  // no RoPE, no mask
  at::Tensor img = image + m[2].unsqueeze(1) * a.image;
  if (dual_) img = img + m[8].unsqueeze(1) * attn2_(modulate_tokens(normed, m[6], m[7]), at::Tensor(), at::Tensor());
  img = img + m[5].unsqueeze(1) * ff_(modulate_tokens(norm2_(img), m[3], m[4]));
  if (context_pre_only_) return {img, at::Tensor()};
  at::Tensor txt = text + c[2].unsqueeze(1) * a.text;
  txt = txt + c[5].unsqueeze(1) * ff_context_(modulate_tokens(norm2_context_(txt), c[3], c[4]));
  return {img, txt};
}

// Ref: diffusers/models/transformers/transformer_sd3.py SD3Transformer2DModel.__init__;
// embeddings.py CombinedTimestepTextProjEmbeddings
SD3Transformer2DModelImpl::SD3Transformer2DModelImpl(const SD3TransformerConfig& config,
                                                     const at::TensorOptions& options)
    : config_(config) {
  const SD3TransformerConfig& c = config_;
  const int64_t dim = c.inner_dim();
  pos_embed_ = register_module("pos_embed", SD3PatchEmbed(c.in_channels, dim, c.patch_size, c.pos_embed_max_size,
                                                          options));
  // time_text_embed: time_proj (Timesteps, no parameters), timestep_embedder, text_embedder.
  auto time_text_embed = register_module("time_text_embed", std::make_shared<torch::nn::Module>());
  timestep_embedder_ = time_text_embed->register_module(
      "timestep_embedder", nn::TimestepEmbedding(kTimestepChannels, dim, std::nullopt, options));
  text_embedder_ = time_text_embed->register_module(
      "text_embedder", nn::PixArtAlphaTextProjection(c.pooled_projection_dim, dim, options));
  context_embedder_ =
      register_module("context_embedder", nn::Linear(c.joint_attention_dim, c.caption_projection_dim, true, options));
  auto blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) {
    blocks_.push_back(SD3JointTransformerBlock(dim, c.num_attention_heads, c.attention_head_dim,
                                               /*context_pre_only=*/i == c.num_layers - 1, c.qk_norm,
                                               c.is_dual_attention_layer(i), options));
    blocks->push_back(blocks_.back());
  }
  norm_out_ = register_module("norm_out", nn::AdaLayerNormContinuous(dim, dim, kSd3Eps, options));
  proj_out_ =
      register_module("proj_out", nn::Linear(dim, c.patch_size * c.patch_size * c.out_channels, true, options));
}

// Ref: transformer_sd3.py SD3Transformer2DModel.forward (skip_layers; no controlnet or IP-adapter)
at::Tensor SD3Transformer2DModelImpl::forward(const at::Tensor& hidden_states, const at::Tensor& encoder_hidden_states,
                                              const at::Tensor& pooled_projections, const at::Tensor& timestep,
                                              const std::vector<int64_t>& skip_layers, nn::BlockCache* cache,
                                              const std::vector<std::vector<int64_t>>& image_rows) {
  const SD3TransformerConfig& c = config_;
  const std::string what(kSd3Transformer);
  const int64_t p = c.patch_size;
  if (hidden_states.dim() != 4 || hidden_states.size(0) < 1 || hidden_states.size(1) != c.in_channels ||
      hidden_states.size(2) % p != 0 || hidden_states.size(3) % p != 0 || hidden_states.size(2) < p ||
      hidden_states.size(3) < p)
    throw Error(what + ": hidden_states must be [B, " + std::to_string(c.in_channels) + ", H, W] with H and W " +
                "multiples of patch_size " + std::to_string(p) + ", got " + c10::str(hidden_states.sizes()));
  const int64_t batch = hidden_states.size(0);
  if (encoder_hidden_states.dim() != 3 || encoder_hidden_states.size(0) != batch ||
      encoder_hidden_states.size(2) != c.joint_attention_dim)
    throw Error(what + ": encoder_hidden_states must be [" + std::to_string(batch) + ", L, " +
                std::to_string(c.joint_attention_dim) + "], got " + c10::str(encoder_hidden_states.sizes()));
  if (pooled_projections.sizes() != at::IntArrayRef({batch, c.pooled_projection_dim}))
    throw Error(what + ": pooled_projections must be [" + std::to_string(batch) + ", " +
                std::to_string(c.pooled_projection_dim) + "], got " + c10::str(pooled_projections.sizes()));
  if (!(timestep.dim() == 0 || (timestep.dim() == 1 && timestep.size(0) == batch)))
    throw Error(what + ": timestep must be [" + std::to_string(batch) + "] or a scalar, got " +
                c10::str(timestep.sizes()));

  const at::ScalarType dtype = context_embedder_->compute_dtype();
  const at::Device device = context_embedder_->weight.device();
  const int64_t height = hidden_states.size(2) / p, width = hidden_states.size(3) / p;
  at::Tensor image = pos_embed_(hidden_states.to(device, dtype));  // [B, h w, dim]
  // temb: Timesteps(256, flip_sin_to_cos, shift 0) in float32, cast to the pooled embeddings' dtype,
  // timestep_embedder; plus text_embedder(pooled).
  const at::Tensor t = (timestep.dim() == 0 ? timestep.expand({batch}) : timestep).to(device);
  const at::Tensor pooled = pooled_projections.to(device, dtype);
  const at::Tensor temb = timestep_embedder_(nn::timestep_embedding(t, kTimestepChannels, true, 0.0).to(dtype)) +
                          text_embedder_(pooled);  // [B, dim]
  at::Tensor text = context_embedder_(encoder_hidden_states.to(device, dtype));  // [B, L, dim]
  // --offload blocks: each block's group on the device while it runs (nn/offload.h).
  const nn::OffloadedForward offloaded(block_offload());
  if (cache && !skip_layers.empty())
    throw Error(what + ": a step cache and skip_layers in one call");  // the pipeline refuses the settings first
  // The blocks [begin, end) on the rows `rows` of the batch (all when undefined): a step cache runs the blocks it
  // does not skip on the images that compute. The last block (context_pre_only) leaves `text` undefined.
  const nn::BlockRange run_blocks = [&](int64_t begin, int64_t end, const nn::Streams& in, const at::Tensor& rows) {
    const at::Tensor t_emb = rows.defined() && rows.size(0) != batch ? temb.index_select(0, rows) : temb;
    nn::Streams s = in;
    for (int64_t index = begin; index < end; ++index) {
      // is_skip: the block is left out and both streams pass through unchanged.
      if (std::find(skip_layers.begin(), skip_layers.end(), index) != skip_layers.end()) continue;
      auto& block = blocks_[static_cast<size_t>(index)];
      const nn::BlockOnDevice on_device(block_offload(), *block);
      SD3JointTransformerBlockImpl::Output o = block(s.image, s.text, t_emb);
      s = nn::Streams{std::move(o.image), std::move(o.text)};
    }
    return s;
  };
  const auto num_blocks = static_cast<int64_t>(blocks_.size());
  if (cache) {
    // Every row has the same image tokens, and the decision reads all of them (the image stream's Fn residual): no
    // token counts to give, only the CFG batch's rows of each image (none: row b is image b).
    image = cache->run(nn::Streams{image, text}, num_blocks, run_blocks, nn::ImageRows{image_rows, {}}).image;
  } else {
    image = run_blocks(0, num_blocks, nn::Streams{image, text}, at::Tensor()).image;
  }
  at::Tensor out = proj_out_(norm_out_(image, temb));  // [B, h w, p p out]
  // "nhwpqc->nchpwq": tokens back to [B, out, h p, w p].
  out = out.reshape({batch, height, width, p, p, c.out_channels}).permute({0, 5, 1, 3, 2, 4});
  return out.reshape({batch, c.out_channels, height * p, width * p});
}

}  // namespace dpinfer::pipeline
