#!/usr/bin/env bash
# Qwen-Image-Edit's vision tower (Qwen2.5-VL 7B's, 676.6 M parameters) at its real shape on the CPU (issue 29): its
# load and, per input image, its forward time and peak memory, dpinfer against transformers measured in the same
# run. dpinfer_bench --vision-tower loads it through the pipeline's own load_qwen2_5_vl_vision() and runs the image
# processor and the tower; tools/bench/vision_tower_peer.py runs transformers' Qwen2_5_VisionTransformerPretrainedModel
# (sdpa) on the same random weights and the same image through Qwen2VLImageProcessorFast. Each side is a fresh
# process; the figures are RSS above the process's own baseline (its RSS before the load: the libraries), so
# Python's imports do not count against transformers. The two sides alternate, RUNS times; medians are printed.
#
#   tools/bench/vision_tower_memory.sh [--bench PATH] [--python PATH] [--shape DIR] [--weights DIR]
#       [--dtype bf16] [--sizes 384,1024] [--runs 1]
#
# Defaults: build/default/tools/bench/dpinfer_bench, tools/fixtures/.venv/bin/python (torch, transformers,
# torchvision), configs/models/qwen-image-edit-shape, the weights in ${TMPDIR:-/tmp}/dpinfer-qwen2.5-vl-vision-<dtype>
# (1.35 GB in bf16, written by dpinfer_bench when missing, then kept). 384 is the Plus pipeline's condition image
# (384² pixels), 1024 the Edit pipeline's (its VAE image, about 1024²). Needs bash and python3.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bench="$root/build/default/tools/bench/dpinfer_bench"
python="$root/tools/fixtures/.venv/bin/python"
shape="$root/configs/models/qwen-image-edit-shape"
weights=""
dtype=bf16
sizes=384,1024
runs=1
usage() { sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) bench="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --shape) shape="$(cd "$2" && pwd)"; shift 2 ;;
    --weights) weights="$2"; shift 2 ;;
    --dtype) dtype="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "vision_tower_memory: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$bench" ] || { echo "vision_tower_memory: $bench is missing; build first or pass --bench" >&2; exit 2; }
[ -x "$python" ] || { echo "vision_tower_memory: $python is missing; run tools/fixtures/setup_venv.sh or pass --python" >&2; exit 2; }
case "$runs" in ''|*[!0-9]*|0) echo "vision_tower_memory: --runs wants a positive integer, got '$runs'" >&2; exit 2 ;; esac
weights="${weights:-${TMPDIR:-/tmp}/dpinfer-qwen2.5-vl-vision-$dtype}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# dpinfer_bench writes the weights when they are missing or of another shape or dtype (and then measures nothing);
# the measuring calls reuse them.
if ! grep -qs "\"weights_dtype\": \"$dtype\"" "$weights/dpinfer_bench.json" ||
   ! grep -qs "\"shape\": \"$shape\"" "$weights/dpinfer_bench.json"; then
  "$bench" --vision-tower --shape "$shape" --model-dir "$weights" --weights-dtype "$dtype" --dtype "$dtype" \
    --vision-sizes "$sizes"
fi

echo "== Qwen2.5-VL vision tower at its real shape ($shape), $dtype on the CPU, images $sizes, $runs run(s) each"
echo "   machine $(hostname), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$runs"); do
  "$bench" --vision-tower --shape "$shape" --model-dir "$weights" --weights-dtype "$dtype" --dtype "$dtype" \
    --vision-sizes "$sizes" | grep '^{' > "$work/dpinfer.$i.jsonl"
  "$python" "$root/tools/bench/vision_tower_peer.py" --shape "$shape" --weights "$weights" --dtype "$dtype" \
    --sizes "$sizes" 2>/dev/null | grep '^{' > "$work/transformers.$i.jsonl"
done
echo "   load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work" "$runs" <<'PY'
import json, statistics, sys
work, runs = sys.argv[1], int(sys.argv[2])
def read(side):
    out = []
    for i in range(1, runs + 1):
        with open(f"{work}/{side}.{i}.jsonl") as f:
            out.append([json.loads(line) for line in f])
    return out
sides = {s: read(s) for s in ("dpinfer", "transformers")}
def median(side, pick):
    return statistics.median(pick(run) for run in sides[side])
def row(name, pick, unit, fmt="{:.2f}"):
    d, t = median("dpinfer", pick), median("transformers", pick)
    ratio = f"{d / t:.2f}" if t > 0 else "-"
    print(f"  {name:<44} {fmt.format(d):>10} {fmt.format(t):>13} {ratio:>7}  {unit}")
load = lambda run: run[0]
print(f"  {'':<44} {'dpinfer':>10} {'transformers':>13} {'ratio':>7}")
row("parameters (M)", lambda r: load(r)["parameters"] / 1e6, "", "{:.1f}")
row("load time", lambda r: load(r)["load_s"], "s")
row("RSS after the load, above the baseline", lambda r: load(r)["rss_after_gb"] - load(r)["rss_before_gb"], "GB")
forwards = [e for e in sides["dpinfer"][0] if e["event"] == "forward"]
for k, e in enumerate(forwards, start=1):
    fwd = lambda r, k=k: r[k]
    label = f"{e['edge']}² image ({e['resized'][0]}x{e['resized'][1]}, {e['patches']} patches, {e['tokens']} tokens)"
    print(f"  {label}")
    row("  forward time", lambda r: fwd(r)["forward_s"], "s")
    row("  peak RSS so far, above the baseline", lambda r: fwd(r)["peak_rss_gb"] - load(r)["rss_before_gb"], "GB")
    for side in sides:
        for run in sides[side]:
            if not run[k]["finite"]:
                print(f"  warning: {side}'s output at {e['edge']} is not finite")
            if run[k]["tokens"] != e["tokens"]:
                print(f"  warning: {side} made {run[k]['tokens']} tokens, dpinfer {e['tokens']}")
print("  (transformers' RSS after the load counts only the pages its memory-mapped weights have read; its forward reads"
      " the rest, so compare the peaks)")
PY
