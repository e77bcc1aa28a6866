#pragma once
// What a test run leaves in its --out, read back the same way by every process test: the
// decoded PNGs, the items that have an "ok" record, and the numbered prompts the runs make.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dpinfer::test {

/// `dpinfer launch --nproc-per-node 2 --master-port PORT -- WORKER generate ARGS...`: two ranks of
/// `worker` (the test double, or dpinfer-worker) on a store port the test knows.
std::vector<std::string> two_rank_launch(const std::string& worker, int port, const std::vector<std::string>& args);

/// n distinct prompts, one per line: "prompt number 0\n" ... "prompt number n-1\n".
std::string numbered_prompts(int n);

/// Every PNG under `dir` and its subdirectories (--files-per-dir), by path relative to `dir`,
/// as decoded pixels.
std::map<std::string, std::vector<uint8_t>> png_pixels(const std::string& dir);

/// How often each item index appears among the "ok" records of `dir`'s manifests.
std::map<int, int> ok_counts(const std::string& dir);

}  // namespace dpinfer::test
