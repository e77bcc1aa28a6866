#!/usr/bin/env bash
# Step caches at a real shape, against their references, in one run (issue 28), on this machine's CPU with random
# bf16 weights, at one of two shapes with their real widths:
#   flux-dev     FLUX.1-dev: the real T5-XXL, CLIP-L and VAE, the transformer's 3072-wide blocks cut to 2 double- and
#                4 single-stream blocks (12.6 GB);
#   qwen-image   Qwen-Image: the real Qwen2.5-VL-7B text path and VAE, the transformer cut to 6 of its 60 blocks
#                (18.5 GB), as in docs/models/qwen-image.md's memory figures. No negative prompt: one call a step.
# For each row, dpinfer_bench times dpinfer and diffusers_peer.py times diffusers on the very same model directory,
# prompt, seed and settings, with the same cache applied as its reference applies it:
#   uncached                    both plain;
#   First Block Cache T         dpinfer --set first_block_cache=T, diffusers' FirstBlockCacheConfig(threshold=T);
#   DBCache T (F1B0)            dpinfer --set dbcache=T --set dbcache_fn=1, cache-dit 1.5.3's DBCacheConfig(
#                               residual_diff_threshold=T, Fn_compute_blocks=1) (Fn 8, cache-dit's default, needs
#                               more than the cut's 6 blocks);
#   DBCache T + TaylorSeer 1    the same with --set taylorseer_order=1 / TaylorSeerCalibratorConfig(1).
# It prints, per row: the share of transformer calls that skipped the cached blocks on each side, each side's
# images/s, dpinfer against dpinfer uncached, dpinfer against its reference with the same cache, and dpinfer against
# diffusers uncached. Nothing is asserted; run it on an idle machine (images/s compare within one run only).
#
#   tools/bench/cache_speed.sh [--family flux-dev|qwen-image] [--steps 28] [--size 64] [--max-sequence-length 64]
#                              [--model-dir DIR] [--rows a,b,...] [--fbcache T] [--dbcache T]
#
# --model-dir (default /tmp/dpinfer-cache-speed-<family>-<cut>) keeps the random weights for the next run (the cut
# shape's configs beside it, in DIR.shape, so that every row reuses them). --fbcache (default 0.2, diffusers'
# example for FLUX.1) and --dbcache (default 0.08, cache-dit's default) set the thresholds: random weights change more
# from step to step than trained ones, so a threshold that skips steps of a real model may skip none here.
# Rows: uncached,fbcache,dbcache,dbcache_taylor (default all). Needs the build and tools/fixtures/.venv (diffusers,
# cache-dit).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
family=flux-dev
steps=28
size=64
msl=64
model_dir=
rows=uncached,fbcache,dbcache,dbcache_taylor
fbcache=0.2     # diffusers' First Block Cache example threshold for FLUX.1 (docs: api/cache)
dbcache=0.08    # cache-dit 1.5.3's default residual_diff_threshold
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --family) family="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --max-sequence-length) msl="$2"; shift 2 ;;
    --model-dir) model_dir="$2"; shift 2 ;;
    --rows) rows="$2"; shift 2 ;;
    --fbcache) fbcache="$2"; shift 2 ;;
    --dbcache) dbcache="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "cache_speed: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
bench="$root/build/default/tools/bench/dpinfer_bench"
python="$root/tools/fixtures/.venv/bin/python"
[ -x "$bench" ] || { echo "cache_speed: $bench is missing; build first" >&2; exit 2; }
[ -x "$python" ] || { echo "cache_speed: $python is missing; run tools/fixtures/setup_venv.sh" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The cut shape (cut_shape.sh), at a path of its own so that dpinfer_bench reuses the weights written for it.
# shellcheck source=tools/bench/cut_shape.sh
. "$root/tools/bench/cut_shape.sh"
cut_shape_facts "$family" || { echo "cache_speed: unknown --family '$family' (flux-dev or qwen-image)" >&2; exit 2; }
[ -n "$model_dir" ] || model_dir="/tmp/dpinfer-cache-speed-$family-$cut_name"
shape="$model_dir.shape"
write_cut_shape "$root" "$shape"

echo "machine: $(nproc) CPU core(s), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), load $(cut -d' ' -f1 /proc/loadavg)"
echo "shape: $described, random bf16 weights, ${size}x${size}, $steps steps, max_sequence_length $msl, batch 1"
common=(--device cpu --dtype bf16 --weights-dtype bf16 --shape "$shape" --model-dir "$model_dir" --width "$size"
        --height "$size" --steps "$steps" --batch-sizes 1 --warmup 1 --repeats 1 --set "max_sequence_length=$msl")
declare -A args=(
  [uncached]=""
  [fbcache]="--set first_block_cache=$fbcache"
  [dbcache]="--set dbcache=$dbcache --set dbcache_fn=1"
  [dbcache_taylor]="--set dbcache=$dbcache --set dbcache_fn=1 --set taylorseer_order=1"
)
declare -A label=(
  [uncached]="uncached"
  [fbcache]="First Block Cache $fbcache"
  [dbcache]="DBCache $dbcache (F1B0)"
  [dbcache_taylor]="DBCache $dbcache + TaylorSeer 1"
)
IFS=, read -r -a names <<<"$rows"
for name in "${names[@]}"; do
  [ -n "${label[$name]+x}" ] || { echo "cache_speed: unknown row '$name'" >&2; exit 2; }
  echo "== $name"
  # shellcheck disable=SC2086
  "$bench" "${common[@]}" ${args[$name]} --json "$work/$name.dpinfer.json" >"$work/$name.dpinfer.log"
  "$python" "$root/tools/bench/diffusers_peer.py" --dpinfer-json "$work/$name.dpinfer.json" \
    --out "$work/$name.peer.json" >"$work/$name.peer.log" 2>&1 || { cat "$work/$name.peer.log" >&2; exit 1; }
done

FBCACHE="$fbcache" DBCACHE="$dbcache" "$python" - "$work" "${names[@]}" <<'PY'
import json, os, sys
work, names = sys.argv[1], sys.argv[2:]
fb, db = os.environ["FBCACHE"], os.environ["DBCACHE"]
labels = {"uncached": "uncached", "fbcache": f"First Block Cache {fb}", "dbcache": f"DBCache {db} (F1B0)",
          "dbcache_taylor": f"DBCache {db} (F1B0) + TaylorSeer 1"}
rows = {}
for n in names:
    dp = json.load(open(os.path.join(work, n + ".dpinfer.json")))["runs"][0]
    peer = json.load(open(os.path.join(work, n + ".peer.json")))
    rows[n] = (dp, peer["runs"][0], peer)
def skipped(r):
    return f"{r['denoiser_calls_cached'] / r['denoiser_calls']:.0%}" if r.get("denoiser_calls") else "-"
base = rows.get("uncached")
print("\n| setting | skipped (dpinfer) | skipped (reference) | dpinfer images/s | reference images/s | "
      "dpinfer / dpinfer uncached | dpinfer / reference | dpinfer / diffusers uncached |")
print("|---|---|---|---|---|---|---|---|")
for n, (dp, pr, peer) in rows.items():
    ref = {"uncached": "diffusers", "fbcache": "diffusers", "dbcache": "cache-dit", "dbcache_taylor": "cache-dit"}[n]
    own = f"{dp['images_per_second'] / base[0]['images_per_second']:.2f}x" if base else "-"
    vs_plain = f"{dp['images_per_second'] / base[1]['images_per_second']:.2f}x" if base else "-"
    print(f"| {labels[n]} | {skipped(dp)} | {skipped(pr)} | {dp['images_per_second']:.4f} | "
          f"{pr['images_per_second']:.4f} ({ref}) | {own} | {dp['images_per_second'] / pr['images_per_second']:.2f}x | "
          f"{vs_plain} |")
print(f"\n(diffusers {peer['diffusers_version']}, torch {peer['torch_version']}; each images/s is one timed call "
      "after one warm-up call, model load excluded)")
PY
