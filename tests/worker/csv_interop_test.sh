#!/usr/bin/env bash
# CSV/TSV prompts files as Python writes them (issue 27, inputs): pandas' to_csv and the csv
# module write tricky cells (commas, quotes, newlines, tabs, non-ASCII, stray quotes, CRLF),
# the test worker reads them with --keep-fields, and every record's prompt and kept fields
# must equal what Python's csv module reads back. The readers come from the project venv
# (tools/readers-requirements.txt); the test fails where they are missing.
# Usage: csv_interop_test.sh TEST_WORKER SOURCE_DIR
set -euo pipefail
worker="$1"
root="$2"
. "$(dirname "${BASH_SOURCE[0]}")/readers_python.sh"
readers_python "$root" pandas
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$py" - "$work" <<'PY'
import csv, sys
import pandas as pd
work = sys.argv[1]
prompts = ['a red, round circle', 'say "hi"', 'line one\nline two', 'tab\there', 'café ☕ 東京',
           ' leading and trailing ', 'a "big" fox', '', 'comma,quote"mix\r\nwith CRLF']
tags = ['x', 'y,z', '"q"', '', 'ü', 'a\nb', 'p', 'q', 'r']
pd.DataFrame({'prompt': prompts, 'tag': tags}).to_csv(f'{work}/pandas.csv', index=False)
pd.DataFrame({'caption': prompts, 'tag': tags}).to_csv(f'{work}/pandas.tsv', index=False, sep='\t')
with open(f'{work}/module.csv', 'w', newline='') as f:  # the csv module's \r\n row ends
    w = csv.writer(f)
    w.writerow(['prompt', 'tag'])
    w.writerows(zip(prompts, tags))
with open(f'{work}/stray.csv', 'w', newline='') as f:  # written by hand: stray quotes
    f.write('prompt,tag\na "big" fox,1\n"a"b,2\n')
PY
for f in pandas.csv pandas.tsv module.csv stray.csv; do
  column=prompt
  [ "$f" = pandas.tsv ] && column=caption
  CUDA_VISIBLE_DEVICES= "$worker" generate "$work/$f" --out "$work/out-$f" --keep-fields --prompt-column "$column" \
    2> "$work/err.log" || { cat "$work/err.log"; exit 1; }
  "$py" - "$work/$f" "$work/out-$f/metadata.jsonl" "$column" <<'PY'
import csv, json, sys
path, meta, column = sys.argv[1:]
with open(path, newline='', encoding='utf-8') as f:
    rows = list(csv.DictReader(f, delimiter='\t' if path.endswith('.tsv') else ','))
records = [json.loads(l) for l in open(meta, encoding='utf-8')]
assert len(records) == len(rows), (path, len(records), len(rows))
for row, rec in zip(rows, records):
    assert rec['prompt'] == row[column], (path, rec['prompt'], row[column])
    assert rec['tag'] == row['tag'], (path, rec['tag'], row['tag'])
print(f'{path}: {len(rows)} rows read as Python reads them')
PY
done
