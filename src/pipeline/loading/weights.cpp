#include "dpinfer/pipeline/loading/weights.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>

#include "dpinfer/io/gguf_file.h"
#include "dpinfer/io/safetensors.h"
#include "dpinfer/pipeline/nn/gguf_dequant.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::pipeline {
namespace {

constexpr size_t kMaxListedWeights = 10;
/// The most of a file copied (and held in memory) at once while loading.
constexpr size_t kCopyChunkBytes = size_t{32} << 20;

std::optional<at::ScalarType> torch_dtype(io::Dtype dtype) {
  switch (dtype) {
    case io::Dtype::kBool: return at::kBool;
    case io::Dtype::kU8: return at::kByte;
    case io::Dtype::kI8: return at::kChar;
    case io::Dtype::kI16: return at::kShort;
    case io::Dtype::kU16: return at::kUInt16;
    case io::Dtype::kF16: return at::kHalf;
    case io::Dtype::kBF16: return at::kBFloat16;
    case io::Dtype::kI32: return at::kInt;
    case io::Dtype::kU32: return at::kUInt32;
    case io::Dtype::kF32: return at::kFloat;
    case io::Dtype::kF64: return at::kDouble;
    case io::Dtype::kI64: return at::kLong;
    case io::Dtype::kU64: return at::kUInt64;
    case io::Dtype::kC64: return at::kComplexFloat;
    case io::Dtype::kF8E4M3: return at::kFloat8_e4m3fn;
    case io::Dtype::kF8E5M2: return at::kFloat8_e5m2;
    case io::Dtype::kF8E4M3Fnuz: return at::kFloat8_e4m3fnuz;
    case io::Dtype::kF8E5M2Fnuz: return at::kFloat8_e5m2fnuz;
    case io::Dtype::kF8E8M0: return at::kFloat8_e8m0fnu;
    case io::Dtype::kF4:
    case io::Dtype::kF6E2M3:
    case io::Dtype::kF6E3M2: return std::nullopt;
  }
  return std::nullopt;
}

/// A checkpoint file open for loading: a safetensors file, or a GGUF file seen as safetensors views:
/// its F32 and F16 tensors as values, its quantized and BF16 ones as their bytes, U8 [..., row bytes]
/// (the uint8 tensor diffusers' GGUFParameter holds), which load into a layer that keeps GGUF blocks
/// (nn::WeightedLayer::store_gguf) as they are.
struct OpenFile {
  std::shared_ptr<const io::SafetensorsFile> safetensors;
  std::shared_ptr<const io::GgufFile> gguf;
  std::vector<io::TensorView> gguf_views;
  std::map<std::string, io::GgmlType> quantized;            ///< GGUF tensors held as blocks, by name
  std::map<std::string, std::vector<int64_t>> logical_shape;  ///< and their shapes in values

  const std::vector<io::TensorView>& tensors() const { return safetensors ? safetensors->tensors() : gguf_views; }
  const io::TensorView* find(const std::string& name) const {
    if (safetensors) return safetensors->find(name);
    for (const io::TensorView& v : gguf_views)
      if (v.name == name) return &v;
    return nullptr;
  }
  void release(const std::byte* data, size_t nbytes) const {
    if (safetensors) safetensors->release(data, nbytes);
    else gguf->release(data, nbytes);
  }
};

bool is_gguf_path(const std::string& path) {
  return ends_with(path, ".gguf") || ends_with(path, ".GGUF") || io::GgufFile::has_magic(path);
}

OpenFile open_file(const std::string& path) {
  OpenFile f;
  if (!is_gguf_path(path)) {
    f.safetensors = io::SafetensorsFile::open(path);
    return f;
  }
  f.gguf = io::GgufFile::open(path);
  for (const io::GgufTensor& t : f.gguf->tensors()) {
    io::TensorView v;
    v.name = t.name;
    v.data = t.data;
    v.nbytes = t.nbytes;
    v.offset = t.offset;
    v.shape = t.shape;
    switch (t.type) {
      case io::GgmlType::kF32: v.dtype = io::Dtype::kF32; break;
      case io::GgmlType::kF16: v.dtype = io::Dtype::kF16; break;
      // diffusers holds BF16 as a GGUFParameter too (load_gguf_checkpoint: every type but F32 and F16) and
      // dequantizes it to float32 for each forward: the values of a bfloat16 weight, but a GGUFLinear's, which
      // matters to a LoRA on it (PEFT leaves its factors in the file's dtype beside a uint8 weight) and to how
      // F.linear sums (a dequantized weight requires no grad). So it stays blocks like the quantized types.
      default:
        if (!nn::gguf_dequantizable(t.type))
          throw InputError(quote(path) + ": tensor " + quote(t.name, 100) + " is " +
                           std::string(io::ggml_type_name(t.type)) +
                           ", which dpinfer cannot dequantize (it reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
                           "Q2_K to Q6_K, IQ4_NL and IQ4_XS, as diffusers does); use a file of one of those types");
        v.dtype = io::Dtype::kU8;
        v.shape = t.byte_shape();
        f.quantized[t.name] = t.type;
        f.logical_shape[t.name] = t.shape;
    }
    f.gguf_views.push_back(std::move(v));
  }
  return f;
}

bool is_fp8(io::Dtype dtype) {
  return dtype == io::Dtype::kF8E4M3 || dtype == io::Dtype::kF8E5M2 || dtype == io::Dtype::kF8E4M3Fnuz ||
         dtype == io::Dtype::kF8E5M2Fnuz;
}

// "Scaled fp8" files store a weight W as fp8 Q beside a per-tensor float scale s, with
// W = Q.to(float32) * s. The names of s that are read, for the weight `<layer>.weight`:
//  - `<layer>.scale_weight`, ComfyUI's scaled fp8 checkpoints (comfy/ops.py scaled_fp8_ops,
//    the 0-d float32 `scale_weight`; the files also hold an empty `scaled_fp8` marker tensor,
//    comfy/model_detection.py, and may hold `<layer>.scale_input`, an activation scale for
//    fp8 matmuls);
//  - `<layer>.weight_scale`, ComfyUI's newer quantized files (comfy/ops.py mixed_precision_ops,
//    formats float8_e4m3fn / float8_e5m2, with the U8 JSON `<layer>.comfy_quant` and the
//    activation scale `<layer>.input_scale`; comfy/utils.py convert_old_quants turns the
//    scale_weight files into these), a name compressed-tensors also uses for per-tensor fp8.
// A scale must be one finite float value (shape [] or [1]) and belongs to an fp8 weight of the
// same file; the activation scales, comfy_quant and the marker are consumed and unused, since dpinfer
// upcasts the weight to the run dtype at load and computes in that dtype. Per-channel or
// block scales (weight_scale_inv, shape [out, blocks]) are not supported and fail as
// not-a-scalar. In a file that has a scale or a marker, every fp8 tensor needs its scale.
constexpr const char* kScaleSuffixes[] = {"scale_weight", "weight_scale"};
constexpr const char* kCompanionSuffixes[] = {"scale_input", "input_scale", "comfy_quant"};

bool is_fp8_marker(const std::string& key) { return key == "scaled_fp8" || ends_with(key, ".scaled_fp8"); }

/// `<layer>.weight` for `<layer>.<suffix>` with a suffix of `suffixes`, else "".
template <size_t N>
std::string weight_of(const std::string& key, const char* const (&suffixes)[N]) {
  for (const char* suffix : suffixes) {
    const std::string tail = std::string(".") + suffix;
    if (key.size() > tail.size() && ends_with(key, tail)) return key.substr(0, key.size() - tail.size()) + ".weight";
  }
  return "";
}

/// The one value of the scale tensor `view` as float32, read from the mapping.
float read_scale(const io::TensorView& view, const std::string& file) {
  const std::string where = "'" + file + "': scale tensor '" + view.name + "'";
  if (view.numel() != 1)
    throw InputError(where + " has " + std::to_string(view.numel()) +
                     " values; dpinfer reads only per-tensor fp8 scales (one value), convert the file or use "
                     "an f16/bf16 checkpoint");
  at::ScalarType type;
  switch (view.dtype) {
    case io::Dtype::kF32: type = at::kFloat; break;
    case io::Dtype::kF16: type = at::kHalf; break;
    case io::Dtype::kBF16: type = at::kBFloat16; break;
    case io::Dtype::kF64: type = at::kDouble; break;
    default:
      throw InputError(where + " is " + std::string(io::dtype_name(view.dtype)) +
                       ", expected F32, F16, BF16 or F64; the file is not a scaled fp8 checkpoint dpinfer knows");
  }
  at::Tensor value = at::empty({1}, at::TensorOptions().dtype(type));
  std::memcpy(value.data_ptr(), view.data, view.nbytes);
  const float scale = value.to(at::kFloat).item<float>();
  if (!std::isfinite(scale))
    throw InputError(where + " is " + std::to_string(scale) + ", not a finite number; the file is corrupt, re-download it");
  return scale;
}

/// The scales of one file: its fp8 weights' names -> scale, with the keys consumed by them.
struct Fp8Scales {
  std::map<std::string, float> by_weight;
  std::map<std::string, std::string> scale_key;  // weight -> the scale's own key, for messages
  std::map<std::string, bool> consumed;          // scale, input-scale and marker keys
  bool scaled = false;                           // has a marker or a scale
};

Fp8Scales find_fp8_scales(const OpenFile& file, const std::string& path) {
  Fp8Scales out;
  for (const io::TensorView& view : file.tensors()) {
    if (is_fp8_marker(view.name)) {
      out.consumed[view.name] = true;
      out.scaled = true;
      continue;
    }
    const std::string weight = weight_of(view.name, kScaleSuffixes);
    if (weight.empty()) continue;
    const io::TensorView* w = file.find(weight);
    if (!w) continue;  // a key like any other: unexpected unless the model has it
    if (!is_fp8(w->dtype))
      throw InputError("'" + path + "': '" + view.name + "' scales '" + weight + "', which is " +
                       std::string(io::dtype_name(w->dtype)) +
                       ", not fp8; dpinfer applies per-tensor scales to F8_E4M3/F8_E5M2 weights only");
    if (out.by_weight.count(weight))
      throw InputError("'" + path + "': '" + weight + "' has two scales, '" + out.scale_key[weight] + "' and '" +
                       view.name + "'; the file is inconsistent");
    out.by_weight[weight] = read_scale(view, path);
    out.scale_key[weight] = view.name;
    out.consumed[view.name] = true;
    out.scaled = true;
  }
  for (const io::TensorView& view : file.tensors()) {
    const std::string weight = weight_of(view.name, kCompanionSuffixes);
    if (!weight.empty() && out.by_weight.count(weight)) out.consumed[view.name] = true;
  }
  return out;
}

std::string tensor_shape_text(at::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Whether `key` is "<prefix>.<rest>".
bool is_under(const std::string& key, const std::string& prefix) {
  return key.size() > prefix.size() && key.compare(0, prefix.size(), prefix) == 0 && key[prefix.size()] == '.';
}

bool is_ignored(const std::string& key, const KeyRenames& renames) {
  for (const std::string& pattern : renames.ignored)
    if (key == pattern || ends_with(key, "." + pattern)) return true;
  for (const std::string& prefix : renames.ignored_prefixes)
    if (is_under(key, prefix)) return true;
  return false;
}

/// The key `key` loads into: itself when the module has it, else the first rename the
/// module has, else itself (then it is unexpected).
std::string target_key(const std::string& key, const KeyRenames& renames,
                       const std::map<std::string, at::Tensor>& state) {
  if (state.count(key)) return key;
  for (const KeyRename& rename : renames.prefixes) {
    if (!is_under(key, rename.from)) continue;
    std::string renamed = rename.to + key.substr(rename.from.size());
    if (state.count(renamed)) return renamed;
  }
  if (renames.modules.empty()) return key;
  const size_t leaf_dot = key.rfind('.');
  if (leaf_dot == std::string::npos) return key;
  const size_t module_dot = key.rfind('.', leaf_dot - 1);
  const size_t module_begin = module_dot == std::string::npos ? 0 : module_dot + 1;
  const std::string module = key.substr(module_begin, leaf_dot - module_begin);
  for (const KeyRename& rename : renames.modules) {
    if (module != rename.from) continue;
    std::string renamed = key.substr(0, module_begin) + rename.to + key.substr(leaf_dot);
    if (state.count(renamed)) return renamed;
  }
  return key;
}

struct Assignment {
  size_t file;
  const io::TensorView* view;
  std::string source_key;
  std::optional<float> scale;  ///< a scaled fp8 weight's per-tensor scale
  bool transpose = false;      ///< a converted part stored [in, out]
  /// A module tensor filled by pieces (TensorPart::target_row): each piece's view (of
  /// `file`) and the row of the module tensor it starts at; `view` is the first piece.
  std::vector<std::pair<const io::TensorView*, int64_t>> pieces;
  std::vector<int64_t> shape;  ///< the whole module tensor's shape, for pieces
  std::optional<io::GgmlType> quant;  ///< GGUF blocks of this type (the views are their bytes)
};

/// A converted part of a file tensor as a view of its own (TensorPart): the same bytes, or
/// a contiguous run of rows of them, under the module's name and shape. `source.name`
/// stays the file's name of the whole tensor (for messages and fp8 scales) in `source_key`.
io::TensorView part_view(const io::TensorView& source, const TensorPart& part, const std::string& file) {
  const std::string where = "'" + file + "': tensor '" + source.name + "'";
  io::TensorView view = source;
  view.name = part.target;
  int64_t numel = source.numel();
  if (part.rows >= 0) {
    const int64_t total = source.shape.empty() ? 1 : source.shape[0];
    if (source.shape.empty() || part.row_begin < 0 || part.rows > total || part.row_begin > total - part.rows)
      throw InputError(where + " has no rows [" + std::to_string(part.row_begin) + ", " +
                       std::to_string(part.row_begin + part.rows) + "); the checkpoint is not the layout expected");
    const int64_t per_row = total == 0 ? 0 : numel / total;
    const size_t row_bytes = total == 0 ? 0 : source.nbytes / static_cast<size_t>(total);
    view.data = source.data + static_cast<size_t>(part.row_begin) * row_bytes;
    view.offset = source.offset + static_cast<size_t>(part.row_begin) * row_bytes;
    view.nbytes = static_cast<size_t>(part.rows) * row_bytes;
    numel = per_row * part.rows;
  }
  int64_t shaped = 1;
  for (int64_t d : part.shape) shaped *= d;
  if ((part.target_row < 0 && shaped != numel) || (part.transpose && part.shape.size() != 2))
    throw InputError(where + " cannot be read as " + tensor_shape_text(part.shape) + " for '" + part.target +
                     "'; the checkpoint is not the layout expected");
  view.shape = part.shape;
  if (part.target_row >= 0) {
    // A piece: `rows` rows of the module tensor `shape`, from row `target_row` on.
    if (part.rows < 0 || part.transpose || part.shape.empty() || part.target_row > part.shape[0] - part.rows ||
        numel != (part.shape[0] == 0 ? 0 : shaped / part.shape[0]) * part.rows)
      throw InputError(where + " rows [" + std::to_string(part.row_begin) + ", " +
                       std::to_string(part.row_begin + part.rows) + ") cannot be rows [" +
                       std::to_string(part.target_row) + ", " + std::to_string(part.target_row + part.rows) +
                       ") of " + tensor_shape_text(part.shape) + " for '" + part.target +
                       "'; the checkpoint is not the layout expected");
    view.shape[0] = part.rows;
  }
  return view;
}

/// The outcome of matching open files against a module: what is wrong, and where each
/// module key's values are.
struct Matching {
  std::deque<io::TensorView> parts;  ///< converted views (stable addresses)
  KeyReport report;
  std::map<std::string, at::Tensor> state;
  std::map<std::string, Assignment> assigned;
};

Matching match(const torch::nn::Module& module, const std::vector<OpenFile>& opened,
               const std::vector<std::string>& files, const KeyRenames& renames,
               const std::string& component, const KeyConverter& convert) {
  Matching m;
  std::vector<std::string> order;  // the module's own order, for the missing list
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    if (item.value().defined() && m.state.emplace(item.key(), item.value()).second)
      order.push_back(item.key());
  for (const auto& item : module.named_buffers(/*recurse=*/true))
    if (item.value().defined() && m.state.emplace(item.key(), item.value()).second)
      order.push_back(item.key());

  // Tied names: an alias loads into its key unless some file gives the key itself.
  std::map<std::string, std::string> alias_of;  // file key -> module key
  for (const auto& [alias, key] : renames.tied) {
    bool key_given = false;
    for (const auto& file : opened)
      for (const io::TensorView& view : file.tensors()) key_given = key_given || view.name == key;
    alias_of[alias] = key_given ? std::string() : key;  // "": skipped
  }

  for (size_t f = 0; f < opened.size(); ++f) {
    const OpenFile& file = opened[f];
    const Fp8Scales scales = find_fp8_scales(file, files[f]);
    // What is matched: the file's tensors, or their converted parts, each with its file name.
    struct Matched {
      const io::TensorView* view;
      bool transpose = false;
      int64_t target_row = -1;           ///< a piece's row in the module tensor
      std::vector<int64_t> whole_shape;  ///< a piece's module tensor shape
      std::vector<int64_t> logical;      ///< GGUF blocks: the module tensor's shape in values
    };
    std::vector<Matched> views;
    std::vector<std::string> file_names;
    if (convert) {
      const std::vector<io::TensorView>& all = file.tensors();
      std::vector<SourceTensor> sources;
      std::vector<size_t> index;  // sources -> all
      for (size_t i = 0; i < all.size(); ++i) {
        if (scales.consumed.count(all[i].name)) continue;
        auto logical = file.logical_shape.find(all[i].name);
        sources.push_back({all[i].name, logical == file.logical_shape.end() ? all[i].shape : logical->second});
        index.push_back(i);
      }
      for (TensorPart part : convert(sources)) {
        if (part.source >= index.size()) throw Error("component '" + component + "': key conversion out of range");
        const io::TensorView& source = all[index[part.source]];
        std::vector<int64_t> logical;
        if (auto q = file.quantized.find(source.name); q != file.quantized.end()) {
          // GGUF blocks: rows split and reordered as they are (diffusers' converters split and cat a
          // GGUFParameter's byte rows the same way), the last dimension counted in bytes.
          const int64_t block = io::ggml_block_size(q->second), size = io::ggml_type_size(q->second);
          if (part.transpose || part.shape.empty() || part.shape.back() % block != 0)
            throw InputError("'" + files[f] + "': tensor '" + source.name + "' holds " +
                             std::string(io::ggml_type_name(q->second)) + " blocks, which cannot be read as " +
                             tensor_shape_text(part.shape) + " for '" + part.target + "'");
          logical = part.shape;
          part.shape.back() = part.shape.back() / block * size;
        }
        m.parts.push_back(part_view(source, part, files[f]));
        views.push_back({&m.parts.back(), part.transpose, part.target_row, part.shape, logical});
        file_names.push_back(source.name);
      }
    } else {
      for (const io::TensorView& view : file.tensors()) {
        auto logical = file.logical_shape.find(view.name);
        views.push_back({&view, false, -1, {}, logical == file.logical_shape.end() ? std::vector<int64_t>{}
                                                                                   : logical->second});
        file_names.push_back(view.name);
      }
    }
    for (size_t v = 0; v < views.size(); ++v) {
      const io::TensorView& view = *views[v].view;
      const bool piece = views[v].target_row >= 0;
      const std::string& file_name = file_names[v];
      if (scales.consumed.count(file_name)) continue;
      if (is_ignored(view.name, renames)) continue;
      auto tied = alias_of.find(view.name);
      if (tied != alias_of.end() && tied->second.empty()) continue;
      const std::string key = tied != alias_of.end() ? tied->second : target_key(view.name, renames, m.state);
      auto param = m.state.find(key);
      if (param == m.state.end()) {
        m.report.unexpected.push_back(file_name);
        continue;
      }
      auto quant = file.quantized.find(file_name);
      auto [it, inserted] = m.assigned.emplace(
          key, Assignment{f, &view, file_name, std::nullopt, views[v].transpose, {}, {},
                          quant == file.quantized.end() ? std::nullopt : std::optional<io::GgmlType>(quant->second)});
      if (!inserted && piece && !it->second.pieces.empty() && it->second.file == f &&
          it->second.source_key == file_name && it->second.shape == views[v].whole_shape) {
        it->second.pieces.emplace_back(&view, views[v].target_row);  // the tiling is checked below
        continue;
      }
      if (piece && inserted) {
        it->second.pieces.emplace_back(&view, views[v].target_row);
        it->second.shape = views[v].whole_shape;
      }
      if (!inserted)
        throw Error("component '" + component + "': '" + key + "' is given twice, as '" +
                    it->second.source_key + "' in '" + files[it->second.file] + "' and as '" +
                    file_name + "' in '" + files[f] +
                    "'; the checkpoint is inconsistent, re-download it");
      if (!torch_dtype(view.dtype))
        throw InputError("'" + files[f] + "': tensor '" + file_name + "' is " +
                         std::string(io::dtype_name(view.dtype)) +
                         ", which dpinfer cannot load; use a checkpoint in f32, f16 or bf16");
      if (is_fp8(view.dtype)) {
        if (!at::isFloatingType(param->second.scalar_type()))
          throw InputError("'" + files[f] + "': tensor '" + file_name + "' is " +
                           std::string(io::dtype_name(view.dtype)) + " but the model holds '" + key + "' as " +
                           std::string(c10::toString(param->second.scalar_type())) +
                           ", which fp8 cannot be loaded into; the checkpoint is broken, use an f16/bf16 one");
        auto scale = scales.by_weight.find(file_name);
        if (scale != scales.by_weight.end())
          it->second.scale = scale->second;
        else if (scales.scaled) {
          const std::string layer =
              ends_with(file_name, ".weight") ? file_name.substr(0, file_name.size() - 7) : file_name;
          throw InputError("'" + files[f] + "': fp8 tensor '" + file_name +
                           "' has no scale in this scaled fp8 file (expected '" + layer + ".scale_weight' or '" +
                           layer + ".weight_scale'); the file is incomplete, re-download or re-convert it");
        }
      }
      // GGUF blocks match a layer that keeps them by their bytes' shape, and any other (the shapes
      // only check, on the meta device) by their values' shape.
      const std::vector<int64_t>& shape =
          !views[v].logical.empty() && param->second.scalar_type() != at::kByte ? views[v].logical
          : piece                                                              ? views[v].whole_shape
                                                                               : view.shape;
      if (param->second.sizes() != at::IntArrayRef(shape))
        m.report.mismatched.push_back(key + " is " + tensor_shape_text(shape) + " in the file but " +
                                      tensor_shape_text(param->second.sizes()) + " in the model");
      else
        ++m.report.matched;
    }
  }
  // A module tensor filled by pieces gets each of its rows exactly once.
  for (auto& [key, a] : m.assigned) {
    if (a.pieces.empty()) continue;
    std::sort(a.pieces.begin(), a.pieces.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
    int64_t next = 0;
    bool tiled = true;
    for (const auto& [piece, row] : a.pieces) {
      tiled = tiled && row == next;
      next = row + piece->shape[0];
    }
    if (!tiled || next != a.shape[0])
      m.report.mismatched.push_back(key + " is " + tensor_shape_text(a.shape) + " but its pieces from '" + a.source_key +
                                    "' do not fill its rows once each");
  }
  for (const std::string& key : order)
    if (!m.assigned.count(key) && !is_ignored(key, renames)) m.report.missing.push_back(key);
  return m;
}

std::vector<OpenFile> open_all(const std::vector<std::string>& files, const std::string& component) {
  if (files.empty()) throw Error("component '" + component + "': no weight files to load");
  std::vector<OpenFile> opened;
  for (const std::string& path : files) opened.push_back(open_file(path));
  return opened;
}

/// Copies the file tensor `view` (times `scale`, for a scaled fp8 weight) into `param`, once, in pieces of at most kCopyChunkBytes
/// of the file: each piece is read from the mapping (converted to the parameter's dtype on
/// the way, through options.round_through when set) and its pages are then released, so
/// the file never sits whole in this process's memory. A CUDA parameter gets each piece
/// by one host-to-device copy; nothing larger than a piece is staged on the host.
void copy_tensor(const OpenFile& file, const io::TensorView& view, std::optional<float> scale,
                 bool transpose, at::Tensor& param, const LoadOptions& options) {
  if (view.nbytes == 0) return;
  const at::ScalarType dtype = *torch_dtype(view.dtype);
  const bool float8 = param.scalar_type() == at::kFloat8_e4m3fn || param.scalar_type() == at::kFloat8_e5m2;
  // The dtype each value goes through on its way to the parameter; Undefined: none. (A plain enum rather than
  // an optional, which GCC 12 takes for maybe-uninitialized once inlined.)
  at::ScalarType through = at::ScalarType::Undefined;
  if (param.scalar_type() == at::kByte) {
    // GGUF blocks: the bytes as they are
  } else if (float8 && options.stored_through) {
    through = *options.stored_through;
  } else if (options.round_through) {
    through = *options.round_through;
  }
  const auto source_options = at::TensorOptions().dtype(dtype).device(at::kCPU);
  const size_t item = static_cast<size_t>(io::dtype_bits(view.dtype) / 8);
  if (transpose) {
    // A [in, out] projection (open_clip's text_projection): read whole, once, as its
    // transpose. These are small (1280x1280 for SDXL); nothing else is transposed.
    // view.shape is the module's [out, in]; the bytes are [in, out].
    at::Tensor source = at::empty({view.shape[1], view.shape[0]}, source_options);
    std::memcpy(source.data_ptr(), view.data, view.nbytes);
    if (scale) source = source.to(at::kFloat).mul_(*scale);
    if (through != at::ScalarType::Undefined && through != source.scalar_type()) source = source.to(through);
    param.copy_(source.t());
    file.release(view.data, view.nbytes);
    return;
  }
  const int64_t numel = view.numel();
  const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(kCopyChunkBytes / item));
  // Parameters are allocated contiguous (nn/layers.h), so both sides flatten to one row.
  at::Tensor target = param.is_contiguous() ? param.view({-1}) : param.contiguous().view({-1});
  for (int64_t begin = 0; begin < numel; begin += chunk) {
    const int64_t n = std::min(chunk, numel - begin);
    const std::byte* data = view.data + static_cast<size_t>(begin) * item;
    at::Tensor source;
    // The mapping is read-only; from_blob only reads it here. Data that is not aligned to
    // its element size (files not padded as the reference writer pads them) goes through
    // an aligned copy first.
    if (reinterpret_cast<uintptr_t>(data) % item == 0) {
      source = at::from_blob(const_cast<std::byte*>(data), {n}, source_options);
    } else {
      source = at::empty({n}, source_options);
      std::memcpy(source.data_ptr(), data, static_cast<size_t>(n) * item);
    }
    // A scaled fp8 weight: Q.to(float32) * scale, in float32, then on to the parameter's dtype.
    if (scale) source = source.to(at::kFloat).mul_(*scale);
    if (through != at::ScalarType::Undefined && through != source.scalar_type()) source = source.to(through);
    target.narrow(0, begin, n).copy_(source);
    file.release(data, static_cast<size_t>(n) * item);
  }
  if (!param.is_contiguous()) param.copy_(target.view(param.sizes()));
}

}  // namespace

std::map<std::string, io::GgmlType> gguf_quantized_keys(const torch::nn::Module& module,
                                                        const std::vector<std::string>& files,
                                                        const KeyRenames& renames, const std::string& component,
                                                        const KeyConverter& convert) {
  const Matching m = match(module, open_all(files, component), files, renames, component, convert);
  std::map<std::string, io::GgmlType> out;
  for (const auto& [key, a] : m.assigned)
    if (a.quant) out.emplace(key, *a.quant);
  return out;
}

KeyReport match_keys(const torch::nn::Module& module, const std::vector<std::string>& files,
                     const KeyRenames& renames, const std::string& component, const KeyConverter& convert) {
  return match(module, open_all(files, component), files, renames, component, convert).report;
}

std::string key_mismatch_message(const KeyReport& report, const std::vector<std::string>& files,
                                 const std::string& component) {
  std::vector<std::string> parts;
  if (!report.missing.empty())
    parts.push_back(std::to_string(report.missing.size()) + " missing (" + join_limited(report.missing, kMaxListedWeights) + ")");
  if (!report.unexpected.empty())
    parts.push_back(std::to_string(report.unexpected.size()) + " unexpected (" + join_limited(report.unexpected, kMaxListedWeights) +
                    ")");
  if (!report.mismatched.empty())
    parts.push_back(std::to_string(report.mismatched.size()) + " of the wrong shape (" +
                    join_limited(report.mismatched, kMaxListedWeights) + ")");
  std::string list;
  for (size_t i = 0; i < parts.size(); ++i) list += (i ? ", " : "") + parts[i];
  const std::string where = files.size() == 1
                                ? "'" + files[0] + "'"
                                : std::to_string(files.size()) + " files from '" + files[0] + "' on";
  return "component '" + component + "': the weights in " + where + " do not match the model: " + list +
         "; check that the component's config belongs to these weights, or download them again";
}

void load_weights(torch::nn::Module& module, const std::vector<std::string>& files, const KeyRenames& renames,
                  const std::string& component, const LoadOptions& options) {
  std::vector<OpenFile> opened = open_all(files, component);
  Matching m = match(module, opened, files, renames, component, options.convert);
  if (!m.report.ok()) throw Error(key_mismatch_message(m.report, files, component));
  for (const auto& [key, a] : m.assigned)
    if (a.quant && m.state.at(key).scalar_type() != at::kByte)
      throw InputError("'" + files[a.file] + "': tensor '" + a.source_key + "' is " +
                       std::string(io::ggml_type_name(*a.quant)) + " but '" + key +
                       "' is not a Linear weight, the only tensors GGUF blocks are kept for (as diffusers keeps "
                       "them); the file is not one dpinfer (or diffusers) can load");

  // Each file front to back, so that the pages it has read can be dropped as it goes. A
  // module tensor filled by pieces is copied piece by piece into its rows.
  struct Copy {
    const Assignment* a;
    const io::TensorView* view;
    at::Tensor target;
  };
  std::vector<Copy> order;
  for (auto& [key, a] : m.assigned) {
    at::Tensor& param = m.state.at(key);
    if (a.pieces.empty()) order.push_back({&a, a.view, param});
    for (const auto& [piece, row] : a.pieces) order.push_back({&a, piece, param.narrow(0, row, piece->shape[0])});
  }
  std::sort(order.begin(), order.end(), [](const Copy& x, const Copy& y) {
    return std::make_pair(x.a->file, x.view->offset) < std::make_pair(y.a->file, y.view->offset);
  });

  at::NoGradGuard no_grad;
  for (size_t f = 0; f < opened.size(); ++f) {
    for (Copy& c : order)
      if (c.a->file == f) copy_tensor(opened[f], *c.view, c.a->scale, c.a->transpose, c.target, options);
    opened[f] = OpenFile{};  // unmapped as soon as its tensors are copied
  }
}

}  // namespace dpinfer::pipeline
