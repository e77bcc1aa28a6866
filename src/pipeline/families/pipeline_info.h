#pragma once
// The PipelineInfo every family fills the same way.

#include <array>
#include <cstdint>
#include <string>

#include "dpinfer/pipeline/families/family.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/model_dir.h"

namespace dpinfer::pipeline {

/// The facts of a loaded pipeline: its family, model, scheduler, device and dtype, its
/// settings (`settings`, already resolved), the default image size {height, width} and
/// the family's defaults.
PipelineInfo pipeline_info(const ModelDir& model, const LoadRequest& request, const Family& family,
                           const std::string& scheduler_name, const nlohmann::json& settings,
                           std::array<int64_t, 2> default_size);

}  // namespace dpinfer::pipeline
