#pragma once
// What the model families' end-to-end tests (tests/worker/test_*_e2e.cpp) check the same way: a PNG
// against a diffusers golden image, and dpinfer's promise that an image depends on its own prompt and
// seed only, whatever its batch or rank.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "support/temp_dir.h"

namespace dpinfer::test {

/// Issue 4's bound (image_compare.h) between the PNG at `png_path` and the uint8 image `name` of
/// `golden_images` (a safetensors file of HWC images, as the tools/fixtures scripts write them).
void expect_png_matches_golden(const std::string& png_path, const std::string& golden_images, const std::string& name);

/// The same for decoded pixels (RGB, HWC).
void expect_pixels_match_golden(const std::vector<uint8_t>& pixels, const std::string& golden_images,
                                const std::string& name);

/// Runs `dpinfer generate` on `args` (a prompts file of three lines, --model and its settings) as
/// three batches of one and as one batch of three, and `dpinfer launch` on three ranks; expects the
/// same three images from each (bit for bit across ranks, each a batch of one; to float rounding
/// for the batch, which runs other matrix shapes), and `dpinfer status` to find the run complete.
/// `dir` holds the outputs; `env` is added to the processes' environment.
void expect_batch_and_rank_independence(const TempDir& dir, const std::vector<std::string>& args,
                                        const std::map<std::string, std::string>& env);

/// How many times `needle` occurs in `text` (e.g. a worker's "pipeline loaded" lines).
size_t occurrences(const std::string& text, const std::string& needle);

}  // namespace dpinfer::test
