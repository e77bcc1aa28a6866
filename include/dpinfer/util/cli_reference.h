#pragma once
// A command's options as a Markdown table, from its CLI11 definitions: the option reference
// (docs/reference/options.md, issue 31) is generated from the parser itself, so that it says
// what the parser takes. Header-only, as cli_extras.h: each command's own library links CLI11.

#include <CLI/CLI.hpp>
#include <string>

namespace dpinfer {

/// One Markdown table row per option of `app` in definition order (positionals first):
/// every spelling, the value it takes (none for a flag), its default as the help shows it,
/// and its help text. `|` in a text is escaped so that the table holds.
inline std::string options_markdown(const CLI::App& app) {
  auto cell = [](std::string text) {
    std::string out;
    for (char c : text) {
      if (c == '|') out += "\\|";
      else if (c == '\n') out += ' ';
      else out += c;
    }
    return out;
  };
  std::string table = "| option | value | default | meaning |\n|---|---|---|---|\n";
  const auto options = app.get_options([](const CLI::Option* o) { return o->get_name() != "--help"; });
  for (bool positional : {true, false}) {
    for (const CLI::Option* o : options) {
      if (o->get_positional() != positional) continue;
      std::string names;
      if (positional) {
        names = "`" + o->get_name() + "`";
      } else {
        for (const std::string& n : o->get_lnames()) names += (names.empty() ? "" : ", ") + std::string("`--") + n + "`";
        for (const std::string& n : o->get_snames()) names += (names.empty() ? "" : ", ") + std::string("`-") + n + "`";
      }
      const bool flag = o->get_type_size() == 0;
      const std::string value = flag ? "" : o->get_type_name();
      const std::string default_text = o->get_default_str().empty() ? "" : "`" + o->get_default_str() + "`";
      table += "| " + names + " | " + cell(value) + " | " + cell(default_text) + " | " + cell(o->get_description()) +
               " |\n";
    }
  }
  return table;
}

}  // namespace dpinfer
