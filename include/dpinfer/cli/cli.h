#pragma once
// The command line of `dpinfer`: subcommands, their options, and the mapping of
// errors to exit statuses. main() is only a call to run_cli().

#include <string>
#include <vector>

#include "dpinfer/launcher/launch_options.h"

namespace dpinfer::cli {

/// Runs `dpinfer ARGS...`; returns the exit status. Never throws.
int run_cli(int argc, char** argv);

/// Parses the words after `dpinfer launch` into options. Throws UsageError
/// (one line, with a hint) on bad input. `help` is set instead when asked for.
/// docs/reference/options.md: the options of `dpinfer launch` and `dpinfer generate` as Markdown
/// tables, from their CLI11 definitions (`dpinfer help --markdown`).
std::string options_reference_markdown();

launcher::LaunchOptions parse_launch_args(const std::vector<std::string>& args, std::string* help = nullptr);

}  // namespace dpinfer::cli
