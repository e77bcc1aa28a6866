#!/usr/bin/env python3
"""The diffusers peer of tools/bench/dpinfer_bench, measured in the same run.

It reads dpinfer_bench's --json report and runs diffusers on the very same model directory
(the random weights dpinfer_bench wrote), loaded with DiffusionPipeline.from_pretrained, so
the pipeline class is model_index.json's (StableDiffusionPipeline, StableDiffusionXLPipeline),
with the same prompts, seeds (one CPU generator per image), size, steps, guidance scale,
scheduler, dtype and device, timed the same way: the wall clock of one pipeline call that ends
with uint8 images on the CPU, median of the timed runs after the warm-up runs. SDXL's VAE runs
in float32 under fp16 when its config says force_upcast, in diffusers by itself as in dpinfer.
No safety checker runs and no watermark is applied (dpinfer has neither). It prints both
sides and the ratios dpinfer/diffusers, names the machine (nvidia-smi), and, when
dpinfer_bench wrote its images (--images), compares the pixels of the two.

Needs diffusers and transformers. The GPU machine has torch but not diffusers: there,
tools/device/gpu_check.sh installs the wheels that tools/device/prepare_carry.sh carried
(tools/fixtures/requirements.txt's pins) into /tmp/site first. Here, on the build machine,
tools/fixtures/.venv has them (tools/fixtures/setup_venv.sh).

  diffusers_peer.py --dpinfer-json bench.json [--images DIR] [--out peer.json]
"""
import argparse
import inspect
import json
import os
import platform
import statistics
import subprocess
import sys
import time

# dpinfer's scheduler names -> diffusers classes and from_config overrides (README's table).
SCHEDULERS = {
    "pndm": ("PNDMScheduler", {}),
    "ddim": ("DDIMScheduler", {}),
    "euler": ("EulerDiscreteScheduler", {}),
    "euler_a": ("EulerAncestralDiscreteScheduler", {}),
    "dpm++2m": ("DPMSolverMultistepScheduler", {}),
    "dpm++2m-karras": ("DPMSolverMultistepScheduler", {"use_karras_sigmas": True}),
    "lms": ("LMSDiscreteScheduler", {}),
    "unipc": ("UniPCMultistepScheduler", {}),
    "flow_match_euler": ("FlowMatchEulerDiscreteScheduler", {}),
}
DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
# dpinfer's DBCache settings -> cache-dit 1.5.3's DBCacheConfig fields (tools/fixtures/make_dbcache_pipelines.py).
DBCACHE_KEYS = {"dbcache": "residual_diff_threshold", "dbcache_fn": "Fn_compute_blocks",
                "dbcache_bn": "Bn_compute_blocks", "dbcache_warmup": "max_warmup_steps",
                "dbcache_max_cached": "max_cached_steps", "dbcache_max_continuous": "max_continuous_cached_steps"}
# dpinfer settings that are pipeline call arguments of the same name.
CALL_KEYS = ("max_sequence_length", "true_cfg_scale")


def step_cache(pipe, settings, true_cfg):
    """The step cache dpinfer_bench's --set asked for, applied as its reference applies it: First Block Cache by
    diffusers' own pipe.transformer.enable_cache(FirstBlockCacheConfig(threshold)), DBCache (with TaylorSeer) by
    cache_dit.enable_cache, as the parity goldens apply them. Returns (name, the index of the first block a skipped
    call does not run) or (None, None)."""
    if settings.get("first_block_cache", 0) > 0:
        from diffusers.hooks import FirstBlockCacheConfig
        pipe.transformer.enable_cache(FirstBlockCacheConfig(threshold=settings["first_block_cache"]))
        return "first_block_cache", 1
    if settings.get("dbcache", 0) > 0:
        import cache_dit
        from cache_dit import DBCacheConfig, TaylorSeerCalibratorConfig
        options = {DBCACHE_KEYS[k]: v for k, v in settings.items() if k in DBCACHE_KEYS}
        order = settings.get("taylorseer_order", 0)
        cache_dit.enable_cache(pipe, cache_config=DBCacheConfig(enable_separate_cfg=true_cfg, **options),
                               calibrator_config=TaylorSeerCalibratorConfig(taylorseer_order=order) if order else None)
        return "dbcache", options.get("Fn_compute_blocks", 8)
    return None, None


def call_counters(transformer, middle):
    """Forward hooks on the first submodule of block 0 and of block `middle` (the first that a cached call skips), in
    the order the transformer runs its blocks: the calls, and the calls that skipped."""
    blocks = list(transformer.transformer_blocks) + list(getattr(transformer, "single_transformer_blocks", []))
    count = {"head": 0, "middle": 0}
    for key, block in (("head", blocks[0]), ("middle", blocks[middle])):
        next(block.children()).register_forward_hook(lambda *_, key=key: count.__setitem__(key, count[key] + 1))
    return count


def machine_name():
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True).stdout.strip()
        if out:
            return out.splitlines()[0]
    except Exception:  # no nvidia-smi here: fall through
        pass
    return platform.processor() or platform.machine()


def pixel_diff(a, b):
    import numpy as np
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    d = np.abs(a - b)
    ref = np.linalg.norm(b)
    return {
        "max_abs": int(d.max()),
        "mean_abs": float(d.mean()),
        "rel_l2": float(np.linalg.norm(a - b) / ref) if ref > 0 else float(np.linalg.norm(a - b)),
        "exact_fraction": float((d == 0).mean()),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dpinfer-json", required=True, help="dpinfer_bench's --json report")
    ap.add_argument("--images", help="the folder dpinfer_bench wrote its --images to: compare pixels")
    ap.add_argument("--out", help="write the comparison here as JSON")
    ap.add_argument("--warmup", type=int, help="default: dpinfer_bench's")
    ap.add_argument("--repeats", type=int, help="default: dpinfer_bench's")
    args = ap.parse_args()

    with open(args.dpinfer_json) as f:
        dp = json.load(f)
    warmup = dp["warmup"] if args.warmup is None else args.warmup
    repeats = dp["repeats"] if args.repeats is None else args.repeats

    import numpy as np
    import torch
    import diffusers
    import transformers

    device = dp["device"]
    dtype = getattr(torch, DTYPES[dp["dtype"]])
    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    # The class model_index.json names; what dpinfer leaves out, left out here too.
    with open(os.path.join(dp["model_dir"], "model_index.json")) as f:
        pipeline_class = json.load(f)["_class_name"]
    init_params = inspect.signature(getattr(diffusers, pipeline_class).__init__).parameters
    kwargs = {}
    if "safety_checker" in init_params:
        kwargs.update(safety_checker=None, requires_safety_checker=False)
    if "add_watermarker" in init_params:  # SDXL: on whenever invisible-watermark is installed
        kwargs["add_watermarker"] = False

    t0 = time.perf_counter()
    pipe = diffusers.DiffusionPipeline.from_pretrained(dp["model_dir"], torch_dtype=dtype, **kwargs)
    cls_name, extra = SCHEDULERS[dp["scheduler"]]
    if type(pipe.scheduler).__name__ != cls_name or extra:
        pipe.scheduler = getattr(diffusers, cls_name).from_config(pipe.scheduler.config, **extra)
    pipe = pipe.to(device)
    pipe.set_progress_bar_config(disable=True)
    settings = dp.get("set", {})
    unknown = set(settings) - set(DBCACHE_KEYS) - set(CALL_KEYS) - {"first_block_cache", "taylorseer_order"}
    if unknown:
        sys.exit(f"diffusers_peer: no peer for dpinfer's --set {sorted(unknown)}")
    call_extra = {k: settings[k] for k in CALL_KEYS if k in settings}
    true_cfg = any(r["negative_prompt"] for d in dp["runs"] for r in d["requests"]) and \
        settings.get("true_cfg_scale", dp["guidance_scale"] if pipeline_class == "QwenImagePipeline" else 1.0) > 1
    cache, middle = step_cache(pipe, settings, true_cfg)
    counts = call_counters(pipe.transformer, middle) if cache else None
    sync()
    load_s = time.perf_counter() - t0

    def call(requests):
        prompts = [r["prompt"] for r in requests]
        negatives = [r["negative_prompt"] for r in requests]
        generators = [torch.Generator("cpu").manual_seed(int(r["seed"])) for r in requests]
        # dpinfer's guidance scale is Qwen-Image's true_cfg_scale (README, Model families)
        guidance = ({"true_cfg_scale": dp["guidance_scale"]} if type(pipe).__name__ == "QwenImagePipeline"
                    else {"guidance_scale": dp["guidance_scale"]})
        images = pipe(prompt=prompts, negative_prompt=negatives if any(negatives) else None,
                      num_inference_steps=dp["steps"], **guidance,
                      height=dp["height"], width=dp["width"], generator=generators, output_type="np",
                      **call_extra).images
        finite = int(np.isfinite(images).all(axis=(1, 2, 3)).sum())
        return (images * 255).round().astype(np.uint8), finite  # uint8: what dpinfer's generate() returns too

    runs = []
    with torch.inference_mode():
        for d in dp["runs"]:
            b = d["batch_size"]
            warm = []
            # dpinfer_bench's requests per call, warm-ups first (each call its own prompts, unless --same-prompts);
            # a report without them (an older one) repeats its one list.
            calls = d.get("call_requests") or [d["requests"]] * (warmup + repeats)
            if len(calls) != warmup + repeats:
                sys.exit(f"diffusers_peer: dpinfer_bench made {len(calls)} calls, not --warmup + --repeats; "
                         "run it with the peer's counts")
            for w in range(warmup):
                t0 = time.perf_counter()
                call(calls[w])
                sync()
                warm.append(time.perf_counter() - t0)
            if cuda:
                torch.cuda.reset_peak_memory_stats(device)
            secs = []
            counted = dict(counts) if counts else None
            for r in range(repeats):
                sync()
                t0 = time.perf_counter()
                images, finite = call(calls[warmup + r])
                sync()
                secs.append(time.perf_counter() - t0)
            m = statistics.median(secs)
            run = {
                "batch_size": b, "warmup_seconds": warm, "seconds": secs, "median_seconds": m,
                "seconds_per_image": m / b, "images_per_second": b / m, "steps_per_second": dp["steps"] / m,
                "peak_allocated_gib": torch.cuda.max_memory_allocated(device) / 2**30 if cuda else 0.0,
                "peak_reserved_gib": torch.cuda.max_memory_reserved(device) / 2**30 if cuda else 0.0,
                "finite_images": finite,
            }
            if counts:  # per run, as dpinfer_bench reports them
                run["denoiser_calls"] = (counts["head"] - counted["head"]) / repeats
                run["denoiser_calls_cached"] = (counts["head"] - counted["head"] - counts["middle"] + counted["middle"]) / repeats
            if args.images and d.get("images"):
                from PIL import Image
                ours = np.stack([np.asarray(Image.open(os.path.join(args.images, n)).convert("RGB"))
                                 for n in d["images"]])
                run["pixels_dpinfer_vs_diffusers"] = pixel_diff(ours, images)
            runs.append(run)

    report = {
        "tool": "diffusers_peer",
        "machine": machine_name(),
        "python": sys.version.split()[0],
        "torch_version": torch.__version__,
        "diffusers_version": diffusers.__version__,
        "transformers_version": transformers.__version__,
        "pipeline_class": type(pipe).__name__,
        "step_cache": cache, "set": settings,
        "device": device, "dtype": dp["dtype"], "scheduler": dp["scheduler"],
        "width": dp["width"], "height": dp["height"], "steps": dp["steps"], "guidance_scale": dp["guidance_scale"],
        "warmup": warmup, "repeats": repeats,
        "load_seconds": load_s,
        "dpinfer_load_seconds": dp["load_seconds"],
        "runs": runs,
        "ratios": [],
    }
    print(f"machine: {report['machine']}; dpinfer {dp['dpinfer_version']} on torch {dp['torch_version']}, "
          f"diffusers {diffusers.__version__} + transformers {transformers.__version__} on torch {torch.__version__}")
    print(f"{type(pipe).__name__}, {dp['width']}x{dp['height']}, {dp['steps']} steps, guidance {dp['guidance_scale']}, "
          f"{dp['scheduler']}, {dp['dtype']} on {device}; median of {repeats} after {warmup} warm-up; random weights ({dp['model_dir']})")
    print(f"load (read weights + move to device): dpinfer {dp['load_seconds']:.2f} s, diffusers {load_s:.2f} s")
    print("\n  batch  side       s/image  images/s  peak alloc GiB  peak reserved GiB")
    for d, p in zip(dp["runs"], runs):
        for side, r in (("dpinfer", d), ("diffusers", p)):
            print(f"  {d['batch_size']:5d}  {side:9s}  {r['seconds_per_image']:7.3f}  {r['images_per_second']:8.3f}"
                  f"  {r['peak_allocated_gib']:14.2f}  {r['peak_reserved_gib']:17.2f}")
        ratio = {
            "batch_size": d["batch_size"],
            "seconds_per_image": d["seconds_per_image"] / p["seconds_per_image"],
            "images_per_second": d["images_per_second"] / p["images_per_second"],
            "peak_allocated": d["peak_allocated_gib"] / p["peak_allocated_gib"] if p["peak_allocated_gib"] else None,
        }
        report["ratios"].append(ratio)
    print("\n  ratios dpinfer/diffusers (time < 1 and throughput > 1: dpinfer is faster)")
    print("  batch  s/image  images/s  peak alloc  pixels: max|d| mean|d|  rel L2   exact")
    for r, p in zip(report["ratios"], runs):
        mem = f"{r['peak_allocated']:10.2f}" if r["peak_allocated"] is not None else "       n/a"
        px = p.get("pixels_dpinfer_vs_diffusers")
        pxs = (f"{px['max_abs']:14d} {px['mean_abs']:7.3f}  {px['rel_l2']:.2e}  {100 * px['exact_fraction']:5.1f}%"
               if px else "  (no images)")
        print(f"  {r['batch_size']:5d}  {r['seconds_per_image']:7.3f}  {r['images_per_second']:8.3f}  {mem}  {pxs}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
        print(f"\ndiffusers_peer: wrote {args.out}")


if __name__ == "__main__":
    main()
