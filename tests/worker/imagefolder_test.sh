#!/usr/bin/env bash
# Issue 11, item 11: an output folder loads with the real Hugging Face `datasets`
# (imagefolder), pictures and columns, flat and in --files-per-dir's subdirectories. The
# readers are pinned in tools/readers-requirements.txt, which tools/setup.sh installs into
# the project venv: this test runs in CI, and fails (not skips) where they are missing.
# Usage: imagefolder_test.sh TEST_WORKER SOURCE_DIR
set -euo pipefail
worker="$1"
root="$2"
. "$(dirname "${BASH_SOURCE[0]}")/readers_python.sh"
readers_python "$root" datasets
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
