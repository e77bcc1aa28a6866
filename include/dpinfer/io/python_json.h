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
/// strings "NaN", "Infinity" and "-Infinity". `callback` is nlohmann's parser
/// callback (json_file.cpp limits the depth with it). Throws nlohmann::json::exception.
nlohmann::json parse_python_json(const std::string& text, const nlohmann::json::parser_callback_t& callback = nullptr);

/// `v` as a double: a JSON number, or one of the three strings above. nullopt
/// for anything else.
std::optional<double> python_json_number(const nlohmann::json& v);

}  // namespace dpinfer::io
