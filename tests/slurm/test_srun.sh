#!/usr/bin/env bash
# The two ways to run one data-parallel world under srun, each inside its own batch
# allocation (sbatch, waiting for the end), with the real worker (tiny pipeline, CPU):
#   1. srun -n2 dpinfer generate ...: one task per rank; each worker takes its rank,
#      world size and master from SLURM_PROCID/NTASKS/nodelist/SLURM_JOB_ID.
#   2. srun -N1 -n1 dpinfer launch --nproc-per-node 2 ...: one launcher per node, which
#      takes the node layout from the step and starts two workers (torchrun variables).
# Both must form one world of 2: manifest.rank0.jsonl and manifest.rank1.jsonl, every
# item exactly once, metadata.jsonl complete, run.json naming the job.
source "$(dirname "$0")/lib.sh"
: "${DPINFER_TINY_MODEL:?}"

items=7
write_prompts "$work/prompts.txt" $items
gen_args="--model '$DPINFER_TINY_MODEL' --steps 2 --device cpu --verbose"

# run_batch NAME BODY SBATCH_ARGS...: submits BODY as a batch script, waits for it (polling:
# `sbatch --wait` polls with a back-off of up to 10 s) and fails unless it COMPLETED.
run_batch() {
  local name="$1" body="$2"
  shift 2
  printf '#!/bin/bash\nset -e\n%s\n' "$body" >"$work/$name.sh"
  local job state
  job="$(submit --output="$work/$name.log" "$@" "$work/$name.sh")"
  state="$(wait_job_end "$job" 180)"
  [ "$state" = COMPLETED ] || fail "$name: job $job ended $state, exit code $(job_field "$job" ExitCode)"
  echo "$job"
}

# check_world NAME OUT JOB RANK_SOURCE
check_world() {
  local name="$1" out="$2" job="$3" source="$4" counts
  # 7 items over 2 ranks: 4 and 3, so neither rank generated nothing.
  counts="$(check_outputs "$out" --items $items --manifests 'manifest*.jsonl' --metadata \
    --expect-manifests manifest.rank0.jsonl,manifest.rank1.jsonl --counts 3,4)"
  say "$name: items per manifest: $counts"
  check_json "$out/run.json" /world_size=2 "/rank_source=$source" "/slurm/job_id=$job"
  grep -q "SLURM job $job" "$work/$name.log" || fail "$name: rank 0 did not log 'SLURM job $job'"
}

say "pattern 1: sbatch -n2, srun -n2 dpinfer generate"
job="$(run_batch srun_generate "srun -n2 '$DPINFER_BIN' generate '$work/prompts.txt' --out '$work/out1' $gen_args" -n2)"
check_world srun_generate "$work/out1" "$job" slurm
for r in 0 1; do
  grep -q "rank $r/2 (slurm)" "$work/srun_generate.log" || fail "srun_generate: no 'rank $r/2 (slurm)': the ranks did not come from SLURM"
done

say "pattern 2: sbatch -N1 -n1 -c2, srun -N1 -n1 dpinfer launch --nproc-per-node 2"
job="$(run_batch srun_launch "srun -N1 -n1 '$DPINFER_BIN' launch -v --nproc-per-node 2 '$work/prompts.txt' --out '$work/out2' $gen_args" -N1 -n1 -c2)"
check_world srun_launch "$work/out2" "$job" torchrun
grep -q "inside SLURM step" "$work/srun_launch.log" || fail "srun_launch: the launcher did not see the SLURM step"
grep -q "world size 2" "$work/srun_launch.log" || fail "srun_launch: the launcher did not start a world of 2"
for r in 0 1; do
  grep -q "rank $r/2 (torchrun)" "$work/srun_launch.log" || fail "srun_launch: no 'rank $r/2 (torchrun)'"
done
say "ok"
