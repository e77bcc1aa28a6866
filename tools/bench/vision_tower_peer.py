#!/usr/bin/env python3
"""The transformers peer of `dpinfer_bench --vision-tower`, measured in the same run (vision_tower_memory.sh).

It builds transformers' Qwen2_5_VisionTransformerPretrainedModel from the same text_encoder config's vision_config
(attn_implementation "sdpa", the default, in --dtype), fills it with the very same random weights dpinfer_bench
wrote (model.safetensors, keys "visual.*"), as from_pretrained does: built on the meta device, then the file's
tensors assigned (memory-mapped, as from_pretrained leaves them: its RSS after the load counts only the pages read
so far, and the first forward reads the rest). It then runs one square image per --sizes edge, smallest first, through Qwen2VLImageProcessorFast
(what from_pretrained loads for the processor folder of Qwen-Image-Edit with torchvision installed) and the tower,
under torch.inference_mode, and prints the same JSON lines as dpinfer_bench: RSS before and after the load, the load
time, and per size the patches, tokens, forward time and peak RSS so far.

Needs torch, transformers and torchvision: tools/fixtures/.venv has them (tools/fixtures/setup_venv.sh).

  vision_tower_peer.py --shape configs/models/qwen-image-edit-shape --weights DIR [--dtype bf16] [--sizes 384,1024]
"""
import argparse
import json
import os
import resource
import time


def rss_gb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9


def peak_rss_gb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", required=True)
    parser.add_argument("--weights", required=True, help="dpinfer_bench --vision-tower's --model-dir")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32", "fp16"])
    parser.add_argument("--sizes", default="384,1024")
    args = parser.parse_args()

    import numpy as np
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (Qwen2_5_VisionRotaryEmbedding,
                                                                    Qwen2_5_VisionTransformerPretrainedModel)
    from transformers.models.qwen2_vl.image_processing_qwen2_vl_fast import Qwen2VLImageProcessorFast

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}[args.dtype]
    config = AutoConfig.from_pretrained(os.path.join(args.shape, "text_encoder"))
    vision_config = config.vision_config
    vision_config._attn_implementation = "sdpa"
    with torch.inference_mode():
        rss_before = rss_gb()
        t0 = time.perf_counter()
        with torch.device("meta"):
            tower = Qwen2_5_VisionTransformerPretrainedModel._from_config(vision_config, dtype=dtype)
        state = {k[len("visual."):]: v for k, v in load_file(os.path.join(args.weights, "model.safetensors")).items()}
        tower.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=True, assign=True)
        del state
        # The one non-persistent buffer (the rotary inverse frequencies), which from_pretrained initialises again.
        tower.rotary_pos_emb = Qwen2_5_VisionRotaryEmbedding(vision_config.hidden_size // vision_config.num_heads // 2)
        tower.eval()
        load_s = time.perf_counter() - t0
        params = sum(p.numel() for p in tower.parameters())
        print(json.dumps({"event": "load", "dtype": args.dtype, "device": "cpu", "parameters": params,
                          "rss_before_gb": rss_before, "rss_after_gb": rss_gb(), "peak_rss_gb": peak_rss_gb(),
                          "load_s": load_s, "threads": torch.get_num_threads()}), flush=True)
        processor = Qwen2VLImageProcessorFast.from_pretrained(os.path.join(args.shape, "processor"))
        for edge in sorted(int(s) for s in args.sizes.split(",")):
            # The same smooth gradient as dpinfer_bench's: (x + 2y + 85c) mod 256.
            y, x = np.mgrid[0:edge, 0:edge]
            image = np.stack([(x + 2 * y + 85 * c) % 256 for c in range(3)], axis=-1).astype(np.uint8)
            inputs = processor(images=[image], return_tensors="pt")
            t0 = time.perf_counter()
            out = tower(inputs["pixel_values"].to(dtype), grid_thw=inputs["image_grid_thw"])
            forward_s = time.perf_counter() - t0
            grid = inputs["image_grid_thw"][0].tolist()
            print(json.dumps({"event": "forward", "edge": edge, "resized": [grid[1] * 14, grid[2] * 14],
                              "patches": int(inputs["pixel_values"].shape[0]), "tokens": int(out.shape[0]),
                              "finite": bool(torch.isfinite(out).all()), "forward_s": forward_s,
                              "rss_after_gb": rss_gb(), "peak_rss_gb": peak_rss_gb()}), flush=True)


if __name__ == "__main__":
    main()
