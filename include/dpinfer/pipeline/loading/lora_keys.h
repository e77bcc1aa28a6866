#pragma once
// Which weight of a model each layer of a LoRA file changes: the key conversion, without
// LibTorch (tests/fuzz/fuzz_lora_keys.cpp fuzzes it). It reads key names and shapes only.
//
// Formats (the names diffusers 0.36 accepts, loaders/lora_pipeline.py lora_state_dict):
//  - kohya / A1111 (sd-scripts, and LyCORIS LoCon, which adds convolutions in the same keys):
//    "<prefix><module with '_' for '.'>.lora_down.weight", ".lora_up.weight", ".alpha", where the
//    prefix is lora_unet_, lora_te_ or lora_te1_ (text_encoder), lora_te2_ (text_encoder_2).
//    The module is found by its underscored name among the model's own (A1111's and
//    ComfyUI's way, equivalent to diffusers' _convert_unet_lora_key / _convert_text_encoder_lora_key
//    string rewrites for every key those accept). UNet modules may use the original (SGM/LDM)
//    block names, input_blocks_<i>_<j>_, middle_block_<i>_, output_blocks_<i>_<j>_, with the
//    ResBlock names in_layers_2, out_layers_3, emb_layers_1, skip_connection and op: mapped
//    as diffusers' _maybe_map_sgm_blocks_to_diffusers does (lora_conversion_utils.py).
//  - diffusers / PEFT: "<component>.<module>.lora_A.weight" / ".lora_B.weight" (also the
//    older ".lora.down.weight" / ".lora.up.weight"), component unet, text_encoder,
//    text_encoder_2 or transformer; an optional "<component>.<module>.alpha". Every family.
//  - kohya / A1111 / LoCon (above): the UNet families only (LoraKeyRules::kohya_unet).
//  - FLUX.1's (and Chroma's) kohya / sd-scripts files in Black Forest Labs' block names
//    (LoraKeyRules::kohya_flux, lora_flux_keys.h): lora_unet_double_blocks_<i>_img_attn_qkv,
//    lora_unet_single_blocks_<i>_linear1, ..., also ComfyUI's "diffusion_model.<BFL name>.lora_down.weight",
//    and CLIP layers as lora_te_ / "text_encoders.clip_l.transformer.". A fused BFL projection
//    (qkv, linear1) becomes one LoraLayer per diffusers module, each naming its rows of the up
//    factor (LoraLayer::up_rows), as diffusers 0.36's _convert_kohya_flux_lora_to_diffusers splits it.
//  - FLUX.1's (and Chroma's) files in diffusers' module names with underscores and kohya's factors
//    (lora_transformer_..., lora_te1_... .lora_down.weight / .lora_up.weight / .alpha), alpha / rank in
//    the factors, as _convert_mixture_state_dict_to_diffusers reads them (lora_flux_mixture_keys.h).
//  - XLabs' FLUX.1 files ([diffusion_model.]double_blocks.<i>.processor.qkv_lora1.down.weight, ...), no
//    alphas, as _convert_xlabs_flux_lora_to_diffusers reads them (lora_flux_xlabs_keys.h).
//  - FLUX.2's files in BFL's block names (ai-toolkit, ComfyUI: "diffusion_model."; PEFT: "base_model.model."), as
//    diffusers 0.37's _convert_non_diffusers_flux2_lora_to_diffusers reads them (lora_flux2_keys.h).
//  - Qwen-Image's and Z-Image's non-diffusers transformer files (LoraKeyRules::non_diffusers_transformer),
//    renamed as diffusers 0.36's _convert_non_diffusers_qwen_lora_to_diffusers and
//    _convert_non_diffusers_z_image_lora_to_diffusers rename them (lora_conversion_utils.py).
// Not read (refused by name): the formats a family's LoraKeyRules::refused names (FLUX.1's BFL block
// names or its underscored diffusers names with lora_A/lora_B factors, which diffusers 0.36 loads nothing
// from, SD3's original names), LoHa (hada_), LoKr (lokr_), and the Tucker "lora_mid" of LoCon's CP decomposition.
// DoRA: a diffusers / PEFT layer's "<component>.<module>.lora_magnitude_vector" (LoraLayer::magnitude_key) is read
// (diffusers 0.36's get_peft_kwargs sets use_dora for it); kohya's "dora_scale" tensors are dropped, with a line
// for a warning, as every diffusers 0.36 lora_state_dict drops them before converting the file.

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <string>
#include <vector>

namespace dpinfer::pipeline {

/// What a LoRA may change: component ("unet") -> module ("down_blocks.0.attentions.0.proj_in")
/// -> the shape of its weight ([out, in] for a Linear, [out, in, kh, kw] for a Conv2d).
using LoraModuleTable = std::map<std::string, std::map<std::string, std::vector<int64_t>>>;

/// One tensor of a LoRA file, as its header gives it.
struct LoraTensorKey {
  std::string key;
  std::vector<int64_t> shape;
};

/// Rows [begin, end) of a factor.
struct LoraRows {
  int64_t begin = 0, end = 0;
};

/// One layer of a LoRA: the weight it changes and the file keys of its factors.
struct LoraLayer {
  std::string component;  ///< "unet", "text_encoder", "text_encoder_2"
  std::string module;     ///< the module's name in the component; its weight is "<module>.weight"
  std::string down_key;   ///< A (PEFT) / lora_down (kohya): [r, in] or [r, in, kh, kw]
  std::string up_key;     ///< B / lora_up: [out, r] or [out, r, 1, 1]
  std::optional<std::string> alpha_key;  ///< a 0-d or 1-element tensor; none: alpha = rank
  int64_t rank = 0;
  /// alpha / rank goes into the factors when they are read (down * s_down, up * s_up, the split
  /// of diffusers' get_alpha_scales), and the merge then scales by the LoRA's scale alone: Qwen-Image's
  /// and Z-Image's lora_down/lora_up files, as diffusers converts them.
  bool alpha_in_factors = false;
  /// The layer's alpha counts for diffusers' most common alpha but never reaches the layer itself, which
  /// takes that most common one (PEFT's lora_alpha): a kohya UNet-family layer whose converted name keeps
  /// no ".lora." (diffusers 0.36 _convert_unet_lora_key / _convert_text_encoder_lora_key: an attention's
  /// to_q/to_k/to_v/to_out.0 becomes "<...>.processor.to_q_lora.down.weight", a CLIP q/k/v/out_proj
  /// "<...>.self_attn.to_q_lora.down.weight"), so that _get_alpha_name and get_peft_kwargs file its alpha
  /// under an alpha_pattern key that names no Linear ("<...>.processor.to_q_lora.down.weight", "<...>.self_attn").
  bool alpha_reaches_no_module = false;
  /// A part of a fused layer of the file (FLUX.1's BFL qkv, linear1): this module's rows of the up
  /// factor, which the other parts share ([3 * 3072, r] split into to_q/to_k/to_v). The down factor is
  /// the whole one, copied to each part; when the up factor is block-diagonal (sd-scripts' split_qkv:
  /// part p's rows use only columns [p * r / parts, (p + 1) * r / parts)), the merge reads that block
  /// and those rows of the down factor instead, as diffusers' _convert_to_ai_toolkit_cat does. Its
  /// alpha / rank is then computed in the alpha tensor's dtype (that function divides the tensor).
  std::optional<LoraRows> up_rows = std::nullopt;
  int part = 0, parts = 1;  ///< which part of the fused layer this is, of how many
  /// > 0: the down factor [r, in'] is narrower than the weight's input and is read zero-padded on the right to
  /// [r, this], as FluxLoraLoaderMixin's _maybe_expand_lora_state_dict pads a narrower lora_A (XLabs' single-block
  /// proj_lora [r, dim] on proj_out [dim, dim + mlp]).
  int64_t down_padded_to = 0;
  /// For a part of a fused layer: whether a block-diagonal up factor is read by its blocks (sd-scripts'
  /// files, _convert_to_ai_toolkit_cat's is_sparse test). XLabs' handle_qkv has no such test: it always
  /// copies the whole down factor to each part.
  bool split_block_diagonal = true;
  /// With alpha_in_factors: the converter divides the alpha tensor itself by the rank, so alpha / rank is
  /// rounded to the alpha's dtype (a bf16 alpha gives a bf16 scale), where other converters divide a
  /// Python float (.item()): _convert_to_ai_toolkit_cat's fused layers, and every layer of
  /// _convert_mixture_state_dict_to_diffusers (diffusers' underscored FLUX.1 names).
  bool alpha_divided_in_its_dtype = false;
  /// DoRA (PEFT's lora_magnitude_vector, peft 0.17 tuners/lora/dora.py): the layer's magnitude m, [out] for a
  /// Linear and [1, out, 1, 1] for a Conv2d; the merge then makes W' = m / ||W + dW|| * (W + dW), the norm per
  /// output row.
  std::optional<std::string> magnitude_key = std::nullopt;
};

/// How a family's LoRA files may name their layers beyond the diffusers/PEFT names, which every
/// family reads. The default is the UNet families' (Stable Diffusion 1.x/2.x, SDXL).
struct LoraKeyRules {
  /// kohya / A1111 / LoCon keys (lora_unet_, lora_te_, lora_te1_, lora_te2_), the UNet in the
  /// original block names too. Off for the DiT families: a kohya file there matches nothing.
  bool kohya_unet = true;
  /// kohya UNet keys in the original (SGM) block names are mapped (SDXL: its loader's
  /// _maybe_map_sgm_blocks_to_diffusers); off, they are refused, as SD 1.x/2.x's loader fails on them.
  bool sgm_block_names = false;
  /// Qwen-Image's and Z-Image's transformer files outside diffusers' names, as diffusers 0.36's
  /// _convert_non_diffusers_{qwen,z_image}_lora_to_diffusers read them: keys that start with
  /// "diffusion_model.", "lora_unet_" (the module with '_' for '.') or the module itself are the
  /// transformer's; "default." is dropped; a lora_down/lora_up pair carries alpha / rank in its
  /// factors (LoraLayer::alpha_in_factors); the alphas of lora_A/lora_B layers are dropped.
  bool non_diffusers_transformer = false;
  /// For those files' lora_down/lora_up layers: a module's last part and what it becomes
  /// (Z-Image's normalize_out_key: "out" -> "to_out.0").
  std::vector<std::pair<std::string, std::string>> last_part_renames;
  /// Whether diffusers 0.36 fails on every such file with "lora_unet_" keys (Z-Image: its converter's convert_key
  /// splits the factors' names too), so that dpinfer refuses them.
  bool unet_prefix_fails = false;
  /// Whether the family's load_lora_weights fails unless every key has "lora" in it ("Invalid LoRA checkpoint.":
  /// StableDiffusionLoraLoaderMixin, StableDiffusionXLLoraLoaderMixin, SD3LoraLoaderMixin), so that an ".alpha"
  /// beside diffusers' names ("unet.<module>.alpha") is refused; FLUX.1's loader pops such alphas instead.
  bool every_key_names_lora = true;
  /// FLUX.1's converted formats, as diffusers 0.36's FluxLoraLoaderMixin.lora_state_dict tells them apart:
  /// kohya / sd-scripts files (any ".lora_down.weight" key, none "transformer." or "lora_transformer_":
  /// lora_flux_keys.h), those in the underscored diffusers names (lora_transformer_: lora_flux_mixture_keys.h)
  /// and XLabs files (no lora_down key, "processor" in one: lora_flux_xlabs_keys.h).
  bool kohya_flux = false;
  /// FLUX.2's files in BFL's block names ("diffusion_model." or "base_model.model." keys), as diffusers 0.37's
  /// Flux2LoraLoaderMixin converts them (lora_flux2_keys.h).
  bool bfl_flux2 = false;
  /// Formats of this family that dpinfer does not read (yet): a piece of a key, what it is.
  std::vector<std::pair<std::string, std::string>> refused;
  /// What to use instead of a refused format, for the message.
  std::string reads;
  /// The components the family's pipeline lets LoRAs change (its LoraMerger::add_component calls, as
  /// diffusers' <Family>LoraLoaderMixin's _lora_loadable_modules): what `dpinfer inspect --lora` checks.
  std::vector<std::string> components = {"unet", "text_encoder"};
};

/// Each LoRA loader's rules, as diffusers 0.36's <Family>LoraLoaderMixin reads files; each family's row
/// (family_specs.cpp, FamilySpec::lora_rules) names its own.
LoraKeyRules stable_diffusion_lora_rules();     ///< StableDiffusionLoraLoaderMixin (SD 1.x/2.x): the defaults
LoraKeyRules stable_diffusion_xl_lora_rules();  ///< StableDiffusionXLLoraLoaderMixin: SGM block names, two CLIPs
LoraKeyRules flux_lora_rules();                 ///< FluxLoraLoaderMixin: kohya, XLabs; transformer and CLIP
LoraKeyRules chroma_lora_rules();               ///< FluxLoraLoaderMixin on ChromaPipeline: the transformer only
LoraKeyRules stable_diffusion_3_lora_rules();   ///< SD3LoraLoaderMixin: diffusers' names only
LoraKeyRules qwen_image_lora_rules();           ///< QwenImageLoraLoaderMixin: also the original names
LoraKeyRules z_image_lora_rules();              ///< ZImageLoraLoaderMixin: also the original names
LoraKeyRules flux2_lora_rules();                ///< Flux2LoraLoaderMixin (diffusers 0.37): the transformer

/// The keys diffusers 0.36 reads of a file's `keys`: all but kohya's DoRA scales ("dora_scale"), which every
/// lora_state_dict filters out with a warning before it converts the file (loaders/lora_pipeline.py), so that
/// the layers merge as plain LoRA layers; where there were some, one line for `ignored` (when given) says so.
std::vector<LoraTensorKey> without_dora_scales(const std::vector<LoraTensorKey>& keys,
                                               std::vector<std::string>* ignored = nullptr);

/// The format dpinfer does not read whose keys look like `key` ("LyCORIS LoHa" for "...hada_w1_a"), or "".
std::string unread_lora_kind(const std::string& key);

/// `key` in PEFT's spelling when it is in one of the older ones that diffusers 0.36 still maps there for every
/// family (tools/fixtures/survey_lora_spellings.py; utils/state_dict_utils.py: DIFFUSERS_OLD_TO_PEFT and
/// DIFFUSERS_TO_PEFT for the text encoders, the denoisers' load_lora_adapter for the processor names), else `key`:
///   text_encoder*.<module>.lora_linear_layer.down/up.weight -> .lora_A/lora_B.weight (DreamBooth LoRA scripts; on a
///                                                         UNet or transformer diffusers fails on it, and so it stays)
///   <attention>.processor.to_q_lora.down/up.weight     -> <attention>.to_q.lora_A/lora_B.weight (to_k, to_v;
///                                                         to_out_lora -> to_out.0: LoRA attention processors)
///   <self_attn>.to_q_lora.down/up.weight               -> <self_attn>.q_proj.lora_A/lora_B.weight (k, v; to_out_lora
///                                                         -> out_proj: CLIP's old monkey-patched attention)
std::string peft_spelling(const std::string& key);

/// What the model's structure adds to the key conversion.
struct LoraModelFacts {
  std::string family_label;  ///< for messages: "Stable Diffusion XL"
  int64_t layers_per_block = 2;  ///< the UNet's, for the SGM block numbers
  LoraKeyRules rules;
};

/// The layers of a LoRA file named `file` (for messages) with the tensors `keys`, mapped onto
/// `modules`. Throws InputError, one line naming the file, when: a key belongs to a format
/// dpinfer does not read; no layer matches a module of the model (a LoRA for another model
/// or family: says which prefixes the file has); only some layers match ("12 of 30 layers
/// match ..., e.g. <key> matches nothing"); a down key has no up key or the reverse; or the
/// factors' shapes do not fit the weight. The layers come in the order diffusers lists them, which
/// decides the LoraConfig it infers (lora_adapter_metadata.h): the file's sorted keys, for a kohya UNet file
/// in the original block names the order SDXL's loader rebuilds them in (lora_sgm_order.h), or for FLUX.1's
/// kohya files the converter's order (lora_flux_keys.h).
/// `ignored` (when given) receives one line per kind of key the file has that diffusers drops
/// without reading, and dpinfer with it (FLUX.1's kohya files: CLIP layers named lora_te1_, T5's, the
/// embedders' and the final layer's), for a warning.
std::vector<LoraLayer> map_lora_keys(const std::vector<LoraTensorKey>& keys, const LoraModuleTable& modules,
                                     const LoraModelFacts& facts, const std::string& file,
                                     std::vector<std::string>* ignored = nullptr);

/// Throws the InputError of a layer whose factors do not fit `weight` (down [r, in], up [out, r];
/// or the Conv2d forms). `layer` names it in the file; `target` the weight ("transformer.x.weight").
void check_lora_factors_fit(const std::string& where, const std::string& layer, const std::vector<int64_t>& down,
                            const std::vector<int64_t>& up, const std::string& target,
                            const std::vector<int64_t>& weight);

/// Throws when the alpha tensor `key` of shape `shape` is not one number.
void check_lora_alpha_shape(const std::string& where, const std::string& key, const std::vector<int64_t>& shape);

}  // namespace dpinfer::pipeline
