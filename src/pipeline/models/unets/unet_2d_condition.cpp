#include "dpinfer/pipeline/models/unets/unet_2d_condition.h"

#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

using nn::TimestepEmbedding;

CrossAttentionOptions cross_attention(const UNetConfig& config, size_t block) {
  CrossAttentionOptions a;
  a.heads = config.num_attention_heads[block];
  a.transformer_layers = config.transformer_layers_per_block[block];
  a.cross_attention_dim = config.cross_attention_dim[block];
  a.use_linear_projection = config.use_linear_projection;
  a.only_cross_attention = config.only_cross_attention[block];
  return a;
}

nn::Conv2d same_conv(int64_t in, int64_t out, int64_t kernel, const at::TensorOptions& options) {
  return nn::Conv2d(in, out, kernel, 1, (kernel - 1) / 2, true, options);
}

}  // namespace

// Ref: diffusers/models/unets/unet_2d_condition.py UNet2DConditionModel.__init__
UNet2DConditionModelImpl::UNet2DConditionModelImpl(const UNetConfig& config, const at::TensorOptions& options)
    : config_(config) {
  const std::vector<int64_t>& channels = config.block_out_channels;
  const size_t n = channels.size();
  const int64_t temb = config.time_embed_dim;

  conv_in_ = register_module("conv_in", same_conv(config.in_channels, channels[0], config.conv_in_kernel, options));
  // time_proj (Timesteps) has no parameters: timestep_embedding() in forward.
  time_embedding_ = register_module("time_embedding",
                                    nn::TimestepEmbedding(channels[0], temb, config.time_cond_proj_dim, options));
  // add_time_proj (Timesteps) has no parameters either.
  if (config.addition_embed_type == UNetConfig::AdditionEmbedType::kTextTime)
    add_embedding_ = register_module(
        "add_embedding",
        nn::TimestepEmbedding(config.projection_class_embeddings_input_dim, temb, std::nullopt, options));

  UNetBlockOptions base;
  base.temb_channels = temb;
  base.groups = config.norm_num_groups;
  base.eps = config.norm_eps;
  base.output_scale_factor = config.resnet_out_scale_factor;
  base.downsample_padding = config.downsample_padding;

  auto down_blocks = register_module("down_blocks", torch::nn::ModuleList());
  for (size_t i = 0; i < n; ++i) {
    UNetBlockOptions o = base;
    o.num_layers = config.layers_per_block[i];
    o.in_channels = i == 0 ? channels[0] : channels[i - 1];
    o.out_channels = channels[i];
    o.add_sampler = i + 1 < n;
    if (config.down_block_types[i] == UNetConfig::DownBlockType::kCrossAttnDownBlock2D)
      o.attention = cross_attention(config, i);
    down_blocks_.push_back(DownBlock2D(o, options));
    down_blocks->push_back(down_blocks_.back());
  }

  if (config.mid_block_type == UNetConfig::MidBlockType::kUNetMidBlock2DCrossAttn) {
    UNetBlockOptions o = base;
    o.in_channels = channels[n - 1];
    o.output_scale_factor = config.mid_block_scale_factor;
    o.attention = cross_attention(config, n - 1);
    mid_block_cross_attn_ = register_module("mid_block", UNetMidBlock2DCrossAttn(o, options));
  } else if (config.mid_block_type == UNetConfig::MidBlockType::kUNetMidBlock2D) {
    UNetMidBlock2DOptions o;
    o.in_channels = channels[n - 1];
    o.temb_channels = temb;
    o.groups = config.norm_num_groups;
    o.eps = config.norm_eps;
    o.output_scale_factor = config.mid_block_scale_factor;
    o.num_layers = 0;
    o.add_attention = false;
    mid_block_plain_ = register_module("mid_block", UNetMidBlock2D(o, options));
  }

  // Up block i mirrors down block n-1-i; per-block settings are read reversed.
  auto up_blocks = register_module("up_blocks", torch::nn::ModuleList());
  int64_t out = channels[n - 1];
  for (size_t i = 0; i < n; ++i) {
    const size_t mirror = n - 1 - i;
    UNetBlockOptions o = base;
    o.num_layers = config.layers_per_block[mirror] + 1;
    o.prev_output_channels = out;
    out = channels[mirror];
    o.out_channels = out;
    o.in_channels = channels[mirror == 0 ? 0 : mirror - 1];
    o.add_sampler = i + 1 < n;
    if (config.up_block_types[i] == UNetConfig::UpBlockType::kCrossAttnUpBlock2D)
      o.attention = cross_attention(config, mirror);
    up_blocks_.push_back(UpBlock2D(o, options));
    up_blocks->push_back(up_blocks_.back());
  }

  conv_norm_out_ =
      register_module("conv_norm_out", nn::GroupNorm(config.norm_num_groups, channels[0], config.norm_eps, options));
  conv_out_ =
      register_module("conv_out", same_conv(channels[0], config.out_channels, config.conv_out_kernel, options));
}

// Ref: diffusers/models/unets/unet_2d_condition.py UNet2DConditionModel.get_aug_embed ("text_time")
at::Tensor UNet2DConditionModelImpl::text_time_embedding(const AddedConditioning* added, const at::Tensor& sample) {
  const int64_t batch = sample.size(0);
  if (added == nullptr || !added->text_embeds.defined() || !added->time_ids.defined())
    throw Error("unet: this UNet has addition_embed_type text_time (SDXL) and needs text_embeds and time_ids");
  if (added->text_embeds.dim() != 2 || added->text_embeds.size(0) != batch ||
      added->text_embeds.size(1) != config_.text_embeds_dim())
    throw Error("unet: text_embeds must be [" + std::to_string(batch) + ", " +
                std::to_string(config_.text_embeds_dim()) + "], got " + c10::str(added->text_embeds.sizes()));
  if (added->time_ids.dim() != 2 || added->time_ids.size(0) != batch || added->time_ids.size(1) != 6)
    throw Error("unet: time_ids must be [" + std::to_string(batch) + ", 6], got " +
                c10::str(added->time_ids.sizes()));
  // add_time_proj: float32 sinusoids of every id, then one row of 6 * dim per sample.
  at::Tensor time_embeds = nn::timestep_embedding(added->time_ids.flatten(), config_.addition_time_embed_dim,
                                                  config_.flip_sin_to_cos, config_.freq_shift)
                               .reshape({batch, -1});  // [B, 6 * addition_time_embed_dim]
  // torch.concat promotes the pooled embedding to float32 beside them, then add_embeds goes to emb's dtype.
  at::Tensor add_embeds = at::cat({added->text_embeds, time_embeds}, -1).to(sample.scalar_type());
  return add_embedding_(add_embeds);  // [B, time_embed_dim]
}

// Ref: diffusers/models/unets/unet_2d_condition.py UNet2DConditionModel.forward
at::Tensor UNet2DConditionModelImpl::forward(const at::Tensor& sample, const at::Tensor& timestep,
                                             const at::Tensor& encoder_hidden_states, const at::Tensor& timestep_cond,
                                             const AddedConditioning* added, DeepCache* deep_cache) {
  if (sample.dim() != 4 || sample.size(1) != config_.in_channels)
    throw Error("unet: sample must be [batch, " + std::to_string(config_.in_channels) +
                ", height, width], got " + c10::str(sample.sizes()));
  if (timestep.dim() > 1 || (timestep.dim() == 1 && timestep.size(0) != 1 && timestep.size(0) != sample.size(0)))
    throw Error("unet: timestep must be a 0-d tensor or one per sample (" + std::to_string(sample.size(0)) +
                "), got shape " + c10::str(timestep.sizes()));

  const int64_t up_factor = int64_t{1} << config_.num_upsamplers();
  const bool forward_upsample_size = sample.size(2) % up_factor != 0 || sample.size(3) % up_factor != 0;

  at::Tensor x = config_.center_input_sample ? 2 * sample - 1.0 : sample;

  // Timesteps carry no weights and are computed in float32, then cast to the sample dtype.
  at::Tensor t = timestep.reshape({-1}).to(sample.device()).expand({sample.size(0)});  // [B]
  at::Tensor t_emb =
      nn::timestep_embedding(t, config_.block_out_channels[0], config_.flip_sin_to_cos, config_.freq_shift)
          .to(sample.scalar_type());
  at::Tensor emb = time_embedding_(t_emb, timestep_cond);  // [B, time_embed_dim]
  if (!add_embedding_.is_empty()) emb = emb + text_time_embedding(added, sample);

  // DeepCache (deep_cache.h): the branch ends in down block `branch` and in up_blocks_[cache_up], which mirrors it;
  // the kept feature is the input of that up block's layer `entry`. A shallow call runs the down blocks above the
  // branch, the branch block's first `layer` layers, no mid block, and the up blocks from cache_up's entry layer on.
  const size_t n = down_blocks_.size();
  const bool shallow = deep_cache && !deep_cache->full();
  size_t branch = n, cache_up = n;
  int64_t entry = 0;
  if (deep_cache) {
    if (deep_cache->block() >= static_cast<int64_t>(n))
      throw InputError("deep_cache_branch " + std::to_string(3 * deep_cache->block() + deep_cache->layer()) +
                       ": this UNet has " + std::to_string(n) + " down blocks, so its branches are 0.." +
                       std::to_string(3 * n - 1));
    branch = static_cast<size_t>(deep_cache->block());
    cache_up = n - 1 - branch;
    entry = deep_cache->entry_layer(up_blocks_[cache_up]->num_layers());
    if (shallow && !deep_cache->feature.defined()) throw Error("DeepCache: a shallow call before any full one");
  }

  x = conv_in_(x);
  std::vector<at::Tensor> skips{x};
  for (size_t i = 0; i < (shallow ? branch : n); ++i) x = down_blocks_[i](x, emb, encoder_hidden_states, skips);

  if (shallow) {
    x = down_blocks_[branch]->forward_layers(x, emb, encoder_hidden_states, skips, deep_cache->layer());
  } else {
    if (!mid_block_cross_attn_.is_empty()) x = mid_block_cross_attn_(x, emb, encoder_hidden_states);
    if (!mid_block_plain_.is_empty()) x = mid_block_plain_(x, emb);
  }

  for (size_t i = shallow ? cache_up : 0; i < up_blocks_.size(); ++i) {
    const bool is_final = i + 1 == up_blocks_.size();
    // A shallow call enters the branch's up block at its entry layer, with the feature, and takes only the skips
    // of the layers from there (the ones its down block's first layers and the blocks above just pushed).
    const int64_t from = shallow && i == cache_up ? entry : 0;
    std::vector<int64_t> upsample_size;
    // The size of the skip the next block will take first, once this block has taken its own.
    if (!is_final && forward_upsample_size) {
      const at::Tensor& next_skip = skips[skips.size() - static_cast<size_t>(up_blocks_[i]->num_layers() - from) - 1];
      upsample_size = {next_skip.size(2), next_skip.size(3)};
    }
    if (i != cache_up)
      x = up_blocks_[i](x, skips, emb, encoder_hidden_states, upsample_size);
    else if (shallow)
      x = up_blocks_[i](deep_cache->feature, skips, emb, encoder_hidden_states, upsample_size, from);
    else  // a full call keeps the feature
      x = up_blocks_[i](x, skips, emb, encoder_hidden_states, upsample_size, 0, &deep_cache->feature, entry);
  }

  return conv_out_(at::silu(conv_norm_out_(x)));
}

}  // namespace dpinfer::pipeline
