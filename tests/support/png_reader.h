#pragma once
// PNGs read back with libpng: a reader independent of the writer under test.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dpinfer::test {

struct DecodedPng {
  int width = 0;
  int height = 0;
  int channels = 0;
  int bit_depth = 0;
  std::vector<uint8_t> pixels;                  ///< rows of width × channels bytes
  std::map<std::string, std::string> texts;     ///< keyword -> text (UTF-8; tEXt converted from Latin-1)
  std::map<std::string, bool> text_is_itxt;     ///< keyword -> whether it was an iTXt chunk
};

/// Decodes `path`; throws std::runtime_error on a PNG libpng rejects.
DecodedPng read_png(const std::string& path);

}  // namespace dpinfer::test
