#!/usr/bin/env bash
# --layout geneval, t2i-compbench and dpg (issue 27): runs of two ranks on prompt files in each
# benchmark's published format, then each evaluation script's file walking, restated here from
# its published rules (no model): GenEval's evaluation/evaluate_images.py (the digit folders of
# OUT, each one's metadata.jsonl read with json.load, and its samples/ files that match
# \d+\.png), T2I-CompBench's BLIPvqa_eval/BLIP_vqa.py (every file of OUT/samples, sorted by the
# integer after its last '_', the prompt taken up to its first '_') and DPG-Bench's
# dpg_bench/compute_dpg_bench.py (every file of the image root, its id the name before the first
# '.', cropped as a 2x2 grid of --resolution squares). Each must find every image, with its own
# prompt and metadata; DPG's crops must be the samples themselves. Pillow and numpy from the
# project venv (tools/readers-requirements.txt) read the grids.
# Usage: benchmark_layouts_test.sh DPINFER TEST_WORKER SOURCE_DIR
set -euo pipefail
dpinfer="$1"
worker="$2"
root="$3"
. "$(dirname "${BASH_SOURCE[0]}")/readers_python.sh"
readers_python "$root" numpy,PIL
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# GenEval's prompts/evaluation_metadata.jsonl, as published: tag, include (exclude), prompt.
cat > "$work/evaluation_metadata.jsonl" <<'JSONL'
{"tag": "single_object", "include": [{"class": "bench", "count": 1}], "prompt": "a photo of a bench"}
{"tag": "counting", "include": [{"class": "cow", "count": 2}], "exclude": [{"class": "cow", "count": 3}], "prompt": "a photo of two cows"}
{"tag": "colors", "include": [{"class": "car", "count": 1, "color": "red"}], "prompt": "a photo of a red car"}
{"tag": "position", "include": [{"class": "dog", "count": 1}, {"class": "cat", "count": 1, "position": ["left of", 0]}], "prompt": "a photo of a cat left of a dog"}
JSONL
# T2I-CompBench's examples/dataset/color_val.txt, as published: one prompt per line.
printf '%s\n' 'a green bench and a red car' 'a blue backpack and a brown cow' 'a yellow book and a red vase' > "$work/color_val.txt"
# DPG-Bench's dpg_bench/prompts/, as published: one <item_id>.txt per prompt, no trailing newline.
mkdir "$work/prompts"
printf '%s' 'An eye-catching vibrant red pickup truck is parked on the sandy shores as dusk sets in.' > "$work/prompts/1.txt"
printf '%s' 'A small blue ceramic cup on a wooden table beside an open book.' > "$work/prompts/256.txt"
printf '%s' 'Three yellow tulips in a glass vase by a sunny window.' > "$work/prompts/partiprompts_57.txt"

launch() { CUDA_VISIBLE_DEVICES= "$dpinfer" launch --nproc-per-node 2 -- "$worker" generate "$@" 2> "$work/err.log" ||
  { cat "$work/err.log"; exit 1; }; }
launch "$work/evaluation_metadata.jsonl" --out "$work/geneval" --layout geneval --num-images 4 --shard-mode dynamic
launch "$work/color_val.txt" --out "$work/t2i" --layout t2i-compbench --num-images 10
launch "$work/prompts" --out "$work/dpg" --layout dpg --num-images 4 --batch-size 3 --width 16 --height 16
# A rerun resumes: nothing is made twice, nothing added.
launch "$work/evaluation_metadata.jsonl" --out "$work/geneval" --layout geneval --num-images 4
grep -q "skipped 8 item(s)" "$work/err.log" || { cat "$work/err.log"; exit 1; }

"$py" - "$work" <<'PY'
import json, os, re, sys
work = sys.argv[1]

# GenEval: what evaluate_images.py's main() walks.
published = [json.loads(l) for l in open(f'{work}/evaluation_metadata.jsonl')]
found = {}
out = f'{work}/geneval'
for sub in os.listdir(out):
    folder = os.path.join(out, sub)
    if not os.path.isdir(folder) or not sub.isdigit():
        continue
    with open(os.path.join(folder, 'metadata.jsonl')) as fp:
        metadata = json.load(fp)
    images = [n for n in os.listdir(os.path.join(folder, 'samples'))
              if os.path.isfile(os.path.join(folder, 'samples', n)) and re.match(r'\d+\.png', n)]
    found[int(sub)] = (metadata, sorted(images))
assert sorted(found) == list(range(len(published))), sorted(found)
for k, line in enumerate(published):
    metadata, images = found[k]
    assert metadata == line, (k, metadata, line)  # tag, include, exclude and prompt, as published
    assert images == [f'{n:05}.png' for n in range(4)], (k, images)

# T2I-CompBench: what BLIP_vqa.py's Create_annotation_for_BLIP walks.
prompts = [l.rstrip('\n') for l in open(f'{work}/color_val.txt')]
samples = f'{work}/t2i/samples/'
names = os.listdir(samples)
names.sort(key=lambda x: int(x.split('_')[-1].split('.')[0]))
assert len(names) == 10 * len(prompts), len(names)  # sample_num = len(os.listdir(samples))
for i, name in enumerate(names):
    assert name.split('_')[0] == prompts[i // 10], (i, name)

# DPG-Bench: what compute_dpg_bench.py's main() and compute_dpg_one_sample() walk, pointed at OUT/grids.
import numpy as np
from PIL import Image
ids = sorted(n[:-4] for n in os.listdir(f'{work}/prompts'))
root = f'{work}/dpg/grids'
keys = []
for fn in os.listdir(root):
    key = os.path.basename(fn).split('.')[0]
    keys.append(key)
    grid = np.asarray(Image.open(os.path.join(root, fn)).convert('RGB'))
    r = 16  # --resolution, each image's side
    crops = [(0, 0, r, r), (r, 0, 2 * r, r), (0, r, r, 2 * r), (r, r, 2 * r, 2 * r)]
    for j, (x0, y0, x1, y1) in enumerate(crops):
        sample = np.asarray(Image.open(f'{work}/dpg/samples/{key}_{j}.png').convert('RGB'))
        assert (grid[y0:y1, x0:x1] == sample).all(), (fn, j)
assert sorted(keys) == ids, (keys, ids)
print(f'geneval: {len(found)} prompt folders of 4 samples; t2i-compbench: {len(names)} samples; dpg: {len(keys)} grids')
PY
