#pragma once
// One factory per scheduler class; make_scheduler() (src/pipeline/schedulers/scheduler.cpp) picks one.

#include <memory>

#include "dpinfer/pipeline/schedulers/scheduler.h"
#include "scheduler_common.h"

namespace dpinfer::pipeline::schedulers {

/// diffusers' PNDMScheduler (PLMS, or PRK warm-up when skip_prk_steps is false).
std::unique_ptr<Scheduler> make_pndm(const ConfigReader& cfg);
/// diffusers' DDIMScheduler; `eta` scales the added noise (0 = deterministic).
std::unique_ptr<Scheduler> make_ddim(const ConfigReader& cfg, double eta);
/// diffusers' EulerDiscreteScheduler.
std::unique_ptr<Scheduler> make_euler(const ConfigReader& cfg);
/// diffusers' EulerAncestralDiscreteScheduler.
std::unique_ptr<Scheduler> make_euler_ancestral(const ConfigReader& cfg);
/// diffusers' DPMSolverMultistepScheduler (dpmsolver++ and sde-dpmsolver++).
std::unique_ptr<Scheduler> make_dpm_solver_multistep(const ConfigReader& cfg);
/// diffusers' LMSDiscreteScheduler.
std::unique_ptr<Scheduler> make_lms(const ConfigReader& cfg);
/// diffusers' UniPCMultistepScheduler.
std::unique_ptr<Scheduler> make_unipc(const ConfigReader& cfg);
/// diffusers' FlowMatchEulerDiscreteScheduler (SD3, FLUX, Qwen-Image, Z-Image).
std::unique_ptr<Scheduler> make_flow_match_euler(const ConfigReader& cfg);

}  // namespace dpinfer::pipeline::schedulers
