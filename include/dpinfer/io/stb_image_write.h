#pragma once
// stb_image_write from Debian's libstb-dev, its implementation compiled once
// (src/io/stb_image_write.cpp), for the PNG and JPEG writers. No stdio: they write to memory.
#define STBI_WRITE_NO_STDIO
#include <stb/stb_image_write.h>

// Public in stb's implementation section only: the PNG in a malloc'd buffer (free() it).
STBIWDEF unsigned char* stbi_write_png_to_mem(const unsigned char* pixels, int stride_bytes, int x, int y, int n,
                                              int* out_len);
