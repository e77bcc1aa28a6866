#!/usr/bin/env bash
# The speed cost of a weight storage per denoising step (issue 26: fp8 storage against bf16, goal <= 1.15x), at a
# real shape with its real widths, on this machine's CPU. For each storage, dpinfer_bench times one call of S1 steps
# and one of S2 steps on the same model (each after a warm-up call, --same-prompts so that the timed calls run no
# text encoder), and a step costs (t(S2) - t(S1)) / (S2 - S1): the VAE decode and the rest of the call cancel out.
# It prints each storage's seconds per step and its ratio to the first storage's. Nothing is asserted; run it on
# an idle machine.
#
#   tools/bench/storage_step_speed.sh [--family flux-dev|qwen-image] [--size 256] [--steps 2,10]
#                                     [--storages default,fp8-denoiser] [--model-dir DIR]
#
# The model is the cut shape of tools/bench/cache_speed.sh (the same --model-dir default, written there or here).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
family=flux-dev
size=256
steps=2,10
storages=default,fp8-denoiser
model_dir=
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --family) family="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --storages) storages="$2"; shift 2 ;;
    --model-dir) model_dir="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "storage_step_speed: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
bench="$root/build/default/tools/bench/dpinfer_bench"
[ -x "$bench" ] || { echo "storage_step_speed: $bench is missing; build first" >&2; exit 2; }
# shellcheck source=tools/bench/cut_shape.sh
. "$root/tools/bench/cut_shape.sh"
cut_shape_facts "$family" || { echo "storage_step_speed: unknown --family '$family' (flux-dev or qwen-image)" >&2; exit 2; }
IFS=, read -r s1 s2 <<<"$steps"
[ -n "${s2:-}" ] && [ "$s2" -gt "$s1" ] || { echo "storage_step_speed: --steps wants two counts S1,S2 with S2 > S1" >&2; exit 2; }
[ -n "$model_dir" ] || model_dir="/tmp/dpinfer-cache-speed-$family-$cut_name"
shape="$model_dir.shape"  # the path dpinfer_bench's stamp names: the same as cache_speed.sh's, so the weights are shared
[ -d "$shape" ] || write_cut_shape "$root" "$shape"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "machine: $(nproc) CPU core(s), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), load $(cut -d' ' -f1 /proc/loadavg)"
echo "shape: $described, random bf16 weights, --dtype bf16, ${size}x${size}, steps $s1 and $s2, max_sequence_length 64, batch 1"
IFS=, read -r -a names <<<"$storages"
for storage in "${names[@]}"; do
  for n in "$s1" "$s2"; do
    echo "== --weight-storage $storage, $n steps"
    "$bench" --device cpu --dtype bf16 --weights-dtype bf16 --shape "$shape" --model-dir "$model_dir" \
      --width "$size" --height "$size" --steps "$n" --batch-sizes 1 --warmup 1 --repeats 1 --same-prompts \
      --set max_sequence_length=64 --weight-storage "$storage" --json "$work/$storage-$n.json" >"$work/$storage-$n.log"
  done
done
python3 - "$work" "$s1" "$s2" "${names[@]}" <<'PY'
import json, os, sys
work, s1, s2, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
def secs(name, n):
    return json.load(open(os.path.join(work, f"{name}-{n}.json")))["runs"][0]["median_seconds"]
per_step = {n: (secs(n, s2) - secs(n, s1)) / (s2 - s1) for n in names}
base = per_step[names[0]]
print(f"\n| --weight-storage | {s1} steps, s | {s2} steps, s | s per step | per step / {names[0]} |")
print("|---|---|---|---|---|")
for n in names:
    print(f"| {n} | {secs(n, s1):.2f} | {secs(n, s2):.2f} | {per_step[n]:.3f} | {per_step[n] / base:.3f}x |")
print("\n(each time is one call after one warm-up call, the prompt's encodings cached; model load excluded)")
PY
