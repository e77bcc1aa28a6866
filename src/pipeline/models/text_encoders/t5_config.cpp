#include "dpinfer/pipeline/models/text_encoders/t5_config.h"

#include <nlohmann/json.hpp>

#include "../config_parsing.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

using io::ConfigReader;
using nlohmann::json;
constexpr const char* kT5Config = "T5 text encoder config";

T5Config::Activation activation(const ConfigReader& r, const std::string& field, const std::string& name) {
  if (name == "relu") return T5Config::Activation::kReLU;
  if (name == "gelu_new") return T5Config::Activation::kGELUNew;
  if (name == "gelu") return T5Config::Activation::kGELU;
  if (name == "silu" || name == "swish") return T5Config::Activation::kSiLU;
  throw r.unsupported(field, name, join({"relu", "gelu_new", "gelu", "silu"}));
}

}  // namespace

// Ref: transformers/models/t5/configuration_t5.py T5Config.__init__
T5Config T5Config::from_json(const json& j) {
  ConfigReader r(j, kT5Config);
  T5Config c;
  c.vocab_size = r.positive("vocab_size", c.vocab_size);
  c.d_model = r.positive("d_model", c.d_model);
  c.d_kv = r.positive("d_kv", c.d_kv);
  c.d_ff = r.positive("d_ff", c.d_ff);
  c.num_layers = r.positive("num_layers", c.num_layers);
  c.num_heads = r.positive("num_heads", c.num_heads);
  c.relative_attention_num_buckets = r.positive("relative_attention_num_buckets", c.relative_attention_num_buckets);
  c.relative_attention_max_distance =
      r.positive("relative_attention_max_distance", c.relative_attention_max_distance);
  c.layer_norm_epsilon = r.number("layer_norm_epsilon", c.layer_norm_epsilon);
  if (!(c.layer_norm_epsilon >= 0)) throw r.error("layer_norm_epsilon", "must be a number of at least 0");

  const std::string proj = r.string("feed_forward_proj", "relu");
  // "gated-<act>" or "<act>"; anything else is refused, as T5Config does.
  const size_t dash = proj.find('-');
  std::string act = proj;
  if (dash != std::string::npos) {
    if (proj.compare(0, dash, "gated") != 0 || proj.find('-', dash + 1) != std::string::npos)
      throw r.unsupported("feed_forward_proj", proj, "\"<act>\" or \"gated-<act>\", e.g. relu or gated-gelu");
    act = proj.substr(dash + 1);
    c.is_gated_act = true;
  }
  if (proj == "gated-gelu") act = "gelu_new";  // T5Config: "for backwards compatibility"
  c.is_gated_act = r.boolean("is_gated_act", c.is_gated_act);
  const std::string dense_act = r.string("dense_act_fn", act);
  c.dense_act_fn = activation(r, r.has("dense_act_fn") ? "dense_act_fn" : "feed_forward_proj", dense_act);
  // The bucket function needs num_buckets / 2 (bidirectional) / 2 exact buckets and more above them.
  if (c.relative_attention_num_buckets < 4)
    throw r.error("relative_attention_num_buckets", "must be at least 4 (half per direction, half exact)");
  if (c.relative_attention_max_distance <= c.relative_attention_num_buckets / 4)
    throw r.error("relative_attention_max_distance",
                  "must be larger than relative_attention_num_buckets / 4 (the exact buckets)");
  return c;
}

T5Config T5Config::from_file(const std::string& path) { return config_from_file<T5Config>(path, kT5Config); }

}  // namespace dpinfer::pipeline
