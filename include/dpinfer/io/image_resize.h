#pragma once
// Pillow's Image.resize(size, Image.LANCZOS) on 8-bit RGB, bit for bit: what diffusers'
// VaeImageProcessor.resize does to an input image whose size is not the item's (its default
// `resample` is "lanczos"). Pillow resamples in two separable passes, horizontal then vertical,
// with a Lanczos-3 kernel widened by the scale when shrinking, its weights normalised per output
// pixel and then rounded to 22-bit fixed point (libImaging/Resample.c, ImagingResample).

#include "dpinfer/io/image_reader.h"

namespace dpinfer::io {

/// `image` resized to width x height (each >= 1). The same size returns a copy, as Pillow does.
RgbImageData resize_lanczos(const RgbImageData& image, int width, int height);

/// The width x height middle of `image` (each no larger than the image's): Pillow's
/// Image.crop((left, top, left + width, top + height)) with left = (W - width) // 2 and top = (H - height) // 2,
/// as diffusers' Flux2ImageProcessor._resize_and_crop cuts a reference. The same size returns a copy.
RgbImageData crop_center(const RgbImageData& image, int width, int height);

}  // namespace dpinfer::io
