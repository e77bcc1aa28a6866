// libFuzzer: plan::parse_generate_args, the options of `dpinfer generate` and `dpinfer
// status`. With the first byte even, the rest is a --config file; with it odd, the rest
// is command-line words, one per line, after the prompts file.
#include <cstdint>
#include <string>
#include <vector>

#include "dpinfer/plan/generate_options.h"
#include "dpinfer/util/error.h"
#include "fuzz_support.h"

using namespace dpinfer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::MemFile file("config.json");
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<std::string> args{"p.txt"};
  if (data[0] & 1) {
    size_t start = 0;
    while (start <= rest.size()) {
      const size_t nl = rest.find('\n', start);
      args.push_back(rest.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
  } else {
    args.insert(args.end(), {"--config", file.write(rest.data(), rest.size())});
  }
  try {
    std::string help;
    const plan::GenerateOptions o = plan::parse_generate_args(args, &help);
    (void)o.to_json().dump(2, ' ', false, nlohmann::json::error_handler_t::replace);  // as run.json is written
  } catch (const UsageError& e) {
    fuzz::check_message(e.what());
  }
  return 0;
}
