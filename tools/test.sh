#!/usr/bin/env bash
# The README's second command: set up (quick when done before), build, run every test.
# .ci/run calls exactly this.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# ccache then hashes paths relative to the checkout, so a fresh clone on the same
# machine (CI) reuses the objects of earlier builds.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
tools/setup.sh
cmake --workflow --preset default
