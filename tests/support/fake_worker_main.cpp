// dpinfer_test_worker: `dpinfer generate` with the fake pipeline (tests only).
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "support/fake_pipeline.h"

namespace {

/// DPINFER_FAKE_EXIT_DELAY_MS=MS or MS@RANK: the process lingers that long after
/// run_generate() returns (on rank RANK only), as a worker freeing a big model and
/// tearing LibTorch down does, while its peers may already have seen it fail.
void linger_at_exit() {
  const char* spec = std::getenv("DPINFER_FAKE_EXIT_DELAY_MS");
  if (!spec) return;
  const std::string s = spec;
  const size_t at = s.find('@');
  const char* rank = std::getenv("RANK");
  if (at != std::string::npos && (!rank || s.substr(at + 1) != rank)) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(s.substr(0, at).c_str())));
}

}  // namespace

int main(int argc, char** argv) {
  const int status = dpinfer::worker::generate_main(argc, argv, dpinfer::test::make_fake_pipeline);
  linger_at_exit();
  return status;
}
