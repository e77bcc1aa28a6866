// dpinfer-worker: the LibTorch half of dpinfer. `dpinfer generate` and the
// workers of `dpinfer launch PROMPTS` run this binary, so that the launcher
// itself never loads LibTorch.
#include <iostream>

#include "dpinfer/pipeline/stable_diffusion.h"
#include "dpinfer/util/error.h"
#include "dpinfer/worker/worker.h"

namespace {

std::unique_ptr<dpinfer::pipeline::TextToImage> make_pipeline(const dpinfer::worker::PipelineRequest& r) {
  if (r.model.empty())
    throw dpinfer::InputError(
        "no --model given: pass a diffusers directory (with model_index.json) or a hub id such as "
        "stable-diffusion-v1-5/stable-diffusion-v1-5 that is in your Hugging Face cache");
  dpinfer::pipeline::StableDiffusionOptions o;
  o.model = r.model;
  o.variant = r.variant;
  o.scheduler = r.scheduler;
  o.dtype = r.dtype;
  o.device = r.device;
  o.clip_skip = r.clip_skip;
  o.guidance_rescale = r.guidance_rescale;
  try {
    return dpinfer::pipeline::load_stable_diffusion(o);
  } catch (const dpinfer::InputError&) {
    throw;
  } catch (const dpinfer::Error& e) {
    throw dpinfer::InputError(e.what());  // a model that cannot be used is bad input (exit 2)
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string sub = argc > 1 ? argv[1] : "";
  if (sub == "generate") return dpinfer::worker::generate_main(argc, argv, make_pipeline);
  std::cerr << "dpinfer-worker: run it through 'dpinfer generate' or 'dpinfer launch'\n";
  return 2;
}
