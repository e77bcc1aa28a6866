#!/usr/bin/env bash
# The default model (a folder in the sources, installed beside the binaries), end to end, with no --model anywhere:
#  1. recognisable: `dpinfer launch --nproc-per-node 2` on the 60 held-out captions
#     (never seen in training), judged by dpinfer_check_shapes: >= 90% (MIN_ACCURACY) must show
#     the requested colour and shape; and the same images under wrong captions
#     (negative controls) must score below 20%;
#  2. installed: `cmake --install` into a temporary prefix, then the installed
#     dpinfer, run from an unrelated working directory, finds the model under
#     PREFIX/share/dpinfer/models, and `dpinfer launch` runs the installed worker.
# Usage: default_model_test.sh SOURCE_DIR BUILD_DIR [MODEL MIN_ACCURACY]
# With MODEL (a folder of SOURCE_DIR/models, e.g. dpinfer-shapes-dit-64, the trained flow-matching DiT), only
# step 1, with `--model MODEL` (the bare name, which the worker finds among the embedded models) at its defaults,
# and MIN_ACCURACY in place of 0.9.
set -euo pipefail
src="$1"
build="$2"
model_name="${3:-}"
min_accuracy="${4:-0.9}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
model_args=()
dataset="$src/models/dpinfer-shapes-64/dataset.json"
if [ -n "$model_name" ]; then
  model_args=(--model "$model_name")
  dataset="$src/models/$model_name/dataset.json"
fi

cd "$work"  # no folder named MODEL here: the name must resolve to the embedded model
"$build/tools/dpinfer" launch --nproc-per-node 2 "$src/configs/prompts/shapes-heldout.txt" --out "$work/heldout" \
  "${model_args[@]}"
"$build/tools/dpinfer_check_shapes" "$work/heldout" "$dataset" --min-accuracy "$min_accuracy" --report "$work/report.json"

# Negative controls: the same images under wrong captions (shapes, then colours, each
# moved on by one) must score low, or the checker would be approving anything.
relabel() {  # NAME SED_SCRIPT
  mkdir "$work/$1"
  cp "$work/heldout"/*.png "$work/$1/"
  sed -e "$2" "$work/heldout/metadata.jsonl" >"$work/$1/metadata.jsonl"
  if "$build/tools/dpinfer_check_shapes" "$work/$1" "$dataset" --min-accuracy 0.2 >"$work/$1.log" 2>&1; then
    echo "negative control '$1': the checker accepted at least 20% of images under wrong captions:"
    tail -n 3 "$work/$1.log"
    exit 1
  fi
  echo "negative control '$1': $(tail -n 1 "$work/$1.log")"
}
relabel wrong-shapes 's/circle/@/g; s/square/circle/g; s/triangle/square/g; s/@/triangle/g'
relabel wrong-colours 's/ red / @ /g; s/ green / red /g; s/ blue / green /g; s/ yellow / blue /g; s/ purple / yellow /g; s/ @ / purple /g'
[ -z "$model_name" ] || exit 0

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
mkdir "$work/elsewhere"
cd "$work/elsewhere"
printf 'a blue square in the center on a white background\n' > one.txt
"$work/prefix/bin/dpinfer" generate one.txt --out out 2> err.log || { cat err.log; exit 1; }
grep -q "using the default model $work/prefix/share/dpinfer/models/dpinfer-shapes-64" err.log || {
  echo "the installed dpinfer did not use the installed model:"; cat err.log; exit 1; }
test -s out/000000.png
echo "default model: installed copy found from $PWD, wrote out/000000.png"
# The README's install instructions: the installed launcher finds the installed
# worker (LIBEXECDIR/dpinfer) and the workers the installed model.
cp "$src/configs/prompts/demo.txt" demo.txt
"$work/prefix/bin/dpinfer" launch --nproc-per-node 2 demo.txt --out demo 2> launch.log || { cat launch.log; exit 1; }
n="$(ls demo/*.png | wc -l)"
test "$n" -ge 1 && test "$n" -eq "$(wc -l < demo/metadata.jsonl)" || {
  echo "the installed launch made $n images for $(wc -l < demo/metadata.jsonl) metadata rows:"; cat launch.log; exit 1; }
echo "default model: the installed dpinfer launch made $(ls demo/*.png | wc -l) images"
