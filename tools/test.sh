#!/usr/bin/env bash
# The README's second command: set up (quick when done before), configure, build, run every test.
# .ci/run calls exactly this. Arguments go to ctest (e.g. `tools/test.sh -L quick`).
#
# Each phase prints its time as it ends ("test.sh: build 412 s (total 530 s)"), and the 15
# slowest tests follow the run, so that a slow CI shows where its time went and the next
# regression is visible. ctest's own summary is repeated last.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# ccache then hashes paths relative to the checkout, so a fresh clone on the same
# machine (CI) reuses the objects of earlier builds.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"

start=$(date +%s)
last=$start
phase() {
  local now
  now=$(date +%s)
  printf 'test.sh: %-9s %5d s (total %d s)\n' "$1" $((now - last)) $((now - start)) >&2
  last=$now
}

tools/setup.sh
phase setup
cmake --preset default
phase configure
cmake --build --preset default
phase build
log="$root/build/default/ctest-output.log"
set +e
ctest --preset default "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
phase tests

# "  12/700 Test  #35: Name .......   Passed   12.34 sec": the 15 longest. awk reads to the
# end rather than `head` closing the pipe early: under pipefail, sort's SIGPIPE would turn a
# passing run into exit 141 (CI, stop 42).
echo "test.sh: the 15 slowest tests:" >&2
sed -nE 's/^ *[0-9]+\/[0-9]+ +Test +#[0-9]+: ([^ ]+) .* ([0-9]+\.[0-9]+) sec$/\2 \1/p' "$log" |
  sort -rn | awk 'NR <= 15 { printf "  %8.2f s  %s\n", $1, $2 }' >&2
# ctest's verdict, last, where a reader (or CI) looks for it.
grep -E '^[0-9]+% tests passed|^Total Test time' "$log" || true
exit "$status"
