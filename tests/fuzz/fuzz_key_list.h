#pragma once
// The input format of the key-conversion harnesses (fuzz_ldm_keys, fuzz_dit_keys) and the check
// every converted part must pass: a checkpoint header's key list as text, one tensor per line,
// "name d0 d1 ...", each dimension a byte of the line after the first space.

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "dpinfer/pipeline/conversion/tensor_parts.h"

namespace dpinfer::fuzz {

inline int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

/// At most 256 tensors of at most 4 dimensions, each < 16 (small: products stay exact).
inline std::vector<pipeline::SourceTensor> key_list(const uint8_t* data, size_t size) {
  std::vector<pipeline::SourceTensor> tensors;
  const std::string text(reinterpret_cast<const char*>(data), size);
  size_t begin = 0;
  while (begin < text.size() && tensors.size() < 256) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    const size_t space = line.find(' ');
    pipeline::SourceTensor t;
    t.name = line.substr(0, space);
    if (space != std::string::npos)
      for (size_t i = space + 1; i < line.size() && t.shape.size() < 4; ++i)
        t.shape.push_back(static_cast<uint8_t>(line[i]) % 16);
    tensors.push_back(std::move(t));
    begin = end + 1;
  }
  return tensors;
}

/// How many elements part `p` reads of its source tensor; aborts unless the source exists, its
/// row range lies inside it, and the target has a name (names are the file's bytes, printed only
/// through printable()).
inline int64_t elements_read(const pipeline::TensorPart& p, const std::vector<pipeline::SourceTensor>& tensors) {
  if (p.source >= tensors.size() || p.target.empty()) std::abort();
  const pipeline::SourceTensor& s = tensors[p.source];
  int64_t elements = numel(s.shape);
  if (p.rows >= 0) {
    if (s.shape.empty() || p.row_begin < 0 || p.row_begin + p.rows > s.shape[0]) std::abort();
    elements = s.shape[0] == 0 ? 0 : elements / s.shape[0] * p.rows;
  }
  return elements;
}

}  // namespace dpinfer::fuzz
