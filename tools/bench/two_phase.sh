#!/usr/bin/env bash
# Two-phase chunks (issue 26, --encode-chunk): the cost in time and the saving in peak memory of a run of
# ITEMS items, `dpinfer-worker generate` with and without --encode-chunk, alternating, on the CPU.
# The issue's goal: two-phase adds at most 2% to a run of 64 items. Prints each run's wall time and
# peak RSS (the kernel's ru_maxrss, from wait4), the medians, and the ratio two-phase / without, with
# the machine's name, CPUs and load average; and checks that both runs wrote the same pixels.
#
#   tools/bench/two_phase.sh [--dpinfer-worker PATH] [--bench PATH] [--model DIR] [--shape DIR]
#       [--items 64] [--chunk 64] [--batch-size 8] [--steps 2] [--size 64] [--dtype fp32] [--runs 3]
#
# Defaults: the worker and dpinfer_bench under build/default/tools, an SD1.5-shaped random-weight
# directory in ${TMPDIR:-/tmp}/dpinfer-sd15-fp32 (written by dpinfer_bench from configs/models/sd15-shape
# when missing, then kept: 4.27 GB of fp32 files, as tools/bench/load_memory.sh makes it). --model takes
# any diffusers directory instead, e.g. tests/data/pipelines/tiny-flux-dev. Every item has its own prompt
# and shares one negative prompt; CFG 7.5. Needs bash, coreutils and python3 (standard library only).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

worker="$root/build/default/tools/dpinfer-worker"
bench="$root/build/default/tools/bench/dpinfer_bench"
shape="$root/configs/models/sd15-shape"
model=""
items=64
chunk=64
batch_size=8
steps=2
size=64
dtype=fp32
runs=3

usage() { sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dpinfer-worker) worker="$2"; shift 2 ;;
    --bench) bench="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --shape) shape="$(cd "$2" && pwd)"; shift 2 ;;
    --items) items="$2"; shift 2 ;;
    --chunk) chunk="$2"; shift 2 ;;
    --batch-size) batch_size="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --dtype) dtype="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "two_phase: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$worker" ] || { echo "two_phase: $worker is missing; build first or pass --dpinfer-worker" >&2; exit 2; }
for v in items chunk batch_size steps size runs; do
  case "${!v}" in ''|*[!0-9]*|0) echo "two_phase: --${v//_/-} wants a positive integer, got '${!v}'" >&2; exit 2 ;; esac
done
py=/usr/bin/python3
[ -x "$py" ] || py="$(command -v python3)" || { echo "two_phase: needs python3 (standard library only)" >&2; exit 2; }

if [ -z "$model" ]; then
  model="${TMPDIR:-/tmp}/dpinfer-$( [ "$shape" = "$root/configs/models/sd15-shape" ] && echo sd15 || basename "$shape")-fp32"
  if [ ! -f "$model/model_index.json" ]; then
    [ -x "$bench" ] || { echo "two_phase: $model is missing and $bench, which writes it, is missing; pass --model" >&2; exit 2; }
    echo "-- writing the random-weight model $model"
    "$bench" --shape "$shape" --model-dir "$model" --weights-dtype fp32 --device cpu --dtype fp32 --width 64 --height 64 \
      --steps 1 --batch-sizes 1 --warmup 0 --repeats 1 > /dev/null
  fi
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$py" - "$work/p.jsonl" "$items" <<'PY'
import json, sys
subjects = ["a lighthouse", "a red fox", "an astronaut", "a teapot", "a city street", "a mountain lake", "a robot", "a cat"]
styles = ["at dusk", "in the snow", "oil painting", "watercolor", "photograph, 35mm", "in the rain", "at noon", "isometric"]
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        prompt = f"{subjects[i % 8]} {styles[(i // 8) % 8]}, number {i}"
        f.write(json.dumps({"prompt": prompt, "negative_prompt": "blurry, low quality, watermark"}) + "\n")
PY

# measure.py OUT_JSON CMD...: runs CMD (its output to OUT_JSON.log), returns its wall time and peak RSS.
cat > "$work/measure.py" <<'PY'
import json, os, subprocess, sys, time
out_json, cmd = sys.argv[1], sys.argv[2:]
t0 = time.monotonic()
with open(out_json + ".log", "w") as log:
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
wall = time.monotonic() - t0
code = os.waitstatus_to_exitcode(status)
json.dump({"wall_s": wall, "peak_rss_bytes": usage.ru_maxrss * 1024, "exit": code}, open(out_json, "w"))
sys.exit(0 if code == 0 else 1)
PY

echo "== two-phase chunks: $items items, batch $batch_size, $steps steps, ${size}x$size, $dtype, --encode-chunk $chunk"
echo "   model $model"
echo "   machine $(hostname), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load before: $(cut -d' ' -f1-3 /proc/loadavg)"
common=("$work/p.jsonl" --model "$model" --device cpu --dtype "$dtype" --steps "$steps" --width "$size" --height "$size"
        --batch-size "$batch_size" --guidance-scale 7.5)
for r in $(seq 1 "$runs"); do
  for mode in off on; do
    out="$work/out-$mode-$r"
    extra=()
    [ "$mode" = on ] && extra=(--encode-chunk "$chunk")
    if ! "$py" "$work/measure.py" "$work/$mode-$r.json" "$worker" generate "${common[@]}" --out "$out" "${extra[@]}"; then
      echo "two_phase: the run with two-phase $mode failed:" >&2; tail -20 "$work/$mode-$r.json.log" >&2; exit 1
    fi
    "$py" -c 'import json,sys; j=json.load(open(sys.argv[1])); print("   run %s, two-phase %-3s: %8.2f s, peak RSS %8.1f MiB" % (sys.argv[2], sys.argv[3], j["wall_s"], j["peak_rss_bytes"] / 2**20))' \
      "$work/$mode-$r.json" "$r" "$mode"
  done
  if [ "$r" = 1 ]; then
    # The same pixels: PNG files differ by nothing that depends on the flag, so compare their bytes.
    if diff -rq --exclude='*.jsonl' --exclude='run.json' --exclude='*.json' "$work/out-off-1" "$work/out-on-1" > /dev/null; then
      echo "   the images of both runs are identical"
    else
      echo "two_phase: the runs with and without two-phase wrote different files" >&2; exit 1
    fi
  fi
  rm -rf "$work/out-off-$r" "$work/out-on-$r"
done
"$py" - "$work" "$runs" <<'PY'
import json, statistics, sys
work, runs = sys.argv[1], int(sys.argv[2])
def med(mode, key):
    return statistics.median(json.load(open(f"{work}/{mode}-{r}.json"))[key] for r in range(1, runs + 1))
off_t, on_t = med("off", "wall_s"), med("on", "wall_s")
off_m, on_m = med("off", "peak_rss_bytes"), med("on", "peak_rss_bytes")
print(f"== medians of {runs}: without {off_t:.2f} s, {off_m / 2**20:.1f} MiB; two-phase {on_t:.2f} s, {on_m / 2**20:.1f} MiB")
print(f"== two-phase / without: time {on_t / off_t:.4f} ({(on_t / off_t - 1) * 100:+.2f}%, goal <= +2%), peak RSS {on_m / off_m:.4f}")
PY
echo "   load after: $(cut -d' ' -f1-3 /proc/loadavg)"
