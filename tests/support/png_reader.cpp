#include "support/png_reader.h"

#include <png.h>

#include <cstdio>
#include <stdexcept>

namespace dpinfer::test {

DecodedPng read_png(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path);
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    std::fclose(f);
    throw std::runtime_error("libpng rejected " + path);
  }
  png_init_io(png, f);
  png_read_info(png, info);
  DecodedPng out;
  out.width = static_cast<int>(png_get_image_width(png, info));
  out.height = static_cast<int>(png_get_image_height(png, info));
  out.channels = png_get_channels(png, info);
  out.bit_depth = png_get_bit_depth(png, info);
  size_t row = png_get_rowbytes(png, info);
  out.pixels.resize(row * out.height);
  std::vector<png_bytep> rows(out.height);
  for (int y = 0; y < out.height; ++y) rows[y] = out.pixels.data() + y * row;
  png_read_image(png, rows.data());
  png_read_end(png, info);
  png_textp text = nullptr;
  int n = 0;
  png_get_text(png, info, &text, &n);
  for (int i = 0; i < n; ++i) {
    std::string value(text[i].text, text[i].compression >= PNG_ITXT_COMPRESSION_NONE ? text[i].itxt_length : text[i].text_length);
    bool itxt = text[i].compression >= PNG_ITXT_COMPRESSION_NONE;
    if (!itxt) {  // tEXt is Latin-1: convert to UTF-8 for comparison
      std::string utf8;
      for (unsigned char c : value) {
        if (c < 0x80) utf8.push_back(static_cast<char>(c));
        else utf8 += {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
      }
      value = utf8;
    }
    out.texts[text[i].key] = value;
    out.text_is_itxt[text[i].key] = itxt;
  }
  png_destroy_read_struct(&png, &info, nullptr);
  std::fclose(f);
  return out;
}

}  // namespace dpinfer::test
