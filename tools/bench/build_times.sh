#!/usr/bin/env bash
# How long a newcomer and CI wait (issue 25): a fresh clone's quickstart, a cold full build and the
# whole test suite, each from a fresh clone of REV with an empty ccache (pip's cache is used as it
# is: warm after the first setup). Run it on an idle machine: the figures are wall-clock times.
#
#   tools/bench/build_times.sh [REV] [quickstart] [build] [suite]     (default: HEAD, all three)
#
#   quickstart  `tools/quickstart.sh` in a fresh clone: set-up (a new .venv from pip's cache),
#               configure, the two binaries, the demo launch
#   build       `cmake --preset default && cmake --build --preset default` in another fresh clone
#   suite       `ctest --preset default` on that build (needs `build` in the same call)
# Prints one line per phase and a summary naming the machine; the clones are removed at the end.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rev="HEAD"
if [ $# -gt 0 ] && [[ "$1" != quickstart && "$1" != build && "$1" != suite ]]; then rev="$1"; shift; fi
what=" ${*:-quickstart build suite} "
work="$(mktemp -d /tmp/dpinfer-build-times.XXXXXX)"
trap 'rm -rf "$work"' EXIT
commit="$(git -C "$root" rev-parse --short "$rev")"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
results=()

clone() {  # DIR: a fresh clone of REV with its own empty ccache
  git clone -q --no-hardlinks "$root" "$1"
  git -C "$1" checkout -q "$commit"
  mkdir -p "$1.ccache"
}

timed() {  # NAME CMD...: runs CMD, records its wall-clock seconds and the CPU seconds (user + system) of
  # everything it ran: the CPU figure moves far less than the wall clock when something else shares the machine
  local name=$1 t0 cpu_file
  shift
  cpu_file="$(mktemp)"
  t0=$(date +%s.%N)
  /usr/bin/time -f '%U %S' -o "$cpu_file" "$@"
  local s cpu
  s=$(echo "$(date +%s.%N) - $t0" | bc)
  cpu=$(awk 'END { print $1 + $2 }' "$cpu_file")
  rm -f "$cpu_file"
  results+=("$(printf '%-11s %8.0f s wall %8.0f s CPU' "$name" "$s" "$cpu")")
  echo "build_times: $name $(printf '%.0f' "$s") s wall, $(printf '%.0f' "$cpu") s CPU" >&2
}

if [[ "$what" == *" quickstart "* ]]; then
  clone "$work/qs"
  (cd "$work/qs" && CCACHE_DIR="$work/qs.ccache" CCACHE_BASEDIR="$work/qs" timed quickstart tools/quickstart.sh \
    >"$work/qs.log" 2>&1) || { tail -n 30 "$work/qs.log" >&2; exit 1; }
  grep '^build_times:' "$work/qs.log" >&2 || true
  results+=("$(grep -h '^build_times: quickstart' "$work/qs.log" | sed 's/^build_times: //')")
fi
if [[ "$what" == *" build "* || "$what" == *" suite "* ]]; then
  clone "$work/full"
  cd "$work/full"
  export CCACHE_DIR="$work/full.ccache" CCACHE_BASEDIR="$work/full"
  tools/setup.sh >"$work/setup.log" 2>&1
  timed configure cmake --preset default >"$work/configure.log" 2>&1
  timed build cmake --build --preset default >"$work/build.log" 2>&1 || { tail -n 30 "$work/build.log" >&2; exit 1; }
  if [[ "$what" == *" suite "* ]]; then
    timed suite ctest --preset default >"$work/suite.log" 2>&1 || { tail -n 40 "$work/suite.log" >&2; exit 1; }
    grep -E '^[0-9]+% tests passed' "$work/suite.log" >&2
  fi
fi
echo "build_times at $commit on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')),"\
  "$(free -g | awk '/Mem:/{print $2}') GiB, ccache empty, pip cache as it was:"
for r in "${results[@]}"; do echo "  $r"; done
echo "  load average (1, 5, 15 min) before: $load_before; after: $(cut -d' ' -f1-3 /proc/loadavg)"
