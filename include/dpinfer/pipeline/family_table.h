#pragma once
// The model table of the README (issue 31), generated from the family rows so that it cannot go
// stale: `dpinfer inspect --families` prints it, tools/docs/regenerate.sh writes it into README.md,
// and the test docs_generated_up_to_date fails when the committed table differs.

#include <nlohmann/json.hpp>
#include <string>

namespace dpinfer::pipeline {

/// One Markdown table, a row per family in families() order: the family (linked to its page,
/// docs/models/<name>.md, from the README), its pipeline classes,
/// default steps and guidance, size multiple, settings with their defaults, the components a
/// LoRA may change and the LoRA formats it reads, and the single-file kinds it runs.
std::string families_markdown();

/// The same facts as a JSON array, one object per family, for scripts.
nlohmann::json families_json();

}  // namespace dpinfer::pipeline
