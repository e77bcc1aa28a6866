#include "dpinfer/pipeline/models/transformers/flux_transformer.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include <torch/nn/modules/container/modulelist.h>

#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

constexpr const char* kFluxTransformer = "flux transformer";
constexpr double kFluxEps = 1e-6;  // every norm of the model: AdaLN-Zero, norm2, QK norms, norm_out

nn::JointAttentionOptions attention_options(int64_t dim, int64_t heads, int64_t head_dim, bool pre_only) {
  // FluxAttention(query_dim=dim, heads, dim_head, out_dim=dim, bias=True, eps=1e-6): torch.nn.RMSNorm
  // QK norms, biases on every projection (added_proj_bias and out_bias default True).
  nn::JointAttentionOptions o;
  o.dim = dim;
  o.heads = heads;
  o.dim_head = head_dim;
  o.qk_norm = true;
  o.qk_norm_eps = kFluxEps;
  o.qk_norm_kind = nn::RMSNormKind::kTorch;
  o.bias = true;
  o.out_bias = true;
  o.pre_only = pre_only;
  return o;
}

// x * (1 + scale[:, None]) + shift[:, None], shift/scale [B, dim].
at::Tensor flux_modulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale) {
  return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1);
}

// timestep.to(dtype) * 1000 (a product in dtype), as FluxTransformer2DModel.forward scales timestep
// and guidance; t [B] or 0-d.
at::Tensor scaled(const at::Tensor& t, int64_t batch, const at::Device& device, at::ScalarType dtype) {
  return (t.dim() == 0 ? t.expand({batch}) : t).to(device, dtype) * 1000;
}

void check_flux_batch_vector(const at::Tensor& t, int64_t batch, const char* name) {
  if (!(t.dim() == 0 || (t.dim() == 1 && t.size(0) == batch)))
    throw Error(std::string(kFluxTransformer) + ": " + name + " must be [" + std::to_string(batch) + "] or a scalar, got " +
                c10::str(t.sizes()));
}

void check_flux_ids(const at::Tensor& ids, int64_t length, const char* name) {
  if (ids.dim() != 2 || ids.size(0) != length || ids.size(1) != 3)
    throw Error(std::string(kFluxTransformer) + ": " + name + " must be [" + std::to_string(length) + ", 3], got " +
                c10::str(ids.sizes()));
}

}  // namespace

// Ref: diffusers/models/transformers/transformer_flux.py FluxTransformerBlock; transformer_chroma.py
// ChromaTransformerBlock (Modulation::kGiven)
FluxTransformerBlockImpl::FluxTransformerBlockImpl(int64_t dim, int64_t heads, int64_t head_dim,
                                                   const at::TensorOptions& options, Modulation modulation)
    : dim_(dim) {
  if (modulation == Modulation::kLinear) {
    norm1_ = register_module("norm1", nn::AdaLayerNormZero(dim, 6, kFluxEps, options));
    norm1_context_ = register_module("norm1_context", nn::AdaLayerNormZero(dim, 6, kFluxEps, options));
  }
  attn_ = register_module("attn", nn::DoubleStreamAttention(attention_options(dim, heads, head_dim, false), options));
  norm2_ = register_module("norm2", nn::LayerNorm(dim, kFluxEps, false, options));
  ff_ = register_module("ff", nn::FeedForward(dim, options, nn::FeedForwardActivation::kGELUApproximate));
  norm2_context_ = register_module("norm2_context", nn::LayerNorm(dim, kFluxEps, false, options));
  ff_context_ =
      register_module("ff_context", nn::FeedForward(dim, options, nn::FeedForwardActivation::kGELUApproximate));
}

FluxTransformerBlockImpl::Output FluxTransformerBlockImpl::forward(const at::Tensor& image, const at::Tensor& text,
                                                                   const at::Tensor& temb,
                                                                   const nn::RotaryCosSin& freqs) {
  TORCH_CHECK(!norm1_.is_empty(), "FluxTransformerBlock: a Chroma block takes forward_modulated()");
  return run(image, text, norm1_->chunks(temb), norm1_context_->chunks(temb), freqs, {});
}

FluxTransformerBlockImpl::Output FluxTransformerBlockImpl::forward_modulated(const at::Tensor& image,
                                                                             const at::Tensor& text,
                                                                             const at::Tensor& mod,
                                                                             const nn::RotaryCosSin& freqs,
                                                                             const at::Tensor& attn_mask) {
  // ChromaTransformerBlock: temb_img, temb_txt = temb[:, :6], temb[:, 6:], each chunked into six
  // [B, dim] vectors by ChromaAdaLayerNormZeroPruned (emb.flatten(1, 2).chunk(6, dim=1)).
  return run(image, text, mod.narrow(1, 0, 6).unbind(1), mod.narrow(1, 6, 6).unbind(1), freqs, attn_mask);
}

FluxTransformerBlockImpl::Output FluxTransformerBlockImpl::run(const at::Tensor& image, const at::Tensor& text,
                                                               const std::vector<at::Tensor>& im,
                                                               const std::vector<at::Tensor>& tm,
                                                               const nn::RotaryCosSin& freqs,
                                                               const at::Tensor& attn_mask) {
  // im / tm: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp, each [B, dim]; norm1 is
  // AdaLayerNormZero's LayerNorm (eps 1e-6, no affine) modulated by the first two.
  auto norm1 = [&](const at::Tensor& x, const std::vector<at::Tensor>& m) {
    return nn::modulate_tokens(at::layer_norm(x, {dim_}, {}, {}, kFluxEps), m[0], m[1]);
  };
  const nn::DoubleStreamAttentionImpl::Output a =
      attn_->forward_real_rope(norm1(image, im), norm1(text, tm), freqs, attn_mask);
  at::Tensor img = image + im[2].unsqueeze(1) * a.image;
  img = img + im[5].unsqueeze(1) * ff_(flux_modulate(norm2_(img), im[3], im[4]));
  at::Tensor txt = text + tm[2].unsqueeze(1) * a.text;
  txt = txt + tm[5].unsqueeze(1) * ff_context_(flux_modulate(norm2_context_(txt), tm[3], tm[4]));
  if (txt.scalar_type() == at::kHalf) txt = txt.clip(-65504, 65504);
  return {img, txt};
}

// Ref: transformer_flux.py FluxSingleTransformerBlock; transformer_chroma.py ChromaSingleTransformerBlock
// (Modulation::kGiven)
FluxSingleTransformerBlockImpl::FluxSingleTransformerBlockImpl(int64_t dim, int64_t heads, int64_t head_dim,
                                                               const at::TensorOptions& options,
                                                               Modulation modulation)
    : dim_(dim) {
  const int64_t mlp_hidden_dim = 4 * dim;  // int(dim * mlp_ratio), mlp_ratio 4.0
  if (modulation == Modulation::kLinear) norm_ = register_module("norm", nn::AdaLayerNormZero(dim, 3, kFluxEps, options));
  proj_mlp_ = register_module("proj_mlp", nn::Linear(dim, mlp_hidden_dim, true, options));
  proj_out_ = register_module("proj_out", nn::Linear(dim + mlp_hidden_dim, dim, true, options));
  attn_ = register_module("attn", nn::JointAttention(attention_options(dim, heads, head_dim, true), options));
}

at::Tensor FluxSingleTransformerBlockImpl::forward(const at::Tensor& x, const at::Tensor& temb,
                                                   const nn::RotaryCosSin& freqs) {
  TORCH_CHECK(!norm_.is_empty(), "FluxSingleTransformerBlock: a Chroma block takes forward_modulated()");
  const std::vector<at::Tensor> m = norm_->chunks(temb);  // shift_msa, scale_msa, gate [B, dim]
  return run(x, m[0], m[1], m[2], freqs, {});
}

at::Tensor FluxSingleTransformerBlockImpl::forward_modulated(const at::Tensor& x, const at::Tensor& mod,
                                                             const nn::RotaryCosSin& freqs,
                                                             const at::Tensor& attn_mask) {
  // ChromaAdaLayerNormZeroSinglePruned: shift_msa, scale_msa, gate_msa = emb.flatten(1, 2).chunk(3, dim=1).
  return run(x, mod.select(1, 0), mod.select(1, 1), mod.select(1, 2), freqs, attn_mask);
}

at::Tensor FluxSingleTransformerBlockImpl::run(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale,
                                               const at::Tensor& gate, const nn::RotaryCosSin& freqs,
                                               const at::Tensor& attn_mask) {
  const at::Tensor n = nn::modulate_tokens(at::layer_norm(x, {dim_}, {}, {}, kFluxEps), shift, scale);
  const at::Tensor mlp = at::gelu(proj_mlp_(n), "tanh");
  const at::Tensor attn = attn_->forward_real_rope(n, freqs, attn_mask);
  at::Tensor out = x + gate.unsqueeze(1) * proj_out_(at::cat({attn, mlp}, 2));
  if (out.scalar_type() == at::kHalf) out = out.clip(-65504, 65504);
  return out;
}

// Ref: transformer_flux.py FluxTransformer2DModel.__init__; embeddings.py
// CombinedTimestepGuidanceTextProjEmbeddings and CombinedTimestepTextProjEmbeddings
FluxTransformer2DModelImpl::FluxTransformer2DModelImpl(const FluxTransformerConfig& config,
                                                       const at::TensorOptions& options)
    : config_(config) {
  const FluxTransformerConfig& c = config_;
  const int64_t dim = c.inner_dim();
  auto time_text_embed = register_module("time_text_embed", std::make_shared<torch::nn::Module>());
  timestep_embedder_ = time_text_embed->register_module(
      "timestep_embedder", nn::TimestepEmbedding(kTimestepChannels, dim, std::nullopt, options));
  if (c.guidance_embeds)
    guidance_embedder_ = time_text_embed->register_module(
        "guidance_embedder", nn::TimestepEmbedding(kTimestepChannels, dim, std::nullopt, options));
  text_embedder_ = time_text_embed->register_module(
      "text_embedder", nn::PixArtAlphaTextProjection(c.pooled_projection_dim, dim, options));
  context_embedder_ = register_module("context_embedder", nn::Linear(c.joint_attention_dim, dim, true, options));
  x_embedder_ = register_module("x_embedder", nn::Linear(c.in_channels, dim, true, options));
  auto blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) {
    blocks_.push_back(FluxTransformerBlock(dim, c.num_attention_heads, c.attention_head_dim, options));
    blocks->push_back(blocks_.back());
  }
  auto single_blocks = register_module("single_transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_single_layers; ++i) {
    single_blocks_.push_back(FluxSingleTransformerBlock(dim, c.num_attention_heads, c.attention_head_dim, options));
    single_blocks->push_back(single_blocks_.back());
  }
  norm_out_ = register_module("norm_out", nn::AdaLayerNormContinuous(dim, dim, kFluxEps, options));
  proj_out_ = register_module("proj_out", nn::Linear(dim, c.out_features(), true, options));
}

// Ref: transformer_flux.py FluxTransformer2DModel.forward and FluxPosEmbed.forward
at::Tensor FluxTransformer2DModelImpl::forward(const at::Tensor& hidden_states,
                                               const at::Tensor& encoder_hidden_states,
                                               const at::Tensor& pooled_projections, const at::Tensor& timestep,
                                               const at::Tensor& img_ids, const at::Tensor& txt_ids,
                                               const at::Tensor& guidance, nn::BlockCache* cache) {
  const FluxTransformerConfig& c = config_;
  const std::string what(kFluxTransformer);
  if (hidden_states.dim() != 3 || hidden_states.size(0) < 1 || hidden_states.size(2) != c.in_channels)
    throw Error(what + ": hidden_states must be [B, L_img, " + std::to_string(c.in_channels) + "], got " +
                c10::str(hidden_states.sizes()));
  const int64_t batch = hidden_states.size(0), image_len = hidden_states.size(1);
  if (encoder_hidden_states.dim() != 3 || encoder_hidden_states.size(0) != batch ||
      encoder_hidden_states.size(2) != c.joint_attention_dim)
    throw Error(what + ": encoder_hidden_states must be [" + std::to_string(batch) + ", L_txt, " +
                std::to_string(c.joint_attention_dim) + "], got " + c10::str(encoder_hidden_states.sizes()));
  const int64_t text_len = encoder_hidden_states.size(1);
  if (pooled_projections.sizes() != at::IntArrayRef({batch, c.pooled_projection_dim}))
    throw Error(what + ": pooled_projections must be [" + std::to_string(batch) + ", " +
                std::to_string(c.pooled_projection_dim) + "], got " + c10::str(pooled_projections.sizes()));
  check_flux_batch_vector(timestep, batch, "timestep");
  check_flux_ids(img_ids, image_len, "img_ids");
  check_flux_ids(txt_ids, text_len, "txt_ids");
  if (c.guidance_embeds && !guidance.defined())
    throw Error(what + ": this transformer has guidance_embeds (a guidance-distilled model such as FLUX.1-dev) "
                       "and needs a guidance value");
  if (!c.guidance_embeds && guidance.defined())
    throw Error(what + ": this transformer has no guidance_embeds (FLUX.1-schnell-like) and takes no guidance "
                       "value; pass none");
  if (guidance.defined()) check_flux_batch_vector(guidance, batch, "guidance");

  const at::ScalarType dtype = x_embedder_->compute_dtype();
  const at::Device device = x_embedder_->weight.device();
  at::Tensor image = x_embedder_(hidden_states.to(device, dtype));  // [B, L_img, dim]
  // time_text_embed: Timesteps(256, flip_sin_to_cos, shift 0) of t * 1000 in float32, cast to the
  // pooled projection's dtype, through timestep_embedder; the same for guidance; plus text_embedder
  // of the pooled projection.
  const at::Tensor pooled = pooled_projections.to(device, dtype);
  auto embed = [&](nn::TimestepEmbedding& embedder, const at::Tensor& t) {
    return embedder(nn::timestep_embedding(scaled(t, batch, device, dtype), kTimestepChannels, true, 0.0).to(dtype));
  };
  at::Tensor temb = embed(timestep_embedder_, timestep);
  if (guidance.defined()) temb = temb + embed(guidance_embedder_, guidance);
  temb = temb + text_embedder_(pooled);  // [B, dim]
  at::Tensor text = context_embedder_(encoder_hidden_states.to(device, dtype));  // [B, L_txt, dim]

  // pos_embed(cat(txt_ids, img_ids)): computed on the ids' device (the pipeline makes them on the
  // model's device), then moved there.
  const at::Tensor ids = at::cat({txt_ids.to(device), img_ids.to(device)}, 0);
  const nn::RotaryCosSin freqs = nn::rotary_cos_sin(ids, kRopeTheta, c.axes_dims_rope);

  // --offload blocks: each block's group on the device while it runs (nn/offload.h).
  const nn::OffloadedForward offloaded(block_offload());
  // The blocks [begin, end) of the list transformer_blocks + single_transformer_blocks, for the rows `rows` of the
  // batch (temb's), given their streams: diffusers' First Block Cache's head is block 0, cache-dit's FLUX.1
  // adapter caches that one list (adapters.py flux_adapter, with its default dummy blocks).
  const int64_t num_double = static_cast<int64_t>(blocks_.size());
  const int64_t num_blocks = num_double + static_cast<int64_t>(single_blocks_.size());
  const nn::BlockRange run_blocks = [&](int64_t begin, int64_t end, const nn::Streams& in, const at::Tensor& rows) {
    const at::Tensor temb_rows = rows.defined() && rows.size(0) != batch ? temb.index_select(0, rows) : temb;
    nn::Streams s = in;
    for (int64_t i = begin; i < std::min(end, num_double); ++i) {
      const nn::BlockOnDevice on_device(block_offload(), *blocks_[i]);
      FluxTransformerBlockImpl::Output o = blocks_[i](s.image, s.text, temb_rows, freqs);
      s = {std::move(o.image), std::move(o.text)};
    }
    if (end > num_double && begin < end) {
      // The single-stream blocks work on cat(text, image); diffusers splits and re-joins it around each
      // block, which changes no value.
      at::Tensor joint = at::cat({s.text, s.image}, 1);
      for (int64_t i = std::max(begin, num_double); i < end; ++i) {
        const nn::BlockOnDevice on_device(block_offload(), *single_blocks_[i - num_double]);
        joint = single_blocks_[i - num_double](joint, temb_rows, freqs);
      }
      s = {joint.narrow(1, text_len, image_len), joint.narrow(1, 0, text_len)};
    }
    return s;
  };
  image = cache ? cache->run({image, text}, num_blocks, run_blocks).image
                : run_blocks(0, num_blocks, {image, text}, {}).image;
  return proj_out_(norm_out_(image, temb));  // [B, L_img, p p out_channels]
}

}  // namespace dpinfer::pipeline
