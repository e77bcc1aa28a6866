#!/usr/bin/env bash
# Preemption and requeue of the launcher pattern: tools/slurm/multinode.sbatch on one
# node (srun, one `dpinfer launch`, 2 workers of the fake pipeline), SIGTERM to the step's
# tasks (scancel --signal=TERM: what --signal=TERM@N sends before the time limit). The
# launcher forwards it, both workers stop after their current item, rank 0 requeues the
# job, and the second run (restart 1) makes the rest: every item exactly once, no item
# failed, the first run's PNGs untouched. See test_requeue.sh for the details.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/requeue_lib.sh"

items=16
write_prompts "$work/prompts.txt" $items

# ---- C: tools/slurm/multinode.sbatch on one node, 2 workers, SIGTERM to the step ------
say "C: sbatch --nodes=1 tools/slurm/multinode.sbatch (srun dpinfer launch --nproc-per-node 2)"
job="$(DPINFER="$work/bin/dpinfer" DPINFER_PROMPTS="$work/prompts.txt" DPINFER_OUT="$work/c" DPINFER_NPROC=2 \
  submit --nodes=1 --gpus-per-node=2 --cpus-per-task=2 --output="$work/c.log" "$examples/multinode.sbatch")"
preempt C "$job" manifest.rank0.jsonl "manifest.rank*.jsonl" "$work/c" "$work/c.log" $items scancel --signal=TERM "$job"
grep -q "stopped by SIGTERM" "$work/c.log" || fail "C: the workers did not see SIGTERM"
# An item whose PNG and "ok" record were written must never get an "error" record after
# them (then the merge keeps the error, and resume skips the item for its PNG).
"$DPINFER_SLURM_CHECK" no-error-after-ok "$work/c" || fail "C: an item was recorded ok and then failed (see above): \
a peer's store update after its item was recorded must not turn into a failed item when rank 0 stops first"
check_outputs "$work/c" --items $items --expect-manifests manifest.rank0.jsonl,manifest.rank1.jsonl >/dev/null
say "ok"
