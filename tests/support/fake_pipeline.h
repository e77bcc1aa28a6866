#pragma once
// A test double for the worker tests: a "pipeline" whose image is a pure hash of
// its request, so that every plumbing mistake (wrong seed, prompt, size or index)
// shows in the pixels. It lives in tests/ only.
//
// Prompts steer it: "FAIL-ITEM" throws, "NAN-ITEM" returns a non-finite image,
// "EXIT-ITEM" ends the process with status 7 (a crashing rank), "SLOW-ITEM" takes
// one second (a rank that is mid-item when its peers stop). The environment
// variable DPINFER_FAKE_DELAY_MS makes each image take that long; DPINFER_FAKE_BATCH_LOG=FILE
// appends a line per batch to FILE naming its items, so that tests see how items were batched.

#include <memory>

#include "dpinfer/worker/worker.h"

namespace dpinfer::test {

std::unique_ptr<pipeline::TextToImage> make_fake_pipeline(const pipeline::LoadRequest& request);

/// The pixels the fake pipeline makes for `request`.
std::vector<uint8_t> fake_pixels(const pipeline::ImageRequest& request);

}  // namespace dpinfer::test
