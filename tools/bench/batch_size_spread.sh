#!/usr/bin/env bash
# What --batch-size may change (issue 34): for each family's tiny test pipeline, the same 8 items
# made at --batch-size 1 and 4, in fp32 and in bf16, and how far the two runs' PNGs differ (the
# largest difference of one value, in levels of 255, and the share of identical values). Batch
# size changes the matrix products' row counts, and so their rounding; the same --batch-size
# gives the same batches in every run (plan/batches.h), so this is the only spread left.
#
#   tools/bench/batch_size_spread.sh [BUILD_DIR]     (default build/default; prints a Markdown table)
#
# On the CPU with one thread (OMP_NUM_THREADS=1), as the parity goldens are compared. Not a test:
# it asserts nothing, it measures. The README's table came from it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$root/build/default}"
worker="$build/tools/dpinfer-worker"
[ -x "$worker" ] || { echo "batch_size_spread: no $worker; build first (cmake --build --preset quickstart)" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
pipelines="$root/tests/data/pipelines"
cat >"$work/p.txt" <<'PROMPTS'
a red cube
an extremely detailed matte painting of a sprawling futuristic city built on the back of a giant turtle
a lighthouse at dusk
a bowl of fruit on a wooden table, soft morning light
two cats
a watercolour of a mountain lake
an astronaut riding a horse on the moon, photograph
a blue sphere
PROMPTS

echo "| family (tiny fixture) | fp32: max Δ | fp32: identical | bf16: max Δ | bf16: identical |"
echo "|---|---|---|---|---|"
for entry in "SD 1.x (tiny-sd1):tiny-sd1:32x32" "SDXL (tiny-sdxl):tiny-sdxl:32x32" \
             "Qwen-Image (tiny-qwen-image):tiny-qwen-image:32x32" "Z-Image (tiny-z-image):tiny-z-image:32x32" \
             "FLUX.1 (tiny-flux-dev):tiny-flux-dev:32x32" "Chroma (tiny-chroma):tiny-chroma:32x32" \
             "SD3.5 with T5 (tiny-sd3.5-t5):tiny-sd3.5-t5:32x32"; do
  IFS=: read -r label model size <<<"$entry"
  row="| $label"
  for dtype in fp32 bf16; do
    for b in 1 4; do
      OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES= "$worker" generate "$work/p.txt" --model "$pipelines/$model" \
        --dtype "$dtype" --batch-size "$b" --steps 4 --width "${size%x*}" --height "${size#*x}" \
        --out "$work/$model-$dtype-$b" 2>"$work/log" || { cat "$work/log" >&2; exit 1; }
    done
    read -r _ worst same < <(python3 "$root/tools/bench/png_diff.py" "$work/$model-$dtype-1" "$work/$model-$dtype-4")
    row+=" | $worst | $same%"
  done
  echo "$row |"
done
echo
echo "batch_size_spread: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), OMP_NUM_THREADS=1"
