#!/usr/bin/env bash
# Preemption and requeue, for real: a running job gets the signal SLURM sends before a
# time limit or a preemption, its worker stops after the current item, flushes its
# manifest and, with --requeue-on-signal, runs `scontrol requeue` itself; SLURM runs the
# job again (SLURM_RESTART_COUNT=1) and the second run skips what the first one made.
# The fake-pipeline worker (DPINFER_FAKE_DELAY_MS per image) makes the runs slow enough
# to signal mid-way. Two shapes of job here (test_requeue_launch.sh has the third):
#   A. a plain batch job that `exec`s the worker; SIGUSR1 to the batch step
#      (scancel --batch --signal=USR1: what --signal=B:USR1@N sends);
#   B. a task of tools/slurm/array.sbatch, the shipped example, likewise with SIGUSR1;
# Each time: Restarts=1, the second run logs "restart 1", every item is made exactly
# once across the two runs, and the PNGs of the first run are untouched (same inode and
# mtime) by the second.
#
# A requeued job is not held (`scontrol requeue`, unlike `requeuehold`, leaves it
# eligible); it waits in PENDING (Reason=BeginTime) for a few seconds, because slurmctld
# delays a requeued job's start by its credential lifetime (cred_expire: 5 s in the local
# cluster, 120 s by default). Should a job ever come back held, the test releases it and
# says so.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/requeue_lib.sh"

items=16
write_prompts "$work/prompts.txt" $items

# ---- A: a plain batch job, `exec`, SIGUSR1 to the batch step -------------------------
cat >"$work/a.sh" <<JOB
#!/bin/bash
exec "$DPINFER_TEST_WORKER" generate "$work/prompts.txt" --out "$work/a" --requeue-on-signal
JOB
say "A: sbatch --requeue (exec dpinfer generate --requeue-on-signal)"
job="$(submit --requeue --open-mode=append --output="$work/a.log" "$work/a.sh")"
preempt A "$job" manifest.rank0.jsonl "manifest.rank0.jsonl" "$work/a" "$work/a.log" $items scancel --batch --signal=USR1 "$job"
check_outputs "$work/a" --items $items --expect-manifests manifest.rank0.jsonl >/dev/null
grep -q "stopped by SIGUSR1" "$work/a.log" || fail "A: the worker did not see SIGUSR1"

# ---- B: tools/slurm/array.sbatch, task 1 of 2 -----------------------------------------
say "B: sbatch --array=0-1 tools/slurm/array.sbatch"
job="$(DPINFER="$work/bin/dpinfer" DPINFER_PROMPTS="$work/prompts.txt" DPINFER_OUT="$work/b" \
  submit --array=0-1 --cpus-per-task=1 --output="$work/b-%a.log" "$examples/array.sbatch")"
preempt B "${job}_1" manifest.shard1-of-2.rank0.jsonl "manifest.shard1-of-2.*" "$work/b" "$work/b-1.log" $((items / 2)) \
  scancel --batch --signal=USR1 "${job}_1"
[ "$(wait_job_end "${job}_0" 60)" = COMPLETED ] || fail "B: task ${job}_0 did not complete"
[ "$(job_field "${job}_0" Restarts)" = 0 ] || fail "B: task ${job}_0 was requeued too"
grep -q "array task ${job}_1 .*restart 1" "$work/b-1.log" || fail "B: array.sbatch's second run did not say 'restart 1'"
check_outputs "$work/b" --items $items \
  --expect-manifests manifest.shard0-of-2.rank0.jsonl,manifest.shard1-of-2.rank0.jsonl >/dev/null

say "ok"
