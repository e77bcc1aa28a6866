#!/usr/bin/env bash
# sbatch --array=0-2 --wait: three array tasks run `dpinfer generate` (the real worker,
# tiny pipeline, CPU) over 7 prompts; each task takes its outer shard from
# SLURM_ARRAY_TASK_*; `dpinfer merge` then writes metadata.jsonl. Every item must be
# generated exactly once across the three tasks' manifests.
source "$(dirname "$0")/lib.sh"
: "${DPINFER_TINY_MODEL:?}"

write_prompts "$work/prompts.txt" 7
cat >"$work/job.sh" <<JOB
#!/bin/bash
exec "$DPINFER_BIN" generate "$work/prompts.txt" --out "$work/out" --model "$DPINFER_TINY_MODEL" --steps 2 --device cpu
JOB

say "sbatch --array=0-2 --wait"
set +e
job="$(timeout 240 sbatch --parsable --wait --array=0-2 --output="$work/task-%A_%a.log" "$work/job.sh" 2>"$work/sbatch.err")"
rc=$?
set -e
job="${job%%;*}"
[ -n "$job" ] && submitted+=("$job")
[ $rc -eq 0 ] || fail "sbatch --wait exited with $rc (the highest exit status of the tasks, or 124: timeout): $(cat "$work/sbatch.err")"
for t in 0 1 2; do
  [ "$(job_field "${job}_$t" JobState)" = COMPLETED ] || fail "array task ${job}_$t is $(job_field "${job}_$t" JobState)"
done

say "dpinfer merge"
"$DPINFER_BIN" merge "$work/out" >"$work/merge.log" 2>&1 || fail "dpinfer merge exited with $?: $(cat "$work/merge.log")"

# 7 over 3 contiguous shards: 3, 2, 2 (or some order of them): never an empty task.
counts="$(check_outputs "$work/out" --items 7 --manifests 'manifest.shard*-of-3.*' --metadata \
  --expect-manifests manifest.shard0-of-3.rank0.jsonl,manifest.shard1-of-3.rank0.jsonl,manifest.shard2-of-3.rank0.jsonl --counts 2,2,3)"
say "items per manifest: $counts"
# run.json records the SLURM job (the last task to finish wrote it).
check_json "$work/out/run.json" "/slurm/array_job_id=$job" "/slurm/array_task_id=0|1|2" /slurm/restart_count=0
grep -q "SLURM job .*(array task ${job}_" "$work"/task-*.log || fail "no task logged its SLURM job"
say "ok"
