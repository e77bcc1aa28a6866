#include "support/run_outputs.h"

#include <filesystem>

#include "support/png_reader.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace dpinfer::test {

std::vector<std::string> two_rank_launch(const std::string& worker, int port, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {dpinfer_binary(), "launch", "--nproc-per-node", "2", "--master-port",
                                   std::to_string(port), "--", worker, "generate"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

std::string numbered_prompts(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += "prompt number " + std::to_string(i) + "\n";
  return s;
}

std::map<std::string, std::vector<uint8_t>> png_pixels(const std::string& dir) {
  namespace fs = std::filesystem;
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().extension() == ".png")
      out[e.path().lexically_relative(dir).generic_string()] = read_png(e.path().string()).pixels;
  return out;
}

std::map<int, int> ok_counts(const std::string& dir) {
  std::map<int, int> counts;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("manifest", 0) != 0) continue;
    for (const auto& rec : read_jsonl(e.path().string()))
      if (rec["status"] == "ok") ++counts[rec["index"].get<int>()];
  }
  return counts;
}

}  // namespace dpinfer::test
