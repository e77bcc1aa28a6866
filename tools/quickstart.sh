#!/usr/bin/env bash
# The README's first command: set up, build, and run the main job:
# `dpinfer launch --nproc-per-node 2` over configs/prompts/demo.txt, on the CPU.
#
# With no --model the workers use the default model, the folder
# models/dpinfer-shapes-64 (a 9 MB Stable Diffusion 1.x pipeline in miniature,
# trained by tools/train/ to draw coloured shapes at 64x64; installed beside the
# binaries as share/dpinfer/models): eight captions in a couple of seconds, written
# to outputs/demo. Extra arguments go to the launch, e.g. --model DIR|org/name for
# a diffusers model from disk or your Hugging Face cache.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# ccache then hashes paths relative to the checkout, so a fresh clone on the same
# machine (CI) reuses the objects of earlier builds.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
DPINFER_SKIP_READERS=1 tools/setup.sh  # no test runs here, so no Python readers
cmake --preset default
cmake --build --preset quickstart  # the two binaries only: no tests, no fuzzers
set -x
build/default/tools/dpinfer launch --nproc-per-node 2 configs/prompts/demo.txt --out outputs/demo "$@"
{ set +x; } 2>/dev/null
echo "quickstart: the binaries are build/default/tools/dpinfer and dpinfer-worker; to type plain 'dpinfer', install" \
  "them: cmake --install build/default --prefix ~/.local (README, first lines)" >&2
