#include "dpinfer/pipeline/loading/gguf_storage.h"

#include <memory>

#include <torch/nn/module.h>

#include "dpinfer/pipeline/nn/layers.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {

int64_t store_gguf_layers(torch::nn::Module& module, const std::map<std::string, io::GgmlType>& quantized,
                          c10::ScalarType compute) {
  std::map<std::string, std::shared_ptr<torch::nn::Module>> by_name;
  for (const auto& item : module.named_modules("", false)) by_name.emplace(item.key(), item.value());
  int64_t bytes = 0;
  for (const auto& [key, type] : quantized) {
    const bool is_weight = ends_with(key, ".weight");
    auto it = is_weight ? by_name.find(key.substr(0, key.size() - 7)) : by_name.end();
    auto* layer = it == by_name.end() ? nullptr : dynamic_cast<nn::LinearImpl*>(it->second.get());
    if (!layer)
      throw InputError("the GGUF file holds " + quote(key) + " as " + std::string(io::ggml_type_name(type)) +
                       " blocks, but it is not a Linear weight, the only tensors diffusers and dpinfer keep "
                       "quantized; the file is not one they can load");
    layer->store_gguf(type, compute);
    bytes += layer->weight.nbytes();
  }
  return bytes;
}

std::string gguf_weight_storage(const io::GgufFile& file) {
  std::map<io::GgmlType, size_t> bytes;
  for (const io::GgufTensor& t : file.tensors()) bytes[t.type] += t.nbytes;
  const std::pair<const io::GgmlType, size_t>* best = nullptr;
  for (const auto& entry : bytes) {
    const bool quantized = !io::ggml_is_float(entry.first);
    const bool best_quantized = best && !io::ggml_is_float(best->first);
    if (!best || (quantized && !best_quantized) || (quantized == best_quantized && entry.second > best->second))
      best = &entry;
  }
  return "gguf-" + std::string(best ? io::ggml_type_name(best->first) : "F32");
}

}  // namespace dpinfer::pipeline
