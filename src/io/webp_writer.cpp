#include "dpinfer/io/webp_writer.h"

#include <webp/encode.h>
#include <webp/mux.h>

#include <memory>

#include "dpinfer/io/exif.h"
#include "dpinfer/io/utf8.h"
#include "dpinfer/util/error.h"

namespace dpinfer::io {
namespace {

constexpr int kMaxWebpSide = 16383;  // WEBP_MAX_DIMENSION

std::string xml_escaped(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

/// The encoded bitstream (a simple-format RIFF/WEBP file), through the advanced API.
std::string encode_pixels(const uint8_t* rgb, int width, int height, int quality, bool lossless) {
  WebPConfig config;
  if (!WebPConfigPreset(&config, WEBP_PRESET_DEFAULT, static_cast<float>(quality)))
    throw Error("libwebp: version mismatch between its header and library");
  config.lossless = lossless ? 1 : 0;
  config.method = 4;
  if (!WebPValidateConfig(&config)) throw Error("libwebp: invalid configuration");
  WebPPicture picture;
  if (!WebPPictureInit(&picture)) throw Error("libwebp: version mismatch between its header and library");
  picture.use_argb = lossless ? 1 : 0;  // lossless works on ARGB, lossy on YUV
  picture.width = width;
  picture.height = height;
  std::unique_ptr<WebPPicture, decltype(&WebPPictureFree)> owned(&picture, &WebPPictureFree);
  if (!WebPPictureImportRGB(&picture, rgb, width * 3)) throw Error("libwebp: out of memory importing the image");
  WebPMemoryWriter writer;
  WebPMemoryWriterInit(&writer);
  std::unique_ptr<WebPMemoryWriter, decltype(&WebPMemoryWriterClear)> written(&writer, &WebPMemoryWriterClear);
  picture.writer = WebPMemoryWrite;
  picture.custom_ptr = &writer;
  if (!WebPEncode(&config, &picture))
    throw Error("libwebp could not encode a " + std::to_string(width) + "x" + std::to_string(height) +
                " image (error " + std::to_string(static_cast<int>(picture.error_code)) + ")");
  return std::string(reinterpret_cast<const char*>(writer.mem), writer.size);
}

}  // namespace

std::string xmp_packet_with_record(const std::string& record) {
  return "<?xpacket begin=\"\xEF\xBB\xBF\" id=\"W5M0MpCehiHzreSzNTczkc9d\"?>"
         "<x:xmpmeta xmlns:x=\"adobe:ns:meta/\">"
         "<rdf:RDF xmlns:rdf=\"http://www.w3.org/1999/02/22-rdf-syntax-ns#\">"
         "<rdf:Description rdf:about=\"\" xmlns:dpinfer=\"https://dpinfer.dev/ns/1.0/\">"
         "<dpinfer:record>" +
         xml_escaped(record) +
         "</dpinfer:record></rdf:Description></rdf:RDF></x:xmpmeta><?xpacket end=\"w\"?>";
}

std::string encode_webp(const uint8_t* rgb, int width, int height, int quality, bool lossless, const WebpText& text) {
  if (width < 1 || height < 1 || width > kMaxWebpSide || height > kMaxWebpSide)
    throw Error("a WebP holds at most " + std::to_string(kMaxWebpSide) + "x" + std::to_string(kMaxWebpSide) +
                " pixels, not " + std::to_string(width) + "x" + std::to_string(height) + "; use --image-format png");
  if (quality < 0 || quality > 100) throw Error("WebP quality must be in 0..100, got " + std::to_string(quality));
  if (find_invalid_utf8(text.user_comment) != std::string::npos || find_invalid_utf8(text.record) != std::string::npos)
    throw Error("a WebP's metadata must be valid UTF-8");
  const std::string bitstream = encode_pixels(rgb, width, height, quality, lossless);
  if (text.user_comment.empty() && text.record.empty()) return bitstream;

  std::unique_ptr<WebPMux, decltype(&WebPMuxDelete)> mux(WebPMuxNew(), &WebPMuxDelete);
  if (!mux) throw Error("libwebpmux: out of memory");
  const WebPData image{reinterpret_cast<const uint8_t*>(bitstream.data()), bitstream.size()};
  if (WebPMuxSetImage(mux.get(), &image, 0) != WEBP_MUX_OK) throw Error("libwebpmux: cannot take the image");
  // Both copied (copy_data 1): the strings die before the file is assembled.
  if (!text.user_comment.empty()) {
    const std::string exif = exif_user_comment_tiff(text.user_comment);
    const WebPData chunk{reinterpret_cast<const uint8_t*>(exif.data()), exif.size()};
    if (WebPMuxSetChunk(mux.get(), "EXIF", &chunk, 1) != WEBP_MUX_OK) throw Error("libwebpmux: cannot add EXIF");
  }
  if (!text.record.empty()) {
    const std::string xmp = xmp_packet_with_record(text.record);
    const WebPData chunk{reinterpret_cast<const uint8_t*>(xmp.data()), xmp.size()};
    if (WebPMuxSetChunk(mux.get(), "XMP ", &chunk, 1) != WEBP_MUX_OK) throw Error("libwebpmux: cannot add XMP");
  }
  WebPData assembled;
  WebPDataInit(&assembled);
  if (WebPMuxAssemble(mux.get(), &assembled) != WEBP_MUX_OK) throw Error("libwebpmux: cannot assemble the file");
  std::string out(reinterpret_cast<const char*>(assembled.bytes), assembled.size);
  WebPDataClear(&assembled);
  return out;
}

}  // namespace dpinfer::io
