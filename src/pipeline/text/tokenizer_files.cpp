// Ref: transformers/tokenization_utils_base.py (from_pretrained's special tokens),
//      tokenizers' AddedToken.
#include "tokenizer_files.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <sys/stat.h>

#include "dpinfer/io/json_file.h"
#include "dpinfer/io/utf8.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"
#include "byte_level_bpe.h"

namespace dpinfer::pipeline::bpe {
namespace {

using nlohmann::json;

constexpr int64_t kMaxSaneModelMaxLength = int64_t(1) << 31;

// PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES, in its order (the order new ids go in).
constexpr const char* kSpecialTokenKeys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                             "pad_token", "cls_token", "mask_token"};

void read_special_tokens(TokenizerConfig& out, const json& source, const std::string& path) {
  if (!source.is_object()) throw Error("tokenizer file " + path + ": expected a json object, got " + describe(source));
  auto as_special = [](std::optional<AddedToken> t) {
    if (t) t->special = true;
    return t;
  };
  for (const char* key : kSpecialTokenKeys) {
    if (auto it = source.find(key); it != source.end()) out.set(key, as_special(parse_added_token(*it, path, key)));
  }
  auto it = source.find("additional_special_tokens");
  if (it == source.end() || it->is_null()) return;
  if (!it->is_array()) {
    throw Error("tokenizer file " + path + ": additional_special_tokens must be a list, got " + describe(*it));
  }
  for (const json& v : *it) {
    std::optional<AddedToken> t = as_special(parse_added_token(v, path, "additional_special_tokens"));
    if (t && std::none_of(out.additional.begin(), out.additional.end(),
                          [&](const AddedToken& a) { return a.content == t->content; })) {
      out.additional.push_back(*t);
    }
  }
}

void read_decoder(TokenizerConfig& out, const json& decoder_json, const std::string& path) {
  if (!decoder_json.is_object()) {
    throw Error("tokenizer file " + path + ": added_tokens_decoder must be an object of id -> token, got " +
                describe(decoder_json));
  }
  for (auto e = decoder_json.begin(); e != decoder_json.end(); ++e) {
    int64_t id = -1;
    try {
      size_t used = 0;
      id = std::stoll(e.key(), &used);
      if (used != e.key().size()) id = -1;
    } catch (const std::exception&) {
    }
    if (id < 0) {
      throw Error("tokenizer file " + path + ": added_tokens_decoder key " + describe(json(e.key())) +
                  " must be a token id");
    }
    if (auto t = parse_added_token(*e, path, "added_tokens_decoder." + e.key())) out.decoder.emplace_back(id, *t);
  }
}

}  // namespace

std::string read_file(const std::string& path, const std::string& hint) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open tokenizer file " + path + ": " + std::strerror(errno) + "; " + hint);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error("cannot read tokenizer file " + path + ": " + std::strerror(errno));
  return ss.str();
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string describe(const json& value) { return io::json_brief(value, 60); }

json parse_json(const std::string& path) {
  const std::string text = read_file(path);  // a missing file says what the folder needs
  try {
    return io::parse_json_text(text);
  } catch (const io::JsonSyntaxError& e) {
    throw Error(quote(path) + " is not valid json (" + e.what() + "); re-download the tokenizer folder");
  }
}

std::optional<json> parse_json_if_present(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return std::nullopt;
  return parse_json(path);
}

std::optional<AddedToken> parse_added_token(const json& value, const std::string& path, const std::string& field) {
  if (value.is_null()) return std::nullopt;
  AddedToken token;
  if (value.is_string()) {
    token.content = value.get<std::string>();
    return token;
  }
  auto it = value.is_object() ? value.find("content") : value.end();
  if (!value.is_object() || it == value.end() || !it->is_string()) {
    throw Error("tokenizer file " + path + ": " + field + " must be a string or an object with a string \"content\", got " +
                describe(value));
  }
  token.content = it->get<std::string>();
  auto flag = [&](const char* name) -> std::optional<bool> {
    auto f = value.find(name);
    if (f == value.end() || f->is_null()) return std::nullopt;
    if (!f->is_boolean()) {
      throw Error("tokenizer file " + path + ": " + field + "." + name + " must be true or false, got " + describe(*f));
    }
    return f->get<bool>();
  };
  token.lstrip = flag("lstrip").value_or(false);
  token.rstrip = flag("rstrip").value_or(false);
  token.single_word = flag("single_word").value_or(false);
  token.special = flag("special").value_or(false);
  // tokenizers' AddedToken(content, **flags): normalized defaults to `not special`, fixed then.
  token.normalized = flag("normalized").value_or(!token.special);
  return token;
}

int parse_model_max_length(const json& config, const std::string& path, int fallback, int minimum) {
  auto it = config.find("model_max_length");
  if (it == config.end() || it->is_null()) return fallback;
  const json& v = *it;
  double value;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() >= uint64_t(kMaxSaneModelMaxLength)) return fallback;
    value = double(v.get<int64_t>());
  } else if (v.is_number_float()) {
    value = v.get<double>();  // int(1e30) does not fit 64 bits and parses as a float
  } else {
    throw Error("tokenizer file " + path + ": model_max_length must be a number, got " + describe(v));
  }
  if (value >= double(kMaxSaneModelMaxLength)) return fallback;
  if (value != double(int64_t(value)) || value < minimum) {
    throw Error("tokenizer file " + path + ": model_max_length must be an integer of at least " +
                std::to_string(minimum) + ", got " + describe(v));
  }
  return int(value);
}

const AddedToken* TokenizerConfig::find(const std::string& key) const {
  for (const auto& [k, v] : by_key) {
    if (k == key && v) return &*v;
  }
  return nullptr;
}

void TokenizerConfig::set(const std::string& key, std::optional<AddedToken> token) {
  for (auto& [k, v] : by_key) {
    if (k == key) v = std::move(token);
  }
}

std::vector<AddedToken> TokenizerConfig::special_tokens() const {
  std::vector<AddedToken> out;
  for (const auto& [k, v] : by_key) {
    if (v) out.push_back(*v);
  }
  out.insert(out.end(), additional.begin(), additional.end());
  return out;
}

TokenizerConfig read_tokenizer_config(const std::string& dir,
                                      const std::vector<std::pair<std::string, std::string>>& defaults) {
  TokenizerConfig out;
  out.path = dir + "tokenizer_config.json";
  const std::string map_path = dir + "special_tokens_map.json";
  out.config = parse_json_if_present(out.path).value_or(json::object());
  if (!out.config.is_object()) {
    throw Error("tokenizer file " + out.path + ": expected a json object, got " + describe(out.config));
  }
  for (const char* key : kSpecialTokenKeys) out.by_key.emplace_back(key, std::nullopt);
  for (const auto& [key, content] : defaults) {
    AddedToken t;
    t.content = content;
    t.special = true;
    out.set(key, t);
  }
  read_special_tokens(out, out.config, out.path);
  if (auto it = out.config.find("added_tokens_decoder"); it != out.config.end() && !it->is_null()) {
    out.has_decoder = true;
    read_decoder(out, *it, out.path);
  } else if (std::optional<json> map = parse_json_if_present(map_path)) {
    read_special_tokens(out, *map, map_path);
  }
  return out;
}

std::unordered_map<std::string, int64_t> read_vocab(const std::string& path) {
  json doc = parse_json(path);
  if (!doc.is_object()) throw Error("tokenizer file " + path + ": expected an object of token -> id, got " + describe(doc));
  std::unordered_map<std::string, int64_t> vocab;
  vocab.reserve(doc.size());
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (!it->is_number_integer()) {
      throw Error("tokenizer file " + path + ": the id of token " + describe(json(it.key())) +
                  " must be an integer, got " + describe(*it));
    }
    vocab[it.key()] = it->get<int64_t>();
  }
  return vocab;
}

void check_utf8(const std::string& text) {
  size_t bad = io::find_invalid_utf8(text);
  if (bad == std::string::npos) return;
  static const char* kHex = "0123456789abcdef";
  auto byte = static_cast<unsigned char>(text[bad]);
  throw Error("prompt is not valid utf-8 at byte " + std::to_string(bad) + " (0x" + kHex[byte >> 4] + kHex[byte & 15] +
              "); pass prompts as utf-8 text");
}

std::vector<std::pair<int64_t, AddedToken>> resolve_added_tokens(
    const TokenizerConfig& config, const std::unordered_map<std::string, int64_t>& vocab) {
  std::vector<std::pair<int64_t, AddedToken>> all = config.decoder;
  auto known = [&](const std::string& content) {
    return std::any_of(all.begin(), all.end(), [&](const auto& a) { return a.second.content == content; });
  };
  for (const AddedToken& t : config.special_tokens()) {
    if (t.content.empty() || known(t.content)) continue;
    int64_t id;
    if (auto v = vocab.find(t.content); v != vocab.end()) {
      id = v->second;
    } else {
      size_t outside =
          std::count_if(all.begin(), all.end(), [&](const auto& a) { return vocab.count(a.second.content) == 0; });
      id = int64_t(vocab.size() + outside);
    }
    all.emplace_back(id, t);
  }
  all.erase(std::remove_if(all.begin(), all.end(), [](const auto& a) { return a.second.content.empty(); }), all.end());
  return all;
}

}  // namespace dpinfer::pipeline::bpe

namespace dpinfer::pipeline::bpe {

void read_json_added_tokens(const json& doc, const std::string& path, std::vector<std::pair<int64_t, AddedToken>>& out) {
  auto it = doc.find("added_tokens");
  if (it == doc.end() || it->is_null()) return;
  if (!it->is_array()) throw Error("tokenizer file " + path + ": added_tokens must be a list, got " + describe(*it));
  for (size_t i = 0; i < it->size(); ++i) {
    const json& entry = (*it)[i];
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    std::optional<AddedToken> t = parse_added_token(entry, path, field);
    const json id = entry.is_object() ? entry.value("id", json()) : json();
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      throw Error("tokenizer file " + path + ": " + field + ".id must be a token id, got " + describe(id));
    }
    if (t) out.emplace_back(id.get<int64_t>(), *t);
  }
}

void check_merge(const std::unordered_map<std::string, int64_t>& vocab, const std::string& left,
                 const std::string& right, const std::string& path, const std::string& where) {
  for (const std::string* s : {&left, &right}) {
    if (vocab.count(*s) == 0) {
      throw Error("tokenizer file " + path + ": " + where + " merges " + describe(json(*s)) +
                  ", which is not in the vocabulary");
    }
  }
  if (vocab.count(left + right) == 0) {
    throw Error("tokenizer file " + path + ": " + where + " merges into " + describe(json(left + right)) +
                ", which is not in the vocabulary");
  }
}

void check_byte_symbols(const std::unordered_map<std::string, int64_t>& vocab, const std::string& path) {
  for (int b = 0; b < 256; ++b) {
    const std::string& s = byte_symbols()[size_t(b)];
    if (vocab.count(s) == 0) {
      throw Error("tokenizer file " + path + ": the vocabulary lacks " + describe(json(s)) + ", the symbol of byte " +
                  std::to_string(b) + "; it is not a byte-level BPE vocabulary");
    }
  }
}

JsonBpeModel read_json_bpe_model(const json& doc, const std::string& path, const std::string& family) {
  auto bad = [&](const std::string& field, const std::string& what) {
    return Error("tokenizer file " + path + ": " + field + " " + what);
  };
  auto get = [](const json& obj, const char* key) -> const json& {
    static const json null;
    auto it = obj.find(key);
    return it == obj.end() ? null : *it;
  };
  if (!doc.is_object()) throw bad("the document", "must be a json object, got " + describe(doc));
  const json& model = get(doc, "model");
  if (!model.is_object()) throw bad("model", "must be an object, got " + describe(model));
  const json& type = get(model, "type");
  if (!type.is_null() && type != "BPE") {
    throw bad("model.type", describe(type) + " is not supported; a " + family + " tokenizer is \"BPE\"");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json& v = get(model, key);
    if (!v.is_null() && v != "") {
      throw bad(std::string("model.") + key, describe(v) + " is not supported; " + family + "'s is \"\"");
    }
  }
  const json& dropout = get(model, "dropout");
  if (!dropout.is_null() && (!dropout.is_number() || dropout.get<double>() != 0.0)) {
    throw bad("model.dropout", describe(dropout) + " is not supported; BPE dropout is for training");
  }
  const json& fallback = get(model, "byte_fallback");
  if (!fallback.is_null() && fallback != false) throw bad("model.byte_fallback", "true is not supported");
  const json& ignore = get(model, "ignore_merges");
  if (!ignore.is_null() && !ignore.is_boolean()) throw bad("model.ignore_merges", "must be true or false");

  JsonBpeModel out;
  out.ignore_merges = ignore.is_boolean() && ignore.get<bool>();
  const json& vocab_json = get(model, "vocab");
  if (!vocab_json.is_object()) throw bad("model.vocab", "must be an object of token -> id, got " + describe(vocab_json));
  out.vocab.reserve(vocab_json.size());
  for (auto it = vocab_json.begin(); it != vocab_json.end(); ++it) {
    if (!it->is_number_integer()) {
      throw bad("model.vocab", "gives token " + describe(json(it.key())) + " the id " + describe(*it) +
                                   ", which is not an integer");
    }
    out.vocab[it.key()] = it->get<int64_t>();
  }
  check_byte_symbols(out.vocab, path);
  const json& merges_json = get(model, "merges");
  if (!merges_json.is_array()) throw bad("model.merges", "must be a list, got " + describe(merges_json));
  out.merges.reserve(merges_json.size());
  for (size_t i = 0; i < merges_json.size(); ++i) {
    const json& m = merges_json[i];
    const std::string where = "model.merges[" + std::to_string(i) + "]";
    std::vector<std::string> parts;
    if (m.is_string()) {  // "a b", as tokenizers < 0.20 wrote them
      const std::string line = m.get<std::string>();
      for (std::string_view p : split_merge_line(line)) parts.emplace_back(p);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      parts = {m[0].get<std::string>(), m[1].get<std::string>()};
    }
    if (parts.size() != 2) throw bad(where, describe(m) + " is not a merge of two symbols");
    check_merge(out.vocab, parts[0], parts[1], path, where);
    out.merges.emplace_back(std::move(parts[0]), std::move(parts[1]));
  }
  return out;
}

std::optional<int64_t> token_id_of(const std::string& token, const std::unordered_map<std::string, int64_t>& added,
                                   const std::unordered_map<std::string, int64_t>& vocab) {
  if (auto it = added.find(token); it != added.end()) return it->second;
  if (auto it = vocab.find(token); it != vocab.end()) return it->second;
  return std::nullopt;
}

SpecialTokenIds SpecialTokenIds::resolve(const TokenizerConfig& config,
                                         const std::unordered_map<std::string, int64_t>& added,
                                         const std::unordered_map<std::string, int64_t>& vocab) {
  SpecialTokenIds out;
  auto role = [&](const char* key, std::optional<int64_t>& id, std::string& content) {
    const AddedToken* t = config.find(key);
    if (t == nullptr) return;
    content = t->content;
    id = token_id_of(content, added, vocab);
  };
  role("pad_token", out.pad, out.pad_token);
  role("eos_token", out.eos, out.eos_token);
  role("bos_token", out.bos, out.bos_token);
  role("unk_token", out.unk, out.unk_token);
  return out;
}

std::vector<SpecialToken> SpecialTokenIds::list() const {
  std::vector<SpecialToken> out;
  auto add = [&](const char* role, const std::optional<int64_t>& id, const std::string& token) {
    if (id) out.push_back({role, token, *id});
  };
  add("bos", bos, bos_token);
  add("eos", eos, eos_token);
  add("pad", pad, pad_token);
  add("unk", unk, unk_token);
  return out;
}

Encoding truncated_encoding(std::vector<int64_t> ids, int max_length, bool truncate_left) {
  if (max_length < 1) throw Error("tokenizer max_length must be at least 1, got " + std::to_string(max_length));
  Encoding out;
  if (ids.size() > size_t(max_length)) {
    out.dropped_tokens = int64_t(ids.size()) - max_length;
    if (truncate_left) {
      ids.erase(ids.begin(), ids.end() - max_length);
    } else {
      ids.resize(size_t(max_length));
    }
  }
  out.ids = std::move(ids);
  out.attention_mask.assign(out.ids.size(), 1);
  return out;
}

void refuse_split_special_tokens(const nlohmann::json& config, const std::string& path) {
  if (auto it = config.find("split_special_tokens"); it != config.end() && *it == true)
    throw Error("tokenizer file " + path +
                ": split_special_tokens true is not supported; dpinfer splits the added tokens out, as transformers "
                "does by default");
}

}  // namespace dpinfer::pipeline::bpe
