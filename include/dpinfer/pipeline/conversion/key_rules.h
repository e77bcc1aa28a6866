#pragma once
// Pieces shared by the checkpoint key conversions: the single-file ones in this folder (ldm_keys.cpp,
// flux_bfl_keys.cpp, sd3_keys.cpp, ...) and the LoRA key rules of loading/lora_*_keys.cpp: rename tables of
// module paths, block indices in key names, whole-tensor parts, fused q/k/v thirds and the (shift, scale) ->
// (scale, shift) swap of final AdaLN modulations. Names and shapes only; free of LibTorch, as the conversions are.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dpinfer/pipeline/conversion/tensor_parts.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline::key_rules {

/// Module path in the checkpoint -> module path in the module ("in_layers.0" -> "norm1").
using Renames = std::vector<std::pair<std::string, std::string>>;

/// `rest` with its leading module path renamed by the first entry of `table` it starts
/// with ("in_layers.0.weight" -> "norm1.weight"); nullopt when none does.
inline std::optional<std::string> rename(const std::string& rest, const Renames& table) {
  for (const auto& [from, to] : table)
    if (rest.size() > from.size() && rest.compare(0, from.size(), from) == 0 && rest[from.size()] == '.')
      return to + rest.substr(from.size());
  return std::nullopt;
}

/// The decimal number `text` holds (at most 9 digits, no sign), or nullopt.
inline std::optional<int64_t> parse_index(const std::string& text) {
  if (text.empty() || text.size() > 9) return std::nullopt;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

/// Splits "<name>.<N>.<rest>" after `head` ("input_blocks."): N and rest.
inline std::optional<std::pair<int64_t, std::string>> indexed(const std::string& key, const std::string& head) {
  if (key.compare(0, head.size(), head) != 0) return std::nullopt;
  const size_t dot = key.find('.', head.size());
  if (dot == std::string::npos) return std::nullopt;
  const std::optional<int64_t> n = parse_index(key.substr(head.size(), dot - head.size()));
  if (!n) return std::nullopt;
  return std::make_pair(*n, key.substr(dot + 1));
}

/// The whole of source tensor `source` as the module key `target`, seen with `shape`.
inline TensorPart whole(size_t source, std::string target, const std::vector<int64_t>& shape) {
  TensorPart p;
  p.source = source;
  p.target = std::move(target);
  p.shape = shape;
  return p;
}

/// Rows [row_begin, row_begin + rows) of source tensor `source` (shape `shape`) as `target`.
inline TensorPart row_range(size_t source, std::string target, const std::vector<int64_t>& shape, int64_t row_begin,
                            int64_t rows) {
  std::vector<int64_t> part_shape = shape;
  part_shape[0] = rows;
  TensorPart p = whole(source, std::move(target), part_shape);
  p.row_begin = row_begin;
  p.rows = rows;
  return p;
}

/// "[a,b,c]".
inline std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

/// "tensor '<name>' [shape]", for messages.
inline std::string tensor_text(const SourceTensor& t) {
  return "tensor '" + printable(t.name, 200) + "' " + shape_text(t.shape);
}

/// A fused q/k/v projection (source `source`, tensor `t`) as three equal row ranges, in the file's
/// order, under `targets[k] + "." + leaf` (diffusers' torch.chunk(qkv, 3, dim=0)). Throws InputError
/// naming the tensor when its rows do not split in three.
inline void append_thirds(std::vector<TensorPart>& parts, size_t source, const SourceTensor& t,
                          const std::string (&targets)[3], const std::string& leaf) {
  if (t.shape.empty() || t.shape[0] % 3 != 0)
    throw InputError(tensor_text(t) + ": a fused q/k/v projection needs a first dimension divisible by 3");
  const int64_t rows = t.shape[0] / 3;
  for (int64_t k = 0; k < 3; ++k) parts.push_back(row_range(source, targets[k] + "." + leaf, t.shape, k * rows, rows));
}

/// A fused q/k/v projection of an original layout ("img_attn.qkv") and the modules its thirds go to,
/// in the file's order (append_thirds' targets).
struct FusedThirds {
  const char* from;
  std::string to[3];
};

/// An AdaLN modulation stored (shift, scale), as the original MMDiT / FLUX.1 code's final layers
/// chunk it, read as diffusers' AdaLayerNormContinuous (scale, shift) under `target`: two pieces
/// of the module tensor from the file's two halves in the other order (diffusers' swap_scale_shift,
/// without a copy). Throws InputError naming the tensor when its rows do not split in two.
inline void append_swapped_halves(std::vector<TensorPart>& parts, size_t source, const SourceTensor& t,
                                  const std::string& target) {
  if (t.shape.empty() || t.shape[0] % 2 != 0)
    throw InputError(tensor_text(t) + ": an AdaLN modulation needs a first dimension divisible by 2 (shift, scale)");
  const int64_t half = t.shape[0] / 2;
  for (const auto& [from, to] : {std::pair<int64_t, int64_t>{half, 0}, {0, half}}) {
    TensorPart p = row_range(source, target, t.shape, from, half);
    p.shape = t.shape;
    p.target_row = to;
    parts.push_back(std::move(p));
  }
}

/// `key` renamed by the entry of `table` that is exactly it, or nullopt.
inline std::optional<std::string> exact(const std::string& key, const Renames& table) {
  for (const auto& [from, to] : table)
    if (key == from) return to;
  return std::nullopt;
}

/// The leaf ("weight", "bias") of `rest` when it is "<module>.<leaf>" for `module`, else "".
inline std::string leaf_of(const std::string& rest, const std::string& module) {
  if (rest.size() <= module.size() + 1 || rest.compare(0, module.size(), module) != 0 || rest[module.size()] != '.')
    return "";
  const std::string leaf = rest.substr(module.size() + 1);
  return leaf == "weight" || leaf == "bias" ? leaf : "";
}

/// `name` without `prefix` (a converter's keys under "model.diffusion_model." etc.), or nullopt when it
/// lies outside it or is the prefix itself.
inline std::optional<std::string> under(const std::string& prefix, const std::string& name) {
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  return name.substr(prefix.size());
}

/// How many blocks "<head>N." the keys under `prefix` have (the highest N + 1), as diffusers'
/// converters count num_layers.
inline int64_t count_blocks(const std::string& prefix, const std::string& head,
                            const std::vector<SourceTensor>& tensors) {
  int64_t n = 0;
  for (const SourceTensor& t : tensors)
    if (const auto key = under(prefix, t.name))
      if (auto block = indexed(*key, head)) n = std::max(n, block->first + 1);
  return n;
}

}  // namespace dpinfer::pipeline::key_rules
