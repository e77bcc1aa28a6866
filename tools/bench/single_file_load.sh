#!/usr/bin/env bash
# Loading a single-file checkpoint against loading the diffusers directory it came from: the
# worker's own "pipeline loaded in" time for `dpinfer-worker generate` (one prompt, one 64x64
# step, CPU) on a random-weight model of a shape (SD1.5's by default), the directory and the
# single file run alternately, N times each, both from a warm page cache.
#
#   tools/bench/single_file_load.sh [--dpinfer-worker PATH] [--bench PATH] [--python PATH]
#       [--shape DIR] [--model-dir DIR] [--weights-dtype fp16] [--dtype fp32] [--runs 3]
#
# The directory is written by dpinfer_bench (as load_memory.sh does) and kept; the single file
# beside it (<model-dir>.safetensors) by tools/fixtures/make_single_file_fixtures.py --convert,
# which needs the fixtures venv (--python; default tools/fixtures/.venv/bin/python). The single
# file is loaded with --base <model-dir>, so both load the same configs and tokenizers.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
worker="$root/build/default/tools/dpinfer-worker"
bench="$root/build/default/tools/bench/dpinfer_bench"
python="$root/tools/fixtures/.venv/bin/python"
shape="$root/configs/models/sd15-shape"
model=""
weights_dtype="fp16"
dtype="fp32"
runs=3
usage() { sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dpinfer-worker) worker="$2"; shift 2 ;;
    --bench) bench="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --shape) shape="$(cd "$2" && pwd)"; shift 2 ;;
    --model-dir) model="$2"; shift 2 ;;
    --weights-dtype) weights_dtype="$2"; shift 2 ;;
    --dtype) dtype="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "single_file_load: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$worker" ] || { echo "single_file_load: $worker is missing; build first or pass --dpinfer-worker" >&2; exit 2; }
case "$runs" in ''|*[!0-9]*|0) echo "single_file_load: --runs wants a positive integer, got '$runs'" >&2; exit 2 ;; esac
[ -n "$model" ] || model="${TMPDIR:-/tmp}/dpinfer-$(basename "$shape")-$weights_dtype"
file="$model.safetensors"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [ ! -f "$model/model_index.json" ]; then
  [ -x "$bench" ] || { echo "single_file_load: $model is missing and $bench, which writes it, is missing" >&2; exit 2; }
  echo "-- writing the random-weight model $model"
  "$bench" --shape "$shape" --model-dir "$model" --weights-dtype "$weights_dtype" --device cpu --dtype fp32 \
    --width 64 --height 64 --steps 1 --batch-sizes 1 --warmup 0 --repeats 1 > "$work/bench.log" 2>&1 ||
    { cat "$work/bench.log" >&2; exit 1; }
fi
if [ ! -f "$file" ] || [ "$file" -ot "$model/model_index.json" ]; then
  [ -x "$python" ] || { echo "single_file_load: $python (the fixtures venv) is missing; pass --python" >&2; exit 2; }
  echo "-- converting it to the LDM single file $file"
  "$python" "$root/tools/fixtures/make_single_file_fixtures.py" --convert "$model" "$file"
fi
mapfile -t dir_files < <(find -L "$model" -name '*.safetensors' -type f | sort)
cat "${dir_files[@]}" "$file" > /dev/null  # warm the page cache for both
dir_bytes=$(stat -L -c %s "${dir_files[@]}" | awk '{ s += $1 } END { printf "%.0f", s }')
file_bytes=$(stat -c %s "$file")
echo "-- directory: ${#dir_files[@]} weight files, $dir_bytes bytes; single file: $file_bytes bytes"

printf 'a photograph of an astronaut riding a horse\n' > "$work/p.txt"
args=(--dtype "$dtype" --device cpu --steps 1 --width 64 --height 64 -v)
load_s() {  # CMD...: the worker's "pipeline loaded in X s"
  "$@" > "$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
  sed -n 's/.*pipeline loaded in \([0-9.]*\)s.*/\1/p' "$work/log" | head -1
}
dir_times=(); file_times=()
for i in $(seq 1 "$runs"); do
  d=$(load_s "$worker" generate "$work/p.txt" --model "$model" "${args[@]}" --out "$work/d$i")
  f=$(load_s "$worker" generate "$work/p.txt" --model "$file" --base "$model" "${args[@]}" --out "$work/f$i")
  echo "-- run $i: directory loaded in ${d} s, single file in ${f} s"
  dir_times+=("$d"); file_times+=("$f")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
dm=$(median "${dir_times[@]}"); fm=$(median "${file_times[@]}")
echo "shape:       $(basename "$shape"), $weights_dtype weights loaded as $dtype on the CPU, $runs runs each"
echo "directory:   median load ${dm} s (${dir_times[*]})"
echo "single file: median load ${fm} s (${file_times[*]})"
awk -v d="$dm" -v f="$fm" 'BEGIN { printf "ratio:       single file / directory = %.3f\n", f / d }'
