#!/usr/bin/env bash
# --layout webdataset read as users read it (issue 27): the webdataset package iterates every
# shard and yields every sample with its image, text and json, and datasets' webdataset builder
# loads the same shards, one row per item; pyarrow reads each shard's parquet index and the
# dataset's (index.parquet, from the run's merge and from dpinfer merge), whose rows agree with the
# tar members. Readers from the project venv
# (tools/readers-requirements.txt); the test fails where they are missing.
# Usage: webdataset_readers_test.sh DPINFER TEST_WORKER SOURCE_DIR
set -euo pipefail
dpinfer="$1"
worker="$2"
root="$3"
. "$(dirname "${BASH_SOURCE[0]}")/readers_python.sh"
readers_python "$root" webdataset,datasets,PIL,pyarrow
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
printf '%s\n' '{"prompt": "a red circle", "num_images": 3}' '{"prompt": "caf\u00e9 \u2615", "seed": 7}' \
  '{"prompt": "a blue square", "num_images": 3}' > "$work/p.jsonl"
CUDA_VISIBLE_DEVICES= "$dpinfer" launch --nproc-per-node 2 -- "$worker" generate "$work/p.jsonl" --out "$work/out" \
  --layout webdataset --shard-size 2 2> "$work/err.log" || { cat "$work/err.log"; exit 1; }
rm "$work/out/index.parquet"
"$dpinfer" merge "$work/out" 2> "$work/merge.log" || { cat "$work/merge.log"; exit 1; }
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
# The parquet indexes, as pyarrow reads them: one per shard, its rows the tar's members in order.
import tarfile
import pyarrow.parquet as pq
indexed = []
for url in urls:
    with tarfile.open(url) as tar:
        members = tar.getmembers()
        texts = [tar.extractfile(m).read().decode() for m in members[1::3]]
        records = [json.loads(tar.extractfile(m).read()) for m in members[2::3]]
    table = pq.read_table(url[:-4] + '.parquet')
    assert table.column_names[:6] == ['key', 'caption', 'status', 'error_message', 'width', 'height'], table.schema
    assert str(table.schema.field('width').type) == 'int64' and str(table.schema.field('key').type) == 'string'
    rows_ = table.to_pylist()
    assert [r['key'] for r in rows_] == [m.name.split('.')[0] for m in members[0::3]], (url, rows_)
    assert [r['caption'] for r in rows_] == texts, (url, rows_, texts)
    for r, rec in zip(rows_, records):
        assert r['status'] == 'success' and r['error_message'] is None, r
        for k in ('key', 'width', 'height', 'seed', 'index', 'steps', 'model', 'negative_prompt', 'guidance_scale'):
            assert r[k] == rec[k], (k, r[k], rec[k])
        assert json.loads(r['settings']) == rec['settings'], (r['settings'], rec['settings'])
    indexed += rows_
dataset = pq.read_table(f'{work}/out/index.parquet').to_pylist()
assert dataset == sorted(indexed, key=lambda r: r['index']), (dataset, indexed)
print(f'webdataset: {len(samples)} samples in {len(urls)} shards; datasets: {rows.num_rows} rows; '
      f'pyarrow: {len(urls)} shard indexes and index.parquet, {len(dataset)} rows')
PY
