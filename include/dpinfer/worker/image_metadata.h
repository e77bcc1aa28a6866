#pragma once
// What each PNG says about itself: AUTOMATIC1111's "parameters" infotext, which
// image browsers and webuis read, and the full record as JSON.

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "dpinfer/pipeline/text_to_image.h"
#include "dpinfer/plan/items.h"
#include "dpinfer/worker/model_hashes.h"

namespace dpinfer::worker {

/// "PROMPT\nNegative prompt: NEG\nSteps: 20, Sampler: Euler a, CFG scale: 7.5, Seed: 5,
/// Size: 512x512, Model hash: 0123456789, Model: NAME, Lora hashes: "name: 0123456789ab"". The
/// negative-prompt line is left out when it is empty, as AUTOMATIC1111 does; the item's LoRAs
/// follow the prompt as <lora:name:scale>. The hashes (model_hashes.h) are left out without
/// `hashes`.
std::string a1111_infotext(const plan::Item& item, const pipeline::PipelineInfo& info,
                           const RunHashes* hashes = nullptr);

/// The manifest/metadata record of an item (without status, timing or rank). The item's
/// model settings are fields of their own ("clip_skip": 1), and "settings" lists their names,
/// so that resume and merge treat them as part of what the item is.
/// With `hashes`, "model_hash" and each LoRA's "hash" too; "loras" lists each LoRA's name and
/// scale (and hash), "lora_paths" their files. "file_name" is the image's in `layout`, relative
/// to --out (plan::item_file_name).
nlohmann::json item_record(const plan::Item& item, const pipeline::PipelineInfo& info,
                           const RunHashes* hashes = nullptr, const plan::OutputLayout& layout = {});

/// What an item is: the record fields two records of it must agree on, each with the value
/// a record that lacks it stands for (records of older versions lack the newer settings,
/// and were made with their defaults). "model" is not among them: one model has many names
/// (a path, a hub id), and resume cannot tell them apart.
std::vector<std::pair<std::string, nlohmann::json>> identity_fields(const pipeline::PipelineInfo& info);

}  // namespace dpinfer::worker
