#pragma once
// Pieces shared by the single-file key conversions (ldm_keys.cpp, flux_bfl_keys.cpp): rename
// tables of module paths, block indices in key names, and whole-tensor parts. Names and shapes
// only; free of LibTorch, as the conversions are.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dpinfer/pipeline/loading/tensor_parts.h"

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

}  // namespace dpinfer::pipeline::key_rules
