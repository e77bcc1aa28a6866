// The memory plan (issue 26 item 6; pipeline/memory_plan.h, device_memory.h): the weights it counts are
// inspect's, the phases hold what each residency keeps on the device, the choices come in order of cost (what
// keeps the pixels first, offload only on a GPU, --exact stops before fp8 and tiling), the first that fits is
// chosen and a run that cannot fit is refused with its numbers; the counting CPU allocator counts, keeps the
// peak and refuses an allocation over its cap as the CUDA allocator does.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/device_memory.h"
#include "dpinfer/pipeline/inspect.h"
#include "dpinfer/pipeline/memory_plan.h"
#include "dpinfer/pipeline/models/vision/qwen2_5_vl_vision.h"
#include "dpinfer/util/error.h"

using namespace dpinfer;
using namespace dpinfer::pipeline;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kPipelines = std::string(DPINFER_TEST_DATA_DIR) + "/pipelines/";

/// A FLUX.1-like pipeline in round numbers: a 1 G-element text encoder (half of it fp8-stored), a 2 G-element
/// transformer of 10 blocks of 150 M (half stored), and a 100 M VAE with 1024 px tiles.
std::vector<ComponentFootprint> round_pipeline() {
  ComponentFootprint te;
  te.name = "text_encoder";
  te.class_name = "T5EncoderModel";
  te.role = ComponentRole::kTextEncoder;
  te.elements = 1'000'000'000;
  te.stored_elements = 500'000'000;
  te.facts = {{"d_model", 4096}};
  ComponentFootprint den;
  den.name = "transformer";
  den.class_name = "FluxTransformer2DModel";
  den.role = ComponentRole::kDenoiser;
  den.elements = 2'000'000'000;
  den.stored_elements = 1'000'000'000;
  den.block_elements = 1'500'000'000;
  den.block_stored_elements = 750'000'000;
  den.largest_block_elements = 150'000'000;
  den.largest_block_stored_elements = 75'000'000;
  den.facts = {{"inner_dim", 3072}};
  ComponentFootprint vae;
  vae.name = "vae";
  vae.class_name = "AutoencoderKL";
  vae.role = ComponentRole::kVae;
  vae.elements = 100'000'000;
  vae.facts = {{"block_out_channels", {128, 256, 512, 512}}, {"scale_factor", 8}, {"tiling", "1024 px tiles"}, {"tile_sample_size", 1024}};
  return {te, den, vae};
}

MemoryShape shape(bool cuda, int64_t side = 1024) {
  MemoryShape s;
  s.width = side;
  s.height = side;
  s.dtype = "bf16";
  s.cuda = cuda;
  return s;
}

TEST(MemoryPlan, PhasesHoldWhatEachResidencyKeepsOnTheDevice) {
  const MemoryPlanner planner(round_pipeline(), shape(true));
  MemoryLevers resident;
  const MemoryEstimate all = planner.estimate(resident);
  // bf16: 2 bytes an element; everything on the device in every phase.
  EXPECT_DOUBLE_EQ(all.encode.weights, 2 * 3.1e9);
  EXPECT_DOUBLE_EQ(all.denoise.weights, 2 * 3.1e9);
  MemoryLevers two_phase;
  two_phase.two_phase = true;
  const MemoryEstimate tp = planner.estimate(two_phase);
  EXPECT_DOUBLE_EQ(tp.encode.weights, 2 * 1e9);     // the text encoder alone: the VAE leaves with the denoiser
  EXPECT_DOUBLE_EQ(tp.denoise.weights, 2 * 2.1e9);  // transformer + VAE
  MemoryLevers model;
  model.offload = "model";
  const MemoryEstimate m = planner.estimate(model);
  EXPECT_DOUBLE_EQ(m.encode.weights, 2 * 1e9);
  EXPECT_DOUBLE_EQ(m.denoise.weights, 2 * 2e9);
  EXPECT_DOUBLE_EQ(m.decode.weights, 2 * 1e8);
  MemoryLevers blocks;
  blocks.offload = "blocks";
  blocks.two_phase = true;
  blocks.blocks_per_group = 2;
  const MemoryEstimate b = planner.estimate(blocks);
  // Outside the blocks (0.5 G), two groups of two blocks (4 x 150 M), and the VAE.
  EXPECT_DOUBLE_EQ(b.denoise.weights, 2 * (0.5e9 + 4 * 150e6 + 1e8));
  // fp8: the stored elements take one byte.
  MemoryLevers fp8;
  fp8.weight_storage = "fp8";
  EXPECT_DOUBLE_EQ(planner.estimate(fp8).encode.weights, 2 * 0.5e9 + 0.5e9 + 2 * 1e9 + 1e9 + 2 * 1e8);
  MemoryLevers fp8_denoiser;
  fp8_denoiser.weight_storage = "fp8-denoiser";
  EXPECT_DOUBLE_EQ(planner.estimate(fp8_denoiser).encode.weights, 2 * 1e9 + 2 * 1e9 + 1e9 + 2 * 1e8);
  // The activations grow with the image: a 2048^2 decode needs 4x a 1024^2 one, less with tiling.
  const MemoryPlanner large(round_pipeline(), shape(true, 2048));
  MemoryLevers tiled;
  tiled.vae_tiling = true;
  EXPECT_LT(large.estimate(tiled).decode.activations, large.estimate(resident).decode.activations);
  EXPECT_GT(large.estimate(resident).decode.activations, 3.5 * all.decode.activations);
}

TEST(MemoryPlan, ChoicesComeInOrderOfCostAndExactKeepsThePixels) {
  const MemoryPlanner gpu(round_pipeline(), shape(true, 2048));
  std::vector<std::string> names;
  for (const MemoryLevers& l : gpu.candidates({}, false)) names.push_back(l.describe());
  ASSERT_GE(names.size(), 8u);
  EXPECT_EQ(names[0], "everything resident");
  EXPECT_EQ(names[1], "two-phase encoding");
  EXPECT_EQ(names[2], "--offload model");
  EXPECT_EQ(names[3], "two-phase encoding, --offload blocks:1");
  EXPECT_EQ(names[4], "--vae-tiling");  // at 2048^2 the 1024 px tiles cut the decode
  EXPECT_EQ(names.back(), "two-phase encoding, --offload blocks:1, --vae-tiling, --weight-storage fp8");
  for (const MemoryLevers& l : gpu.candidates({}, true)) EXPECT_FALSE(l.changes_pixels()) << l.describe();
  // At 1024^2 one tile is the whole image: tiling is no choice.
  const MemoryPlanner one_tile(round_pipeline(), shape(true, 1024));
  for (const MemoryLevers& l : one_tile.candidates({}, false)) EXPECT_FALSE(l.vae_tiling) << l.describe();
  // On the CPU offload saves nothing: only resident and two-phase.
  const MemoryPlanner cpu(round_pipeline(), shape(false));
  for (const MemoryLevers& l : cpu.candidates({}, false)) EXPECT_EQ(l.offload, "none") << l.describe();
  // What the user gave stays.
  MemoryPlanner::Fixed fixed;
  fixed.weight_storage = "fp8";
  for (const MemoryLevers& l : gpu.candidates(fixed, true)) EXPECT_EQ(l.weight_storage, "fp8") << l.describe();
  fixed = {};
  fixed.offload = "model";
  for (const MemoryLevers& l : gpu.candidates(fixed, false)) EXPECT_EQ(l.offload, "model") << l.describe();
}

TEST(MemoryPlan, ChoosesTheFirstThatFitsAndRefusesWithItsNumbers) {
  const MemoryPlanner planner(round_pipeline(), shape(true));
  const std::vector<MemoryLevers> all = planner.candidates({}, false);
  // A budget just above the third choice's peak and below the first two's.
  const double third = planner.estimate(all[2]).peak();
  ASSERT_LT(third, planner.estimate(all[1]).peak());
  const MemoryEstimate chosen = planner.choose(third + 1, {}, false);
  EXPECT_EQ(chosen.levers.describe(), all[2].describe());
  const auto next = planner.next_after(chosen.levers, {}, false);
  ASSERT_TRUE(next.has_value());
  EXPECT_LT(planner.estimate(*next).peak(), chosen.peak());

  try {
    planner.choose(1e8, {}, false);
    FAIL() << "0.1 GB fits nothing";
  } catch (const OutOfMemory& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find("--max-device-memory 100.0 MB: the run does not fit; the smallest plan"), std::string::npos)
        << message;
    EXPECT_NE(message.find("lower --batch-size or the image size"), std::string::npos) << message;
  }
  // --exact: a budget only fp8 meets is refused, naming what would fit without it.
  double smallest_exact = 1e30;
  for (const MemoryLevers& l : planner.candidates({}, true)) smallest_exact = std::min(smallest_exact, planner.estimate(l).peak());
  double smallest = 1e30;
  for (const MemoryLevers& l : all) smallest = std::min(smallest, planner.estimate(l).peak());
  ASSERT_LT(smallest, smallest_exact);
  try {
    planner.choose((smallest + smallest_exact) / 2, {}, true);
    FAIL() << "only fp8 fits";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("without --exact, "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--weight-storage fp8"), std::string::npos) << e.what();
  }
}

// A reference's tokens (FLUX.1 Kontext, FLUX.2) join the denoiser's sequence: a 1 MP reference on a 1 MP image
// doubles the transformer's image tokens, so the denoise phase's activations grow by that share; the other phases
// and the weights do not.
TEST(MemoryPlan, AReferenceLengthensTheDenoisersSequence) {
  MemoryShape plain = shape(true);
  plain.text_tokens = 0;  // the image's tokens alone, so that the ratio is exact
  MemoryShape referenced = plain;
  referenced.reference_pixels = 1024 * 1024;
  const MemoryEstimate a = MemoryPlanner(round_pipeline(), plain).estimate({});
  const MemoryEstimate b = MemoryPlanner(round_pipeline(), referenced).estimate({});
  EXPECT_DOUBLE_EQ(b.denoise.weights, a.denoise.weights);
  EXPECT_GT(b.denoise.activations, a.denoise.activations);
  EXPECT_DOUBLE_EQ(b.encode.total(), a.encode.total());
  EXPECT_DOUBLE_EQ(b.decode.total(), a.decode.total());
  // Two references (FLUX.2's image list; the worker multiplies the bound by the most an item has) lengthen it again.
  MemoryShape two = plain;
  two.reference_pixels = 2 * 1024 * 1024;
  EXPECT_GT(MemoryPlanner(round_pipeline(), two).estimate({}).denoise.activations, b.denoise.activations);
  // The bound the plan takes per pipeline class, from the run's settings and the largest item's pixels.
  EXPECT_EQ(reference_pixels_bound("Flux2KleinPipeline", nlohmann::json::object(), 4096), 1024 * 1024);
  EXPECT_EQ(reference_pixels_bound("FluxKontextPipeline", nlohmann::json::object(), 4096), 800 * 1328);
  EXPECT_EQ(reference_pixels_bound("FluxKontextPipeline", {{"auto_resize", false}}, 4096), 4096);
  EXPECT_EQ(reference_pixels_bound("FluxPipeline", nlohmann::json::object(), 4096), 0);  // img2img: no tokens added
  EXPECT_EQ(reference_pixels_bound("QwenImageEditPlusPipeline", nlohmann::json::object(), 4096), 1088 * 1088);
  EXPECT_EQ(reference_pixels_bound("QwenImagePipeline", nlohmann::json::object(), 4096), 0);
  EXPECT_EQ(reference_pixels_bound("NoSuchPipeline", nlohmann::json::object(), 4096), 0);
  // Which classes' references size an item that sets no size: the family rows' reference_facts.
  EXPECT_TRUE(reference_sets_item_size("Flux2Pipeline"));
  EXPECT_TRUE(reference_sets_item_size("QwenImageEditPipeline"));
  EXPECT_FALSE(reference_sets_item_size("FluxKontextPipeline"));
  EXPECT_FALSE(reference_sets_item_size("StableDiffusionPipeline"));
}

// Qwen-Image-Edit's vision tower (a derived component) reads each reference in 14x14 patches before the text path,
// which reads one token per 2x2 of them beside the prompt: the encode phase holds the larger of the two working
// memories, the tower's weights count with the text encoders', and without references nothing is added.
TEST(MemoryPlan, AVisionTowerWorksOnTheReferencesPatches) {
  std::vector<ComponentFootprint> edit = round_pipeline();
  edit[0].class_name = "Qwen2_5_VLForConditionalGeneration";
  edit[0].facts = {{"hidden_size", 3584}, {"max_position_embeddings", 128000}};
  ComponentFootprint tower;
  tower.name = "text_encoder.visual";
  tower.class_name = kQwen2_5_VLVisionClass;
  tower.role = ComponentRole::kTextEncoder;
  tower.elements = 676'550'144;
  tower.facts = {{"hidden_size", 1280}, {"patch_size", 14}, {"spatial_merge_size", 2}};
  edit.push_back(tower);
  MemoryShape plain = shape(true);
  plain.text_tokens = 0;  // the references' tokens alone, so that the sums are exact
  MemoryShape referenced = plain;
  referenced.reference_pixels = 1036 * 1036;  // the real shape's measured image: 5476 patches, 1369 image tokens
  const MemoryEstimate without_tower = MemoryPlanner(round_pipeline(), referenced).estimate({});
  const MemoryEstimate a = MemoryPlanner(edit, plain).estimate({});
  const MemoryEstimate b = MemoryPlanner(edit, referenced).estimate({});
  EXPECT_DOUBLE_EQ(b.encode.weights, a.encode.weights);
  EXPECT_DOUBLE_EQ(b.encode.weights - without_tower.encode.weights, 676'550'144.0 * 2);  // bf16
  EXPECT_DOUBLE_EQ(a.encode.activations, 0);  // no reference, no prompt tokens: nothing to work on
  // Each item's two encodings (prompt and negative) of 1369 image tokens wait beside every phase.
  const double held = 2.0 * 1369 * 3584 * 2;
  // The tower's 48 widths of 1280 per patch (0.67 GB) outweigh the text path's 64 of 3584 per image token (0.63 GB).
  EXPECT_DOUBLE_EQ(b.encode.activations, 48.0 * 5476 * 1280 * 2 + held);
  // With a long prompt the text path's is the larger.
  MemoryShape long_prompt = referenced;
  long_prompt.text_tokens = 1024;
  const MemoryEstimate c = MemoryPlanner(edit, long_prompt).estimate({});
  EXPECT_DOUBLE_EQ(c.encode.activations, 64.0 * (1024 + 1369) * 3584 * 2 + 2.0 * (1024 + 1369) * 3584 * 2);
}

// --offload blocks keeps a text encoder's layers (T5, the Qwen decoders) in host memory too: while it encodes, the
// device holds what lies outside its layers and two groups of its largest layer, as for the denoiser.
TEST(MemoryPlan, BlockOffloadTakesTheTextEncodersLayersToo) {
  std::vector<ComponentFootprint> layered = round_pipeline();
  layered[0].block_elements = 900'000'000;  // 24 layers, the largest 40 M; 100 M outside (the embedding)
  layered[0].largest_block_elements = 40'000'000;
  MemoryLevers blocks;
  blocks.two_phase = true;
  blocks.offload = "blocks";
  const MemoryEstimate with = MemoryPlanner(layered, shape(true)).estimate(blocks);
  const MemoryEstimate without = MemoryPlanner(round_pipeline(), shape(true)).estimate(blocks);
  EXPECT_DOUBLE_EQ(with.encode.weights, without.encode.weights - (1e9 - (100e6 + 2 * 40e6)) * 2);  // bf16
  EXPECT_DOUBLE_EQ(with.denoise.weights, without.denoise.weights);
  EXPECT_DOUBLE_EQ(with.decode.weights, without.decode.weights);
  // Everything resident: the text encoder's layers are not offloaded.
  EXPECT_DOUBLE_EQ(MemoryPlanner(layered, shape(true)).estimate({}).encode.weights,
                   MemoryPlanner(round_pipeline(), shape(true)).estimate({}).encode.weights);
}

// LoRAs (loading/lora.h): on a GPU a merged LoRA keeps nothing on the device, an unfused one (fp8 or GGUF weights)
// its factors; on the CPU, the device being the host, the factors and the touched weights' originals. In the run
// dtype, through every phase.
TEST(MemoryPlan, CountsWhatALoraKeepsWhereItKeepsIt) {
  MemoryShape plain_gpu = shape(true), plain_cpu = shape(false);
  MemoryShape lora_gpu = plain_gpu, lora_cpu = plain_cpu;
  for (MemoryShape* s : {&lora_gpu, &lora_cpu}) {
    s->lora_factor_elements = 10'000'000;
    s->lora_touched_elements = 300'000'000;
  }
  MemoryLevers fp8;
  fp8.weight_storage = "fp8";
  const auto weights = [](const MemoryShape& s, const MemoryLevers& levers) {
    const MemoryEstimate e = MemoryPlanner(round_pipeline(), s).estimate(levers);
    return std::vector<double>{e.encode.weights, e.denoise.weights, e.decode.weights};
  };
  for (size_t phase = 0; phase < 3; ++phase) {
    SCOPED_TRACE(phase);
    EXPECT_DOUBLE_EQ(weights(lora_gpu, {})[phase], weights(plain_gpu, {})[phase]);  // merged: host memory
    EXPECT_DOUBLE_EQ(weights(lora_gpu, fp8)[phase], weights(plain_gpu, fp8)[phase] + 10'000'000 * 2.0);
    EXPECT_DOUBLE_EQ(weights(lora_cpu, {})[phase], weights(plain_cpu, {})[phase] + 310'000'000 * 2.0);
  }
}

// A LoRA file's footprint from its header: the weights its factors touch are the ones diffusers merges
// (make_lora_fixtures.py's merged keys, in tiny-sd1-lora.golden/merged.safetensors), in PEFT's, kohya's and
// LoCon's spellings.
TEST(MemoryPlan, ALorasFootprintIsTheWeightsItMerges) {
  const std::string loras = std::string(DPINFER_TEST_DATA_DIR) + "/loras/";
  const auto merged = io::SafetensorsFile::open(loras + "tiny-sd1-lora.golden/merged.safetensors");
  for (const auto& [file, tag] : std::vector<std::pair<std::string, std::string>>{
           {"sd1-peft.safetensors", "peft_scaled/"}, {"sd1-kohya.safetensors", "kohya/"}, {"sd1-locon.safetensors", "locon/"}}) {
    SCOPED_TRACE(file);
    int64_t touched = 0;
    for (const io::TensorView& t : merged->tensors())
      if (t.name.rfind(tag, 0) == 0) touched += t.numel();
    ASSERT_GT(touched, 0);
    int64_t factors = 0;
    const auto lora = io::SafetensorsFile::open(loras + file);
    for (const io::TensorView& t : lora->tensors()) factors += t.numel();
    const LoraFootprint f = lora_footprint(loras + file);
    EXPECT_EQ(f.touched_elements, touched);
    EXPECT_EQ(f.factor_elements, factors);
  }
}

TEST(MemoryPlan, CountsTheWeightsInspectCounts) {
  // tiny-flux-dev in fp32: the plan's weights are inspect's elements x 4 bytes, and its blocks are counted.
  const InspectReport report = inspect_model(kPipelines + "tiny-flux-dev");
  ASSERT_TRUE(report.ok()) << report.error;
  MemoryShape s = shape(false, 64);
  s.dtype = "fp32";
  const MemoryPlanner planner(report, s);
  int64_t elements = 0;
  for (const ComponentReport& c : report.models) elements += c.module_elements;
  EXPECT_DOUBLE_EQ(planner.estimate({}).encode.weights, 4.0 * static_cast<double>(elements));
  const ComponentReport& transformer = report.component("transformer");
  EXPECT_GT(transformer.block_elements, 0);
  EXPECT_GT(transformer.largest_block_elements, 0);
  EXPECT_LT(transformer.block_elements, transformer.module_elements);
  EXPECT_EQ(report.component("vae").block_elements, 0);
  const std::string text = memory_plan_text(report, s, 1e9, false);
  EXPECT_NE(text.find("memory plan at 64x64, batch 1, fp32 on the CPU"), std::string::npos) << text;
  EXPECT_NE(text.find("with --max-device-memory 1.00 GB: everything resident"), std::string::npos) << text;
}

TEST(DeviceMemory, TheCountingCpuAllocatorCountsKeepsThePeakAndRefusesOverItsCap) {
  DeviceMemory::start_counting("cpu");
  ASSERT_TRUE(DeviceMemory::counting("cpu"));
  const int64_t before = DeviceMemory::allocated_bytes("cpu");
  DeviceMemory::reset_peak("cpu");
  {
    at::Tensor t = at::empty({1000, 1000}, at::kFloat);  // 4 MB
    EXPECT_GE(DeviceMemory::allocated_bytes("cpu") - before, 4'000'000);
  }
  EXPECT_EQ(DeviceMemory::allocated_bytes("cpu"), before);
  EXPECT_GE(DeviceMemory::peak_bytes("cpu") - before, 4'000'000);
  DeviceMemory::cap("cpu", before + 8'000'000);
  at::Tensor fits = at::ones({1000, 1000}, at::kFloat);
  EXPECT_THROW(at::ones({2000, 2000}, at::kFloat), c10::OutOfMemoryError);
  EXPECT_EQ(fits.sum().item<float>(), 1e6f);  // the refusal left the count and the tensors as they were
  DeviceMemory::cap("cpu", 0);  // no cap: the rest of this process allocates freely
  at::Tensor large = at::ones({2000, 2000}, at::kFloat);
  EXPECT_EQ(large.numel(), 4'000'000);
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
