#pragma once
// What each PNG says about itself: AUTOMATIC1111's "parameters" infotext, which
// image browsers and webuis read, and the full record as JSON.

#include <nlohmann/json.hpp>
#include <string>

#include "dpinfer/pipeline/text_to_image.h"
#include "dpinfer/plan/items.h"

namespace dpinfer::worker {

/// "PROMPT\nNegative prompt: NEG\nSteps: 20, Sampler: Euler a, CFG scale: 7.5, Seed: 5,
/// Size: 512x512, Model: NAME". The negative-prompt line is left out when it is
/// empty, as AUTOMATIC1111 does.
std::string a1111_infotext(const plan::Item& item, const pipeline::PipelineInfo& info);

/// The manifest/metadata record of an item (without status, timing or rank).
nlohmann::json item_record(const plan::Item& item, const pipeline::PipelineInfo& info);

}  // namespace dpinfer::worker
