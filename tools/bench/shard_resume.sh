#!/usr/bin/env bash
# A --layout webdataset run's planning and resume overhead at scale (issue 27, "Measured"): N items
# (default 1,000,000) made by `dpinfer launch --nproc-per-node 2` of the test worker, whose fake
# pipeline (tests/support/fake_pipeline.cpp: 16x8 images, no model) is a build-tree test binary,
# never installed, so that the numbers are dpinfer's own bookkeeping: planning, manifests, shards,
# indexes and the merge. Shards of 1000. Prints, each with its wall time:
#   full     the whole run, and its rate;
#   noop     the same command again with nothing left to make: planning, resume and the end-of-run merge;
#   merge    `dpinfer merge` alone on that output (metadata.jsonl, failures.jsonl, index.parquet);
#   resume   a second output whose launcher is killed (SIGKILL) once half the items are recorded, then
#            the same command again: its wall time, and its overhead: that time less what the missing
#            items cost at the full run's rate.
# Run it on an idle machine; it says which one it ran on. It needs about 2 GB of disk per million items.
# Usage: tools/bench/shard_resume.sh [N] [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
n="${1:-1000000}"
build="${2:-$root/build/default}"
dpinfer="$build/tools/dpinfer"
worker="$build/tests/dpinfer_test_worker"
[ -x "$dpinfer" ] && [ -x "$worker" ] || cmake --build "$build" --target dpinfer dpinfer_test_worker
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg); $n items"
seq 1 "$n" | sed 's/^/prompt number /' > "$work/p.txt"
now() { date +%s%N; }
ms() { echo $(( ($2 - $1) / 1000000 )); }
run() {  # run OUT: the launch, its stderr in OUT.log
  CUDA_VISIBLE_DEVICES= "$dpinfer" launch --nproc-per-node 2 -- "$worker" generate "$work/p.txt" --out "$work/$1" \
    --layout webdataset --shard-size 1000 2>> "$work/$1.log"
}
recorded() { cat "$work/$1"/manifest*.jsonl 2>/dev/null | wc -l; }

t0=$(now); run full; t1=$(now)
full_ms=$(ms "$t0" "$t1")
echo "full:   $full_ms ms ($(( n * 1000 / (full_ms + 1) )) items/s)"
t0=$(now); run full; t1=$(now)
echo "noop:   $(ms "$t0" "$t1") ms (nothing to make)"
t0=$(now); "$dpinfer" merge "$work/full" 2>> "$work/merge.log"; t1=$(now)
echo "merge:  $(ms "$t0" "$t1") ms (metadata.jsonl and index.parquet of $n rows)"
rm -rf "$work/full"

# Killed at half way, then resumed.
(run killed) &
launcher=$!
while [ "$(recorded killed)" -lt $(( n / 2 )) ]; do sleep 0.2; done
pkill -KILL -P "$launcher" -x dpinfer 2>/dev/null || true
wait "$launcher" 2>/dev/null || true
sleep 1
done_at_kill=$(recorded killed)
t0=$(now); run killed; t1=$(now)
resume_ms=$(ms "$t0" "$t1")
left=$(( n - done_at_kill ))
cost_ms=$(( left * full_ms / n ))
echo "resume: $resume_ms ms after a kill with $done_at_kill records; making the $left others costs about $cost_ms ms at the full run's rate, so the resume's overhead is about $(( resume_ms - cost_ms )) ms"
ls "$work/killed"/*.tar | wc -l | sed 's/^/shards: /'
