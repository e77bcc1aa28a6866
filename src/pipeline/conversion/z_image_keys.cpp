#include "dpinfer/pipeline/conversion/z_image_keys.h"

#include <optional>
#include <utility>

#include "dpinfer/pipeline/conversion/key_rules.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

using key_rules::indexed;
using key_rules::rename;
using key_rules::Renames;
using key_rules::whole;

// A block's modules (layers.N, noise_refiner.N, context_refiner.N): original -> diffusers
// (Z_IMAGE_KEYS_RENAME_DICT of convert_z_image_transformer_checkpoint_to_diffusers).
const Renames kZImageBlock{{"attention.out", "attention.to_out.0"},
                     {"attention.q_norm", "attention.norm_q"},
                     {"attention.k_norm", "attention.norm_k"}};

constexpr const char* kBlockLists[] = {"layers.", "noise_refiner.", "context_refiner."};
constexpr const char* kQkvThirds[] = {"attention.to_q", "attention.to_k", "attention.to_v"};

}  // namespace

std::vector<TensorPart> convert_z_image_keys(const std::string& prefix, const std::string& patch,
                                             const std::vector<SourceTensor>& tensors) {
  // The patch-size slots diffusers' ModuleDicts use: x_embedder -> all_x_embedder.<patch>.
  const Renames top{{"x_embedder", "all_x_embedder." + patch}, {"final_layer", "all_final_layer." + patch}};
  std::vector<TensorPart> parts;
  for (size_t s = 0; s < tensors.size(); ++s) {
    const SourceTensor& t = tensors[s];
    const std::optional<std::string> under_prefix = key_rules::under(prefix, t.name);
    if (!under_prefix) continue;
    const std::string& key = *under_prefix;
    if (auto r = rename(key, top)) {
      parts.push_back(whole(s, *r, t.shape));
      continue;
    }
    std::optional<std::pair<int64_t, std::string>> block;
    std::string list;
    for (const char* head : kBlockLists)
      if (!block && (block = indexed(key, head))) list = head;
    if (!block) {
      parts.push_back(whole(s, key, t.shape));
      continue;
    }
    const std::string base = list + std::to_string(block->first) + ".";
    const std::string& rest = block->second;
    if (rest == "attention.qkv.weight") {
      // convert_z_image_fused_attention: torch.chunk(qkv, 3) -> to_q, to_k, to_v.
      const std::string targets[3] = {base + kQkvThirds[0], base + kQkvThirds[1], base + kQkvThirds[2]};
      key_rules::append_thirds(parts, s, t, targets, "weight");
      continue;
    }
    auto r = rename(rest, kZImageBlock);
    parts.push_back(whole(s, r ? base + *r : key, t.shape));
  }
  return parts;
}

}  // namespace dpinfer::pipeline
