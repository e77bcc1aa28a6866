#pragma once
// JSON as Python's json module writes it. json.dump's default allow_nan=True
// writes the bare tokens NaN, Infinity and -Infinity, which strict JSON (and so
// nlohmann::json) rejects. diffusers' save_pretrained writes them: a
// DPMSolverMultistepScheduler config holds "lambda_min_clipped": -Infinity.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace dpinfer::io {

/// Parses `text`, reading NaN, Infinity and -Infinity outside strings as the
/// strings "NaN", "Infinity" and "-Infinity". Throws nlohmann::json::parse_error.
nlohmann::json parse_python_json(const std::string& text);

/// `v` as a double: a JSON number, or one of the three strings above. nullopt
/// for anything else.
std::optional<double> python_json_number(const nlohmann::json& v);

}  // namespace dpinfer::io
