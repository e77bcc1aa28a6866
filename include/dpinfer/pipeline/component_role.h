#pragma once
// What a component of a pipeline does.

namespace dpinfer::pipeline {

enum class ComponentRole { kTokenizer, kTextEncoder, kDenoiser, kVae, kScheduler };

/// Whether a component of `role` has weight files.
inline bool has_weights(ComponentRole role) {
  return role == ComponentRole::kTextEncoder || role == ComponentRole::kDenoiser || role == ComponentRole::kVae;
}

}  // namespace dpinfer::pipeline
