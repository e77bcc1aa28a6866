#!/usr/bin/env bash
# What the writer thread (--write-queue) gains: `dpinfer-worker generate` with it
# (--write-queue N) and without it (--write-queue 0, the serial loop), on the CPU, on
# the embedded default model at 64x64 and on an SD1.5-shaped random-weight model at
# 256x256. For each it reports images/s over the generation loop and end to end, and the
# share of the loop's wall time the denoiser was idle, from the worker's -v line
# "denoiser busy B s of S s, idle I s (P%)" (time not spent in the pipeline's generate():
# waiting for the writer, and the last batch's writes, which nothing overlaps).
#
#   tools/bench/writer_overlap.sh [--dpinfer-worker PATH] [--bench PATH] [--model-dir DIR]
#       [--queue 16] [--runs 2] [--items 32] [--steps 20] [--batch-sizes 1,8]
#       [--sd15-items 4] [--sd15-steps 4] [--no-sd15] [--json FILE]
#
# Defaults: the worker and dpinfer_bench under build/default/tools, the SD1.5-shaped model
# in ${TMPDIR:-/tmp}/dpinfer-sd15-fp32 (written by dpinfer_bench when missing, then kept,
# as load_memory.sh does). The two modes alternate, run by run, so that a neighbour's
# load falls on both. Nothing here is a test. Needs bash and python3 (standard library).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

worker="$root/build/default/tools/dpinfer-worker"
bench="$root/build/default/tools/bench/dpinfer_bench"
model="${TMPDIR:-/tmp}/dpinfer-sd15-fp32"
queue=16
runs=2
items=32
steps=20
batch_sizes=1,8
sd15_items=4
sd15_steps=4
sd15=1
json_out=""

usage() { sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dpinfer-worker) worker="$2"; shift 2 ;;
    --bench) bench="$2"; shift 2 ;;
    --model-dir) model="$2"; shift 2 ;;
    --queue) queue="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --items) items="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --batch-sizes) batch_sizes="$2"; shift 2 ;;
    --sd15-items) sd15_items="$2"; shift 2 ;;
    --sd15-steps) sd15_steps="$2"; shift 2 ;;
    --no-sd15) sd15=0; shift ;;
    --json) json_out="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "writer_overlap: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$worker" ] || { echo "writer_overlap: $worker is missing; build first or pass --dpinfer-worker" >&2; exit 2; }
for v in "$queue" "$runs" "$items" "$steps" "$sd15_items" "$sd15_steps"; do
  case "$v" in ''|*[!0-9]*|0) echo "writer_overlap: expected a positive integer, got '$v'" >&2; exit 2 ;; esac
done
py=/usr/bin/python3
[ -x "$py" ] || py="$(command -v python3)" || { echo "writer_overlap: needs python3 (standard library only)" >&2; exit 2; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
results="$work/results.jsonl"
: > "$results"

# one CASE MODEL_ARGS... -- GENERATE_ARGS...: one run per mode and repeat, each into a new --out.
one() {
  local case_name="$1" q="$2" run="$3"; shift 3
  local out="$work/out-$case_name-q$q-$run" log="$work/$case_name-q$q-$run.log"
  if ! "$worker" generate "$@" --out "$out" --write-queue "$q" -v > "$log" 2>&1; then
    echo "writer_overlap: '$worker generate $* --write-queue $q' failed; its output:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  "$py" - "$log" "$case_name" "$q" "$run" >> "$results" <<'PY'
import json, re, sys
log, case, q, run = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
text = open(log, encoding="utf-8", errors="replace").read()
done = re.search(r"done: (\d+) generated, \d+ skipped, \d+ failed in ([0-9.]+)s \(([0-9.]+) images/s\)", text)
busy = re.search(r"denoiser busy ([0-9.]+) s of ([0-9.]+) s, idle ([0-9.]+) s \(([0-9.]+)%\); writer busy ([0-9.]+) s, "
                 r"([0-9.]+) s waited for room", text)
if not done or not busy:
    sys.exit("writer_overlap: no 'done:' or 'denoiser busy' line in " + log)
n = int(done.group(1))
span = float(busy.group(2))
print(json.dumps({"case": case, "queue": q, "run": run, "images": n, "wall_s": float(done.group(2)),
                  "images_per_s_end_to_end": float(done.group(3)), "loop_s": span,
                  "images_per_s_loop": n / span if span else None, "denoise_s": float(busy.group(1)),
                  "idle_s": float(busy.group(3)), "idle_pct": float(busy.group(4)),
                  "writer_busy_s": float(busy.group(5)), "waited_s": float(busy.group(6))}))
PY
  tail -n 1 "$results" | "$py" -c 'import json,sys; r=json.loads(sys.stdin.read())
print("   %-16s --write-queue %-3d run %d: %6.2f images/s in the loop, %5.2f%% idle (writer busy %.2f s)" % (
      r["case"], r["queue"], r["run"], r["images_per_s_loop"], r["idle_pct"], r["writer_busy_s"]))'
}

# both CASE ARGS...: the two modes, alternating, --runs times.
both() {
  local case_name="$1"; shift
  for run in $(seq 1 "$runs"); do
    one "$case_name" 0 "$run" "$@"
    one "$case_name" "$queue" "$run" "$@"
  done
}

echo "== writer_overlap: --write-queue 0 (serial) against --write-queue $queue, on the CPU, $runs run(s) each"
echo "machine: $(hostname), $(nproc) CPU core(s), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(date -u +%Y-%m-%dT%H:%MZ)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

# 1. The embedded default model at its 64x64 (--steps, 20 as in the README's table), one prompt per item.
"$py" -c 'import sys
for i in range(int(sys.argv[1])): print("a %s shape on a %s background, number %d" % (["red", "green", "blue", "yellow"][i % 4], ["white", "black"][i % 2], i))' \
  "$items" > "$work/prompts.txt"
IFS=, read -r -a batches <<< "$batch_sizes"
for b in "${batches[@]}"; do
  echo "-- default model, 64x64, $items items, $steps steps, batch $b"
  both "default-b$b" "$work/prompts.txt" --device cpu --dtype fp32 --steps "$steps" --batch-size "$b"
done

# 2. SD1.5's shape, random weights, at 256x256.
if [ "$sd15" = 1 ]; then
  if [ ! -f "$model/model_index.json" ]; then
    [ -x "$bench" ] || { echo "writer_overlap: $model is missing and $bench, which writes it, is missing; build first or pass --bench" >&2; exit 2; }
    echo "-- writing the SD1.5-shaped random-weight model to $model"
    "$bench" --shape "$root/configs/models/sd15-shape" --model-dir "$model" --weights-dtype fp32 --device cpu --dtype fp32 \
      --width 64 --height 64 --steps 1 --batch-sizes 1 --warmup 0 --repeats 1 > "$work/bench.log" 2>&1 ||
      { cat "$work/bench.log" >&2; exit 1; }
  fi
  head -n "$sd15_items" "$work/prompts.txt" > "$work/prompts-sd15.txt"
  echo "-- SD1.5-shaped model ($model), 256x256, $sd15_items items, $sd15_steps steps, batch 1"
  both "sd15-256" "$work/prompts-sd15.txt" --model "$model" --device cpu --dtype fp32 --width 256 --height 256 \
    --steps "$sd15_steps" --batch-size 1
fi

echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
WO_RESULTS="$results" WO_JSON="$json_out" WO_QUEUE="$queue" "$py" - <<'PY'
import json, os, statistics
rows = [json.loads(l) for l in open(os.environ["WO_RESULTS"])]
q = int(os.environ["WO_QUEUE"])
print()
print("| case | --write-queue | images/s (loop) | images/s (end to end) | denoiser idle | writer busy / loop |")
print("|---|---|---|---|---|---|")
summary = []
for case in dict.fromkeys(r["case"] for r in rows):
    for queue in (0, q):
        rs = [r for r in rows if r["case"] == case and r["queue"] == queue]
        med = lambda k: statistics.median(r[k] for r in rs)
        s = {"case": case, "queue": queue, "runs": len(rs), "images_per_s_loop": med("images_per_s_loop"),
             "images_per_s_end_to_end": med("images_per_s_end_to_end"), "idle_pct": med("idle_pct"),
             "writer_share_pct": 100 * med("writer_busy_s") / med("loop_s")}
        summary.append(s)
        print("| %s | %d | %.2f | %.2f | %.2f%% | %.1f%% |" % (case, queue, s["images_per_s_loop"],
              s["images_per_s_end_to_end"], s["idle_pct"], s["writer_share_pct"]))
print("(medians of %d run(s); the loop is from the first batch to the last record)" % max(r["run"] for r in rows))
if os.environ["WO_JSON"]:
    with open(os.environ["WO_JSON"], "w") as f:
        json.dump({"runs": rows, "summary": summary}, f, indent=1)
    print("wrote " + os.environ["WO_JSON"])
PY
