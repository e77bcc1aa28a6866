#!/usr/bin/env bash
# --layout webdataset read as users read it (issue 27): the webdataset package iterates every
# shard and yields every sample with its image, text and json, and datasets' webdataset builder
# loads the same shards, one row per item. Readers from the project venv
# (tools/readers-requirements.txt); the test fails where they are missing.
# Usage: webdataset_readers_test.sh DPINFER TEST_WORKER SOURCE_DIR
set -euo pipefail
dpinfer="$1"
worker="$2"
root="$3"
. "$(dirname "${BASH_SOURCE[0]}")/readers_python.sh"
readers_python "$root" webdataset,datasets,PIL
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
printf '%s\n' '{"prompt": "a red circle", "num_images": 3}' '{"prompt": "caf\u00e9 \u2615", "seed": 7}' \
  '{"prompt": "a blue square", "num_images": 3}' > "$work/p.jsonl"
CUDA_VISIBLE_DEVICES= "$dpinfer" launch --nproc-per-node 2 -- "$worker" generate "$work/p.jsonl" --out "$work/out" \
  --layout webdataset --shard-size 2 2> "$work/err.log" || { cat "$work/err.log"; exit 1; }
HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 HF_DATASETS_CACHE="$work/hf-cache" "$py" - "$work" <<'PY'
import glob, json, sys
import webdataset as wds
from datasets import load_dataset
work = sys.argv[1]
prompts = ['a red circle'] * 3 + ['café ☕'] + ['a blue square'] * 3
urls = sorted(glob.glob(f'{work}/out/*.tar'))
samples = list(wds.WebDataset(urls, shardshuffle=False).decode('pil'))
assert len(samples) == 7, len(samples)
for s in samples:
    record = s['json']
    assert s['__key__'] == record['key'], (s['__key__'], record)
    assert s['txt'] == prompts[record['index']], (s['txt'], record)
    assert s['png'].size == (record['width'], record['height']), (s['png'].size, record)
assert sorted(s['json']['index'] for s in samples) == list(range(7))
rows = load_dataset('webdataset', data_files={'train': urls}, split='train')
assert rows.num_rows == 7, rows
assert {'png', 'txt', 'json'} <= set(rows.column_names), rows.column_names
assert sorted(r['json']['index'] for r in rows) == list(range(7))
print(f'webdataset: {len(samples)} samples in {len(urls)} shards; datasets: {rows.num_rows} rows')
PY
