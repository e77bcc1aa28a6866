#!/usr/bin/env bash
# sbatch --array=0-2 --wait: three array tasks run `dpinfer generate` (the real worker,
# tiny pipeline, CPU) over 7 prompts; each task takes its outer shard from
# SLURM_ARRAY_TASK_*; `dpinfer merge` then writes metadata.jsonl. Every item must be
# generated exactly once across the three tasks' manifests. Then the same with two
# array tasks of two ranks each (srun -n2): shards first, ranks inside each shard.
source "$(dirname "$0")/lib.sh"
: "${DPINFER_TINY_MODEL:?}"

write_prompts "$work/prompts.txt" 7
cat >"$work/job.sh" <<JOB
#!/bin/bash
exec "$DPINFER_BIN" generate "$work/prompts.txt" --out "$work/out" --model "$DPINFER_TINY_MODEL" --steps 2 --device cpu
JOB

# array_wait SBATCH_ARGS...: submits an array and waits for all its tasks (sbatch
# --wait exits with their highest status); prints the array's job id.
array_wait() {
  local out rc
  set +e
  out="$(timeout 240 sbatch --parsable --wait "$@" 2>"$work/sbatch.err")"
  rc=$?
  set -e
  out="${out%%;*}"
  [ -z "$out" ] || echo "$out" >>"$work/.jobs"  # for the cleanup (this runs in a subshell)
  [ $rc -eq 0 ] || fail "sbatch --wait $* exited with $rc (the highest exit status of the tasks, or 124: timeout): $(cat "$work/sbatch.err")"
  echo "$out"
}

say "sbatch --array=0-2 --wait"
job="$(array_wait --array=0-2 --output="$work/task-%A_%a.log" "$work/job.sh")"
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

# Items go to the array tasks first, then to the ranks inside each task: two tasks of
# two ranks each (srun -n2 dpinfer generate), each task a world of its own, with its
# own store port (derived from its own job id).
cat >"$work/job2.sh" <<JOB
#!/bin/bash
srun -n2 "$DPINFER_BIN" generate "$work/prompts.txt" --out "$work/out2" --model "$DPINFER_TINY_MODEL" --steps 2 --device cpu
JOB
say "sbatch --array=0-1 -n2 --wait (srun -n2 in each task)"
array_wait --array=0-1 -n2 --output="$work/task2-%A_%a.log" "$work/job2.sh" >/dev/null
"$DPINFER_BIN" merge "$work/out2" >"$work/merge2.log" 2>&1 || fail "dpinfer merge exited with $?: $(cat "$work/merge2.log")"
# 7 items: shard 0/2 has 4 (2 + 2 over its ranks), shard 1/2 has 3 (2 + 1).
counts="$(check_outputs "$work/out2" --items 7 --manifests 'manifest.shard*-of-2.*' --metadata --counts 1,2,2,2 \
  --expect-manifests manifest.shard0-of-2.rank0.jsonl,manifest.shard0-of-2.rank1.jsonl,manifest.shard1-of-2.rank0.jsonl,manifest.shard1-of-2.rank1.jsonl)"
say "two ranks per task: items per manifest: $counts"
check_json "$work/out2/run.json" /world_size=2 /rank_source=slurm
say "ok"
