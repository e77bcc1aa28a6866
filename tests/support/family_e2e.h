#pragma once
// What the model families' end-to-end tests (tests/worker/test_*_e2e.cpp) check the same way: a PNG
// against a diffusers golden image, and dpinfer's promise that an image depends on its own prompt and
// seed only, whatever its batch or rank.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "support/temp_dir.h"

namespace dpinfer::test {

/// Issue 4's bound (image_compare.h) between the PNG at `png_path` and the uint8 image `name` of
/// `golden_images` (a safetensors file of HWC images, as the tools/fixtures scripts write them).
void expect_png_matches_golden(const std::string& png_path, const std::string& golden_images, const std::string& name);

/// The same for decoded pixels (RGB, HWC).
void expect_pixels_match_golden(const std::vector<uint8_t>& pixels, const std::string& golden_images,
                                const std::string& name);

/// Mean |d| of `pixels` (RGB, HWC) from the uint8 image `name` of `golden_images`; a huge value when the
/// golden lacks it or has another size. For images held to the cross-CPU bound of a half-precision golden
/// (mean |d| <= 2), where the bit-for-bit check is PipelineParity's.
double mean_distance_from_golden(const std::vector<uint8_t>& pixels, const std::string& golden_images,
                                 const std::string& name);

/// Runs `dpinfer generate` on `args` (a prompts file of three lines, --model and its settings) as
/// three batches of one and as one batch of three, and `dpinfer launch` on three ranks at batch
/// size 3; expects the same three images from each (bit for bit across ranks at the same batch
/// size; to float rounding between the batch sizes, which run other matrix shapes), and
/// `dpinfer status` to find the run complete.
/// `dir` holds the outputs; `env` is added to the processes' environment.
void expect_batch_and_rank_independence(const TempDir& dir, const std::vector<std::string>& args,
                                        const std::map<std::string, std::string>& env);

/// Issue 34's promise, in whatever dtype and --batch-size `args` give (a prompts file first, then
/// --model and its settings): the PNGs, byte for byte, of `dpinfer generate` alone equal those
/// of `dpinfer launch` on 2 ranks (contiguous) and 3 (strided), of two outer shards (--shard 0/2,
/// 1/2), and of the 3-rank run with items 1 and 4 deleted, resumed on 2 ranks (dynamic).
/// The file needs at least 5 items.
void expect_same_pngs_whatever_the_ranks(const TempDir& dir, const std::vector<std::string>& args,
                                         const std::map<std::string, std::string>& env);

/// expect_same_pngs_whatever_the_ranks() in bf16 at --batch-size 2 and 2 steps, on 5 prompts of
/// very different lengths (one with a negative prompt) and `model` with `extra` options (its size
/// and settings): three batches, the last one short.
void expect_bf16_pngs_whatever_the_ranks(const TempDir& dir, const std::string& model,
                                         const std::vector<std::string>& extra,
                                         const std::map<std::string, std::string>& env);

/// Copies tests/data/input-images/<from> to <to> in `dir`, for each {from, to}: an edit test's input images beside its
/// prompts file.
void copy_input_images(const TempDir& dir, const std::vector<std::pair<std::string, std::string>>& files);

/// How many times `needle` occurs in `text` (e.g. a worker's "pipeline loaded" lines).
size_t occurrences(const std::string& text, const std::string& needle);

}  // namespace dpinfer::test
