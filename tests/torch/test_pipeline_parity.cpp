// The whole pipeline against diffusers: every case that tools/fixtures/
// make_pipelines.py recorded for the three tiny SD pipelines and make_sdxl_pipelines.py
// for the two tiny SDXL ones (all schedulers, CFG on and off, negative prompts,
// guidance_rescale, clip_skip, non-ASCII, empty and long prompts, odd sizes, batches
// with one generator per image, SDXL-Turbo's trailing 1- and 4-step runs),
// make_z_image_pipelines.py for the two tiny Z-Image ones (1 to 50 steps, CFG on and off,
// cfg_normalization, cfg_truncation, max_sequence_length, batches of three caption lengths),
// make_qwen_image_pipelines.py for the two tiny Qwen-Image ones (true CFG on and off,
// max_sequence_length, batches, dynamic shifting), make_flux_pipelines.py for tiny-flux-dev and
// tiny-flux-schnell (1 to 28 steps, distilled guidance, true CFG, non-square and wide sizes, batches
// of 3 images and of 3 prompts, max_sequence_length 16 and 48, dynamic and static shift),
// make_chroma_pipelines.py for tiny-chroma and tiny-chroma-alt (1 to 35 steps, CFG with the empty and
// with a negative prompt, guidance 1 without CFG, the padding mask at max_sequence_length 8 to 512, a
// truncated prompt, non-square, batches of 3 images and of 3 prompts with their own negatives),
// make_sd3_pipelines.py for the tiny SD3 and SD3.5
// ones, without T5 and (tiny-sd3.5-t5) with it (CFG on and off, negative prompts, clip_skip,
// max_sequence_length 16, 48 and 256, a long prompt cut by T5, batches of 3, non-square, 1 to 8
// steps), and the cases that
// tools/train/record_goldens.py recorded for the shipped default model; then, for each of the 16 tiny
// pipelines, make_half_pipelines.py's bf16 and fp16 cases (<name>.golden/half/: diffusers with
// accelerate, as installed by default; a default and a CFG case per family and dtype, the SDXL VAE's
// force_upcast and T5's fp32 wo among them; issue 35), and make_vae_tiling_goldens.py's cases with
// diffusers' vae.enable_tiling() (<name>.golden/tiling/: tiny-sd1, tiny-flux-dev, tiny-qwen-image, the
// latent over the tile so that rows and columns of tiles blend, and one case at the tile size;
// dpinfer's --vae-tiling; issue 26 item 5);
// make_flux2_pipelines.py's for tiny-flux2-klein (distilled) and tiny-flux2-klein-base (CFG on ""), recorded with
// diffusers 0.37.0, the FLUX.2 pin (1 to 50 steps, non-square and wide sizes, empty, non-ASCII and long prompts,
// max_sequence_length 16 and 40, a batch of 3 prompts recorded per item alone, bf16 in half/);
// make_fp8_storage_pipelines.py's fp8 cases, make_first_block_cache_pipelines.py's First Block Cache cases,
// make_deep_cache_pipelines.py's DeepCache cases (tiny-sd1, tiny-sdxl, tiny-3down: <name>.golden/deepcache/, DeepCache
// 0.1.1's DeepCacheSDHelper at intervals 2 and 3 and several branches, text-to-image and img2img, fp32 and bf16, each
// case's UNet and shallow calls checked against dpinfer's statistics; issue 28),
// make_dbcache_pipelines.py's DBCache and TaylorSeer cases (cache-dit 1.5.3; tiny-flux-dev, tiny-flux-schnell,
// tiny-flux-kontext, tiny-flux-fill, tiny-qwen-image, tiny-qwen-image-alt: <name>.golden/dbcache/), and
// make_gguf_fixtures.py's GGUF cases (tiny-flux-dev, tiny-chroma, tiny-qwen-image, tiny-z-image and tiny-sd3.5:
// <name>.golden/gguf/, the transformer read from a city96-style GGUF file against diffusers' GGUFQuantizationConfig;
// issue 26), make_lora_storage_fixtures.py's LoRAs on those storages (tiny-flux-dev, tiny-qwen-image, tiny-sd1:
// <name>.golden/lora-storage/, PEFT's unfused LoRA layers; issue 26), make_kontext_pipelines.py's FLUX.1 Kontext
// cases (tiny-flux-kontext: tiny-flux-dev's components under FluxKontextPipeline, references square and not, a batch
// of three, true CFG, no image, bf16; issue 29) and make_flux_fill_pipelines.py's FLUX.1 Fill cases (tiny-flux-fill,
// FluxFillPipeline: strengths 0.45 to 1, a non-square input resized, soft masks, a batch of three, bf16; issue 29),
// and make_flux2_reference_goldens.py's FLUX.2 [klein] reference images (tiny-flux2-klein, tiny-flux2-klein-base:
// <name>.golden/reference/, square, cut to the size multiple and wide references, two and three references in one item,
// a batch of three with one, two and three references, bf16; issue 30), and make_flux2_dev_pipelines.py's FLUX.2 [dev]
// cases (tiny-flux2-dev, Flux2Pipeline with a Mistral 3 text encoder and the guidance embedding: steps 1 to 50,
// guidance 1 to 4, sizes, empty, non-ASCII, "[IMG]" and long prompts, max_sequence_length 24 to 96 on the left-padded
// Tekken tokens, a batch of three, bf16, and references in reference/; issue 30), and make_qwen_image_edit_pipelines.py's
// Qwen-Image-Edit cases (tiny-qwen-image-edit: QwenImageEditPipeline with a vision tower of the real structure, the
// output sized from the reference and not, a non-square reference, true CFG, a batch of three, bf16; and
// tiny-qwen-image-edit-plus, QwenImageEditPlusPipeline: one to three input images per item in either order, true CFG,
// the output sized from the last image, bf16: <name>.golden/edit/; issue 29).
// CPU. Acceptance (issue 4, and issue 35 for bf16 and fp16 on the CPU that recorded them): max |Δ| <= 1
// and >= 99% of the uint8 values exact. Measured for Z-Image (both fixtures, 27 fp32 cases each) and
// Qwen-Image (11 and 12 cases): bit-identical but one case, max |Δ| 1 on 0.02%; every half-precision
// case bit-identical on the recording CPU (an AMX Xeon, 2026-12-06).
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <array>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/families/flux2.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/text/tekken_tokenizer.h"
#include "support/param_names.h"
#include "torch/fixture_cpu.h"
#include "torch/golden_case.h"

using namespace dpinfer;
using nlohmann::json;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

const std::string kData = DPINFER_TEST_DATA_DIR;
// The source tree: cases.json names its model directory relative to it.
const std::string kRoot = kData + "/../..";

struct Pixels {
  std::vector<uint8_t> bytes;
  std::vector<int64_t> shape;
};

Pixels golden_image(const io::SafetensorsFile& f, const std::string& name) {
  const io::TensorView* t = f.find(name);
  if (!t) throw std::runtime_error("golden image '" + name + "' missing");
  const auto* p = reinterpret_cast<const uint8_t*>(t->data);
  return {std::vector<uint8_t>(p, p + t->nbytes), t->shape};
}

class PipelineParity : public ::testing::TestWithParam<std::string> {};

TEST_P(PipelineParity, EveryRecordedCaseMatchesDiffusers) {
  const std::string name = GetParam();
  std::ifstream in(kData + "/pipelines/" + name + ".golden/cases.json");
  // A fixture recorded only for one purpose (tiny-sd1-inpaint: inpaint/) has no float32 text-to-image cases.
  json doc = in ? json::parse(in) : json{{"cases", json::array()}, {"model_dir", "tests/data/pipelines/" + name}};
  std::map<std::string, std::unique_ptr<pipeline::TextToImage>> pipes;
  double worst_exact = 1.0;
  size_t skipped = 0;
  // The float32 cases, then the half-precision ones (make_half_pipelines.py: bf16 and fp16, diffusers
  // with accelerate, recorded on the machine whose canaries are in half/cpu_canary.safetensors).
  struct Golden {
    json cases;
    std::shared_ptr<const io::SafetensorsFile> images;
    std::string canary_file;  // empty: float32 goldens
  };
  const std::string gdir = kData + "/pipelines/" + name + ".golden";
  std::vector<Golden> goldens;
  if (!doc["cases"].empty()) goldens.push_back({doc["cases"], io::SafetensorsFile::open(gdir + "/images.safetensors"), ""});
  // Then half/'s (make_half_pipelines.py), fp8/'s (make_fp8_storage_pipelines.py: bf16 with the weights
  // stored in float8, issue 26), gguf/'s (make_gguf_fixtures.py: a GGUF transformer file) and fbcache/'s (make_first_block_cache_pipelines.py: FLUX.1 and Qwen-Image
  // under First Block Cache, issue 28), dbcache/'s (make_dbcache_pipelines.py: FLUX.1 and Qwen-Image under
  // cache-dit's DBCache, with TaylorSeer and without, issue 28), each recorded with its machine's canaries; and tiling/'s, the float32
  // cases with VAE tiling on (make_vae_tiling_goldens.py; each says "vae_tiling": true).
  // lora-storage/'s (make_lora_storage_fixtures.py: LoRAs on fp8-stored weights and on GGUF transformer files,
  // unfused as PEFT computes them) come last: their pipelines are fp8/'s and gguf/'s, which then switch LoRA sets.
  // deepcache/'s (make_deep_cache_pipelines.py: SD and SDXL under DeepCache 0.1.1's helper, issue 28) likewise.
  // fp8-compute/'s (make_fp8_compute_pipelines.py: the DiT blocks' Linear layers in float8 as torchao's
  // Float8DynamicActivationFloat8WeightConfig computes them, issue 28) likewise.
  for (const char* sub : {"half", "fp8", "fp8-compute", "fbcache", "dbcache", "deepcache", "tiling", "gguf", "single-file", "img2img",
                          "inpaint", "kontext", "fill", "reference", "edit", "lora-storage"}) {
    std::ifstream sub_in(gdir + "/" + sub + "/cases.json");
    if (sub_in)
      goldens.push_back({json::parse(sub_in)["cases"], io::SafetensorsFile::open(gdir + "/" + sub + "/images.safetensors"),
                         std::string(sub) == "tiling" ? std::string() : gdir + "/" + sub + "/cpu_canary.safetensors"});
  }
  std::vector<std::pair<const json*, const Golden*>> all;
  for (const Golden& g : goldens)
    for (const json& c : g.cases) all.emplace_back(&c, &g);
  for (const auto& [case_json, golden_file] : all) {
    const json& c = *case_json;
    const Golden& golden = *golden_file;
    const io::SafetensorsFile* images = golden.images.get();
    // Call arguments dpinfer has no input for (SDXL's prompt_2, micro-conditioning sizes).
    if (c.contains("optional_feature")) {
      ++skipped;
      continue;
    }
    pipeline::LoadRequest o;
    o.model = kRoot + "/" + doc["model_dir"].get<std::string>();
    o.scheduler = c["scheduler"]["is_pipeline_default"].get<bool>() ? "" : c["scheduler"]["name"].get<std::string>();
    o.dtype = c.value("dtype", std::string("fp32"));
    o.weight_storage = c.value("weight_storage", std::string("default"));
    o.vae_tiling = c.value("vae_tiling", false);
    o.fp8_compute = c.value("fp8_compute", std::string("off"));
    if (c.contains("model_file")) {
      // A GGUF transformer file (gguf/): the file as the model, the pipeline directory as its --base; the
      // storage it records is the file's own, not an option.
      o.model = kRoot + "/" + c["model_file"].get<std::string>();
      o.base = kRoot + "/" + doc["model_dir"].get<std::string>();
      o.weight_storage = "default";
    }
    // One pipeline per model, scheduler, dtype, weight storage and tiling; the family settings travel with each image.
    auto& pipe = pipes[o.model + "/" + o.scheduler + "/" + o.dtype + "/" + o.weight_storage + (o.vae_tiling ? "/tiled" : "") +
                       "/" + o.fp8_compute];
    if (!pipe) pipe = pipeline::load_text_to_image(o);
    if (c.contains("model_file")) {
      // A GGUF file's storage ("gguf-Q8_0"); none for a safetensors single file (single-file/).
      EXPECT_EQ(pipe->info().weight_storage, c.value("weight_storage", std::string()));
    }
    const std::vector<pipeline::ImageRequest> batch = test::golden_case_requests(c, pipe.get());
    ASSERT_EQ(batch.size(), c["generator"]["seeds"].size()) << c["name"];
    // Half-precision cases run on one thread, as make_half_pipelines.py recorded them: a bf16 matmul's
    // rounding depends on how its reduction is split, and at 2 threads one batch case of
    // tiny-z-image is 97.2% exact (max |d| 1), though bit-identical on one.
    const int threads = at::get_num_threads();
    if (o.dtype != "fp32") at::set_num_threads(1);
    const json counted_before = pipe->statistics();
    auto got = pipe->generate(batch);
    at::set_num_threads(threads);
    if (c.contains("deep_cache")) {
      // The reference's UNet calls and its shallow ones (counted with hooks), per image: dpinfer's statistics.
      const json after = pipe->statistics();
      const int64_t batch_images = static_cast<int64_t>(batch.size());
      const auto delta = [&](const char* key) {
        return after.value(key, int64_t{0}) - counted_before.value(key, int64_t{0});
      };
      EXPECT_EQ(delta("denoiser_calls"), batch_images * c["deep_cache"]["calls"].get<int64_t>()) << c["name"];
      EXPECT_EQ(delta("denoiser_calls_cached"), batch_images * c["deep_cache"]["shallow_calls"].get<int64_t>())
          << c["name"];
    }
    // A step cache's golden (fbcache/, dbcache/) records the reference's transformer calls and how many skipped the
    // cached blocks: dpinfer's counts of the same call are those, so that it skipped the very same steps. Off the CPU
    // that recorded a half-precision golden (below), the residuals round otherwise, by the CPU's bf16 kernels, as
    // diffusers' own would there: a step whose change lies near the threshold may decide the other way, so the count
    // of skipped calls may move by up to two (the calls stay the same).
    const bool recorded_here =
        o.dtype == "fp32" || (!golden.canary_file.empty() && test::half_recorded_on_this_cpu(golden.canary_file));
    for (const char* cache : {"first_block_cache", "dbcache"})
      if (c.contains(cache) && c[cache].is_object()) {
        const json counted = pipe->statistics();
        auto delta = [&](const char* key) {
          return counted.value(key, int64_t{0}) - counted_before.value(key, int64_t{0});
        };
        EXPECT_EQ(delta("denoiser_calls"), c[cache]["calls"].get<int64_t>()) << name << "/" << c["name"];
        const int64_t want_skipped = c[cache]["skipped"].get<int64_t>();
        if (recorded_here) {
          EXPECT_EQ(delta("denoiser_calls_cached"), want_skipped) << name << "/" << c["name"];
        } else {
          EXPECT_LE(std::abs(delta("denoiser_calls_cached") - want_skipped), 2) << name << "/" << c["name"];
        }
      }
    Pixels want = golden_image(*images, c["image_tensor"].get<std::string>());
    ASSERT_EQ(static_cast<int64_t>(got.size()), want.shape[0]) << c["name"];
    size_t exact = 0, total = 0;
    int worst = 0;
    double sum_abs = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      ASSERT_EQ(got[k].height, want.shape[1]);
      ASSERT_EQ(got[k].width, want.shape[2]);
      EXPECT_TRUE(got[k].finite);
      const size_t n = got[k].pixels.size();
      for (size_t i = 0; i < n; ++i) {
        int d = std::abs(int(got[k].pixels[i]) - int(want.bytes[k * n + i]));
        worst = std::max(worst, d);
        exact += d == 0;
        sum_abs += d;
        ++total;
      }
    }
    double frac = static_cast<double>(exact) / static_cast<double>(total);
    worst_exact = std::min(worst_exact, frac);
    // Issue 4's bound, unless diffusers itself strays further on another thread count
    // (record_goldens.py measures it for the trained model, whose DDIM case clips x0
    // and so amplifies rounding): then twice its max |Δ| and three times its share
    // of inexact values.
    int max_abs = 1;
    double min_exact = 0.99;
    if (c.contains("diffusers_self_spread")) {
      const json& spread = c["diffusers_self_spread"];
      max_abs = std::max(max_abs, 2 * spread["max_abs"].get<int>());
      min_exact = std::min(min_exact, 1.0 - 3.0 * (1.0 - spread["exact_fraction"].get<double>()));
    }
    const double mean_abs = sum_abs / static_cast<double>(total);
    // Issue 35: a half-precision case is held to the same bound, one thread, where this CPU computes
    // float32, bf16 and fp16 as the machine that recorded it, by measurement (fixture_cpu.h
    // half_recorded_on_this_cpu). Elsewhere, the cross-CPU bound: a bf16 matmul rounds by the CPU's
    // kernel (oneDNN uses AVX512-BF16 / AMX-BF16 dot products where the CPU has them), and 1-ulp
    // differences grow over the steps. On an AVX-512-BF16 AMD EPYC, dpinfer was up to mean |d| 1.08
    // and max |d| 8 from bf16 goldens recorded on another machine (tiny-chroma-alt's bf16_steps_4,
    // tiny-sd3.5's bf16 cases), and yet bit for bit diffusers run on that EPYC (tiny-sd3.5's goldens
    // regenerated there: every case exact): the spread is diffusers' own across the two CPUs. On an
    // Intel Xeon with AVX-512 but neither AVX512-BF16 nor AMX (2026-12-07), tiny-sd1's bf16 img2img
    // cases were max |d| 25 and 19 (mean 1.34, 1.26) from their goldens; diffusers' own, regenerated
    // there by make_img2img_pipelines.py, differed from the goldens by those very numbers, and dpinfer
    // matched the regenerated ones bit for bit. So off the recording CPU a half-precision case is held
    // to twice the largest spread seen, max |d| <= 50, and to mean |d| <= 2.
    if (o.dtype != "fp32" && (golden.canary_file.empty() || !test::half_recorded_on_this_cpu(golden.canary_file))) {
      max_abs = std::max(max_abs, 50);
      min_exact = 0;
      EXPECT_LE(mean_abs, 2.0) << name << "/" << c["name"].get<std::string>();
    }
    EXPECT_LE(worst, max_abs) << name << "/" << c["name"].get<std::string>();
    EXPECT_GE(frac, min_exact) << name << "/" << c["name"].get<std::string>();
    std::printf("  %s/%s: max |d| %d (bound %d), %.4f exact (bound %.4f), mean |d| %.4f\n", name.c_str(),
                c["name"].get<std::string>().c_str(), worst, max_abs, frac, min_exact, mean_abs);
  }
  RecordProperty("worst_exact_fraction", std::to_string(worst_exact));
  std::cout << name << ": " << all.size() - skipped << " cases (" << skipped
            << " for call arguments dpinfer does not take), worst exact fraction " << worst_exact << "\n";
}

// Issue 26: every tiny pipeline has goldens with its weights stored in float8 (--weight-storage fp8), and one
// with the denoiser's only (fp8-denoiser), each case visibly apart from its bf16 twin so that a storage
// that did nothing would fail.
TEST(PipelineParityFp8Storage, EveryTinyPipelineHasFp8StorageGoldens) {
  std::map<std::string, int> modes;
  for (const char* name : {"tiny-sd1", "tiny-sd2v", "tiny-3down", "tiny-sdxl", "tiny-sdxl-alt", "tiny-z-image",
                           "tiny-z-image-alt", "tiny-qwen-image", "tiny-qwen-image-alt", "tiny-flux-dev",
                           "tiny-flux-schnell", "tiny-chroma", "tiny-chroma-alt", "tiny-sd3", "tiny-sd3.5",
                           "tiny-sd3.5-t5"}) {
    const std::string dir = kData + "/pipelines/" + name + ".golden/fp8";
    std::ifstream in(dir + "/cases.json");
    ASSERT_TRUE(in) << name << ": no " << dir << "/cases.json";
    const json doc = json::parse(in);
    EXPECT_GE(doc.at("cases").size(), 2u) << name;
    auto fp8 = io::SafetensorsFile::open(dir + "/images.safetensors");
    auto bf16 = io::SafetensorsFile::open(kData + "/pipelines/" + name + ".golden/half/images.safetensors");
    for (const json& c : doc.at("cases")) {
      EXPECT_EQ(c.at("dtype"), "bf16") << name;
      const std::string mode = c.at("weight_storage").get<std::string>();
      ++modes[mode];
      // "fp8_default" and the half golden's "bf16_default": the same call, stored and not.
      const std::string image = c.at("image_tensor").get<std::string>();
      const std::string tag = mode == "fp8" ? "fp8_" : "fp8_denoiser_";
      ASSERT_EQ(image.rfind(tag, 0), 0u) << name << ": " << image;
      const Pixels stored = golden_image(*fp8, image);
      const Pixels full = golden_image(*bf16, "bf16_" + image.substr(tag.size()));
      EXPECT_NE(stored.bytes, full.bytes) << name << ": " << image << " is its bf16 twin";
    }
  }
  EXPECT_GE(modes["fp8"], 32);
  EXPECT_GE(modes["fp8-denoiser"], 2);
}

// Issue 28: a tiny pipeline of each DiT family has goldens with its blocks' Linear layers computing in float8
// (make_fp8_compute_pipelines.py; FLUX.2's make_flux2_fp8_compute_goldens.py: torchao's per-tensor float8), each case visibly apart from its bf16 twin so that a
// float8 compute that did nothing would fail.
TEST(PipelineParityFp8Compute, EachDitFamilyHasFp8ComputeGoldens) {
  for (const char* name :
       {"tiny-flux-dev", "tiny-qwen-image", "tiny-chroma", "tiny-sd3", "tiny-z-image", "tiny-flux2-klein"}) {
    const std::string dir = kData + "/pipelines/" + name + ".golden/fp8-compute";
    std::ifstream in(dir + "/cases.json");
    ASSERT_TRUE(in) << name << ": no " << dir << "/cases.json";
    const json doc = json::parse(in);
    EXPECT_FALSE(doc.at("fp8_layers").empty()) << name;
    EXPECT_GE(doc.at("cases").size(), 1u) << name;
    auto fp8 = io::SafetensorsFile::open(dir + "/images.safetensors");
    auto bf16 = io::SafetensorsFile::open(kData + "/pipelines/" + name + ".golden/half/images.safetensors");
    for (const json& c : doc.at("cases")) {
      EXPECT_EQ(c.at("dtype"), "bf16") << name;
      EXPECT_EQ(c.at("fp8_compute"), "tensorwise") << name;
      const std::string image = c.at("image_tensor").get<std::string>();
      const std::string tag = "fp8_compute_";
      ASSERT_EQ(image.rfind(tag, 0), 0u) << name << ": " << image;
      EXPECT_NE(golden_image(*fp8, image).bytes, golden_image(*bf16, "bf16_" + image.substr(tag.size())).bytes)
          << name << ": " << image << " is its bf16 twin";
    }
  }
}

// Issue 28: the UNet families have DeepCache goldens (make_deep_cache_pipelines.py) in float32 and bf16 for tiny-sd1
// and tiny-sdxl (float32 for tiny-3down), each with full and shallow UNet calls and an image the cache changed, at
// more than one interval and branch, so that a cache that did nothing, or always the same thing, would fail.
TEST(PipelineParityDeepCache, TheUNetFamiliesHaveDeepCacheGoldens) {
  for (const char* name : {"tiny-sd1", "tiny-sdxl", "tiny-3down"}) {
    const std::string dir = kData + "/pipelines/" + name + ".golden/deepcache";
    std::ifstream in(dir + "/cases.json");
    ASSERT_TRUE(in) << name << ": no " << dir << "/cases.json";
    std::map<std::string, int> dtypes;
    std::set<std::pair<int, int>> settings;
    const json doc = json::parse(in);
    for (const json& c : doc.at("cases")) {
      ++dtypes[c.at("dtype").get<std::string>()];
      const json& d = c.at("deep_cache");
      EXPECT_GT(d.at("shallow_calls").get<int>(), 0) << name << "/" << c["name"];
      EXPECT_GT(d.at("full_calls").get<int>(), 0) << name << "/" << c["name"];
      EXPECT_EQ(d.at("full_calls").get<int>() + d.at("shallow_calls").get<int>(), d.at("calls").get<int>());
      EXPECT_GT(d.at("changed_from_plain").get<double>(), 0.0) << name << "/" << c["name"];
      EXPECT_EQ(c.at("settings").at("deep_cache_interval"), d.at("interval"));
      EXPECT_EQ(c.at("settings").at("deep_cache_branch"), d.at("branch_id"));
      settings.insert({d.at("interval").get<int>(), d.at("branch_id").get<int>()});
    }
    EXPECT_GE(dtypes["fp32"], 2) << name;
    if (std::string(name) != "tiny-3down") {
      EXPECT_GE(dtypes["bf16"], 2) << name;
    }
    EXPECT_GE(settings.size(), 2u) << name;
  }
}

// Issue 26: a tiny pipeline of each DiT family has goldens with its transformer read from GGUF files, each case
// visibly apart from its bf16 twin (the quantization changes pixels), and each file's storage recorded.
TEST(PipelineParityGguf, EachDitFamilyHasGgufGoldens) {
  const std::map<std::string, std::map<std::string, int>> expected = {
      {"tiny-flux-dev", {{"gguf-Q8_0", 2}, {"gguf-Q5_1", 2}}}, {"tiny-chroma", {{"gguf-Q4_0", 2}}},
      {"tiny-qwen-image", {{"gguf-Q8_0", 2}}},                   {"tiny-z-image", {{"gguf-Q4_K", 2}}},
      {"tiny-sd3.5", {{"gguf-Q4_1", 2}}},
      {"tiny-flux2-klein", {{"gguf-Q8_0", 2}, {"gguf-Q4_0", 2}}}, {"tiny-flux2-dev", {{"gguf-Q4_1", 2}}}};
  for (const auto& [name, want] : expected) {
    const std::string dir = kData + "/pipelines/" + name + ".golden/gguf";
    std::ifstream in(dir + "/cases.json");
    ASSERT_TRUE(in) << "no " << dir << "/cases.json";
    const json doc = json::parse(in);
    auto gguf = io::SafetensorsFile::open(dir + "/images.safetensors");
    auto bf16 = io::SafetensorsFile::open(kData + "/pipelines/" + name + ".golden/half/images.safetensors");
    std::map<std::string, int> storages;
    for (const json& c : doc.at("cases")) {
      EXPECT_EQ(c.at("dtype"), "bf16") << name;
      ++storages[c.at("weight_storage").get<std::string>()];
      // "<file stem, '-' and '.' as '_'>_<case>" and half/'s "bf16_<case>": the same call, from the file and not.
      std::string tag = c.at("model_file").get<std::string>();
      tag = tag.substr(tag.rfind('/') + 1);
      tag = dpinfer::test::identifier_of(tag.substr(0, tag.size() - 5));  // less ".gguf"
      const std::string image = c.at("image_tensor").get<std::string>();
      ASSERT_EQ(image.rfind(tag + "_", 0), 0u) << image;
      EXPECT_NE(golden_image(*gguf, image).bytes, golden_image(*bf16, "bf16_" + image.substr(tag.size() + 1)).bytes)
          << image;
    }
    EXPECT_EQ(storages, want) << name;
  }
}

// Issue 35: every tiny pipeline has bf16 and fp16 goldens, each dtype with a case at the family's
// default settings and one with CFG, recorded with the recording CPU's canaries beside them.
TEST(PipelineParityHalf, EveryTinyPipelineHasBf16AndFp16GoldensWithTheirCanaries) {
  for (const char* name : {"tiny-sd1", "tiny-sd2v", "tiny-3down", "tiny-sdxl", "tiny-sdxl-alt", "tiny-z-image",
                           "tiny-z-image-alt", "tiny-qwen-image", "tiny-qwen-image-alt", "tiny-flux-dev",
                           "tiny-flux-schnell", "tiny-chroma", "tiny-chroma-alt", "tiny-sd3", "tiny-sd3.5",
                           "tiny-sd3.5-t5"}) {
    const std::string half = kData + "/pipelines/" + name + ".golden/half";
    std::ifstream in(half + "/cases.json");
    ASSERT_TRUE(in) << name << ": no " << half << "/cases.json";
    const json doc = json::parse(in);
    std::map<std::string, int> per_dtype;
    for (const json& c : doc.at("cases")) ++per_dtype[c.at("dtype").get<std::string>()];
    EXPECT_GE(per_dtype["bf16"], 2) << name;
    EXPECT_GE(per_dtype["fp16"], 2) << name;
    auto canaries = io::SafetensorsFile::open(half + "/cpu_canary.safetensors");
    for (const char* key : {"cpu_canary", "cpu_canary_bf16", "cpu_canary_fp16"})
      EXPECT_NE(canaries->find(key), nullptr) << name << ": " << key;
  }
}

// Issue 26 item 5: the tiled goldens tile (rows and columns of tiles in some case) and change the
// image (so PipelineParity's pass on them says that dpinfer tiles as diffusers does), and one case
// at the tile size is the untiled image.
TEST(PipelineParityTiling, TiledGoldensTileAndDifferFromTheUntiledImage) {
  for (const char* name : {"tiny-sd1", "tiny-flux-dev", "tiny-qwen-image"}) {
    std::ifstream in(kData + "/pipelines/" + name + ".golden/tiling/cases.json");
    ASSERT_TRUE(in) << name;
    const json doc = json::parse(in);
    bool grid = false;
    for (const json& c : doc.at("cases")) {
      EXPECT_TRUE(c.at("vae_tiling").get<bool>()) << name;
      const auto tiles = c.at("tiles").get<std::vector<int>>();
      const int untiled_max = c.at("untiled").at("max_abs_diff").get<int>();
      if (tiles == std::vector<int>{1, 1}) {
        EXPECT_EQ(untiled_max, 0) << name << "/" << c.at("name");
      } else {
        EXPECT_GT(untiled_max, 1) << name << "/" << c.at("name");
      }
      grid = grid || (tiles[0] > 1 && tiles[1] > 1);
    }
    EXPECT_TRUE(grid) << name << ": no case with rows and columns of tiles";
  }
}

/// A tiny pipeline that takes references, and the cases.json of one of its golden folders (`sub`).
struct ReferenceFixture {
  json doc;
  std::unique_ptr<pipeline::TextToImage> pipe;
};
ReferenceFixture reference_fixture(const std::string& name, const std::string& sub) {
  std::ifstream in(kData + "/pipelines/" + name + ".golden/" + sub + "/cases.json");
  EXPECT_TRUE(in) << name << " " << sub;
  pipeline::LoadRequest o;
  o.model = kData + "/pipelines/" + name;
  ReferenceFixture f{json::parse(in), pipeline::load_text_to_image(o)};
  EXPECT_TRUE(f.pipe->info().image_is_reference) << name;
  // Only Qwen-Image-Edit's prompt reads its image (the vision tower): two-phase chunks hand the encoders the images
  // of such a pipeline alone.
  EXPECT_EQ(f.pipe->info().prompt_reads_image, name.rfind("tiny-qwen-image-edit", 0) == 0) << name;
  return f;
}

// Qwen-Image-Edit's prompt reads its image (the vision tower), Qwen-Image's img2img start does not.
TEST(EditReference, OnlyTheEditPromptReadsItsImage) {
  for (const auto& [name, reads] : std::vector<std::pair<std::string, bool>>{{"tiny-qwen-image-edit", true},
                                                                             {"tiny-qwen-image", false}}) {
    pipeline::LoadRequest o;
    o.model = kData + "/pipelines/" + name;
    EXPECT_EQ(pipeline::load_text_to_image(o)->info().prompt_reads_image, reads) << name;
  }
}

// FLUX.1 Kontext's reference size with auto_resize on (the default): for each input size, the preferred resolution
// diffusers' FluxKontextPipeline resized the image to (make_kontext_pipelines.py intercepted it), ties included.
TEST(KontextReference, AutoResizePicksTheResolutionDiffusersPicks) {
  const auto [doc, pipe] = reference_fixture("tiny-flux-kontext", "kontext");
  ASSERT_GE(doc.at("auto_resize").size(), 10u);
  for (const json& c : doc.at("auto_resize")) {
    const pipeline::ReferenceSize got =
        pipe->reference_size(c["input"][0].get<int>(), c["input"][1].get<int>(), json{{"auto_resize", true}});
    EXPECT_EQ(got.resized[0], c["resized_to"][0].get<int>()) << c.dump();
    EXPECT_EQ(got.resized[1], c["resized_to"][1].get<int>()) << c.dump();
    EXPECT_EQ(got.size, got.resized) << "Kontext resizes and cuts nothing";
  }
  // Off, the image keeps its size, rounded down to vae_scale_factor * 2 (2 for the tiny VAE).
  const pipeline::ReferenceSize own = pipe->reference_size(71, 53, json{{"auto_resize", false}});
  EXPECT_EQ(own.size, (std::array<int, 2>{70, 52}));
}

// FLUX.2 [klein]'s reference sizes: for each input size, what diffusers' Flux2KleinPipeline resized the image to
// (over 1024^2 pixels) and cut it to (a multiple of 4 for the tiny VAE), or that its check_image_input refused it
// (make_flux2_reference_goldens.py intercepted both), against reference_size() and its one-line refusal.
TEST(Flux2Reference, SizesAndRefusalsAreDiffusers) {
  const auto [doc, pipe] = reference_fixture("tiny-flux2-klein", "reference");
  ASSERT_GE(doc.at("reference_size_choices").size(), 10u);
  int refused = 0;
  for (const json& c : doc.at("reference_size_choices")) {
    const int width = c["input"][0].get<int>(), height = c["input"][1].get<int>();
    if (c.contains("refused")) {
      ++refused;
      EXPECT_THROW(pipe->reference_size(width, height, json::object()), InputError) << c.dump();
      continue;
    }
    const pipeline::ReferenceSize got = pipe->reference_size(width, height, json::object());
    EXPECT_EQ(got.resized, (std::array<int, 2>{c["resized"][0].get<int>(), c["resized"][1].get<int>()})) << c.dump();
    EXPECT_EQ(got.size, (std::array<int, 2>{c["size"][0].get<int>(), c["size"][1].get<int>()})) << c.dump();
  }
  EXPECT_EQ(refused, 3);
}

// FLUX.2 [dev]'s prompt as Flux2Pipeline tokenizes it: format_input's conversation in Mistral Small 3.1's chat
// template (make_flux2_dev_pipelines.py recorded the rendered text and the processor's ids, left-padded to 512), and
// "[IMG]" taken out of the prompt as format_input does.
TEST(Flux2Dev, ChatPromptAndIdsAreDiffusers) {
  std::ifstream in(kData + "/pipelines/tiny-flux2-dev.golden/cases.json");
  ASSERT_TRUE(in);
  const json doc = json::parse(in);
  const std::string text = pipeline::flux2_dev_chat_prompt("a photograph of an astronaut riding a horse");
  EXPECT_EQ(text, doc.at("chat_template_example").get<std::string>());
  const pipeline::TekkenTokenizer tokenizer =
      pipeline::TekkenTokenizer::from_dir(kData + "/pipelines/tiny-flux2-dev/tokenizer");
  EXPECT_EQ(tokenizer.encode(text, 512).ids, doc.at("chat_template_example_ids").get<std::vector<int64_t>>());
  EXPECT_EQ(doc.at("padding_side").get<std::string>(), "left");
  EXPECT_TRUE(tokenizer.pads_left());
  EXPECT_EQ(pipeline::flux2_dev_chat_prompt("a [IMG]cat[IMG]"), pipeline::flux2_dev_chat_prompt("a cat"));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PipelineParity, ::testing::Values("tiny-sd1", "tiny-sd1-inpaint", "tiny-sd2v", "tiny-3down", "dpinfer-shapes-64",
                                                                      "dpinfer-shapes-dit-64",
                                                                 "tiny-sdxl", "tiny-sdxl-alt", "tiny-z-image",
                                                                 "tiny-z-image-alt", "tiny-qwen-image",
                                                                 "tiny-qwen-image-alt", "tiny-flux-dev",
                                                                 "tiny-flux-schnell", "tiny-flux-kontext", "tiny-flux-fill", "tiny-chroma",
                                                                 "tiny-chroma-alt", "tiny-sd3", "tiny-sd3.5",
                                                                 "tiny-sd3.5-t5", "tiny-flux2-klein",
                                                                 "tiny-flux2-klein-base", "tiny-flux2-dev",
                                                                 "tiny-qwen-image-edit", "tiny-qwen-image-edit-plus"),
                         dpinfer::test::FixtureParamName());

}  // namespace DPINFER_UNITY_ID
}  // namespace
