#!/usr/bin/env bash
# Parquet prompts as Python writes them (issue 27, inputs): pyarrow, pandas and datasets write
# prompts files and a datasets folder, the test worker reads them with --keep-fields, and every
# record's prompt, seed and kept fields must equal what pyarrow and datasets read back. Then the
# bad inputs: a corrupt file, a missing column and a wrong type each stop the run with exit 2 and
# one line naming the file, the row and the column. The readers come from the project venv
# (tools/readers-requirements.txt); the test fails where they are missing.
# `dpinfer status` reads the parquet prompts too (the launcher loads the parquet module on demand).
# Usage: parquet_interop_test.sh TEST_WORKER SOURCE_DIR DPINFER
set -euo pipefail
worker="$1"
root="$2"
dpinfer="$3"
. "$(dirname "${BASH_SOURCE[0]}")/readers_python.sh"
readers_python "$root" pyarrow,pandas,datasets
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 HF_DATASETS_CACHE="$work/hf-cache" "$py" - "$work" <<'PY'
import sys
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from datasets import Dataset
work = sys.argv[1]
prompts = ['a red, round circle', 'say "hi"', 'line one\nline two', 'café ☕ 東京', ' spaced ', '']
# pyarrow: plain types, a null seed, a list and a struct kept as JSON, a dictionary-encoded tag.
pq.write_table(pa.table({
    'prompt': prompts,
    'seed': pa.array([1, None, 3, 4, 5, 6], pa.int32()),
    'tags': [['a', 'b'], [], None, ['ü'], ['x'], ['y']],
    'meta': [{'w': 1, 'ok': True}] * 6,
    'tag': pa.array(['p', 'q', 'p', 'q', 'p', 'q']).dictionary_encode(),
}), f'{work}/arrow.parquet')
# pandas: an integer column with a gap (float64 with NaN), a filtered frame's index column.
df = pd.DataFrame({'caption': prompts, 'steps': [4, None, 4, 4, 4, 4], 'score': [0.5] * 6})
df[df.score > 0].iloc[::-1].to_parquet(f'{work}/pandas.parquet')
# datasets: a folder as the hub holds it, two shards of one split.
ds = Dataset.from_dict({'prompt': prompts, 'id': [f'p{i}' for i in range(6)]})
ds.select(range(3)).to_parquet(f'{work}/hub/data/train-00000-of-00002.parquet')
ds.select(range(3, 6)).to_parquet(f'{work}/hub/data/train-00001-of-00002.parquet')
with open(f'{work}/hub/README.md', 'w') as f:
    f.write('---\nlicense: mit\n---\n')
PY
for f in arrow.parquet pandas.parquet hub; do
  column=prompt
  [ "$f" = pandas.parquet ] && column=caption
  CUDA_VISIBLE_DEVICES= "$worker" generate "$work/$f" --out "$work/out-$f" --keep-fields --prompt-column "$column" \
    2> "$work/err.log" || { cat "$work/err.log"; exit 1; }
  HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 HF_DATASETS_CACHE="$work/hf-cache" \
    "$py" - "$work/$f" "$work/out-$f/metadata.jsonl" "$column" <<'PY'
import json, math, os, sys
import pyarrow.parquet as pq
from datasets import load_dataset
path, meta, column = sys.argv[1:]
if os.path.isdir(path):
    rows = list(load_dataset('parquet', data_dir=path, split='train'))
else:
    rows = pq.read_table(path).to_pylist()
records = [json.loads(l) for l in open(meta, encoding='utf-8')]
assert len(records) == len(rows), (path, len(records), len(rows))
for row, rec in zip(rows, records):
    assert rec['prompt'] == row[column], (path, rec['prompt'], row[column])
    for k, v in row.items():
        if k == column or k.startswith('__index_level_'):
            continue
        if isinstance(v, float) and math.isnan(v):
            v = None
        if k in ('seed', 'steps'):
            if v is not None:
                assert rec[k] == v, (path, k, rec[k], v)
            continue
        if k == 'id':
            assert rec['id'] == v, (path, rec['id'], v)
            continue
        assert rec[k] == v, (path, k, rec.get(k), v)
print(f'{path}: {len(rows)} rows read as Python reads them')
PY
  "$dpinfer" status "$work/out-$f" > "$work/status.log" 2>&1 || { echo "dpinfer status $f:"; cat "$work/status.log"; exit 1; }
done
# Bad input: one line naming the file, the row and the column; exit 2.
"$py" - "$work" <<'PY'
import sys
import pyarrow as pa
import pyarrow.parquet as pq
work = sys.argv[1]
pq.write_table(pa.table({'prompt': ['a', 'b', 'c'], 'seed': ['1', '2', 'x']}), f'{work}/type.parquet')
pq.write_table(pa.table({'text': ['a']}), f'{work}/column.parquet')
data = open(f'{work}/type.parquet', 'rb').read()
open(f'{work}/corrupt.parquet', 'wb').write(data[:len(data) // 2])
# An `image` column of lists (FLUX.2's several references): read as a .jsonl line's list. The test worker's fake model
# takes no image, so it refuses two by their count and one as an input image: both prove the list was read.
pq.write_table(pa.table({'prompt': ['a'], 'image': pa.array([['r0.png', 'r1.png']], pa.list_(pa.string()))}),
               f'{work}/refs.parquet')
pq.write_table(pa.table({'prompt': ['a'], 'image': pa.array([['r0.png']], pa.list_(pa.string()))}),
               f'{work}/ref.parquet')
pq.write_table(pa.table({'prompt': ['a'], 'image': pa.array([[]], pa.list_(pa.string()))}), f'{work}/norefs.parquet')
PY
cp "$root/tests/data/input-images/reference-0.png" "$work/r0.png"
cp "$root/tests/data/input-images/reference-1.png" "$work/r1.png"
expect_refused() {
  local file="$1" want="$2" rc=0
  CUDA_VISIBLE_DEVICES= "$worker" generate "$work/$file" --out "$work/bad-$file" 2> "$work/err.log" || rc=$?
  [ "$rc" = 2 ] || { echo "$file: exit $rc, expected 2"; cat "$work/err.log"; exit 1; }
  grep -qF -- "$want" "$work/err.log" || { echo "$file: no '$want' in:"; cat "$work/err.log"; exit 1; }
}
expect_refused type.parquet "'$work/type.parquet' row 2, column 'seed': must be an integer, got 'x'"
expect_refused column.parquet "'$work/column.parquet': no column 'prompt' for the prompt (it has 'text')"
expect_refused corrupt.parquet "'$work/corrupt.parquet': not a parquet file, or a damaged one"
expect_refused refs.parquet "'image' lists 2 images, and fake-model"
expect_refused ref.parquet "an input image ('image' or --image) for a Fake model"
expect_refused norefs.parquet "'$work/norefs.parquet' row 0, column 'image': lists 0 images; expected a path, or a list of 1..16 paths"
echo "bad parquet input refused with exit 2, naming file, row and column"
