#!/usr/bin/env python3
"""A city96-style GGUF file of a Qwen-Image transformer folder, for the memory benchmarks (issue 26).

city96's Qwen-Image GGUF files keep diffusers' own tensor names, so the folder's safetensors map one to one:
each Linear weight whose input width is a multiple of 256 is written in --type (Q4_K: one 144-byte block per 256
values, 4.5 bits a value), every other 2-D weight in F16 and every 1-D tensor (norms, biases) in F32, as
ComfyUI-GGUF's and stable-diffusion.cpp's converters leave them. Q4_K is quantized from the folder's own values by
tools/fixtures/make_gguf_fixtures.py's quantize_q4_k (a plain min/max quantizer, valid blocks); Q8_0 by the gguf
package's quantizer. It reads and converts one tensor at a time.

  tools/fixtures/.venv/bin/python tools/bench/gguf_transformer.py TRANSFORMER_DIR OUT.gguf [--type Q4_K|Q8_0]

dpinfer then reads it as `--model OUT.gguf --base PIPELINE_DIR` (docs/memory.md, GGUF transformer files).
"""
import argparse
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "fixtures"))
import gguf  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402

from make_gguf_fixtures import quantize_q4_k  # noqa: E402

Q = gguf.GGMLQuantizationType


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("transformer_dir")
    ap.add_argument("out")
    ap.add_argument("--type", choices=("Q4_K", "Q8_0"), default="Q4_K")
    args = ap.parse_args()
    qtype = Q[args.type]
    files = sorted(glob.glob(os.path.join(args.transformer_dir, "*.safetensors")))
    if not files:
        sys.exit(f"gguf_transformer: no .safetensors in {args.transformer_dir}")
    writer = gguf.GGUFWriter(args.out + ".partial", arch="qwen_image")
    sizes = {}
    for path in files:
        with safe_open(path, framework="pt") as f:
            for name in sorted(f.keys()):
                t = f.get_tensor(name)
                w = t.to(torch.float32).numpy()
                if t.dim() == 2 and name.endswith(".weight") and t.shape[1] % 256 == 0:
                    data = quantize_q4_k(w) if qtype == Q.Q4_K else gguf.quants.quantize(w, qtype)
                    writer.add_tensor(name, data, raw_dtype=qtype)
                    kind = qtype
                elif t.dim() == 2:
                    data = w.astype(np.float16)
                    writer.add_tensor(name, data)
                    kind = Q.F16
                else:
                    data = w
                    writer.add_tensor(name, data)
                    kind = Q.F32
                sizes[kind.name] = sizes.get(kind.name, 0) + data.nbytes
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(args.out + ".partial", args.out)
    print(f"gguf_transformer: wrote {args.out}: " +
          ", ".join(f"{k} {v / 1e9:.3f} GB" for k, v in sorted(sizes.items())))


if __name__ == "__main__":
    main()
