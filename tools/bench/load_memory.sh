#!/usr/bin/env bash
# Peak memory and speed of loading a model: `dpinfer-worker generate` on a random-weight
# diffusers directory of a shape (SD1.5's by default), one prompt, one 64x64 step, on the CPU,
# run N times.
# Reports the process's peak RSS against the weights' bytes in the run dtype (the goal:
# peak RSS <= 1.3x the bf16 weight bytes), the load time from the worker's own
# "pipeline loaded in" line, and the load speed (weight-file bytes / load s) from the page cache.
#
#   tools/bench/load_memory.sh [--dpinfer-worker PATH] [--dpinfer PATH] [--bench PATH]
#       [--shape DIR] [--steps 1] [--model-dir DIR] [--weights-dtype fp32] [--dtype bf16] [--runs 3] [--json FILE]
#       [--weight-storage default|fp8|fp8-denoiser] [--set KEY=VALUE ...]
#
# Defaults: the worker, dpinfer and dpinfer_bench under build/default/tools, the shape
# configs/models/sd15-shape, the model in ${TMPDIR:-/tmp}/dpinfer-sd15-fp32 (with --shape:
# ${TMPDIR:-/tmp}/dpinfer-<shape folder>-<weights dtype>; written by dpinfer_bench when it is missing, then kept),
# fp32 weight files (what hub repos ship for SD1.5), bf16 parameters. Uses only the CLI
# (generate, inspect, --version), so it runs the same against any build. Needs bash,
# coreutils and /usr/bin/python3 (standard library only). See tools/bench/README.md.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

worker="$root/build/default/tools/dpinfer-worker"
dpinfer=""
bench="$root/build/default/tools/bench/dpinfer_bench"
model=""
shape="$root/configs/models/sd15-shape"
weights_dtype="fp32"
dtype="bf16"
runs=3
steps=1  # Qwen-Image's scheduler (shift_terminal) needs 2
json_out=""
goal=1.3
weight_storage="default"
settings=()  # --set KEY=VALUE, passed on to the worker (a family setting, e.g. FLUX.2's text_encoder_out_layers)

usage() { sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dpinfer-worker) worker="$2"; shift 2 ;;
    --dpinfer) dpinfer="$2"; shift 2 ;;
    --bench) bench="$2"; shift 2 ;;
    --shape) shape="$(cd "$2" && pwd)"; shift 2 ;;
    --model-dir) model="$2"; shift 2 ;;
    --weights-dtype) weights_dtype="$2"; shift 2 ;;
    --dtype) dtype="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --json) json_out="$2"; shift 2 ;;
    --weight-storage) weight_storage="$2"; shift 2 ;;
    --set) settings+=(--set "$2"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "load_memory: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
# dpinfer (only asked for --version) defaults to the worker's neighbour.
[ -n "$dpinfer" ] || dpinfer="$(dirname "$worker")/dpinfer"
[ -x "$worker" ] || { echo "load_memory: $worker is missing; build first or pass --dpinfer-worker" >&2; exit 2; }
case "$runs" in ''|*[!0-9]*|0) echo "load_memory: --runs wants a positive integer, got '$runs'" >&2; exit 2 ;; esac
py=/usr/bin/python3
[ -x "$py" ] || py="$(command -v python3)" || { echo "load_memory: needs python3 (standard library only)" >&2; exit 2; }
tiny="$root/tests/data/pipelines/tiny-sd1"
if [ -z "$model" ]; then
  if [ "$shape" = "$root/configs/models/sd15-shape" ]; then model="${TMPDIR:-/tmp}/dpinfer-sd15-$weights_dtype"
  else model="${TMPDIR:-/tmp}/dpinfer-$(basename "$shape")-$weights_dtype"; fi
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# measure.py OUT_JSON LOG CMD...: runs CMD, its stdout and stderr to LOG (each line timed),
# sampling /proc/PID/status every 10 ms; writes the kernel's peak RSS (ru_maxrss from
# wait4, exact) and the sampled RssAnon/RssFile, split at the "pipeline loaded" line.
cat > "$work/measure.py" <<'PY'
import json, os, re, subprocess, sys, threading, time
out_json, log_path, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM")
lines = []
t0 = time.monotonic()
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
def reader():
    with open(log_path, "w") as log:
        for raw in p.stdout:
            line = raw.decode("utf-8", "replace")
            lines.append((time.monotonic() - t0, line.rstrip("\n")))
            log.write(line)
            log.flush()
th = threading.Thread(target=reader, daemon=True)
th.start()
samples = []  # (t, VmRSS, RssAnon, RssFile, RssShmem, VmHWM) in bytes
status_path = "/proc/%d/status" % p.pid
while True:
    pid, st, ru = os.wait4(p.pid, os.WNOHANG)
    if pid:
        break
    try:
        with open(status_path) as f:
            text = f.read()
        vals = dict.fromkeys(FIELDS, 0)
        for ln in text.splitlines():
            k, _, v = ln.partition(":")
            if k in vals:
                vals[k] = int(v.split()[0]) * 1024
        samples.append((time.monotonic() - t0,) + tuple(vals[k] for k in FIELDS))
    except (OSError, ValueError, IndexError):
        pass
    time.sleep(0.01)
wall = time.monotonic() - t0
p.returncode = os.waitstatus_to_exitcode(st)
th.join(5)
loaded_at, load_s = None, None
for t, line in lines:
    m = re.search(r"pipeline loaded in ([0-9.]+)\s*s", line)
    if m:
        loaded_at, load_s = t, float(m.group(1))
        break
def peak_of(rows):
    if not rows:
        return None
    top = max(rows, key=lambda r: r[1])
    return {"t_s": round(top[0], 3), "rss": top[1], "anon": top[2], "file": top[3], "shmem": top[4],
            "max_anon": max(r[2] for r in rows), "max_file": max(r[3] for r in rows)}
load_rows = [r for r in samples if loaded_at is None or r[0] <= loaded_at]
after_rows = [r for r in samples if loaded_at is not None and r[0] > loaded_at]
# RssFile once the libraries are mapped and before or between weight-file mappings: the
# least RssFile from 0.5 s on until loaded (None for a load shorter than that).
floor_rows = [r for r in load_rows if r[0] >= 0.5]
res = {
    "cmd": cmd, "rc": p.returncode, "wall_s": round(wall, 3),
    "ru_maxrss": ru.ru_maxrss * 1024,  # Linux reports KiB
    "load_s": load_s, "loaded_at_s": None if loaded_at is None else round(loaded_at, 3),
    "samples": len(samples),
    "sampled_peak_until_loaded": peak_of(load_rows),
    "sampled_peak_after_loaded": peak_of(after_rows),
    "last_vmhwm": samples[-1][5] if samples else None,
    "file_floor_until_loaded": min(r[3] for r in floor_rows) if floor_rows else None,
    # [t s, RssAnon, RssFile] every ~0.1 s, for reading the load's phases
    "timeline": [[round(r[0], 2), r[2], r[3]] for r in samples[::10]],
}
with open(out_json, "w") as f:
    json.dump(res, f, indent=1)
sys.exit(0 if p.returncode == 0 else 1)
PY

gb() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1e9 }'; }
measure() {  # measure NAME CMD...: runs it, prints a line, fails on a non-zero exit
  local name="$1"; shift
  if ! "$py" "$work/measure.py" "$work/$name.json" "$work/$name.log" "$@"; then
    echo "load_memory: '$*' failed; its output:" >&2
    tail -n 30 "$work/$name.log" >&2
    exit 1
  fi
}

echo "== load_memory: $dtype parameters from $weights_dtype weight files, weight storage $weight_storage, on the CPU"

# 1. The model directory.
created_s=""
if [ ! -f "$model/model_index.json" ]; then
  [ -x "$bench" ] || { echo "load_memory: $model is missing and $bench, which writes it, is missing; build first or pass --bench" >&2; exit 2; }
  bench_cmd=("$bench" --shape "$shape" --model-dir "$model" --weights-dtype "$weights_dtype" --device cpu --dtype fp32
             --width 64 --height 64 --steps 1 --batch-sizes 1 --warmup 0 --repeats 1)
  echo "-- writing the random-weight model: ${bench_cmd[*]}"
  t0=$(date +%s.%N)
  "${bench_cmd[@]}" > "$work/bench.log" 2>&1 || { cat "$work/bench.log" >&2; exit 1; }
  created_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  echo "   done in ${created_s} s (writing and one timed 64x64 step): $(grep -m1 'wrote random' "$work/bench.log" || true)"
else
  if [ -f "$model/dpinfer_bench.json" ]; then
    have="$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("weights_dtype",""))' "$model/dpinfer_bench.json")"
    if [ -n "$have" ] && [ "$have" != "$weights_dtype" ]; then
      echo "load_memory: $model holds $have weights, not $weights_dtype; pass another --model-dir" >&2; exit 2
    fi
  fi
  echo "-- model directory $model exists; reused"
fi
mapfile -t files < <(find "$model" -name '*.safetensors' -type f | sort)
[ "${#files[@]}" -gt 0 ] || { echo "load_memory: no .safetensors files under $model" >&2; exit 2; }

# 2. Warm the page cache, so the load reads memory, not the disk.
t0=$(date +%s.%N)
cat "${files[@]}" > /dev/null
warm_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
file_bytes=$(stat -c %s "${files[@]}" | awk '{ s += $1 } END { printf "%.0f", s }')  # %d overflows in mawk
echo "-- page cache warmed: ${#files[@]} weight files, $(gb "$file_bytes") GB read in ${warm_s} s"
cached_mem=$(awk '/^Cached:/ { printf "%.0f", $2 * 1024 }' /proc/meminfo)
avail_mem=$(awk '/^MemAvailable:/ { printf "%.0f", $2 * 1024 }' /proc/meminfo)

# Parameter counts from the weight files' headers.
# inspect takes no --set: a shape that only the --set settings make runnable (FLUX.2 [dev]'s text encoder cut below
# the hidden states it reads by default) is refused by its family check, but its JSON still holds the counts.
if ! "$worker" inspect "$model" --json > "$work/inspect.json" 2> "$work/inspect.err"; then
  if [ ${#settings[@]} -gt 0 ] && "$py" -c 'import json, sys; json.load(open(sys.argv[1]))' "$work/inspect.json" 2>/dev/null; then
    echo "-- inspect refuses the model without the --set settings (it takes none): $(tail -n 1 "$work/inspect.err"); its counts are used"
  else
    echo "load_memory: '$worker inspect $model --json' failed:" >&2; cat "$work/inspect.err" >&2; exit 1
  fi
fi

# 3. Context: a process that loads LibTorch, builds the tiny model and reads its weight
# headers (inspect), and one that loads and runs the tiny model (generate); not subtracted.
printf 'a photograph of an astronaut riding a horse\n' > "$work/prompts.txt"
gen_args=(--dtype "$dtype" --device cpu --steps "$steps" --width 64 --height 64 --batch-size 1 -v)
tiny_args=("${gen_args[@]}")
[ "$weight_storage" = "default" ] || gen_args+=(--weight-storage "$weight_storage")
gen_args+=("${settings[@]}")
idle_cmd=("$worker" inspect "$tiny" --json)
measure idle "${idle_cmd[@]}"
tiny_cmd=("$worker" generate "$work/prompts.txt" --model "$tiny" "${tiny_args[@]}" --out "$work/out-tiny")
measure tiny "${tiny_cmd[@]}"

# 4. The measured loads.
for i in $(seq 1 "$runs"); do
  cmd=("$worker" generate "$work/prompts.txt" --model "$model" "${gen_args[@]}" --out "$work/out-$i")
  measure "run$i" "${cmd[@]}"
  "$py" -c 'import json,sys; r=json.load(open(sys.argv[1])); l=r["sampled_peak_until_loaded"] or {}
print("-- run %s: loaded in %s s, peak RSS %.2f GB (%.1f s wall)" % (sys.argv[2], r["load_s"], r["ru_maxrss"]/1e9, r["wall_s"]))' \
    "$work/run$i.json" "$i"
done
grep -q "pipeline loaded in" "$work/run1.log" || {
  echo "load_memory: no 'pipeline loaded in' line in the worker's -v output; the load time is unknown" >&2; exit 1; }

# 5 and 6. The report.
version_of() {  # the first line of PATH --version, or nothing when it has none (a non-zero exit)
  local out
  [ -x "$1" ] && out="$("$1" --version 2>/dev/null)" && printf '%s' "${out%%$'\n'*}" || true
}
version="$(version_of "$dpinfer")"
worker_version="$(version_of "$worker")"
bench_version="$(version_of "$bench")"
LM_WORK="$work" LM_RUNS="$runs" LM_MODEL="$model" LM_WDTYPE="$weights_dtype" LM_DTYPE="$dtype" LM_GOAL="$goal" \
LM_FILE_BYTES="$file_bytes" LM_NFILES="${#files[@]}" LM_WARM_S="$warm_s" LM_CREATED_S="$created_s" \
LM_CACHED="$cached_mem" LM_AVAIL="$avail_mem" LM_JSON="$json_out" \
LM_WORKER="$worker" LM_DPINFER="$dpinfer" LM_BENCH="$bench" \
LM_VERSION="$version" LM_WORKER_VERSION="$worker_version" LM_BENCH_VERSION="$bench_version" \
"$py" - <<'PY'
import json, os, platform, shlex
E = os.environ
work, runs = E["LM_WORK"], int(E["LM_RUNS"])
def load(name):
    with open(os.path.join(work, name + ".json")) as f:
        return json.load(f)
dtype_bytes = {"fp32": 4, "float32": 4, "fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2}[E["LM_DTYPE"]]
inspect = load("inspect")
comps = {name: c["weights"]["parameters"] for name, c in inspect["components"].items()
         if isinstance(c, dict) and c.get("weights") and c["weights"].get("parameters") is not None}
params = sum(comps.values())
param_bytes = dtype_bytes * params
file_bytes = int(E["LM_FILE_BYTES"])
idle, tiny = load("idle"), load("tiny")
rs = [load("run%d" % i) for i in range(1, runs + 1)]
peak = max(r["ru_maxrss"] for r in rs)
load_best = min(r["load_s"] for r in rs)
ratio = peak / param_bytes
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
mem_total = next(int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemTotal:"))
G = 1e9
def g(b): return "%.2f GB" % (b / G) if b is not None else "n/a"
peak_run = max(rs, key=lambda r: r["ru_maxrss"])
pl = peak_run["sampled_peak_until_loaded"] or {}
pa = peak_run["sampled_peak_after_loaded"] or {}
idle_pl = idle["sampled_peak_until_loaded"] or {}
report = {
    "machine": {"cpu": cpu, "cores": os.cpu_count(), "ram_bytes": mem_total, "kernel": platform.release(),
                "page_cache_bytes_after_warm": int(E["LM_CACHED"]), "mem_available_after_warm": int(E["LM_AVAIL"])},
    "binaries": {"dpinfer_worker": E["LM_WORKER"], "dpinfer": E["LM_DPINFER"], "dpinfer_bench": E["LM_BENCH"],
                 "dpinfer_version": E["LM_VERSION"] or None, "worker_version": E["LM_WORKER_VERSION"] or None,
                 "bench_version": E["LM_BENCH_VERSION"] or None},
    "model": {"dir": E["LM_MODEL"], "weights_dtype": E["LM_WDTYPE"], "files": int(E["LM_NFILES"]),
              "file_bytes": file_bytes, "parameters": params, "parameters_by_component": comps,
              "created_s": float(E["LM_CREATED_S"]) if E["LM_CREATED_S"] else None, "page_cache_warm_s": float(E["LM_WARM_S"])},
    "dtype": E["LM_DTYPE"], "param_bytes": param_bytes,
    "idle_baseline": {"cmd": idle["cmd"], "peak_rss": idle["ru_maxrss"], "anon": idle_pl.get("anon"), "file": idle_pl.get("file")},
    "tiny_generate": {"cmd": tiny["cmd"], "peak_rss": tiny["ru_maxrss"], "load_s": tiny["load_s"]},
    "runs": [{"cmd": r["cmd"], "load_s": r["load_s"], "peak_rss": r["ru_maxrss"], "wall_s": r["wall_s"],
              "sampled_peak_until_loaded": r["sampled_peak_until_loaded"],
              "sampled_peak_after_loaded": r["sampled_peak_after_loaded"], "timeline": r["timeline"]} for r in rs],
    "peak_rss": peak, "ratio_peak_rss_to_param_bytes": round(ratio, 3), "goal_ratio": float(E["LM_GOAL"]),
    "goal_met": ratio <= float(E["LM_GOAL"]),
    "load_s_best": load_best, "load_s_all": [r["load_s"] for r in rs],
    "file_gb_per_s": round(file_bytes / G / load_best, 3) if load_best else None,
    "param_gb_per_s": round(param_bytes / G / load_best, 3) if load_best else None,
}
print()
print("machine:    %s, %d core(s), %.1f GiB RAM, Linux %s" % (cpu, os.cpu_count(), mem_total / 2**30, platform.release()))
print("binaries:   %s (dpinfer --version: %s)" % (E["LM_WORKER"], E["LM_VERSION"] or "n/a"))
print("model:      %s: %d weight files, %s of %s (%s)" % (E["LM_MODEL"], int(E["LM_NFILES"]), g(file_bytes), E["LM_WDTYPE"],
      "written in %s s" % E["LM_CREATED_S"] if E["LM_CREATED_S"] else "already there"))
print("parameters: %d (%s), %s as %s" % (params, ", ".join("%s %d" % kv for kv in comps.items()), g(param_bytes), E["LM_DTYPE"]))
print("context:    idle (inspect tiny-sd1) peak RSS %s (anon %s + file %s); tiny-sd1 generate peak RSS %s" %
      (g(idle["ru_maxrss"]), g(idle_pl.get("anon")), g(idle_pl.get("file")), g(tiny["ru_maxrss"])))
print()
print("  run  load s  peak RSS | sampled until loaded: peak RSS = anon + file (at), max anon | after loaded: peak RSS = anon + file")
for i, r in enumerate(rs, 1):
    a, b = r["sampled_peak_until_loaded"] or {}, r["sampled_peak_after_loaded"] or {}
    print("  %3d  %6.2f  %s |  %s = %s + %s (%.1f s), %s | %s = %s + %s" % (
        i, r["load_s"], g(r["ru_maxrss"]), g(a.get("rss")), g(a.get("anon")), g(a.get("file")), a.get("t_s", 0),
        g(a.get("max_anon")), g(b.get("rss")), g(b.get("anon")), g(b.get("file"))))
print()
print("peak RSS (max of %d runs, ru_maxrss):   %s" % (runs, g(peak)))
print("%s weight bytes (2 x parameters):     %s" % (E["LM_DTYPE"], g(param_bytes)) if dtype_bytes == 2 else
      "%s weight bytes (%d x parameters):     %s" % (E["LM_DTYPE"], dtype_bytes, g(param_bytes)))
print("ratio peak RSS / weight bytes:          %.2fx  (goal <= %sx: %s)" % (ratio, E["LM_GOAL"], "met" if report["goal_met"] else "NOT met"))
max_anon = max((r["sampled_peak_until_loaded"] or {}).get("max_anon", 0) for r in rs)
report["sampled_max_anon_until_loaded"] = max_anon
floor = peak_run.get("file_floor_until_loaded")
floor_from = "this process's least RssFile while loading"
if floor is None:
    floor, floor_from = idle_pl.get("file") or 0, "the idle process's RssFile"
report["peak_split"] = {"anon": pl.get("anon"), "file": pl.get("file"), "file_floor": floor,
                        "mapped_weight_pages": (pl["file"] - floor) if pl else None}
if pl:
    print("  at the sampled peak: anon %s + file %s, of which about %s are weight-file pages (file minus %s, %s)" % (
          g(pl["anon"]), g(pl["file"]), g(pl["file"] - floor), g(floor), floor_from))
print("peak RssAnon while loading (sampled):   %s = %.2fx the weight bytes (file-backed pages left out)" % (g(max_anon), max_anon / param_bytes))
print("load s (best of %d; all: %s):     %.2f s" % (runs, ", ".join("%.2f" % r["load_s"] for r in rs), load_best))
print("load speed, file bytes / load s:        %.2f GB/s  (%s of %s files)" % (report["file_gb_per_s"], g(file_bytes), E["LM_WDTYPE"]))
print("load speed, parameter bytes / load s:   %.2f GB/s" % report["param_gb_per_s"])
print()
print("commands:")
print("  idle:  " + shlex.join(idle["cmd"]))
print("  tiny:  " + shlex.join(tiny["cmd"]))
print("  load:  " + shlex.join(rs[0]["cmd"]))
print("(GB = 1e9 bytes; RSS counts file-backed pages of mapped files, e.g. safetensors mmaps, as RssFile; "
      "the temporary prompts and output paths are removed afterwards)")
if E["LM_JSON"]:
    with open(E["LM_JSON"], "w") as f:
        json.dump(report, f, indent=1)
    print("wrote " + E["LM_JSON"])
PY
