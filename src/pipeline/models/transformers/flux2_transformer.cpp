#include "dpinfer/pipeline/models/transformers/flux2_transformer.h"

#include <string>

#include <torch/nn/modules/container/modulelist.h>

#include "dpinfer/pipeline/nn/attention.h"
#include "dpinfer/pipeline/nn/embeddings.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

constexpr const char* kFlux2Transformer = "flux2 transformer";

// Flux2SwiGLU: x1, x2 = x.chunk(2, dim=-1); silu(x1) * x2.
at::Tensor swiglu(const at::Tensor& x) {
  const std::vector<at::Tensor> halves = x.chunk(2, -1);
  return at::silu(halves[0]) * halves[1];
}

// (1 + scale) * x + shift, the modulation of every Flux2 block (scale, shift [B, 1, dim]).
at::Tensor flux2_modulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale) {
  return (1 + scale) * x + shift;
}

// nn.LayerNorm(dim, elementwise_affine=False, eps)
at::Tensor flux2_layer_norm(const at::Tensor& x, int64_t dim, double eps) { return at::layer_norm(x, {dim}, {}, {}, eps); }

void check_flux2_batch_vector(const at::Tensor& t, int64_t batch, const char* name) {
  if (!(t.dim() == 0 || (t.dim() == 1 && t.size(0) == batch)))
    throw Error(std::string(kFlux2Transformer) + ": " + name + " must be [" + std::to_string(batch) + "] or a scalar, got " +
                c10::str(t.sizes()));
}

// ids [L, 4] or [B, L, 4] (diffusers: `if img_ids.ndim == 3: img_ids = img_ids[0]`) to [L, 4].
at::Tensor positions(const at::Tensor& ids, int64_t length, const char* name) {
  const at::Tensor two_d = ids.defined() && ids.dim() == 3 && ids.size(0) >= 1 ? ids[0] : ids;
  if (!two_d.defined() || two_d.dim() != 2 || two_d.size(0) != length || two_d.size(1) != 4)
    throw Error(std::string(kFlux2Transformer) + ": " + name + " must be [" + std::to_string(length) + ", 4] or [B, " +
                std::to_string(length) + ", 4], got " + (ids.defined() ? c10::str(ids.sizes()) : "none"));
  return two_d;
}

}  // namespace

// Ref: transformer_flux2.py Flux2FeedForward and Flux2SwiGLU
Flux2FeedForwardImpl::Flux2FeedForwardImpl(int64_t dim, int64_t hidden, const at::TensorOptions& options) {
  linear_in_ = register_module("linear_in", nn::Linear(dim, 2 * hidden, false, options));
  linear_out_ = register_module("linear_out", nn::Linear(hidden, dim, false, options));
}

at::Tensor Flux2FeedForwardImpl::forward(const at::Tensor& x) { return linear_out_(swiglu(linear_in_(x))); }

// Ref: transformer_flux2.py Flux2TransformerBlock, Flux2Attention and Flux2AttnProcessor
Flux2TransformerBlockImpl::Flux2TransformerBlockImpl(const Flux2TransformerConfig& c, const at::TensorOptions& options)
    : dim_(c.inner_dim()), eps_(c.eps) {
  // Flux2Attention(query_dim=dim, added_kv_proj_dim=dim, dim_head, heads, out_dim=dim, bias=False,
  // added_proj_bias=False, out_bias=False, eps): torch.nn.RMSNorm QK norms with weights.
  nn::JointAttentionOptions o;
  o.dim = dim_;
  o.heads = c.num_attention_heads;
  o.dim_head = c.attention_head_dim;
  o.qk_norm = true;
  o.qk_norm_eps = c.eps;
  o.qk_norm_kind = nn::RMSNormKind::kTorch;
  o.bias = false;
  o.out_bias = false;
  attn_ = register_module("attn", nn::DoubleStreamAttention(o, options));
  ff_ = register_module("ff", Flux2FeedForward(dim_, c.mlp_hidden_dim(), options));
  ff_context_ = register_module("ff_context", Flux2FeedForward(dim_, c.mlp_hidden_dim(), options));
}

Flux2TransformerBlockImpl::Output Flux2TransformerBlockImpl::forward(const at::Tensor& image, const at::Tensor& text,
                                                                     const std::vector<at::Tensor>& im,
                                                                     const std::vector<at::Tensor>& tm,
                                                                     const nn::RotaryCosSin& freqs) {
  // im / tm: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp, each [B, 1, dim].
  const nn::DoubleStreamAttentionImpl::Output a =
      attn_->forward_real_rope(flux2_modulate(flux2_layer_norm(image, dim_, eps_), im[0], im[1]),
                               flux2_modulate(flux2_layer_norm(text, dim_, eps_), tm[0], tm[1]), freqs);
  at::Tensor img = image + im[2] * a.image;
  img = img + im[5] * ff_(flux2_layer_norm(img, dim_, eps_) * (1 + im[4]) + im[3]);
  at::Tensor txt = text + tm[2] * a.text;
  txt = txt + tm[5] * ff_context_(flux2_layer_norm(txt, dim_, eps_) * (1 + tm[4]) + tm[3]);
  if (txt.scalar_type() == at::kHalf) txt = txt.clip(-65504, 65504);
  return {img, txt};
}

// Ref: transformer_flux2.py Flux2ParallelSelfAttention and Flux2ParallelSelfAttnProcessor
Flux2ParallelSelfAttentionImpl::Flux2ParallelSelfAttentionImpl(const Flux2TransformerConfig& c,
                                                               const at::TensorOptions& options)
    : heads_(c.num_attention_heads), inner_dim_(c.inner_dim()), mlp_hidden_dim_(c.mlp_hidden_dim()) {
  const int64_t dim = c.inner_dim();
  to_qkv_mlp_proj_ =
      register_module("to_qkv_mlp_proj", nn::Linear(dim, 3 * inner_dim_ + 2 * mlp_hidden_dim_, false, options));
  norm_q_ = register_module("norm_q", nn::RMSNorm(c.attention_head_dim, c.eps, true, options, nn::RMSNormKind::kTorch));
  norm_k_ = register_module("norm_k", nn::RMSNorm(c.attention_head_dim, c.eps, true, options, nn::RMSNormKind::kTorch));
  to_out_ = register_module("to_out", nn::Linear(inner_dim_ + mlp_hidden_dim_, dim, false, options));
}

at::Tensor Flux2ParallelSelfAttentionImpl::forward(const at::Tensor& x, const nn::RotaryCosSin& freqs) {
  const at::Tensor h = to_qkv_mlp_proj_(x);  // [B, N, 3 inner + 2 mlp]
  const std::vector<at::Tensor> parts = h.split_with_sizes({3 * inner_dim_, 2 * mlp_hidden_dim_}, -1);
  const std::vector<at::Tensor> qkv = parts[0].chunk(3, -1);  // views, as the processor's
  auto split_heads = [&](const at::Tensor& t) { return t.unflatten(-1, {heads_, -1}); };  // [B, N, h, d]
  const at::Tensor q = nn::apply_rotary_emb_real(norm_q_(split_heads(qkv[0])), freqs);
  const at::Tensor k = nn::apply_rotary_emb_real(norm_k_(split_heads(qkv[1])), freqs);
  const at::Tensor v = split_heads(qkv[2]);
  // diffusers' native backend: [B, N, h, d] permuted to [B, h, N, d] views, and back.
  at::Tensor out =
      nn::dot_product_attention(q.permute({0, 2, 1, 3}), k.permute({0, 2, 1, 3}), v.permute({0, 2, 1, 3}));
  out = out.permute({0, 2, 1, 3}).flatten(2, 3).to(q.scalar_type());  // [B, N, inner]
  return to_out_(at::cat({out, swiglu(parts[1])}, -1));
}

// Ref: transformer_flux2.py Flux2SingleTransformerBlock
Flux2SingleTransformerBlockImpl::Flux2SingleTransformerBlockImpl(const Flux2TransformerConfig& c,
                                                                 const at::TensorOptions& options)
    : dim_(c.inner_dim()), eps_(c.eps) {
  attn_ = register_module("attn", Flux2ParallelSelfAttention(c, options));
}

at::Tensor Flux2SingleTransformerBlockImpl::forward(const at::Tensor& x, const std::vector<at::Tensor>& mod,
                                                    const nn::RotaryCosSin& freqs) {
  // mod: shift, scale, gate [B, 1, dim]
  at::Tensor out = x + mod[2] * attn_(flux2_modulate(flux2_layer_norm(x, dim_, eps_), mod[0], mod[1]), freqs);
  if (out.scalar_type() == at::kHalf) out = out.clip(-65504, 65504);
  return out;
}

// Ref: transformer_flux2.py Flux2Transformer2DModel.__init__, Flux2TimestepGuidanceEmbeddings,
// Flux2Modulation; normalization.py AdaLayerNormContinuous (bias False)
Flux2Transformer2DModelImpl::Flux2Transformer2DModelImpl(const Flux2TransformerConfig& config,
                                                         const at::TensorOptions& options)
    : config_(config) {
  const Flux2TransformerConfig& c = config_;
  const int64_t dim = c.inner_dim();
  auto linear = [&](torch::nn::Module& parent, const char* name, int64_t in, int64_t out) {
    return parent.register_module(name, nn::Linear(in, out, false, options));
  };
  // TimestepEmbedding(in_channels, time_embed_dim, sample_proj_bias=False): linear_1, SiLU, linear_2.
  auto embed = register_module("time_guidance_embed", std::make_shared<torch::nn::Module>());
  auto timestep = embed->register_module("timestep_embedder", std::make_shared<torch::nn::Module>());
  timestep_linear_1_ = linear(*timestep, "linear_1", c.timestep_guidance_channels, dim);
  timestep_linear_2_ = linear(*timestep, "linear_2", dim, dim);
  if (c.guidance_embeds) {
    auto guidance = embed->register_module("guidance_embedder", std::make_shared<torch::nn::Module>());
    guidance_linear_1_ = linear(*guidance, "linear_1", c.timestep_guidance_channels, dim);
    guidance_linear_2_ = linear(*guidance, "linear_2", dim, dim);
  }
  auto mod = [&](const char* name, int64_t sets) {
    auto m = register_module(name, std::make_shared<torch::nn::Module>());
    return linear(*m, "linear", dim, dim * 3 * sets);
  };
  double_mod_img_ = mod("double_stream_modulation_img", 2);
  double_mod_txt_ = mod("double_stream_modulation_txt", 2);
  single_mod_ = mod("single_stream_modulation", 1);
  x_embedder_ = linear(*this, "x_embedder", c.in_channels, dim);
  context_embedder_ = linear(*this, "context_embedder", c.joint_attention_dim, dim);
  auto blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) {
    blocks_.push_back(Flux2TransformerBlock(c, options));
    blocks->push_back(blocks_.back());
  }
  auto single_blocks = register_module("single_transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_single_layers; ++i) {
    single_blocks_.push_back(Flux2SingleTransformerBlock(c, options));
    single_blocks->push_back(single_blocks_.back());
  }
  auto norm_out = register_module("norm_out", std::make_shared<torch::nn::Module>());
  norm_out_linear_ = linear(*norm_out, "linear", dim, 2 * dim);
  proj_out_ = linear(*this, "proj_out", dim, c.out_features());
}

std::vector<at::Tensor> Flux2Transformer2DModelImpl::modulation(nn::Linear& linear, const at::Tensor& temb,
                                                                int64_t n) {
  return linear(at::silu(temb)).unsqueeze(1).chunk(n, -1);  // n x [B, 1, dim]
}

// Ref: transformer_flux2.py Flux2Transformer2DModel.forward and Flux2PosEmbed.forward
at::Tensor Flux2Transformer2DModelImpl::forward(const at::Tensor& hidden_states,
                                                const at::Tensor& encoder_hidden_states, const at::Tensor& timestep,
                                                const at::Tensor& img_ids, const at::Tensor& txt_ids,
                                                const at::Tensor& guidance) {
  const Flux2TransformerConfig& c = config_;
  const std::string what(kFlux2Transformer);
  if (hidden_states.dim() != 3 || hidden_states.size(0) < 1 || hidden_states.size(2) != c.in_channels)
    throw Error(what + ": hidden_states must be [B, L_img, " + std::to_string(c.in_channels) + "], got " +
                c10::str(hidden_states.sizes()));
  const int64_t batch = hidden_states.size(0), image_len = hidden_states.size(1);
  if (encoder_hidden_states.dim() != 3 || encoder_hidden_states.size(0) != batch ||
      encoder_hidden_states.size(2) != c.joint_attention_dim)
    throw Error(what + ": encoder_hidden_states must be [" + std::to_string(batch) + ", L_txt, " +
                std::to_string(c.joint_attention_dim) + "], got " + c10::str(encoder_hidden_states.sizes()));
  const int64_t text_len = encoder_hidden_states.size(1);
  check_flux2_batch_vector(timestep, batch, "timestep");
  const at::Tensor image_pos = positions(img_ids, image_len, "img_ids");
  const at::Tensor text_pos = positions(txt_ids, text_len, "txt_ids");
  if (guidance.defined()) check_flux2_batch_vector(guidance, batch, "guidance");

  const at::ScalarType dtype = x_embedder_->compute_dtype();
  const at::Device device = x_embedder_->weight.device();
  // timestep.to(hidden_states.dtype) * 1000 (a product in that dtype), Timesteps(channels, flip_sin_to_cos,
  // shift 0) in float32, cast back, through the bias-free TimestepEmbedding; the same for guidance.
  auto embed = [&](nn::Linear& l1, nn::Linear& l2, const at::Tensor& t) {
    const at::Tensor scaled = (t.dim() == 0 ? t.expand({batch}) : t).to(device, dtype) * 1000;
    const at::Tensor proj = nn::timestep_embedding(scaled, c.timestep_guidance_channels, true, 0.0).to(dtype);
    return l2(at::silu(l1(proj)));
  };
  at::Tensor temb = embed(timestep_linear_1_, timestep_linear_2_, timestep);  // [B, dim]
  if (guidance.defined() && c.guidance_embeds)
    temb = temb + embed(guidance_linear_1_, guidance_linear_2_, guidance);
  const std::vector<at::Tensor> img_mod = modulation(double_mod_img_, temb, 6);
  const std::vector<at::Tensor> txt_mod = modulation(double_mod_txt_, temb, 6);
  const std::vector<at::Tensor> single_mod = modulation(single_mod_, temb, 3);

  at::Tensor image = x_embedder_(hidden_states.to(device, dtype));              // [B, L_img, dim]
  at::Tensor text = context_embedder_(encoder_hidden_states.to(device, dtype));  // [B, L_txt, dim]
  // pos_embed(txt_ids) and pos_embed(img_ids) concatenated: row by row the same as one call on both.
  const nn::RotaryCosSin freqs =
      nn::rotary_cos_sin(at::cat({text_pos.to(device), image_pos.to(device)}, 0), c.rope_theta, c.axes_dims_rope);

  // --offload blocks: each block's group on the device while it runs (nn/offload.h).
  const nn::OffloadedForward offloaded(block_offload());
  for (auto& block : blocks_) {
    const nn::BlockOnDevice on_device(block_offload(), *block);
    Flux2TransformerBlockImpl::Output o = block(image, text, img_mod, txt_mod, freqs);
    image = std::move(o.image);
    text = std::move(o.text);
  }
  at::Tensor joint = at::cat({text, image}, 1);
  for (auto& block : single_blocks_) {
    const nn::BlockOnDevice on_device(block_offload(), *block);
    joint = block(joint, single_mod, freqs);
  }
  image = joint.narrow(1, text_len, image_len);
  // norm_out: AdaLayerNormContinuous(dim, dim, elementwise_affine=False, eps, bias=False); scale first.
  const std::vector<at::Tensor> emb = norm_out_linear_(at::silu(temb).to(image.scalar_type())).chunk(2, 1);
  image = flux2_layer_norm(image, c.inner_dim(), c.eps) * (1 + emb[0]).unsqueeze(1) + emb[1].unsqueeze(1);
  return proj_out_(image);  // [B, L_img, p p out_channels]
}

}  // namespace dpinfer::pipeline
