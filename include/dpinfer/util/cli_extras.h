#pragma once
// The one message for unexpected command-line words, shared by every dpinfer command.
//
// CLI11 2.1's ExtrasError joins its list back to front (detail::rjoin), so that
// `dpinfer generate p.txt a b` would say "b a". app.remaining() has them in the order
// given. Header-only: each command's own library links CLI11.

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "dpinfer/util/strings.h"

namespace dpinfer {

/// "the following arguments were not expected: a b", in the order given, escaped and
/// cut short as printable() does: the words may be anything.
inline std::string unexpected_arguments(const CLI::App& app) {
  const std::vector<std::string> extras = app.remaining();
  std::string listed;
  for (const std::string& word : extras) listed += (listed.empty() ? "" : " ") + word;
  return std::string("the following argument") + (extras.size() > 1 ? "s were" : " was") + " not expected: " + printable(listed, 300);
}

}  // namespace dpinfer
