// dpinfer_check_shapes OUT DATASET_JSON: does each image in OUT/metadata.jsonl show
// the colour and shape its caption asks for?
//
// For the embedded shapes model (models/dpinfer-shapes-64). DATASET_JSON is the
// dataset.json written next to it by tools/train/shapes_dataset.py: the palette,
// the backgrounds and the positions, so that this checker and the renderer share
// one source of truth. The measurement is plain geometry and colour statistics:
//   background  the median colour of the 2-pixel border
//   shape mask  the pixels farther than kForegroundDistance from the background,
//               restricted to the largest 4-connected component
//   colour      the nearest palette entry to the mask's median colour
//   shape       triangle when the mask is much narrower in its top quarter than
//               in its bottom quarter; otherwise square when the corners of its
//               bounding box are filled (kSquareCorners), else circle
//   position    the palette position nearest to the mask's centroid (reported,
//               not part of "correct")
// An image is correct when colour and shape are both right.
//
// Exit status: 0 when the share correct is at least --min-accuracy, 1 when below,
// 2 for bad input (a missing file, a caption outside the grammar).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_NO_STDIO_WRITE
#include <stb/stb_image.h>

namespace {

using json = nlohmann::json;
using Rgb = std::array<double, 3>;

constexpr double kForegroundDistance = 60.0;  // RGB distance from the background (0..441)
constexpr double kSquareCorners = 0.6;        // corner patches' fill: square 1.0, circle ~0.2
constexpr double kTriangleTaper = 0.6;        // width at 1/4 height over width at 3/4: triangle ~1/3
constexpr int kMinPixels = 30;                // fewer foreground pixels: no shape at all

struct BadInput : std::runtime_error {
  using std::runtime_error::runtime_error;
};

double distance(const Rgb& a, const Rgb& b) {
  return std::sqrt((a[0] - b[0]) * (a[0] - b[0]) + (a[1] - b[1]) * (a[1] - b[1]) + (a[2] - b[2]) * (a[2] - b[2]));
}

template <typename Map>
std::string nearest(const Map& palette, const Rgb& c) {
  std::string best;
  double best_d = 1e9;
  for (const auto& [name, value] : palette) {
    double d = distance(c, value);
    if (d < best_d) best_d = d, best = name;
  }
  return best;
}

struct Image {
  int width = 0, height = 0;
  std::vector<unsigned char> rgb;
  Rgb at(int x, int y) const {
    const unsigned char* p = &rgb[3 * (static_cast<size_t>(y) * width + x)];
    return {double(p[0]), double(p[1]), double(p[2])};
  }
};

Image load_png(const std::string& path) {
  Image img;
  int channels = 0;
  unsigned char* data = stbi_load(path.c_str(), &img.width, &img.height, &channels, 3);
  if (data == nullptr) throw BadInput(path + ": cannot read as PNG (" + stbi_failure_reason() + ")");
  img.rgb.assign(data, data + 3 * static_cast<size_t>(img.width) * img.height);
  stbi_image_free(data);
  return img;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

Rgb median_colour(const std::vector<Rgb>& pixels) {
  Rgb m{};
  for (int c = 0; c < 3; ++c) {
    std::vector<double> ch;
    ch.reserve(pixels.size());
    for (const Rgb& p : pixels) ch.push_back(p[c]);
    m[c] = median(ch);
  }
  return m;
}

struct Verdict {
  std::string colour, shape, position, background;
  int pixels = 0;
  double fill = 0, taper = 0, corners = 0;
};

Verdict analyse(const Image& img, const std::map<std::string, Rgb>& colours, const std::map<std::string, Rgb>& backgrounds,
                const std::map<std::string, Rgb>& positions) {
  const int w = img.width, h = img.height;
  std::vector<Rgb> border;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      if (x < 2 || y < 2 || x >= w - 2 || y >= h - 2) border.push_back(img.at(x, y));
  const Rgb bg = median_colour(border);
  Verdict v;
  v.background = nearest(backgrounds, bg);

  // The largest 4-connected component of foreground pixels.
  std::vector<int> label(static_cast<size_t>(w) * h, -1);
  std::vector<char> fg(label.size());
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) fg[y * w + x] = distance(img.at(x, y), bg) > kForegroundDistance;
  std::vector<int> best;
  for (int start = 0; start < w * h; ++start) {
    if (!fg[start] || label[start] >= 0) continue;
    std::vector<int> component{start}, stack{start};
    label[start] = start;
    while (!stack.empty()) {
      int i = stack.back();
      stack.pop_back();
      const int x = i % w, y = i / w;
      const int nb[4][2] = {{x - 1, y}, {x + 1, y}, {x, y - 1}, {x, y + 1}};
      for (const auto& n : nb) {
        if (n[0] < 0 || n[1] < 0 || n[0] >= w || n[1] >= h) continue;
        int j = n[1] * w + n[0];
        if (fg[j] && label[j] < 0) label[j] = start, stack.push_back(j), component.push_back(j);
      }
    }
    if (component.size() > best.size()) best.swap(component);
  }
  v.pixels = static_cast<int>(best.size());
  if (v.pixels < kMinPixels) {
    v.colour = v.shape = v.position = "none";
    return v;
  }
  std::vector<Rgb> pixels;
  int x0 = w, x1 = -1, y0 = h, y1 = -1;
  double cx = 0, cy = 0;
  for (int i : best) {
    const int x = i % w, y = i / w;
    pixels.push_back(img.at(x, y));
    x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    cx += x + 0.5, cy += y + 0.5;
  }
  cx /= v.pixels, cy /= v.pixels;
  v.colour = nearest(colours, median_colour(pixels));
  v.position = nearest(positions, Rgb{cx, cy, 0});

  const int bw = x1 - x0 + 1, bh = y1 - y0 + 1;
  v.fill = double(v.pixels) / (double(bw) * bh);
  // Mean width of the mask in the top and bottom quarter of its bounding box.
  auto band_width = [&](int from, int to) {
    std::vector<int> count(static_cast<size_t>(h), 0);
    for (int i : best) ++count[i / w];
    double sum = 0;
    int rows = 0;
    for (int y = from; y <= to; ++y) sum += count[y], ++rows;
    return rows ? sum / rows : 0.0;
  };
  const int q = std::max(1, bh / 4);
  const double top = band_width(y0, y0 + q - 1), bottom = band_width(y1 - q + 1, y1);
  v.taper = bottom > 0 ? top / bottom : 1.0;
  // How full the four corner patches (1/4 of the box's width and height) are:
  // a square's are full, a circle's nearly empty (its edge cuts off ~80% of each).
  const int cw = std::max(1, bw / 4), ch = std::max(1, bh / 4);
  int in_corners = 0;
  for (int i : best) {
    const int x = i % w, y = i / w;
    const bool left = x < x0 + cw, right = x > x1 - cw, upper = y < y0 + ch, lower = y > y1 - ch;
    in_corners += (left || right) && (upper || lower);
  }
  v.corners = double(in_corners) / (4.0 * cw * ch);
  if (v.taper < kTriangleTaper)
    v.shape = "triangle";
  else
    v.shape = v.corners > kSquareCorners ? "square" : "circle";
  return v;
}

std::map<std::string, Rgb> palette(const json& j, const char* key, bool xy = false) {
  std::map<std::string, Rgb> out;
  if (!j.contains(key) || !j[key].is_object()) throw BadInput(std::string("dataset json: no '") + key + "' object");
  for (const auto& [name, value] : j[key].items()) {
    if (!value.is_array() || value.size() != (xy ? 2u : 3u))
      throw BadInput(std::string("dataset json: ") + key + "." + name + " is not a list of " + (xy ? "2" : "3") +
                     " numbers");
    out[name] = {value[0].get<double>(), value[1].get<double>(), xy ? 0.0 : value[2].get<double>()};
  }
  return out;
}

int run(int argc, char** argv) {
  std::string out_dir, dataset_path, report_path;
  double min_accuracy = 0.9;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--min-accuracy" && i + 1 < argc) {
      min_accuracy = std::stod(argv[++i]);
    } else if (a == "--report" && i + 1 < argc) {
      report_path = argv[++i];
    } else if (a == "-h" || a == "--help") {
      std::cout << "usage: dpinfer_check_shapes OUT DATASET_JSON [--min-accuracy 0.9] [--report FILE.json]\n"
                   "Judges each image of OUT/metadata.jsonl against its caption (colour and shape).\n";
      return 0;
    } else if (out_dir.empty()) {
      out_dir = a;
    } else if (dataset_path.empty()) {
      dataset_path = a;
    } else {
      throw BadInput("unexpected argument '" + a + "'; see --help");
    }
  }
  if (dataset_path.empty()) throw BadInput("expected OUT and DATASET_JSON; see --help");
  std::ifstream dataset_file(dataset_path);
  if (!dataset_file) throw BadInput(dataset_path + ": cannot open");
  const json dataset = json::parse(dataset_file);
  const auto colours = palette(dataset, "colours"), backgrounds = palette(dataset, "backgrounds");
  const auto positions = palette(dataset, "positions", true);

  // "a red circle in the top left on a white background"
  const std::regex caption_re("^a (\\w+) (\\w+) in the ([a-z ]+?) on a (\\w+) background$");
  const std::string metadata_path = out_dir + "/metadata.jsonl";
  std::ifstream metadata(metadata_path);
  if (!metadata) throw BadInput(metadata_path + ": cannot open (run dpinfer generate/launch with --out " + out_dir + ")");
  json report = json::array();
  int total = 0, correct = 0, colour_ok = 0, shape_ok = 0, position_ok = 0, background_ok = 0;
  std::string line;
  for (int line_no = 1; std::getline(metadata, line); ++line_no) {
    if (line.empty()) continue;
    const json m = json::parse(line);
    const std::string prompt = m.value("prompt", ""), image = m.value("file_name", "");
    std::smatch c;
    if (!std::regex_match(prompt, c, caption_re))
      throw BadInput(metadata_path + ":" + std::to_string(line_no) + ": prompt '" + prompt +
                     "' is not 'a COLOUR SHAPE in the POSITION on a BACKGROUND background'");
    const Verdict v = analyse(load_png(out_dir + "/" + image), colours, backgrounds, positions);
    const bool ok = v.colour == c[1] && v.shape == c[2];
    ++total;
    correct += ok;
    colour_ok += v.colour == c[1];
    shape_ok += v.shape == c[2];
    position_ok += v.position == c[3];
    background_ok += v.background == c[4];
    report.push_back({{"image", image}, {"prompt", prompt}, {"correct", ok}, {"colour", v.colour},
                      {"shape", v.shape}, {"position", v.position}, {"background", v.background},
                      {"pixels", v.pixels}, {"fill", v.fill}, {"taper", v.taper}, {"corners", v.corners}});
    if (!ok)
      std::cout << "wrong: " << image << " '" << prompt << "': saw a " << v.colour << " " << v.shape << " ("
                << v.pixels << " px, fill " << v.fill << ", corners " << v.corners << ", taper " << v.taper << ")\n";
  }
  if (total == 0) throw BadInput(metadata_path + ": no images");
  const double accuracy = double(correct) / total;
  char summary[256];
  std::snprintf(summary, sizeof summary,
                "check_shapes: %d/%d correct (%.1f%%): colour %d, shape %d, position %d, background %d; need %.0f%%",
                correct, total, 100 * accuracy, colour_ok, shape_ok, position_ok, background_ok, 100 * min_accuracy);
  std::cout << summary << "\n";
  if (!report_path.empty()) {
    std::ofstream r(report_path);
    r << json{{"correct", correct}, {"total", total}, {"accuracy", accuracy}, {"colour", colour_ok},
              {"shape", shape_ok}, {"position", position_ok}, {"background", background_ok}, {"images", report}}
             .dump(1)
      << "\n";
  }
  return accuracy >= min_accuracy ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const BadInput& e) {
    std::cerr << "dpinfer_check_shapes: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "dpinfer_check_shapes: " << e.what() << "\n";
    return 2;
  }
}
