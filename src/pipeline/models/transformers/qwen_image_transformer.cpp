#include "dpinfer/pipeline/models/transformers/qwen_image_transformer.h"

#include <algorithm>
#include <memory>
#include <string>

#include <torch/nn/modules/container/modulelist.h>

#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

constexpr const char* kQwenImageTransformer = "qwen-image transformer";
constexpr double kQwenImageEps = 1e-6;  // every norm of the model: blocks, QK norms, txt_norm, norm_out

bool same_grids(const std::vector<nn::TokenGrid>& a, const std::vector<nn::TokenGrid>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].frames != b[i].frames || a[i].height != b[i].height || a[i].width != b[i].width) return false;
  return true;
}

// diffusers' _modulate: x * (1 + scale) + shift, shift/scale [B, 1, dim].
at::Tensor qwen_image_modulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale) {
  return x * (1 + scale) + shift;
}

}  // namespace

// Ref: diffusers/models/transformers/transformer_qwenimage.py QwenImageTransformerBlock
QwenImageTransformerBlockImpl::QwenImageTransformerBlockImpl(int64_t dim, int64_t heads, int64_t head_dim,
                                                             const at::TensorOptions& options) {
  img_mod_ = register_module("img_mod", nn::AdaLNModulation(dim, dim, 6, /*silu_first=*/true, options));
  img_norm1_ = register_module("img_norm1", nn::LayerNorm(dim, kQwenImageEps, false, options));
  nn::JointAttentionOptions attention;
  attention.dim = dim;
  attention.heads = heads;
  attention.dim_head = head_dim;
  attention.qk_norm = true;
  attention.qk_norm_eps = kQwenImageEps;
  attention.bias = true;
  attention.out_bias = true;
  attn_ = register_module("attn", nn::DoubleStreamAttention(attention, options));
  img_norm2_ = register_module("img_norm2", nn::LayerNorm(dim, kQwenImageEps, false, options));
  img_mlp_ = register_module("img_mlp", nn::FeedForward(dim, options, nn::FeedForwardActivation::kGELUApproximate));
  txt_mod_ = register_module("txt_mod", nn::AdaLNModulation(dim, dim, 6, /*silu_first=*/true, options));
  txt_norm1_ = register_module("txt_norm1", nn::LayerNorm(dim, kQwenImageEps, false, options));
  txt_norm2_ = register_module("txt_norm2", nn::LayerNorm(dim, kQwenImageEps, false, options));
  txt_mlp_ = register_module("txt_mlp", nn::FeedForward(dim, options, nn::FeedForwardActivation::kGELUApproximate));
}

QwenImageTransformerBlockImpl::Output QwenImageTransformerBlockImpl::forward(const at::Tensor& image,
                                                                             const at::Tensor& text,
                                                                             const at::Tensor& temb,
                                                                             const nn::MSRope::Freqs& freqs,
                                                                             const at::Tensor& mask) {
  // [B, 1, dim] each: shift1, scale1, gate1, shift2, scale2, gate2 (chunk(2) then chunk(3) in diffusers).
  const std::vector<at::Tensor> im = img_mod_(temb), tm = txt_mod_(temb);
  const nn::DoubleStreamAttentionImpl::Output a =
      attn_(qwen_image_modulate(img_norm1_(image), im[0], im[1]), qwen_image_modulate(txt_norm1_(text), tm[0], tm[1]), freqs.image,
            freqs.text, mask);
  at::Tensor img = image + im[2] * a.image;
  at::Tensor txt = text + tm[2] * a.text;
  img = img + im[5] * img_mlp_(qwen_image_modulate(img_norm2_(img), im[3], im[4]));
  txt = txt + tm[5] * txt_mlp_(qwen_image_modulate(txt_norm2_(txt), tm[3], tm[4]));
  if (txt.scalar_type() == at::kHalf) txt = txt.clip(-65504, 65504);
  if (img.scalar_type() == at::kHalf) img = img.clip(-65504, 65504);
  return {img, txt};
}

// Ref: transformer_qwenimage.py QwenImageTransformer2DModel.__init__
QwenImageTransformer2DModelImpl::QwenImageTransformer2DModelImpl(const QwenImageTransformerConfig& config,
                                                                 const at::TensorOptions& options)
    : config_(config), rope_(kRopeTheta, config.axes_dims_rope) {
  const QwenImageTransformerConfig& c = config_;
  const int64_t dim = c.inner_dim();
  // time_text_embed = QwenTimestepProjEmbeddings: time_proj (Timesteps, no parameters), timestep_embedder.
  auto time_text_embed = register_module("time_text_embed", std::make_shared<torch::nn::Module>());
  timestep_embedder_ = time_text_embed->register_module(
      "timestep_embedder", nn::TimestepEmbedding(kTimestepChannels, dim, std::nullopt, options));
  txt_norm_ = register_module("txt_norm", nn::RMSNorm(c.joint_attention_dim, kQwenImageEps, true, options));
  img_in_ = register_module("img_in", nn::Linear(c.in_channels, dim, true, options));
  txt_in_ = register_module("txt_in", nn::Linear(c.joint_attention_dim, dim, true, options));
  auto blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) {
    blocks_.push_back(QwenImageTransformerBlock(dim, c.num_attention_heads, c.attention_head_dim, options));
    blocks->push_back(blocks_.back());
  }
  norm_out_ = register_module("norm_out", nn::AdaLayerNormContinuous(dim, dim, kQwenImageEps, options));
  proj_out_ = register_module("proj_out", nn::Linear(dim, c.out_features(), true, options));
}

// Ref: transformer_qwenimage.py QwenImageTransformer2DModel.forward, QwenTimestepProjEmbeddings,
// QwenEmbedRope.forward
at::Tensor QwenImageTransformer2DModelImpl::forward(const at::Tensor& hidden_states,
                                                    const at::Tensor& encoder_hidden_states,
                                                    const at::Tensor& encoder_hidden_states_mask,
                                                    const at::Tensor& timestep,
                                                    const std::vector<std::vector<nn::TokenGrid>>& img_shapes,
                                                    const std::vector<int64_t>& txt_seq_lens,
                                                    QwenTextPadding text_padding, nn::BlockCache* cache) {
  const QwenImageTransformerConfig& c = config_;
  const std::string what(kQwenImageTransformer);
  if (hidden_states.dim() != 3 || hidden_states.size(0) < 1 || hidden_states.size(2) != c.in_channels)
    throw Error(what + ": hidden_states must be [B, L_img, " + std::to_string(c.in_channels) + "], got " +
                c10::str(hidden_states.sizes()));
  const int64_t batch = hidden_states.size(0), image_len = hidden_states.size(1);
  if (encoder_hidden_states.dim() != 3 || encoder_hidden_states.size(0) != batch ||
      encoder_hidden_states.size(1) < 1 || encoder_hidden_states.size(2) != c.joint_attention_dim)
    throw Error(what + ": encoder_hidden_states must be [" + std::to_string(batch) + ", L_txt, " +
                std::to_string(c.joint_attention_dim) + "], got " + c10::str(encoder_hidden_states.sizes()));
  const int64_t text_len = encoder_hidden_states.size(1);
  if (encoder_hidden_states_mask.defined() &&
      encoder_hidden_states_mask.sizes() != at::IntArrayRef({batch, text_len}))
    throw Error(what + ": encoder_hidden_states_mask must be [" + std::to_string(batch) + ", " +
                std::to_string(text_len) + "], got " + c10::str(encoder_hidden_states_mask.sizes()));
  if (!(timestep.dim() == 0 || (timestep.dim() == 1 && timestep.size(0) == batch)))
    throw Error(what + ": timestep must be [" + std::to_string(batch) + "] or a scalar, got " +
                c10::str(timestep.sizes()));
  if (static_cast<int64_t>(img_shapes.size()) != batch || static_cast<int64_t>(txt_seq_lens.size()) != batch)
    throw Error(what + ": img_shapes and txt_seq_lens need one entry per batch item (" + std::to_string(batch) +
                "), got " + std::to_string(img_shapes.size()) + " and " + std::to_string(txt_seq_lens.size()));
  int64_t grid_tokens = 0;
  for (const nn::TokenGrid& g : img_shapes[0]) grid_tokens += g.frames * g.height * g.width;
  if (grid_tokens != image_len)
    throw Error(what + ": img_shapes[0] holds " + std::to_string(grid_tokens) + " tokens, but hidden_states has " +
                std::to_string(image_len));
  for (int64_t i = 1; i < batch; ++i)
    if (!same_grids(img_shapes[i], img_shapes[0]))
      throw Error(what + ": img_shapes[" + std::to_string(i) +
                  "] differs from img_shapes[0]; diffusers uses img_shapes[0] for every item, so list the same "
                  "grids for all");
  for (int64_t length : txt_seq_lens)
    if (length < 0 || length > text_len)
      throw Error(what + ": txt_seq_lens entry " + std::to_string(length) + " is outside [0, " +
                  std::to_string(text_len) + "]");
  if (*std::max_element(txt_seq_lens.begin(), txt_seq_lens.end()) != text_len)
    throw Error(what + ": the longest txt_seq_lens entry must be L_txt = " + std::to_string(text_len) +
                " (the prompts are padded to the longest), got " +
                std::to_string(*std::max_element(txt_seq_lens.begin(), txt_seq_lens.end())));

  const at::ScalarType dtype = img_in_->compute_dtype();
  const at::Device device = img_in_->weight.device();
  at::Tensor image = img_in_(hidden_states.to(device, dtype));                            // [B, L_img, dim]
  at::Tensor text = txt_in_(txt_norm_(encoder_hidden_states.to(device, dtype)));          // [B, L_txt, dim]
  // temb: timestep.to(dtype), Timesteps(256, flip_sin_to_cos, shift 0, scale 1000) in float32, cast
  // to dtype, timestep_embedder.
  const at::Tensor t = (timestep.dim() == 0 ? timestep.expand({batch}) : timestep).to(device, dtype);
  const at::Tensor temb =
      timestep_embedder_(nn::timestep_embedding(t, kTimestepChannels, true, 0.0, kTimestepScale).to(dtype));
  const nn::MSRope::Freqs freqs = rope_(img_shapes[0], text_len, device);

  at::Tensor mask;  // [B, L_txt + L_img] bool over the joint sequence [text, image]
  if (text_padding == QwenTextPadding::kMasked && encoder_hidden_states_mask.defined())
    mask = at::cat({encoder_hidden_states_mask.to(device).ne(0),
                    at::ones({batch, image_len}, at::TensorOptions().dtype(at::kBool).device(device))},
                   1);
  // --offload blocks: each block's group on the device while it runs (nn/offload.h).
  const nn::OffloadedForward offloaded(block_offload());
  // The blocks [begin, end), for the rows `rows` of the batch (temb's and the mask's).
  const int64_t num_blocks = static_cast<int64_t>(blocks_.size());
  const nn::BlockRange run_blocks = [&](int64_t begin, int64_t end, const nn::Streams& in, const at::Tensor& rows) {
    const bool part = rows.defined() && rows.size(0) != batch;
    const at::Tensor temb_rows = part ? temb.index_select(0, rows) : temb;
    const at::Tensor mask_rows = part && mask.defined() ? mask.index_select(0, rows) : mask;
    nn::Streams s = in;
    for (int64_t i = begin; i < end; ++i) {
      const nn::BlockOnDevice on_device(block_offload(), *blocks_[i]);
      QwenImageTransformerBlockImpl::Output o = blocks_[i](s.image, s.text, temb_rows, freqs, mask_rows);
      s = {std::move(o.image), std::move(o.text)};
    }
    return s;
  };
  image = cache ? cache->run({image, text}, num_blocks, run_blocks).image
                : run_blocks(0, num_blocks, {image, text}, {}).image;
  return proj_out_(norm_out_(image, temb));  // [B, L_img, p p out_channels]
}

}  // namespace dpinfer::pipeline
