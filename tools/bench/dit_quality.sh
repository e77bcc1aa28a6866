#!/usr/bin/env bash
# Quality against speed, per setting, on the trained flow-matching DiT (models/dpinfer-shapes-dit-64, issue 28):
# each row draws the 60 held-out captions (configs/prompts/shapes-heldout.txt, seeds 0-59) with `dpinfer generate`,
# one process on this machine's CPU, and reports
#   - held-out accuracy: the share of images that tools/check_shapes finds in the requested colour and shape;
#   - position: the share with the shape also in the requested place (reported, not part of accuracy);
#   - images/s: the rank's own count over its generation time (its log line; model load excluded), and against
#     the first row;
#   - skipped: the share of denoiser calls the step cache skipped (DBCache's log line).
# Rows: the defaults (50 steps, CFG 5), DBCache and DBCache + TaylorSeer at two thresholds each, fp8 weight storage,
# fp8 compute (the blocks' products in float8, per-tensor scales),
# and 8 and 4 steps. Prints a Markdown table; nothing is asserted. Run it on an idle machine: the images/s
# column is only comparable within one run.
#
#   tools/bench/dit_quality.sh [--build DIR] [--model DIR] [--batch-size 4] [--threads 2] [--out DIR]
#
# --build defaults to build/default (tools/dpinfer and tools/dpinfer_check_shapes), --model to the shipped
# models/dpinfer-shapes-dit-64 (another checkpoint of it: tools/train/train_dit_model.py --checkpoint-every).
# Keeps the images under --out (default: a temporary directory, removed).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$root/build/default"
batch=4
threads=2
keep=""
model="$root/models/dpinfer-shapes-dit-64"
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --batch-size) batch="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --out) keep="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "dit_quality: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
dpinfer="$build/tools/dpinfer"
check="$build/tools/dpinfer_check_shapes"
for b in "$dpinfer" "$check"; do
  [ -x "$b" ] || { echo "dit_quality: $b is missing; build first or pass --build DIR" >&2; exit 2; }
done
prompts="$root/configs/prompts/shapes-heldout.txt"
dataset="$model/dataset.json"  # the captions' palette and layout; a checkpoint has none: the SD model's, the same
[ -f "$dataset" ] || dataset="$root/models/dpinfer-shapes-64/dataset.json"
if [ -n "$keep" ]; then
  work="$keep"
  mkdir -p "$work"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi

# name | dpinfer arguments
rows=(
  "uncached (50 steps, CFG 5)|"
  "DBCache 0.1 (F1B0, warm-up 8)|--set dbcache=0.1 --set dbcache_fn=1"
  "DBCache 0.2|--set dbcache=0.2 --set dbcache_fn=1"
  "DBCache 0.1 + TaylorSeer 1|--set dbcache=0.1 --set dbcache_fn=1 --set taylorseer_order=1"
  "DBCache 0.2 + TaylorSeer 1|--set dbcache=0.2 --set dbcache_fn=1 --set taylorseer_order=1"
  "fp8 weight storage|--weight-storage fp8"
  "fp8 compute (tensorwise)|--fp8-compute tensorwise"
  "8 steps|--steps 8"
  "4 steps|--steps 4"
)

echo "$(basename "$model") on $(uname -m), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"
echo "$threads threads, --batch-size $batch, 60 held-out captions, seeds 0-59; $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "| setting | held-out accuracy | position | images/s | × uncached | denoiser calls skipped |"
echo "|---|---|---|---|---|---|"
base_rate=""
i=0
for row in "${rows[@]}"; do
  name="${row%%|*}"
  args="${row#*|}"
  out="$work/row$i"
  i=$((i + 1))
  rm -rf "$out"
  # shellcheck disable=SC2086  # the row's arguments are words
  OMP_NUM_THREADS="$threads" CUDA_VISIBLE_DEVICES="" "$dpinfer" generate "$prompts" --model "$model" --out "$out" \
    --batch-size "$batch" $args 2> "$out.log" || { echo "dit_quality: '$name' failed:" >&2; tail -3 "$out.log" >&2; exit 1; }
  rate="$(sed -n 's/^ *rank 0: .*, \([0-9.]*\) images\/s$/\1/p' "$out.log" | head -1)"
  skipped="$(sed -n 's/.*denoiser calls (\([0-9.]*%\)).*/\1/p' "$out.log" | head -1)"
  "$check" "$out" "$dataset" --min-accuracy 0 --report "$out.json" > "$out.check" || true
  read -r correct total position < <(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
print(r['correct'], r['total'], r['position'])" "$out.json")
  [ -n "$base_rate" ] || base_rate="$rate"
  ratio="$(python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}×')" "$rate" "$base_rate")"
  acc="$(python3 -c "import sys; print(f'{int(sys.argv[1]) / int(sys.argv[2]):.1%} ({sys.argv[1]}/{sys.argv[2]})')" "$correct" "$total")"
  pos="$(python3 -c "import sys; print(f'{int(sys.argv[1]) / int(sys.argv[2]):.0%}')" "$position" "$total")"
  echo "| $name | $acc | $pos | $rate | $ratio | ${skipped:-0%} |"
done
