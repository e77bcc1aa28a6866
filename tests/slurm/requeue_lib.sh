# shellcheck shell=bash
# Sourced by test_requeue.sh and test_requeue_launch.sh, after lib.sh: a `dpinfer` whose
# dpinfer-worker is the fake-pipeline worker, and preempt(), which signals a running
# job, waits for its requeue and second run, and checks that the second run resumed.
: "${DPINFER_TEST_WORKER:?set by ctest}"
examples="$(cd "$slurm_tests_dir/../../tools/slurm" && pwd)"

# `dpinfer` with the fake worker as its dpinfer-worker: the launcher finds the worker
# next to its own executable (/proc/self/exe), so the launcher is copied, not linked.
mkdir -p "$work/bin"
cp "$DPINFER_BIN" "$work/bin/dpinfer"
ln -sf "$DPINFER_TEST_WORKER" "$work/bin/dpinfer-worker"
export DPINFER_FAKE_DELAY_MS=400

# snapshot OUT GLOB FILE: name, inode and mtime_ns of the PNG of every item recorded in
# the manifests OUT/GLOB (this job's own; an array's other tasks share OUT)
snapshot() {
  "$DPINFER_SLURM_CHECK" snapshot "$1" "$2" >"$3" || fail "slurm_check snapshot $1 $2"
}

state_of() { job_field "$1" JobState; }
requeued() {  # JOB: requeued once, and the first run is over (pending again)
  [ "$(job_field "$1" Restarts)" = 1 ] && [ "$(state_of "$1")" = PENDING ]
}
has_lines() { [ "$(manifest_lines "$1")" -ge "$2" ]; }

# preempt NAME JOB MANIFEST GLOB OUT LOG ITEMS SIGNAL_CMD...: waits for 2 items in
# OUT/MANIFEST, signals, waits for the requeue and the second run's end, and checks both
# runs; GLOB: the job's manifests in OUT, ITEMS: the job's items.
preempt() {
  local name="$1" job="$2" manifest="$5/$3" glob="$4" out="$5" log="$6" items="$7"
  shift 7
  wait_until 60 "$name: job $job to make 2 items ($manifest)" has_lines "$manifest" 2
  say "$name: $(manifest_lines "$manifest") item(s) done; $*"
  "$@" || fail "$name: $* failed"
  wait_until 60 "$name: job $job to be requeued (Restarts=1)" requeued "$job"
  snapshot "$out" "$glob" "$work/$name.before"
  say "$name: requeued, $(wc -l <"$work/$name.before") PNG(s) from the first run; state $(state_of "$job"), reason $(job_field "$job" Reason)"
  case "$(job_field "$job" Reason)" in
    *Held*)
      say "$name: the requeued job is held; releasing it"
      scontrol release "$job"
      ;;
  esac
  local state
  state="$(wait_job_end "$job" 120)"
  [ "$state" = COMPLETED ] || fail "$name: job $job ended $state after its requeue"
  [ "$(job_field "$job" Restarts)" = 1 ] || fail "$name: job $job has Restarts=$(job_field "$job" Restarts), expected 1"

  # The first run stopped on the signal and requeued; the second one resumed.
  grep -q "stopped by SIG" "$log" || fail "$name: the first run did not log its stop by the signal"
  grep -q "requeueing SLURM job" "$log" || fail "$name: rank 0 did not requeue the job"
  grep -q "SLURM job .*, restart 1" "$log" || fail "$name: the second run did not log 'restart 1'"
  local second skipped generated
  second="$(sed -n '/SLURM job .*, restart 1/,$p' "$log")"
  skipped="$(printf '%s\n' "$second" | sed -n 's/.*skipped \([0-9]*\) item(s) whose PNG exists.*/\1/p' | awk '{s+=$1} END {print s+0}')"
  generated="$(printf '%s\n' "$second" | sed -n 's/.*done: \([0-9]*\) generated, \([0-9]*\) skipped.*/\1 \2/p')"
  say "$name: second run: $generated (generated skipped); per-rank skip lines sum to $skipped"
  local before
  before="$(wc -l <"$work/$name.before")"
  [ -n "$generated" ] || fail "$name: the second run logged no 'done:' summary"
  read -r gen skip <<<"$generated"
  [ "$skip" -ge "$before" ] || fail "$name: the second run skipped $skip item(s), but $before PNG(s) existed"
  [ $((gen + skip)) -eq "$items" ] || fail "$name: the second run made $gen and skipped $skip of $items item(s)"
  [ "$gen" -ge 1 ] || fail "$name: the second run had nothing left to do: the signal came too late to test a resume"

  # Untouched: every PNG of the first run has the same inode and mtime now.
  snapshot "$out" "$glob" "$work/$name.after"
  local missing
  missing="$(comm -23 "$work/$name.before" "$work/$name.after")"
  [ -z "$missing" ] || fail "$name: the second run rewrote PNGs of the first run: $missing"
}

