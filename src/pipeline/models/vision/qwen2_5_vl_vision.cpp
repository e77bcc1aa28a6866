#include "dpinfer/pipeline/models/vision/qwen2_5_vl_vision.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dpinfer/pipeline/loading/component_loading.h"
#include "dpinfer/pipeline/nn/rope.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

// Ref: modeling_qwen2_5_vl.py apply_rotary_pos_emb_vision: in float32 whatever x's dtype, then back.
// x [L, H, D]; cos, sin [L, D] float32.
at::Tensor qwen_vision_apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor c = cos.unsqueeze(-2), s = sin.unsqueeze(-2);  // [L, 1, D]
  return ((xf * c) + (nn::rotate_half(xf) * s)).to(x.scalar_type());
}

std::string qwen_vision_shape_text(at::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string qwen_vision_grid_text(const GridThw& g) {
  return "{" + std::to_string(g[0]) + ", " + std::to_string(g[1]) + ", " + std::to_string(g[2]) + "}";
}

}  // namespace

// Ref: transformers/models/qwen2_5_vl/modeling_qwen2_5_vl.py (4.57.6) Qwen2_5_VisionPatchEmbed
Qwen2_5_VisionPatchEmbedImpl::Qwen2_5_VisionPatchEmbedImpl(const Qwen2_5_VLVisionConfig& config,
                                                           const at::TensorOptions& options)
    : in_channels_(config.in_channels),
      temporal_patch_size_(config.temporal_patch_size),
      patch_size_(config.patch_size),
      hidden_size_(config.hidden_size) {
  auto proj = register_module("proj", std::make_shared<torch::nn::Module>());  // nn.Conv3d(bias=False)
  weight = proj->register_parameter(
      "weight", at::empty({hidden_size_, in_channels_, temporal_patch_size_, patch_size_, patch_size_}, options),
      /*requires_grad=*/false);
}

at::Tensor Qwen2_5_VisionPatchEmbedImpl::forward(const at::Tensor& pixel_values) const {
  // view(-1, C, T, P, P), cast to the weight's dtype, a Conv3d whose stride is its kernel: [N, hidden, 1, 1, 1].
  const at::Tensor x =
      pixel_values.view({-1, in_channels_, temporal_patch_size_, patch_size_, patch_size_}).to(weight.scalar_type());
  const std::vector<int64_t> kernel{temporal_patch_size_, patch_size_, patch_size_};
  return at::conv3d(x, weight, /*bias=*/at::Tensor(), kernel).view({-1, hidden_size_});
}

// Ref: modeling_qwen2_5_vl.py Qwen2_5_VLVisionAttention
Qwen2_5_VLVisionAttentionImpl::Qwen2_5_VLVisionAttentionImpl(const Qwen2_5_VLVisionConfig& config,
                                                             const at::TensorOptions& options)
    : num_heads_(config.num_heads), head_dim_(config.head_dim()) {
  qkv_ = register_module("qkv", nn::Linear(config.hidden_size, 3 * config.hidden_size, true, options));
  proj_ = register_module("proj", nn::Linear(config.hidden_size, config.hidden_size, true, options));
}

at::Tensor Qwen2_5_VLVisionAttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                                  const std::vector<int64_t>& cu_seqlens) const {
  const int64_t length = x.size(0);
  // qkv(x).reshape(L, 3, H, D).permute(1, 0, 2, 3).unbind(0): three [L, H, D] views of one tensor.
  const std::vector<at::Tensor> qkv =
      qkv_->forward(x).reshape({length, 3, num_heads_, -1}).permute({1, 0, 2, 3}).unbind(0);
  // Then [1, H, L, D] views, cut into the chunks along L; SDPA on each chunk (sdpa_attention_forward with
  // no mask: not causal, enable_gqa since the module has num_key_value_groups), outputs [1, l, H, D].
  const at::Tensor q = qwen_vision_apply_rotary(qkv[0], cos, sin).transpose(0, 1).unsqueeze(0);
  const at::Tensor k = qwen_vision_apply_rotary(qkv[1], cos, sin).transpose(0, 1).unsqueeze(0);
  const at::Tensor v = qkv[2].transpose(0, 1).unsqueeze(0);
  const double scale = std::pow(static_cast<double>(head_dim_), -0.5);  // Python's head_dim**-0.5
  std::vector<at::Tensor> outputs;
  outputs.reserve(cu_seqlens.size());
  for (size_t i = 1; i < cu_seqlens.size(); ++i) {
    const int64_t begin = cu_seqlens[i - 1], end = cu_seqlens[i];
    const at::Tensor out = at::scaled_dot_product_attention(q.slice(2, begin, end), k.slice(2, begin, end),
                                                            v.slice(2, begin, end), /*attn_mask=*/{},
                                                            /*dropout_p=*/0.0, /*is_causal=*/false, scale,
                                                            /*enable_gqa=*/true);
    outputs.push_back(out.transpose(1, 2).contiguous());
  }
  return proj_->forward(at::cat(outputs, 1).reshape({length, -1}).contiguous());
}

// Ref: modeling_qwen2_5_vl.py Qwen2_5_VLMLP(config, bias=True); transformers/activations.py ACT2FN
Qwen2_5_VLVisionMLPImpl::Qwen2_5_VLVisionMLPImpl(const Qwen2_5_VLVisionConfig& config,
                                                 const at::TensorOptions& options)
    : act_(config.hidden_act) {
  gate_proj_ = register_module("gate_proj", nn::Linear(config.hidden_size, config.intermediate_size, true, options));
  up_proj_ = register_module("up_proj", nn::Linear(config.hidden_size, config.intermediate_size, true, options));
  down_proj_ = register_module("down_proj", nn::Linear(config.intermediate_size, config.hidden_size, true, options));
}

at::Tensor Qwen2_5_VLVisionMLPImpl::forward(const at::Tensor& x) const {
  const at::Tensor gate = gate_proj_->forward(x);
  // silu: nn.SiLU; gelu: GELUActivation (erf); gelu_pytorch_tanh: GELUTanh, F.gelu(approximate="tanh").
  const at::Tensor activated =
      act_ == "silu" ? at::silu(gate) : at::gelu(gate, act_ == "gelu_pytorch_tanh" ? "tanh" : "none");
  return down_proj_->forward(activated * up_proj_->forward(x));
}

// Ref: modeling_qwen2_5_vl.py Qwen2_5_VLVisionBlock (Qwen2RMSNorm(hidden_size, eps=1e-6) twice)
Qwen2_5_VLVisionBlockImpl::Qwen2_5_VLVisionBlockImpl(const Qwen2_5_VLVisionConfig& config,
                                                     const at::TensorOptions& options) {
  norm1_ = register_module("norm1", nn::LlamaRMSNorm(config.hidden_size, 1e-6, options));
  norm2_ = register_module("norm2", nn::LlamaRMSNorm(config.hidden_size, 1e-6, options));
  attn_ = register_module("attn", Qwen2_5_VLVisionAttention(config, options));
  mlp_ = register_module("mlp", Qwen2_5_VLVisionMLP(config, options));
}

at::Tensor Qwen2_5_VLVisionBlockImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                              const std::vector<int64_t>& cu_seqlens) const {
  const at::Tensor h = x + attn_->forward(norm1_->forward(x), cos, sin, cu_seqlens);
  return h + mlp_->forward(norm2_->forward(h));
}

// Ref: modeling_qwen2_5_vl.py Qwen2_5_VLPatchMerger: mlp = Sequential(Linear, GELU(), Linear)
Qwen2_5_VLPatchMergerImpl::Qwen2_5_VLPatchMergerImpl(const Qwen2_5_VLVisionConfig& config,
                                                     const at::TensorOptions& options)
    : merged_width_(config.hidden_size * config.spatial_merge_unit()) {
  ln_q_ = register_module("ln_q", nn::LlamaRMSNorm(config.hidden_size, 1e-6, options));
  auto mlp = register_module("mlp", std::make_shared<torch::nn::Module>());  // mlp.1 is the GELU
  mlp_0_ = mlp->register_module("0", nn::Linear(merged_width_, merged_width_, true, options));
  mlp_2_ = mlp->register_module("2", nn::Linear(merged_width_, config.out_hidden_size, true, options));
}

at::Tensor Qwen2_5_VLPatchMergerImpl::forward(const at::Tensor& x) const {
  return mlp_2_->forward(at::gelu(mlp_0_->forward(ln_q_->forward(x).view({-1, merged_width_}))));
}

// Ref: modeling_qwen2_5_vl.py Qwen2_5_VisionTransformerPretrainedModel.__init__; Qwen2_5_VisionRotaryEmbedding
Qwen2_5_VisionTransformerImpl::Qwen2_5_VisionTransformerImpl(const Qwen2_5_VLVisionConfig& config,
                                                             const at::TensorOptions& options)
    : config_(config) {
  patch_embed_ = register_module("patch_embed", Qwen2_5_VisionPatchEmbed(config, options));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.depth; ++i) {
    block_list_.push_back(Qwen2_5_VLVisionBlock(config, options));
    blocks_->push_back(block_list_.back());
  }
  merger_ = register_module("merger", Qwen2_5_VLPatchMerger(config, options));
  // inv_freq = 1.0 / (10000.0 ** (arange(0, dim, 2, float) / dim)) with dim = head_dim // 2, a float32
  // buffer in every model dtype (registered with an explicit dtype). Python's 1.0 / t is t.reciprocal() * 1.0.
  // Computed on the CPU, as transformers computes it when it builds the model, then moved.
  const int64_t dim = config.head_dim() / 2;
  inv_freq_ = at::pow(10000.0, at::arange(0, dim, 2, at::TensorOptions().dtype(at::kFloat)) / dim)
                  .reciprocal()
                  .to(options.device());
}

// Ref: Qwen2_5_VisionTransformerPretrainedModel.rot_pos_emb. Patch i of an image sits at row
// hb * m + mh, column wb * m + mw for the processor's (hb, wb, mh, mw) order, every frame alike.
at::Tensor Qwen2_5_VisionTransformerImpl::rotary_angles(const std::vector<GridThw>& grid_thw) const {
  const int64_t m = config_.spatial_merge_size;
  std::vector<int64_t> positions;  // (row, column) pairs
  int64_t max_grid = 0;
  for (const GridThw& g : grid_thw) {
    const int64_t t = g[0], h = g[1], w = g[2];
    max_grid = std::max({max_grid, h, w});
    for (int64_t frame = 0; frame < t; ++frame)
      for (int64_t hb = 0; hb < h / m; ++hb)
        for (int64_t wb = 0; wb < w / m; ++wb)
          for (int64_t mh = 0; mh < m; ++mh)
            for (int64_t mw = 0; mw < m; ++mw) {
              positions.push_back(hb * m + mh);
              positions.push_back(wb * m + mw);
            }
  }
  const auto count = static_cast<int64_t>(positions.size() / 2);
  const at::Tensor ids = at::tensor(positions, at::TensorOptions().dtype(at::kLong)).view({count, 2});
  // rotary_pos_emb(max_grid): outer(arange(max_grid), inv_freq), float32; then table[pos_ids].flatten(1).
  const at::Tensor table = at::outer(at::arange(max_grid, inv_freq_.options()), inv_freq_);  // [max_grid, D/4]
  return table.index({ids.to(inv_freq_.device())}).flatten(1);                              // [N, D/2]
}

// Ref: Qwen2_5_VisionTransformerPretrainedModel.get_window_index. Windows of merged_window x merged_window
// merged tokens over each frame's merged grid padded up to whole windows (a grid that is a multiple of the
// window gets a row of empty windows all the same); a window's seqlen counts its real tokens.
std::pair<std::vector<int64_t>, std::vector<int64_t>> Qwen2_5_VisionTransformerImpl::window_index(
    const std::vector<GridThw>& grid_thw) const {
  const int64_t m = config_.spatial_merge_size, window = config_.merged_window(), unit = config_.spatial_merge_unit();
  std::vector<int64_t> index, cu{0};
  int64_t offset = 0;
  for (const GridThw& g : grid_thw) {
    const int64_t t = g[0], lh = g[1] / m, lw = g[2] / m;
    const int64_t windows_h = (lh + window - lh % window) / window, windows_w = (lw + window - lw % window) / window;
    for (int64_t frame = 0; frame < t; ++frame)
      for (int64_t wh = 0; wh < windows_h; ++wh)
        for (int64_t ww = 0; ww < windows_w; ++ww) {
          int64_t count = 0;
          for (int64_t r = wh * window; r < std::min(lh, (wh + 1) * window); ++r)
            for (int64_t c = ww * window; c < std::min(lw, (ww + 1) * window); ++c) {
              index.push_back(offset + frame * lh * lw + r * lw + c);
              ++count;
            }
          // torch.unique_consecutive drops the repeated bound of an empty window.
          if (count > 0) cu.push_back(cu.back() + count * unit);
        }
    offset += t * lh * lw;
  }
  return {std::move(index), std::move(cu)};
}

// Ref: Qwen2_5_VisionTransformerPretrainedModel.forward
at::Tensor Qwen2_5_VisionTransformerImpl::forward(const at::Tensor& pixel_values,
                                                  const std::vector<GridThw>& grid_thw) const {
  const int64_t m = config_.spatial_merge_size, unit = config_.spatial_merge_unit();
  if (grid_thw.empty()) throw InputError("qwen2.5-vl vision: no images (grid_thw is empty)");
  if (pixel_values.dim() != 2 || pixel_values.size(1) != config_.patch_features())
    throw InputError("qwen2.5-vl vision: pixel_values must be [N, " + std::to_string(config_.patch_features()) +
                     "] (in_channels * temporal_patch_size * patch_size^2), got " +
                     qwen_vision_shape_text(pixel_values.sizes()));
  const int64_t rows = pixel_values.size(0);
  int64_t patches = 0;
  for (const GridThw& g : grid_thw) {
    if (g[0] < 1 || g[1] < 1 || g[2] < 1 || g[1] % m != 0 || g[2] % m != 0)
      throw InputError("qwen2.5-vl vision: grid_thw " + qwen_vision_grid_text(g) +
                       " must be positive with h and w multiples of spatial_merge_size " + std::to_string(m));
    // Each factor, then each product, no more than the rows: no overflow on the way to the count below.
    const bool fits = g[0] <= rows && g[1] <= rows && g[2] <= rows && g[1] * g[2] <= rows && g[0] * g[1] * g[2] <= rows;
    patches += fits ? g[0] * g[1] * g[2] : rows + 1;
  }
  if (patches != rows)
    throw InputError("qwen2.5-vl vision: grid_thw covers " + (patches > rows ? "more" : std::to_string(patches)) +
                     " patches but pixel_values has " + std::to_string(rows) + " rows");

  at::Tensor hidden = patch_embed_->forward(pixel_values);  // [N, hidden]
  const at::Tensor angles = rotary_angles(grid_thw);        // [N, D/2] float32
  const auto [order, cu_window] = window_index(grid_thw);
  const at::Tensor windows = at::tensor(order, at::TensorOptions().dtype(at::kLong)).to(hidden.device());
  // The blocks run window after window: groups of spatial_merge_unit rows (one merged token) reordered.
  const int64_t n = hidden.size(0);
  hidden = hidden.reshape({n / unit, unit, -1}).index({windows}).reshape({n, -1});
  const at::Tensor rotary = angles.reshape({n / unit, unit, -1}).index({windows}).reshape({n, -1});
  const at::Tensor emb = at::cat({rotary, rotary}, -1);  // [N, D]
  const at::Tensor cos = emb.cos(), sin = emb.sin();

  // Full attention: one chunk per frame (repeat_interleave(h * w, t).cumsum, 0 first).
  std::vector<int64_t> cu_frames{0};
  for (const GridThw& g : grid_thw)
    for (int64_t frame = 0; frame < g[0]; ++frame) cu_frames.push_back(cu_frames.back() + g[1] * g[2]);
  const std::vector<int64_t>& full = config_.fullatt_block_indexes;
  for (size_t i = 0; i < block_list_.size(); ++i) {
    const bool full_attention = std::find(full.begin(), full.end(), static_cast<int64_t>(i)) != full.end();
    hidden = block_list_[i]->forward(hidden, cos, sin, full_attention ? cu_frames : cu_window);
  }
  hidden = merger_->forward(hidden);  // [N / unit, out], in window order
  // hidden[argsort(window_index)]: back to the processor's order.
  return hidden.index({at::argsort(windows)});
}

Qwen2_5_VLVisionModelImpl::Qwen2_5_VLVisionModelImpl(const Qwen2_5_VLVisionConfig& config,
                                                     const at::TensorOptions& options)
    : visual_(register_module("visual", std::make_shared<Qwen2_5_VisionTransformerImpl>(config, options))) {}

std::shared_ptr<torch::nn::Module> build_qwen2_5_vl_vision(const nlohmann::json& text_encoder_config,
                                                           const at::TensorOptions& options) {
  if (!text_encoder_config.is_object() || !text_encoder_config.contains("vision_config") ||
      !text_encoder_config["vision_config"].is_object())
    throw Error("config.json has no vision_config object; it is not a Qwen2.5-VL model with a vision tower");
  return std::make_shared<Qwen2_5_VLVisionModelImpl>(
      Qwen2_5_VLVisionConfig::from_json(text_encoder_config["vision_config"]), options);
}

// The text model's keys in a Qwen2_5_VLForConditionalGeneration file: transformers 4.57 saves "model.*" and
// "lm_head.weight" (its _checkpoint_conversion_mapping in reverse); later layouts nest the text model under
// "model.language_model.*" and the tower under "model.visual.*".
const KeyRenames& qwen2_5_vl_vision_renames() {
  static const KeyRenames renames = [] {
    KeyRenames r;
    r.ignored_prefixes = {"lm_head", "model.embed_tokens", "model.layers", "model.norm", "model.language_model"};
    r.prefixes = {{"model.visual", "visual"}};
    return r;
  }();
  return renames;
}

std::shared_ptr<Qwen2_5_VisionTransformerImpl> load_qwen2_5_vl_vision(const Component& text_encoder,
                                                                      const at::TensorOptions& options) {
  Component c = text_encoder;
  if (!c.single_file.empty())
    throw InputError("component '" + c.name + "': the Qwen2.5-VL vision tower is read from a model folder, not from "
                     "the single-file checkpoint " + quote(c.single_file));
  c.class_name = kQwen2_5_VLVisionClass;
  auto model = load_component_as<Qwen2_5_VLVisionModelImpl>(c, options);
  if (!model) throw Error("component '" + c.name + "': the vision tower did not build");
  return model->tower();
}

}  // namespace dpinfer::pipeline
