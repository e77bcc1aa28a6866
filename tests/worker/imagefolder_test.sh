#!/usr/bin/env bash
# Issue 11, item 11: an output folder loads with the real Hugging Face `datasets`
# (imagefolder), pictures and columns, flat and in --files-per-dir's subdirectories. Needs the fixtures venv with datasets
# (tools/fixtures/setup_venv.sh); without it the test is skipped (exit 77): CI has no
# Python, and tests/support/imagefolder.h checks the same column rule in C++.
# Usage: imagefolder_test.sh TEST_WORKER SOURCE_DIR
set -euo pipefail
worker="$1"
root="$2"
py="${DPINFER_FIXTURES_VENV:-$root/tools/fixtures/.venv}/bin/python"
if ! "$py" -c "import datasets" 2>/dev/null; then
  echo "skipped: no fixtures venv with datasets at ${py%/bin/python} (run tools/fixtures/setup_venv.sh)"
  exit 77
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
printf '%s\n' '{"prompt": "a red circle", "num_images": 2}' '{"prompt": "a blue square", "seed": 7}' \
  > "$work/p.jsonl"
CUDA_VISIBLE_DEVICES= "$worker" generate "$work/p.jsonl" --out "$work/out" 2> "$work/err.log" ||
  { cat "$work/err.log"; exit 1; }
"$py" "$root/tools/fixtures/check_imagefolder.py" "$work/out"
# --files-per-dir: the pictures in numbered subdirectories, metadata.jsonl's file_name relative to OUT.
CUDA_VISIBLE_DEVICES= "$worker" generate "$work/p.jsonl" --out "$work/nested" --files-per-dir 2 2> "$work/err.log" ||
  { cat "$work/err.log"; exit 1; }
"$py" "$root/tools/fixtures/check_imagefolder.py" "$work/nested"
