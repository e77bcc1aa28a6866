#!/usr/bin/env bash
# The README's second command: set up (quick when done before), build, run every test.
# .ci/run calls exactly this.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tools/setup.sh
cmake --workflow --preset default
