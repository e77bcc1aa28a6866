#include "dpinfer/pipeline/models/transformers/chroma_transformer.h"

#include <optional>
#include <string>

#include <torch/nn/modules/container/modulelist.h>

#include "dpinfer/util/error.h"

namespace dpinfer::pipeline {
namespace {

constexpr const char* kChromaTransformer = "chroma transformer";
constexpr double kChromaEps = 1e-6;  // norm_out's LayerNorm (the blocks keep their own)

void check_chroma_ids(const at::Tensor& ids, int64_t length, const char* name) {
  if (ids.dim() != 2 || ids.size(0) != length || ids.size(1) != 3)
    throw Error(std::string(kChromaTransformer) + ": " + name + " must be [" + std::to_string(length) + ", 3], got " +
                c10::str(ids.sizes()));
}

}  // namespace

// Ref: diffusers/models/transformers/transformer_chroma.py ChromaApproximator
ChromaApproximatorImpl::ChromaApproximatorImpl(int64_t in_dim, int64_t out_dim, int64_t hidden_dim, int64_t n_layers,
                                               const at::TensorOptions& options) {
  in_proj_ = register_module("in_proj", nn::Linear(in_dim, hidden_dim, true, options));
  auto layers = register_module("layers", torch::nn::ModuleList());
  auto norms = register_module("norms", torch::nn::ModuleList());
  for (int64_t i = 0; i < n_layers; ++i) {
    layers_.push_back(nn::PixArtAlphaTextProjection(hidden_dim, hidden_dim, options));
    layers->push_back(layers_.back());
    norms_.push_back(nn::RMSNorm(hidden_dim, std::nullopt, /*elementwise_affine=*/true, options));
    norms->push_back(norms_.back());
  }
  out_proj_ = register_module("out_proj", nn::Linear(hidden_dim, out_dim, true, options));
}

at::Tensor ChromaApproximatorImpl::forward(const at::Tensor& x) {
  at::Tensor h = in_proj_(x);
  for (size_t i = 0; i < layers_.size(); ++i) h = h + layers_[i](norms_[i](h));
  return out_proj_(h);
}

// Ref: transformer_chroma.py ChromaTransformer2DModel.__init__ (ChromaTransformerBlock and
// ChromaSingleTransformerBlock are Flux's blocks with Modulation::kGiven)
ChromaTransformer2DModelImpl::ChromaTransformer2DModelImpl(const ChromaTransformerConfig& config,
                                                           const at::TensorOptions& options)
    : config_(config) {
  const ChromaTransformerConfig& c = config_;
  const int64_t dim = c.inner_dim();
  using Modulation = FluxTransformerBlockImpl::Modulation;
  distilled_guidance_layer_ = register_module(
      "distilled_guidance_layer", ChromaApproximator(c.approximator_num_channels, dim, c.approximator_hidden_dim,
                                                     c.approximator_layers, options));
  context_embedder_ = register_module("context_embedder", nn::Linear(c.joint_attention_dim, dim, true, options));
  x_embedder_ = register_module("x_embedder", nn::Linear(c.in_channels, dim, true, options));
  auto blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) {
    blocks_.push_back(
        FluxTransformerBlock(dim, c.num_attention_heads, c.attention_head_dim, options, Modulation::kGiven));
    blocks->push_back(blocks_.back());
  }
  auto single_blocks = register_module("single_transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_single_layers; ++i) {
    single_blocks_.push_back(
        FluxSingleTransformerBlock(dim, c.num_attention_heads, c.attention_head_dim, options, Modulation::kGiven));
    single_blocks->push_back(single_blocks_.back());
  }
  proj_out_ = register_module("proj_out", nn::Linear(dim, c.out_features(), true, options));
}

// Ref: transformer_chroma.py ChromaCombinedTimestepTextProjEmbeddings (__init__ and forward)
at::Tensor ChromaTransformer2DModelImpl::approximator_input(const at::Tensor& t, at::ScalarType dtype) const {
  const int64_t channels = config_.approximator_num_channels / 4;  // its num_channels
  const int64_t length = config_.mod_index_length(), batch = t.size(0);
  const at::Device device = t.device();
  // time_proj(timestep).to(timestep.dtype): Timesteps(num_channels, flip_sin_to_cos, shift 0).
  const at::Tensor time = nn::timestep_embedding(t, channels, true, 0.0).to(dtype);  // [B, channels]
  if (!mod_table_.defined() || mod_table_.device() != device || mod_table_.scalar_type() != dtype) {
    // guidance_proj(tensor([0] * B)): computed on the CPU (a fresh int64 tensor there), then moved. Every row is
    // the embedding of 0, so one row expanded to B is the same values.
    guidance_row_ = nn::timestep_embedding(at::zeros({1}, at::kLong), channels, true, 0.0).to(device, dtype);
    // mod_proj: get_timestep_embedding(arange(mod_index_length) * 1000, 2 * num_channels, flip, shift 0), a
    // buffer computed once on the CPU in float32 at construction; here the same on the CPU, once per device.
    mod_table_ =
        nn::timestep_embedding(at::arange(length, at::kLong) * 1000, 2 * channels, true, 0.0).to(device, dtype);
  }
  const at::Tensor guidance = guidance_row_.expand({batch, -1});  // [B, channels]
  const at::Tensor time_guidance = at::cat({time, guidance}, 1).unsqueeze(1).repeat({1, length, 1});
  return at::cat({time_guidance, mod_table_.unsqueeze(0).repeat({batch, 1, 1})}, -1);  // [B, L, 4 channels]
}

// Ref: transformer_chroma.py ChromaTransformer2DModel.forward, ChromaTransformerBlock.forward and
// ChromaSingleTransformerBlock.forward (the mask), ChromaAdaLayerNormContinuousPruned (norm_out)
at::Tensor ChromaTransformer2DModelImpl::forward(const at::Tensor& hidden_states,
                                                 const at::Tensor& encoder_hidden_states, const at::Tensor& timestep,
                                                 const at::Tensor& img_ids, const at::Tensor& txt_ids,
                                                 const at::Tensor& attention_mask, nn::BlockCache* double_cache,
                                                 nn::BlockCache* single_cache) {
  const ChromaTransformerConfig& c = config_;
  const std::string what(kChromaTransformer);
  if (hidden_states.dim() != 3 || hidden_states.size(0) < 1 || hidden_states.size(2) != c.in_channels)
    throw Error(what + ": hidden_states must be [B, L_img, " + std::to_string(c.in_channels) + "], got " +
                c10::str(hidden_states.sizes()));
  const int64_t batch = hidden_states.size(0), image_len = hidden_states.size(1);
  if (encoder_hidden_states.dim() != 3 || encoder_hidden_states.size(0) != batch ||
      encoder_hidden_states.size(2) != c.joint_attention_dim)
    throw Error(what + ": encoder_hidden_states must be [" + std::to_string(batch) + ", L_txt, " +
                std::to_string(c.joint_attention_dim) + "], got " + c10::str(encoder_hidden_states.sizes()));
  const int64_t text_len = encoder_hidden_states.size(1);
  if (!(timestep.dim() == 0 || (timestep.dim() == 1 && timestep.size(0) == batch)))
    throw Error(what + ": timestep must be [" + std::to_string(batch) + "] or a scalar, got " +
                c10::str(timestep.sizes()));
  check_chroma_ids(img_ids, image_len, "img_ids");
  check_chroma_ids(txt_ids, text_len, "txt_ids");
  if (attention_mask.defined() && attention_mask.sizes() != at::IntArrayRef({batch, text_len + image_len}))
    throw Error(what + ": attention_mask must be [" + std::to_string(batch) + ", " +
                std::to_string(text_len + image_len) + "] (text then image tokens), got " +
                c10::str(attention_mask.sizes()));

  const at::ScalarType dtype = x_embedder_->compute_dtype();
  const at::Device device = x_embedder_->weight.device();
  at::Tensor image = x_embedder_(hidden_states.to(device, dtype));  // [B, L_img, dim]
  // timestep.to(hidden_states.dtype) * 1000, then the approximator: [B, mod_index_length, dim].
  const at::Tensor t = (timestep.dim() == 0 ? timestep.expand({batch}) : timestep).to(device, dtype) * 1000;
  const at::Tensor mod = distilled_guidance_layer_(approximator_input(t, dtype));
  at::Tensor text = context_embedder_(encoder_hidden_states.to(device, dtype));  // [B, L_txt, dim]

  const at::Tensor ids = at::cat({txt_ids.to(device), img_ids.to(device)}, 0);
  const nn::RotaryCosSin freqs = nn::rotary_cos_sin(ids, kRopeTheta, c.axes_dims_rope);

  // attention_mask[:, None, None, :] * attention_mask[:, None, :, None], as each block computes it.
  at::Tensor attn_mask;
  if (attention_mask.defined()) {
    const at::Tensor m =
        attention_mask.scalar_type() == at::kBool ? attention_mask.to(device) : attention_mask.to(device, dtype);
    attn_mask = m.unsqueeze(1).unsqueeze(1) * m.unsqueeze(1).unsqueeze(3);  // [B, 1, L, L]
  }

  // The modulation slots: [0, 3 S) the single blocks', then 6 per double block for the image stream,
  // then 6 per double block for the text stream, then norm_out's 2.
  const int64_t img_offset = 3 * c.num_single_layers, txt_offset = img_offset + 6 * c.num_layers;
  // --offload blocks: each block's group on the device while it runs (nn/offload.h).
  const nn::OffloadedForward offloaded(block_offload());
  // The modulations and the mask of the rows `rows` of the batch (all when undefined), for a block range.
  auto rows_of = [&](const at::Tensor& tensor, const at::Tensor& rows) {
    return rows.defined() && rows.size(0) != batch && tensor.defined() ? tensor.index_select(0, rows) : tensor;
  };
  // The double-stream blocks [begin, end), then the single-stream ones, on the joint [text, image] sequence.
  const nn::BlockRange run_double = [&](int64_t begin, int64_t end, const nn::Streams& in, const at::Tensor& rows) {
    const at::Tensor mod_rows = rows_of(mod, rows), mask_rows = rows_of(attn_mask, rows);
    nn::Streams s = in;
    for (int64_t i = begin; i < end; ++i) {
      const nn::BlockOnDevice on_device(block_offload(), *blocks_[i]);
      const at::Tensor block_mod = at::cat(
          {mod_rows.narrow(1, img_offset + 6 * i, 6), mod_rows.narrow(1, txt_offset + 6 * i, 6)}, 1);  // [B, 12, dim]
      FluxTransformerBlockImpl::Output o = blocks_[i]->forward_modulated(s.image, s.text, block_mod, freqs, mask_rows);
      s = {std::move(o.image), std::move(o.text)};
    }
    return s;
  };
  const nn::BlockRange run_single = [&](int64_t begin, int64_t end, const nn::Streams& in, const at::Tensor& rows) {
    const at::Tensor mod_rows = rows_of(mod, rows), mask_rows = rows_of(attn_mask, rows);
    at::Tensor joint = in.image;
    for (int64_t i = begin; i < end; ++i) {
      const nn::BlockOnDevice on_device(block_offload(), *single_blocks_[i]);
      joint = single_blocks_[i]->forward_modulated(joint, mod_rows.narrow(1, 3 * i, 3), freqs, mask_rows);
    }
    return nn::Streams{joint, at::Tensor()};
  };
  const nn::Streams streams = double_cache ? double_cache->run({image, text}, c.num_layers, run_double)
                                           : run_double(0, c.num_layers, {image, text}, {});
  const nn::Streams joint_in{at::cat({streams.text, streams.image}, 1), at::Tensor()};
  const nn::Streams joint = single_cache ? single_cache->run(joint_in, c.num_single_layers, run_single)
                                         : run_single(0, c.num_single_layers, joint_in, {});
  image = joint.image.narrow(1, text_len, image_len);

  // norm_out (ChromaAdaLayerNormContinuousPruned): shift, scale = chunk(temb.flatten(1, 2).to(x.dtype), 2)
  // of temb = mod[:, -2:] -- shift first; LayerNorm eps 1e-6 without affine.
  const at::Tensor out_mod = mod.narrow(1, mod.size(1) - 2, 2);
  image = at::layer_norm(image, {c.inner_dim()}, {}, {}, kChromaEps) * (1 + out_mod.select(1, 1)).unsqueeze(1) +
          out_mod.select(1, 0).unsqueeze(1);
  return proj_out_(image);  // [B, L_img, p p out_channels]
}

}  // namespace dpinfer::pipeline
