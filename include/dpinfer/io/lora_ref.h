#pragma once
// A LoRA as a run names it: a file and the scale it is applied at. `--lora PATH[:SCALE]`
// (repeatable), a --config file's "loras" and a JSONL line's "loras" all give these; the
// pipeline reads the file (pipeline/loading/lora.h), the worker records and hashes it.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dpinfer::io {

struct LoraRef {
  std::string path;    ///< a .safetensors file; absolute once the worker resolved it
  double scale = 1.0;  ///< diffusers' set_adapters weight: the delta is scale * alpha / rank * up @ down

  bool operator==(const LoraRef& o) const { return path == o.path && scale == o.scale; }
  bool operator!=(const LoraRef& o) const { return !(*this == o); }
};

/// The LoRAs of an item, in the order they are merged.
using LoraSet = std::vector<LoraRef>;

/// Parses "PATH[:SCALE]": the text after the last ':' is the scale when it is a finite number
/// ("a.safetensors:0.8"); otherwise the whole text is the path ("C:/x.safetensors" has none).
/// `where` names the option or line in messages. Throws InputError for an empty path.
LoraRef parse_lora_arg(const std::string& text, const std::string& where);

/// A JSON "loras" value: an array of {"path": STRING, "scale": NUMBER (default 1)} objects or
/// "PATH[:SCALE]" strings. Throws InputError naming `where` for anything else.
LoraSet lora_set_from_json(const nlohmann::json& value, const std::string& where);

/// A1111's name of a LoRA: the file name without its directory and extension.
std::string lora_name(const std::string& path);

/// "name:scale" words for messages and keys, e.g. "<lora:detail:0.8> <lora:style:1>".
std::string lora_set_text(const LoraSet& set);

}  // namespace dpinfer::io
