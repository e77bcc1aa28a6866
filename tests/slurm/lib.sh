# shellcheck shell=bash
# Sourced by the tests in tests/slurm/ (ctest sets the variables; tests/CMakeLists.txt).
#
#   DPINFER_SLURM_CLUSTER  the local cluster's directory (local_cluster.sh start DIR)
#   DPINFER_SLURM_WORK     a directory for the tests' files
#   DPINFER_BIN            the dpinfer launcher (dpinfer-worker lies next to it)
#   DPINFER_TEST_WORKER    the fake-pipeline worker (DPINFER_FAKE_DELAY_MS slows it down)
#   DPINFER_TINY_MODEL     tests/data/pipelines/tiny-sd1
#   DPINFER_SLURM_CHECK    dpinfer_slurm_check (slurm_check.cpp): reads the outputs back
#
# A test fails loudly, with its jobs' logs and the daemons' logs; it never skips.
set -euo pipefail

slurm_tests_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${DPINFER_SLURM_CLUSTER:?set by ctest}" "${DPINFER_SLURM_WORK:?set by ctest}" "${DPINFER_BIN:?set by ctest}"
: "${DPINFER_SLURM_CHECK:?set by ctest}"
export SLURM_CONF="$DPINFER_SLURM_CLUSTER/slurm.conf"
# Several workers share two cores: one thread each.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

test_name="$(basename "$0" .sh)"
work="$DPINFER_SLURM_WORK/$test_name"
rm -rf "$work"
mkdir -p "$work"
submitted=()

say() { printf '[%s %s] %s\n' "$test_name" "$(date +%T)" "$*" >&2; }

dump_logs() {
  local f
  for f in "$work"/*.log; do
    [ -f "$f" ] || continue
    echo "----- $f (last 40 lines)" >&2
    tail -n 40 "$f" >&2
  done
  local jobs
  jobs="$(all_jobs | tr '\n' ' ')"
  if [ -n "$jobs" ]; then
    echo "----- scontrol show job $jobs" >&2
    for j in $jobs; do scontrol show job "$j" 2>&1 | grep -E 'JobId|JobState|Restarts|ExitCode|Reason' >&2 || true; done
  fi
  "$slurm_tests_dir/local_cluster.sh" logs "$DPINFER_SLURM_CLUSTER" 2>&1 | tail -n 60 >&2 || true
}

fail() {
  echo "[$test_name] FAIL: $*" >&2
  dump_logs
  exit 1
}

cleanup_jobs() {
  local j
  for j in $(all_jobs); do scancel "$j" >/dev/null 2>&1 || true; done
}
trap cleanup_jobs EXIT

# The cluster must be up (the slurm_cluster fixture starts it).
sinfo -h >/dev/null 2>&1 || fail "the local SLURM cluster in $DPINFER_SLURM_CLUSTER does not answer (sinfo)"

# `sbatch --parsable ARGS...`: prints the job id and remembers it for the cleanup.
submit() {
  local out
  out="$(sbatch --parsable "$@" 2>"$work/sbatch.err")" || fail "sbatch $* failed: $(cat "$work/sbatch.err")"
  out="${out%%;*}"
  submitted+=("$out")
  # Also on file: `job="$(submit ...)"` runs in a subshell, which cannot extend the array.
  echo "$out" >>"$work/.jobs"
  echo "$out"
}

all_jobs() {  # every job this test submitted, once each
  { printf '%s\n' "${submitted[@]}"; cat "$work/.jobs" 2>/dev/null; } | grep . | sort -u
}

job_field() {  # JOBID FIELD: e.g. JobState, Restarts (of the first record)
  scontrol show job -o "$1" 2>/dev/null | head -n1 | tr ' ' '\n' | sed -n "s/^$2=//p"
}

# wait_until TIMEOUT_S WHAT COMMAND...: polls COMMAND every 0.2 s.
wait_until() {
  local timeout="$1" what="$2"
  shift 2
  local deadline=$((SECONDS + timeout))
  until "$@"; do
    [ $SECONDS -lt $deadline ] || fail "timed out after ${timeout}s waiting for $what"
    sleep 0.2
  done
}

# wait_job_end JOBID TIMEOUT_S: waits for a terminal state, prints it.
wait_job_end() {
  local job="$1" timeout="$2" state deadline=$((SECONDS + $2))
  while :; do
    state="$(job_field "$job" JobState)"
    case "$state" in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED)
        echo "$state"
        return 0
        ;;
    esac
    [ $SECONDS -lt $deadline ] || fail "job $job still $state after ${timeout}s"
    sleep 0.3
  done
}

manifest_lines() {  # FILE: complete lines so far (0 when absent)
  if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi
}

write_prompts() {  # FILE N
  local i
  : >"$1"
  for ((i = 0; i < $2; i++)); do echo "a small red cube number $i on a table" >>"$1"; done
}

# check_outputs OUT --items N [...]: every item made exactly once (slurm_check.cpp).
check_outputs() { "$DPINFER_SLURM_CHECK" outputs "$@" || fail "slurm_check outputs $*"; }
# check_json FILE /pointer=VALUE...: fields of run.json (slurm_check.cpp).
check_json() { "$DPINFER_SLURM_CHECK" json "$@" || fail "slurm_check json $*: $(cat "$1")"; }
