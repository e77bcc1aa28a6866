#pragma once
// The argument parsing that `dpinfer merge` and `dpinfer status` share.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "dpinfer/util/cli_extras.h"
#include "dpinfer/util/error.h"

namespace dpinfer::cli {

/// Parses `args` (the words after the command's name) into `app`. Prints the help
/// and returns false on --help; a bad command line is a UsageError (exit 2) that
/// names `command` for its --help.
inline bool parse_command_line(CLI::App& app, const std::vector<std::string>& args, const std::string& command) {
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 consumes from the back
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return false;
  } catch (const CLI::ExtrasError&) {
    throw UsageError(unexpected_arguments(app) + "; see '" + command + " --help'");
  } catch (const CLI::ParseError& e) {
    throw UsageError(one_line(e.what()) + "; see '" + command + " --help'");
  }
  return true;
}

}  // namespace dpinfer::cli
