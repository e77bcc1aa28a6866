#pragma once
// A pipeline golden's case (tools/fixtures/make_*_pipelines.py, cases.json) as the batch dpinfer is asked for.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dpinfer/pipeline/text_to_image.h"

namespace dpinfer::test {

/// The case's images in diffusers' batch order (prompt-major, one generator, so one seed, each), with what
/// dpinfer is asked: the case's "dpinfer" settings and guidance scale when recorded (Qwen-Image, FLUX.1, whose
/// guidance is diffusers' true_cfg_scale or distilled guidance), else its "settings" (Z-Image), else the SD
/// families' three call arguments and their guidance_scale. An img2img case ("input_images", one file per image,
/// and "strength") gets each file decoded and resized to the case's size, as the worker does. A FLUX.1 Kontext
/// case ("reference_images": make_kontext_pipelines.py, make_flux2_reference_goldens.py) gets each file sized as
/// `pipe`'s reference_size() says, whose final size must be the recorded "reference_sizes" (else this throws). A case with "loras" ([[path under the repository,
/// scale], ...]) asks for those LoRAs on each item.
std::vector<pipeline::ImageRequest> golden_case_requests(const nlohmann::json& c,
                                                         const pipeline::TextToImage* pipe = nullptr);

/// A fixture's cases.json: "<name>" reads tests/data/pipelines/<name>.golden/cases.json, "<name>/<sub>" its
/// <sub>/cases.json (e.g. "tiny-qwen-image-edit/edit").
nlohmann::json golden_cases_doc(const std::string& fixture);

/// The model directory a cases.json names (its "model_dir", relative to the repository), as a path.
std::string golden_model_dir(const nlohmann::json& doc);

/// Up to `limit` float32 cases of `doc` that run with the pipeline's own scheduler, each as the batch
/// golden_case_requests() makes of it (`pipe` for the cases with references): what the suites that compare one
/// load of a pipeline with another (two-phase chunks, offload) run.
std::vector<std::vector<pipeline::ImageRequest>> golden_batches(const nlohmann::json& doc, size_t limit,
                                                                const pipeline::TextToImage* pipe = nullptr);

}  // namespace dpinfer::test
