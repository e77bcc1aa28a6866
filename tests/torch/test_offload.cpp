// --offload (issue 26 item 4; nn/offload.h, ComponentResidency, LoadRequest::offload) on the CPU, where
// the device is the host: the moves are copies within host memory, which run the bookkeeping of a GPU
// run. BlockOffload on small block lists: at most the group that runs and the one prefetched are on
// the device, each block runs on its device copy, float8 weights move as stored, and a forward ends
// with every block back on its host copy. Then a tiny pipeline of every family: the images with
// --offload model and --offload blocks[:N] are those without, bit for bit, with two-phase chunks and
// fp8 storage too, and with LoRAs merged into offloaded weights; model offload has the denoiser alone
// on the device while it denoises; a UNet refuses blocks in one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/InferenceMode.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/container/modulelist.h>

#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/pipeline/nn/offload.h"
#include "dpinfer/util/error.h"
#include "support/param_names.h"
#include "torch/golden_case.h"

using namespace dpinfer;
using nlohmann::json;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kData = DPINFER_TEST_DATA_DIR;
const std::string kRoot = kData + "/../..";

/// A model of two block lists of Linear layers (5 and 3 blocks) between an embedder and a head, the
/// shape of FLUX.1's transformer_blocks and single_transformer_blocks.
struct ToyModel : torch::nn::Module {
  ToyModel() {
    c10::InferenceMode guard;
    const auto options = at::TensorOptions().dtype(at::kFloat);
    embed = register_module("x_embedder", pipeline::nn::Linear(4, 8, true, options));
    auto first = register_module("transformer_blocks", torch::nn::ModuleList());
    for (int i = 0; i < 5; ++i) {
      blocks.push_back(pipeline::nn::Linear(8, 8, true, options));
      first->push_back(blocks.back());
    }
    auto second = register_module("single_transformer_blocks", torch::nn::ModuleList());
    for (int i = 0; i < 3; ++i) {
      blocks.push_back(pipeline::nn::Linear(8, 8, true, options));
      second->push_back(blocks.back());
    }
    head = register_module("proj_out", pipeline::nn::Linear(8, 2, false, options));
    for (at::Tensor& p : parameters()) p.uniform_(-0.5, 0.5);
  }
  /// The forward as a transformer runs it, with `offload` (or none) and `seen` each block's weight's
  /// data pointer and dtype while it runs; `upto` blocks at most (a First Block Cache skip).
  at::Tensor forward(const at::Tensor& x, pipeline::nn::BlockOffload* offload, size_t upto = 100) {
    const pipeline::nn::OffloadedForward offloaded(offload);
    at::Tensor h = embed(x);
    for (size_t i = 0; i < blocks.size() && i < upto; ++i) {
      const pipeline::nn::BlockOnDevice on_device(offload, *blocks[i]);
      seen.push_back(blocks[i]->weight.data_ptr());
      dtypes.push_back(blocks[i]->weight.scalar_type());
      if (offload) resident.push_back(offload->resident_groups());
      h = at::gelu(blocks[i](h));
    }
    return head(h);
  }
  pipeline::nn::Linear embed{nullptr}, head{nullptr};
  std::vector<pipeline::nn::Linear> blocks;
  std::vector<const void*> seen;
  std::vector<at::ScalarType> dtypes;
  std::vector<int64_t> resident;
};

/// `model`'s parameters set to `from`'s values.
void copy_weights(ToyModel& model, ToyModel& from) {
  c10::InferenceMode guard;
  const std::vector<at::Tensor> to = model.parameters(), values = from.parameters();
  for (size_t i = 0; i < to.size(); ++i) to[i].copy_(values[i]);
}

// Groups of 2 cut within each list: [0 1] [2 3] [4] of the first, [5 6] [7] of the second.
TEST(BlockOffload, HoldsAtMostTheRunningGroupAndThePrefetchedOne) {
  c10::InferenceMode guard;
  const at::Tensor x = at::randn({3, 4});
  ToyModel plain, model;
  copy_weights(model, plain);
  std::vector<const void*> before;
  for (const auto& b : model.blocks) before.push_back(b->weight.data_ptr());
  pipeline::nn::BlockOffload offload(model, {"transformer_blocks", "single_transformer_blocks"}, at::Device(at::kCPU),
                                     2);
  EXPECT_EQ(offload.groups(), 5);
  EXPECT_EQ(offload.resident_groups(), 0) << "between forwards every block is on its host copy";
  std::vector<const void*> host;
  for (const auto& b : model.blocks) host.push_back(b->weight.data_ptr());
  const int64_t block_bytes = (8 * 8 + 8) * 4;
  EXPECT_EQ(offload.offloaded_bytes(), 8 * block_bytes);
  EXPECT_EQ(offload.largest_group_bytes(), 2 * block_bytes);

  for (int pass = 0; pass < 2; ++pass) {
    model.seen.clear();
    model.resident.clear();
    const at::Tensor got = model.forward(x, &offload);
    EXPECT_TRUE(at::equal(got, plain.forward(x, nullptr))) << "pass " << pass;
    ASSERT_EQ(model.seen.size(), 8u);
    for (size_t i = 0; i < 8; ++i) {
      // Each block ran on a copy of its weights made for the run, not on the host copy.
      EXPECT_NE(model.seen[i], host[i]) << "block " << i;
      EXPECT_LE(model.resident[i], 2) << "block " << i;
    }
    // Block 0: its group and the prefetched [2 3]; block 4 ([4], the first list's last group): the
    // next list's [5 6] is prefetched across the lists, as diffusers' lazy prefetch orders them.
    EXPECT_EQ(model.resident[0], 2);
    EXPECT_EQ(model.resident[4], 2);
    EXPECT_EQ(model.resident[7], 1) << "the last group has no next";
    EXPECT_EQ(offload.resident_groups(), 0);
    for (size_t i = 0; i < 8; ++i) EXPECT_EQ(model.blocks[i]->weight.data_ptr(), host[i]) << "block " << i;
  }
  EXPECT_EQ(offload.max_resident_groups(), 2);
  EXPECT_EQ(offload.copies_to_device(), 10) << "each group copied once a forward";
  // The embedder and the head stay where they are (the device), never copied.
  EXPECT_EQ(offload.per_group(), 2);
}

TEST(BlockOffload, OneBlockAGroupHoldsTwoBlocksAtMost) {
  c10::InferenceMode guard;
  ToyModel plain, model;
  copy_weights(model, plain);
  pipeline::nn::BlockOffload offload(model, {"transformer_blocks", "single_transformer_blocks"}, at::Device(at::kCPU),
                                     1);
  const at::Tensor x = at::randn({2, 4});
  EXPECT_TRUE(at::equal(model.forward(x, &offload), plain.forward(x, nullptr)));
  EXPECT_EQ(offload.groups(), 8);
  EXPECT_EQ(offload.max_resident_groups(), 2);
  EXPECT_EQ(offload.copies_to_device(), 8);
}

// A forward that stops after the first block (a First Block Cache step that reuses the residual)
// leaves the prefetched group unrun: end_forward() drops it, and the next forward runs them all.
TEST(BlockOffload, AForwardThatSkipsBlocksLeavesNoneOnTheDevice) {
  c10::InferenceMode guard;
  ToyModel plain, model;
  copy_weights(model, plain);
  pipeline::nn::BlockOffload offload(model, {"transformer_blocks", "single_transformer_blocks"}, at::Device(at::kCPU),
                                     2);
  const at::Tensor x = at::randn({2, 4});
  EXPECT_TRUE(at::equal(model.forward(x, &offload, 1), plain.forward(x, nullptr, 1)));
  EXPECT_EQ(offload.resident_groups(), 0);
  EXPECT_TRUE(at::equal(model.forward(x, &offload), plain.forward(x, nullptr)));
  EXPECT_EQ(offload.resident_groups(), 0);
  EXPECT_LE(offload.max_resident_groups(), 2);
}

// float8 storage (WeightedLayer::store_as, --weight-storage fp8) moves as stored: the device copy a
// block runs on is float8, not a copy in the compute dtype.
TEST(BlockOffload, Float8WeightsMoveAsStored) {
  c10::InferenceMode guard;
  ToyModel model;
  for (auto& b : model.blocks) {
    const at::Tensor w = b->weight.clone(), bias = b->bias.clone();
    b->store_as(at::kFloat8_e4m3fn, at::kFloat);
    b->weight.copy_(w);
    b->bias.copy_(bias);
  }
  const at::Tensor x = at::randn({2, 4});
  model.dtypes.clear();
  const at::Tensor want = model.forward(x, nullptr);
  pipeline::nn::BlockOffload offload(model, {"transformer_blocks", "single_transformer_blocks"}, at::Device(at::kCPU),
                                     3);
  model.dtypes.clear();
  EXPECT_TRUE(at::equal(model.forward(x, &offload), want));
  for (at::ScalarType t : model.dtypes) EXPECT_EQ(t, at::kFloat8_e4m3fn);
  EXPECT_EQ(offload.offloaded_bytes(), 8 * (8 * 8 + 8));  // one byte a value
}

TEST(BlockOffload, RefusesABlockOutsideItsListsAndAListThatIsNone) {
  c10::InferenceMode guard;
  ToyModel model;
  pipeline::nn::BlockOffload offload(model, {"transformer_blocks"}, at::Device(at::kCPU), 2);
  EXPECT_EQ(offload.groups(), 3);
  EXPECT_THROW(offload.before(*model.blocks[6]), Error);
  EXPECT_THROW(pipeline::nn::BlockOffload(model, {"proj_out"}, at::Device(at::kCPU), 2), Error);
  EXPECT_THROW(pipeline::nn::BlockOffload(model, {"transformer_blocks"}, at::Device(at::kCPU), 0), Error);
}

// move_module: every handle to a weight follows it (the module's member, a handle taken before), the
// dtype stays, and the values are the same.
TEST(MoveModule, HandlesFollowTheMovedData) {
  c10::InferenceMode guard;
  ToyModel model;
  const at::Tensor handle = model.blocks[2]->weight;
  const at::Tensor values = handle.clone();
  const void* old = handle.data_ptr();
  const int64_t bytes = pipeline::nn::move_module(model, at::Device(at::kCPU));
  EXPECT_EQ(bytes, pipeline::nn::module_bytes(model));
  EXPECT_NE(handle.data_ptr(), old) << "a copy was made, as to another device";
  EXPECT_EQ(handle.data_ptr(), model.blocks[2]->weight.data_ptr());
  EXPECT_TRUE(at::equal(handle, values));
}

// ---------------------------------------------------------------------------------------------------
// Pipelines.

/// Up to `limit` float32 golden cases of `name` (test::golden_cases_doc) that run with its own scheduler, each a
/// batch; `model` gets its model directory.
std::vector<std::vector<pipeline::ImageRequest>> offload_batches(const std::string& name, size_t limit,
                                                                 std::string& model) {
  const json doc = test::golden_cases_doc(name);
  model = test::golden_model_dir(doc);
  return test::golden_batches(doc, limit);
}

std::unique_ptr<pipeline::TextToImage> load_offloaded(const std::string& model, const std::string& offload,
                                                      int per_group = 1, bool two_phase = false,
                                                      const std::string& storage = "default",
                                                      const std::string& dtype = "fp32") {
  pipeline::LoadRequest r;
  r.model = model;
  r.offload = offload;
  r.offload_blocks_per_group = per_group;
  r.two_phase = two_phase;
  r.weight_storage = storage;
  r.dtype = dtype;
  return pipeline::load_text_to_image(r);
}

void expect_same_pixels(const std::vector<pipeline::RgbImage>& got, const std::vector<pipeline::RgbImage>& want,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) EXPECT_TRUE(got[k].pixels == want[k].pixels) << what << ", image " << k;
}

bool is_unet_family(const std::string& name) { return name == "tiny-sd1" || name == "tiny-sdxl"; }

class OffloadParity : public ::testing::TestWithParam<std::string> {};

// Three golden batches made with --offload model and, for a DiT, --offload blocks and blocks:2,
// against the same pipeline without offload. The cancel check, asked between denoising steps, sees
// the denoiser alone on the device under model offload.
TEST_P(OffloadParity, OffloadedPipelinesMakeTheSameImages) {
  const std::string name = GetParam();
  const json doc = test::golden_cases_doc(name);
  const std::string model = test::golden_model_dir(doc);
  auto plain = load_offloaded(model, "none");
  const auto batches = test::golden_batches(doc, 3, plain.get());  // the plain pipeline sizes references
  ASSERT_GE(batches.size(), 1u) << name;
  const std::vector<std::string> all = plain->components_on_device();
  EXPECT_NE(std::find(all.begin(), all.end(), "vae"), all.end()) << name << ": without offload, all on the device";
  EXPECT_TRUE(plain->offload_statistics().empty());

  auto by_model = load_offloaded(model, "model");
  EXPECT_TRUE(by_model->components_on_device().empty()) << name << ": loaded into host memory";
  std::vector<std::vector<std::string>> seen;
  by_model->set_cancel_check([&] {
    seen.push_back(by_model->components_on_device());
    return false;
  });
  std::vector<std::vector<pipeline::RgbImage>> reference;
  for (const auto& batch : batches) reference.push_back(plain->generate(batch));
  for (size_t k = 0; k < batches.size(); ++k)
    expect_same_pixels(by_model->generate(batches[k]), reference[k], name + " model, batch " + std::to_string(k));
  const std::string denoiser = is_unet_family(name) ? "unet" : "transformer";
  size_t denoising = 0;
  for (const auto& on : seen) {
    EXPECT_LE(on.size(), 1u) << name << ": one component on the device at a time";
    denoising += on == std::vector<std::string>{denoiser};
  }
  EXPECT_GT(denoising, 0u) << name << ": the denoiser was never on the device alone";
  EXPECT_EQ(by_model->components_on_device(), std::vector<std::string>{"vae"}) << name << ": the VAE decoded last";
  EXPECT_GE(by_model->offload_statistics()["moves_to_device"].get<int64_t>(), 3);

  if (is_unet_family(name)) {
    try {
      load_offloaded(model, "blocks");
      ADD_FAILURE() << name << ": --offload blocks was taken";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()),
                "--offload blocks: the unet has no transformer blocks to offload in groups; use --offload model");
    }
    return;
  }
  for (int per_group : {1, 2}) {
    auto blocks = load_offloaded(model, "blocks", per_group);
    for (size_t k = 0; k < batches.size(); ++k)
      expect_same_pixels(blocks->generate(batches[k]), reference[k],
                         name + " blocks:" + std::to_string(per_group) + ", batch " + std::to_string(k));
    const json stats = blocks->offload_statistics();
    EXPECT_EQ(stats["blocks_per_group"], per_group);
    EXPECT_EQ(stats["resident_groups"], 0) << name;
    EXPECT_LE(stats["max_resident_groups"].get<int64_t>(), 2) << name;
    EXPECT_GE(stats["max_resident_groups"].get<int64_t>(), 1) << name;
    EXPECT_GT(stats["group_copies"].get<int64_t>(), stats["block_groups"].get<int64_t>()) << name;
    // Every family here (the UNet ones returned above) has a text encoder with layer lists (T5 or a Qwen decoder),
    // which keeps them in host memory too and ran them from there (CLIP stays whole). Between forwards none of
    // their groups is on the device.
    EXPECT_GT(stats.value("text_encoder_block_groups", int64_t{0}), 0) << name << ": " << stats.dump();
    EXPECT_GE(stats.value("text_encoder_group_copies", int64_t{0}), 1) << name << ": " << stats.dump();
    EXPECT_EQ(stats.value("text_encoder_resident_groups", int64_t{-1}), 0) << name << ": " << stats.dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Families, OffloadParity,
                         ::testing::Values("tiny-sd1", "tiny-sdxl", "tiny-sd3.5-t5", "tiny-flux-dev", "tiny-chroma",
                                           "tiny-qwen-image", "tiny-z-image", "tiny-flux2-klein", "tiny-flux2-dev",
                                           "tiny-qwen-image-edit/edit"),
                         dpinfer::test::FixtureParamName());

// Offload, two-phase chunks and fp8 storage at once: the text encoders released and loaded again into
// host memory, the denoiser's float8 blocks moved as stored; the images of fp8 storage without either.
TEST(OffloadWithTwoPhaseAndFp8, MakeTheImagesOfFp8Alone) {
  for (const std::string name : {"tiny-flux-dev", "tiny-sd1"}) {
    SCOPED_TRACE(name);
    std::string model;
    const auto batches = offload_batches(name, 3, model);
    ASSERT_GE(batches.size(), 2u);
    auto plain = load_offloaded(model, "none", 1, false, "fp8", "bf16");
    std::vector<std::string> modes{"model"};
    if (!is_unet_family(name)) modes.push_back("blocks");
    for (const std::string& mode : modes) {
      auto both = load_offloaded(model, mode, 2, /*two_phase=*/true, "fp8", "bf16");
      EXPECT_TRUE(both->info().weight_storage == "fp8");
      both->prepare(batches);
      for (size_t k = 0; k < batches.size(); ++k)
        expect_same_pixels(both->generate(batches[k]), plain->generate(batches[k]),
                           mode + ", batch " + std::to_string(k));
      // Once more: the next chunk releases the denoiser and loads the encoders again.
      both->prepare({batches[0]});
      expect_same_pixels(both->generate(batches[0]), plain->generate(batches[0]), mode + ", a second chunk");
    }
  }
}

// DeepCache (issue 28) under --offload model, two-phase chunks, and both: the images and the counts of a run without
// them, on the float32 DeepCache goldens' cases (make_deep_cache_pipelines.py), whose first is PNDM's or Euler's
// text-to-image case and whose img2img ones encode with the VAE before the UNet runs.
TEST(OffloadWithDeepCache, ModelOffloadAndTwoPhaseMakeTheImagesOfAPlainRun) {
  for (const std::string name : {"tiny-sd1", "tiny-sdxl"}) {
    SCOPED_TRACE(name);
    std::ifstream in(kData + "/pipelines/" + name + ".golden/deepcache/cases.json");
    ASSERT_TRUE(in);
    const json doc = json::parse(in);
    const std::string model = kRoot + "/" + doc["model_dir"].get<std::string>();
    std::vector<std::vector<pipeline::ImageRequest>> batches;
    for (const json& c : doc["cases"])
      if (c["dtype"] == "fp32" && c["scheduler"]["is_pipeline_default"].get<bool>())
        batches.push_back(test::golden_case_requests(c));
    ASSERT_GE(batches.size(), 3u);
    auto plain = load_offloaded(model, "none");
    std::vector<std::vector<pipeline::RgbImage>> reference;
    for (const auto& batch : batches) reference.push_back(plain->generate(batch));
    const json counted = plain->statistics();
    EXPECT_GT(counted.value("denoiser_calls_cached", 0), 0) << counted.dump();
    for (const auto& [offload, two_phase] : std::vector<std::pair<std::string, bool>>{
             {"model", false}, {"none", true}, {"model", true}}) {
      const std::string what = offload + (two_phase ? ", two-phase" : "");
      auto other = load_offloaded(model, offload, 1, two_phase);
      if (two_phase) other->prepare(batches);
      for (size_t k = 0; k < batches.size(); ++k)
        expect_same_pixels(other->generate(batches[k]), reference[k], what + ", case " + std::to_string(k));
      EXPECT_EQ(other->statistics(), counted) << what;
    }
  }
}

// GGUF transformer files (their Linear weights uint8 blocks, WeightedLayer::store_gguf) offloaded as they are:
// the images of the same file without offload, with model offload and with blocks.
TEST(OffloadWithGguf, QuantizedBlocksMoveAsStored) {
  for (const std::string file : {"tiny-flux-dev-q8_0.gguf", "tiny-z-image-q4_k.gguf"}) {
    SCOPED_TRACE(file);
    const std::string base = kData + "/pipelines/" + (file.rfind("tiny-flux", 0) == 0 ? "tiny-flux-dev" : "tiny-z-image");
    std::string model;
    const auto batches = offload_batches(file.rfind("tiny-flux", 0) == 0 ? "tiny-flux-dev" : "tiny-z-image", 2, model);
    const auto load = [&](const std::string& offload) {
      pipeline::LoadRequest r;
      r.model = kData + "/gguf/" + file;
      r.base = base;
      r.dtype = "bf16";
      r.offload = offload;
      r.offload_blocks_per_group = 2;
      return pipeline::load_text_to_image(r);
    };
    auto plain = load("none");
    ASSERT_EQ(plain->info().weight_storage.rfind("gguf-", 0), 0u) << plain->info().weight_storage;
    for (const std::string mode : {"model", "blocks"}) {
      auto offloaded = load(mode);
      for (size_t k = 0; k < batches.size(); ++k)
        expect_same_pixels(offloaded->generate(batches[k]), plain->generate(batches[k]),
                           mode + ", batch " + std::to_string(k));
      const json stats = offloaded->offload_statistics();
      if (mode == "blocks") {
        // The blocks' quantized bytes, not a bf16 copy's: Q8_0 keeps 34 bytes a 32 values, Q4_K 144 a 256, where
        // the same blocks of the bf16 checkpoint take 64 and 512 (their norms and biases stay bf16 in both).
        pipeline::LoadRequest r;
        r.model = base;
        r.dtype = "bf16";
        r.offload = "blocks";
        r.offload_blocks_per_group = 2;
        const int64_t bf16_bytes = pipeline::load_text_to_image(r)->offload_statistics()["offloaded_bytes"];
        EXPECT_LT(stats["offloaded_bytes"].get<int64_t>(), bf16_bytes * 3 / 4);
        EXPECT_LE(stats["max_resident_groups"].get<int64_t>(), 2);
      }
    }
  }
}

/// `base` with `loras` (file under `dir`, scale) for each of its requests.
std::vector<pipeline::ImageRequest> with_loras(std::vector<pipeline::ImageRequest> base, const io::LoraSet& loras) {
  for (pipeline::ImageRequest& r : base) r.loras = loras;
  return base;
}

// LoRAs merged into offloaded weights: into the UNet's and CLIP's weights in host memory (model), into
// FLUX.1's blocks' host copies (blocks); a set, another, then none, each the images of the same sets
// without offload (which test_lora.cpp holds to diffusers').
TEST(OffloadWithLoras, MergesWhereTheWeightsAreGiveTheSameImages) {
  struct Case {
    std::string pipeline, offload;
    std::vector<io::LoraSet> sets;
  };
  const std::string sd = kData + "/loras/", dit = kData + "/loras-dit/";
  const std::vector<Case> cases = {
      {"tiny-sd1", "model", {{{sd + "sd1-peft.safetensors", 1.0}}, {{sd + "sd1-kohya.safetensors", 0.7}}, {}}},
      {"tiny-flux-dev", "model", {{{dit + "flux-peft.safetensors", 1.0}}, {}}},
      {"tiny-flux-dev", "blocks", {{{dit + "flux-peft.safetensors", 1.0}}, {{dit + "flux-alpha.safetensors", 0.75}}, {}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pipeline + " --offload " + c.offload);
    std::string model;
    const auto batches = offload_batches(c.pipeline, 1, model);
    ASSERT_EQ(batches.size(), 1u);
    auto plain = load_offloaded(model, "none");
    auto offloaded = load_offloaded(model, c.offload, 2);
    for (const io::LoraSet& set : c.sets) {
      plain->check_loras(set);
      offloaded->check_loras(set);
      const auto batch = with_loras(batches[0], set);
      expect_same_pixels(offloaded->generate(batch), plain->generate(batch),
                         std::to_string(set.size()) + " LoRA(s)" + (set.empty() ? "" : ", " + set.front().path));
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// On a CUDA device (tools/device/gpu_check.sh's tests step; filtered out without one): the copies on the
// side stream, the events and record_stream that the CPU runs above do not reach.

TEST(BlockOffloadCuda, TheSideStreamCopiesGiveTheResidentForward_CUDA) {
  c10::InferenceMode guard;
  const at::Device cuda("cuda:0");
  ToyModel plain, model;
  copy_weights(model, plain);
  pipeline::nn::move_module(plain, cuda);
  pipeline::nn::BlockOffload offload(model, {"transformer_blocks", "single_transformer_blocks"}, cuda, 2);
  EXPECT_TRUE(model.embed->weight.device() == cuda) << "outside the block lists: on the device";
  EXPECT_TRUE(model.blocks[0]->weight.device().is_cpu());
  EXPECT_TRUE(model.blocks[0]->weight.is_pinned()) << "host copies in pinned memory";
  const at::Tensor x = at::randn({64, 4}).to(cuda);
  for (int pass = 0; pass < 3; ++pass) {
    model.seen.clear();
    EXPECT_TRUE(at::equal(model.forward(x, &offload), plain.forward(x, nullptr))) << "pass " << pass;
    EXPECT_EQ(offload.resident_groups(), 0);
  }
  EXPECT_EQ(offload.max_resident_groups(), 2);
  EXPECT_TRUE(model.blocks[7]->weight.device().is_cpu());
  // Model offload's moves: to the device and back into pinned memory, the values unchanged.
  const at::Tensor before = plain.blocks[3]->weight.cpu();
  pipeline::nn::move_module(plain, at::Device(at::kCPU));
  EXPECT_TRUE(plain.blocks[3]->weight.is_pinned());
  EXPECT_TRUE(at::equal(plain.blocks[3]->weight, before));
}

TEST(OffloadParityCuda, ModelAndBlocksMakeTheImagesOfNone_CUDA) {
  for (const std::string name : {"tiny-flux-dev", "tiny-qwen-image", "tiny-sd1"}) {
    SCOPED_TRACE(name);
    std::string model;
    const auto batches = offload_batches(name, 2, model);
    ASSERT_GE(batches.size(), 1u);
    const auto on_cuda = [&](const std::string& offload, int per_group) {
      pipeline::LoadRequest r;
      r.model = model;
      r.device = "cuda:0";
      r.dtype = "bf16";
      r.offload = offload;
      r.offload_blocks_per_group = per_group;
      return pipeline::load_text_to_image(r);
    };
    auto plain = on_cuda("none", 1);
    std::vector<std::string> modes{"model"};
    if (!is_unet_family(name)) modes.push_back("blocks");
    for (const std::string& mode : modes) {
      auto offloaded = on_cuda(mode, 2);
      for (size_t k = 0; k < batches.size(); ++k)
        expect_same_pixels(offloaded->generate(batches[k]), plain->generate(batches[k]),
                           mode + ", batch " + std::to_string(k));
    }
  }
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
