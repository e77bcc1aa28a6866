#include "dpinfer/cli/cli.h"
#include "dpinfer/cli/run_dir_commands.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "dpinfer/launcher/command_error.h"
#include "dpinfer/launcher/launcher.h"
#include "dpinfer/launcher/termination.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/version.h"

namespace dpinfer::cli {
namespace {

using launcher::LaunchOptions;

constexpr const char* kLaunchUsage =
    "dpinfer launch [OPTIONS] PROMPTS [GENERATE OPTIONS]   run `dpinfer generate` workers\n"
    "       dpinfer launch [OPTIONS] -- CMD [ARGS...]           run any program as the worker";

/// Registers the launch options on `app`, bound to `o`. torchrun's spellings with
/// underscores are accepted too, so existing command lines carry over.
void add_launch_options(CLI::App& app, LaunchOptions& o, std::string& nnodes, std::string& port,
                        std::string& ranks_filter, bool& verbose, bool& standalone) {
  app.add_option("--nproc-per-node,--nproc_per_node", o.nproc_per_node,
                 "workers on this node: N, auto (one per visible CUDA device, else 1), gpu (one per "
                 "CUDA device; an error without one) or cpu (one per usable CPU)")
      ->capture_default_str();
  app.add_option("--nnodes", nnodes, "number of nodes (N, or N:N as torchrun accepts)")->capture_default_str();
  app.add_option("--node-rank,--node_rank", o.node_rank, "this node's rank, 0..nnodes-1")->capture_default_str();
  app.add_option("--master-addr,--master_addr", o.master_addr, "address of node 0, where rank 0 hosts the store")
      ->capture_default_str();
  app.add_option("--master-port,--master_port", port,
                 "store port (default: a free port on a single node, 29500 with several nodes)");
  app.add_option("--max-restarts,--max_restarts", o.max_restarts,
                 "restart the whole worker group up to this many times after a failure")
      ->capture_default_str();
  app.add_option("--grace-period,--grace_period", o.grace_period_s,
                 "seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str();
  app.add_option("--log-dir,--log_dir", o.output.log_dir,
                 "write each rank's stdout and stderr to DIR/RUN_ID_XXXXXX/attempt_N/rank_R.{stdout,stderr}.log, "
                 "a fresh directory per launcher run, logged at start (the console then stays quiet unless --tee)");
  app.add_flag("--tee,-t", o.output.tee, "with --log-dir: also print worker output on the console (a flag: "
               "unlike torchrun's --tee 3 it takes no value)");
  app.add_flag("--quiet,-q", o.output.quiet, "print no worker output and no progress line on the console");
  app.add_option("--local-ranks-filter,--local_ranks_filter", ranks_filter,
                 "print only these local ranks on the console, e.g. 0 or 0,3 (files get all)");
  app.add_option("--progress-interval", o.output.progress_interval_s,
                 "seconds between progress lines when stderr is not a terminal (a terminal gets one line "
                 "redrawn in place); 0 turns progress off")
      ->capture_default_str();
  app.add_option("--run-id,--run_id", o.run_id,
                 "run id, exported as TORCHELASTIC_RUN_ID; it names the --log-dir subdirectory, so it has no '/' "
                 "and no leading '.'")
      ->capture_default_str();
  app.add_option("--role", o.role, "role name, exported as ROLE_NAME")->capture_default_str();
  app.add_flag("--verbose,-v", verbose, "log what the launcher does");
  app.add_flag("--standalone", standalone,
               "accepted for torchrun command lines and ignored: a single-node rendezvous on a free port is "
               "already the default on one node");
}

/// torchrun's --tee/--redirects take a stream selector (0-3, or "0:1,1:2" per local
/// rank); dpinfer has no such value.
bool is_torchrun_std_spec(const std::string& w) {
  return !w.empty() && w.find_first_not_of("0123456789:,") == std::string::npos;
}

constexpr const char* kConsoleOutputHint =
    "worker output always goes to the console unless --quiet (or --log-dir DIR, which writes per-rank files)";

int parse_nnodes(const std::string& value) {
  auto colon = value.find(':');
  std::string lo = value.substr(0, colon);
  std::string hi = colon == std::string::npos ? lo : value.substr(colon + 1);
  char* end = nullptr;
  long a = std::strtol(lo.c_str(), &end, 10);
  bool ok = !lo.empty() && *end == '\0';
  long b = std::strtol(hi.c_str(), &end, 10);
  ok = ok && !hi.empty() && *end == '\0';
  if (!ok || a < 1 || a > 1 << 20)
    throw UsageError("--nnodes: expected a positive number of nodes, got '" + value + "'");
  if (a != b)
    throw UsageError("--nnodes " + value +
                     ": elastic ranges are not supported; dpinfer uses a static rendezvous, give one number");
  return static_cast<int>(a);
}

/// Replaces this process with `dpinfer-worker SUB ARGS...` (SUB: generate or inspect).
[[noreturn]] void exec_worker(const std::string& sub, const std::vector<std::string>& args) {
  std::string worker = launcher::find_generate_worker();
  std::vector<char*> argv{const_cast<char*>(worker.c_str()), const_cast<char*>(sub.c_str())};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(worker.c_str(), argv.data());
  throw SystemError("execv(" + worker + ")", errno);
}


}  // namespace

LaunchOptions parse_launch_args(const std::vector<std::string>& args, std::string* help) {
  LaunchOptions o;
  std::string nnodes = "1", port, ranks_filter;
  bool verbose = false, standalone = false;
  CLI::App app(std::string("Runs one worker process per GPU with torchrun's environment and supervises them.\n\n  ") +
                    kLaunchUsage,
                "dpinfer launch");
  app.footer("Worker environment, exit statuses and log layout: see the README.");
  app.prefix_command();  // the first word that is not a launch option starts the worker's arguments
  add_launch_options(app, o, nnodes, port, ranks_filter, verbose, standalone);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    if (help) *help = app.help();
    return o;
  } catch (const CLI::ParseError& e) {
    throw UsageError(one_line(e.what()) + "; see 'dpinfer launch --help'");
  }
  o.worker_args = app.remaining();
  o.nnodes_given = app.count("--nnodes") > 0;
  o.node_rank_given = app.count("--node-rank") > 0;
  o.master_addr_given = app.count("--master-addr") > 0;
  // The launch options are args[0, options_end); the worker's words follow.
  const size_t options_end = args.size() - std::min(args.size(), o.worker_args.size());
  if (!o.worker_args.empty()) {
    const std::string& first = o.worker_args.front();
    if (first == "--redirects" || first == "-r" || first.rfind("--redirects=", 0) == 0)
      throw UsageError("'" + first + "' is torchrun's --redirects, which dpinfer does not have: " +
                       kConsoleOutputHint + "; add --tee to --log-dir to keep the console copy");
    // CLI11 stops at the number after the --tee flag and takes it for PROMPTS.
    if (options_end > 0 && (args[options_end - 1] == "--tee" || args[options_end - 1] == "-t") &&
        is_torchrun_std_spec(first))
      throw UsageError("'" + args[options_end - 1] + " " + first + "' is torchrun's: dpinfer's --tee is a flag " +
                       "with no value, which with --log-dir also prints the files on the console; " +
                       kConsoleOutputHint);
  }
  // CLI11 would take --tee=3 for a true flag, and --tee=0 for no --tee.
  for (size_t i = 0; i < options_end; ++i) {
    if (args[i].rfind("--tee=", 0) == 0)
      throw UsageError("'" + args[i] + "' is torchrun's: dpinfer's --tee is a flag with no value, which with " +
                       "--log-dir also prints the files on the console; " + kConsoleOutputHint);
  }
  if (!o.worker_args.empty() && o.worker_args.front() != "--" && o.worker_args.front().size() > 1 &&
      o.worker_args.front()[0] == '-')
    throw UsageError("unknown launch option '" + o.worker_args.front() +
                     "'; see 'dpinfer launch --help' (put the worker command after '--')");
  o.nnodes = parse_nnodes(nnodes);
  if (!port.empty()) o.master_port = launcher::parse_port(port);
  if (!ranks_filter.empty()) o.output.local_ranks_filter = launcher::parse_rank_list(ranks_filter);
  if (verbose) log::set_verbose(true);
  o.validate();
  return o;
}

int run_cli(int argc, char** argv) {
  log::setup(false);
  std::vector<std::string> args(argv + 1, argv + argc);
  const std::string sub = args.empty() ? "" : args.front();
  const std::vector<std::string> rest(args.empty() ? args.end() : args.begin() + 1, args.end());
  try {
    if (sub == "launch") {
      std::string help;
      LaunchOptions o = parse_launch_args(rest, &help);
      if (!help.empty()) {
        std::cout << help;
        return exit_status::kSuccess;
      }
      return launcher::run_launch(o);
    }
    if (sub == "generate" || sub == "inspect") exec_worker(sub, rest);
    if (sub == "merge") return run_merge_command(rest);
    if (sub == "status") return run_status_command(rest);
    if (sub == "--version" || sub == "version") {
      std::cout << "dpinfer " << version() << "\n";
      return exit_status::kSuccess;
    }
    if (sub.empty() || sub == "--help" || sub == "-h" || sub == "help") {
      std::cout << "dpinfer " << version()
                << ": data-parallel text-to-image batch inference\n\n"
                   "usage: dpinfer launch [OPTIONS] PROMPTS [GENERATE OPTIONS]\n"
                   "       dpinfer launch [OPTIONS] -- CMD [ARGS...]\n"
                   "       dpinfer generate PROMPTS [OPTIONS]   (one worker; needs a LibTorch build)\n"
                   "       dpinfer inspect MODEL [--variant fp16] [--scheduler NAME] [--json]   (check that a model loads)\n"
                   "       dpinfer merge OUT   (merge all manifests into OUT/metadata.jsonl)\n"
                   "       dpinfer status OUT --prompts FILE [--json]   (done/failed/missing items per shard)\n"
                   "       dpinfer --version\n\n"
                   "'dpinfer launch --help' lists the launch options; the README documents the\n"
                   "worker environment, exit statuses and output layout.\n";
      return sub.empty() ? exit_status::kBadInput : exit_status::kSuccess;
    }
    throw UsageError("unknown command '" + sub +
                     "'; expected launch, generate, inspect, merge, status or --version (see 'dpinfer --help')");
  } catch (const UsageError& e) {
    log::error("{}", e.what());
    return exit_status::kBadInput;
  } catch (const InputError& e) {  // a prompts file, a manifest: bad input, as generate's status 2
    log::error("{}", e.what());
    return exit_status::kBadInput;
  } catch (const launcher::CommandError& e) {
    log::error("{}", e.what());
    return e.status();
  } catch (const std::exception& e) {
    log::error("{}", e.what());
    return exit_status::kFailure;
  }
}

}  // namespace dpinfer::cli
