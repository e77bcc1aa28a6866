#include "dpinfer/cli/cli.h"
#include "dpinfer/cli/run_dir_commands.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <set>

#include "dpinfer/launcher/command_error.h"
#include "dpinfer/launcher/launcher.h"
#include "dpinfer/launcher/termination.h"
#include "dpinfer/plan/generate_options.h"
#include "dpinfer/util/cli_reference.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/log.h"
#include "dpinfer/util/strings.h"
#include "dpinfer/util/version.h"

namespace dpinfer::cli {
namespace {

using launcher::LaunchOptions;

constexpr const char* kLaunchUsage =
    "dpinfer launch [OPTIONS] PROMPTS [GENERATE OPTIONS]   run `dpinfer generate` workers\n"
    "       dpinfer launch [OPTIONS] -- CMD [ARGS...]           run any program as the worker\n"
    "       dpinfer launch [OPTIONS] --no-python CMD [ARGS...]  the same, in torchrun's words\n"
    "       dpinfer launch [OPTIONS] -m MODULE [ARGS...]        python -u -m MODULE ARGS (torchrun's -m)";

/// What parse_launch_args reads into strings first and checks afterwards.
struct RawLaunchOptions {
  std::string nnodes = "1", port, ranks_filter, redirects, tee;
  std::string rdzv_backend, rdzv_endpoint, rdzv_id, rdzv_conf, start_method, local_addr;
  double monitor_interval = 0.1;
  bool verbose = false, standalone = false, no_python = false, module = false;
};

/// Registers the launch options on `app`, bound to `o`. torchrun's spellings with
/// underscores are accepted too, so existing command lines carry over.
void add_launch_options(CLI::App& app, LaunchOptions& o, RawLaunchOptions& raw) {
  app.add_option("--nproc-per-node,--nproc_per_node", o.nproc_per_node,
                 "workers on this node: N, auto (one per visible CUDA device, else 1), gpu (one per "
                 "CUDA device; an error without one) or cpu (one per usable CPU)")
      ->capture_default_str();
  app.add_option("--nnodes", raw.nnodes, "number of nodes (N, or N:N as torchrun accepts)")->capture_default_str();
  app.add_option("--node-rank,--node_rank", o.node_rank, "this node's rank, 0..nnodes-1")->capture_default_str();
  app.add_option("--master-addr,--master_addr", o.master_addr, "address of node 0, where rank 0 hosts the store")
      ->capture_default_str();
  app.add_option("--master-port,--master_port", raw.port,
                 "store port (default: a free port on a single node, 29500 with several nodes)");
  app.add_option("--rdzv-backend,--rdzv_backend", raw.rdzv_backend,
                 "static or c10d: both mean dpinfer's static rendezvous (rank 0 hosts the store)");
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", raw.rdzv_endpoint,
                 "HOST:PORT of the store, instead of --master-addr/--master-port (c10d: port 29400 when omitted)");
  app.add_option("--rdzv-id,--rdzv_id", raw.rdzv_id, "torchrun's name for --run-id");
  app.add_option("--rdzv-conf,--rdzv_conf", raw.rdzv_conf, "refused: dpinfer's static rendezvous takes no settings");
  app.add_option("--max-restarts,--max_restarts", o.max_restarts,
                 "restart the whole worker group up to this many times after a failure")
      ->capture_default_str();
  app.add_option("--grace-period,--grace_period", o.grace_period_s,
                 "seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str();
  app.add_option("--log-dir,--log_dir", o.output.log_dir,
                 "also write each local rank's output to DIR/RUN_ID_XXXXXX/attempt_N/LOCAL_RANK/{stdout,stderr}.log "
                 "(torchrun's layout), a fresh directory per launcher run, logged at start");
  app.add_option("--redirects,-r", raw.redirects,
                 "with --log-dir, send these streams to the files only: 1 stdout, 2 stderr, 3 both, or per local "
                 "rank as 0:3,1:2 (torchrun's)");
  app.add_option("--tee,-t", raw.tee,
                 "with --redirects, keep a console copy of these streams (same values; alone, 3)");
  app.add_flag("--quiet,-q", o.output.quiet, "print no worker output and no progress line on the console");
  app.add_option("--local-ranks-filter,--local_ranks_filter", raw.ranks_filter,
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
  app.add_flag("--no-python,--no_python", raw.no_python,
               "the first word after the options is the program to run, as after '--' (torchrun's)");
  app.add_flag("-m,--module", raw.module,
               "run `python -u -m MODULE ARGS...` as the worker, with $PYTHON_EXEC or else python3 (torchrun's)");
  app.add_option("--monitor-interval,--monitor_interval", raw.monitor_interval,
                 "accepted and ignored: dpinfer sees a worker end at once instead of polling");
  app.add_option("--start-method,--start_method", raw.start_method,
                 "spawn, fork or forkserver: accepted and ignored, as torchrun ignores it for a program");
  app.add_option("--local-addr,--local_addr", raw.local_addr,
                 "accepted and ignored: the static rendezvous needs only node 0's address");
  app.add_flag("--verbose,-v", raw.verbose, "log what the launcher does");
  app.add_flag("--standalone", raw.standalone,
               "accepted for torchrun command lines and ignored: a single-node rendezvous on a free port is "
               "already the default on one node");
}

/// torchrun options that dpinfer launch does not have, and what to do instead.
const char* torchrun_only_option_hint(const std::string& name) {
  static const std::pair<const char*, const char*> kOptions[] = {
      {"--run-path", "run the script with '-- python3 SCRIPT' instead"},
      {"--run_path", "run the script with '-- python3 SCRIPT' instead"},
      {"--logs-specs", "dpinfer's log layout is fixed (see --log-dir)"},
      {"--logs_specs", "dpinfer's log layout is fixed (see --log-dir)"},
      {"--numa-binding", "bind CPUs in the worker command, e.g. '-- numactl --cpunodebind=0 CMD'"},
      {"--numa_binding", "bind CPUs in the worker command, e.g. '-- numactl --cpunodebind=0 CMD'"},
      {"--signals-to-handle", "dpinfer always forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2"},
      {"--signals_to_handle", "dpinfer always forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2"},
      {"--virtual-local-rank", "set CUDA_VISIBLE_DEVICES in the worker command instead"},
      {"--virtual_local_rank", "set CUDA_VISIBLE_DEVICES in the worker command instead"},
      {"--event-log-handler", "dpinfer logs its events on stderr"},
      {"--event_log_handler", "dpinfer logs its events on stderr"},
      {"--duplicate-stdout-filters", "filter the --log-dir files instead"},
      {"--duplicate_stdout_filters", "filter the --log-dir files instead"},
      {"--duplicate-stderr-filters", "filter the --log-dir files instead"},
      {"--duplicate_stderr_filters", "filter the --log-dir files instead"},
  };
  for (const auto& [option, hint] : kOptions)
    if (name == option) return hint;
  return nullptr;
}

/// The option name of a word ("--tee=3" -> "--tee"), or "" when it is no option.
std::string option_name(const std::string& word) {
  if (word.size() < 2 || word[0] != '-' || word == "--") return "";
  return word.substr(0, word.find('='));
}

/// torchrun's -t/--tee takes a value, dpinfer's once took none: "--tee 3" and
/// "--tee=3" are torchrun's, and a bare --tee (before PROMPTS or another option) is
/// --tee=3. Rewrites each --tee/-t among the launch options (up to the first word
/// that is no launch option) into "--tee=VALUE", so that CLI11 never takes a
/// prompts file for the value.
std::vector<std::string> normalize_tee(const CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> out;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& w = args[i];
    const std::string name = option_name(w);
    if (name.empty()) break;  // PROMPTS, the command, or "--"
    const CLI::Option* opt = app.get_option_no_throw(name);
    if (!opt) break;  // unknown: parse_launch_args says so
    if (name == "--tee" || name == "-t") {
      if (w.size() > name.size()) {
        out.push_back("--tee" + w.substr(name.size()));
      } else if (i + 1 < args.size() && launcher::looks_like_stream_spec(args[i + 1])) {
        out.push_back("--tee=" + args[++i]);
      } else {
        out.push_back("--tee=3");
      }
      continue;
    }
    out.push_back(w);
    if (w.size() == name.size() && opt->get_type_size_max() > 0 && i + 1 < args.size()) out.push_back(args[++i]);
  }
  out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return out;
}

int parse_nnodes(const std::string& value) {
  auto colon = value.find(':');
  std::string lo = value.substr(0, colon);
  std::string hi = colon == std::string::npos ? lo : value.substr(colon + 1);
  char* end = nullptr;
  long a = std::strtol(lo.c_str(), &end, 10);
  bool ok = !lo.empty() && *end == '\0';
  long b = std::strtol(hi.c_str(), &end, 10);
  ok = ok && !hi.empty() && *end == '\0';
  if (!ok || a < 1 || a > 1 << 20 || b < 1)
    throw UsageError("--nnodes: expected a positive number of nodes, got " + quote(value));
  if (a != b)
    throw UsageError("--nnodes " + quote(value) +
                     ": elastic ranges (MIN:MAX) are not supported: dpinfer's rendezvous is static, with a world "
                     "size fixed at start; give one number, e.g. --nnodes " + std::to_string(b) +
                     ", and let --max-restarts or the job scheduler retry");
  return static_cast<int>(a);
}

/// torchrun's --rdzv-* options on dpinfer's static rendezvous: the endpoint is the
/// address of rank 0's store, as --master-addr:--master-port.
void apply_rendezvous_options(const CLI::App& app, const RawLaunchOptions& raw, LaunchOptions& o) {
  const std::string& backend = raw.rdzv_backend;
  if (!backend.empty() && backend != "static" && backend != "c10d")
    throw UsageError("--rdzv-backend " + quote(backend) +
                     ": dpinfer has only a static rendezvous (rank 0 hosts a c10d store at a fixed address); use "
                     "--rdzv-backend c10d or static with --rdzv-endpoint HOST:PORT, or --master-addr and --master-port");
  if (!raw.rdzv_conf.empty())
    throw UsageError("--rdzv-conf " + quote(raw.rdzv_conf) +
                     ": dpinfer's static rendezvous takes no settings; drop it (dpinfer generate's "
                     "--rendezvous-timeout sets how long ranks wait for each other)");
  if (!raw.rdzv_endpoint.empty()) {
    // torchrun: c10d's default port is 29400; the static backend needs one.
    auto [host, port] = launcher::parse_rdzv_endpoint(raw.rdzv_endpoint, backend == "c10d" ? 29400 : -1);
    if (port < 0)
      throw UsageError("--rdzv-endpoint " + quote(raw.rdzv_endpoint) +
                       ": the port is missing; give HOST:PORT, e.g. " + host + ":29500");
    if (app.count("--master-addr") || app.count("--master-port"))
      log::warn("--rdzv-endpoint {} gives the store's address: --master-addr and --master-port are ignored, as "
                "torchrun ignores them",
                printable(raw.rdzv_endpoint));
    o.master_addr = host;
    o.master_port = port;
    o.master_addr_given = true;
  }
  if (!raw.rdzv_id.empty()) {
    if (app.count("--run-id") && raw.rdzv_id != o.run_id)
      throw UsageError("--rdzv-id " + quote(raw.rdzv_id) + " and --run-id " + quote(o.run_id) +
                       " name the same thing differently; give one");
    o.run_id = raw.rdzv_id;
  }
  // torchrun's c10d rendezvous numbers the nodes as they arrive; a static one needs each node's rank.
  if (backend == "c10d" && o.nnodes > 1 && !o.node_rank_given)
    throw UsageError("--rdzv-backend c10d with --nnodes " + std::to_string(o.nnodes) +
                     ": dpinfer's rendezvous is static, so each node needs --node-rank R (0.." +
                     std::to_string(o.nnodes - 1) + "); under srun, drop --nnodes and --rdzv-endpoint and the "
                     "launcher takes the layout from the SLURM step");
}

/// -m and --no-python: torchrun's ways of naming the worker program.
void apply_program_options(const RawLaunchOptions& raw, LaunchOptions& o) {
  if (raw.module && raw.no_python)
    throw UsageError("-m/--module and --no-python contradict each other (-m runs python -m MODULE); pick one");
  if (!raw.module && !raw.no_python) return;
  std::vector<std::string> words = o.worker_args;
  if (!words.empty() && words.front() == "--") words.erase(words.begin());
  if (words.empty())
    throw UsageError(raw.module ? "-m: give the module to run, e.g. dpinfer launch -m pkg.train ARGS..."
                                : "--no-python: give the program to run, e.g. dpinfer launch --no-python ./train ARGS...");
  std::vector<std::string> argv{"--"};
  if (raw.module) {
    const char* exec = std::getenv("PYTHON_EXEC");  // torchrun's override of its interpreter
    argv.insert(argv.end(), {exec && *exec ? exec : "python3", "-u", "-m"});
  }
  argv.insert(argv.end(), words.begin(), words.end());
  o.worker_args = std::move(argv);
}

/// Every name of every launch option ("--nproc-per-node", "--nproc_per_node", "-v", ...).
std::set<std::string> launch_option_names(const CLI::App& app) {
  std::set<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    for (const auto& n : opt->get_lnames()) names.insert("--" + n);
    for (const auto& n : opt->get_snames()) names.insert("-" + n);
  }
  return names;
}

/// In the PROMPTS form, a launch option among the generate options (after PROMPTS)
/// would reach the workers' parser as an unknown option: say where it belongs.
void check_no_launch_option_after_prompts(const CLI::App& app, const LaunchOptions& o) {
  if (o.worker_args.empty() || o.worker_args.front() == "--") return;
  const std::set<std::string> launch = launch_option_names(app);
  const std::vector<std::string> generate = plan::generate_option_names();
  for (size_t i = 1; i < o.worker_args.size(); ++i) {
    const std::string name = option_name(o.worker_args[i]);
    if (name.empty() || !launch.count(name) || std::count(generate.begin(), generate.end(), name)) continue;
    throw UsageError("'" + name + "' is a launch option, but it comes after PROMPTS " + quote(o.worker_args[0]) +
                     ", among the generate options; put the launch options first: dpinfer launch [OPTIONS] PROMPTS "
                     "[GENERATE OPTIONS]");
  }
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

std::string options_reference_markdown() {
  LaunchOptions o;
  RawLaunchOptions raw;
  CLI::App launch;
  add_launch_options(launch, o, raw);
  return std::string(
             "# Option reference\n\n"
             "Generated from the command-line definitions by `dpinfer help --markdown` (`tools/docs/regenerate.sh` "
             "rewrites this page; the test\n"
             "`docs_generated_up_to_date` fails when it differs). What the options do, with examples: "
             "[`dpinfer launch`](../launch.md),\n"
             "[`dpinfer generate`](../generate.md), [`dpinfer merge` and `dpinfer status`](../merge-and-status.md); "
             "`dpinfer inspect`'s options\nare on [its page](../inspect.md). The model families' defaults, size multiples and settings are in "
             "the [model table](../../README.md#models).\n\n"
             "## `dpinfer launch`\n\n```\nusage: ") +
         kLaunchUsage +
         "\n```\n\nThe launch options come before PROMPTS or the program; what follows PROMPTS is `dpinfer generate`'s "
         "options.\n\n" +
         options_markdown(launch) +
         "\n## `dpinfer generate`\n\n```\nusage: dpinfer generate PROMPTS [OPTIONS]\n```\n\n" +
         plan::generate_options_markdown() +
         "\n## `dpinfer merge`\n\n```\nusage: dpinfer merge OUT [--latest-wins]\n```\n\n" + merge_options_markdown() +
         "\n## `dpinfer status`\n\n```\nusage: dpinfer status OUT [--prompts FILE] [--json] [GENERATE OPTIONS]\n```\n\n"
         "After OUT and its own options, status takes `dpinfer generate`'s (e.g. `--shard I/N`, `--config F`, "
         "`--batch-size`), which decide how the prompts file's items are counted.\n\n" +
         status_options_markdown();
}

LaunchOptions parse_launch_args(const std::vector<std::string>& args, std::string* help) {
  LaunchOptions o;
  RawLaunchOptions raw;
  CLI::App app(std::string("Runs one worker process per GPU with torchrun's environment and supervises them.\n\n  ") +
                    kLaunchUsage,
                "dpinfer launch");
  app.footer("The generate options (after PROMPTS) are those of 'dpinfer generate --help'.\n"
             "Worker environment, exit statuses, log layout and a torchrun migration table: see docs/launch.md.");
  app.prefix_command();  // the first word that is not a launch option starts the worker's arguments
  add_launch_options(app, o, raw);
  // An option given twice takes its last value, as argparse (torchrun) does.
  for (CLI::Option* opt : app.get_options()) opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  const std::vector<std::string> words = normalize_tee(app, args);
  std::vector<std::string> reversed(words.rbegin(), words.rend());
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
  if (!o.worker_args.empty() && o.worker_args.front() != "--" && o.worker_args.front().size() > 1 &&
      o.worker_args.front()[0] == '-') {
    const std::string name = option_name(o.worker_args.front());
    if (const char* hint = torchrun_only_option_hint(name))
      throw UsageError("'" + name + "' is a torchrun option that dpinfer launch does not have: " + hint +
                       " (docs/launch.md: \"Coming from torchrun\")");
    throw UsageError("unknown launch option " + quote(o.worker_args.front()) +
                     "; see 'dpinfer launch --help' (put the worker command after '--')");
  }
  if (!raw.start_method.empty() && raw.start_method != "spawn" && raw.start_method != "fork" &&
      raw.start_method != "forkserver")
    throw UsageError("--start-method " + quote(raw.start_method) + ": expected spawn, fork or forkserver");
  if (!(raw.monitor_interval >= 0) || !std::isfinite(raw.monitor_interval))
    throw UsageError("--monitor-interval: expected seconds >= 0, got " + std::to_string(raw.monitor_interval));
  o.nnodes = parse_nnodes(raw.nnodes);
  if (!raw.port.empty()) o.master_port = launcher::parse_port(raw.port);
  if (!raw.ranks_filter.empty()) o.output.local_ranks_filter = launcher::parse_rank_list(raw.ranks_filter);
  if (!raw.redirects.empty()) o.output.redirects = launcher::parse_stream_spec("--redirects", raw.redirects);
  if (!raw.tee.empty()) o.output.tee = launcher::parse_stream_spec("--tee", raw.tee);
  apply_rendezvous_options(app, raw, o);
  apply_program_options(raw, o);
  check_no_launch_option_after_prompts(app, o);
  if (raw.verbose) log::set_verbose(true);
  if (app.count("--monitor-interval") || app.count("--start-method") || app.count("--local-addr"))
    log::debug("--monitor-interval, --start-method and --local-addr are accepted for torchrun command lines and "
               "change nothing here");
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
    if (sub == "generate" && std::find(rest.begin(), rest.end(), "--dry-run") != rest.end()) {
      // Checked here, without LibTorch: a launcher-only build checks a command it cannot run.
      std::string help;
      const plan::GenerateOptions g = plan::parse_generate_args(rest, &help);
      std::cout << (help.empty() ? g.to_json().dump(2) + "\n" : help);
      if (help.empty()) log::info("dry run: the generate options are valid; nothing was read or written");
      return exit_status::kSuccess;
    }
    if (sub == "generate" || sub == "inspect") exec_worker(sub, rest);
    if (sub == "merge") return run_merge_command(rest);
    if (sub == "status") return run_status_command(rest);
    if (sub == "help" && rest == std::vector<std::string>{"--markdown"}) {
      std::cout << options_reference_markdown();
      return exit_status::kSuccess;
    }
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
                   "       dpinfer inspect MODEL [--variant fp16] [--scheduler NAME] [--scheduler-set K=V] [--base DIR] [--lora PATH[:SCALE]]... [--memory] [--json]   (check that a model, and its LoRAs, load; --memory: its weight bytes)\n"
                   "       dpinfer inspect LORA.safetensors [--json]   (what a LoRA file is: format, family, layers, ranks)\n"
                   "       dpinfer inspect --families [--json]   (the model families: defaults, settings, LoRA formats, single files)\n"
                   "       dpinfer merge OUT   (merge all manifests into OUT/metadata.jsonl)\n"
                   "       dpinfer status OUT [--prompts FILE] [--json]   (done/failed/missing items per shard)\n"
                   "       dpinfer --version\n\n"
                   "'dpinfer launch --help' lists the launch options; docs/ documents the worker\n"
                   "environment and exit statuses (docs/launch.md, docs/generate.md) and the output\n"
                   "layout (docs/outputs-and-resume.md); docs/reference/options.md lists every option.\n";
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
