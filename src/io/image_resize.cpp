#include "dpinfer/io/image_resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dpinfer/util/error.h"

namespace dpinfer::io {
namespace {

// Ref: Pillow src/libImaging/Resample.c. The kernel and the coefficient arithmetic follow it
// operation for operation (double precision, then rounding to PRECISION_BITS), since a
// different order of the same sums moves pixels by one level.

constexpr int kPrecisionBits = 32 - 8 - 2;  // 8 bits of result, 2 of headroom for negative lobes
constexpr double kLanczosSupport = 3.0;

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= M_PI;
  return std::sin(x) / x;
}

double lanczos(double x) { return (-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3) : 0.0; }

/// One pass's weights: for output pixel i, the inputs [first[i], first[i] + count[i]) and their
/// fixed-point weights at weights[i * ksize ...].
struct Coefficients {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> weights;
};

// Ref: precompute_coeffs and normalize_coeffs_8bpc, for the box (0, in_size).
Coefficients coefficients(int in_size, int out_size) {
  const float in0 = 0.0f, in1 = static_cast<float>(in_size);  // Pillow's box is float
  double scale = static_cast<double>(in1 - in0) / out_size;
  double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = kLanczosSupport * filterscale;
  Coefficients c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(static_cast<size_t>(out_size));
  c.count.resize(static_cast<size_t>(out_size));
  c.weights.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> k(static_cast<size_t>(c.ksize));
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    double ww = 0.0;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    int x = 0;
    for (; x < xmax; ++x) {
      const double w = lanczos((x + xmin - center + 0.5) * ss);
      k[static_cast<size_t>(x)] = w;
      ww += w;
    }
    for (x = 0; x < xmax; ++x)
      if (ww != 0.0) k[static_cast<size_t>(x)] /= ww;
    for (; x < c.ksize; ++x) k[static_cast<size_t>(x)] = 0;
    for (x = 0; x < c.ksize; ++x) {
      const double v = k[static_cast<size_t>(x)];
      c.weights[static_cast<size_t>(xx) * c.ksize + x] =
          v < 0 ? static_cast<int32_t>(-0.5 + v * (1 << kPrecisionBits)) : static_cast<int32_t>(0.5 + v * (1 << kPrecisionBits));
    }
    c.first[static_cast<size_t>(xx)] = xmin;
    c.count[static_cast<size_t>(xx)] = xmax;
  }
  return c;
}

/// Pillow's clip8: the sum shifted down, clamped to 0..255.
uint8_t clip8(int32_t sum) {
  const int32_t v = sum >> kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

}  // namespace

RgbImageData resize_lanczos(const RgbImageData& image, int width, int height) {
  if (width < 1 || height < 1 || image.width < 1 || image.height < 1)
    throw Error("resize_lanczos: sizes must be positive");
  if (width == image.width && height == image.height) return image;
  const Coefficients vert = coefficients(image.height, height);
  // Only the input rows the vertical pass reads are resampled horizontally (ybox_first..ybox_last).
  const int row_first = vert.first.front();
  const int row_last = vert.first.back() + vert.count.back();

  RgbImageData src = image;
  int src_row_offset = 0;  // input row r of the vertical pass is src row r - src_row_offset
  if (width != image.width) {
    const Coefficients horiz = coefficients(image.width, width);
    RgbImageData tmp;
    tmp.width = width;
    tmp.height = row_last - row_first;
    tmp.pixels.resize(static_cast<size_t>(tmp.width) * tmp.height * 3);
    for (int yy = 0; yy < tmp.height; ++yy) {
      const uint8_t* in = image.pixels.data() + static_cast<size_t>(yy + row_first) * image.width * 3;
      uint8_t* out = tmp.pixels.data() + static_cast<size_t>(yy) * width * 3;
      for (int xx = 0; xx < width; ++xx) {
        const int32_t* k = horiz.weights.data() + static_cast<size_t>(xx) * horiz.ksize;
        const int xmin = horiz.first[static_cast<size_t>(xx)];
        int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
        for (int x = 0; x < horiz.count[static_cast<size_t>(xx)]; ++x) {
          const uint8_t* p = in + static_cast<size_t>(x + xmin) * 3;
          s0 += p[0] * k[x];
          s1 += p[1] * k[x];
          s2 += p[2] * k[x];
        }
        out[xx * 3 + 0] = clip8(s0);
        out[xx * 3 + 1] = clip8(s1);
        out[xx * 3 + 2] = clip8(s2);
      }
    }
    src = std::move(tmp);
    src_row_offset = row_first;
  }
  if (height == image.height) return src;
  RgbImageData out;
  out.width = src.width;
  out.height = height;
  out.pixels.resize(static_cast<size_t>(out.width) * height * 3);
  for (int yy = 0; yy < height; ++yy) {
    const int32_t* k = vert.weights.data() + static_cast<size_t>(yy) * vert.ksize;
    const int ymin = vert.first[static_cast<size_t>(yy)] - src_row_offset;
    const int count = vert.count[static_cast<size_t>(yy)];
    uint8_t* row = out.pixels.data() + static_cast<size_t>(yy) * out.width * 3;
    for (int xx = 0; xx < out.width * 3; ++xx) {
      int32_t s = 1 << (kPrecisionBits - 1);
      for (int y = 0; y < count; ++y) s += src.pixels[static_cast<size_t>(y + ymin) * src.width * 3 + xx] * k[y];
      row[xx] = clip8(s);
    }
  }
  return out;
}

RgbImageData crop_center(const RgbImageData& image, int width, int height) {
  if (width < 1 || height < 1 || width > image.width || height > image.height)
    throw Error("crop_center: " + std::to_string(width) + "x" + std::to_string(height) + " does not fit in " +
                std::to_string(image.width) + "x" + std::to_string(image.height));
  const int left = (image.width - width) / 2, top = (image.height - height) / 2;  // Python's // on non-negatives
  RgbImageData out;
  out.width = width;
  out.height = height;
  out.pixels.resize(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    const uint8_t* from = image.pixels.data() + (static_cast<size_t>(top + y) * image.width + left) * 3;
    std::copy(from, from + static_cast<size_t>(width) * 3, out.pixels.data() + static_cast<size_t>(y) * width * 3);
  }
  return out;
}

}  // namespace dpinfer::io
