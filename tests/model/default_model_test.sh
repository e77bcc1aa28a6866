#!/usr/bin/env bash
# The embedded default model, end to end, with no --model anywhere:
#  1. recognisable: `dpinfer launch --nproc-per-node 2` on the 60 held-out captions
#     (never seen in training), judged by dpinfer_check_shapes: >= 90% must show
#     the requested colour and shape;
#  2. installed: `cmake --install` into a temporary prefix, then the installed
#     dpinfer, run from an unrelated working directory, finds the model under
#     PREFIX/share/dpinfer/models.
# Usage: default_model_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$1"
build="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$build/tools/dpinfer" launch --nproc-per-node 2 "$src/configs/prompts/shapes-heldout.txt" --out "$work/heldout"
"$build/tools/dpinfer_check_shapes" "$work/heldout" "$src/models/dpinfer-shapes-64/dataset.json" \
  --min-accuracy 0.9 --report "$work/report.json"

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
mkdir "$work/elsewhere"
cd "$work/elsewhere"
printf 'a blue square in the center on a white background\n' > one.txt
"$work/prefix/bin/dpinfer" generate one.txt --out out 2> err.log || { cat err.log; exit 1; }
grep -q "using the default model $work/prefix/share/dpinfer/models/dpinfer-shapes-64" err.log || {
  echo "the installed dpinfer did not use the installed model:"; cat err.log; exit 1; }
test -s out/000000.png
echo "default model: installed copy found from $PWD, wrote out/000000.png"
