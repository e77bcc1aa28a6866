#!/usr/bin/env bash
# The shipped example scripts, tools/slurm/*.sbatch, submitted as they are (their paths
# and sizes overridden through their environment variables and sbatch options) with the
# real worker (tiny pipeline, CPU):
#   array.sbatch      --array=0-2: three shards, then `dpinfer merge` and `dpinfer status`;
#   multinode.sbatch  --nodes=1 (the local cluster has one node), DPINFER_NPROC=2: one
#                     launcher under srun, one world of two workers.
# Their preemption path is in test_requeue.sh and test_requeue_launch.sh.
source "$(dirname "$0")/lib.sh"
: "${DPINFER_TINY_MODEL:?}"
examples="$(cd "$slurm_tests_dir/../../tools/slurm" && pwd)"

for f in array.sbatch multinode.sbatch; do
  bash -n "$examples/$f" || fail "$f: bash -n"
  grep -q '^#SBATCH --requeue' "$examples/$f" || fail "$f has no #SBATCH --requeue"
done

items=7
write_prompts "$work/prompts.txt" $items
export DPINFER="$DPINFER_BIN" DPINFER_PROMPTS="$work/prompts.txt" DPINFER_MODEL="$DPINFER_TINY_MODEL" \
  DPINFER_ARGS="--steps 2 --device cpu"

# sbatch_wait NAME ARGS...: sbatch, then waits for the job's end (polling: `sbatch --wait`
# polls with a back-off of up to 10 s); prints the job id. An array's tasks are waited for
# one by one with wait_tasks.
sbatch_wait() {
  local name="$1" job state
  shift
  job="$(submit "$@")"
  if [ "$name" != array ]; then
    state="$(wait_job_end "$job" 180)"
    [ "$state" = COMPLETED ] || fail "$name: job $job ended $state, exit code $(job_field "$job" ExitCode)"
  fi
  echo "$job"
}

say "array.sbatch --array=0-2"
job="$(DPINFER_OUT="$work/array" sbatch_wait array --array=0-2 --cpus-per-task=1 --output="$work/array-%a.log" \
  "$examples/array.sbatch")"
for t in 0 1 2; do
  state="$(wait_job_end "${job}_$t" 180)"
  [ "$state" = COMPLETED ] || fail "array task ${job}_$t is $(job_field "${job}_$t" JobState)"
  grep -q "SLURM job .*(array task ${job}_$t)" "$work/array-$t.log" || fail "task $t did not log its array task"
done
"$DPINFER_BIN" merge "$work/array" >"$work/merge.log" 2>&1 || fail "dpinfer merge exited with $?: $(cat "$work/merge.log")"
"$DPINFER_BIN" status "$work/array" --prompts "$work/prompts.txt" --model "$DPINFER_TINY_MODEL" --steps 2 \
  >"$work/status.log" 2>&1 || fail "dpinfer status exited with $?: $(cat "$work/status.log")"
counts="$(check_outputs "$work/array" --items $items --manifests 'manifest.shard*-of-3.*' --metadata \
  --expect-manifests manifest.shard0-of-3.rank0.jsonl,manifest.shard1-of-3.rank0.jsonl,manifest.shard2-of-3.rank0.jsonl)"
say "array.sbatch: items per manifest: $counts"

say "multinode.sbatch --nodes=1 --gpus-per-node=2, DPINFER_NPROC=2"
job="$(DPINFER_OUT="$work/multinode" DPINFER_NPROC=2 sbatch_wait multinode --nodes=1 --gpus-per-node=2 \
  --cpus-per-task=2 --output="$work/multinode.log" "$examples/multinode.sbatch")"
[ "$(job_field "$job" JobState)" = COMPLETED ] || fail "multinode job $job is $(job_field "$job" JobState)"
counts="$(check_outputs "$work/multinode" --items $items --metadata \
  --expect-manifests manifest.rank0.jsonl,manifest.rank1.jsonl)"
say "multinode.sbatch: items per manifest: $counts"
check_json "$work/multinode/run.json" /world_size=2 /rank_source=torchrun "/slurm/job_id=$job"
say "ok"
