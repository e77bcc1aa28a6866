// stb_image_write's implementation, compiled into this file alone, with its warnings off.
#define STB_IMAGE_WRITE_IMPLEMENTATION
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#endif
#include "dpinfer/io/stb_image_write.h"
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
