#pragma once
// `dpinfer generate`: one worker. It runs alone (rank 0 of 1), under `dpinfer
// launch`, torchrun, srun or mpirun, with its rank from the environment.
//
// Exit statuses: 0 every item done; 3 finished but some items failed; 2 bad input;
// 1 fatal; 128+n stopped by signal n (SIGTERM, SIGINT, SIGUSR1, SIGUSR2) after the
// current batch, with the manifests flushed.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/text_to_image.h"
#include "dpinfer/plan/generate_options.h"

namespace dpinfer::worker {

/// How the worker loads its pipeline: pipeline::load_text_to_image in dpinfer-worker, a test
/// double in the worker's tests.
using PipelineFactory = std::function<std::unique_ptr<pipeline::TextToImage>(const pipeline::LoadRequest&)>;

/// Runs the worker to its end; returns the exit status. Never throws.
int run_generate(const plan::GenerateOptions& options, const PipelineFactory& make_pipeline);

/// `dpinfer generate ARGS...` (argv[0] is the program, argv[1] "generate"): parses,
/// sets up logging, runs. Never throws.
int generate_main(int argc, char** argv, const PipelineFactory& make_pipeline);

}  // namespace dpinfer::worker
