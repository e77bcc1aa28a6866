#!/usr/bin/env bash
# dpinfer against diffusers on this machine's CPU, in one run: dpinfer_bench times the
# pipeline on a model shape with random weights, then diffusers_peer.py times diffusers'
# pipeline (model_index.json's class) on the very same directory, prompts, seeds and settings, and
# prints both, their ratios, the machine, and how far the two sides' pixels differ.
#
#   tools/bench/cpu_vs_diffusers.sh [SHAPE_DIR [SIZE [extra dpinfer_bench options]]]
#
# SHAPE_DIR defaults to the embedded default model's shape (models/dpinfer-shapes-64)
# and SIZE (the image's width and height) to 64, its own size. Needs the build (tools/test.sh or tools/quickstart.sh) and the fixtures venv
# with diffusers (tools/fixtures/setup_venv.sh, which this runs; a minute or two the
# first time). Nothing here is a test: read the ratios, measured in the same run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
shape="${1:-$root/models/dpinfer-shapes-64}"
size="${2:-64}"
shift $(( $# < 2 ? $# : 2 ))
bench="$root/build/default/tools/bench/dpinfer_bench"
[ -x "$bench" ] || { echo "cpu_vs_diffusers: $bench is missing; build first (tools/test.sh)" >&2; exit 2; }
venv="$("$root/tools/fixtures/setup_venv.sh" | tail -n 1)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "machine: $(nproc) CPU core(s), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
"$bench" --device cpu --shape "$shape" --width "$size" --height "$size" --steps 20 --batch-sizes 1,8 --warmup 1 --repeats 3 \
  --model-dir "$work/model" --images "$work/images" --json "$work/dpinfer.json" "$@"
"$venv/bin/python" "$root/tools/bench/diffusers_peer.py" --dpinfer-json "$work/dpinfer.json" \
  --images "$work/images" --out "$work/peer.json"
