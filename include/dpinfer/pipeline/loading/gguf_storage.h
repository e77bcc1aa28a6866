#pragma once
// A GGUF transformer file's quantized Linear weights kept as its blocks on the device and
// dequantized per forward, as diffusers 0.36's GGUFQuantizer does (quantizers/gguf/
// gguf_quantizer.py _process_model_before_weight_loading: _replace_with_gguf_linear turns each
// nn.Linear whose checkpoint weight is a GGUFParameter into a GGUFLinear).

#include <cstdint>
#include <map>
#include <string>

#include <c10/core/ScalarType.h>

#include "dpinfer/io/gguf_file.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace dpinfer::pipeline {

/// Makes the Linear layer of each key "<layer>.weight" of `quantized` (gguf_quantized_keys()) keep its
/// weight as GGUF blocks of that type, computing in `compute` (nn::WeightedLayer::store_gguf). Call
/// before load_weights(). A key that is not a Linear's weight is refused with an InputError: diffusers
/// keeps GGUF blocks only in Linear layers. Returns the bytes of blocks now held.
int64_t store_gguf_layers(torch::nn::Module& module, const std::map<std::string, io::GgmlType>& quantized,
                          c10::ScalarType compute);

/// The storage a GGUF file gives its transformer, for records, infotext and resume: "gguf-<TYPE>" with
/// the quantized type that holds most of the file's bytes (e.g. "gguf-Q4_K"), or its float type
/// when it holds no quantized tensor.
std::string gguf_weight_storage(const io::GgufFile& file);

}  // namespace dpinfer::pipeline
