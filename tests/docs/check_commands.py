#!/usr/bin/env python3
"""Every `dpinfer` command in a fenced sh (or bash) block of the README and docs/ runs (issue 31).

usage: check_commands.py --dpinfer PATH --repo ROOT --work DIR [--no-worker] [--list]

Each command is found in its block (after `srun ...`, inside `--wrap "..."`, before a `|`, `&&`, `;`
or `#` comment) and checked one of two ways:

- **For real, on the tiny fixtures**, when every model, single file and LoRA it names maps to one
  (the tables below; no `--model` is the default model): `generate` and `inspect` run on the CPU with
  the fixture in place of the name, `--out` in DIR, PROMPTS replaced by a two-line prompts file, and
  `--steps 2 --width 32 --height 32 --dtype fp32 --device cpu` added (a documented `--steps` or `--dtype` is a
  GPU's choice; these keep the test short and the CPU able, and the tiny fixtures' default sizes are the real
  models', beyond what some tiny transformers can place). A single file without `--base` gets its fixture's base, as the
  shipped configs are the real models' shapes. `merge` and `status` run on the output of a real run of
  the default model made first, with its prompts file. `--version` and `--help` run as they are.
- **Its options only** otherwise: `dpinfer launch ... PROMPTS ...` and `dpinfer generate ...` run with
  `--dry-run` added, which checks the command line and reads nothing (a hub id or a file that is not
  here is fine).

A command that fails is one line, FILE:LINE: the command, how it was run, its exit status and its last
line of stderr; the script exits 1 if any failed, 0 otherwise, 2 for bad usage. --no-worker (a build
without LibTorch) checks every command's options only and skips inspect. --list prints how each command
would be checked and runs nothing. Standard library only.
"""
import argparse
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

# Documented model names -> tiny fixture pipelines (tests/data/pipelines/), same family and layout.
MODEL_FIXTURES = {
    "stable-diffusion-v1-5/stable-diffusion-v1-5": "tiny-sd1",
    "stabilityai/stable-diffusion-2-1": "tiny-sd2v",
    "stabilityai/stable-diffusion-xl-base-1.0": "tiny-sdxl",
    "stabilityai/sdxl-turbo": "tiny-sdxl-alt",  # SDXL-Turbo's trailing EulerAncestral config
    "Qwen/Qwen-Image": "tiny-qwen-image",
    "Tongyi-MAI/Z-Image-Turbo": "tiny-z-image",
    "black-forest-labs/FLUX.1-dev": "tiny-flux-dev",
    "black-forest-labs/FLUX.1-schnell": "tiny-flux-schnell",
    "lodestones/Chroma1-HD": "tiny-chroma",
    "stabilityai/stable-diffusion-3.5-medium": "tiny-sd3.5",
    "stabilityai/stable-diffusion-3.5-large": "tiny-sd3.5-t5",
}
# Documented single files -> (fixture file in tests/data/single_file/, the base pipeline it needs).
FILE_FIXTURES = {
    "v1-5-pruned-emaonly.safetensors": ("tiny-sd1.safetensors", "tiny-sd1"),
    "sd_xl_base_1.0.safetensors": ("tiny-sdxl.safetensors", "tiny-sdxl"),
    "flux1-dev.safetensors": ("tiny-flux-dev-bfl.safetensors", "tiny-flux-dev"),
    "chroma-unlocked-v50.safetensors": ("tiny-chroma-bfl.safetensors", "tiny-chroma"),
    "qwen_image_bf16.safetensors": ("tiny-qwen-image-comfy.safetensors", "tiny-qwen-image"),
    "z_image_turbo_bf16.safetensors": ("tiny-z-image-original.safetensors", "tiny-z-image"),
    "sd3.5_medium.safetensors": ("tiny-sd3.5-mmdit.safetensors", "tiny-sd3.5"),
}
# Documented LoRA files -> fixtures made for the pipelines above.
LORA_FIXTURES = {
    "sd15-style.safetensors": "loras/sd1-kohya.safetensors",
    "sdxl-style.safetensors": "loras/sdxl-kohya.safetensors",
    "flux-style.safetensors": "loras-dit/flux-kohya.safetensors",
    "chroma-style.safetensors": "loras-dit/chroma-peft.safetensors",
    "sd35-style.safetensors": "loras-dit/sd3-peft.safetensors",
    "qwen-style.safetensors": "loras-dit/qwen-peft.safetensors",
    "z-image-style.safetensors": "loras-dit/z-image-peft.safetensors",
}
PROMPTS = "a red circle in the center on a white background\na blue square in the top left on a black background\n"
OPERATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1", ")", "("}
FENCE = re.compile(r"^\s*```\s*(\S*)")


def doc_files(repo):
    files = [os.path.join(repo, "README.md")]
    for d, _, names in os.walk(os.path.join(repo, "docs")):
        files += [os.path.join(d, n) for n in sorted(names) if n.endswith(".md")]
    return sorted(files)


def commands(path):
    """(line number, words after `dpinfer`) of each dpinfer command in the file's sh/bash blocks."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    in_block, lang, pending, start = False, "", "", 0
    for n, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if m:
            in_block, lang = (not in_block, m.group(1)) if not in_block else (False, "")
            continue
        if not in_block or lang not in ("sh", "bash", "shell", "console"):
            continue
        if not pending:
            start = n
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical, pending = pending + line, ""
        try:
            lexer = shlex.shlex(logical, posix=True, punctuation_chars="|&;<>()")
            lexer.whitespace_split = True
            lexer.commenters = "#"
            words = list(lexer)
        except ValueError as e:
            yield start, None, f"cannot parse the line: {e}"
            continue
        for i, w in enumerate(words):
            # `dpinfer` itself or a build tree's (never `--prefix /opt/dpinfer`), or srun/sbatch --wrap's "dpinfer ...".
            inner = shlex.split(w) if " " in w and w.split() and w.split()[0] == "dpinfer" else None
            if w == "dpinfer" or (w.endswith("/tools/dpinfer") and "=" not in w) or inner:
                rest = inner[1:] if inner else words[i + 1:]
                for j, r in enumerate(rest):
                    if r in OPERATORS:
                        rest = rest[:j]
                        break
                yield start, rest, None


def option_value(args, name):
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a[len(name) + 1:]
    return None


def plan(args, repo, work, have_worker, counter):
    """How to check one command: (mode, argv after dpinfer, expected statuses) or (None, reason)."""
    if not args:
        return None, "no subcommand"
    sub = args[0]
    data = os.path.join(repo, "tests", "data")
    if sub in ("--version", "version", "--help", "-h", "help"):
        return "real", args, {0}
    if sub in ("merge", "status"):
        if not have_worker:
            return None, "merge and status read a real run, which needs dpinfer-worker"
        out = os.path.join(work, "run")
        new = [sub]
        positional_done = False
        skip = False
        for i, a in enumerate(args[1:], 1):
            if skip:
                skip = False
                continue
            if a == "--prompts":
                new += ["--prompts", os.path.join(work, "prompts.txt")]
                skip = True
            elif not a.startswith("-") and not positional_done:
                new.append(out)
                positional_done = True
            else:
                new.append(a)
        return "real", new, {0}
    if sub == "inspect":
        if not have_worker:
            return None, "inspect needs dpinfer-worker (a LibTorch build)"
        model = args[1] if len(args) > 1 else None
        if model not in MODEL_FIXTURES:
            return None, f"no fixture for the model {model!r}: add it to MODEL_FIXTURES in {__file__}"
        new = ["inspect", os.path.join(data, "pipelines", MODEL_FIXTURES[model])]
        rest = args[2:]
        i = 0
        while i < len(rest):
            if rest[i] == "--lora" and i + 1 < len(rest):
                name, _, scale = rest[i + 1].partition(":")
                if name not in LORA_FIXTURES:
                    return None, f"no fixture for the LoRA {name!r}: add it to LORA_FIXTURES in {__file__}"
                new += ["--lora", os.path.join(data, LORA_FIXTURES[name]) + (":" + scale if scale else "")]
                i += 2
            else:
                new.append(rest[i])
                i += 1
        return "real", new, {0}
    if sub not in ("launch", "generate"):
        return None, f"unknown subcommand {sub!r}"
    if "--" in args or "--no-python" in args or "-m" in args[:args.index("--") if "--" in args else len(args)] and sub == "launch":
        return "real", args, {0}
    dry = ("dry-run", args + ["--dry-run"], {0})
    if sub == "launch" or not have_worker:
        return dry
    # generate: for real where every name maps to a fixture.
    model = option_value(args, "--model")
    new, i, prompts_done = ["generate"], 1, False
    base_given = option_value(args, "--base") is not None
    counter[0] += 1
    while i < len(args):
        a = args[i]
        value = args[i + 1] if i + 1 < len(args) else None
        if a in ("--model", "-m") and value is not None:
            if value in MODEL_FIXTURES:
                new += ["--model", os.path.join(data, "pipelines", MODEL_FIXTURES[value])]
            elif value in FILE_FIXTURES:
                fixture, base = FILE_FIXTURES[value]
                new += ["--model", os.path.join(data, "single_file", fixture)]
                if not base_given:
                    new += ["--base", os.path.join(data, "pipelines", base)]
            else:
                return dry
            i += 2
        elif a == "--base" and value is not None:
            if value not in MODEL_FIXTURES:
                return dry
            new += ["--base", os.path.join(data, "pipelines", MODEL_FIXTURES[value])]
            i += 2
        elif a == "--lora" and value is not None:
            name, _, scale = value.partition(":")
            if name not in LORA_FIXTURES:
                return dry
            new += ["--lora", os.path.join(data, LORA_FIXTURES[name]) + (":" + scale if scale else "")]
            i += 2
        elif a in ("--out", "-o") and value is not None:
            new += ["--out", os.path.join(work, f"out-{counter[0]}")]
            i += 2
        elif not a.startswith("-") and not prompts_done:
            new.append(os.path.join(work, "prompts.txt"))
            prompts_done = True
            i += 1
        else:
            new.append(a)
            i += 1
    if "--out" not in new:  # never the repository's outputs/
        new += ["--out", os.path.join(work, f"out-{counter[0]}")]
    return "real", new + ["--steps", "2", "--width", "32", "--height", "32", "--dtype", "fp32", "--device", "cpu"], {0}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dpinfer", required=True)
    parser.add_argument("--repo", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--no-worker", action="store_true")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    repo = os.path.abspath(args.repo)
    os.makedirs(args.work, exist_ok=True)
    work = tempfile.mkdtemp(prefix="docs-commands-", dir=os.path.abspath(args.work))  # fresh: no run resumes
    with open(os.path.join(work, "prompts.txt"), "w", encoding="utf-8") as f:
        f.write(PROMPTS)
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_CACHE=os.path.join(work, "empty-hub-cache"))
    env.pop("DPINFER_LAUNCHED", None)

    def run(argv):
        return subprocess.run([args.dpinfer] + argv, cwd=repo, env=env, capture_output=True, text=True,
                              timeout=300)

    if not args.list:
        # The run that merge and status commands read: the default model, for real.
        first = run(["generate", os.path.join(work, "prompts.txt"), "--out", os.path.join(work, "run"),
                     "--steps", "2", "--device", "cpu"] if not args.no_worker else ["--version"])
        if first.returncode != 0:
            print(f"check_commands.py: the default model's run for merge and status failed ({first.returncode}): "
                  f"{first.stderr.strip().splitlines()[-1:]}")
            return 1

    failures, counts, counter = 0, {"real": 0, "dry-run": 0}, [0]
    for path in doc_files(repo):
        rel = os.path.relpath(path, repo)
        for line, words, problem in commands(path):
            shown = "dpinfer " + " ".join(shlex.quote(w) for w in (words or []))
            if problem:
                print(f"{rel}:{line}: {problem}")
                failures += 1
                continue
            how = plan(words, repo, work, not args.no_worker, counter)
            if how[0] is None:
                if args.no_worker and words and words[0] in ("inspect", "merge", "status"):
                    print(f"{rel}:{line}: skipped (no worker): {shown}")
                    continue
                print(f"{rel}:{line}: `{shown}`: {how[1]}")
                failures += 1
                continue
            mode, argv, ok = how
            counts[mode] += 1
            if args.list:
                print(f"{rel}:{line}: {mode}: dpinfer {' '.join(shlex.quote(a) for a in argv)}")
                continue
            result = run(argv)
            made = None
            if mode == "real" and argv[0] == "generate" and result.returncode in ok:
                # Every item of the two-line prompts file made: exit 0 and two images.
                out = argv[argv.index("--out") + 1]
                made = len(glob.glob(os.path.join(out, "**", "[0-9]*.png"), recursive=True))
            if result.returncode in ok and made in (None, 2):
                print(f"{rel}:{line}: ok ({mode}): {shown}")
            elif result.returncode in ok:
                print(f"{rel}:{line}: `{shown}` (real: dpinfer {' '.join(argv)}) exited 0 but made {made} image(s), "
                      f"not 2")
                failures += 1
            else:
                last = (result.stderr.strip().splitlines() or ["(no stderr)"])[-1]
                print(f"{rel}:{line}: `{shown}` ({mode}: dpinfer {' '.join(argv)}) exited {result.returncode}: {last}")
                failures += 1
    print(f"{counts['real']} command(s) run on the fixtures, {counts['dry-run']} checked with --dry-run, "
          f"{failures} failed")
    if not failures and not args.list:
        shutil.rmtree(work)  # kept when something failed, to look at
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
