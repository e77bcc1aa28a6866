#pragma once
// The LoRA key spelling a family reads that a refused file comes nearest to, and how the file differs from it,
// for `dpinfer inspect MODEL --lora FILE` (lora_inspect.h). Without a model and without LibTorch: names only.
//
// Each spelling is a set of key prefixes and a set of factor suffixes (kLoraSpellings in the .cpp, one row per
// spelling of docs/lora.md's table that the family's loader reads). A key scores 2 for a spelling when both its
// prefix and its suffix are the spelling's, 1 when one of them is; the nearest spelling has the highest total
// over the file's keys (the first in the table's order on a tie).

#include <string>
#include <vector>

#include "dpinfer/pipeline/loading/lora_keys.h"

namespace dpinfer::pipeline {

struct LoraNearestSpelling {
  std::string spelling;  ///< "diffusers / PEFT (<component>.<module>.lora_A.weight / .lora_B.weight)"
  /// "every key is spelled so", or "3 of its 8 keys are not, e.g. 'K' (expected ...)".
  std::string differs;
};

/// The spelling `rules`' family reads nearest to `keys` (a file's tensors); an empty spelling for no keys.
LoraNearestSpelling nearest_lora_spelling(const std::vector<LoraTensorKey>& keys, const LoraKeyRules& rules);

}  // namespace dpinfer::pipeline
