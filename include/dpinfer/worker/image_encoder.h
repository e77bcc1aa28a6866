#pragma once
// One row per --image-format (issue 27, item 1): how a made image becomes its file's bytes, with
// its A1111 infotext and dpinfer's record inside, and what size the format holds. The run loop
// (generate_run.h) looks its format up here once and never branches on it; a new format is one
// row in image_encoder.cpp (with its io/ writer, and its name and extension in plan/items.h).
// The io/ writers know nothing of records or models: a row maps the two texts to where its
// format keeps text.

#include <string>
#include <vector>

#include "dpinfer/pipeline/text_to_image.h"
#include "dpinfer/plan/generate_options.h"
#include "dpinfer/plan/items.h"

namespace dpinfer::worker {

struct EncodedImage {
  std::string bytes;
  /// What the file could not hold, said for a warning after "rank R: item I: " (empty: all fits):
  /// a JPEG segment holds at most 64 KiB (io/jpeg_writer.h).
  std::string warning;
};

struct ImageEncoder {
  plan::ImageFormat format;
  /// The largest width or height a file of the format holds; 0 for no bound of its own.
  int max_side = 0;
  /// Encodes `image` with `infotext` and `record` (JSON) inside, at `o`'s quality options.
  /// `file_name` only names the file in the warning. Throws Error when the image cannot be encoded.
  EncodedImage (*encode)(const pipeline::RgbImage& image, const std::string& infotext, const std::string& record,
                         const plan::GenerateOptions& o, const std::string& file_name);
};

/// Every row, one per plan::ImageFormat.
const std::vector<ImageEncoder>& image_encoders();

/// The row of `format` (every format has one: ImageEncoders.EveryFormatHasOneRow checks it).
const ImageEncoder& image_encoder(plan::ImageFormat format);

/// Refuses (UsageError starting with `where`) a width x height that `encoder`'s format cannot hold.
void check_image_size(const ImageEncoder& encoder, int width, int height, const std::string& where);

}  // namespace dpinfer::worker
