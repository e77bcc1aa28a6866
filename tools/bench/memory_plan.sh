#!/usr/bin/env bash
# The memory plan's estimates against the measured peaks (issue 26 item 6): `dpinfer-worker generate` with
# --max-device-memory (a budget large enough that the plan keeps everything resident) on a random-weight
# diffusers directory, one prompt, one step, at each --sizes, on the CPU. run.json then holds the plan's
# estimate of each phase (weights + activations) and the counting allocator's peak of each phase
# (pipeline/device_memory.h), which this prints side by side, with the process's peak RSS (/usr/bin/time).
# The activation coefficients of src/pipeline/memory_plan.cpp come from these runs: the slope of each
# phase's measured activations (its peak less the weights) between two sizes.
#
#   tools/bench/memory_plan.sh --model-dir DIR [--dpinfer-worker PATH] [--dtype bf16] [--sizes 256,512]
#       [--budget 100] [--steps 1] [--extra "ARGS"]
#
# DIR is a complete diffusers directory: tools/bench/load_memory.sh writes one for a shape (for example
# /tmp/dpinfer-flux-dev-shape-L2S4-bf16, docs/models/flux.md#memory). Needs /usr/bin/time and python3
# (standard library only). Prints a table; nothing is asserted.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
worker="$root/build/default/tools/dpinfer-worker"
model=""
dtype="bf16"
sizes="256,512"
budget="100"
steps=1
extra=""
usage() { sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dpinfer-worker) worker="$2"; shift 2 ;;
    --model-dir) model="$2"; shift 2 ;;
    --dtype) dtype="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --extra) extra="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "memory_plan: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$model" ] || { echo "memory_plan: --model-dir is required (see --help)" >&2; exit 2; }
[ -x "$worker" ] || { echo "memory_plan: $worker is missing; build first or pass --dpinfer-worker" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "memory_plan: needs /usr/bin/time (apt install time)" >&2; exit 2; }
py=/usr/bin/python3
[ -x "$py" ] || py="$(command -v python3)"
work="$(mktemp -d "${TMPDIR:-/tmp}/dpinfer-memory-plan.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "a red circle" > "$work/prompt.txt"
echo "# $(date -u +%FT%TZ) on $(uname -n): $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, $("$(dirname "$worker")/dpinfer" --version 2>/dev/null | head -1)"
echo "# model $model, --dtype $dtype, --steps $steps, --max-device-memory $budget $extra"
for size in ${sizes//,/ }; do
  out="$work/out-$size"
  # shellcheck disable=SC2086
  /usr/bin/time -f "%M" -o "$work/rss-$size" "$worker" generate "$work/prompt.txt" --model "$model" --out "$out" \
    --steps "$steps" --dtype "$dtype" --width "$size" --height "$size" --max-device-memory "$budget" $extra \
    > "$work/log-$size" 2>&1 || { cat "$work/log-$size" >&2; exit 1; }
  "$py" - "$out/run.json" "$(cat "$work/rss-$size")" "$size" <<'EOF'
import json, sys
plan = json.load(open(sys.argv[1]))["memory_plan"]
rss_kib, size = int(sys.argv[2]), sys.argv[3]
measured = plan.get("measured_peak_bytes_by_phase", {})
print(f"\n{size}x{size}: plan '{plan['levers']}', peak RSS {rss_kib * 1024 / 1e9:.3f} GB")
print(f"  {'phase':<8} {'estimate':>10} {'measured':>10} {'est. act.':>10} {'meas. act.':>10} {'ratio':>6}")
for phase in ("encode", "denoise", "decode"):
    est = plan[phase]["weights_bytes"] + plan[phase]["activations_bytes"]
    got = measured.get(phase, 0)
    act = plan[phase]["activations_bytes"]
    got_act = got - plan[phase]["weights_bytes"]
    print(f"  {phase:<8} {est / 1e9:>9.3f}G {got / 1e9:>9.3f}G {act / 1e6:>9.1f}M {got_act / 1e6:>9.1f}M "
          f"{est / got if got else 0:>6.3f}")
print(f"  {'run':<8} {plan['peak_bytes'] / 1e9:>9.3f}G {plan['measured_peak_bytes'] / 1e9:>9.3f}G"
      f"{'':>22} {plan['peak_bytes'] / plan['measured_peak_bytes']:>6.3f}")
EOF
done
