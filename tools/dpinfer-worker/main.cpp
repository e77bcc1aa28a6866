// dpinfer-worker: the LibTorch half of dpinfer. `dpinfer generate`, `dpinfer inspect`
// and the workers of `dpinfer launch PROMPTS` run this binary, so that the launcher
// itself never loads LibTorch.
#include <CLI/CLI.hpp>
#include <cctype>
#include <iostream>

#include "dpinfer/io/lora_ref.h"
#include "dpinfer/pipeline/family_table.h"
#include "dpinfer/pipeline/inspect.h"
#include "dpinfer/pipeline/memory_plan.h"
#include "dpinfer/plan/generate_options.h"
#include <algorithm>
#include "dpinfer/pipeline/lora_inspect.h"
#include "dpinfer/pipeline/load.h"
#include "dpinfer/pipeline/schedulers/scheduler.h"
#include "dpinfer/util/cli_extras.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/exit_status.h"
#include "dpinfer/util/log.h"
#include "dpinfer/worker/default_model.h"
#include "dpinfer/worker/worker.h"

namespace {

namespace exit_status = dpinfer::exit_status;


/// CLI11's message as one line in the house style: "the following argument was not expected: b".
std::string cli11_message(const CLI::ParseError& e) {
  std::string s = dpinfer::one_line(e.what());
  if (s.size() > 1 && std::islower(static_cast<unsigned char>(s[1])))  // "The", but not "MODEL"
    s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

/// `dpinfer inspect MODEL [--variant V] [--scheduler NAME] [--scheduler-set KEY=VALUE]... [--lora PATH[:SCALE]]...
/// [--json]`: the report on stdout; when the model (or a LoRA on it) would not load, the error `dpinfer generate` would stop with on
/// stderr, exit 2. A LoRA file given as MODEL is described from its names alone (exit 0). `dpinfer inspect
/// --families [--json]` prints the model table of every family instead, from the family rows (the README's).
int inspect_main(int argc, char** argv) {
  dpinfer::log::setup(false);
  dpinfer::log::set_prefix("");  // as `dpinfer generate` run alone
  std::string model, variant, scheduler;
  std::vector<std::string> lora_args;
  dpinfer::pipeline::SingleFileOptions single_file;
  bool json = false, families = false;
  CLI::App app(
      "Checks that a model would load, reading its configs and the headers of its weight files, and prints "
      "what it holds: the components, their configs, parameter counts and dtypes, the tokenizer, the "
      "scheduler, and any missing or unexpected weights; with --lora, what each LoRA changes and whether it fits. Given "
      "a LoRA file alone, what its names tell: format, family, layers, ranks.\n\n  dpinfer inspect MODEL "
      "[--variant fp16] [--scheduler NAME] [--scheduler-set KEY=VALUE]... [--lora PATH[:SCALE]]... [--json]\n  dpinfer inspect LORA.safetensors [--json]\n  dpinfer inspect --families [--json]",
      "dpinfer inspect");
  app.add_option("MODEL", model,
                 "a diffusers directory (with model_index.json), a hub id in the Hugging Face cache, or a single-file "
                 "checkpoint (.safetensors: SD 1.x/2.x/SDXL, SD3/3.5, FLUX.1, Chroma, Qwen-Image, Z-Image)");
  app.add_flag("--families", families,
               "instead of a model: the table of every model family dpinfer runs (pipeline classes, default steps and "
               "guidance, size multiple, settings, LoRA formats, single-file kinds) in Markdown, or JSON with --json");
  app.add_option("--base", single_file.base,
                 "for a single file: the diffusers pipeline whose configs and missing components it uses");
  app.add_option("--text-encoder", single_file.text_encoder, "for a single file without one: a text_encoder folder");
  app.add_option("--text-encoder-2", single_file.text_encoder_2,
                 "for a single file without one: a text_encoder_2 folder (SDXL's and SD3's second CLIP, FLUX.1's T5)");
  app.add_option("--vae", single_file.vae, "for a single file without one: a vae folder");
  app.add_option("--variant", variant, "inspect the weights `dpinfer generate --variant` would load, e.g. fp16");
  // generate's names, checked by the same make_scheduler() call: a model whose own scheduler
  // class dpinfer lacks still loads with --scheduler, and inspect should say so.
  std::string names;
  for (const std::string& name : dpinfer::pipeline::scheduler_names()) names += (names.empty() ? "" : ", ") + name;
  app.add_option("--scheduler", scheduler,
                 "inspect with the scheduler `dpinfer generate --scheduler` would use: " + names +
                     " (default: the model's)");
  std::vector<std::string> scheduler_set;
  app.add_option("--scheduler-set", scheduler_set,
                 "KEY=VALUE (repeatable): inspect with this key in the scheduler config, as `dpinfer generate "
                 "--scheduler-set` writes and checks it")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->expected(1)
      ->allow_extra_args(false);
  app.add_option("--lora", lora_args,
                 "PATH[:SCALE] (repeatable): check a LoRA (a file, a folder or a hub id, as `dpinfer generate --lora` "
                 "finds it) against the model: its format, the layers it changes per component, ranks and alphas, "
                 "reading only its header");
  app.add_flag("--json", json, "print the report as json on stdout, for scripts");
  bool memory = false;
  std::string memory_dtype = "bf16";
  app.add_flag("--memory", memory,
               "also print each component's weight bytes on the device, by --weight-storage (weights only: "
               "activations come on top); the model needs no weight files for it, its configs suffice");
  app.add_option("--dtype", memory_dtype, "the run dtype --memory counts in: fp32, fp16 or bf16")
      ->capture_default_str();
  // --memory's plan (pipeline/memory_plan.h): the run's shape and budget, as `dpinfer generate` would plan them.
  dpinfer::pipeline::MemoryShape shape;
  shape.width = 0;
  shape.height = 0;
  std::string plan_device = "cuda";
  std::string plan_budget;
  bool exact = false;
  app.add_option("--width", shape.width, "--memory's plan: the image width (default: the model's)");
  app.add_option("--height", shape.height, "--memory's plan: the image height (default: the model's)");
  app.add_option("--batch-size", shape.batch_size, "--memory's plan: images per batch")->capture_default_str();
  app.add_option("--device", plan_device, "--memory's plan: cuda (offload helps) or cpu (it does not)")
      ->capture_default_str();
  app.add_option("--max-device-memory", plan_budget, "--memory's plan: the budget in GB; prints the plan it chooses");
  app.add_flag("--exact", exact, "--memory's plan: never choose what changes pixels");
  app.footer(
      "Exit status: 0 when the model (and each --lora on it) loads, and for a LoRA file described alone; 2 when it does "
      "not (with the error on stderr, the one `dpinfer generate` would stop with), 1 when inspect itself fails.");
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return exit_status::kSuccess;
  } catch (const CLI::ExtrasError&) {
    dpinfer::log::error("{}; see 'dpinfer inspect --help'", dpinfer::unexpected_arguments(app));
    return exit_status::kBadInput;
  } catch (const CLI::ParseError& e) {
    dpinfer::log::error("{}; see 'dpinfer inspect --help'", cli11_message(e));
    return exit_status::kBadInput;
  }
  if (memory_dtype != "fp32" && memory_dtype != "fp16" && memory_dtype != "bf16") {
    dpinfer::log::error("--dtype: expected fp32, fp16 or bf16, got {}", dpinfer::quote(memory_dtype, 60));
    return exit_status::kBadInput;
  }
  if (families) {
    if (!model.empty()) {
      dpinfer::log::error("--families takes no MODEL; see 'dpinfer inspect --help'");
      return exit_status::kBadInput;
    }
    if (json)
      std::cout << dpinfer::pipeline::families_json().dump(2) << "\n";
    else
      std::cout << dpinfer::pipeline::families_markdown();
    return exit_status::kSuccess;
  }
  if (model.empty()) {
    dpinfer::log::error("MODEL is required; see 'dpinfer inspect --help'");
    return exit_status::kBadInput;
  }
  model = dpinfer::worker::resolve_embedded_model(model);  // `dpinfer inspect dpinfer-shapes-dit-64`
  try {
    if (const auto lora = lora_args.empty() ? dpinfer::pipeline::lora_file_report(model) : std::nullopt) {
      if (json)
        std::cout << lora->to_json().dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
      else
        std::cout << lora->to_text();
      return exit_status::kSuccess;
    }
    dpinfer::io::LoraSet loras;
    for (const std::string& arg : lora_args) loras.push_back(dpinfer::io::parse_lora_arg(arg, "--lora"));
    const dpinfer::pipeline::InspectReport report =
        dpinfer::pipeline::inspect_model(model, variant, scheduler, single_file, loras,
                                         dpinfer::plan::parse_key_values(scheduler_set, "--scheduler-set",
                                                                         "timestep_spacing=trailing"));
    if (json)
      std::cout << report.to_json().dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    else
      std::cout << report.to_text();
    if (memory && !json) {
      std::cout << report.memory_text(memory_dtype);
      if (report.default_size && std::all_of(report.models.begin(), report.models.end(),
                                             [](const auto& c) { return c.module_elements > 0; })) {
        if (shape.width <= 0) shape.width = (*report.default_size)[1];
        if (shape.height <= 0) shape.height = (*report.default_size)[0];
        shape.dtype = memory_dtype;
        shape.cuda = plan_device != "cpu";
        std::optional<double> budget = dpinfer::plan::parse_device_memory(plan_budget);
        if (budget && *budget == 0) throw dpinfer::UsageError("--max-device-memory auto: inspect plans for a number of GB");
        std::cout << dpinfer::pipeline::memory_plan_text(report, shape, budget, exact);
      }
    }
    std::cout.flush();
    if (report.ok()) return exit_status::kSuccess;
    dpinfer::log::error("{}", report.error);
    return report.bad_input ? exit_status::kBadInput : exit_status::kFailure;
  } catch (const dpinfer::InputError& e) {  // a --lora that does not parse, a LoRA file whose header does not
    dpinfer::log::error("{}", dpinfer::one_line(e.what()));
    return exit_status::kBadInput;
  } catch (const std::exception& e) {
    dpinfer::log::error("{}", dpinfer::one_line(e.what()));
    return exit_status::kFailure;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string sub = argc > 1 ? argv[1] : "";
  if (sub == "generate") return dpinfer::worker::generate_main(argc, argv, dpinfer::pipeline::load_text_to_image);
  if (sub == "inspect") return inspect_main(argc, argv);
  std::cerr << "dpinfer-worker: run it through 'dpinfer generate', 'dpinfer inspect' or 'dpinfer launch'\n";
  return 2;
}
