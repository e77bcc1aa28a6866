#include "dpinfer/pipeline/models/transformers/z_image_transformer.h"

#include <algorithm>
#include <memory>

#include <torch/nn/modules/container/modulelist.h>

#include "dpinfer/pipeline/nn/patchify.h"
#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

constexpr const char* kZImageTransformer = "z-image transformer";

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

std::string patch_key(int64_t patch, int64_t f_patch) { return std::to_string(patch) + "-" + std::to_string(f_patch); }

}  // namespace

// Ref: diffusers/models/transformers/transformer_z_image.py ZImageTransformerBlock
ZImageTransformerBlockImpl::ZImageTransformerBlockImpl(const ZImageTransformerConfig& c, bool modulation,
                                                       const at::TensorOptions& options) {
  nn::JointAttentionOptions attention;
  attention.dim = c.dim;
  attention.heads = c.n_heads;
  attention.dim_head = c.head_dim();
  attention.qk_norm = c.qk_norm;
  attention.qk_norm_eps = 1e-5;  // diffusers passes eps=1e-5 to Attention, not norm_eps
  attention_ = register_module("attention", nn::JointAttention(attention, options));
  feed_forward_ = register_module("feed_forward", nn::SwiGLUFeedForward(c.dim, c.ffn_hidden_dim(), options));
  attention_norm1_ = register_module("attention_norm1", nn::RMSNorm(c.dim, c.norm_eps, true, options));
  ffn_norm1_ = register_module("ffn_norm1", nn::RMSNorm(c.dim, c.norm_eps, true, options));
  attention_norm2_ = register_module("attention_norm2", nn::RMSNorm(c.dim, c.norm_eps, true, options));
  ffn_norm2_ = register_module("ffn_norm2", nn::RMSNorm(c.dim, c.norm_eps, true, options));
  if (modulation)
    adaln_modulation_ =
        register_module("adaLN_modulation", nn::AdaLNModulation(c.adaln_embed_dim(), c.dim, 4, false, options));
}

at::Tensor ZImageTransformerBlockImpl::forward(const at::Tensor& x, const at::Tensor& mask, const at::Tensor& freqs,
                                               const at::Tensor& adaln) {
  if (adaln_modulation_.is_empty()) {
    at::Tensor h = x + attention_norm2_(attention_(attention_norm1_(x), mask, freqs));
    return h + ffn_norm2_(feed_forward_(ffn_norm1_(h)));
  }
  // [B, 1, dim] each: scale_msa, gate_msa, scale_mlp, gate_mlp.
  const std::vector<at::Tensor> m = adaln_modulation_(adaln);
  const at::Tensor gate_msa = m[1].tanh(), gate_mlp = m[3].tanh();
  const at::Tensor scale_msa = 1.0 + m[0], scale_mlp = 1.0 + m[2];
  at::Tensor h = x + gate_msa * attention_norm2_(attention_(attention_norm1_(x) * scale_msa, mask, freqs));
  return h + gate_mlp * ffn_norm2_(feed_forward_(ffn_norm1_(h) * scale_mlp));
}

// Ref: transformer_z_image.py FinalLayer
ZImageFinalLayerImpl::ZImageFinalLayerImpl(int64_t dim, int64_t adaln_dim, int64_t out_features,
                                           const at::TensorOptions& options) {
  norm_final_ = register_module("norm_final", nn::LayerNorm(dim, 1e-6, false, options));
  linear_ = register_module("linear", nn::Linear(dim, out_features, true, options));
  adaln_modulation_ = register_module("adaLN_modulation", nn::AdaLNModulation(adaln_dim, dim, 1, true, options));
}

at::Tensor ZImageFinalLayerImpl::forward(const at::Tensor& x, const at::Tensor& c) {
  const at::Tensor scale = 1.0 + adaln_modulation_(c)[0];  // [B, 1, dim]
  return linear_(norm_final_(x) * scale);
}

// Ref: transformer_z_image.py ZImageTransformer2DModel.__init__
ZImageTransformer2DModelImpl::ZImageTransformer2DModelImpl(const ZImageTransformerConfig& config,
                                                           const at::TensorOptions& options)
    : config_(config), rope_(config.rope_theta, config.axes_dims, config.axes_lens) {
  const ZImageTransformerConfig& c = config_;
  auto x_embedder = register_module("all_x_embedder", std::make_shared<torch::nn::Module>());    // nn.ModuleDict
  auto final_layer = register_module("all_final_layer", std::make_shared<torch::nn::Module>());  // nn.ModuleDict
  for (size_t i = 0; i < c.all_patch_size.size(); ++i) {
    const int64_t p = c.all_patch_size[i], pf = c.all_f_patch_size[i];
    const std::string key = patch_key(p, pf);
    const int64_t patch_features = pf * p * p * c.in_channels;
    x_embedders_.emplace(key, x_embedder->register_module(key, nn::Linear(patch_features, c.dim, true, options)));
    final_layers_.emplace(
        key, final_layer->register_module(key, ZImageFinalLayer(c.dim, c.adaln_embed_dim(), patch_features, options)));
  }
  auto blocks = [&](const char* name, int64_t n, bool modulation, std::vector<ZImageTransformerBlock>& out) {
    auto list = register_module(name, torch::nn::ModuleList());
    for (int64_t i = 0; i < n; ++i) {
      out.push_back(ZImageTransformerBlock(c, modulation, options));
      list->push_back(out.back());
    }
  };
  blocks("noise_refiner", c.n_refiner_layers, true, noise_refiner_);
  blocks("context_refiner", c.n_refiner_layers, false, context_refiner_);
  t_embedder_ = register_module("t_embedder", nn::DitTimestepEmbedder(c.adaln_embed_dim(), 1024, 256, options));
  auto cap_embedder = register_module("cap_embedder", std::make_shared<torch::nn::Module>());  // nn.Sequential
  cap_norm_ = cap_embedder->register_module("0", nn::RMSNorm(c.cap_feat_dim, c.norm_eps, true, options));
  cap_linear_ = cap_embedder->register_module("1", nn::Linear(c.cap_feat_dim, c.dim, true, options));
  x_pad_token_ = register_parameter("x_pad_token", at::empty({1, c.dim}, options), /*requires_grad=*/false);
  cap_pad_token_ = register_parameter("cap_pad_token", at::empty({1, c.dim}, options), false);
  blocks("layers", c.n_layers, true, layers_);
}

// Ref: transformer_z_image.py ZImageTransformer2DModel.patchify_and_embed and forward. diffusers
// works on lists of per-item sequences; here item i of the batch is row i, each sequence padded
// as pad_sequence pads it (zero features, zero RoPE factors, masked as keys), so that every real
// row sees exactly what diffusers computes for it.
at::Tensor ZImageTransformer2DModelImpl::forward(const at::Tensor& latents, const at::Tensor& timestep,
                                                 const at::Tensor& caption_features,
                                                 const std::vector<int64_t>& caption_lengths, int64_t patch_size,
                                                 int64_t f_patch_size, nn::BlockCache* cache,
                                                 const std::vector<std::vector<int64_t>>& image_rows) {
  const ZImageTransformerConfig& c = config_;
  const std::string key = patch_key(patch_size, f_patch_size);
  auto embedder = x_embedders_.find(key);
  if (embedder == x_embedders_.end())
    throw Error(std::string(kZImageTransformer) + ": no x embedder for patch_size " + std::to_string(patch_size) +
                " and f_patch_size " + std::to_string(f_patch_size) + " (the config's all_patch_size and "
                "all_f_patch_size list the pairs it has)");
  if (latents.dim() != 4 && latents.dim() != 5)
    throw Error(std::string(kZImageTransformer) + ": latents must be [B, C, H, W] or [B, C, F, H, W], got " +
                c10::str(latents.sizes()));
  const at::Tensor x5 = latents.dim() == 4 ? latents.unsqueeze(2) : latents;  // [B, C, F, H, W]
  const int64_t batch = x5.size(0), frames = x5.size(2), height = x5.size(3), width = x5.size(4);
  if (x5.size(1) != c.in_channels || frames % f_patch_size != 0 || height % patch_size != 0 ||
      width % patch_size != 0 || batch == 0)
    throw Error(std::string(kZImageTransformer) + ": latents " + c10::str(latents.sizes()) + " must have " +
                std::to_string(c.in_channels) + " channels and frames divisible by " + std::to_string(f_patch_size) +
                ", height and width by " + std::to_string(patch_size));
  if (caption_features.dim() != 3 || caption_features.size(0) != batch || caption_features.size(2) != c.cap_feat_dim ||
      static_cast<int64_t>(caption_lengths.size()) != batch)
    throw Error(std::string(kZImageTransformer) + ": caption_features must be [" + std::to_string(batch) + ", L, " +
                std::to_string(c.cap_feat_dim) + "] with one length per item, got " +
                c10::str(caption_features.sizes()) + " and " + std::to_string(caption_lengths.size()) + " lengths");
  for (int64_t length : caption_lengths)
    if (length < 1 || length > caption_features.size(1))
      throw Error(std::string(kZImageTransformer) + ": caption length " + std::to_string(length) + " is outside [1, " +
                  std::to_string(caption_features.size(1)) + "]");

  const at::ScalarType dtype = x_pad_token_.scalar_type();
  const at::Device device = x_pad_token_.device();
  // The positions are built on the device, from sizes alone: a call captured into a CUDA graph (--cuda-graphs,
  // nn/cuda_graphs.h) may copy nothing from the host. They are integers, the same values wherever they are made.
  const auto ids_options = at::TensorOptions().dtype(at::kLong).device(device);
  const int64_t dim = c.dim;
  const int64_t f_tokens = frames / f_patch_size, h_tokens = height / patch_size, w_tokens = width / patch_size;

  // Caption lengths, each padded to a multiple of 32 (cap_padding_len = (-len) % SEQ_MULTI_OF).
  std::vector<int64_t> cap_padded(batch);
  for (int64_t i = 0; i < batch; ++i) cap_padded[i] = round_up(caption_lengths[i], kSeqMultipleOf);
  const int64_t cap_max = *std::max_element(cap_padded.begin(), cap_padded.end());
  if (cap_max + f_tokens >= c.axes_lens[0] || h_tokens > c.axes_lens[1] || w_tokens > c.axes_lens[2])
    throw Error(std::string(kZImageTransformer) + ": a caption padded to " + std::to_string(cap_max) + " tokens and " +
                std::to_string(f_tokens) + "x" + std::to_string(h_tokens) + "x" + std::to_string(w_tokens) +
                " patches need RoPE positions up to (" + std::to_string(cap_max + f_tokens) + ", " +
                std::to_string(h_tokens - 1) + ", " + std::to_string(w_tokens - 1) + "), beyond axes_lens [" +
                std::to_string(c.axes_lens[0]) + ", " + std::to_string(c.axes_lens[1]) + ", " +
                std::to_string(c.axes_lens[2]) + "]");

  // t_embedder(t * t_scale): [B, adaln] in the weights' dtype (adaln_input = t.type_as(x)).
  const at::Tensor t = timestep.dim() == 0 ? timestep.expand({batch}) : timestep;
  const at::Tensor adaln = t_embedder_(t.to(device) * c.t_scale).to(dtype);

  // Image tokens, each item padded to a multiple of 32 by repeating its last patch; diffusers
  // embeds all items' rows as one [sum, features] matrix, then overwrites the pad rows.
  at::Tensor patches = nn::patchify_fhw(x5.to(device, dtype), patch_size, f_patch_size);  // [B, Ni, pf p p C]
  const int64_t image_len = patches.size(1), image_padded = round_up(image_len, kSeqMultipleOf);
  if (image_padded > image_len)
    patches = at::cat({patches, patches.narrow(1, image_len - 1, 1).expand({batch, image_padded - image_len, -1})}, 1);
  at::Tensor x = embedder->second(patches.reshape({batch * image_padded, -1})).view({batch, image_padded, dim});
  if (image_padded > image_len)
    x = at::cat({x.narrow(1, 0, image_len), x_pad_token_.expand({batch, image_padded - image_len, dim})}, 1);

  // Image positions: (cap_padded + 1 + f, h, w) for the patches, (0, 0, 0) for the pad tokens.
  at::Tensor grid = at::stack(at::meshgrid({at::arange(f_tokens, ids_options), at::arange(h_tokens, ids_options),
                                            at::arange(w_tokens, ids_options)},
                                           "ij"),
                              -1)
                        .reshape({1, image_len, 3});  // [1, Ni, 3]
  std::vector<at::Tensor> image_ids;
  for (int64_t i = 0; i < batch; ++i) {
    at::Tensor ids = grid.clone();
    ids.select(2, 0).add_(cap_padded[i] + 1);  // + (cap_padded[i] + 1, 0, 0)
    image_ids.push_back(at::constant_pad_nd(ids, {0, 0, 0, image_padded - image_len}));  // [1, Ni_pad, 3]
  }
  const at::Tensor x_freqs =
      rope_(at::cat(image_ids).reshape({-1, 3})).view({batch, image_padded, -1});  // complex64
  const at::Tensor x_mask = at::ones({batch, image_padded}, at::TensorOptions().dtype(at::kBool).device(device));
  // --offload blocks: each block's group on the device while it runs (nn/offload.h).
  const nn::OffloadedForward offloaded(block_offload());
  for (auto& block : noise_refiner_) {
    const nn::BlockOnDevice on_device(block_offload(), *block);
    x = block(x, x_mask, x_freqs, adaln);
  }

  // Caption tokens: item i's features padded to cap_padded[i] rows by repeating its last row,
  // embedded as one matrix, the pad rows overwritten with cap_pad_token; positions (1 + j, 0, 0).
  const at::Tensor caps_in = caption_features.to(device, dtype);
  std::vector<at::Tensor> rows, pad_flags, cap_ids;
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t length = caption_lengths[i], pad = cap_padded[i] - length;
    at::Tensor item = caps_in[i].narrow(0, 0, length);
    if (pad > 0) item = at::cat({item, item.narrow(0, length - 1, 1).expand({pad, -1})});
    rows.push_back(item);
    pad_flags.push_back(at::arange(cap_padded[i], ids_options) >= length);
    at::Tensor ids = at::zeros({cap_padded[i], 3}, ids_options);
    ids.select(1, 0).copy_(at::arange(1, cap_padded[i] + 1, ids_options));
    cap_ids.push_back(ids);
  }
  at::Tensor cap_flat = cap_linear_(cap_norm_(at::cat(rows)));  // [sum cap_padded, dim]
  cap_flat = at::where(at::cat(pad_flags).unsqueeze(1), cap_pad_token_, cap_flat);
  const at::Tensor cap_freqs_flat = rope_(at::cat(cap_ids));  // [sum cap_padded, head_dim/2]
  at::Tensor cap = at::zeros({batch, cap_max, dim}, cap_flat.options());
  at::Tensor cap_freqs = at::zeros({batch, cap_max, cap_freqs_flat.size(1)}, cap_freqs_flat.options());
  at::Tensor cap_mask = at::zeros({batch, cap_max}, at::TensorOptions().dtype(at::kBool).device(device));
  for (int64_t i = 0, at_row = 0; i < batch; at_row += cap_padded[i], ++i) {
    cap[i].narrow(0, 0, cap_padded[i]).copy_(cap_flat.narrow(0, at_row, cap_padded[i]));
    cap_freqs[i].narrow(0, 0, cap_padded[i]).copy_(cap_freqs_flat.narrow(0, at_row, cap_padded[i]));
    cap_mask[i].narrow(0, 0, cap_padded[i]).fill_(true);
  }
  for (auto& block : context_refiner_) {
    const nn::BlockOnDevice on_device(block_offload(), *block);
    cap = block(cap, cap_mask, cap_freqs);
  }

  // Unified sequence, image first: [x (Ni_pad rows), caption (cap_padded[i] rows), zeros].
  // The caption rows past cap_padded[i] went through the refiner; diffusers re-pads with zeros.
  at::Tensor unified = at::cat({x, at::where(cap_mask.unsqueeze(-1), cap, at::zeros({}, cap.options()))}, 1);
  const at::Tensor unified_freqs = at::cat({x_freqs, cap_freqs}, 1);
  const at::Tensor unified_mask = at::cat({x_mask, cap_mask}, 1);
  // The main layers [begin, end) on the rows `selected` of the batch (all when undefined): a step cache runs the
  // layers it does not skip on the images that compute.
  const nn::BlockRange run_layers = [&](int64_t begin, int64_t end, const nn::Streams& in,
                                        const at::Tensor& selected) {
    const bool part = selected.defined() && selected.size(0) != batch;
    const at::Tensor mask = part ? unified_mask.index_select(0, selected) : unified_mask;
    const at::Tensor freqs = part ? unified_freqs.index_select(0, selected) : unified_freqs;
    const at::Tensor t_emb = part ? adaln.index_select(0, selected) : adaln;
    at::Tensor joint = in.image;
    for (int64_t i = begin; i < end; ++i) {
      const nn::BlockOnDevice on_device(block_offload(), *layers_[i]);
      joint = layers_[i](joint, mask, freqs, t_emb);
    }
    return nn::Streams{joint, at::Tensor()};
  };
  const auto num_layers = static_cast<int64_t>(layers_.size());
  if (cache) {
    // Each image's decision reads its rows as far as the longest of them reaches (image tokens, then its own
    // padded caption): what the batch of that image alone holds, as the reference runs it.
    nn::ImageRows images;
    if (image_rows.empty()) {
      for (int64_t i = 0; i < batch; ++i) images.rows.push_back({i});
    } else {
      images.rows = image_rows;
    }
    for (const std::vector<int64_t>& image_of_rows : images.rows) {
      int64_t longest = 0;
      for (int64_t r : image_of_rows) longest = std::max(longest, cap_padded.at(static_cast<size_t>(r)));
      images.tokens.push_back(image_padded + longest);
    }
    unified = cache->run(nn::Streams{unified, at::Tensor()}, num_layers, run_layers, images).image;
  } else {
    unified = run_layers(0, num_layers, nn::Streams{unified, at::Tensor()}, at::Tensor()).image;
  }

  at::Tensor out = final_layers_.at(key)(unified, adaln).narrow(1, 0, image_len);  // [B, Ni, pf p p C]
  out = nn::unpatchify_fhw(out, c.in_channels, frames, height, width, patch_size, f_patch_size);
  return latents.dim() == 4 ? out.squeeze(2) : out;
}

}  // namespace dpinfer::pipeline
