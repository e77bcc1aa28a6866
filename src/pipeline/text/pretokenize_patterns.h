#pragma once
// The pre-tokenizer pattern that Qwen2's tokenizer and transformers' Mistral (Tekken)
// conversion share, matched by hand: GPT-4's family of patterns,
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,k}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// with k = 1 (Qwen2) or k = 3 (Llama 3's, which MistralConverter writes).

#include <cstddef>
#include <string_view>

namespace dpinfer::pipeline::unicode {

/// The length of the pattern's match at `i` in `text` (never 0: every character is in one of
/// its classes), with \p{N}{1,max_digits}, matched as Oniguruma does: the first alternative
/// that matches wins, each greedy with backtracking. The classes are tokenizers' (qwen_class).
size_t match_gpt4_style(std::u32string_view text, size_t i, size_t max_digits);

}  // namespace dpinfer::pipeline::unicode
