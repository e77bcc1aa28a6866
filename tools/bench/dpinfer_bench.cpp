// dpinfer_bench: times dpinfer's pipeline on a model of a given shape with random weights.
//
// --shape is a diffusers directory whose weights, if any, are never read (configs/models/sd15-shape
// by default; configs/models/sdxl-shape for SDXL base). For every component of its model_index.json
// whose class is in dpinfer's model-class table (pipeline::find_model_class), it builds the model on
// the CPU in float32, fills it with random values of the magnitudes LibTorch's default initialisation
// gives, and writes its weights as safetensors, one component at a time; every other component's
// folder (the tokenizers, the scheduler) is copied as it is. That makes a complete diffusers directory
// (--model-dir, or a temporary one), which it then loads with load_text_to_image() and times
// generate(), exactly what `dpinfer generate` runs. So nothing in the shipped binaries learns about
// random weights, and tools/bench/diffusers_peer.py can load the very same files into diffusers.
//
// It prints seconds per image, images per second and the peak GPU memory of the caching
// allocator per batch size, and writes the same as JSON (--json) for the peer. The images
// are noise. Benchmarks compare against a peer measured in the same run; nothing here
// asserts a time.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>
#include <torch/version.h>

#ifdef DPINFER_BENCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#include "dpinfer/io/png_writer.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/model_dir.h"
#include "dpinfer/pipeline/models/model_classes.h"
#include "dpinfer/pipeline/models/vision/qwen2_5_vl_vision.h"
#include "dpinfer/pipeline/models/vision/qwen2_vl_image_processor.h"
#include "dpinfer/plan/generate_options.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/version.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace dpinfer;

namespace {

struct Options {
  std::string shape = DPINFER_DEFAULT_SHAPE;
  std::string model_dir;  // empty: a temporary directory, removed at the end
  std::string device = "auto";
  std::string dtype = "auto";
  std::string weight_storage = "default";
  std::string offload = "none";  // --offload: none, model, blocks or blocks:N
  std::string weights_dtype = "fp16";
  std::string scheduler;
  int width = 0;   // 0: the model's default (512 for SD 1.5, 1024 for SDXL base)
  int height = 0;
  int steps = 25;
  std::optional<double> guidance_scale;  // unset: the model's default (7.5 SD, 5.0 SDXL)
  std::string negative_prompt;  // Qwen-Image's true CFG runs only with one
  std::vector<std::string> set;  // --set KEY=VALUE: the family's settings (a step cache, max_sequence_length)
  bool cuda_graphs = false;      // --cuda-graphs, as dpinfer generate's
  bool same_prompts = false;     // --same-prompts: every call the same prompts (the cache of encodings serves them)
  std::vector<int> batch_sizes = {1, 8};
  int warmup = 1;
  int repeats = 3;
  uint64_t seed = 0;
  uint64_t weights_seed = 1234;
  std::string json_path;
  std::string images_dir;
  bool vision_tower = false;               // --vision-tower: the Qwen2.5-VL vision tower alone (run_vision_tower)
  std::vector<int> vision_sizes = {384, 1024};
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw Error("cannot read " + p.string());
  return json::parse(in);
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  if (!out) throw Error("cannot write " + p.string());
}

std::string safetensors_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "F32";
    case at::kHalf: return "F16";
    case at::kBFloat16: return "BF16";
    default: throw Error("weights dtype: expected fp32, fp16 or bf16");
  }
}

at::ScalarType parse_dtype(const std::string& d) {
  if (d == "fp32") return at::kFloat;
  if (d == "fp16") return at::kHalf;
  if (d == "bf16") return at::kBFloat16;
  throw UsageError("dtype: expected fp32, fp16 or bf16, got '" + d + "'");
}

/// The random value of parameter `name` of `shape`, in float32 on the CPU, with the magnitudes
/// LibTorch's default initialisation gives (dpinfer's modules are built uninitialised): weights
/// of rank 2 and more, and their biases, uniform in +-1/sqrt(fan_in) (kaiming_uniform with
/// a = sqrt(5)); norm weights 1 and norm biases 0; embeddings N(0, 1). `weight_shape` is the
/// shape of the weight beside a bias, else `shape` itself. Draws from the global generator.
at::Tensor random_parameter(const std::string& name, at::IntArrayRef shape, at::IntArrayRef weight_shape) {
  const bool is_bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
  at::Tensor t = at::empty(shape, at::kFloat);
  if (name.find("embedding") != std::string::npos && shape.size() == 2) return t.normal_(0, 1);
  if (weight_shape.size() >= 2) {
    int64_t fan_in = 1;
    for (size_t d = 1; d < weight_shape.size(); ++d) fan_in *= weight_shape[d];
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    return t.uniform_(-bound, bound);
  }
  return t.fill_(is_bias ? 0.0 : 1.0);
}

/// Writes random values (random_parameter()) for every parameter and floating-point buffer of `module`, built on the meta
/// device, as `dtype`, under its own name (the checkpoint key: dpinfer's modules are named as
/// diffusers' and transformers' state_dicts), one tensor at a time in name order: a 7B text
/// encoder is written with one tensor in memory, not the whole model. Returns the bytes written.
uint64_t write_random_safetensors(const fs::path& path, torch::nn::Module& module, at::ScalarType dtype) {
  std::map<std::string, std::vector<int64_t>> shapes;  // name order: the order values are drawn in
  for (const auto& p : module.named_parameters(/*recurse=*/true)) shapes.emplace(p.key(), p.value().sizes().vec());
  // Saved buffers load like parameters (AutoencoderKLFlux2's bn.running_mean / running_var): 1-D ones get 1, as a
  // norm weight does, which is a valid variance.
  for (const auto& b : module.named_buffers(/*recurse=*/true)) {
    if (!at::isFloatingType(b.value().scalar_type()))
      throw Error("the module has a buffer '" + b.key() + "' that is not floating point; random weights are written "
                  "for floating-point tensors only");
    shapes.emplace(b.key(), b.value().sizes().vec());
  }
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}, {"generated_by", "tools/bench/dpinfer_bench (random weights)"}};
  const uint64_t element_size = c10::elementSize(dtype);
  uint64_t offset = 0;
  for (const auto& [name, shape] : shapes) {
    uint64_t n = element_size;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    header[name] = {{"dtype", safetensors_dtype(dtype)}, {"shape", shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // as safetensors pads its header
  std::ofstream out(path, std::ios::binary);
  uint64_t len = h.size();
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(len >> (8 * i));
  out.write(reinterpret_cast<const char*>(le), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& [name, shape] : shapes) {
    const bool is_bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    auto weight = shapes.find(name.substr(0, name.rfind('.')) + ".weight");
    const std::vector<int64_t>& weight_shape = is_bias && weight != shapes.end() ? weight->second : shape;
    const at::Tensor c = random_parameter(name, shape, weight_shape).to(dtype).contiguous();
    out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.numel() * c.element_size()));
  }
  out.close();
  if (!out) throw Error("cannot write " + path.string());
  return offset;
}

/// The kernel's peak resident set size of this process so far, in GB.
double peak_rss_gb() {
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024 / 1e9;  // ru_maxrss is in KiB on Linux
}

/// Copies the folder `from` to `to`, following symbolic links (sd15-shape's tokenizer links
/// to tests/data), so that the copy stands alone.
void copy_folder(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  for (const auto& e : fs::recursive_directory_iterator(from)) {
    const fs::path target = to / e.path().lexically_relative(from);  // not fs::relative: it resolves links
    if (e.is_directory()) {
      fs::create_directories(target);
    } else {
      fs::copy_file(e.path(), target, fs::copy_options::overwrite_existing);  // follows links
    }
  }
}

/// model_index.json's components: each entry ["library", "ClassName"] (null ones are absent).
std::vector<std::pair<std::string, std::string>> components_of(const json& index) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, v] : index.items())
    if (v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_string())
      out.emplace_back(name, v[1].get<std::string>());
  return out;
}

/// Makes `dir` a diffusers directory of `shape`'s configs, tokenizers and scheduler with
/// random weights. Reuses it when its stamp says it was made from the same shape, seed and
/// dtype. Builds, fills and writes one model at a time, in model_index.json's (sorted)
/// order, freeing each before the next: the host memory needed is the largest model in
/// float32 (SDXL's UNet: 10.3 GB) plus one tensor.
void make_random_model(const Options& o, const fs::path& dir) {
  const fs::path shape = fs::weakly_canonical(fs::absolute(o.shape));
  if (!fs::exists(shape / "model_index.json")) throw UsageError("--shape " + shape.string() + ": no model_index.json");
  const json index = read_json(shape / "model_index.json");
  const auto components = components_of(index);
  for (const auto& [component, class_name] : components)
    if (pipeline::find_model_class(class_name) != nullptr && !fs::exists(shape / component / "config.json"))
      throw UsageError("--shape " + shape.string() + ": no " + component + "/config.json for its " + class_name);
  const json stamp = {{"shape", shape.string()}, {"weights_seed", o.weights_seed}, {"weights_dtype", o.weights_dtype}};
  if (fs::exists(dir / "dpinfer_bench.json") && read_json(dir / "dpinfer_bench.json") == stamp) {
    std::printf("dpinfer_bench: reusing the random-weight model in %s\n", dir.string().c_str());
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(shape / "model_index.json", dir / "model_index.json");

  c10::InferenceMode guard;
  // One seed for the whole directory, drawn from in model_index.json's order (for sd15-shape:
  // text_encoder, unet, vae, as before this loop was generic, so its weights are unchanged).
  at::manual_seed(o.weights_seed);
  const at::ScalarType wd = parse_dtype(o.weights_dtype);
  uint64_t bytes = 0;
  for (const auto& [component, class_name] : components) {
    const pipeline::ModelClass* model_class = pipeline::find_model_class(class_name);
    if (model_class == nullptr) {
      // Tokenizers, the scheduler, and anything else dpinfer does not build: copied as they are.
      if (fs::is_directory(shape / component)) {
        copy_folder(shape / component, dir / component);
      } else {
        std::printf("dpinfer_bench: note: --shape has no %s folder for its %s; left out\n", component.c_str(),
                    class_name.c_str());
      }
      continue;
    }
    const auto t1 = std::chrono::steady_clock::now();
    fs::create_directories(dir / component);
    fs::copy_file(shape / component / "config.json", dir / component / "config.json");
    const std::string file =
        model_class->library == "transformers" ? "model.safetensors" : "diffusion_pytorch_model.safetensors";
    int64_t params = 0;
    uint64_t written = 0;
    {
      // On the meta device: the module gives names and shapes, and holds no memory.
      auto module = model_class->build(read_json(shape / component / "config.json"),
                                       at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
      for (const auto& p : module->parameters(/*recurse=*/true)) params += p.numel();
      written = write_random_safetensors(dir / component / file, *module, wd);
    }
    bytes += written;
    std::printf("dpinfer_bench: %s (%s): %.1f M parameters, %.2f GB in %.1f s (peak RSS so far %.2f GB)\n",
                component.c_str(), class_name.c_str(), static_cast<double>(params) / 1e6,
                static_cast<double>(written) / 1e9, seconds_since(t1), peak_rss_gb());
    std::fflush(stdout);
  }
  write_text(dir / "dpinfer_bench.json", stamp.dump(1));
  std::printf("dpinfer_bench: wrote random %s weights of %s to %s: %.2f GB in %.1f s, peak RSS %.2f GB\n",
              o.weights_dtype.c_str(), shape.string().c_str(), dir.string().c_str(), static_cast<double>(bytes) / 1e9,
              seconds_since(t0), peak_rss_gb());
  std::fflush(stdout);
}

struct MemoryStats {
  double peak_allocated_gib = 0;
  double peak_reserved_gib = 0;
};

bool on_cuda(const std::string& device) { return device.rfind("cuda", 0) == 0; }

void reset_peak_memory(const std::string& device) {
#ifdef DPINFER_BENCH_CUDA
  if (on_cuda(device)) c10::cuda::CUDACachingAllocator::resetPeakStats(at::Device(device).index());
#else
  (void)device;
#endif
}

MemoryStats peak_memory(const std::string& device) {
  MemoryStats m;
#ifdef DPINFER_BENCH_CUDA
  if (on_cuda(device)) {
    const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(at::Device(device).index());
    constexpr auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    m.peak_allocated_gib = static_cast<double>(s.allocated_bytes[all].peak) / (1 << 30);
    m.peak_reserved_gib = static_cast<double>(s.reserved_bytes[all].peak) / (1 << 30);
  }
#else
  (void)device;
#endif
  return m;
}

/// GB/s of one copy of `bytes` from pinned host memory to `device` (the median of 5), or 0 off CUDA.
double host_to_device_gbps(const std::string& device, int64_t bytes) {
#ifdef DPINFER_BENCH_CUDA
  if (!on_cuda(device) || bytes <= 0) return 0;
  const at::Tensor host = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  std::vector<double> secs;
  for (int i = 0; i < 5; ++i) {
    torch::cuda::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    const at::Tensor copy = host.to(at::Device(device), /*non_blocking=*/true);
    torch::cuda::synchronize();
    secs.push_back(seconds_since(t0));
  }
  std::sort(secs.begin(), secs.end());
  return static_cast<double>(bytes) / 1e9 / secs[2];
#else
  (void)device;
  (void)bytes;
  return 0;
#endif
}

std::string device_name(const std::string& device) {
#ifdef DPINFER_BENCH_CUDA
  if (on_cuda(device)) {
    const cudaDeviceProp* p = at::cuda::getDeviceProperties(at::Device(device).index());
    return std::string(p->name) + " (sm_" + std::to_string(p->major) + std::to_string(p->minor) + ")";
  }
#endif
  return device == "cpu" ? "cpu (" + std::to_string(at::get_num_threads()) + " threads)" : device;
}

const std::vector<std::string>& prompts() {
  static const std::vector<std::string> p = {
      "a photograph of an astronaut riding a horse",
      "a watercolor painting of a lighthouse at dawn, soft light",
      "a bowl of ramen on a wooden table, studio photo, 35mm",
      "an isometric drawing of a tiny city on a floating island",
  };
  return p;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int run(const Options& o_in) {
  Options o = o_in;
  if (o.device == "auto") o.device = torch::cuda::is_available() ? "cuda:0" : "cpu";
  if (o.device == "cuda") o.device = "cuda:0";
  if (o.dtype == "auto") o.dtype = on_cuda(o.device) ? "fp16" : "fp32";
  if (on_cuda(o.device) && !torch::cuda::is_available()) throw UsageError("--device " + o.device + ": no CUDA device");

  const bool temporary = o.model_dir.empty();
  fs::path dir = temporary ? fs::temp_directory_path() / ("dpinfer-bench-" + std::to_string(::getpid())) : fs::path(o.model_dir);
  dir = fs::absolute(dir);
  struct Cleanup {
    bool on;
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      if (on) fs::remove_all(dir, ec);
    }
  } cleanup{temporary, dir};
  make_random_model(o, dir);

  pipeline::LoadRequest po;
  po.model = dir.string();
  po.dtype = o.dtype;
  po.device = o.device;
  po.scheduler = o.scheduler;
  po.weight_storage = o.weight_storage;
  // --offload and --set as dpinfer generate reads them.
  const plan::OffloadChoice offload = plan::parse_offload(o.offload);
  po.offload = offload.mode;
  po.offload_blocks_per_group = offload.blocks_per_group;
  po.cuda_graphs = o.cuda_graphs;
  po.settings = plan::parse_key_values(o.set, "--set", "dbcache=0.08");
  auto t0 = std::chrono::steady_clock::now();
  auto pipe = pipeline::load_text_to_image(po);
  const double load_s = seconds_since(t0);
  const pipeline::PipelineInfo& info = pipe->info();
  if (o.width == 0) o.width = info.default_width;
  if (o.height == 0) o.height = info.default_height;
  const double guidance_scale = o.guidance_scale.value_or(info.default_guidance_scale);

  json report;
  report["tool"] = "dpinfer_bench";
  report["dpinfer_version"] = dpinfer::version();
  report["torch_version"] = TORCH_VERSION;
  report["device"] = o.device;
  report["device_name"] = device_name(o.device);
  report["dtype"] = o.dtype;
  report["weight_storage"] = o.weight_storage;
  report["offload"] = o.offload;
  report["model_dir"] = dir.string();
  report["shape"] = fs::weakly_canonical(fs::absolute(o.shape)).string();
  report["weights"] = "random (LibTorch default init, seed " + std::to_string(o.weights_seed) + ", stored " + o.weights_dtype + ")";
  report["scheduler"] = info.scheduler_name;
  report["width"] = o.width;
  report["height"] = o.height;
  report["steps"] = o.steps;
  report["pipeline_class"] = info.pipeline_class;
  report["guidance_scale"] = guidance_scale;
  report["settings"] = info.settings;  // every setting of the family, --set's over the defaults
  report["set"] = po.settings;         // what --set gave (diffusers_peer.py applies a step cache from it)
  report["cuda_graphs"] = o.cuda_graphs;
  report["warmup"] = o.warmup;
  report["repeats"] = o.repeats;
  report["load_seconds"] = load_s;
  report["timing"] = "wall clock of TextToImage::generate(batch), which returns uint8 images on the CPU (so it ends synchronised); median of the timed runs after the warm-up runs; each call its own prompts unless same_prompts";

  std::printf("dpinfer_bench: %s, %dx%d, %d steps, guidance %.1f, %s, %s on %s [%s]\n", o.shape.c_str(), o.width,
              o.height, o.steps, guidance_scale, info.scheduler_name.c_str(), o.dtype.c_str(), o.device.c_str(),
              device_name(o.device).c_str());
  std::printf("dpinfer_bench: pipeline loaded in %.2f s\n", load_s);

  json runs = json::array();
  for (int b : o.batch_sizes) {
    // The requests of each generate() call, the warm-ups first. Each call has prompts of its own: dpinfer keeps a
    // run's encodings (families/prompt_embedding_cache.h), so a call that repeated the last one's prompts would
    // time no text encoder, while diffusers encodes at every call. The last timed call takes the plain prompts
    // (its images are the ones --images writes); the others append " (call N)". --same-prompts times the
    // repeated-prompt case instead: after the first call, dpinfer encodes nothing.
    const int calls = o.warmup + o.repeats;
    std::vector<std::vector<pipeline::ImageRequest>> call_batches;
    json call_requests = json::array();
    for (int c = 0; c < calls; ++c) {
      std::vector<pipeline::ImageRequest> batch;
      json requests = json::array();
      for (int i = 0; i < b; ++i) {
        pipeline::ImageRequest r;
        r.prompt = prompts()[static_cast<size_t>(i) % prompts().size()];
        if (!o.same_prompts && c + 1 < calls) r.prompt += " (call " + std::to_string(c + 1) + ")";
        r.negative_prompt = o.negative_prompt;
        r.seed = o.seed + static_cast<uint64_t>(i);
        r.steps = o.steps;
        r.guidance_scale = guidance_scale;
        r.width = o.width;
        r.height = o.height;
        r.settings = info.settings;
        requests.push_back({{"prompt", r.prompt}, {"negative_prompt", r.negative_prompt}, {"seed", r.seed}});
        batch.push_back(std::move(r));
      }
      call_batches.push_back(std::move(batch));
      call_requests.push_back(std::move(requests));
    }
    std::vector<double> warm;
    for (int w = 0; w < o.warmup; ++w) {
      t0 = std::chrono::steady_clock::now();
      pipe->generate(call_batches[static_cast<size_t>(w)]);
      warm.push_back(seconds_since(t0));
    }
    reset_peak_memory(o.device);
    const json offload_before = pipe->offload_statistics();
    const json statistics_before = pipe->statistics();
    std::vector<double> secs;
    std::vector<pipeline::RgbImage> images;
    for (int r = 0; r < o.repeats; ++r) {
      t0 = std::chrono::steady_clock::now();
      images = pipe->generate(call_batches[static_cast<size_t>(o.warmup + r)]);
      secs.push_back(seconds_since(t0));
    }
    const MemoryStats mem = peak_memory(o.device);
    // A step cache's counts over the timed runs, per run: the denoiser calls and those that skipped the cached blocks.
    const json statistics_after = pipe->statistics();
    const auto per_run = [&](const char* key) {
      return static_cast<double>(statistics_after.value(key, int64_t{0}) - statistics_before.value(key, int64_t{0})) /
             o.repeats;
    };
    const double m = median(secs);
    int finite = 0;
    for (const auto& img : images) finite += img.finite;
    json entry = {{"batch_size", b},
                  {"warmup_seconds", warm},
                  {"seconds", secs},
                  {"median_seconds", m},
                  {"seconds_per_image", m / b},
                  {"images_per_second", b / m},
                  {"steps_per_second", o.steps / m},
                  {"peak_allocated_gib", mem.peak_allocated_gib},
                  {"peak_reserved_gib", mem.peak_reserved_gib},
                  {"finite_images", finite},
                  {"denoiser_calls", per_run("denoiser_calls")},
                  {"denoiser_calls_cached", per_run("denoiser_calls_cached")},
                  {"requests", call_requests.back()},  // the last timed call's: the images --images writes
                  {"call_requests", call_requests},    // every call's, the warm-ups first (diffusers_peer.py)
                  {"same_prompts", o.same_prompts}};
    // --offload: what the timed runs moved, per run, and the host-to-device bandwidth a copy of
    // that size gets alone, so that the time the copies would take unhidden can be set against
    // the time offload added (tools/device/gpu_check.sh's offload step).
    const json offload_after = pipe->offload_statistics();
    if (offload_after.contains("group_copies")) {
      const double copies = static_cast<double>(offload_after["group_copies"].get<int64_t>() -
                                                offload_before["group_copies"].get<int64_t>()) / o.repeats;
      const double bytes = copies * static_cast<double>(offload_after["offloaded_bytes"].get<int64_t>()) /
                           static_cast<double>(offload_after["block_groups"].get<int64_t>());
      entry["offload_bytes_per_run"] = bytes;
      const double gbps = host_to_device_gbps(o.device, offload_after["largest_group_bytes"].get<int64_t>());
      entry["host_to_device_gb_per_s"] = gbps;
      if (gbps > 0) entry["offload_copy_seconds_alone"] = bytes / 1e9 / gbps;
    } else if (offload_after.contains("bytes_to_device")) {
      entry["offload_bytes_per_run"] = static_cast<double>(offload_after["bytes_to_device"].get<int64_t>() -
                                                           offload_before["bytes_to_device"].get<int64_t>()) /
                                       o.repeats;
    }
    report["offload_statistics"] = offload_after;
    if (!o.images_dir.empty()) {
      fs::create_directories(o.images_dir);
      json files = json::array();
      for (size_t k = 0; k < images.size(); ++k) {
        const std::string name = "dpinfer_b" + std::to_string(b) + "_" + std::to_string(k) + ".png";
        write_text(fs::path(o.images_dir) / name, io::encode_png(images[k].pixels.data(), images[k].width, images[k].height, {}));
        files.push_back(name);
      }
      entry["images"] = files;
    }
    runs.push_back(entry);
    report["runs"] = runs;
    // Rewritten after each batch size, so that a run cut short still leaves what it measured.
    if (!o.json_path.empty()) write_text(o.json_path, report.dump(1) + "\n");
  }

  std::printf("\n  batch  s/batch  s/image  images/s  steps/s  peak alloc GiB  peak reserved GiB  finite\n");
  for (const json& r : runs)
    std::printf("  %5d  %7.3f  %7.3f  %8.3f  %7.2f  %14.2f  %17.2f  %3d/%d\n", r["batch_size"].get<int>(),
                r["median_seconds"].get<double>(), r["seconds_per_image"].get<double>(),
                r["images_per_second"].get<double>(), r["steps_per_second"].get<double>(),
                r["peak_allocated_gib"].get<double>(), r["peak_reserved_gib"].get<double>(),
                r["finite_images"].get<int>(), r["batch_size"].get<int>());
  if (!o.json_path.empty()) std::printf("\ndpinfer_bench: wrote %s\n", o.json_path.c_str());
  return 0;
}

}  // namespace

/// This process's resident set size now, in GB (/proc/self/statm's second field).
double current_rss_gb() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / 1e9;
}

/// --vision-tower: Qwen-Image-Edit's vision tower alone (issue 29: its load and peak memory at the real shape), the
/// tower of --shape's text_encoder/config.json ("vision_config": Qwen2.5-VL 7B's in configs/models/qwen-image-shape)
/// with random weights under its checkpoint keys ("visual.*", in --model-dir, written when missing and kept),
/// loaded through the pipeline's own load_qwen2_5_vl_vision() and run on one square image per --vision-sizes edge,
/// smallest first, processed as --shape's processor/preprocessor_config.json says (Qwen-Image-Edit's: 384 is
/// the Plus pipeline's condition image, 1024 the Edit pipeline's). Prints the RSS before and after the load, the load
/// time, and per size the tokens, the forward's time and the peak RSS so far, as one JSON line each for
/// tools/bench/vision_tower_memory.sh.
int run_vision_tower(const Options& o) {
  const fs::path shape = fs::weakly_canonical(fs::absolute(o.shape));
  const json config = read_json(shape / "text_encoder" / "config.json");
  if (!config.contains("vision_config"))
    throw UsageError("--shape " + shape.string() + ": text_encoder/config.json has no vision_config");
  if (!fs::exists(shape / "processor" / "preprocessor_config.json"))
    throw UsageError("--shape " + shape.string() + ": no processor/preprocessor_config.json");
  if (o.model_dir.empty()) throw UsageError("--vision-tower needs --model-dir (where the tower's weights are kept)");
  const fs::path dir = fs::absolute(o.model_dir);
  const json stamp = {{"shape", shape.string()}, {"weights_seed", o.weights_seed}, {"weights_dtype", o.weights_dtype},
                      {"vision_tower", true}};
  if (!(fs::exists(dir / "dpinfer_bench.json") && read_json(dir / "dpinfer_bench.json") == stamp)) {
    c10::InferenceMode guard;
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy_file(shape / "text_encoder" / "config.json", dir / "config.json");
    at::manual_seed(o.weights_seed);
    const pipeline::ModelClass* tower_class = pipeline::find_model_class(pipeline::kQwen2_5_VLVisionClass);
    if (tower_class == nullptr) throw Error("the model-class table has no vision tower row");
    auto module = tower_class->build(config, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
    const uint64_t bytes = write_random_safetensors(dir / "model.safetensors", *module, parse_dtype(o.weights_dtype));
    write_text(dir / "dpinfer_bench.json", stamp.dump(1));
    std::printf("dpinfer_bench: wrote the vision tower's random %s weights to %s: %.2f GB\n", o.weights_dtype.c_str(),
                dir.string().c_str(), static_cast<double>(bytes) / 1e9);
    std::fflush(stdout);
    // The measurement runs in a fresh process (tools/bench/vision_tower_memory.sh runs this twice), so that writing
    // leaves nothing in its peak.
    return 0;
  }
  const std::string device = o.device == "auto" ? "cpu" : o.device;
  const std::string dtype = o.dtype == "auto" ? "bf16" : o.dtype;
  c10::InferenceMode guard;
  const double rss_before = current_rss_gb();
  pipeline::Component text_encoder;
  text_encoder.name = "text_encoder";
  text_encoder.role = pipeline::ComponentRole::kTextEncoder;
  text_encoder.library = "transformers";
  text_encoder.class_name = "Qwen2_5_VLForConditionalGeneration";
  text_encoder.path = dir.string();
  text_encoder.config = config;
  const at::TensorOptions options = at::TensorOptions().dtype(parse_dtype(dtype)).device(at::Device(device));
  auto t0 = std::chrono::steady_clock::now();
  const auto tower = pipeline::load_qwen2_5_vl_vision(text_encoder, options);
  const double load_s = seconds_since(t0);
  int64_t params = 0;
  for (const auto& p : tower->parameters(/*recurse=*/true)) params += p.numel();
  std::printf("%s\n", json({{"event", "load"}, {"dtype", dtype}, {"device", device}, {"parameters", params},
                            {"rss_before_gb", rss_before}, {"rss_after_gb", current_rss_gb()},
                            {"peak_rss_gb", peak_rss_gb()}, {"load_s", load_s}, {"threads", at::get_num_threads()}})
                          .dump()
                          .c_str());
  std::fflush(stdout);
  const pipeline::Qwen2VLImageProcessor processor(
      pipeline::Qwen2VLImageProcessorConfig::from_dir((shape / "processor").string()));
  std::vector<int> sizes = o.vision_sizes;
  std::sort(sizes.begin(), sizes.end());
  for (int edge : sizes) {
    // A smooth gradient: the pixels do not change the tower's cost.
    io::RgbImageData image;
    image.width = edge;
    image.height = edge;
    image.pixels.resize(static_cast<size_t>(edge) * edge * 3);
    for (int y = 0; y < edge; ++y)
      for (int x = 0; x < edge; ++x)
        for (int ch = 0; ch < 3; ++ch)
          image.pixels[(static_cast<size_t>(y) * edge + x) * 3 + ch] = static_cast<uint8_t>((x + 2 * y + 85 * ch) % 256);
    const pipeline::Qwen2VLImageInput input = processor.preprocess(image);
    t0 = std::chrono::steady_clock::now();
    const at::Tensor out = tower->forward(input.pixel_values.to(options), {input.grid_thw});
    const double forward_s = seconds_since(t0);
    std::printf("%s\n", json({{"event", "forward"}, {"edge", edge}, {"resized", {input.resized_height, input.resized_width}},
                              {"patches", input.pixel_values.size(0)}, {"tokens", out.size(0)},
                              {"finite", at::isfinite(out).all().item<bool>()}, {"forward_s", forward_s},
                              {"rss_after_gb", current_rss_gb()}, {"peak_rss_gb", peak_rss_gb()}})
                            .dump()
                            .c_str());
    std::fflush(stdout);
  }
  return 0;
}

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"dpinfer_bench: time dpinfer's pipeline on a model shape with random weights (images are noise)"};
  app.add_option("--shape", o.shape, "diffusers directory giving the configs, tokenizers and scheduler (its weights are never read), e.g. "
                 "configs/models/sdxl-shape")
      ->capture_default_str();
  app.add_option("--model-dir", o.model_dir,
                 "where to write the random-weight model, kept afterwards and reused when it matches "
                 "(default: a temporary directory, removed)");
  app.add_option("--device", o.device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--dtype", o.dtype, "auto (fp16 on CUDA, fp32 on CPU), fp32, fp16 or bf16")->capture_default_str();
  app.add_option("--weights-dtype", o.weights_dtype, "dtype of the written weight files")->capture_default_str();
  app.add_option("--offload", o.offload, "none, model, blocks or blocks:N, as dpinfer generate's")
      ->capture_default_str();
  app.add_option("--weight-storage", o.weight_storage, "default, fp8 or fp8-denoiser, as dpinfer generate's")
      ->capture_default_str();
  app.add_option("--scheduler", o.scheduler, "dpinfer scheduler name (default: the shape's)");
  app.add_option("--width", o.width, "image width (default: the model's, 512 for SD 1.5, 1024 for SDXL)");
  app.add_option("--height", o.height, "image height (default: the model's)");
  app.add_option("--steps", o.steps)->capture_default_str();
  double guidance_scale = 0;
  CLI::Option* guidance_opt =
      app.add_option("--guidance-scale", guidance_scale, "CFG scale (default: the model's, 7.5 SD, 5.0 SDXL)");
  app.add_option("--negative-prompt", o.negative_prompt,
                 "every image's negative prompt (default none; Qwen-Image guides only with one, e.g. \" \")");
  app.add_option("--set", o.set,
                 "a family setting KEY=VALUE (repeatable), as dpinfer generate's: e.g. --set dbcache=0.08 --set "
                 "dbcache_fn=1, --set first_block_cache=0.2, --set max_sequence_length=64");
  app.add_flag("--cuda-graphs", o.cuda_graphs, "replay the denoiser's calls from CUDA graphs, as dpinfer generate's");
  app.add_flag("--same-prompts", o.same_prompts,
               "every call the same prompts, so that dpinfer's cache of encodings serves all calls after the first "
               "(default: each call its own prompts, so that each encodes them, as a run of distinct prompts does)");
  app.add_option("--batch-sizes", o.batch_sizes, "batch sizes to time, e.g. 1,8")->delimiter(',')->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed runs per batch size")->capture_default_str();
  app.add_option("--repeats", o.repeats, "timed runs per batch size (the median is reported)")->capture_default_str();
  app.add_option("--seed", o.seed, "image i of a batch gets seed + i")->capture_default_str();
  app.add_option("--weights-seed", o.weights_seed, "seed of the random weights")->capture_default_str();
  app.add_option("--json", o.json_path, "write the results here (tools/bench/diffusers_peer.py reads it)");
  app.add_option("--images", o.images_dir, "write the last timed run's images here as PNGs");
  app.add_flag("--vision-tower", o.vision_tower,
               "instead: Qwen-Image-Edit's vision tower alone, from --shape's text_encoder config with random weights "
               "kept in --model-dir; its load and per image its forward time and peak RSS (run_vision_tower)");
  app.add_option("--vision-sizes", o.vision_sizes, "with --vision-tower: the square images' edges, e.g. 384,1024")
      ->delimiter(',')
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (guidance_opt->count() > 0) o.guidance_scale = guidance_scale;
  if (o.repeats < 1 || o.warmup < 0 || o.batch_sizes.empty()) {
    std::cerr << "dpinfer_bench: --repeats must be >= 1, --warmup >= 0, and --batch-sizes non-empty\n";
    return 2;
  }
  try {
    if (o.vision_tower) return run_vision_tower(o);
    return run(o);
  } catch (const InputError& e) {
    std::cerr << "dpinfer_bench: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "dpinfer_bench: " << e.what() << "\n";
    return 1;
  }
}
