#pragma once
// Where a model lives: a diffusers pipeline directory given as a path, or a Hugging Face
// hub id found offline in the local hub cache, and its model_index.json. Nothing here
// touches the network.

#include <nlohmann/json.hpp>
#include <string>

namespace dpinfer::pipeline {

/// A pipeline directory and its model_index.json.
struct ModelIndex {
  std::string spec;          ///< what the user passed
  /// What the images record as their model: the hub id as given, or the directory's own name.
  std::string name;
  std::string root;          ///< absolute path of the folder holding model_index.json
  std::string revision;      ///< the snapshot's commit when found in the hub cache, else empty
  nlohmann::json json;       ///< model_index.json as parsed
  std::string pipeline_class;  ///< its _class_name
};

/// Finds `spec` and reads its model_index.json:
/// - an existing directory that holds model_index.json, or else
/// - a hub id "org/name" or "org/name@revision" (a branch, tag or commit; "main" when
///   omitted) found in io::hf_hub_cache_dir() as models--org--name/refs/<revision> ->
///   snapshots/<commit>/, without any network access.
/// model_index.json must be an object with a string _class_name. Throws dpinfer::Error
/// with what was looked at and what to do (`hf download` to fill the cache).
ModelIndex read_model_index(const std::string& spec);

}  // namespace dpinfer::pipeline
