"""diffusers' own output for the shipped models, as parity goldens.

Writes tests/data/pipelines/dpinfer-shapes-64.golden/{cases.json,images.safetensors}:
a few StableDiffusionPipeline calls on models/dpinfer-shapes-64 (held-out captions,
the model's own DPM-Solver++ scheduler and two others, CFG on and off, a batch with
one generator per image), recorded exactly as tools/fixtures/make_pipelines.py
records the tiny pipelines, so tests/torch/test_pipeline_parity.cpp reads both.
With --dit, tests/data/pipelines/dpinfer-shapes-dit-64.golden: ZImagePipeline calls on
models/dpinfer-shapes-dit-64 (the defaults, fewer steps, CFG off, a batch), recorded
as tools/fixtures/make_z_image_pipelines.py records the tiny Z-Image pipelines.

    tools/fixtures/.venv/bin/python tools/train/record_goldens.py [--dit]

Run it again after retraining a model (tools/train/train.sh [--dit]). CPU, float32.
"""
from __future__ import annotations

import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "fixtures"))

import diffusers  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from diffusers import StableDiffusionPipeline  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

import make_pipelines as mp  # noqa: E402  (run_case, write_json, contiguous)

MODEL = "models/dpinfer-shapes-64"
NAME = "dpinfer-shapes-64"

# Held-out captions (configs/prompts/shapes-heldout.txt): never seen in training.
P1 = "a red circle in the bottom left on a black background"
P2 = "a green triangle in the bottom right on a white background"
P3 = "a blue square in the top right on a gray background"


def cases() -> list[dict]:
    return [
        # What `dpinfer generate` does with no options: the model's scheduler, 50 steps, CFG 7.5.
        dict(name="default_50", scheduler="default", prompt=P1, seeds=[0], steps=50, guidance_scale=7.5),
        dict(name="default_20", scheduler="default", prompt=P2, seeds=[1], steps=20, guidance_scale=7.5),
        dict(name="no_cfg", scheduler="default", prompt=P3, seeds=[2], steps=20, guidance_scale=1.0),
        dict(name="euler_a", scheduler="euler_a", prompt=P2, seeds=[3], steps=20, guidance_scale=5.0),
        dict(name="ddim", scheduler="ddim", prompt=P3, seeds=[4], steps=20, guidance_scale=7.5),
        dict(name="batch_prompts_3", scheduler="default", prompt=[P1, P2, P3], seeds=[10, 11, 12],
             generator_list=True, steps=20, guidance_scale=7.5),
    ]


DIT_MODEL = "models/dpinfer-shapes-dit-64"
DIT_NAME = "dpinfer-shapes-dit-64"


def dit_cases() -> list[dict]:
    base = dict(height=64, width=64, guidance_scale=5.0)
    return [
        # What `dpinfer generate --model models/dpinfer-shapes-dit-64` does with no options: 50 steps, CFG 5.
        dict(base, name="default_50", prompt=P1, seeds=[0], steps=50),
        dict(base, name="steps_8", prompt=P2, seeds=[1], steps=8),
        dict(base, name="no_cfg", prompt=P3, seeds=[2], steps=20, guidance_scale=0.0),
        dict(base, name="negative_prompt", prompt=P3, negative_prompt="a red circle", seeds=[3], steps=20),
        dict(base, name="batch_prompts_3", prompt=[P1, P2, P3], seeds=[10, 11, 12], generator_list=True, steps=20),
    ]


def main() -> None:
    dit = "--dit" in sys.argv[1:]
    model, name = (DIT_MODEL, DIT_NAME) if dit else (MODEL, NAME)
    model_dir = os.path.join(ROOT, model)
    gdir = os.path.join(ROOT, "tests", "data", "pipelines", name + ".golden")
    shutil.rmtree(gdir, ignore_errors=True)
    os.makedirs(gdir)
    if dit:
        import make_z_image_pipelines as mz  # noqa: E402  (run_case: the tiny Z-Image pipelines' record format)
        from diffusers import ZImagePipeline  # noqa: E402
        pipe = ZImagePipeline.from_pretrained(model_dir, torch_dtype=torch.float32)

        def run(case, images, debug, floats, ids_table, sched_table):
            return mz.run_case(pipe, case, images, floats, debug, ids_table)
        all_cases = dit_cases()
    else:
        pipe = StableDiffusionPipeline.from_pretrained(model_dir, safety_checker=None, requires_safety_checker=False)
        base_cfg = pipe.scheduler.config

        def run(case, images, debug, floats, ids_table, sched_table):
            return mp.run_case(pipe, base_cfg, case, images, debug, floats, ids_table, sched_table)
        all_cases = cases()
    pipe.set_progress_bar_config(disable=True)
    images, debug, floats, ids_table, sched_table = {}, {}, {}, {}, {}
    records = []
    # Recorded on torch's default thread count here (1: one physical core), the
    # spread measured on 2.
    threads, other = torch.get_num_threads(), 2
    for case in all_cases:
        record = run(case, images, debug, floats, ids_table, sched_table)
        # A trained model amplifies float32 rounding far more than the random tiny
        # pipelines do: diffusers itself, on one thread instead of several, lands this
        # far from its own golden. The parity test allows dpinfer a multiple of it.
        again = {}
        torch.set_num_threads(other)
        run(case, again, {}, {}, {}, {})
        torch.set_num_threads(threads)
        d = np.abs(images[case["name"]].numpy().astype(int) - again[case["name"]].numpy().astype(int))
        record["diffusers_self_spread"] = {
            "what": f"diffusers on {other} threads against this golden ({threads})",
            "max_abs": int(d.max()), "exact_fraction": float((d == 0).mean())}
        records.append(record)
        print(f"  {name}: {case['name']}: diffusers {other} vs {threads} threads: max |d| {d.max()}, "
              f"{(d == 0).mean():.4f} exact", flush=True)
    meta = {
        "pipeline": name,
        "model_dir": model,
        "generated_by": "tools/train/record_goldens.py",
        "versions": {"diffusers": diffusers.__version__, "transformers": transformers.__version__,
                     "torch": torch.__version__, "numpy": np.__version__},
        "device": "cpu", "dtype": "float32",
        "description": ("the embedded flow-matching DiT (Z-Image layout; tools/train/train_dit_model.py)" if dit else
                        "the embedded default model (tools/train/)") + ", held-out captions",
        "conventions": "as tests/data/pipelines/" + ("tiny-z-image" if dit else "tiny-sd1") + ".golden/cases.json",
        "scheduler_configs": sched_table,
        "cases": records,
    }
    save_file(mp.contiguous(images), os.path.join(gdir, "images.safetensors"))
    mp.write_json(os.path.join(gdir, "cases.json"), meta)
    print(f"{len(records)} cases in {gdir}")


if __name__ == "__main__":
    main()
