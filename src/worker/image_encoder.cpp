#include "dpinfer/worker/image_encoder.h"

#include "dpinfer/io/jpeg_writer.h"
#include "dpinfer/io/png_writer.h"
#include "dpinfer/io/webp_writer.h"
#include "dpinfer/util/error.h"

namespace dpinfer::worker {
namespace {

// PNG: the infotext as A1111's "parameters" text chunk, the record as an iTXt "dpinfer" chunk.
EncodedImage encode_png(const pipeline::RgbImage& img, const std::string& infotext, const std::string& record,
                        const plan::GenerateOptions&, const std::string&) {
  return {io::encode_png(img.pixels.data(), img.width, img.height, {{"parameters", infotext}, {"dpinfer", record, true}}),
          ""};
}

// JPEG: the infotext as Exif UserComment, the record as COM; either is left out when over a
// segment's 64 KiB (the manifest keeps the record).
EncodedImage encode_jpeg(const pipeline::RgbImage& img, const std::string& infotext, const std::string& record,
                         const plan::GenerateOptions& o, const std::string& file_name) {
  io::EncodedJpeg jpeg = io::encode_jpeg(img.pixels.data(), img.width, img.height, o.jpeg_quality, {infotext, record});
  std::string warning;
  if (jpeg.user_comment_left_out || jpeg.comment_left_out)
    warning = std::string("its ") +
              (jpeg.user_comment_left_out && jpeg.comment_left_out ? "infotext and record are"
               : jpeg.user_comment_left_out                        ? "infotext is"
                                                                   : "record is") +
              " over a JPEG segment's 64 KiB and left out of " + file_name + " (the manifest has the record)";
  return {std::move(jpeg.bytes), warning};
}

// WebP: the infotext in the EXIF chunk, the record in the XMP chunk.
EncodedImage encode_webp(const pipeline::RgbImage& img, const std::string& infotext, const std::string& record,
                         const plan::GenerateOptions& o, const std::string&) {
  return {io::encode_webp(img.pixels.data(), img.width, img.height, o.webp_quality, o.webp_lossless, {infotext, record}),
          ""};
}

}  // namespace

const std::vector<ImageEncoder>& image_encoders() {
  static const std::vector<ImageEncoder> rows = {
      {plan::ImageFormat::kPng, 0, encode_png},
      {plan::ImageFormat::kJpeg, 0, encode_jpeg},
      {plan::ImageFormat::kWebp, 16383, encode_webp},  // WebP's 14-bit dimensions (io/webp_writer.h)
  };
  return rows;
}

const ImageEncoder& image_encoder(plan::ImageFormat format) {
  for (const ImageEncoder& row : image_encoders())
    if (row.format == format) return row;
  throw Error("no image encoder for --image-format " + plan::to_string(format));
}

void check_image_size(const ImageEncoder& encoder, int width, int height, const std::string& where) {
  if (encoder.max_side > 0 && (width > encoder.max_side || height > encoder.max_side))
    throw UsageError(where + ": size " + std::to_string(width) + "x" + std::to_string(height) + " is larger than a " +
                     plan::label_of(encoder.format) + " holds (" + std::to_string(encoder.max_side) + "x" +
                     std::to_string(encoder.max_side) + "); use --image-format png");
}

}  // namespace dpinfer::worker
